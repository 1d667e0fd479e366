"""The self-tests may run under pytest-xdist: tox -e selftest runs all but those marked ``timing``
on two workers (the engine-free ones beside those that boot a real engine only to check what it
does: a boot that fails, a killed server, a quality change), then those marked ``timing`` one at a
time: they time the client against a stub server, or assert on what a real engine's speed or
teardown time shows (an A/A that passes, a slowdown that is caught, no engine left after 10 s).
A pytest that a test starts (pytester, a subprocess) must not inherit the worker's identity: pytest-benchmark and llmgate would take it for an xdist worker of their own.

The real-engine self-tests that check what llmgate does with a vLLM server (a boot that fails, a
killed server, an API key, quality changes, the probe, a team's repository) give their entries
``env = { VLLM_ENABLE_V1_MULTIPROCESSING = "0" }``: vLLM's CPU build then runs its model worker
inside the EngineCore process instead of a third process of its own, and a boot imports vLLM twice
instead of three times (on 2 cores each import is ~20 s of one core).  The API server and
EngineCore stay separate processes.  The gate's own entries (the embedded default, the levers and
engines matrices) and the signal tests, which check that every process of the default layout is
stopped, keep vLLM's default layout."""

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "timing: asserts on what it times (the client against a stub server, an engine's speed or teardown); runs alone, without xdist")

def pytest_collection_modifyitems(config, items):
    """The real-engine tests first (a stable sort: the rest keep their order).  Under xdist each
    takes one to several minutes; started last, one of them would keep a worker busy while the
    other has nothing left to do."""
    items.sort(key=lambda item: item.get_closest_marker("engine") is None)


XDIST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_for_nested_pytest(monkeypatch):
    for name in XDIST_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    """Sessions that tests start write no plots: importing matplotlib's pyplot is ~0.8 s of each
    nested pytest (a third of the engine-free tests' time).  test_report.py draws them."""
    monkeypatch.setenv("LLMGATE_PLOTS", "0")
