"""What a run comes to, through pytester (no engine): never green when nothing was gated.  A run
whose engine died reads red; a comparison whose verdicts found no baseline reads "not gated" and
fails the run unless that is accepted; a run that compared nothing says so; both engine builds
are named in the terminal, summary.md and the failure text."""

import json

import pytest

import baseline_files
from llmgate.config import matrix
from llmgate.device import hardware as device
from llmgate.store import fingerprint as fingerprints

pytest_plugins = ["pytester"]

ONE_ENTRY = """
[[matrix]]
id = "first"
engine = "vllm"
model = "tiny"
"""

# a stand-in for vLLM's EngineCore killed (kill -9) mid-run: the pool's record of the boot, the
# running test failing on the dead server, the next four erroring in their setup; nothing measured
DEAD_ENGINE_CONFTEST = """
import pytest

@pytest.fixture(scope="session")
def booted(llmgate_run, llmgate_config):
    llmgate_run.boots.setdefault(llmgate_config.id, []).append(
        {"boot": 1, "engine": "vllm", "version": "0.32.0", "startup_s": 1.0, "log": "first.1.log"})
    llmgate_run.notes.append(f"{llmgate_config.id}: a note the section must show")
    return llmgate_config


@pytest.fixture
def server(booted):
    pytest.fail(f"{booted.id}: the server died earlier in this session (exit code -9)", pytrace=False)
"""
DEAD_ENGINE_TESTS = """
import pytest

def test_1_running(booted):
    pytest.fail(f"{booted.id}: vllm server (pid 1) exited with code -9 during the run", pytrace=False)

@pytest.mark.parametrize("k", range(4))
def test_2_next(server, k):
    pass
"""


@pytest.mark.parametrize("args", [(), ("--benchmark-compare",), ("--benchmark-save=x",)],
                         ids=["plain", "compare", "save"])
def test_a_run_whose_engine_died_reads_red_with_its_notes_and_reports(pytester, args):
    pytester.makefile(".toml", llmgate=ONE_ENTRY)
    pytester.makeconftest(DEAD_ENGINE_CONFTEST)
    pytester.makepyfile(test_dead=DEAD_ENGINE_TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    r.assert_outcomes(failed=1, errors=4)
    assert r.ret == 1
    summary = (pytester.path / ".llmgate" / "summary.md").read_text()
    assert summary.startswith("## llmgate: ❌ failed: 1 failed, 4 error(s)\n"), summary[:300]
    assert "✅" not in summary
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert rep["exit_status"] == 1 and rep["verdicts"] == [] and rep["outcome"]["status"] == "failed"
    assert rep["tests"]["failed"] == 1 and rep["tests"]["errors"] == 4
    # the section says it, with its notes and the reports, though no verdict was recorded
    r.stdout.fnmatch_lines(["*= llmgate =*", "llmgate: FAILED: 1 failed, 4 error(s)*", "notes:",
                            "  first: a note the section must show", "reports: *report.json*summary.md*report.html*",
                            "report page: *report.html (open it in a browser*"])


RECORDING = """
import json, os
from llmgate.core import metrics

def test_measure(gate):
    values = json.loads(os.environ["VALUES"])
    gate.record(metrics.DECODE_TOK_S, values["tok_s"])
    gate.record(metrics.TTFT_P95, values["ttft"], "c8")
"""
SAME = {"tok_s": [100, 101, 99, 100, 102], "ttft": [0.100, 0.101, 0.099, 0.100, 0.102]}


def run(pytester, values, *args):
    pytester.makepyfile(test_rec=RECORDING)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps(values))
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def summary(pytester) -> str:
    return (pytester.path / ".llmgate" / "summary.md").read_text()


