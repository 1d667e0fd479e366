"""Stored baselines: validated on load (a corrupt file stops the run with its name and is left
untouched), written atomically, compared only when the fingerprint matches, and a regression
is re-measured once before it fails (confirmation run)."""

import json
import os
import pathlib
import stat
import subprocess

import pytest
from pytest_benchmark.utils import get_machine_id

import baseline_files
from llmgate.store import baseline, benchmark_files, fingerprint as fingerprints, keys
from llmgate.device import hardware as device
from llmgate.config import matrix

pytest_plugins = ["pytester"]

RECORDING_TEST = """
import json, os, pathlib
from llmgate.core import metrics

def test_measure(gate):
    runs = pathlib.Path("runs.txt")
    n = int(runs.read_text()) + 1 if runs.exists() else 1
    runs.write_text(str(n))
    values = json.loads(os.environ["VALUES"])
    gate.record(metrics.DECODE_TOK_S, values[min(n, len(values)) - 1])
"""
NAME = "measure::decode_tok_s"          # scenario::metric: the key names no file


def here_fingerprint(**override):
    # the embedded default's workload (it has no [scenarios] of its own)
    fp = fingerprints.fingerprint(None, None, device.describe(), None, matrix.Scenarios().workload())
    fp.update(override)
    return fp


def run(pytester, runs, *args):
    """``runs``: the values the test records on its 1st, 2nd… execution in this session."""
    pytester.makepyfile(test_rec=RECORDING_TEST)
    (pytester.path / "runs.txt").unlink(missing_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps(runs))
        return pytester.runpytest_subprocess(*args)


def test_corrupt_baseline_stops_the_run_and_is_left_untouched(pytester):
    run(pytester, [[100] * 5], "--benchmark-save=base").assert_outcomes(passed=1)
    (saved,) = benchmark_files.stored_files(pytester.path / "baselines")
    saved.write_text(saved.read_text()[:500])          # cut short, as a crash or a bad merge would
    before = saved.read_bytes()
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines([f"*{saved}: not valid JSON: *: line * column *the file was left untouched*"])
    assert " at at " not in r.stderr.str()
    assert saved.read_bytes() == before
    # saving is refused too while the storage holds a corrupt file
    r = run(pytester, [[100] * 5], "--benchmark-save=again")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and saved.read_bytes() == before
    assert len(benchmark_files.stored_files(pytester.path / "baselines")) == 1


@pytest.mark.parametrize("mutate, problem", [
    (lambda b: b["extra_info"]["llmgate"].pop("fingerprint"), "no fingerprint"),
    (lambda b: b["extra_info"]["llmgate"].update(values=[]), "'values' must be a non-empty list of numbers"),
    (lambda b: b["extra_info"]["llmgate"].update(schema=1), "llmgate schema 1"),
    (lambda b: b["extra_info"]["llmgate"].update(better="bigger"), "'better' must be 'higher' or 'lower'"),
    (lambda b: b.pop("stats"), "has no numeric 'stats'"),
])
def test_schema_problems_are_named(pytester, mutate, problem):
    path = baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=here_fingerprint())
    data = json.loads(path.read_text())
    mutate(data["benchmarks"][0])
    path.write_text(json.dumps(data))
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines([f"*{path}: benchmark '{NAME}'*{problem}*"])


def test_other_device_is_refused_unless_allowed(pytester):
    other = here_fingerprint(device={"cpu": "Some Other CPU @ 5 GHz"})
    baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=other)
    # the run named on the command line is refused before any test runs (or engine boots), naming what
    # differs (tests/plugin/test_compare_before_boot.py: with matrix entries)
    r = run(pytester, [[100] * 5], "--benchmark-compare=0001")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["ERROR: llmgate: --benchmark-compare=0001: *0001_base.json is of another device: "
                            "baseline *Some Other CPU* Nothing was booted (compare anyway with --llmgate-allow-mismatch)"])
    assert not (pytester.path / "runs.txt").exists()
    # a bare --benchmark-compare looks for a comparable baseline, finds none, and says why
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*| decode tok/s (c=1) *| no baseline for this device *|",
                            "*test_measure: no baseline for this device: the nearest, *0001_base.json, device "
                            "differs: baseline *Some Other CPU*"])
    r = run(pytester, [[60] * 5], "--benchmark-compare", "--llmgate-allow-mismatch", "--llmgate-no-confirm")
    r.assert_outcomes(failed=1)  # compared anyway: a 40% slowdown is still a regression, with the warning
    out = r.stdout.str()
    assert "NOT COMPARABLE, compared anyway" in out and "regressed" in out


