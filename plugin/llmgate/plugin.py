"""pytest glue only: options, markers, matrix parametrization, fixtures and the session summary.

The work is done by the modules of the data flow: matrix → engines → server →
load → samples → stats → verdict → report (and baseline for storage).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from . import baseline as baseline_store
from . import device, engines, matrix as matrix_mod, metrics, report
from . import server as server_mod, strays
from . import interrupt
from .interrupt import Interrupts
from .load import PromptMaker
from .samples import LoadResult
from .matrix import Matrix, MatrixError, ServerConfig
from .server import BootError, Server, ServerDied, ServerHandle
from .stats import Noise, median
from .verdict import DEFAULT_ALPHA, REFUSED, REGRESSED, UNCHANGED, Verdict, judge, judge_boots

GATE_KEY = pytest.StashKey["Gate"]()
PYTEST_BENCHMARK_DEFAULT_STORAGE = "file://./.benchmarks"


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
    g.addoption("--llmgate-min-effect", action="append", default=[], metavar="METRIC=FRACTION",
                help="smallest relative change in the worse direction that counts as a regression, "
                     "e.g. decode_tok_s=0.1 (repeatable; overrides matrix entries and metric defaults)")
    g.addoption("--llmgate-reference", metavar="NAME",
                help="print this run beside published reference figures at the end "
                     "(e.g. seed-rtx4070, from baselines/reference/)")
    g.addoption("--llmgate-alpha", type=float, default=None, metavar="A",
                help=f"significance level of the regression test (default {DEFAULT_ALPHA})")
    g.addoption("--llmgate-allow-mismatch", action="store_true",
                help="compare with a baseline recorded on another device, model or configuration "
                     "(refused otherwise), with a warning")
    g.addoption("--llmgate-ab", action="append", default=[], metavar="NAME=LAUNCHER",
                help="A/B mode (tests marked `ab`): two engine environments, e.g. --llmgate-ab A=/opt/pinned/bin/python "
                     "--llmgate-ab B=/opt/nightly/bin/python (an interpreter for Python engines, a binary for "
                     "llama-server); booted alternately A B A B …, B judged against A")
    g.addoption("--llmgate-ab-rounds", type=int, default=4, metavar="N",
                help="boots per side in A/B mode (default 4: the fewest for which the rank test can reach p<0.05)")
    g.addoption("--llmgate-determinism", choices=["fail", "warn"], default="fail",
                help="a greedy output that changed against the baseline fails the test (default) or only warns")
    g.addoption("--llmgate-hypothesis-examples", type=int, default=20, metavar="N",
                help="examples per Hypothesis property of the quality tests (default 20)")
    g.addoption("--llmgate-no-confirm", action="store_true",
                help="fail on the first regressed measurement instead of re-measuring once on a fresh server")
    g.addoption("--llmgate-benchmark-table", action="store_true",
                help="also print pytest-benchmark's own table for llmgate's metrics (hidden by default: it shows "
                     "every metric as a time, tok/s as seconds per token; llmgate's verdict table is the one to read)")
    g.addoption("--llmgate-history", metavar="DIR",
                help="folder of the run history: every run appends one record (default: .llmgate/history under "
                     "the rootdir; read it with python -m llmgate.history DIR)")
    g.addoption("--llmgate-no-history", action="store_true", help="append no record to the run history")
    parser.addini("llmgate_matrix", "matrix TOML file, relative to the rootdir")
    parser.addini("llmgate_baselines", "folder for stored baselines (pytest-benchmark storage)", default="baselines")


@dataclasses.dataclass(frozen=True)
class Settings:
    repeats: int = 5
    warmup: int = 1
    boots: int | None = None
    concurrency: int = 8
    request_timeout: float = 300.0
    alpha: float = DEFAULT_ALPHA
    min_effect: dict[str, float] = dataclasses.field(default_factory=dict)
    allow_mismatch: bool = False
    confirm: bool = True
    ab: tuple[tuple[str, str], ...] = ()
    ab_rounds: int = 4
    determinism: str = "fail"
    hypothesis_examples: int = 20

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        d = cls()
        min_effect = {}
        for item in config.getoption("llmgate_min_effect") or []:
            name, sep, value = item.partition("=")
            try:
                metrics.get(name)
                min_effect[name] = float(value)
            except (KeyError, ValueError):
                raise pytest.UsageError(f"--llmgate-min-effect {item!r}: expected METRIC=FRACTION with a known metric "
                                        f"({', '.join(sorted(metrics.REGISTRY))})") from None
            if not sep:
                raise pytest.UsageError(f"--llmgate-min-effect {item!r}: expected METRIC=FRACTION")

        def opt(name, default):
            v = config.getoption(name)
            return default if v is None else v

        s = cls(repeats=opt("llmgate_repeats", d.repeats), warmup=opt("llmgate_warmup", d.warmup),
                boots=config.getoption("llmgate_boots"),
                concurrency=opt("llmgate_concurrency", d.concurrency),
                request_timeout=opt("llmgate_request_timeout", d.request_timeout),
                alpha=opt("llmgate_alpha", d.alpha), min_effect=min_effect,
                allow_mismatch=bool(config.getoption("llmgate_allow_mismatch")),
                confirm=not config.getoption("llmgate_no_confirm"),
                ab=_parse_ab(config.getoption("llmgate_ab") or []),
                ab_rounds=config.getoption("llmgate_ab_rounds"),
                determinism=config.getoption("llmgate_determinism"),
                hypothesis_examples=config.getoption("llmgate_hypothesis_examples"))
        if s.boots is not None and s.boots < 1:
            raise pytest.UsageError("--llmgate-boots must be >= 1")
        if s.repeats < 1 or s.concurrency < 1 or s.warmup < 0:
            raise pytest.UsageError("--llmgate-repeats and --llmgate-concurrency must be >= 1, --llmgate-warmup >= 0")
        return s


def _parse_ab(items: list[str]) -> tuple[tuple[str, str], ...]:
    sides = []
    for item in items:
        name, sep, launcher = item.partition("=")
        if not sep or not name or not launcher:
            raise pytest.UsageError(f"--llmgate-ab {item!r}: expected NAME=LAUNCHER (an interpreter or a binary)")
        sides.append((name, launcher))
    if sides and len(sides) != 2:
        raise pytest.UsageError(f"--llmgate-ab: give exactly two sides (baseline first, candidate second), got {len(sides)}")
    if len({n for n, _ in sides}) != len(sides):
        raise pytest.UsageError("--llmgate-ab: the two sides need different names")
    return tuple(sides)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engine: the test boots and measures a real serving engine")
    config.addinivalue_line("markers", "gpu: the test needs an NVIDIA GPU (skipped without one)")
    config.addinivalue_line("markers", "lever(name): the test measures a lever scenario; it runs only on matrix "
                                       "entries whose `levers` list the name (others skip, with the reason, before any boot)")
    config.addinivalue_line("markers", "ab: A/B mode test; runs only with --llmgate-ab A=... --llmgate-ab B=...")
    config.addinivalue_line("markers", "boots: the test measures each of its entry's K boots (--llmgate-boots): "
                                       "test[entry-bootK] on the K-th; its metrics are judged after the last boot")
    config.addinivalue_line("markers", "llmgate(min_effect=None): per-test llmgate settings, "
                                       "e.g. min_effect={'ttft_p95': 0.2}")
    # pytest-benchmark stores under baselines/ unless the user chose a storage.
    if getattr(config.option, "benchmark_storage", None) == PYTEST_BENCHMARK_DEFAULT_STORAGE:
        config.option.benchmark_storage = "file://" + str(config.rootpath / config.getini("llmgate_baselines"))
    # pytest-benchmark skips a file it cannot parse with a warning and compares with the next
    # one; a gate must stop instead, naming the file, before pytest-benchmark loads anything.
    storage = getattr(config.option, "benchmark_storage", "") or ""
    if storage.startswith("file://") and (config.getoption("benchmark_compare", None)
                                          or config.getoption("benchmark_save", None)
                                          or config.getoption("benchmark_autosave", None)):
        try:
            baseline_store.validate_storage(Path(storage[len("file://"):]))
        except baseline_store.BaselineError as e:
            raise pytest.UsageError(str(e)) from None
    # llmgate finds the compared runs in every machine-id folder of the storage (pytest_sessionstart)
    baseline_store.take_over_compare(config)
    _xdist_configure(config)
    config.stash[SESSION_KEY] = gs = GateSession(config)
    config.pluginmanager.register(gs, "llmgate-session")      # its pytest_* methods are hooks of this config
    # SIGTERM and SIGHUP (a time limit, a cancelled job, a closed terminal) end the session like Ctrl-C
    gs.interrupts.install()
    gs.interrupts.on_stuck.append(_end_servers_of_a_stuck_session)


def _end_servers_of_a_stuck_session(signal_name: str) -> None:
    """(a helper thread, interrupt.STUCK_S after the first signal) Servers that the session has
    not begun to stop by then are ended from here: its main thread is stuck somewhere."""
    ended = server_mod.end_unsignalled()
    if ended:
        print(f"llmgate: {signal_name}: the session had not stopped {', '.join(ended)} "
              f"{interrupt.STUCK_S:.0f} s later; ended from a helper thread", file=sys.__stderr__, flush=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    gs = config.stash.get(SESSION_KEY, None)
    if gs is not None:
        gs.interrupts.uninstall()
        if config.pluginmanager.is_registered(gs):
            config.pluginmanager.unregister(gs)


def pytest_sessionstart(session: pytest.Session) -> None:
    gs = session.config.stash.get(SESSION_KEY, None)
    if gs is not None and not xdist_worker(session.config):
        base = gs.out_dir
        for line in strays.sweep(base):            # servers a killed run left behind
            say(session.config, line)
    bs = baseline_store.benchmark_session(session.config)
    if bs is not None:
        worker = xdist_worker(session.config)
        if worker:
            baseline_store.enable_on_xdist_worker(session.config, worker)
        runs = baseline_store.load_compared(session.config)
        if runs is not None and not worker:
            if runs:
                bs.logger.info("Comparing against benchmarks from: " + ", ".join(runs) + " (llmgate: each metric "
                               "with the newest of these whose fingerprint matches)")
            else:
                spec = baseline_store.compared_spec(session.config)
                which = "no stored run" if spec is True else f"no stored run matches {spec!r}"
                say(session.config, f"llmgate: --benchmark-compare: {which} in {bs.storage}; every metric "
                                    f"is reported without a baseline (record one with --benchmark-save=NAME)")
        baseline_store.make_save_atomic(bs.storage)


# -- pytest-xdist: one worker per GPU share --------------------------------------------------
def xdist_worker(config: pytest.Config) -> str | None:
    """This process's pytest-xdist worker id (gw0, gw1 …); None in the controller or without xdist."""
    wi = getattr(config, "workerinput", None)
    return wi.get("workerid") if wi else None


