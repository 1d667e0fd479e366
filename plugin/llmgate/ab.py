"""A/B mode: two engine environments (the pinned release and the candidate nightly: two
interpreters / venvs, or two binaries) booted alternately in the same job — A B A B … —
each boot measured with the same workload, then B judged against A.  No stored baseline
and no machine drift between a baseline's day and today is involved.

The statistical unit is the boot: each side's value of a metric is the median of its
repeats within one boot, and B's boot medians are compared with A's (Mann–Whitney U plus
the metric's minimum effect).  Boot-to-boot variation (a fresh server of the same
configuration was seen 28% lower on a GPU) is therefore part of the noise the verdict
allows for, instead of being mistaken for a difference between A and B.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from . import metrics, stats
from .load import PromptMaker, decode_run, fixed_requests, run
from .matrix import Matrix, ServerConfig
from .server import Server, ServerHandle
from .verdict import Verdict, judge, judge_paired

Workload = Callable[[ServerHandle, PromptMaker], dict[str, list[float]]]


Wrap = Callable[[ServerHandle], tuple[ServerHandle, Callable[[], None]]]


@dataclasses.dataclass
class Side:
    name: str
    launcher: str | None = None                               # interpreter or binary; None: the default
    # further views measured on the same boots, each behind a wrapper (a self-test's delay proxy):
    # name → function(handle) -> (handle to measure, close)
    views: dict[str, Wrap] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ABResult:
    config_id: str
    boots: dict[str, list[dict[str, list[float]]]]            # side → per boot: metric key → repeat values
    order: list[str]
    versions: dict[str, list[str | None]]

    def boot_medians(self, side: str, key: str) -> list[float]:
        return [stats.median(b[key]) for b in self.boots[side] if b.get(key)]


def standard_workload(repeats: int, warmup: int, timeout: float, concurrency: int, decode_prompt: int = 64,
                      decode_output: int = 128, conc_prompt: int = 128, conc_output: int = 64) -> Workload:
    """Decode speed and TTFT at c=1, aggregate tok/s and TTFT p95 at c=N: per-repeat values."""
    def workload(h: ServerHandle, prompts: PromptMaker) -> dict[str, list[float]]:
        dec = decode_run(h, prompts, decode_prompt, decode_output, repeats, warmup, timeout, "ab-decode")
        if dec.failures:
            raise RuntimeError(f"{h.config.id}: {len(dec.failures)} request(s) failed: {dec.failures[0].error}")
        out = {"decode_tok_s": [s.decode_tok_s for s in dec.ok], "ttft_c1": [s.ttft for s in dec.ok]}
        waves = []
        for r in range(repeats):
            res = run(h, fixed_requests(h, prompts, 2 * concurrency, conc_prompt, conc_output, f"ab-c-{r}"),
                      concurrency, timeout)
            if res.failures:
                raise RuntimeError(f"{h.config.id}: {len(res.failures)} request(s) failed: {res.failures[0].error}")
            waves.append(stats.load_metrics(res))
        out[f"aggregate_tok_s@c{concurrency}"] = [w["aggregate_tok_s"] for w in waves]
        out[f"ttft_p95@c{concurrency}"] = [w["ttft_p95"] for w in waves]
        return out
    return workload


def run_ab(cfg: ServerConfig, matrix: Matrix, log_dir: Path, sides: tuple[Side, Side], rounds: int,
           workload: Workload, progress=None, say: Callable[[str], None] | None = None) -> ABResult:
    """Boot A and B alternately ``rounds`` times each and measure every boot with ``workload``."""
    names = [s.name for s in sides] + [v for s in sides for v in s.views]
    result = ABResult(cfg.id, {n: [] for n in names}, [], {n: [] for n in names})
    prompts = PromptMaker(matrix.tokenizer_folder(cfg))
    boot = 0
    for r in range(rounds):
        for side in sides:
            boot += 1
            side_cfg = dataclasses.replace(cfg, launcher=side.launcher or cfg.launcher)
            server = Server(side_cfg, matrix, Path(log_dir) / f"ab-{side.name}", boot_number=boot, progress=progress)
            if say:
                say(f"llmgate: A/B {cfg.id}: round {r + 1}/{rounds}, side {side.name} (boot {boot})")
            handle = server.start()
            try:
                result.boots[side.name].append(workload(handle, prompts))
                result.versions[side.name].append(handle.engine_info.version)
                result.order.append(side.name)
                for view, wrap in side.views.items():
                    target, close = wrap(handle)
                    try:
                        result.boots[view].append(workload(target, prompts))
                        result.versions[view].append(handle.engine_info.version)
                    finally:
                        close()
            finally:
                server.stop()
    return result


def judge_ab(result: ABResult, baseline: str, candidate: str, alpha: float,
             min_effect: Callable[[metrics.Metric, str], float], paired: bool = False) -> list[Verdict]:
    """One verdict per metric key: the candidate's boot medians against the baseline side's
    (Mann–Whitney U), or ``paired`` round by round (Wilcoxon signed-rank on the ratios: a view
    measured on the same boots as its side, or drift shared by the two boots of a round)."""
    out = []
    for key in result.boots[candidate][0]:
        metric = metrics.get(key)
        a, b = result.boot_medians(baseline, key), result.boot_medians(candidate, key)
        how = judge_paired if paired else judge
        v = how(metric, key, result.config_id, b, a, min_effect(metric, key), alpha,
                f"side {baseline} of this A/B run")
        out.append(dataclasses.replace(v, note=f"{len(a)} boots of {baseline} vs {len(b)} of {candidate}"
                                               f"{', paired by round' if paired else ''}, order {''.join(result.order)}"))
    return out
