"""pytest glue: options, markers, hooks, fixtures and the session summary (the pytest11 entry
point ``llmgate.plugin``).

The work is done by the layers under it, one folder each, and a run flows through them: config →
engines (the adapter) → process (the server) → load → samples → analysis (stats, verdict) → store
→ report, driven by ``runner`` (the run object, the ``gate`` fixture's object, the confirmation
policy, pytest-xdist support).  The layers, what each may import and where a new engine,
scenario, metric or report goes: docs/architecture.md.  llmgate's own hooks are in ``hookspec``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from llmgate.store import baseline as baseline_store, benchmark_files, history
from llmgate import engines, hookspec
from llmgate.device import hardware
from llmgate.report import reports
from llmgate.process import registry
from llmgate.process import strays
from llmgate.runner import distribution
from llmgate.runner import shard as shard_mod
from llmgate.process import interrupts as interrupt
from llmgate.config.ids import LEVER_OFF
from llmgate.runner import confirm, duet
from llmgate.runner.gate import RECORDER_KEY, Gate
from llmgate.load.workloads import PromptMaker
from llmgate.config.matrix import MatrixError, ServerConfig
from llmgate.process.server import BootError, ServerDied, ServerHandle, Unsupported
from llmgate.runner.boots import MeasurementBoot
from llmgate.runner.pool import OwnServers
from llmgate.runner.run import RUN_KEY, GateRun
from llmgate.runner.terminal import say
from llmgate.runner.settings import Settings
from llmgate.analysis.verdict import DEFAULT_ALPHA


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


# -- options -------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("llmgate", "llmgate: performance-regression gate for LLM serving engines")
    g.addoption("--llmgate-matrix", metavar="PATH",
                help="matrix TOML (default: llmgate.toml, else [tool.llmgate] in pyproject.toml, "
                     "else the embedded default: CPU vLLM + the tiny model)")
    g.addoption("--llmgate-out", metavar="DIR", help="folder for server logs and reports (default: .llmgate)")
    g.addoption("--llmgate-repeats", type=int, default=None, metavar="N",
                help="measured repeats per scenario after warm-up (default 5)")
    g.addoption("--llmgate-warmup", type=int, default=None, metavar="N",
                help="warm-up requests per scenario, not measured (default 1)")
    g.addoption("--llmgate-boots", type=int, default=None, metavar="K",
                help="boots of each matrix entry that the steady-state scenarios measure (default: the entry's "
                     "`boots`, else 3 on a GPU and 1 on the CPU); each boot gives one value per metric and "
                     "verdicts compare boot values with the stored baseline's")
    g.addoption("--llmgate-concurrency", type=int, default=None, metavar="N",
                help="concurrency of the concurrency test (default 8)")
    g.addoption("--llmgate-request-timeout", type=float, default=None, metavar="S",
                help="per-request timeout in seconds (default 300)")
    g.addoption("--llmgate-min-effect", action="append", default=[], metavar="METRIC=FRACTION[:ABS]",
                help="smallest relative change in the worse direction that counts as a regression, "
                     "e.g. decode_tok_s=0.1 (repeatable; overrides matrix entries and metric defaults); "
                     ":ABS also sets the change in the metric's own unit it must exceed, "
                     "e.g. frontend_ttft=0.05:0.0003 (5% and 0.3 ms)")
    g.addoption("--llmgate-reference", metavar="NAME",
                help="print this run beside published reference figures at the end "
                     "(e.g. seed-rtx4070, from baselines/reference/)")
    g.addoption("--llmgate-alpha", type=float, default=None, metavar="A",
                help=f"significance level of the regression test (default {DEFAULT_ALPHA})")
    g.addoption("--llmgate-allow-mismatch", action="store_true",
                help="compare with a baseline recorded on another device, model or configuration "
                     "(refused otherwise), with a warning")
    g.addoption("--llmgate-ab", action="append", default=[], metavar="NAME=LAUNCHER",
                help="A/B mode, a same-session comparison: two engine environments, e.g. --llmgate-ab "
                     "A=/opt/pinned/bin/python --llmgate-ab B=/opt/nightly/bin/python (an interpreter for Python "
                     "engines, a binary for llama-server).  Every scenario that measures boots runs on K boots a "
                     "side (--llmgate-boots), booted alternately A B A B …, and B is judged against A's boots of "
                     "this session, not against a stored baseline")
    g.addoption("--llmgate-pinned", metavar="LAUNCHER",
                help="the engine a project pins today (an interpreter for Python engines, a binary for llama-server): "
                     "A/B mode with side 'pinned' (this launcher) against side 'current' (each entry's own: its "
                     "`launcher` key, $LLMGATE_VLLM_PYTHON / $LLMGATE_SGLANG_PYTHON, else this interpreter), a duet "
                     "where both fit: the pre-upgrade gate re-measures the pinned engine in the same run")
    g.addoption("--llmgate-ab-mode", choices=["duet", "alternate"], default=None,
                help="how A/B mode compares its sides: duet (default) boots A and B one after the other on each of "
                     "K boot pairs, both resident, and interleaves every measurement between them, request by request "
                     "at c=1 and window by window under load (the machine's drift falls on both alike); alternate boots "
                     "them in turn, A B A B …  A duet whose two budgets do not fit the machine falls back to "
                     "alternating boots and says so")
    g.addoption("--llmgate-determinism", choices=["fail", "warn"], default="fail",
                help="a greedy output that changed against the baseline fails the test (default) or only warns")
    g.addoption("--llmgate-hypothesis-examples", type=int, default=20, metavar="N",
                help="examples per Hypothesis property of the quality tests (default 20)")
    g.addoption("--llmgate-accept", action="append", default=[], metavar="WHAT",
                help="a comparison (--benchmark-compare, A/B mode) fails the run (exit status 1; the tests pass) "
                     "when a verdict had no comparable baseline or is inconclusive (its confidence interval neither "
                     "shows a regression nor rules one out: too few boots); say which of these is expected: "
                     "no-baseline, inconclusive (repeatable, or a comma list).  The summary still does not read "
                     "as passed")
    g.addoption("--llmgate-no-confirm", action="store_true",
                help="fail on the first regressed measurement instead of re-measuring once on a fresh server")
    g.addoption("--llmgate-benchmark-table", action="store_true",
                help="also print pytest-benchmark's own table for llmgate's metrics (hidden by default: it shows "
                     "every metric as a time, tok/s as seconds per token; llmgate's verdict table is the one to read)")
    g.addoption("--llmgate-history", metavar="DIR",
                help="folder of the run history: every run appends one record (default: .llmgate/history under "
                     "the rootdir; read it with llmgate history DIR)")
    g.addoption("--llmgate-no-history", action="store_true", help="append no record to the run history")
    g.addoption("--llmgate-shard", metavar="K/N",
                help="run the K-th of N disjoint shares of the selected matrix entries (each entry with its "
                     "reference chain and all its boots), one share per CI job; merge the jobs' reports with "
                     "llmgate merge")
    g.addoption("--llmgate-shard-durations", metavar="DIR",
                help="a run history (.llmgate/history of an earlier run, the same folder in every job) whose "
                     "recorded seconds per entry balance the shares (default: by selected tests)")
    parser.addini("llmgate_matrix", "matrix TOML file, relative to the rootdir")
    parser.addini("llmgate_baselines", "folder for stored baselines (pytest-benchmark storage)", default="baselines")



@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engine: the test boots and measures a real serving engine")
    config.addinivalue_line("markers", "gpu: the test needs an NVIDIA GPU (skipped without one)")
    config.addinivalue_line("markers", "lever(name): the test measures a lever scenario; it runs only on matrix "
                                       "entries whose `levers` list the name (others skip, with the reason, before any boot)")
    config.addinivalue_line("markers", "boots: the test measures each of its entry's K boots (--llmgate-boots): "
                                       "test[entry-bootK] on the K-th; its metrics are judged after the last boot")
    config.addinivalue_line("markers", "llmgate(min_effect=None): per-test llmgate settings, "
                                       "e.g. min_effect={'ttft_p95': 0.2}")
    # baselines/ under the rootdir, every stored file checked, the comparison taken over
    baseline_store.configure(config, config.rootpath / config.getini("llmgate_baselines"))
    distribution.configure(config)
    config.pluginmanager.register(distribution, "llmgate-distribution")
    shard_opt = config.getoption("--llmgate-shard", None)
    try:
        shard_spec = shard_mod.Shard.parse(shard_opt) if shard_opt is not None else None
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    config.stash[RUN_KEY] = gs = GateRun(config)
    if shard_spec is not None:
        durations = config.getoption("--llmgate-shard-durations", None)
        if durations is not None and not Path(durations).is_dir():
            raise pytest.UsageError(f"--llmgate-shard-durations {durations}: no such folder (a run history, "
                                    f"e.g. .llmgate/history of an earlier run)")
        gs.shard = shard_mod.ShardPlugin(shard_spec, lambda: {e.id: e.reference for e in gs.matrix.entries},
                                         history.entry_seconds(Path(durations)) if durations else None)
        config.pluginmanager.register(gs.shard, "llmgate-shard")
    config.pluginmanager.register(gs, "llmgate-session")      # its pytest_* methods are hooks of this config
    # SIGTERM and SIGHUP (a time limit, a cancelled job, a closed terminal) end the run like Ctrl-C
    gs.interrupts.install()
    gs.interrupts.on_stuck.append(_end_servers_of_a_stuck_session)


def _end_servers_of_a_stuck_session(signal_name: str) -> None:
    """(a helper thread, interrupt.STUCK_S after the first signal) Servers that the run has
    not begun to stop by then are ended from here: its main thread is stuck somewhere."""
    ended = registry.end_unsignalled()
    if ended:
        print(f"llmgate: {signal_name}: the session had not stopped {', '.join(ended)} "
              f"{interrupt.STUCK_S:.0f} s later; ended from a helper thread", file=sys.__stderr__, flush=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    gs = config.stash.get(RUN_KEY, None)
    if gs is not None:
        gs.interrupts.uninstall()
        if config.pluginmanager.is_registered(gs):
            config.pluginmanager.unregister(gs)
    if gs is not None and gs.shard is not None and config.pluginmanager.is_registered(gs.shard):
        config.pluginmanager.unregister(gs.shard)
    if config.pluginmanager.is_registered(distribution):
        config.pluginmanager.unregister(distribution)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before collection and before any boot, what would make the whole run useless stops it with
    one line and exit code 4 (pytest.UsageError): a matrix file that does not load, a run named by
    --benchmark-compare that is not stored (or, under pytest-xdist, that cannot be compared:
    ``pytest_collection_finish`` otherwise), a storage folder a save cannot write in."""
    config = session.config
    gs = config.stash.get(RUN_KEY, None)
    if gs is not None:
        gs.load_matrix_file()
    baseline_store.session_start(config, distribution.worker(config), lambda line: say(config, line))
    if gs is not None and distribution.workers(config):
        gs.check_compared(None)          # the controller collects nothing: every entry the workers may run
    if gs is not None and not distribution.worker(config):
        for line in strays.sweep(gs.out_dir):            # servers a killed run left behind
            say(config, line)