def test_other_model_is_refused(pytester):
    baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=here_fingerprint(model_hash="abc123"))
    r = run(pytester, [[100] * 5], "--benchmark-compare=0001")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*model differs: baseline content hash abc123*"])
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*| no baseline for this model *|", "*model differs: baseline content hash abc123*"])


def move_to_machine_folder(path, machine_id):
    """A stored run as another interpreter would have saved it: pytest-benchmark keeps runs in a
    folder named after the interpreter (``Linux-CPython-3.12-64bit``) and looks only in its own."""
    target = path.parent.parent / machine_id / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    path.rename(target)
    if not any(path.parent.iterdir()):
        path.parent.rmdir()
    return target


def test_baselines_of_another_interpreter_are_found_and_compared(pytester):
    from pytest_benchmark.utils import get_machine_id

    run(pytester, [[100, 101, 99, 100, 102]], "--benchmark-save=base").assert_outcomes(passed=1)
    (saved,) = benchmark_files.stored_files(pytester.path / "baselines")
    assert saved.parent.name == get_machine_id()
    other = "Linux-CPython-3.99-64bit"
    assert other != get_machine_id()
    moved = move_to_machine_folder(saved, other)
    assert benchmark_files.stored_files(pytester.path / "baselines") == [moved]
    # a bare --benchmark-compare finds it (pytest-benchmark alone: "Can't compare. No benchmark files")
    r = run(pytester, [[99, 101, 100, 103, 98]], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    both = r.stdout.str() + r.stderr.str()
    assert "Can't compare" not in both
    r.stderr.fnmatch_lines([f"*Comparing against benchmarks from: {other}/0001_base.json*"])
    r.stdout.fnmatch_lines(["*| decode tok/s (c=1) *| 100.0 tok/s *| unchanged *|"])
    # and it gates: a slower run fails against it, named by its folder
    r = run(pytester, [[70, 71, 69, 72, 70]], "--benchmark-compare", "--llmgate-no-confirm")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([f"*performance regression against {other}/0001_base.json:*",
                            "*decode_tok_s*baseline 100.0 tok/s*now 70.0 tok/s*-30.0%*regressed*"])
    # so does the run named by its number, wherever it is kept
    r = run(pytester, [[70, 71, 69, 72, 70]], "--benchmark-compare=0001", "--llmgate-no-confirm")
    r.assert_outcomes(failed=1)


def test_the_newest_comparable_baseline_is_taken_and_the_nearest_explains_its_absence(pytester):
    here = here_fingerprint()
    old = baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=here)
    move_to_machine_folder(old, "Linux-CPython-3.10-64bit")
    # newer runs that do not compare: another device, and this device with another configuration
    for name, fp in (("elsewhere", here_fingerprint(device={"cpu": "Some Other CPU @ 5 GHz"})),
                     ("changed", here_fingerprint(config={"max_num_seqs": 1}))):
        newer = baseline_files.write(pytester.path, name, {NAME: [200] * 5}, fingerprint=fp)
        move_to_machine_folder(newer, f"Linux-CPython-3.99-{name}")
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*| 100.0 tok/s *| +0.0% *| unchanged *|"])
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert rep["verdicts"][0]["baseline_source"] == "Linux-CPython-3.10-64bit/0001_base.json"
    # without it, the nearest stored result (same device) says what differs
    (pytester.path / "baselines" / "Linux-CPython-3.10-64bit" / "0001_base.json").unlink()
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*| no baseline for this configuration *|",
                            "*no baseline for this configuration: the nearest, Linux-CPython-3.99-changed/0001_changed.json, "
                            "configuration differs: max_num_seqs: 1 → None*"])


