"""The headline command, `pytest -m gpu --benchmark-compare`, in a fresh clone on a machine
without a GPU: the embedded default's GPU entries are collected and each of their tests skips
with the reason, the run exits 0 (never "N deselected" with exit code 5), and the committed
baselines are read from their machine-id folder whatever this interpreter is.  Driven with
pytester over copies of the repository's gate modules, pytest settings and baselines; nothing
boots (the GPU tests skip, the CPU entry is deselected)."""

import re
import shutil
from pathlib import Path

import pytest

from llmgate.device import hardware as device
from llmgate.config import matrix

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
GPU_ENTRIES = [e.id for e in matrix.load(matrix.DEFAULT_MATRIX).entries if e.device == "gpu"]


@pytest.fixture
def clone(pytester):
    """The parts of a fresh clone a gate run reads: pyproject.toml (testpaths), the packaged
    scenarios (plugin/, linked: the installed llmgate is that folder), baselines/, and a self-test
    that must not be run by the headline command."""
    if device.why_no_gpu() is None:
        pytest.skip("this machine has a GPU: the headline command would boot the GPU entries")
    shutil.copy(REPO / "pyproject.toml", pytester.path / "pyproject.toml")
    (pytester.path / "plugin").symlink_to(REPO / "plugin", target_is_directory=True)
    shutil.copytree(REPO / "baselines", pytester.path / "baselines")
    unit = pytester.path / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit / "test_selftest.py").write_text("import pytest\n\n@pytest.mark.gpu\ndef test_not_the_gate():\n"
                                           "    assert False, 'a self-test ran under the headline command'\n")
    return pytester


@pytest.mark.parametrize("paths", [(), ("--pyargs", "llmgate.scenarios")], ids=["repository-root", "pyargs"])
def test_headline_command_without_a_gpu_skips_each_gpu_test_with_its_reason_and_exits_0(clone, paths):
    p = clone
    listed = p.runpytest_subprocess(*paths, "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert listed.ret == 0, listed.stdout.str()
    selected = [ln for ln in listed.stdout.lines if "::" in ln]
    assert selected, listed.stdout.str()
    scenarios = {f.name for f in (REPO / "plugin" / "llmgate" / "scenarios").glob("test_*.py")}
    assert all(ln.split("::")[0].rsplit("/", 1)[-1] in scenarios for ln in selected), selected   # the gate, no self-test
    assert all(any(f"[{cid}" in ln or f"-{cid}" in ln for cid in GPU_ENTRIES) for ln in selected), selected
    for cid in GPU_ENTRIES:
        assert any(cid in ln for ln in selected), (cid, selected)

    r = p.runpytest_subprocess(*paths, "-m", "gpu", "--benchmark-compare", "-rs", "-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.OK, r.stdout.str()
    outcomes = r.parseoutcomes()
    assert outcomes.get("skipped") == len(selected), outcomes
    assert not {"passed", "failed", "errors", "error"} & set(outcomes), outcomes
    out = r.stdout.str() + r.stderr.str()
    assert "deselected / 0 selected" not in out and "no tests ran" not in out
    reason = device.why_no_gpu()
    skips = [ln for ln in r.stdout.lines if ln.startswith("SKIPPED")]       # "SKIPPED [2] file:line: reason"
    assert sum(int(re.match(r"SKIPPED \[(\d+)\]", ln).group(1)) for ln in skips) == len(selected), skips
    assert all(ln.endswith(f": {reason}") for ln in skips), skips
    # llmgate's section names each GPU entry once, with the reason
    for cid in GPU_ENTRIES:
        assert [ln for ln in r.stdout.lines if ln.startswith(f"{cid}: ") and ln.endswith(f" test(s) skipped: {reason}")]
    # the committed baselines were found (saved by another interpreter on another host), not warned about
    assert "Can't compare" not in out
    r.stderr.fnmatch_lines(["Comparing against benchmarks from: *Linux-CPython-3.12-64bit/0001_h200.json*"])