def pytest_collection_finish(session: pytest.Session) -> None:
    """After collection, before any boot: the stored runs --benchmark-compare chose, against what is
    known of the selected entries (device, model content, configuration, workload): a run named that
    none of them can be compared with is one line, exit code 4; each entry says what it is compared
    with.  (Under pytest-xdist the controller did this at session start.)"""
    gs = session.config.stash.get(RUN_KEY, None)
    if gs is not None and not distribution.worker(session.config) and not distribution.workers(session.config) \
            and not session.config.option.collectonly:
        gs.check_compared(session.items)



# -- collection ----------------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "llmgate_config" not in metafunc.fixturenames:
        return
    run = metafunc.config.stash[RUN_KEY]
    try:
        entries, error = run.matrix.entries, None
    except MatrixError as e:          # a pytest_llmgate_matrix hook's (the file was checked at session start)
        entries, error = (), str(e)
    if error is not None:
        pytest.fail(error, pytrace=False)     # outside the except: no "During handling of …" chain
    per_boot = metafunc.definition.get_closest_marker("boots") is not None
    if per_boot:
        # the one place an entry's K and each test's boot are decided; passed down as llmgate_boot
        params = []
        for cfg in entries:
            plan = run.pool.plan(cfg)
            params += [pytest.param(cfg, k, id=plan.test_id(cfg, k), marks=[pytest.mark.gpu] if cfg.device == "gpu" else [])
                       for k in plan.boots()]
        metafunc.parametrize(("llmgate_config", "llmgate_boot"), params, scope="session")
        return
    params = [pytest.param(cfg, id=cfg.id, marks=[pytest.mark.gpu] if cfg.device == "gpu" else [])
              for cfg in entries]
    metafunc.parametrize("llmgate_config", params, scope="session")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Markers go on at collection, before -m selects: `engine` on every test that uses a
    matrix entry, and a skip with the reason on `gpu` tests when there is no GPU."""
    if "llmgate_config" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.engine)
        lever = item.get_closest_marker("lever")
        callspec = getattr(item, "callspec", None)
        cfg = callspec.params.get("llmgate_config") if callspec else None
        if cfg is not None and cfg.device == "gpu" and cfg.tensor_parallel > 1 and not hardware.why_no_gpu():
            have = len(hardware.visible_gpus())
            if have < cfg.tensor_parallel:
                worker = distribution.worker(item.config)
                item.add_marker(pytest.mark.skip(reason=(
                    f"{cfg.id}: tensor_parallel = {cfg.tensor_parallel} needs {cfg.tensor_parallel} GPUs, "
                    + (f"pytest-xdist worker {worker} has {have} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}): "
                       f"run tensor-parallel entries without -n, or with fewer workers" if worker else
                       f"{have} visible"))))
        if lever is not None and cfg is not None:
            if lever.args[0] not in cfg.levers:
                off = f"{cfg.id}: lever '{lever.args[0]}' is not enabled for this entry (levers = {list(cfg.levers)})"
                item.add_marker(pytest.mark.skip(reason=off))
                # the reports count an entry's skips apart from those of levers it does not enable: by this, not by the text
                item.user_properties.append((LEVER_OFF, lever.args[0]))
            else:
                why = engines.get(cfg.engine).cannot(lever.args[0], cfg)
                if why:
                    item.add_marker(pytest.mark.skip(reason=f"{cfg.id}: {why}"))
    if item.get_closest_marker("gpu") is not None:
        no_gpu = hardware.why_no_gpu()
        if no_gpu:      # first, so it is the reason given: without a GPU nothing else decides
            item.add_marker(pytest.mark.skip(reason=no_gpu), append=False)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Each entry's tests run together, entries in matrix order (a reference before the entries
    # that name it), and an entry's K measurement boots go forward: every test on boot 1 (those
    # measured once included), then the per-boot tests on boot 2, …  pytest's own grouping of
    # session parameters does not give this once some tests also carry `llmgate_boot` (seen in
    # CI: the reference entry's lever tests ran last, after the entries that compare with it).
    # A stable sort: tests of no entry keep their place after the entry test before them.
    def entry_boot(item: pytest.Item) -> tuple[str, int] | None:
        callspec = getattr(item, "callspec", None)
        cfg = callspec.params.get("llmgate_config") if callspec else None
        return None if cfg is None else (cfg.id, int(callspec.params.get("llmgate_boot") or 1))

    try:
        order = {e.id: n for n, e in enumerate(config.stash[RUN_KEY].matrix.entries)}
    except (MatrixError, KeyError):
        order = {}
    keys, last = [], (-1, 0)
    for n, item in enumerate(items):
        eb = entry_boot(item)
        if eb is not None:
            last = (order.get(eb[0], len(order)), eb[1])
        keys.append((*last, n))
    items[:] = [i for _, i in sorted(zip(keys, items), key=lambda kv: kv[0])]
    # tests that boot their own servers run after every test that shares the session's servers,
    # so those boot once per session and never run beside a probe's server
    exclusive = [i for i in items if "llmgate_exclusive" in getattr(i, "fixturenames", ())]
    if exclusive:
        items[:] = [i for i in items if i not in exclusive] + exclusive


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def llmgate_run(request: pytest.FixtureRequest) -> GateRun:
    return request.config.stash[RUN_KEY]


@pytest.fixture(scope="session")
def llmgate_settings(llmgate_run: GateRun) -> Settings:
    return llmgate_run.settings


@pytest.fixture(scope="session")
def _llmgate_booted(llmgate_config: ServerConfig, llmgate_run: GateRun):
    skip = None
    try:
        handle, error = llmgate_run.pool.boot(llmgate_config), None
    except Unsupported as e:                # this machine cannot run it at all: skipped, saying why
        error, skip = None, str(e)
    except BootError as e:
        error = str(e)
    if skip is not None:
        pytest.skip(skip)
    if error is not None:
        pytest.fail(error, pytrace=False)     # outside the except: the reason once, no "During handling of …"
    try:
        yield handle
    finally:
        llmgate_run.pool.shutdown(llmgate_config.id)


@pytest.fixture(scope="session")
def llmgate_boot() -> MeasurementBoot | None:
    """Which of the entry's measurement boots a test measures (tests marked ``boots``: an int k,
    with ``of``, the entry's K in all, and ``side`` in A/B mode); None: the one up."""
    return None


