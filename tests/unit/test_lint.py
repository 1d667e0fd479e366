"""Static checks as self-tests: ruff over the code and the tests (pyproject's [tool.ruff]), and
mypy over the public API (docs/api.md: the package's top level, the `gate` object, metrics,
verdicts, hooks, and the modules the lever and quality scenarios use; pyproject's [tool.mypy]).  Both come with the `test` extra."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PUBLIC_API = ["plugin/llmgate/__init__.py", "plugin/llmgate/runner/gate.py", "plugin/llmgate/core/metrics.py",
              "plugin/llmgate/analysis/verdict.py", "plugin/llmgate/hookspec.py",
              # the modules the lever and quality scenarios use (docs/api.md, the last section)
              "plugin/llmgate/levers/probe.py", "plugin/llmgate/levers/quality.py",
              "plugin/llmgate/device/__init__.py", "plugin/llmgate/device/hardware.py",
              "plugin/llmgate/analysis/stats.py", "plugin/llmgate/runner/figures.py", "plugin/llmgate/runner/requests.py",
              # the `gate` object's parts (gate.levers, the llmgate_boot value)
              "plugin/llmgate/levers/shared.py", "plugin/llmgate/runner/boots.py"]


def tool(name: str) -> list[str]:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install 'pytest-llmgate[test]' (the self-tests' extra)")
    return [found]


def test_ruff():
    r = subprocess.run([*tool("ruff"), "check", "plugin", "tests"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_on_the_public_api():
    r = subprocess.run([*tool("mypy"), *PUBLIC_API], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
