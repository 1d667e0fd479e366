"""tests/timing: each test asserts on what it times, so it runs alone (``tox -e selftest`` runs this
folder without xdist, after the others); those that boot a real engine say so (``real_engine``).

Alone among the tests, not on an idle machine: their assertions allow for a machine that does
other work (README, "Contributing"), and llama-server builds in the background at the lowest
priority while they run (started by ``tox -e selftest`` or by ``.ci/run``, one build through the
build lock, when none is cached).  The one that needs llama-server asks for ``llama_server_built``,
which waits for that build (or starts it when none ran), and runs last."""

import pytest

from llmgate.runner.run import say
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
    """The llama-server to run: waits for a llama.cpp build in progress (``llmgate install
    llama-server`` in another process, as ``tox -e selftest`` and ``.ci/run`` start it), starts one
    when none ran, and says how long it waited; a failed build fails the test in one line."""
    try:
        return install.await_llama_server(log=lambda msg: say(request.config, f"tests/timing: {msg}"))
    except install.BuildFailed as e:
        pytest.fail(str(e), pytrace=False)
