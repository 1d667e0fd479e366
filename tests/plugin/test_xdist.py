"""pytest-xdist: each matrix entry's tests on one worker (its server boots once), results
stored and compared per worker through pytest-benchmark, one merged report on the controller.
Driven with pytester on the CPU (no engine is booted: the tests record figures they are given);
the GPU pinning itself is `device.worker_share`, tested below, and was run on two H200s."""

import json

import pytest

from llmgate.store import fingerprint as fingerprints
from llmgate.device import hardware as device

pytest_plugins = ["pytester"]

pytest.importorskip("xdist")

MATRIX = """
[defaults]
engine = "vllm"
model = "tiny"

[[matrix]]
id = "first"

[[matrix]]
id = "second"
"""

TESTS = """
import json, os
from llmgate.core import metrics

def test_decode(llmgate_config, gate):
    gate.record(metrics.DECODE_TOK_S, json.loads(os.environ["VALUES"])[llmgate_config.id])
    with open(os.environ["WHERE"], "a") as f:
        f.write(f"{llmgate_config.id} {os.environ.get('PYTEST_XDIST_WORKER')}\\n")

def test_ttft(llmgate_config, gate):
    gate.record(metrics.TTFT_C1, [0.100, 0.101, 0.099, 0.100, 0.102])
    with open(os.environ["WHERE"], "a") as f:
        f.write(f"{llmgate_config.id} {os.environ.get('PYTEST_XDIST_WORKER')}\\n")
"""

SAME = {"first": [100, 101, 99, 100, 102], "second": [50, 51, 49, 50, 52]}


def run(pytester, values, *args):
    where = pytester.path / "where.txt"
    where.unlink(missing_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps(values))
        mp.setenv("WHERE", str(where))
        r = pytester.runpytest_subprocess(*args)
    placed = {}
    for line in where.read_text().splitlines():
        cid, worker = line.split()
        placed.setdefault(cid, set()).add(worker)
    return r, placed


def test_entries_stay_on_one_worker_and_store_compare_and_report_per_run(pytester):
    pytester.makefile(".toml", llmgate=MATRIX)
    pytester.makepyfile(test_x=TESTS)

    r, placed = run(pytester, SAME, "-n", "2", "--benchmark-save=run")
    r.assert_outcomes(passed=4)
    assert all(len(w) == 1 and next(iter(w)).startswith("gw") for w in placed.values()), placed
    files = sorted((pytester.path / "baselines").rglob("*.json"))
    assert sorted(f.name.split("_", 1)[1] for f in files) == ["run-gw0.json", "run-gw1.json"], files
    names = [b["fullname"] for f in files for b in json.loads(f.read_text())["benchmarks"]]
    assert len(names) == 4 and not any("@" in n for n in names), names       # no xdist group in stored ids
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert len(rep["verdicts"]) == 4 and sorted(rep["workers"]) == ["gw0", "gw1"]
    r.stdout.fnmatch_lines(["*llmgate*", "*first*decode*", "*second*decode*"])

    # compared per worker (a bare --benchmark-compare, or the number of any one worker file of the run):
    # the same figures are no regression, but one boot a side on the CPU (its prior's noise) cannot rule
    # one out either: inconclusive, so the controller fails the run (its tests pass) unless that is
    # accepted; a slower entry (by far more than one boot a side can swing) fails on its worker and in
    # the summary
    r, _ = run(pytester, SAME, "-n", "2", "--benchmark-compare")
    r.assert_outcomes(passed=4)
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert rep["counts"]["inconclusive"] == 4 and rep["counts"]["regressed"] == 0, rep["counts"]
    assert r.ret == 1 and rep["exit_status"] == 1
    r, _ = run(pytester, SAME, "-n", "2", "--benchmark-compare", "--llmgate-accept", "inconclusive")
    assert r.ret == 0, r.stdout.str()
    r, _ = run(pytester, {**SAME, "second": [10, 10.1, 9.9, 10, 10.1]}, "-n", "2", "--benchmark-compare=0001",
               "--llmgate-no-confirm")
    r.assert_outcomes(passed=3, failed=1)
    r.stdout.fnmatch_lines(["*1 regression(s)*", "*second decode_tok_s (decode tok/s (c=1), higher is better): baseline 50.0 tok/s (1 boot) → now 10.0 tok/s "
                            "(1 boot), change -80.0%*regressed*"])

    # without xdist, a bare --benchmark-compare takes every worker file of the newest run
    r, placed = run(pytester, SAME, "--benchmark-compare", "--llmgate-accept", "inconclusive")
    r.assert_outcomes(passed=4)
    assert placed == {"first": {"None"}, "second": {"None"}}
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert rep["counts"]["inconclusive"] == 4 and rep["counts"]["no baseline"] == 0, rep["counts"]


