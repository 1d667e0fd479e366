"""What a comparison judges: one recorded figure (``Figure``: its metric, this boot's values, their
sampling part, the parts it splits into) and, on an entry of K measurement boots, what each boot
measured (``BootFigures``), kept until the last boot judges them together (``kept_boots``)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from llmgate.analysis.stats import median
from llmgate.analysis.verdict import Verdict
from llmgate.config.matrix import ServerConfig
from llmgate.core import metrics
from llmgate.runner.boots import MeasurementBoot

if TYPE_CHECKING:
    from llmgate.runner.recorder import Recorder

Slot = tuple[str, str, str]       # (entry, test, metric key): one figure of one test of one entry


@dataclasses.dataclass(frozen=True)
class BootFigures:
    """What one measurement boot (``--llmgate-boots K``) measured of one figure: its repeat values,
    their raw samples (``gate.record(raw=)``), and the boot value's sampling variance (log scale)
    over its requests, where it is one statistic over them."""

    values: list[float]
    raw: Any = None
    sampling: float | None = None
    requests: float | None = None
    disturbed: str = ""


@dataclasses.dataclass(frozen=True)
class Figure:
    """One ``gate.record`` call: ``metric`` (``key``: its name and variant) of ``test`` on entry ``cfg``
    (None outside the matrix), measured on ``boot`` (None where the test is not one of an entry's
    measurement boots); ``parts``: the verdicts of the parts it splits into; ``info``: what is stored
    beside it; ``disturbed``: why it may read slower than the engine is (a busy machine:
    ``Gate.watch``), "" where nothing says so."""

    metric: metrics.Metric
    key: str
    cfg: ServerConfig | None
    test: str
    boot: MeasurementBoot | None
    values: list[float]
    raw: dict[str, Any] | None = None
    sampling: float | None = None
    requests: int | None = None
    parts: dict[str, Verdict] | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    disturbed: str = ""

    @property
    def slot(self) -> Slot:
        return (self.cfg.id if self.cfg is not None else "", self.test, self.key)


@dataclasses.dataclass(frozen=True)
class Boots:
    """A figure's boots as they are judged: each boot's repeat values, in boot order; per boot its
    sampling variance and request count; the raw samples (per boot, where an entry has several)."""

    values: list[list[float]]
    sampling: dict[int, tuple[float | None, float | None]]
    raw: Any = None
    disturbed: dict[int, str] = dataclasses.field(default_factory=dict)    # boot → why it may read slow

    def by_boot(self) -> dict[int, list[float]]:
        """Each boot's repeat values by its number (1-based, as measured)."""
        return dict(zip(sorted(self.sampling), self.values))

    def of(self, boots: list[int]) -> tuple[list[float | None], list[float]]:
        """Those boots' sampling variances, and the request counts of those that recorded one."""
        return [self.sampling[k][0] for k in boots], [float(r) for k in boots if (r := self.sampling[k][1])]

    def disturbed_text(self, boots: list[int] | None = None) -> str:
        """Why those boots (default: all) may read slower than their engine, in one line ("" where none may)."""
        ks = [k for k in (sorted(self.sampling) if boots is None else boots) if self.disturbed.get(k)]
        if len(self.sampling) == 1:
            return self.disturbed.get(ks[0], "") if ks else ""
        return "; ".join(f"boot {k}: {self.disturbed[k]}" for k in ks)


def kept_boots(rec: Recorder, fig: Figure) -> Boots | None:
    """``fig`` as its comparison judges it: alone (a test outside an entry's measurement boots), or on
    an entry of K measurement boots, kept until the last, which gets all K (None before it, after
    saying what this boot measured)."""
    mb, cfg = fig.boot, fig.cfg
    if mb is None or cfg is None:
        return Boots([fig.values], {1: (fig.sampling, fig.requests)}, fig.raw, {1: fig.disturbed})
    k, n_boots = int(mb), mb.of
    done = rec.run.boot_figures.setdefault(fig.slot, {})
    done[k] = BootFigures(fig.values, fig.raw, fig.sampling, fig.requests, fig.disturbed)
    if k < n_boots:
        side = mb.side
        rec.run.say(f"llmgate: {cfg.id} {fig.key}: boot {k} of {n_boots}"
                    + (f" (side {side[0]}, its boot {side[2]})" if side else "")
                    + f": {fig.metric.display(median(fig.values))} (median of {len(fig.values)}"
                    + (f" values; sampling error {math.sqrt(fig.sampling):.2%} over {fig.requests} requests"
                       if fig.sampling is not None and fig.requests else "")
                    + f"); judged after boot {n_boots}")
        return None
    raw = {"boots": [done[i].raw for i in sorted(done)]} if any(f.raw is not None for f in done.values()) else fig.raw
    return Boots([done[i].values for i in sorted(done)], {i: (f.sampling, f.requests) for i, f in done.items()}, raw,
                 {i: f.disturbed for i, f in done.items()})
