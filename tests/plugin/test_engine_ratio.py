"""The seed's engine comparison as a same-session ratio (no engine, through pytester): an entry whose
reference is another engine records its aggregate tok/s ÷ the reference's boot of the same number
(`engine_vs_reference`; paired by boot, so that the ratio carries both engines' noise), judged like
any figure; an entry whose reference is the same engine, or
that has none, records no such ratio."""

import json

import boot_runs
import pytest

pytest_plugins = ["pytester"]

ENTRIES = """
[defaults]
model = "tiny"

[[matrix]]
id = "a-vllm"
engine = "vllm"

[[matrix]]
id = "b-sglang"
engine = "sglang"
reference = "a-vllm"

[[matrix]]
id = "c-vllm"
engine = "vllm"
reference = "a-vllm"
"""

PER_BOOT_TEST = """
import json, os
import pytest

@pytest.mark.boots
def test_c8(llmgate_config, llmgate_boot, gate):
    values = json.loads(os.environ["VALUES"])[llmgate_config.id][llmgate_boot - 1]
    gate.record(gate_metrics().AGGREGATE_TOK_S, values, "c8")
    gate.levers.versus_reference_engine(values, "c8")

def gate_metrics():
    from llmgate.core import metrics
    return metrics
"""


def run(pytester, values, *args):
    return boot_runs.run(pytester, ENTRIES, PER_BOOT_TEST, values, *args)


def boots(level, spread=(1.0, 1.01, 0.99)):
    return [[level * s * r for r in (1.0, 1.002, 0.998)] for s in spread]


def ratios(pytester):
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    return {v["config"]: v for v in rep["verdicts"] if v["key"] == "engine_vs_reference@c8"}


def test_another_engine_as_reference_gives_the_ratio_of_this_session_and_the_same_engine_none(pytester):
    r = run(pytester, {"a-vllm": boots(100), "b-sglang": boots(150), "c-vllm": boots(90)}, "--llmgate-boots", "3",
            "--benchmark-save=base")
    r.assert_outcomes(passed=9)
    got = ratios(pytester)
    assert set(got) == {"b-sglang"}, got
    assert got["b-sglang"]["now"]["median"] == pytest.approx(1.5, rel=0.01)
    saved = json.loads(next((pytester.path / "baselines").rglob("*.json")).read_text())
    info = next(b["extra_info"]["llmgate"] for b in saved["benchmarks"]
                if b["fullname"] == "c8[b-sglang]::engine_vs_reference@c8")
    assert len(info["boots"]) == 3 and info["reference"] == "a-vllm" and info["reference_engine"] == "vllm"
    assert info["reference_boot_medians"] == pytest.approx([100, 101, 99])
    # boot k over the reference's boot k: the SGLang boots' medians 150, 151.5, 148.5 ÷ 100, 101, 99
    assert [sorted(b)[1] for b in info["boots"]] == pytest.approx([1.5, 1.5, 1.5], rel=1e-3)

    # the ratio is gated: SGLang's lead shrinks from 1.5x to 1.2x while vLLM stays where it was
    r = run(pytester, {"a-vllm": boots(100), "b-sglang": boots(120), "c-vllm": boots(90)}, "--llmgate-boots", "3",
            "--benchmark-compare")
    got = ratios(pytester)
    assert got["b-sglang"]["status"] == "regressed", got
    assert got["b-sglang"]["now"]["median"] == pytest.approx(1.2, rel=0.01)


def test_a_reference_not_measured_in_the_session_is_said_not_guessed(pytester):
    r = run(pytester, {"a-vllm": boots(100), "b-sglang": boots(150), "c-vllm": boots(90)}, "-k", "b-sglang", "-rA")
    r.assert_outcomes(passed=1)
    assert ratios(pytester) == {}
    r.stdout.fnmatch_lines(["*b-sglang*÷ a-vllm's (vllm): not measured*"])


TTFT_TEST = """
import json, os
import pytest

@pytest.mark.boots
def test_c8(llmgate_config, llmgate_boot, gate):
    from llmgate.core import metrics
    boot = json.loads(os.environ["VALUES"])[llmgate_config.id][llmgate_boot - 1]
    gate.record(metrics.AGGREGATE_TOK_S, boot["agg"], "c8")
    gate.levers.versus_reference_engine(boot["agg"], "c8")
    gate.record(metrics.TTFT_P95, boot["ttft"], "c8")
    gate.levers.versus_reference_engine(boot["ttft"], "c8", metrics.ENGINE_TTFT_P95_RATIO)
"""


