"""Sharding over machines: ``--llmgate-shard K/N`` runs the K-th of N disjoint shares of the selected
tests, so that a CI system's own job matrix (``strategy.matrix`` over self-hosted runners) spreads a
gate over N machines, each a whole job.

The unit is the one pytest-xdist keeps on one worker (``distribution.entry_scheduling``): a matrix
entry with its reference chain (an entry is compared with figures its reference measured in the same
session), with all its boots.  Units are spread by longest-processing-time-first over the shares,
weighted by their selected tests (a test per boot), or by their entries' wall seconds in a recorded run
where ``--llmgate-shard-durations DIR`` names a run history that times every selected entry (a folder
every job sees alike: committed, or an artifact of an earlier run; a job's own history differs from
another's and would split differently); ties go by the unit's name, so every job works out the same
split from the same selection and durations.  Tests of no matrix entry (plain tests beside the scenarios)
run in share 1.  ``llmgate merge`` makes one report of the shares' reports, naming
any that is missing.

Registered as a plugin of the session by ``llmgate.plugin`` when the option is given."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pytest

from llmgate.runner.distribution import reference_groups
from llmgate.store import benchmark_files

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclasses.dataclass(frozen=True)
class Shard:
    """Share ``index`` (1-based) of ``of``."""
    index: int
    of: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        m = _SPEC.match(text or "")
        if not m:
            raise ValueError(f"--llmgate-shard {text!r}: give K/N, e.g. 2/4 (the second of four shares)")
        k, n = int(m.group(1)), int(m.group(2))
        if n < 1 or not 1 <= k <= n:
            raise ValueError(f"--llmgate-shard {text!r}: K/N needs 1 ≤ K ≤ N, e.g. 1/{max(n, 2)}")
        return cls(k, n)

    def __str__(self) -> str:
        return f"{self.index}/{self.of}"


def units(references: dict[str, str | None]) -> dict[str, list[str]]:
    """Reference chains: the first entry of each chain → its entries, in the order given."""
    out: dict[str, list[str]] = {}
    for cid, root in reference_groups(references).items():
        out.setdefault(root, []).append(cid)
    return out


def assign(weights: dict[str, float], n: int) -> dict[str, int]:
    """Each unit → its share (1…n): longest first onto the least loaded share (the lowest-numbered
    of equals), ties between units by name.  Deterministic; every unit in exactly one share."""
    load = [0.0] * n
    out = {}
    for unit in sorted(weights, key=lambda u: (-weights[u], u)):
        k = min(range(n), key=lambda i: (load[i], i))
        out[unit] = k + 1
        load[k] += weights[unit]
    return out


def split(item_entries: list[str | None], references: dict[str, str | None], shard: Shard,
          seconds: dict[str, float] | None = None) -> list[bool]:
    """For each selected test (its matrix entry, None for a test of none): whether it runs in ``shard``.
    A unit weighs its selected tests or, where ``seconds`` (each entry's wall seconds in a recorded run)
    times every selected entry, its entries' recorded seconds (whole: what share of an entry's time
    the selected tests take is not known)."""
    root, secs = reference_groups(references), seconds or {}
    selected = {cid for cid in item_entries if cid is not None}
    timed = bool(secs) and all(cid in secs for cid in selected)
    weights: dict[str, float] = {}
    for cid in item_entries:
        if cid is not None:
            weights[root.get(cid, cid)] = weights.get(root.get(cid, cid), 0.0) + (0.0 if timed else 1.0)
    if timed:
        for cid in selected:
            weights[root.get(cid, cid)] += float(secs[cid])
    where = assign(weights, shard.of)
    return [shard.index == 1 if cid is None else where[root.get(cid, cid)] == shard.index for cid in item_entries]


class ShardPlugin:
    """Keeps this share's tests (after -k and -m have selected), and records which entries it ran."""

    def __init__(self, shard: Shard, references: Callable[[], dict[str, str | None]],
                 seconds: dict[str, float] | None = None):
        self.shard, self.references = shard, references      # the matrix's, read once it is loaded
        self.seconds = seconds or {}                           # --llmgate-shard-durations: entries' recorded seconds
        self.entries: list[str] = []
        self.before = self.selected = 0

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # a shard's baseline is saved as NAME-shK: a comparison with run NNNN (or a bare one) takes
        # every shard's file of NAME, so a baseline saved in shards compares as one saved whole
        benchmark_files.suffix_saves(session.config, f"sh{self.shard.index}")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        ids = [_entry_of(i) for i in items]
        self.before = len(items)
        keep = split(ids, self.references(), self.shard, self.seconds)
        kept = [i for i, k in zip(items, keep) if k]
        dropped = [i for i, k in zip(items, keep) if not k]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        self.entries = sorted({cid for cid, k in zip(ids, keep) if k and cid is not None})
        self.selected = len(kept)

    @pytest.hookimpl(tryfirst=True)          # before the session's report is written with the exit status
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # a share the split left empty (more shares than units) has done its part: not pytest's
        # "no tests collected" failure, as long as the selection before the split was not empty
        if self.selected == 0 and self.before and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK

    def info(self) -> dict[str, object]:
        return {"index": self.shard.index, "of": self.shard.of, "entries": list(self.entries)}


def _entry_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    cfg = callspec.params.get("llmgate_config") if callspec else None
    return None if cfg is None else cfg.id
