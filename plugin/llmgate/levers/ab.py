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

from llmgate.core import metrics
from llmgate.analysis import stats
from llmgate.load.workloads import PromptMaker, decode_run, fixed_requests, run
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.process.server import Server, ServerHandle
from llmgate.analysis.verdict import Verdict, judge, judge_paired

# handles to measure (a boot's direct handle, then its views) → per handle: metric key → repeat values
Workload = Callable[[list[ServerHandle], PromptMaker], list[dict[str, list[float]]]]


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

    def repeat_values(self, side: str, key: str) -> list[float]:
        return [v for b in self.boots[side] for v in b.get(key, [])]


def standard_workload(repeats: int, warmup: int, timeout: float, concurrency: int, decode_prompt: int = 64,
                      decode_output: int = 128, conc_prompt: int = 128, conc_output: int = 64) -> Workload:
    """Decode speed and TTFT at c=1, aggregate tok/s and TTFT p95 at c=N: per-repeat values.

    Several handles (one boot seen directly and through its views) are measured interleaved,
    repeat by repeat, in alternating order, each with prompts of its own (a shared prompt would
    be served from the prefix cache the second time): drift within the boot (another process
    waking on a 2-core machine) then falls on all of them alike instead of on whichever was
    measured last.  In CI, measuring the views one after the other let one of five paired
    rounds come out reversed (decode −17% in the median, p = 0.0625)."""
    conc_keys = (f"aggregate_tok_s@c{concurrency}", f"ttft_p95@c{concurrency}")

    def workload(handles: list[ServerHandle], prompts: PromptMaker) -> list[dict[str, list[float]]]:
        outs: list[dict[str, list[float]]] = [{k: [] for k in ("decode_tok_s", "ttft_c1", *conc_keys)}
                                              for _ in handles]
        for r in range(repeats):
            turn = list(enumerate(handles))
            for i, h in (turn if r % 2 == 0 else turn[::-1]):
                dec = decode_run(h, prompts, decode_prompt, decode_output, 1, warmup if r == 0 else 0, timeout,
                                 f"ab{i}-decode-{r}")
                if dec.failures:
                    raise RuntimeError(f"{h.config.id}: {len(dec.failures)} request(s) failed: {dec.failures[0].error}")
                res = run(h, fixed_requests(h, prompts, 2 * concurrency, conc_prompt, conc_output, f"ab{i}-c-{r}"),
                          concurrency, timeout)
                if res.failures:
                    raise RuntimeError(f"{h.config.id}: {len(res.failures)} request(s) failed: {res.failures[0].error}")
                wave = stats.load_metrics(res)
                out = outs[i]
                out["decode_tok_s"] += [s.decode_tok_s for s in dec.ok if s.decode_tok_s is not None]
                out["ttft_c1"] += [s.ttft for s in dec.ok if s.ttft is not None]
                out[conc_keys[0]].append(wave["aggregate_tok_s"])
                out[conc_keys[1]].append(wave["ttft_p95"])
        return outs
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
            closes: list[Callable[[], None]] = []
            try:
                targets = [handle]
                for wrap in side.views.values():
                    target, close = wrap(handle)
                    targets.append(target)
                    closes.append(close)
                measured = workload(targets, prompts)
                for name, values in zip([side.name, *side.views], measured):
                    result.boots[name].append(values)
                    result.versions[name].append(handle.engine_info.version)
                result.order.append(side.name)
            finally:
                for close in closes:
                    close()
                server.stop()
    return result


def judge_ab(result: ABResult, baseline: str, candidate: str, alpha: float,
             min_effect: Callable[[metrics.Metric, str], float], paired: bool = False,
             by: str = "boot") -> list[Verdict]:
    """One verdict per metric key: the candidate's boot medians against the baseline side's
    (Mann–Whitney U), or ``paired`` round by round (Wilcoxon signed-rank on the ratios: drift
    shared by the two boots of a round).  ``by="repeat"`` pairs single repeats instead, for a
    view measured on the same boots as its side, repeat beside repeat (the workload interleaves
    them): what the pair shares is then the boot and the moment, and 5 boots of 3 repeats give
    15 pairs, not 5 that all have to agree."""
    out = []
    values = result.repeat_values if by == "repeat" else result.boot_medians
    for key in result.boots[candidate][0]:
        metric = metrics.get(key)
        a, b = values(baseline, key), values(candidate, key)
        how = judge_paired if paired else judge
        v = how(metric, key, result.config_id, b, a, min_effect(metric, key), alpha,
                f"side {baseline} of this A/B run")
        unit = "repeats" if by == "repeat" else "boots"
        how_paired = f", paired {'repeat by repeat' if by == 'repeat' else 'by round'}" if paired else ""
        out.append(dataclasses.replace(v, baseline_in_run=True, note=f"{len(a)} {unit} of {baseline} vs {len(b)} of {candidate}"
                                               f"{how_paired}, order {''.join(result.order)}"))
    return out