def test_no_stored_run_and_no_stored_test_are_said_per_entry(pytester):
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    both = r.stdout.str() + r.stderr.str()
    assert "Can't compare" not in both
    r.stdout.fnmatch_lines(["*llmgate: --benchmark-compare: no stored run in *baselines*",
                            "*| no baseline stored *|",
                            "*test_measure: no baseline stored: no stored run in *baselines (record one with --benchmark-save=NAME)"])
    baseline_files.write(pytester.path, "base", {"test_rec.py::test_other::decode_tok_s": [100] * 5},
                         fingerprint=here_fingerprint())
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*| no baseline for this test *|",
                            "*test_measure: no baseline for this test: the stored runs in *baselines hold none*"])
    # a run named that is not stored: test_a_baseline_named_and_not_stored_stops_the_run_before_it_starts


def test_engine_change_is_what_is_compared(pytester):
    old = here_fingerprint(engine={"engine": "vllm", "version": "0.31.0", "commit": None})
    baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=old)
    r = run(pytester, [[99, 101, 100, 102, 98]], "--benchmark-compare")
    r.assert_outcomes(passed=1)


def test_confirmation_run_clears_a_one_off(pytester):
    run(pytester, [[100, 101, 99, 100, 102]], "--benchmark-save=base").assert_outcomes(passed=1)
    r = run(pytester, [[70, 71, 69, 70, 72], [100, 99, 101, 100, 98]], "--benchmark-compare", "-W", "default")
    r.assert_outcomes(passed=1, warnings=1)
    out = r.stdout.str()
    assert "confirmation run once more" in out
    assert "decode_tok_s: first measurement regressed (-30.0%), the confirmation run once more did not" in out
    assert (pytester.path / "runs.txt").read_text() == "2"


def test_confirmed_regression_fails_and_says_so(pytester):
    run(pytester, [[100, 101, 99, 100, 102]], "--benchmark-save=base").assert_outcomes(passed=1)
    r = run(pytester, [[70, 71, 69, 70, 72], [75, 74, 76, 75, 73]], "--benchmark-compare", "--benchmark-save=after")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert "first measurement and the confirmation run once more both regressed" in out
    assert "now 70.0 tok/s" in out and "now 75.0 tok/s" in out
    # what is stored is the confirmation run, once
    files = benchmark_files.stored_files(pytester.path / "baselines")
    after = json.loads(files[-1].read_text())
    entries = [b for b in after["benchmarks"] if b["fullname"] == NAME]
    assert len(entries) == 1 and entries[0]["extra_info"]["llmgate"]["values"] == [75, 74, 76, 75, 73]


def test_atomic_save_never_overwrites(tmp_path):
    target = tmp_path / "0001_x.json"
    benchmark_files.atomic_write(target, b"{}")
    assert target.read_bytes() == b"{}"
    with pytest.raises(FileExistsError):
        benchmark_files.atomic_write(target, b"{new}")
    assert target.read_bytes() == b"{}"
    assert [p.name for p in tmp_path.iterdir()] == ["0001_x.json"]   # no temporary file left behind


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002], ids=["umask-022", "umask-077", "umask-002"])
def test_baseline_files_get_the_mode_of_the_umask(tmp_path, mask):
    """A baseline is a file others read (a CI job under another user, a reviewer's checkout): written
    through a temporary file, it still gets the mode of a file created under the user's umask (0644
    under umask 022), not the temporary file's 0600; a migrated file keeps the mode it had."""
    legacy = baseline_files.write(tmp_path, "old", {"tests/perf/test_decode.py::test_decode_c1[h200]::decode_tok_s": [100] * 5},
                                  fingerprint=here_fingerprint())
    legacy.chmod(0o640)
    old = os.umask(mask)
    try:
        benchmark_files.atomic_write(tmp_path / "0002_x.json", b"{}")
        assert keys.migrate_file(legacy) == 1
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "0002_x.json").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(legacy.stat().st_mode) == 0o640
    assert json.loads(legacy.read_text())["benchmarks"][0]["fullname"] == "decode_c1[h200]::decode_tok_s"