def test_a_compare_with_no_baseline_is_not_gated_and_fails_the_run_unless_accepted(pytester):
    # nothing stored: every verdict of the comparison is without a baseline
    r = run(pytester, SAME, "--benchmark-compare")
    r.assert_outcomes(passed=1)                   # the test itself passes
    assert r.ret == 1
    r.stdout.fnmatch_lines(["llmgate: NOT GATED",
                            "  not gated: 2 of 2 verdict(s) had no comparable baseline — no baseline stored (2): "
                            "test_measure decode_tok_s, test_measure ttft_p95@c8",
                            "  the run fails (exit status 1): 2 verdict(s) not gated (--llmgate-accept no-baseline*"])
    md = summary(pytester)
    assert md.startswith("## llmgate: ❌ not gated: 2 of 2 verdict(s) had no baseline\n"), md[:300]
    assert "- not gated: 2 of 2 verdict(s) had no comparable baseline" in md
    assert json.loads((pytester.path / ".llmgate" / "report.json").read_text())["exit_status"] == 1

    # accepted: exit 0, and still not green
    for accept in (["--llmgate-accept", "no-baseline"], ["--llmgate-accept", "inconclusive,no-baseline"]):
        r = run(pytester, SAME, "--benchmark-compare", *accept)
        r.assert_outcomes(passed=1)
        assert r.ret == 0, r.stdout.str()
        md = summary(pytester)
        assert md.startswith("## llmgate: ⚠️ not gated: 2 of 2 ") and "✅" not in md, md[:300]
        r.stdout.fnmatch_lines(["llmgate: NOT GATED (accepted)", "*accepted (--llmgate-accept *): these do not fail "
                                                                 "the run, and it does not read as passed*"])
    r = run(pytester, SAME, "--benchmark-compare", "--llmgate-accept", "nothing")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--llmgate-accept 'nothing': 'nothing' is not one of no-baseline, inconclusive*"])

    # a run that compares nothing says so, and passes
    r = run(pytester, SAME, "--benchmark-save=base")
    assert r.ret == 0
    assert summary(pytester).startswith("## llmgate: ℹ️ measured, not compared (2 verdict(s))")
    r.stdout.fnmatch_lines(["llmgate: measured, not compared: 2 verdict(s)*"])

    # compared with it and decided (the repeats' interval rules a 5% move out): the one green headline
    r = run(pytester, SAME, "--benchmark-compare")
    assert r.ret == 0, r.stdout.str()
    assert summary(pytester).startswith("## llmgate: ✅ no regression\n")
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert rep["counts"]["unchanged"] == 2 and rep["outcome"]["status"] == "passed" and rep["compared"] is True


VERSION_CONFTEST = """
from llmgate.runner import recorder

_fingerprint = recorder.Recorder.fingerprint


def served_by_0_32(self):
    # a stand-in for a running vllm 0.32.0: what its server would put in the fingerprint
    fp = _fingerprint(self)
    fp["engine"] = {"engine": "vllm", "version": "0.32.0", "commit": None}
    return fp


recorder.Recorder.fingerprint = served_by_0_32
"""


def test_both_engine_builds_are_named_in_the_terminal_the_summary_and_the_failure(pytester):
    old = fingerprints.fingerprint(None, None, device.describe(), {"engine": "vllm", "version": "0.31.0"},
                                   matrix.Scenarios().workload())
    baseline_files.write(pytester.path, "base", {"measure::decode_tok_s": [100, 101, 99, 100, 102],
                                                 "measure::ttft_p95@c8": SAME["ttft"]}, fingerprint=old)
    pytester.makeconftest(VERSION_CONFTEST)
    r = run(pytester, {**SAME, "tok_s": [70, 71, 69, 70, 72]}, "--benchmark-compare", "--llmgate-no-confirm")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    failure = next(ln for ln in r.stdout.lines if "test_measure decode_tok_s (" in ln and "regressed" in ln)
    assert "; engine vllm 0.31.0 → vllm 0.32.0" in failure, failure
    r.stdout.fnmatch_lines(["llmgate: REGRESSED: 1 verdict(s)", "*engine (baseline → now): vllm 0.31.0 → vllm 0.32.0"])
    md = summary(pytester)
    assert md.startswith("## llmgate: ❌ regressions (1)"), md[:300]
    assert "engine (baseline → now): vllm 0.31.0 → vllm 0.32.0" in md
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    v = next(v for v in rep["verdicts"] if v["key"] == "decode_tok_s")
    assert (v["baseline_engine"], v["engine"]) == ("vllm 0.31.0", "vllm 0.32.0")
    assert "FAILED" in out