def xdist_workers(config: pytest.Config) -> int:
    """How many workers this controller starts (0: not distributing)."""
    if getattr(config, "workerinput", None) is not None or getattr(config.option, "dist", "no") == "no":
        return 0
    return len(getattr(config.option, "tx", None) or [])


def _xdist_configure(config: pytest.Config) -> None:
    """Controller: there must be a GPU share for every worker.  Worker: pin its GPUs
    (CUDA_VISIBLE_DEVICES, inherited by the servers it starts)."""
    workers = xdist_workers(config)
    if workers:
        visible = device.visible_gpus()
        if visible and workers > len(visible):
            raise pytest.UsageError(f"llmgate gives each pytest-xdist worker its own GPU(s): -n {workers} but "
                                    f"{len(visible)} GPU(s) visible; use -n {len(visible)} or fewer (or "
                                    f"CUDA_VISIBLE_DEVICES= to run CPU entries only)")
    wi = getattr(config, "workerinput", None)
    if wi is not None and wi.get("llmgate_gpus") is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = wi["llmgate_gpus"]
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"      # CUDA's numbering = NVML's


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(controller, pytest-xdist) What a worker needs before it configures: its GPU share."""
    config = node.config
    visible = device.visible_gpus()
    if visible:
        n = max(1, xdist_workers(config))
        k = int(str(node.gateway.id).removeprefix("gw") or 0) % n
        node.workerinput["llmgate_gpus"] = ",".join(str(i) for i in device.worker_share(visible, k, n))


def entry_scope(nodeid: str, entry_ids: list[str]) -> str:
    """The matrix entry a test id belongs to (its ``[...]`` holds the entry id, alone or joined
    to other parameters' ids by ``-``); the test id itself for tests of no entry."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    params = nodeid[nodeid.index("[") + 1:-1]
    for cid in sorted(entry_ids, key=len, reverse=True):
        if params == cid or params.startswith(cid + "-") or params.endswith("-" + cid) or f"-{cid}-" in params:
            return "llmgate-entry:" + cid
    return nodeid


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """(controller, pytest-xdist) Every test of one matrix entry goes to the same worker, in
    order, so each server boots once; the entries spread over the workers (one per GPU share)."""
    try:
        ids = [e.id for e in config.stash[SESSION_KEY].matrix.entries]
    except (MatrixError, KeyError):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EntryScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return entry_scope(nodeid, ids)

    return EntryScheduling(config, log)


# -- session state -------------------------------------------------------------------------
class GateSession:
    """Everything llmgate keeps for one pytest session."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.settings = Settings.from_config(config)
        out = config.getoption("llmgate_out") or ".llmgate"
        self.out_dir = (config.rootpath / out) if not Path(out).is_absolute() else Path(out)
        self.worker = xdist_worker(config)
        if self.worker:
            self.out_dir = self.out_dir / self.worker     # the controller merges the workers' reports
        self._matrix: Matrix | None = None
        self._matrix_error: str | None = None
        self.servers: dict[str, Server] = {}
        self.boots: dict[str, list[dict[str, Any]]] = {}
        self.verdicts: list[Verdict] = []
        self._prompt_makers: dict[str, PromptMaker] = {}
        self.lever_results: dict[tuple[str, str], dict[str, Any]] = {}   # (lever, entry id) → figures
        self.summary: dict[str, Any] | None = None
        self._model_hashes: dict[str, str | None] = {}
        self.notes: list[str] = []
        self.raw: dict[tuple[str, str, str], dict[str, Any]] = {}    # (config, test, key) → raw samples
        self.report_files: list[Path] = []
        self.started = time.time()
        self.worker_boots: dict[str, list[dict[str, Any]]] = {}     # pytest-xdist controller: the workers'
        self.worker_verdicts: list[dict[str, Any]] = []
        self.rounds: dict[str, int] = {}            # entry → which of its K measurement boots is up
        # (entry, test, metric key) → measurement boot → that boot's repeat values (and raw samples)
        self.boot_values: dict[tuple[str, str, str], dict[int, list[float]]] = {}
        self.boot_raw: dict[tuple[str, str, str], dict[int, Any]] = {}
        self.regimes: dict[str, dict[str, Any]] = {}   # entry → regime and the evidence for it
        self.interrupts = Interrupts()
        self.interrupted: dict[str, Any] | None = None              # report.json's "interrupted"
        self.running: str | None = None                             # the test in progress
        self.finished: set[str] = set()
        server_mod.record_servers_in(self.out_dir)                  # servers/<pid>.json while each runs

    def boots_for(self, cfg: ServerConfig) -> int:
        """How many boots a run of this entry spans."""
        if self.settings.boots is not None:
            return self.settings.boots
        if cfg.boots is not None:
            return cfg.boots
        return 3 if cfg.device == "gpu" else 1

    def ensure_round(self, cfg: ServerConfig, k: int) -> None:
        """Measurement boot ``k`` of this entry is up: reboot until it is (boots go forward only)."""
        current = self.rounds.setdefault(cfg.id, 1)
        while current < k:
            handle = self.reboot(cfg)
            if handle is None:
                break
            current += 1
            self.rounds[cfg.id] = current
            say(self.config, f"llmgate: {cfg.id}: measurement boot {current} of {self.boots_for(cfg)}")

    # -- hooks of this session (registered as a plugin of its config) ---------------------
    @pytest.hookimpl(tryfirst=True)         # before the terminal's traceback rendering, which can take a while
    def pytest_keyboard_interrupt(self, excinfo) -> None:
        """pytest caught the interrupt (Ctrl-C, or SIGTERM/SIGHUP through llmgate's handlers): from
        here on a further signal makes the stopping hurry instead of breaking it off."""
        self.interrupts.begin_stopping()
        sig = self.interrupts.received
        if sig is None:
            # pytest's own stops (collection errors, -x, --maxfail, pytest.exit) come this way too
            if not excinfo.errisinstance(KeyboardInterrupt) or excinfo.errisinstance(pytest.Session.Interrupted):
                return
            sig = "SIGINT"
        if self.interrupted is None:
            self.interrupted = {"signal": sig, "during": self.running, "reason": str(excinfo.value) or None}

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.running = nodeid

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.finished.add(nodeid)
        self.running = None

    @property
    def matrix(self) -> Matrix:
        if self._matrix is None:
            if self._matrix_error:
                raise MatrixError(self._matrix_error)
            explicit = self.config.getoption("llmgate_matrix") or self.config.getini("llmgate_matrix") or None
            try:
                self._matrix = matrix_mod.load(matrix_mod.discover(self.config.rootpath, explicit))
            except MatrixError as e:
                self._matrix_error = str(e)
                raise
        return self._matrix

    def config_detail(self, cid: str) -> dict[str, Any] | None:
        try:
            return self.matrix.by_id(cid).describe()
        except (KeyError, MatrixError):
            return None

    def say(self, line: str) -> None:
        say(self.config, line)

    def note_once(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)

    def progress(self, cid: str, elapsed: float, last_line: str) -> None:
        say(self.config, f"llmgate: booting {cid}: {elapsed:.0f} s … {last_line.strip()[-150:]}")

    def boot(self, cfg: ServerConfig) -> ServerHandle:
        n = len(self.boots.get(cfg.id, [])) + 1
        record: dict[str, Any] = {"boot": n, "engine": cfg.engine, "startup_s": None}
        self.boots.setdefault(cfg.id, []).append(record)
        server = Server(cfg, self.matrix, self.out_dir / "logs", boot_number=n, progress=self.progress, port=cfg.port,
                        say=self.say)
        say(self.config, f"llmgate: booting {cfg.id} ({cfg.engine}, boot {n} of this session)")
        try:
            handle = server.start()
        except BootError:
            record["log"] = str(self.out_dir / "logs")
            raise
        self.servers[cfg.id] = server
        record.update(startup_s=handle.startup_s, version=handle.engine_info.version, log=str(handle.log_path))
        say(self.config, f"llmgate: {cfg.id} ready in {handle.startup_s:.1f} s "
                         f"({handle.engine_info.engine} {handle.engine_info.version}) at {handle.base_url}")
        return handle

    def model_hash(self, cfg: ServerConfig) -> str | None:
        key = f"{cfg.model}|{cfg.load_format}"       # a dummy-weights entry's model is config-only
        if key not in self._model_hashes:
            try:
                from . import tinymodel
                self._model_hashes[key] = tinymodel.model_hash(self.matrix.entry_model(cfg))
            except OSError:
                self._model_hashes[key] = None
        return self._model_hashes[key]

    def reboot(self, cfg: ServerConfig) -> ServerHandle | None:
        """Stop this configuration's server and boot a fresh one; the handle tests hold is updated
        in place (so fixtures keep pointing at the live server).  None when it was not running."""
        server = self.servers.get(cfg.id)
        if server is None or server.handle is None:
            return None
        old = server.handle
        self.shutdown(cfg.id)
        new = self.boot(cfg)
        for f in dataclasses.fields(ServerHandle):
            setattr(old, f.name, getattr(new, f.name))
        self.servers[cfg.id].handle = old
        return old

    def shutdown_all(self, why: str) -> None:
        for cid in list(self.servers):
            say(self.config, f"llmgate: stopping {cid}: {why}")
            self.shutdown(cid)

    def shutdown(self, cfg_id: str) -> None:
        server = self.servers.pop(cfg_id, None)
        if server is not None:
            killed = server.stop()
            if killed:
                say(self.config, f"llmgate: {cfg_id}: killed {len(killed)} process(es) that outlived SIGTERM: {killed}")

    def prompts(self, handle: ServerHandle) -> PromptMaker:
        key = str(handle.tokenizer_path)
        if key not in self._prompt_makers:
            self._prompt_makers[key] = PromptMaker(handle.tokenizer_path)
        return self._prompt_makers[key]

    def min_effect(self, metric: metrics.Metric, key: str, cfg: ServerConfig | None, item: pytest.Item) -> float:
        for source in (self.settings.min_effect, _marker_min_effect(item), cfg.min_effect if cfg else {}):
            for k in (key, metric.name):
                if k in source:
                    return float(source[k])
        return metric.min_effect


SESSION_KEY = pytest.StashKey[GateSession]()


def _marker_min_effect(item: pytest.Item) -> dict[str, float]:
    m = item.get_closest_marker("llmgate")
    return dict(m.kwargs.get("min_effect") or {}) if m else {}


def say(config: pytest.Config, line: str) -> None:
    """A progress line on the terminal, visible even while output is captured."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    capman = config.pluginmanager.get_plugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line(line)
    else:
        tr.write_line(line)


# -- the per-test recorder -----------------------------------------------------------------
class Gate:
    """Records a test's metrics into the baseline store and judges them against the baseline."""

    def __init__(self, item: pytest.Item, session: GateSession):
        self.item, self.session = item, session
        self.verdicts: list[Verdict] = []
        self.stored: list[Any] = []            # pytest-benchmark entries this test added
        self.first_measurement: list[Verdict] | None = None
        self.notes: list[str] = []
        self.confirm = True
        self.request_counts = [0, 0]            # requests sent, failed (Gate.requests)

    @property
    def config_entry(self) -> ServerConfig | None:
        callspec = getattr(self.item, "callspec", None)
        return callspec.params.get("llmgate_config") if callspec else None

    def provenance(self) -> dict[str, Any]:
        """What every stored result carries: configuration, engine, model, device, settings, memory."""
        st = self.session.settings
        out: dict[str, Any] = {"device": device.describe(),
                               "settings": {"repeats": st.repeats, "warmup": st.warmup,
                                            "request_timeout_s": st.request_timeout}}
        cfg = self.config_entry
        if cfg is None:
            return out
        out["config"] = cfg.describe()
        server = self.session.servers.get(cfg.id)
        if server is not None and server.handle is not None:
            h = server.handle
            out.update(engine=dataclasses.asdict(h.engine_info), model_path=str(h.model_path),
                       model_hash=h.model_hash, startup_s=h.startup_s, boot=h.boot_number,
                       peak_rss_bytes=h.memory.peak(), engine_log=h.engine.read_log(h.log_tail(3000)))
        return out

    # -- lever scenarios: figures shared between an entry and its reference ----------------
    def require_lever(self, lever: str) -> ServerConfig:
        """This test's matrix entry, which must take part in ``lever`` (tests carry
        ``@pytest.mark.lever(name)``, so other entries were skipped before booting)."""
        cfg = self.config_entry
        if cfg is None or lever not in cfg.levers:
            raise RuntimeError(f"require_lever({lever!r}): the test needs @pytest.mark.lever({lever!r}) and a matrix "
                               f"entry that lists it")
        return cfg

    def remember(self, lever: str, figures: dict[str, Any]) -> None:
        cfg = self.config_entry
        assert cfg is not None
        self.session.lever_results[(lever, cfg.id)] = figures

    def reference(self, lever: str) -> tuple[ServerConfig | None, dict[str, Any] | None]:
        """The reference entry of this test's entry and its figures for ``lever`` in this session."""
        cfg = self.config_entry
        if cfg is None or cfg.reference is None:
            return None, None
        ref = self.session.matrix.by_id(cfg.reference)
        return ref, self.session.lever_results.get((lever, ref.id))

    def fingerprint(self) -> dict[str, Any]:
        cfg = self.config_entry
        server = self.session.servers.get(cfg.id) if cfg else None
        handle = server.handle if server is not None else None
        if handle is not None:
            model_hash, engine = handle.model_hash, dataclasses.asdict(handle.engine_info)
        else:
            model_hash = self.session.model_hash(cfg) if cfg else None
            engine = {"engine": cfg.engine} if cfg else None
        return baseline_store.fingerprint(cfg.describe() if cfg else None, model_hash, device.describe(), engine,
                                          self.session.matrix.scenarios.workload())

    def measurement_boot(self) -> tuple[int, int] | None:
        """(k, K): this test measures boot k of its entry's K (tests marked ``boots``); None otherwise."""
        cfg = self.config_entry
        callspec = getattr(self.item, "callspec", None)
        k = callspec.params.get("llmgate_boot") if callspec else None
        if cfg is None or k is None:
            return None
        return int(k), self.session.boots_for(cfg)

    def record(self, metric: metrics.Metric, values: list[float], variant: str | None = None,
               raw: dict[str, Any] | None = None, **info: Any) -> Verdict | None:
        """Record ``values``: this boot's repeat-level measurements in the metric's natural unit.

        In a test marked ``boots`` whose entry spans K boots, boots 1 … K−1 only keep their values
        (None is returned); on boot K all K go into the baseline store as one entry and are judged
        against the stored baseline's boots, if one is compared with and its fingerprint matches."""
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"{metric.name}: no values to record")
        key = metric.name + (f"@{variant}" if variant else "")
        cfg = self.config_entry
        test = getattr(self.item, "originalname", self.item.name)
        boots, mb = [values], self.measurement_boot()
        if mb is not None and cfg is not None:
            k, n_boots = mb
            slot = (cfg.id, test, key)
            self.session.boot_values.setdefault(slot, {})[k] = values
            self.session.boot_raw.setdefault(slot, {})[k] = raw
            if k < n_boots:
                self.session.say(f"llmgate: {cfg.id} {key}: boot {k} of {n_boots}: {metric.display(median(values))} "
                                 f"(median of {len(values)}); judged after boot {n_boots}")
                return None
            done = self.session.boot_values[slot]
            boots = [done[i] for i in sorted(done)]
            if any(self.session.boot_raw[slot].get(i) is not None for i in done):
                raw = {"boots": [self.session.boot_raw[slot].get(i) for i in sorted(done)]}
        fp = self.fingerprint()
        extra = {**self.provenance(), **info, "fingerprint": fp}
        if raw is not None:
            extra["raw"] = raw
        base = baseline_store.baseline(self.item.config, baseline_store.node_key(self.item), key, fp,
                                       self.session.settings.allow_mismatch)
        base_boots = baseline_store.baseline_boots(base[1]) if base else None
        notes, refused = [], []
        if base is None:
            why = baseline_store.why_no_baseline(self.item.config, baseline_store.node_key(self.item), key, fp)
            if why:
                notes.append(why)
                self.session.note_once(f"{cfg.id if cfg else self.item.name}: {why}")
        if base is not None:
            base_info = base[1]["extra_info"][baseline_store.EXTRA_KEY]
            base_fp = base_info.get("fingerprint") or {}
            refused = baseline_store.fingerprint_mismatch(base_fp, fp)
            change = baseline_store.engine_change(base_fp, fp)
            if change:
                notes.append(change)
            if base_info.get("schema", baseline_store.SCHEMA_VERSION) < 3:
                notes.append("baseline of schema 2: its values read as one boot without a noise model "
                             "(re-record it with --benchmark-save and --llmgate-boots)")
            if refused and self.session.settings.allow_mismatch:
                notes.append("NOT COMPARABLE, compared anyway (--llmgate-allow-mismatch): " + "; ".join(refused))
                self.item.warn(pytest.PytestWarning(f"{key}: compared with a baseline from another setup: "
                                                    + "; ".join(refused)))
                refused = []
        prior = baseline_store.baseline_noise(base[1]) if base is not None and not refused else None
        verdict = judge_boots(metric, key, cfg.id if cfg else self.item.name, boots, None if refused else base_boots,
                              self.session.min_effect(metric, key, cfg, self.item), self.session.settings.alpha,
                              base[0] if base else None, prior=prior)
        noise = Noise.of(boots).pooled(prior)
        self.stored.append(baseline_store.store(self.item, metric, key, boots, extra, noise.as_dict()))
        regime = self.session.regimes.get(cfg.id, {}).get("regime", "") if cfg else ""
        verdict = dataclasses.replace(verdict, test=test, note="; ".join(notes), regime=regime)
        base_raw = (baseline_store.unpack_raw(base[1]["extra_info"][baseline_store.EXTRA_KEY].get("raw"))
                    if base is not None else None)
        if raw is not None or base_raw is not None:
            self.session.raw[(verdict.config_id, verdict.test, key)] = {"now": raw, "baseline": base_raw}
        if refused:
            verdict = dataclasses.replace(verdict, status=REFUSED, note="; ".join(refused))
        self.verdicts.append(verdict)
        self.session.verdicts.append(verdict)
        return verdict

    def requests(self, *results: LoadResult) -> None:
        """Account for every request of a measurement.  A failed one (HTTP error, malformed
        stream, timeout) fails the test at once, naming the errors; the test's share of failed
        requests becomes a verdict ("regressed" when any failed, whatever the baseline)."""
        samples = [s for r in results for s in r.samples]
        failed = [s for s in samples if not s.ok]
        self.request_counts[0] += len(samples)
        self.request_counts[1] += len(failed)
        if failed:
            v = self.requests_verdict()
            errors = sorted({(s.error or "unknown error")[:300] for s in failed})
            label = ", ".join(sorted({r.label for r in results if r.label})) or "measurement"
            cfg = self.config_entry
            server = self.session.servers.get(cfg.id) if cfg else None
            h = server.handle if server is not None else None
            if h is not None:
                try:
                    h.check_alive(settle_s=1.0)
                except ServerDied as e:          # the engine died: that is the failure, the requests followed
                    pytest.fail(f"{e}\n{len(failed)} of {len(samples)} requests ({label}) failed with it",
                                pytrace=False)
            pytest.fail(f"{v.config_id}: {len(failed)} of {len(samples)} requests failed ({label}); failed requests "
                        f"are counted, never dropped:\n" + "\n".join(f"  {e}" for e in errors[:8]),
                        pytrace=False)

    def requests_verdict(self) -> Verdict:
        total, failed = self.request_counts
        cfg = self.config_entry
        v = judge(metrics.FAILED_SHARE, metrics.FAILED_SHARE.name, cfg.id if cfg else self.item.name,
                  [failed / total], None)
        v = dataclasses.replace(v, test=getattr(self.item, "originalname", self.item.name),
                                status=REGRESSED if failed else UNCHANGED, note=f"{failed} of {total} requests failed")
        self.verdicts.append(v)
        self.session.verdicts.append(v)
        self.request_counts = [0, 0]
        return v

    def attach(self, verdicts: list[Verdict], confirm: bool = False) -> None:
        """Verdicts judged elsewhere (A/B mode) become this test's: it fails if one regressed.
        ``confirm=False``: no confirmation run (an A/B comparison controls drift by design)."""
        test = getattr(self.item, "originalname", self.item.name)
        for v in verdicts:
            v = dataclasses.replace(v, test=test)
            self.verdicts.append(v)
            self.session.verdicts.append(v)
        self.confirm = self.confirm and confirm

    def baseline_info(self, metric: metrics.Metric, variant: str | None = None) -> dict[str, Any] | None:
        """What the compared baseline stored with a metric (its extra_info), when it is comparable."""
        key = metric.name + (f"@{variant}" if variant else "")
        base = baseline_store.baseline(self.item.config, baseline_store.node_key(self.item), key, self.fingerprint(),
                                       self.session.settings.allow_mismatch)
        if base is None:
            return None
        info = base[1]["extra_info"][baseline_store.EXTRA_KEY]
        if (baseline_store.fingerprint_mismatch(info.get("fingerprint") or {}, self.fingerprint())
                and not self.session.settings.allow_mismatch):
            return None
        return info

    def note(self, text: str) -> None:
        """Something the reader of the results must know (an unsupported figure…): shown in the summary."""
        cfg = self.config_entry
        self.notes.append(text)
        self.session.notes.append(f"{cfg.id if cfg else self.item.name}: {text}")

    @property
    def regressions(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.failed]

    @property
    def refusals(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == REFUSED]

    def start_confirmation(self) -> list[Verdict]:
        """Set the first measurement aside (kept in the report, dropped from storage) before re-measuring."""
        first = list(self.verdicts)
        bs = baseline_store.benchmark_session(self.item.config)
        for meta in self.stored:
            if bs is not None and meta in bs.benchmarks:
                bs.benchmarks.remove(meta)
        self.stored.clear()
        for v in first:
            if v in self.session.verdicts:
                self.session.verdicts.remove(v)
        self.verdicts.clear()
        self.first_measurement = first
        return first


# -- collection ----------------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "llmgate_config" not in metafunc.fixturenames:
        return
    session = metafunc.config.stash[SESSION_KEY]
    try:
        entries = session.matrix.entries
    except MatrixError as e:
        pytest.fail(str(e), pytrace=False)
    per_boot = metafunc.definition.get_closest_marker("boots") is not None
    if per_boot:
        params = [pytest.param(cfg, k, id=cfg.id if session.boots_for(cfg) == 1 else f"{cfg.id}-boot{k}",
                               marks=[pytest.mark.gpu] if cfg.device == "gpu" else [])
                  for cfg in entries for k in range(1, session.boots_for(cfg) + 1)]
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
        if cfg is not None and cfg.device == "gpu" and cfg.tensor_parallel > 1 and not device.why_no_gpu():
            have = len(device.visible_gpus())
            if have < cfg.tensor_parallel:
                worker = xdist_worker(item.config)
                item.add_marker(pytest.mark.skip(reason=(
                    f"{cfg.id}: tensor_parallel = {cfg.tensor_parallel} needs {cfg.tensor_parallel} GPUs, "
                    + (f"pytest-xdist worker {worker} has {have} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}): "
                       f"run tensor-parallel entries without -n, or with fewer workers" if worker else
                       f"{have} visible"))))
        if lever is not None and cfg is not None:
            if lever.args[0] not in cfg.levers:
                item.add_marker(pytest.mark.skip(reason=f"{cfg.id}: lever '{lever.args[0]}' is not enabled for this "
                                                        f"entry (levers = {list(cfg.levers)})"))
            else:
                why = engines.get(cfg.engine).cannot(lever.args[0], cfg)
                if why:
                    item.add_marker(pytest.mark.skip(reason=f"{cfg.id}: {why}"))
    if item.get_closest_marker("ab") is not None and not item.config.stash[SESSION_KEY].settings.ab:
        item.add_marker(pytest.mark.skip(reason="A/B mode: give two engine environments with "
                                                "--llmgate-ab A=LAUNCHER --llmgate-ab B=LAUNCHER"))
    if item.get_closest_marker("gpu") is not None:
        no_gpu = device.why_no_gpu()
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
        order = {e.id: n for n, e in enumerate(config.stash[SESSION_KEY].matrix.entries)}
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
def llmgate_session(request: pytest.FixtureRequest) -> GateSession:
    return request.config.stash[SESSION_KEY]


@pytest.fixture(scope="session")
def llmgate_settings(llmgate_session: GateSession) -> Settings:
    return llmgate_session.settings


@pytest.fixture(scope="session")
def _llmgate_booted(llmgate_config: ServerConfig, llmgate_session: GateSession):
    try:
        handle = llmgate_session.boot(llmgate_config)
    except BootError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield handle
    finally:
        llmgate_session.shutdown(llmgate_config.id)


@pytest.fixture(scope="session")
def llmgate_boot() -> int | None:
    """Which of the entry's measurement boots a test measures (tests marked ``boots``); None: the one up."""
    return None


@pytest.fixture
def llmgate_server(_llmgate_booted: ServerHandle, llmgate_boot: int | None, llmgate_session: GateSession) -> ServerHandle:
    """The running server of this test's matrix entry (booted once per session, and once per
    measurement boot for tests marked ``boots``)."""
    if llmgate_boot is not None and _llmgate_booted.alive():
        llmgate_session.ensure_round(_llmgate_booted.config, llmgate_boot)
    if not _llmgate_booted.alive():
        pytest.fail(f"{_llmgate_booted.config.id}: the server died earlier in this session "
                    f"({_llmgate_booted.death()}); last lines of {_llmgate_booted.log_path}:\n"
                    f"{_llmgate_booted.log_tail()}", pytrace=False)
    return _llmgate_booted


@pytest.fixture
def llmgate_prompts(llmgate_server: ServerHandle, llmgate_session: GateSession) -> PromptMaker:
    return llmgate_session.prompts(llmgate_server)


@pytest.fixture
def llmgate_exclusive(llmgate_session: GateSession) -> GateSession:
    """For tests that boot their own servers (probes): no other server may run meanwhile
    (on a small machine an idle vLLM CPU worker still spins on its core)."""
    llmgate_session.shutdown_all("the next test boots its own servers and needs the machine to itself")
    return llmgate_session


@pytest.fixture
def gate(request: pytest.FixtureRequest, llmgate_session: GateSession) -> Gate:
    g = Gate(request.node, llmgate_session)
    request.node.stash[GATE_KEY] = g
    return g


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """The verdict belongs to the test that measured it.  A regression is re-measured once on
    a fresh server (confirmation run) and fails only if the re-measurement regresses too."""
    result = yield
    g = item.stash.get(GATE_KEY, None)
    if g is None:
        return result
    if g.request_counts[0]:
        g.requests_verdict()          # all requests succeeded: one row saying how many there were
    if g.refusals:
        lines = "\n".join("  " + v.line() for v in g.refusals)
        pytest.fail(f"refusing to compare with {g.refusals[0].baseline_source} (pass --llmgate-allow-mismatch to "
                    f"compare anyway):\n{lines}", pytrace=False)
    if not g.regressions:
        return result
    mb = g.measurement_boot()
    if mb is not None and mb[1] > 1:
        g.confirm = False           # the verdict spans the entry's boots already
    if not (g.session.settings.confirm and g.confirm):
        _fail_regressed(g.regressions, "")
    first = g.start_confirmation()
    first_bad = [v for v in first if v.failed]
    cfg = g.config_entry
    handle = g.session.reboot(cfg) if cfg is not None else None
    where = f"on a fresh server (boot {handle.boot_number})" if handle is not None else "once more"
    say(item.config, f"llmgate: {item.nodeid}: {len(first_bad)} metric(s) regressed; confirmation run {where}")
    item.runtest()
    if g.request_counts[0]:
        g.requests_verdict()
    confirmed = [v for v in g.regressions if v.key in {f.key for f in first_bad}]
    if confirmed:
        firsts = {v.key: v for v in first_bad}
        _fail_regressed(confirmed, f"first measurement and the confirmation run {where} both regressed; first run:\n"
                        + "\n".join("  " + firsts[v.key].line() for v in confirmed) + "\nconfirmation run:\n")
    for v in first_bad:
        note = f"{v.key}: first measurement regressed ({v.change:+.1%}), the confirmation run {where} did not"
        g.note(note)
        item.warn(pytest.PytestWarning(f"llmgate: {note}"))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A server that died mid-test explains itself in its message (exit code and log tail):
    no traceback through the measuring code."""
    rep = yield
    if call.excinfo is not None and call.excinfo.errisinstance(ServerDied) and rep.failed:
        rep.longrepr = str(call.excinfo.value)
    return rep


def _fail_regressed(verdicts: list[Verdict], preface: str) -> None:
    lines = "\n".join("  " + v.line() for v in verdicts)
    pytest.fail(f"performance regression against {verdicts[0].baseline_source}:\n{preface}{lines}", pytrace=False)


# -- end of session ------------------------------------------------------------------------
def pytest_sessionfinish(session: pytest.Session) -> None:
    gs = session.config.stash.get(SESSION_KEY, None)
    if gs is None:
        return
    gs.interrupts.begin_stopping()          # a signal from here on hurries the stopping, never breaks it off
    if gs.interrupts.received and gs.interrupted is None:      # arrived after the last test
        gs.interrupted = {"signal": gs.interrupts.received, "during": None, "reason": None}
    if gs.interrupted is not None:
        if gs.servers:
            say(session.config, f"llmgate: interrupted by {gs.interrupted.get('signal') or 'an interrupt'}: "
                                f"stopping {len(gs.servers)} server(s)")
        server_mod.signal_all_live()       # all at once, then wait for each
    for cid in list(gs.servers):
        gs.shutdown(cid)
    for cid in server_mod.stop_all_live():   # a probe's or an A/B test's server, a boot broken off
        say(session.config, f"llmgate: {cid}: stopped a server the interrupted test had started")
    argv = list(session.config.invocation_params.args)
    # the regime is known once an entry's decode window ran, maybe after its other verdicts
    gs.verdicts[:] = [dataclasses.replace(v, regime=gs.regimes[v.config_id]["regime"])
                      if not v.regime and v.config_id in gs.regimes else v for v in gs.verdicts]
    single = sorted({f"{v.config_id} {v.key}" for v in gs.verdicts if "lower bound" in v.mde_basis})
    if single:
        gs.notes.append(f"{len(single)} verdict(s) compared one boot a side ({', '.join(single[:4])}"
                        f"{', …' if len(single) > 4 else ''}): the boot-to-boot noise was not measured, so their MDE "
                        f"is a lower bound and a move of one boot's size can pass for a change; run and save the "
                        f"baseline with --llmgate-boots 2 or more")
    try:
        from . import history
        written = history.record_session(gs, int(session.exitstatus))
        if written:
            say(session.config, f"llmgate: run history: {written}")
    except Exception as e:                                   # the run's results stand without it
        gs.notes.append(f"run history not written: {type(e).__name__}: {e}")
    if gs.interrupted is not None:
        gs.interrupted["not_run"] = _not_run(session, gs)
        gs.notes.append(_interrupted_line(gs.interrupted))
    if gs.verdicts or gs.boots or (gs.interrupted is not None and not xdist_workers(session.config)):
        gs.out_dir.mkdir(parents=True, exist_ok=True)
        gs.summary = summary = report.build(
            device=device.describe(), settings=dataclasses.asdict(gs.settings), boots=gs.boots,
            verdicts=gs.verdicts, notes=gs.notes, raw=gs.raw, configs=gs.config_detail,
            argv=argv, exit_status=int(session.exitstatus))
        summary["worker"] = gs.worker
        summary["interrupted"] = gs.interrupted
        gs.report_files = report.write_all(summary, gs.out_dir,
                                           None if gs.worker else os.environ.get("GITHUB_STEP_SUMMARY"))
    elif xdist_workers(session.config):
        # the controller: the workers wrote their reports under out/gwN/ before they finished
        parts = []
        for f in sorted(gs.out_dir.glob("gw*/report.json")):
            if f.stat().st_mtime < gs.started:
                continue                                    # left by an earlier session
            try:
                parts.append(json.loads(f.read_text(encoding="utf-8")))
            except (OSError, ValueError) as e:
                gs.notes.append(f"could not read the worker report {f}: {e}")
        if parts:
            gs.summary = summary = report.merge(parts, argv, int(session.exitstatus))
            summary["interrupted"] = gs.interrupted or next((r["interrupted"] for r in parts if r.get("interrupted")),
                                                            None)
            gs.worker_boots = summary["boots"]
            gs.worker_verdicts = summary["verdicts"]
            gs.notes = summary["notes"] + gs.notes
            gs.report_files = report.write_all(summary, gs.out_dir, os.environ.get("GITHUB_STEP_SUMMARY"))


def _not_run(session: pytest.Session, gs: GateSession) -> list[str] | None:
    """Collected tests that never finished, the interrupted one excluded (None under pytest-xdist,
    where this process does not know which tests were meant for it)."""
    if xdist_worker(session.config) or xdist_workers(session.config):
        return None
    running = gs.interrupted.get("during") if gs.interrupted else None
    return [i.nodeid for i in session.items if i.nodeid not in gs.finished and i.nodeid != running]


def _interrupted_line(info: dict[str, Any]) -> str:
    what = f"interrupted by {info['signal']}" if info.get("signal") else f"interrupted ({info.get('reason')})"
    where = f" during {info['during']}" if info.get("during") else ""
    not_run = info.get("not_run")
    rest = f"; {len(not_run)} test(s) not run" if not_run else ""
    return f"{what}{where}: every server was stopped; what was measured is reported{rest}"


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter, config: pytest.Config):
    """llmgate's section comes after the other plugins' (pytest-benchmark's tables), and is
    written even when one of them raised (pytest-benchmark's --benchmark-compare-fail does)."""
    hidden = 0 if config.getoption("llmgate_benchmark_table") else baseline_store.hide_benchmark_table(config)
    try:
        return (yield)
    finally:
        _write_summary(terminalreporter, config, hidden)


def _skipped_entries(terminalreporter, gs: GateSession) -> list[str]:
    """For each matrix entry none of whose tests ran (every GPU entry on a machine without a GPU):
    one line per reason, with how many tests it skipped (an entry's own choice of levers left out:
    -rs lists those)."""
    try:
        ids = [e.id for e in gs.matrix.entries]
    except MatrixError:
        return []
    ran: set[str] = set()
    counts: dict[tuple[str, str], int] = {}
    for category, reports in terminalreporter.stats.items():
        for rep in reports:
            scope = entry_scope(getattr(rep, "nodeid", None) or "", ids)
            if not scope.startswith("llmgate-entry:"):
                continue
            cid = scope.removeprefix("llmgate-entry:")
            if category in ("passed", "failed", "error", "xfailed", "xpassed"):
                ran.add(cid)
            elif category == "skipped" and isinstance(getattr(rep, "longrepr", None), tuple):
                reason = str(rep.longrepr[2]).removeprefix("Skipped: ")
                if "is not enabled for this entry" not in reason:
                    counts[(cid, reason)] = counts.get((cid, reason), 0) + 1
    return [f"{cid}: {n} test(s) skipped: {reason}" for (cid, reason), n in counts.items() if cid not in ran]


def _write_summary(terminalreporter, config: pytest.Config, hidden: int = 0) -> None:
    gs = config.stash.get(SESSION_KEY, None)
    if gs is None:
        return
    boots = gs.boots or gs.worker_boots                     # the workers' under pytest-xdist
    verdicts: list[Any] = list(gs.verdicts) or list(gs.worker_verdicts)
    skipped = _skipped_entries(terminalreporter, gs)
    if not (verdicts or boots or skipped):
        return
    tr = terminalreporter
    tr.section("llmgate")
    for line in skipped:
        tr.write_line(line, yellow=True)
    if hidden:
        tr.write_line(f"pytest-benchmark's table of llmgate's {hidden} metric(s) is not shown: it prints each as a "
                      f"time, tok/s as seconds per token (--llmgate-benchmark-table shows it); read this one")
    if boots:
        total = sum(len(v) for v in boots.values())
        tr.write_line(f"boots this session: {total} ({len(boots)} configuration(s))")
        tr.write_line(report.boot_table(boots))
    if verdicts:
        tr.write_line("")
        tr.write_line(report.verdict_table(verdicts))
        if gs.notes:
            tr.write_line("")
            tr.write_line("notes:")
            for n in gs.notes:
                tr.write_line("  " + n)
        ref_name = config.getoption("llmgate_reference")
        if ref_name and gs.summary:
            from . import reference
            tr.write_line("")
            try:
                tr.write_line(reference.table(reference.load(ref_name, (config.rootpath / "baselines" / "reference",)),
                                              gs.summary))
            except (FileNotFoundError, ValueError) as e:
                tr.write_line(f"llmgate: --llmgate-reference: {e}", red=True)
        regressed = [v for v in gs.verdicts if v.failed]
        regressed_elsewhere = [v for v in gs.worker_verdicts if v["status"] == REGRESSED]
        if gs.report_files:
            tr.write_line("")
            tr.write_line("reports: " + ", ".join(str(f) for f in gs.report_files))
        if regressed or regressed_elsewhere:
            tr.write_line("")
            tr.write_line(f"{len(regressed) + len(regressed_elsewhere)} regression(s):", red=True, bold=True)
            for v in regressed:
                tr.write_line("  " + v.line(), red=True)
            for v in regressed_elsewhere:
                show = metrics.get(v["key"]).display
                tr.write_line(f"  {v['config']} {v['key']} ({v['label']}, {v['better']} is better): baseline "
                              f"{show(v['baseline']['median'])} → now {show(v['now']['median'])}, change "
                              f"{v['change']:+.1%}; regressed [{v['method']}]" + (f"; {v['note']}" if v['note'] else ""),
                              red=True)