@pytest.fixture
def llmgate_server(_llmgate_booted: ServerHandle, llmgate_boot: MeasurementBoot | None,
                   llmgate_run: GateRun) -> ServerHandle:
    """The running server of this test's matrix entry (booted once per run, and once per
    measurement boot for tests marked ``boots``).  In a duet, a test outside the boot pairs (quality
    checks, the client's overhead) gets side B's: the candidate's output is what they check."""
    partner = llmgate_run.pool.partner(_llmgate_booted.config.id) if llmgate_boot is None else None
    if partner is not None:
        if not partner.alive():
            pytest.fail(partner.death_report(), pytrace=False)
        return partner
    if llmgate_boot is not None and _llmgate_booted.alive():
        llmgate_run.pool.ensure_boot(_llmgate_booted.config, llmgate_boot)
    if not _llmgate_booted.alive():       # its log's tail once, with the first test that sees it
        pytest.fail(_llmgate_booted.death_report(), pytrace=False)
    return _llmgate_booted


@pytest.fixture
def llmgate_prompts(llmgate_server: ServerHandle, llmgate_run: GateRun) -> PromptMaker:
    return llmgate_run.pool.prompts(llmgate_server)


@pytest.fixture
def llmgate_exclusive(llmgate_run: GateRun) -> OwnServers:
    """For tests that boot their own servers (probes): no other server may run meanwhile
    (on a small machine an idle vLLM CPU worker still spins on its core).  Its value: where their
    logs go, their live "booting …" line, a line on the terminal, the run's boots table."""
    llmgate_run.pool.shutdown_all("the next test boots its own servers and needs the machine to itself")
    return OwnServers(llmgate_run.pool)