def test_a_saved_run_is_readable_by_others_under_umask_022(pytester):
    assert umask() == 0o022, "the pytest process runs under umask 022 here"     # what the assertion below means
    run(pytester, [[100] * 5], "--benchmark-save=base").assert_outcomes(passed=1)
    (saved,) = benchmark_files.stored_files(pytester.path / "baselines")
    assert stat.S_IMODE(saved.stat().st_mode) == 0o644


def test_a_baseline_named_and_not_stored_stops_the_run_before_it_starts(pytester):
    """A typo in a CI job (--benchmark-compare=9999) must not make the gate pass: one line naming what
    is stored, exit code 4, no test run.  A bare --benchmark-compare with nothing stored still runs,
    every metric without a baseline (test_no_stored_run_and_no_stored_test_are_said_per_entry)."""
    store = pytester.path / "baselines"
    r = run(pytester, [[100] * 5], "--benchmark-compare=9999")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert r.stderr.lines[0] == (f"ERROR: llmgate: --benchmark-compare=9999: no stored run matches '9999' in {store}; "
                                 f"it holds no stored run (record one with --benchmark-save=NAME). Nothing was run "
                                 f"(a bare --benchmark-compare compares with the newest)")
    assert not (pytester.path / "runs.txt").exists()                 # the test never ran
    run(pytester, [[100] * 5], "--benchmark-save=base").assert_outcomes(passed=1)
    run(pytester, [[100] * 5], "--benchmark-save=after").assert_outcomes(passed=1)
    elsewhere = baseline_files.write(pytester.path, "elsewhere", {NAME: [100] * 5}, fingerprint=here_fingerprint())
    move_to_machine_folder(elsewhere, "Linux-CPython-3.99-64bit")
    r = run(pytester, [[100] * 5], "--benchmark-compare=9999")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [ln for ln in r.stderr.lines if ln.strip()]
    assert line == (f"ERROR: llmgate: --benchmark-compare=9999: no stored run matches '9999' in {store}; stored runs: "
                    f"0001_base, 0002_after ({get_machine_id()}, this interpreter); 0001_elsewhere "
                    f"(Linux-CPython-3.99-64bit). Nothing was run (a bare --benchmark-compare compares with the newest)")
    assert not (pytester.path / "runs.txt").exists() and "Traceback" not in r.stdout.str() + r.stderr.str()
    # a run that is stored is compared, by its number or by its name
    run(pytester, [[100] * 5], "--benchmark-compare=0002").assert_outcomes(passed=1)
    run(pytester, [[100] * 5], "--benchmark-compare=0001_elsewhere").assert_outcomes(passed=1)


def immutable(folder: pathlib.Path) -> bool:
    """``chattr +i``: a folder nobody can add a file to, root included (file permissions do not stop
    root, which the self-tests run as); False where the file system or the container refuses it."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.parametrize("how, option", [("a file in the way", "--benchmark-save=base"),
                                         ("an immutable folder", "--benchmark-autosave")])
def test_a_storage_that_cannot_be_written_stops_the_run_before_it_starts(pytester, how, option):
    """Saving, the folder the run will be stored in must take a file before any test runs (or any
    engine boots): one line, exit code 4.  The folder is made unwritable in ways that stop root too
    (the self-tests run as root, which file permissions do not stop): ``baselines`` a regular file,
    where pytest-benchmark wants a folder (works on any file system); or ``chattr +i`` on it (skipped
    where the file system or the container refuses chattr)."""
    store = pytester.path / "baselines"
    if how == "a file in the way":
        store.write_text("a file where the baselines folder belongs")
        problem = f"{store} is a file, not a folder"
    elif not immutable(store):
        pytest.skip("chattr +i is refused here")
    else:
        problem = f"cannot write in {store / get_machine_id()}: Operation not permitted"
    try:
        r = run(pytester, [[100] * 5], option)
    finally:
        if store.is_dir():
            subprocess.run(["chattr", "-i", str(store)], check=True)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [ln for ln in r.stderr.lines if ln.strip()]
    assert line == (f"ERROR: llmgate: {option}: the baseline cannot be stored: {problem}. Nothing was run (fix the "
                    f"folder, or store elsewhere with --benchmark-storage=file://DIR)")
    assert not (pytester.path / "runs.txt").exists() and not (pytester.path / ".llmgate").exists()
    # a folder that can be written is left as it was: the check makes nothing
    if store.is_file():
        store.unlink()
    (pytester.path / "empty").mkdir()
    r = run(pytester, [[100] * 5], option, "--benchmark-storage=file://empty")
    r.assert_outcomes(passed=1)
    assert len(benchmark_files.stored_files(pytester.path / "empty")) == 1


BREAKING_TEST = """
import pathlib, shutil
from pytest_benchmark.utils import get_machine_id
from llmgate.core import metrics

