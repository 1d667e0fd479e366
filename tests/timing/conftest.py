"""tests/timing: each test asserts on what it times, so it runs alone (``tox -e selftest`` runs this
folder without xdist, after the others); those that boot a real engine say so (``real_engine``).

Alone means without a compiler beside it too: a llama.cpp build in progress (CI starts
``python -m llmgate.install llama-server`` in the background, at the lowest priority, while the
self-tests that measure nothing run) is waited for before the first of these tests."""

import pytest

from llmgate.tools import install


def pytest_itemcollected(item):
    item.add_marker(pytest.mark.timing)


@pytest.fixture(scope="session", autouse=True)
def _no_build_beside_the_timing_tests(request):
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    waited = install.wait_for_build(log=lambda msg: tr.write_line(f"tests/timing: {msg}") if tr else None)
    if waited and tr:
        tr.write_line(f"tests/timing: waited {waited:.0f} s for the llama.cpp build; the machine is theirs now")
