"""The run's settings: what the command line (``--llmgate-*``) asks of every scenario."""

from __future__ import annotations

import dataclasses
import re

import pytest

from llmgate.core import metrics
from llmgate.analysis.verdict import DEFAULT_ALPHA
from llmgate.report.outcome import parse_accept


@dataclasses.dataclass(frozen=True)
class Settings:
    repeats: int = 5
    warmup: int = 1
    boots: int | None = None
    concurrency: int = 8
    request_timeout: float = 300.0
    alpha: float = DEFAULT_ALPHA
    min_effect: dict[str, float] = dataclasses.field(default_factory=dict)
    # METRIC=FRACTION:ABS: the change in the metric's own unit a regression must exceed as well
    min_abs_effect: dict[str, float] = dataclasses.field(default_factory=dict)
    allow_mismatch: bool = False
    confirm: bool = True
    ab: tuple[tuple[str, str], ...] = ()
    ab_mode: str = "duet"             # how A/B mode compares: "duet" (both resident) or "alternate" (boots)
    determinism: str = "fail"
    hypothesis_examples: int = 20
    # what a comparison may leave undecided without failing the run: "no-baseline", "inconclusive"
    accept: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        d = cls()
        min_effect, min_abs_effect = {}, {}
        for item in config.getoption("llmgate_min_effect") or []:
            name, sep, value = item.partition("=")
            fraction, colon, floor = value.partition(":")
            try:
                metrics.get(name)
                min_effect[name] = float(fraction)
                if colon:
                    min_abs_effect[name] = float(floor)
            except (KeyError, ValueError):
                raise pytest.UsageError(f"--llmgate-min-effect {item!r}: expected METRIC=FRACTION[:ABS] with a known "
                                        f"metric ({', '.join(sorted(metrics.REGISTRY))})") from None
            if not sep:
                raise pytest.UsageError(f"--llmgate-min-effect {item!r}: expected METRIC=FRACTION[:ABS]")
            if min_effect[name] < 0 or min_abs_effect.get(name, 0.0) < 0:
                raise pytest.UsageError(f"--llmgate-min-effect {item!r}: FRACTION and ABS must be >= 0")

        try:
            accept = parse_accept(config.getoption("llmgate_accept", None) or [])
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None

        def opt(name, default):
            v = config.getoption(name)
            return default if v is None else v

        s = cls(repeats=opt("llmgate_repeats", d.repeats), warmup=opt("llmgate_warmup", d.warmup),
                boots=config.getoption("llmgate_boots"),
                concurrency=opt("llmgate_concurrency", d.concurrency),
                request_timeout=opt("llmgate_request_timeout", d.request_timeout),
                alpha=opt("llmgate_alpha", d.alpha), min_effect=min_effect,
                min_abs_effect=min_abs_effect,
                allow_mismatch=bool(config.getoption("llmgate_allow_mismatch")),
                confirm=not config.getoption("llmgate_no_confirm"),
                ab=parse_ab(config.getoption("llmgate_ab") or [], config.getoption("llmgate_pinned")),
                ab_mode=config.getoption("llmgate_ab_mode") or d.ab_mode,
                determinism=config.getoption("llmgate_determinism"),
                hypothesis_examples=config.getoption("llmgate_hypothesis_examples"), accept=accept)
        if s.boots is not None and s.boots < 1:
            raise pytest.UsageError("--llmgate-boots must be >= 1")
        if s.repeats < 1 or s.concurrency < 1 or s.warmup < 0:
            raise pytest.UsageError("--llmgate-repeats and --llmgate-concurrency must be >= 1, --llmgate-warmup >= 0")
        return s


SIDE_NAME = re.compile(r"^[A-Za-z0-9_.+]+$")


# --llmgate-pinned: side A is the pinned engine, side B each entry's own launcher (its `launcher` key, the
# engine's $LLMGATE_*_PYTHON, else this interpreter): an empty launcher means "the entry's own"
PINNED, CURRENT = "pinned", "current"


def parse_ab(items: list[str], pinned: str | None = None) -> tuple[tuple[str, str], ...]:
    """The A/B sides: ``--llmgate-ab NAME=LAUNCHER`` twice, or ``--llmgate-pinned LAUNCHER`` (side "pinned"
    against side "current", the entries' own launchers)."""
    if pinned is not None:
        if items:
            raise pytest.UsageError("--llmgate-pinned and --llmgate-ab name the sides twice: give one of them")
        if not pinned.strip():
            raise pytest.UsageError("--llmgate-pinned: give the pinned engine's interpreter (or binary)")
        return ((PINNED, pinned), (CURRENT, ""))
    sides = []
    for item in items:
        name, sep, launcher = item.partition("=")
        if not sep or not name or not launcher:
            raise pytest.UsageError(f"--llmgate-ab {item!r}: expected NAME=LAUNCHER (an interpreter or a binary)")
        if not SIDE_NAME.match(name):
            raise pytest.UsageError(f"--llmgate-ab {item!r}: a side's name is letters, digits and _ . + (it is "
                                    f"part of test ids)")
        sides.append((name, launcher))
    if sides and len(sides) != 2:
        raise pytest.UsageError(f"--llmgate-ab: give exactly two sides (baseline first, candidate second), got {len(sides)}")
    if len({n for n, _ in sides}) != len(sides):
        raise pytest.UsageError("--llmgate-ab: the two sides need different names")
    return tuple(sides)