def test_measure(gate):
    gate.record(metrics.DECODE_TOK_S, [100.0, 101.0, 99.0, 100.0, 102.0])
    # the run's folder goes away before the save at the end (a file system that turned read-only
    # would do; this stops root too): a file where it was
    folder = pathlib.Path("baselines") / get_machine_id()
    if folder.is_dir():
        shutil.rmtree(folder)
    folder.write_text("a file where the run's folder was")
"""


@pytest.mark.parametrize("xdist_args", [(), ("-n", "1")], ids=["one-process", "xdist"])
def test_a_baseline_that_cannot_be_written_at_the_end_fails_the_run_in_one_line(pytester, xdist_args):
    """The save at the end fails: the run fails (exit code 1) with one line saying so, in the terminal
    and in summary.md, not with pytest-benchmark's traceback through pluggy; llmgate's verdict table,
    report.json and the run history are written all the same (under pytest-xdist: by the worker that
    saved, told by the controller)."""
    if xdist_args:
        pytest.importorskip("xdist")
    pytester.makepyfile(test_rec=BREAKING_TEST)
    r = pytester.runpytest_subprocess("--benchmark-save=base", "-p", "no:cacheprovider", *xdist_args)
    out = r.stdout.str() + r.stderr.str()
    assert r.ret == pytest.ExitCode.TESTS_FAILED, out
    r.assert_outcomes(passed=1)
    folder = pytester.path / "baselines" / get_machine_id()
    name = "0001_base-gw0.json" if xdist_args else "0001_base.json"
    line = (f"baseline not saved: {folder / name} could not be written: {folder} is a file, not a folder")
    assert out.count(line) == 1, out
    assert f"llmgate: {line}" in r.stdout.lines
    for word in ("Traceback", "INTERNALERROR", "FileExistsError"):
        assert word not in out, (word, out)
    r.stdout.fnmatch_lines(["*| measure *| decode tok/s (c=1) *| 100.0 tok/s *| no baseline *|"])
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert rep["exit_status"] == 1 and rep["baseline_not_saved"] == [line] and len(rep["verdicts"]) == 1
    from importlib.resources import files
    import jsonschema
    jsonschema.validate(rep, json.loads(files("llmgate").joinpath("data/report.schema.json").read_text()))
    md = (pytester.path / ".llmgate" / "summary.md").read_text()
    assert md.startswith("## llmgate: ❌ baseline not saved") and f"**❌ {line}**" in md
    (record,) = (pytester.path / ".llmgate" / "history").rglob("*.json")
    assert json.loads(record.read_text())["run"]["exit_status"] == 1
    assert folder.is_file() and not benchmark_files.stored_files(pytester.path / "baselines")


def test_a_baseline_of_another_workload_is_not_compared(pytester):
    """Request shapes are part of the fingerprint: a baseline whose scenarios sent other output
    lengths (here: every request the same length) is named, not compared; one that predates the
    workload fingerprint is asked to be re-recorded."""
    other = here_fingerprint()
    other["workload"] = {**other["workload"], "output_spread": 0.0}
    first = baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=other)
    r = run(pytester, [[50] * 5], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*no baseline for this configuration: the nearest, *0001_base.json, "
                            "workload differs: scenarios.output_spread: 0.0 → 0.5*"])
    legacy = here_fingerprint()
    del legacy["workload"]
    first.unlink()
    baseline_files.write(pytester.path, "legacy", {NAME: [100] * 5}, fingerprint=legacy)
    r = run(pytester, [[50] * 5], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*the baseline does not record its workload*re-record it*"])


def test_raw_arrays_are_stored_packed_and_read_either_way():
    raw = {"ttft_s": [0.012345, None], "itl_s": [[0.001, 0.002]] * 500, "errors": []}
    packed = baseline.pack_raw(raw)
    assert packed["encoding"] == baseline.RAW_ENCODING
    assert len(json.dumps(packed)) < len(json.dumps(raw)) / 5
    assert baseline.unpack_raw(packed) == raw
    assert baseline.unpack_raw(raw) == raw          # files saved before: plain arrays
    assert baseline.unpack_raw(None) is None


def test_committed_baselines_are_valid_and_their_raw_arrays_unpack():
    root = pathlib.Path(__file__).resolve().parents[2] / "baselines"
    files = benchmark_files.stored_files(root)
    assert files
    for f in files:
        benchmark_files.validate_file(f)
        for b in json.loads(f.read_text())["benchmarks"]:
            raw = (b.get("extra_info") or {}).get("llmgate", {}).get("raw")
            if raw is not None:
                assert isinstance(baseline.unpack_raw(raw), dict), f


def test_an_unset_arrival_rate_is_the_devices_default_in_the_workload():
    """The CPU's default arrival rate moved from 2 to 1 req/s (2 overloaded the tiny model's vLLM on
    2 cores): a baseline stored with the rate unset at the old default is another workload, while
    the GPU's (16 req/s, unchanged) still compares."""
    from llmgate.config.matrix import Scenarios

    sc = Scenarios()
    assert sc.workload()["arrival_rate"] is None
    assert sc.workload("cpu")["arrival_rate"] == 1.0 and sc.workload("gpu")["arrival_rate"] == 16.0
    old_cpu = {"config": {"device": "cpu"}, "workload": sc.workload()}
    old_gpu = {"config": {"device": "gpu"}, "workload": sc.workload()}
    now_cpu = {"config": {"device": "cpu"}, "workload": sc.workload("cpu")}
    now_gpu = {"config": {"device": "gpu"}, "workload": sc.workload("gpu")}
    assert fingerprints.fingerprint_mismatch(old_gpu, now_gpu) == []
    assert fingerprints.fingerprint_mismatch(old_cpu, now_cpu) == ["workload differs: scenarios.arrival_rate: 2.0 → 1.0"]
    assert fingerprints.fingerprint_mismatch(now_cpu, now_cpu) == []


ACCOUNTED_TEST = """
import json, os
from llmgate.core import metrics
from llmgate.load.samples import LoadResult, Sample

def test_measure(gate):
    gate.record(metrics.DECODE_TOK_S, json.loads(os.environ["VALUES"])[0])
    # two requests accounted for, none failed: the test's "requests that failed" row
    gate._recorder.account(LoadResult([Sample(ok=True, start=0.0, e2e=1.0)] * 2, 1.0, 1))
"""


def test_requests_row_says_no_baseline_on_a_save_run_and_unchanged_on_a_compare(pytester):
    pytester.makepyfile(test_rec=ACCOUNTED_TEST)

    def statuses(*args):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("VALUES", json.dumps([[100] * 5]))
            pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
        rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
        return {v["metric"]: v["status"] for v in rep["verdicts"]}

    assert statuses("--benchmark-save=base") == {"decode_tok_s": "no baseline", "failed_requests": "no baseline"}
    assert statuses("--benchmark-compare") == {"decode_tok_s": "unchanged", "failed_requests": "unchanged"}
