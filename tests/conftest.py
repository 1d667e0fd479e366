"""What every tier of llmgate's self-tests shares.  The tiers are folders, each named by what its
tests need (README, "Contributing"):

- ``tests/unit``: engine-free, in-process;
- ``tests/plugin``: engine-free, through pytester (a pytest session inside the test);
- ``tests/engine``: a real engine on the CPU (marked ``real_engine`` by their folder's conftest),
  checking what llmgate does with it, not how fast;
- ``tests/timing``: assertions that rest on what they time (marked ``timing`` by their folder):
  the client against a stub server, and, those marked ``real_engine`` too, an A/A that passes, a
  slowdown that is caught, no engine left 10 s after a signal, the seed's levers.

``tox -e selftest`` runs the first three on two pytest-xdist workers, then ``tests/timing`` one
test at a time.  ``real_engine`` is the self-tests' own marker; ``engine`` and ``gpu`` are the
product's, on the gate's scenarios.

The real-engine self-tests that check what llmgate does with a vLLM server (a boot that fails, a
killed server, an API key, quality changes, the probe, a team's repository, the levers' session)
give their entries ``env = { VLLM_ENABLE_V1_MULTIPROCESSING = "0" }``: vLLM's CPU build then runs
its model worker inside the EngineCore process instead of a third process of its own, and a boot
imports vLLM twice instead of three times (on 2 cores each import is ~20 s of one core).  The API
server and EngineCore stay separate processes.  The gate's own entries (the embedded default, the
engines matrix) and the signal tests, which check that every process of the default layout is
stopped, keep vLLM's default layout.

A pytest that a test starts (pytester, a subprocess) must not inherit the xdist worker's identity:
pytest-benchmark and llmgate would take it for an xdist worker of their own."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))     # baseline_files, delay_proxy, …


def pytest_configure(config):
    config.addinivalue_line("markers", "real_engine: a self-test that boots a real engine (minutes); tests/engine, "
                                       "and those of tests/timing that say so")
    config.addinivalue_line("markers", "timing: asserts on what it times (the client against a stub server, an "
                                       "engine's speed or teardown); tests/timing, run alone, without xdist")


def pytest_collection_modifyitems(config, items):
    """The real-engine tests first (a stable sort: the rest keep their order).  Under xdist each
    takes one to several minutes; started last, one of them would keep a worker busy while the
    other has nothing left to do."""
    items.sort(key=lambda item: item.get_closest_marker("real_engine") is None)


XDIST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_for_nested_pytest(monkeypatch):
    for name in XDIST_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    """Sessions that tests start write no plots: importing matplotlib's pyplot is ~0.8 s of each
    nested pytest (a third of the engine-free tests' time).  tests/unit/test_report.py draws them."""
    monkeypatch.setenv("LLMGATE_PLOTS", "0")
