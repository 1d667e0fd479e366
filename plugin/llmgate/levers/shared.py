"""Figures shared between the entries of one session: what a lever scenario measured on an entry
(for the entries that take it as their ``reference``), figures an entry works out once and reuses
on its later boots, and the engine-vs-reference ratio (an entry's aggregate tok/s ÷ its reference
engine's, measured earlier in the session).  ``SharedFigures`` is the session's store;
``EntryLevers`` is one test's view of it (``gate.levers``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from llmgate.analysis.stats import median
from llmgate.analysis.verdict import Verdict
from llmgate.config import matrix as matrix_mod
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.core import metrics


class SharedFigures:
    """The session's figures by (lever, entry id); ``("memo", id)`` holds an entry's memo and
    ``("engines", metric name, id)`` its values of that figure by variant and boot (the engine ratios)."""

    def __init__(self) -> None:
        self.by_entry: dict[tuple[str, ...], dict[Any, Any]] = {}
        self._locks: dict[tuple[str, ...], threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, key: tuple[str, ...]) -> threading.Lock:
        """One lock per figure worked out once (a duet's two sides may ask for it at the same time)."""
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


class EntryLevers:
    """One test's view of the shared figures: its entry (None outside the matrix), the session's
    matrix, and, for the engine ratio, how to record a metric and a note (the test's own)."""

    def __init__(self, figures: SharedFigures, entry: ServerConfig | None, matrix: Callable[[], Matrix],
                 record: Callable[..., Verdict | None], note: Callable[[str], None], boot: int | None = None,
                 waiting: Callable[[], AbstractContextManager[Any]] | None = None):
        self._figures, self._entry, self._matrix = figures, entry, matrix
        self._record, self._note, self._boot = record, note, boot
        # a duet's side: what it holds while it waits for a figure the other side is working out
        self._waiting = waiting or contextlib.nullcontext

    def _cfg(self) -> ServerConfig:
        if self._entry is None:
            raise RuntimeError("not a scenario of the matrix: mark it @llmgate.scenario() (or take the "
                               "llmgate_config fixture) so that it runs once per matrix entry")
        return self._entry

    def require(self, lever: str) -> ServerConfig:
        """This test's matrix entry, which must take part in ``lever`` (tests carry
        ``@pytest.mark.lever(name)``, so other entries were skipped before booting)."""
        cfg = self._entry
        if cfg is None or lever not in cfg.levers:
            raise RuntimeError(f"require_lever({lever!r}): the test needs @pytest.mark.lever({lever!r}) and a matrix "
                               f"entry that lists it")
        return cfg

    def remember(self, lever: str, figures: dict[str, Any]) -> None:
        """Keep this entry's ``figures`` for ``lever``, for the entries that take it as their reference:
        the latest boot's (``reference``) and each boot's (``reference_boots``)."""
        self._figures.by_entry[(lever, self._cfg().id)] = figures
        self._figures.by_entry.setdefault(("boots:" + lever, self._cfg().id), {})[self._boot or 1] = figures

    def reference(self, lever: str) -> tuple[ServerConfig | None, dict[str, Any] | None]:
        """The reference entry of this test's entry and its figures for ``lever`` in this session."""
        cfg = self._entry
        if cfg is None or cfg.reference is None:
            return None, None
        ref = self._matrix().by_id(cfg.reference)
        return ref, self._figures.by_entry.get((lever, ref.id))

    def reference_boots(self, lever: str) -> dict[int, dict[str, Any]]:
        """The figures for ``lever`` of each boot of this entry's reference in this session, by boot
        (empty where there is no reference or it was not measured)."""
        cfg = self._entry
        if cfg is None or cfg.reference is None:
            return {}
        return dict(self._figures.by_entry.get(("boots:" + lever, self._matrix().by_id(cfg.reference).id), {}))

    def memo(self, name: str, compute: Callable[[], Any]) -> Any:
        """A figure of this entry worked out once a session and reused by its later boots (in A/B mode:
        on side A's first boot, so that both sides get the same, e.g. the arrival rates of a latency
        scenario): ``compute()`` the first time ``name`` is asked for, the same value after."""
        memo = self._figures.by_entry.setdefault(("memo", self._cfg().id), {})
        lock = self._figures.lock(("memo", self._cfg().id, name))
        if not lock.acquire(blocking=False):        # a duet's other side is working it out
            with self._waiting():
                lock.acquire()
        try:
            if name not in memo:
                memo[name] = compute()
            return memo[name]
        finally:
            lock.release()

    def paired_base(self, reference_boot_medians: dict[int, float]) -> tuple[float, int | None]:
        """What this boot's figure is divided by, given the reference's median by boot in this session:
        the reference's boot of the same number when it has one (boot k ÷ boot k: each ratio then
        carries both entries' boot-to-boot noise, and a shift shared by a session's k-th boots, such
        as the first boot's cold compile, cancels), else the median over its boots.  Returns the base
        and the reference boot it came from (None: the median over all).

        Dividing every boot by one median over the reference's boots would treat the reference's
        noise as none: on an H200 A/A (SGLang ÷ vLLM, TTFT p95 at c=8, two sessions of 3 + 3 boots)
        that ratio moved +12% with a between-boot CV of 2.7%, a false alarm at p = 0.003, because
        vLLM's three boots shared one 15% lower median in the second session; paired by boot the
        same data give a between-boot CV of 9.6% and no alarm."""
        boot = self._boot or 1
        if boot in reference_boot_medians:
            return reference_boot_medians[boot], boot
        return median(list(reference_boot_medians.values())), None

    def versus_reference_engine(self, values: list[float], variant: str,
                                metric: metrics.Metric = metrics.ENGINE_RATIO) -> Verdict | None:
        """The seed's engine comparison as a same-session ratio: this boot's ``values`` of one figure
        (``metric`` says which: aggregate tok/s by default, ``metrics.ENGINE_TTFT_P95_RATIO`` for TTFT
        p95) at ``variant`` (c8) ÷ the reference's of the same boot number (``paired_base``), where the
        reference is another engine measured earlier in this session (same model and budget: the
        matrix says so).  Every entry's values are kept for the entries that take it as their reference."""
        cfg = self._entry
        if cfg is None:
            return None
        kept = self._figures.by_entry.setdefault(("engines", metric.name, cfg.id), {}).setdefault(variant, {})
        kept[self._boot or 1] = [float(v) for v in values]
        if cfg.reference is None:
            return None
        ref = self._matrix().by_id(cfg.reference)
        if ref.engine == cfg.engine:
            return None
        theirs = self._figures.by_entry.get(("engines", metric.name, ref.id), {}).get(variant)
        if not theirs:
            self._note(f"{metric.label.split(' ÷ ')[0]} @{variant} ÷ {ref.id}'s ({ref.engine}): not measured, as "
                       f"{ref.id} was not measured at {variant} earlier in this session")
            return None
        medians = {b: median(v) for b, v in sorted(theirs.items())}
        base, ref_boot = self.paired_base(medians)
        return self._record(metric, [v / base for v in values], variant, reference=ref.id,
                            reference_engine=ref.engine, reference_boot_medians=list(medians.values()),
                            reference_boot=ref_boot)

    def acceptance_meaningful(self) -> str | None:
        """None when this entry's speculative acceptance is a figure to record and compare (a
        context draft such as n-gram, or a trained draft on trained weights); else why not."""
        return matrix_mod.spec_acceptance_meaningful(self._cfg(), self._matrix().models)

    def acceptance_caveat(self) -> str | None:
        """What this entry's (meaningful) speculative acceptance still does not say, e.g. that n-gram
        acceptance on random weights is an upper bound; None when nothing."""
        return matrix_mod.spec_acceptance_caveat(self._cfg(), self._matrix().models)
