"""llmgate stores and compares through pytest-benchmark's internals, through the modules
of ``llmgate.store`` (``llmgate.store.benchmark_files.RELIES_ON`` lists what they use).  This test checks each of them
against the installed pytest-benchmark and names what is gone, so that a pytest-benchmark
release that changes one fails here, loudly, rather than as a baseline quietly not compared."""

import inspect
import json

from llmgate.store import benchmark_files

pytest_plugins = ["pytester"]

CONFTEST = """
import json, pytest

@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    from llmgate.store import benchmark_files
    config = session.config
    out = {"config attribute": [n for n in benchmark_files.RELIES_ON["config attribute"] if not hasattr(config, n)]}
    bs = benchmark_files.benchmark_session(config)
    out["session attributes"] = [n for n in benchmark_files.RELIES_ON["session attributes"] if not hasattr(bs, n)]
    out["options"] = [n for n in benchmark_files.RELIES_ON["options"] if not hasattr(config.option, n)]
    st = bs.storage
    out["file storage"] = [n.split(".", 1)[1] for n in benchmark_files.RELIES_ON["file storage"]
                           if not hasattr(st, n.split(".", 1)[1])]
    out["options given to the fixture"] = sorted(bs.options)
    with open("found.json", "w") as f:
        json.dump(out, f)
"""


def test_pytest_benchmark_still_has_what_llmgate_uses(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    r = pytester.runpytest_subprocess("--benchmark-storage", f"file://{pytester.path / 'store'}",
                                      "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    found = json.loads((pytester.path / "found.json").read_text())
    missing = {k: v for k, v in found.items() if k != "options given to the fixture" and v}
    assert not missing, f"pytest-benchmark no longer has what llmgate.store relies on: {missing}"

    from pytest_benchmark.fixture import BenchmarkFixture
    params = inspect.signature(BenchmarkFixture.__init__).parameters
    wanted = {"node", "add_stats", "logger", "warner", "disabled", *found["options given to the fixture"]}
    assert wanted <= set(params), f"BenchmarkFixture() lost {sorted(wanted - set(params))}"
    assert callable(getattr(BenchmarkFixture, "_make_stats", None)), "BenchmarkFixture._make_stats is gone"


def test_default_storage_and_helpers():
    from _pytest.config.argparsing import Parser
    from pytest_benchmark import plugin as bplugin
    from pytest_benchmark import utils

    parser = Parser()
    bplugin.pytest_addoption(parser)
    defaults = {o.dest: o.default for g in parser._groups for o in g.options}
    assert defaults.get("benchmark_storage") == benchmark_files.PYTEST_BENCHMARK_DEFAULT_STORAGE, (
        f"pytest-benchmark's default storage is now {defaults.get('benchmark_storage')!r}: llmgate would no "
        f"longer move it to baselines/")
    assert callable(getattr(utils, "safe_dumps", None)), "pytest_benchmark.utils.safe_dumps is gone"


def test_an_entry_made_through_the_internals_is_what_pytest_benchmark_saves(pytester):
    """The end-to-end check: an entry llmgate adds is saved by pytest-benchmark's own save path."""
    pytester.makepyfile(test_rec="from llmgate import metrics\n\ndef test_m(gate):\n"
                                 "    gate.record(metrics.TTFT_C1, [0.1, 0.2, 0.3])\n")
    r = pytester.runpytest_subprocess("--benchmark-save=x", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    (f,) = benchmark_files.stored_files(pytester.path / "baselines")
    (b,) = json.loads(f.read_text())["benchmarks"]
    assert b["fullname"] == "m::ttft_c1" and b["stats"]["median"] == 0.2
    assert b["extra_info"]["llmgate"]["values"] == [0.1, 0.2, 0.3]
