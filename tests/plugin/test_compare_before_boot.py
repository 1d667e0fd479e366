"""The stored runs --benchmark-compare chose are checked against what is known before any boot
(the device, each selected entry's model content, configuration and workload; not the engine
build, which is what is gated): a run named that is of another device, or that no selected entry
can be compared with, is one line, exit code 4, and no engine is started; a bare
--benchmark-compare says per entry which stored run it is compared with, and why a newer one was
passed over.  Engine-free: the entries' launcher is a stand-in that records each start and serves
nothing (``stand_ins.recording_launcher``)."""

import datetime
import json

import pytest

from llmgate.store import benchmark_files
from stand_ins import recording_launcher

pytest_plugins = ["pytester"]

RECORDING = """
from llmgate.core import metrics

def test_decode_c1(llmgate_config, gate):
    gate.record(metrics.DECODE_TOK_S, [100.0, 101.0, 99.0, 100.0, 100.0])
"""

BOOTING = """
def test_served(llmgate_server):
    pass
"""


def project(pytester):
    launcher = recording_launcher(pytester.path / "engine", pytester.path / "started.txt")
    pytester.makefile(".toml", llmgate=f"""
[defaults]
engine = "vllm"
model = "tiny"
launcher = "{launcher}"

[[matrix]]
id = "alpha"

[[matrix]]
id = "beta"
""")
    pytester.makepyfile(test_rec=RECORDING, test_boot=BOOTING)
    return pytester.path / "started.txt"


def gate(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def variant(saved, name, change):
    """A copy of a stored run, saved later under another number: ``change(entry id, fingerprint)``."""
    data = json.loads(saved.read_text())
    for b in data["benchmarks"]:
        fp = b["extra_info"]["llmgate"]["fingerprint"]
        change(fp["config"]["id"], fp)
    data["datetime"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    path = saved.with_name(name)
    path.write_text(json.dumps(data, indent=4))
    return path


def other_device(cid, fp):
    fp["device"] = {"cpu": "Some Other CPU @ 5 GHz"}


def alpha_changed(cid, fp):
    if cid == "alpha":
        fp["config"]["max_num_seqs"] = 1


@pytest.fixture
def stored(pytester):
    started = project(pytester)
    gate(pytester, "test_rec.py", "--benchmark-save=base").assert_outcomes(passed=2)
    (saved,) = benchmark_files.stored_files(pytester.path / "baselines")
    elsewhere = variant(saved, "0002_elsewhere.json", other_device)
    changed = variant(saved, "0003_changed.json", alpha_changed)
    return started, saved, elsewhere, changed


def rel(path):
    return f"{path.parent.name}/{path.name}"


def test_a_named_run_of_another_device_stops_the_session_before_any_boot(pytester, stored):
    started, saved, elsewhere, _ = stored
    r = gate(pytester, "--benchmark-compare=0002")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [ln for ln in r.stderr.lines if ln.startswith("ERROR")]
    assert line.startswith(f"ERROR: llmgate: --benchmark-compare=0002: {rel(elsewhere)} is of another device: "
                           f'baseline {{"cpu": "Some Other CPU @ 5 GHz"}} vs now {{"cpu": '), line
    assert line.endswith(". Nothing was booted (compare anyway with --llmgate-allow-mismatch)"), line
    assert not started.exists(), started.read_text()          # no engine was started
    assert not (pytester.path / ".llmgate" / "logs").exists()
    # the run of this device boots (the stand-in fails at once): the assertion above can fail
    r = gate(pytester, "--benchmark-compare=0001")
    r.assert_outcomes(passed=2, errors=2)
    assert started.exists()
    # compared anyway when asked: the tests run, each verdict says it is not comparable
    started.unlink()
    r = gate(pytester, "test_rec.py", "--benchmark-compare=0002", "--llmgate-allow-mismatch")
    r.assert_outcomes(passed=2, warnings=2)
    r.stdout.fnmatch_lines([f"llmgate: alpha: compared anyway (--llmgate-allow-mismatch) with {rel(elsewhere)} is of "
                            f"another device: *",
                            "*compared with a baseline from another setup: device differs*",
                            "*| alpha *| 100.0 tok/s *| +0.0% *| inconclusive *|"])


def test_a_named_run_no_selected_entry_can_compare_with_stops_the_session(pytester, stored):
    started, _, _, changed = stored
    # beta compares with it: the session runs, and alpha's verdict says why it does not
    r = gate(pytester, "test_rec.py", "--benchmark-compare=0003")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines([f"llmgate: alpha: nothing to compare with: {rel(changed)} has another configuration: "
                            f"max_num_seqs: 1 → None",
                            f"llmgate: beta: compared with {rel(changed)}"])
    # alpha alone: nothing selected can be compared with it
    r = gate(pytester, "-k", "alpha", "--benchmark-compare=0003")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [ln for ln in r.stderr.lines if ln.startswith("ERROR")]
    assert line == (f"ERROR: llmgate: --benchmark-compare=0003: no selected entry can be compared with it: alpha: "
                    f"{rel(changed)} has another configuration: max_num_seqs: 1 → None. Nothing was booted "
                    f"(compare anyway with --llmgate-allow-mismatch)")
    assert not started.exists()


def test_a_bare_compare_names_each_entrys_stored_run_and_the_newer_ones_passed_over(pytester, stored):
    started, saved, elsewhere, changed = stored
    r = gate(pytester, "test_rec.py", "--benchmark-compare")
    r.assert_outcomes(passed=2)
    alpha = (f"alpha: compared with {rel(saved)}; passed over the newer {rel(changed)} has another configuration: "
             f"max_num_seqs: 1 → None; {rel(elsewhere)} is of another device: baseline ")
    beta = f"beta: compared with {rel(changed)}"
    lines = [ln for ln in r.stdout.lines if ln.startswith("llmgate: alpha: ") or ln.startswith("llmgate: beta: ")]
    assert len(lines) == 2 and lines[0].startswith(f"llmgate: {alpha}") and lines[1] == f"llmgate: {beta}", lines
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert any(n.startswith(alpha) for n in rep["notes"]) and beta in rep["notes"], rep["notes"]
    # each metric was compared with the run its entry's line names
    assert {v["config"]: v["baseline_source"] for v in rep["verdicts"] if v["metric"] == "decode_tok_s"} == \
        {"alpha": rel(saved), "beta": rel(changed)}
    assert not started.exists()
