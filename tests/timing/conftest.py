"""tests/timing: each test asserts on what it times, so it runs alone (``tox -e selftest`` runs this
folder without xdist, after the others); those that boot a real engine say so (``real_engine``).

Alone among the tests, not on an idle machine: their assertions allow for a machine that does
other work (README, "Contributing").  llama-server builds in the background at the lowest priority
(started by ``tox -e selftest`` or by ``.ci/run``, one build through the build lock, when none is
cached) beside the first tiers; a test here that boots a real engine first waits for it to end
(``no_build_beside``): a compiler beside a measured engine is a busy machine, whose figures the gate
holds (a regression as inconclusive: ``process.meters.MachineLoad``), and once read a CPU vLLM's
prefill 5× slower than it is.  The one that needs llama-server asks for ``llama_server_built``,
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


@pytest.fixture(autouse=True)
def no_build_beside(request):
    """A real engine's timing test starts once a llama.cpp build in progress has ended (says how long it waited)."""
    if request.node.get_closest_marker("real_engine") is not None and install.build_in_progress():
        waited = install.wait_for_build(log=lambda msg: say(request.config, f"tests/timing: {msg}"))
        say(request.config, f"tests/timing: waited {waited:.0f} s for the llama.cpp build to end before "
                            f"{request.node.name} (nothing measured shares the machine with it)")
