"""What llmgate keeps for one pytest session: settings, the matrix, the server pool, and what
the tests measured (verdicts, boots, notes, raw samples) until the report is written."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from . import metrics, server as server_mod, xdist
from . import matrix as matrix_mod
from .interrupt import Interrupts
from .load import PromptMaker
from .matrix import Matrix, MatrixError, ServerConfig
from .pool import ServerPool
from .server import ServerHandle
from .settings import Settings
from .verdict import Verdict


class GateSession:
    """Everything llmgate keeps for one pytest session."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.settings = Settings.from_config(config)
        out = config.getoption("llmgate_out") or ".llmgate"
        self.out_dir = (config.rootpath / out) if not Path(out).is_absolute() else Path(out)
        self.worker = xdist.worker(config)
        if self.worker:
            self.out_dir = self.out_dir / self.worker     # the controller merges the workers' reports
        self._matrix: Matrix | None = None
        self._matrix_error: str | None = None
        self.pool = ServerPool(lambda: self.matrix, self.out_dir / "logs", self.say, self.boots_for)
        self.servers = self.pool.servers                   # entry id → running Server
        self.boots = self.pool.boots                       # entry id → one record per boot
        self.verdicts: list[Verdict] = []                  # this process's, or (controller) the workers'
        self.lever_results: dict[tuple[str, str], dict[str, Any]] = {}   # (lever, entry id) → figures
        self.summary: dict[str, Any] | None = None
        self.notes: list[str] = []
        self.raw: dict[tuple[str, str, str], dict[str, Any]] = {}    # (config, test, key) → raw samples
        self.report_files: list[Path] = []
        self.started = time.time()
        # (entry, test, metric key) → measurement boot → that boot's repeat values (and raw samples)
        self.boot_values: dict[tuple[str, str, str], dict[int, list[float]]] = {}
        self.boot_raw: dict[tuple[str, str, str], dict[int, Any]] = {}
        self.stored_keys: dict[str, str] = {}           # baseline key → the test that recorded it
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
        """The loaded matrix, after every ``pytest_llmgate_matrix`` hook has adjusted it."""
        if self._matrix is None:
            if self._matrix_error:
                raise MatrixError(self._matrix_error)
            explicit = self.config.getoption("llmgate_matrix") or self.config.getini("llmgate_matrix") or None
            try:
                loaded = matrix_mod.load(matrix_mod.discover(self.config.rootpath, explicit))
                for adjusted in self.config.hook.pytest_llmgate_matrix(config=self.config, matrix=loaded):
                    if adjusted is not None:
                        loaded = adjusted
                self._matrix = loaded
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

    # -- the server pool, as tests and fixtures ask for it ---------------------------------
    def progress(self, cid: str, elapsed: float, last_line: str) -> None:
        self.pool.progress(cid, elapsed, last_line)

    def boot(self, cfg: ServerConfig) -> ServerHandle:
        return self.pool.boot(cfg)

    def reboot(self, cfg: ServerConfig) -> ServerHandle | None:
        return self.pool.reboot(cfg)

    def ensure_round(self, cfg: ServerConfig, k: int) -> None:
        self.pool.ensure_round(cfg, k)

    def shutdown(self, cfg_id: str) -> None:
        self.pool.shutdown(cfg_id)

    def shutdown_all(self, why: str) -> None:
        self.pool.shutdown_all(why)

    def prompts(self, handle: ServerHandle) -> PromptMaker:
        return self.pool.prompts(handle)

    def model_hash(self, cfg: ServerConfig) -> str | None:
        return self.pool.model_hash(cfg)

    def min_effect(self, metric: metrics.Metric, key: str, cfg: ServerConfig | None, item: pytest.Item) -> float:
        for source in (self.settings.min_effect, marker_min_effect(item), cfg.min_effect if cfg else {}):
            for k in (key, metric.name):
                if k in source:
                    return float(source[k])
        return metric.min_effect


SESSION_KEY = pytest.StashKey[GateSession]()


def marker_min_effect(item: pytest.Item) -> dict[str, float]:
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
