"""The seed's engine comparison as a same-session ratio (no engine, through pytester): an entry whose
reference is another engine records its aggregate tok/s ÷ the median over the reference's boots
(`engine_vs_reference`), judged like any figure; an entry whose reference is the same engine, or
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