REFERENCED = MATRIX + """
[[matrix]]
id = "third"
reference = "first"

[[matrix]]
id = "fourth"
reference = "third"
"""


def test_an_entry_runs_on_the_worker_of_its_reference(pytester):
    """An entry with a ``reference`` is compared with what its reference measured in the same process
    (the levers' speed-ups, a quantized entry against the full-precision one): a reference chain is one
    unit of scheduling, and the entries outside it go to the other worker."""
    pytester.makefile(".toml", llmgate=REFERENCED)
    pytester.makepyfile(test_x=TESTS)
    r, placed = run(pytester, {**SAME, "third": SAME["first"], "fourth": SAME["first"]}, "-n", "2")
    r.assert_outcomes(passed=8)
    assert all(len(w) == 1 for w in placed.values()), placed
    assert placed["first"] == placed["third"] == placed["fourth"] != placed["second"], placed


def test_reference_groups():
    from llmgate.runner.distribution import reference_groups
    assert reference_groups({"a": None, "b": "a", "c": None, "d": "b"}) == {"a": "a", "b": "a", "c": "c", "d": "a"}
    assert reference_groups({"a": "b", "b": "a"}) == {"a": "b", "b": "a"}       # a cycle ends (the matrix refuses one)


@pytest.mark.parametrize("nodeid, scope", [
    ("t.py::test_a[h200-12gb-bf16]", "llmgate-entry:h200-12gb-bf16"),
    ("t.py::test_a[h200-12gb]", "llmgate-entry:h200-12gb"),
    ("t.py::test_q[h200-12gb-case3]", "llmgate-entry:h200-12gb"),
    ("t.py::test_q[case3-h200-12gb-bf16]", "llmgate-entry:h200-12gb-bf16"),
    ("t.py::test_q[x-h200-12gb-y]", "llmgate-entry:h200-12gb"),
    ("t.py::test_plain", "t.py::test_plain"),
    ("t.py::test_p[other]", "t.py::test_p[other]"),
])
def test_tests_are_grouped_by_matrix_entry(nodeid, scope):
    from llmgate.config.ids import entry_scope
    assert entry_scope(nodeid, ["h200-12gb", "h200-12gb-bf16"]) == scope


@pytest.mark.parametrize("visible, workers, shares", [
    ([0, 1], 2, [[0], [1]]),
    ([0, 1, 2, 3], 2, [[0, 1], [2, 3]]),
    ([2, 3], 2, [[2], [3]]),
    ([0, 1, 2], 2, [[0], [1]]),
    ([0, 1], 1, [[0, 1]]),
])
def test_worker_share(visible, workers, shares):
    assert [device.worker_share(visible, k, workers) for k in range(workers)] == shares


def test_more_workers_than_gpus_is_an_error():
    with pytest.raises(ValueError, match="3 workers but 2 GPU"):
        device.worker_share([0, 1], 0, 3)


@pytest.mark.parametrize("value, count, visible", [
    (None, 2, [0, 1]), ("1", 2, [1]), ("1,0", 2, [1, 0]), ("", 2, []), ("0,7", 2, [0]),
    ("GPU-5d1b", 2, []), ("0,0", 2, [0]),
])
def test_cuda_visible_devices(value, count, visible):
    assert device.parse_visible(value, count) == visible


def test_gpu_fingerprint_names_the_gpus_an_entry_uses():
    dev = {"cpu": "x", "driver": "580", "gpus": [{"index": 0, "name": "H200"}, {"index": 1, "name": "H200"}]}
    one = fingerprints.fingerprint({"device": "gpu", "tensor_parallel": 1}, "m", dev, None)
    two = fingerprints.fingerprint({"device": "gpu", "tensor_parallel": 2}, "m", dev, None)
    single = fingerprints.fingerprint({"device": "gpu", "tensor_parallel": 1}, "m", {**dev, "gpus": dev["gpus"][:1]}, None)
    assert one["device"]["gpus"] == ["H200"] and two["device"]["gpus"] == ["H200", "H200"]
    assert not fingerprints.fingerprint_mismatch(single, one)         # one GPU of two compares with a one-GPU host
    assert fingerprints.fingerprint_mismatch(single, two)