def ttft_boots(agg, ttft):
    return [{"agg": a, "ttft": t} for a, t in zip(boots(agg), boots(ttft))]


def test_the_seeds_ttft_ratio_is_kept_apart_from_the_aggregate_and_a_longer_wait_is_worse(pytester):
    """The seed's own figure of the engine comparison: TTFT p95 at 8 users ÷ the reference engine's
    (lower is better), from the same boots as the aggregate ratio and never mixed with it."""
    vals = {"a-vllm": ttft_boots(100, 2.0), "b-sglang": ttft_boots(150, 0.5), "c-vllm": ttft_boots(90, 2.2)}
    r = boot_runs.run(pytester, ENTRIES, TTFT_TEST, vals, "--llmgate-boots", "3", "--benchmark-save=base")
    r.assert_outcomes(passed=9)
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    got = {(v["config"], v["key"]): v for v in rep["verdicts"] if "vs_reference" in v["key"]}
    assert set(got) == {("b-sglang", "engine_vs_reference@c8"), ("b-sglang", "engine_ttft_p95_vs_reference@c8")}
    assert got["b-sglang", "engine_vs_reference@c8"]["now"]["median"] == pytest.approx(1.5, rel=0.01)
    assert got["b-sglang", "engine_ttft_p95_vs_reference@c8"]["now"]["median"] == pytest.approx(0.25, rel=0.01)

    # SGLang waits 0.8 s instead of 0.5 while its throughput and vLLM's stay: the TTFT ratio regressed
    vals["b-sglang"] = ttft_boots(150, 0.8)
    r = boot_runs.run(pytester, ENTRIES, TTFT_TEST, vals, "--llmgate-boots", "3", "--benchmark-compare")
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    got = {(v["config"], v["key"]): v for v in rep["verdicts"] if "vs_reference" in v["key"]}
    assert got["b-sglang", "engine_ttft_p95_vs_reference@c8"]["status"] == "regressed", got
    assert got["b-sglang", "engine_vs_reference@c8"]["status"] == "unchanged", got


def per_boot(medians, spread=(1.0, 1.01, 0.99)):
    return [[m * r for r in spread] for m in medians]


def test_a_reference_whose_boots_shift_together_between_sessions_is_no_false_alarm(pytester):
    """Seen on an H200 (matrices/gpu-engines-seed.toml, 2026-12-04): vLLM's TTFT p95 at c=8 was
    24.6 / 22.7 / 20.6 ms in the first session and 19.2 / 19.4 / 19.3 ms in the second; SGLang's
    20.3 / 21.6 / 20.4 and 19.7 / 19.5 / 20.1 ms.  Each SGLang boot over the median of vLLM's three
    made the ratio move +12% with a between-boot CV of 2.7% (regressed, p = 0.003) in what was an
    A/A; boot k over vLLM's boot k keeps vLLM's boot noise in the ratio, and the same figures pass."""
    agg = [2500.0, 2500.0, 2500.0]
    first = {"a-vllm": [{"agg": a, "ttft": t} for a, t in zip(per_boot(agg), per_boot([0.0246, 0.0227, 0.0206]))],
             "b-sglang": [{"agg": a, "ttft": t} for a, t in zip(per_boot(agg), per_boot([0.0203, 0.0216, 0.0204]))],
             "c-vllm": [{"agg": a, "ttft": t} for a, t in zip(per_boot(agg), per_boot([0.02, 0.02, 0.02]))]}
    second = {"a-vllm": [{"agg": a, "ttft": t} for a, t in zip(per_boot(agg), per_boot([0.0192, 0.0194, 0.0193]))],
              "b-sglang": [{"agg": a, "ttft": t} for a, t in zip(per_boot(agg), per_boot([0.0197, 0.0195, 0.0201]))],
              "c-vllm": first["c-vllm"]}
    boot_runs.run(pytester, ENTRIES, TTFT_TEST, first, "--llmgate-boots", "3", "--benchmark-save=base").assert_outcomes(passed=9)
    boot_runs.run(pytester, ENTRIES, TTFT_TEST, second, "--llmgate-boots", "3", "--benchmark-compare")
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    got = {v["key"]: v for v in rep["verdicts"] if v["config"] == "b-sglang" and "vs_reference" in v["key"]}
    ratio = got["engine_ttft_p95_vs_reference@c8"]
    # no false alarm; and with vLLM's boot noise in the ratio, 3 boots a side cannot rule a 10% move
    # out either: inconclusive, not "unchanged"
    assert ratio["status"] == "inconclusive", ratio
    assert ratio["now"]["median"] > ratio["baseline"]["median"] * 1.05      # it did move; the noise explains it
