"""llmgate's hooks (llmgate/hookspec.py), implemented in a conftest.py as another plugin would:
the loaded matrix adjusted, provenance added to every stored result, the verdicts seen —
those of pytest-xdist workers too, rebuilt on the controller from their reports."""

import json

import pytest

from llmgate.store import benchmark_files

pytest_plugins = ["pytester"]

MATRIX = """
[defaults]
engine = "vllm"
model = "tiny"

[[matrix]]
id = "keep"

[[matrix]]
id = "drop"
"""

CONFTEST = """
import dataclasses, json, os

def pytest_llmgate_matrix(config, matrix):
    return dataclasses.replace(matrix, entries=tuple(e for e in matrix.entries if e.id != "drop"))

def pytest_llmgate_provenance(item, entry, provenance):
    provenance["build"] = {"ci_job": "job-42", "entry": entry.id if entry else None}

def pytest_llmgate_verdicts(config, verdicts):
    if hasattr(config, "workerinput"):
        return
    with open(os.environ["SEEN"], "a") as f:
        f.write(json.dumps([[v.config_id, v.key, v.status, type(v).__name__, v.line()] for v in verdicts]) + "\\n")
"""

TESTS = """
from llmgate.core import metrics

def test_decode(llmgate_config, gate):
    gate.record(metrics.DECODE_TOK_S, [100.0, 101.0, 99.0])
"""


@pytest.mark.parametrize("xdist_args", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_hooks_adjust_the_matrix_add_provenance_and_see_verdicts(pytester, xdist_args):
    if xdist_args:
        pytest.importorskip("xdist")
    pytester.makefile(".toml", llmgate=MATRIX)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_x=TESTS)
    seen = pytester.path / "seen.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SEEN", str(seen))
        r = pytester.runpytest_subprocess(*xdist_args, "--benchmark-save=h", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)                         # the "drop" entry is gone before collection
    (f,) = benchmark_files.stored_files(pytester.path / "baselines")
    names = [b["fullname"] for b in json.loads(f.read_text())["benchmarks"]]
    assert [n for n in names if n.startswith("decode[")] == ["decode[keep]::decode_tok_s"], names
    (b,) = [b for b in json.loads(f.read_text())["benchmarks"] if b["fullname"] == "decode[keep]::decode_tok_s"]
    assert b["extra_info"]["llmgate"]["build"] == {"ci_job": "job-42", "entry": "keep"}
    calls = [json.loads(line) for line in seen.read_text().splitlines()]
    assert len(calls) == 1, calls                       # once, on the controller under xdist
    rows = {(c, k): (s, t, line) for c, k, s, t, line in calls[0]}
    assert rows[("keep", "decode_tok_s")][:2] == ("no baseline", "Verdict")
    assert "keep decode_tok_s: 100.0 tok/s (no baseline)" in rows[("keep", "decode_tok_s")][2]
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert {v["config"] for v in report["verdicts"]} == {"keep"}