@pytest.fixture
def gate(request: pytest.FixtureRequest, llmgate_run: GateRun) -> Gate:
    return Gate(request.node, llmgate_run, request)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A duet's test runs once per side, at the same time, its load interleaved (``runner.duet``)."""
    gs = pyfuncitem.config.stash.get(RUN_KEY, None)
    if gs is None or not gs.settings.ab:
        return None
    return duet.call(pyfuncitem, gs) or None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """The verdict belongs to the test that measured it; what a regression costs the test (a
    confirmation run on a fresh server first) is decided by ``llmgate.runner.confirm``."""
    result = yield
    rec = item.stash.get(RECORDER_KEY, None)
    if rec is not None:
        confirm.settle(item, rec, item.config.stash[RUN_KEY].pool)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A server that died mid-test explains itself in its message (exit code and log tail):
    no traceback through the measuring code."""
    rep = yield
    if call.excinfo is not None and call.excinfo.errisinstance(ServerDied) and rep.failed:
        rep.longrepr = str(call.excinfo.value)
    return rep


# -- end of session ------------------------------------------------------------------------
def pytest_sessionfinish(session: pytest.Session) -> None:
    gs = session.config.stash.get(RUN_KEY, None)
    if gs is not None:
        gs.finish(session)


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter, config: pytest.Config):
    """llmgate's section comes after the other plugins' (pytest-benchmark's tables), and is
    written even when one of them raised (pytest-benchmark's --benchmark-compare-fail does)."""
    hidden = 0 if config.getoption("llmgate_benchmark_table") else benchmark_files.hide_benchmark_table(config)
    try:
        return (yield)
    finally:
        gs = config.stash.get(RUN_KEY, None)
        if gs is not None:
            reports.terminal_section(terminalreporter, gs.record or gs.finished_run(), hidden,
                                     config.getoption("llmgate_reference"),
                                     config.rootpath / config.getini("llmgate_baselines") / "reference")
