"""tests/timing: each test asserts on what it times, so it runs alone (``tox -e selftest`` runs this
folder without xdist, after the others); those that boot a real engine say so (``real_engine``).

Alone among the tests, not on an idle machine: their assertions allow for a machine that does
other work (README, "Contributing"), and CI builds llama-server in the background at the lowest
priority (``.ci/run``) while they run.  The one that needs llama-server asks for
``llama_server_built``, which waits for a build in progress, and runs last."""

import pytest

from llmgate.runner.session import say
from llmgate.tools import install


def pytest_itemcollected(item):
    item.add_marker(pytest.mark.timing)


@pytest.hookimpl(trylast=True)          # after tests/conftest.py's real-engine-first order
def pytest_collection_modifyitems(config, items):
    """The tests that wait for a llama-server build last (a stable sort: the rest keep their order),
    so that a build in progress has the others' run to end in."""
    items.sort(key=lambda item: "llama_server_built" in getattr(item, "fixturenames", ()))


@pytest.fixture
def llama_server_built(request):
    """Waits for a llama.cpp build in progress (``python -m llmgate.install llama-server`` in
    another process, as CI starts it) to end, and says how long it waited."""
    waited = install.wait_for_build(log=lambda msg: say(request.config, f"tests/timing: {msg}"))
    if waited:
        say(request.config, f"tests/timing: waited {waited:.0f} s for the llama.cpp build")
