"""What llmgate keeps for one run (one pytest invocation; docs/glossary.md): settings, the matrix,
the server pool, and what the tests measured (verdicts, boots, notes, raw samples) until the report
is written."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from llmgate.store import baseline as baseline_store, fingerprint as fingerprints
from llmgate.store.finished import FinishedRun
from llmgate.device import hardware
from llmgate.core import metrics
from llmgate.report import outcome, reports
from llmgate.process import registry
from llmgate.process import server as server_mod
from llmgate.runner import distribution
from llmgate.config import matrix as matrix_mod
from llmgate.config.ids import entry_scope
from llmgate.process.interrupts import Interrupts
from llmgate.config.matrix import Matrix, MatrixError, ServerConfig
from llmgate.levers.shared import SharedFigures
from llmgate.runner.pool import ServerPool
from llmgate.runner.compare import duet as duet_compare
from llmgate.runner.compare.figure import BootFigures
from llmgate.runner.terminal import say
from llmgate.runner.settings import Settings
from llmgate.analysis.verdict import Verdict


class GateRun:
    """Everything llmgate keeps for one run: llmgate's run object (docs/glossary.md, "run")."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.settings = Settings.from_config(config)
        out = config.getoption("llmgate_out") or ".llmgate"
        self.out_dir = (config.rootpath / out) if not Path(out).is_absolute() else Path(out)
        self.worker = distribution.worker(config)
        self.shard: Any = None       # --llmgate-shard's plugin (runner.shard.ShardPlugin), set by llmgate.plugin
        if self.worker:
            self.out_dir = self.out_dir / self.worker     # the controller merges the workers' reports
        self._matrix: Matrix | None = None
        self._file_matrix: Matrix | None = None            # the file as loaded, before the hooks
        self._matrix_error: str | None = None
        self.pool = ServerPool(config, self.out_dir / "logs", self.settings)
        self.servers = self.pool.servers                   # entry id → running Server
        self.boots = self.pool.boots                       # entry id → one record per boot
        self.verdicts: list[Verdict] = []                  # this process's, or (controller) the workers'
        self.figures = SharedFigures()                     # what entries share (levers.shared)
        self.summary: dict[str, Any] | None = None
        self.notes: list[str] = []
        self.raw: dict[tuple[str, str, str], dict[str, Any]] = {}    # (config, test, key) → raw samples
        self.report_files: list[Path] = []
        self.not_saved: list[str] = []                  # why the baseline was not saved (one line each)
        self.started = time.time()
        # (entry, test, metric key) → measurement boot → what that boot measured (values, raw samples, sampling)
        self.boot_figures: dict[tuple[str, str, str], dict[int, BootFigures]] = {}
        self.entry_seconds: dict[str, float] = {}     # wall seconds of each entry's tests (the run history keeps them)
        # (entry, test) → (requests, failed) of its measurement boots before the last: their row is the last boot's
        self.request_counts: dict[tuple[str, str], tuple[int, int]] = {}
        self.stored_keys: dict[str, str] = {}           # baseline key → the test that recorded it
        self.duets = duet_compare.DuetBook()           # a duet's figures until they are judged (runner/compare/duet.py)
        self.regimes: dict[str, dict[str, Any]] = {}   # entry → regime and the evidence for it
        # the GPU sampled while a test measured (report.json's gpu_sampling): entry, test, metric key, boot
        # (or boot pair), side, and per GPU its clocks, utilisation, memory and throttle reasons
        self.gpu_sampling: list[dict[str, Any]] = []
        self.interrupts = Interrupts()
        self.interrupted: dict[str, Any] | None = None              # report.json's "interrupted"
        self.running: str | None = None                             # the test in progress
        self.finished: set[str] = set()
        self.record: FinishedRun | None = None        # the finished run as the layers below read it (finish)
        registry.record_servers_in(self.out_dir)                    # servers/<pid>.json while each runs

    # -- hooks of this run (registered as a plugin of its config) -------------------------
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # setup (a boot), call and teardown of a test of a matrix entry, added to the entry's time
        try:
            ids = [e.id for e in self.matrix.entries]
        except MatrixError:
            return
        scope = entry_scope(report.nodeid, ids)
        if scope.startswith("llmgate-entry:"):
            cid = scope.removeprefix("llmgate-entry:")
            self.entry_seconds[cid] = self.entry_seconds.get(cid, 0.0) + float(report.duration or 0.0)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        """(controller, pytest-xdist) Every test of one matrix entry goes to the same worker, in
        order, so each server boots once, and an entry goes where its reference goes (it is compared
        with what its reference measured in that process); the rest spread over the workers (one
        per GPU share)."""
        try:
            entries = self.matrix.entries
        except MatrixError:
            return None
        groups = distribution.reference_groups({e.id: e.reference for e in entries})
        return distribution.entry_scheduling(config, log, [e.id for e in entries], groups)

    def load_matrix_file(self) -> Matrix:
        """(pytest_sessionstart) Read and check the matrix file, before anything is collected or
        booted: a bad one (an unknown key or engine, a model path that does not exist, a model
        folder without a tokenizer) is one usage error, exit code 4, instead of a collection error
        in every scenario module.  Without a matrix file this is the embedded default, so a session
        of other tests is not affected.  The ``pytest_llmgate_matrix`` hooks are applied at first
        use (``matrix``), when the conftest files that implement them are loaded."""
        if self._file_matrix is None:
            explicit = self.config.getoption("llmgate_matrix") or self.config.getini("llmgate_matrix") or None
            try:
                self._file_matrix = matrix_mod.load(matrix_mod.discover(self.config.rootpath, explicit))
            except MatrixError as e:
                self._matrix_error = str(e)
                raise pytest.UsageError(str(e)) from None
        return self._file_matrix

    @property
    def matrix(self) -> Matrix:
        """The loaded matrix, after every ``pytest_llmgate_matrix`` hook has adjusted it."""
        if self._matrix is None:
            if self._matrix_error:
                raise MatrixError(self._matrix_error)
            explicit = self.config.getoption("llmgate_matrix") or self.config.getini("llmgate_matrix") or None
            try:
                loaded = self._file_matrix or matrix_mod.load(matrix_mod.discover(self.config.rootpath, explicit))
                for adjusted in self.config.hook.pytest_llmgate_matrix(config=self.config, matrix=loaded):
                    if adjusted is not None:
                        loaded = adjusted
                self._matrix = self.pool.matrix = loaded
            except MatrixError as e:
                self._matrix_error = str(e)
                raise
        return self._matrix

    def entry_fingerprint(self, cfg: ServerConfig | None, handle: server_mod.ServerHandle | None = None) -> dict[str, Any]:
        """The fingerprint a result of ``cfg`` (None: a test outside the matrix) is stored with:
        device, model content, configuration, workload, and the engine build once its server runs
        (before: the engine's name alone, which no comparison reads).  ``handle``: the server measured
        (a duet's side), else the entry's running one."""
        if handle is None:
            server = self.servers.get(cfg.id) if cfg else None
            handle = server.handle if server is not None else None
        model_hash: str | None
        engine: dict[str, Any] | None
        if handle is not None:
            model_hash, engine = handle.model_hash, dataclasses.asdict(handle.engine_info)
        else:
            model_hash = self.pool.model_hash(cfg) if cfg else None
            engine = {"engine": cfg.engine} if cfg else None
        return fingerprints.fingerprint(cfg.describe() if cfg else None, model_hash, hardware.describe(), engine,
                                        self.matrix.scenarios.workload(cfg.device if cfg else None),
                                        self.config.rootpath)

    def check_compared(self, items: list[pytest.Item] | None) -> None:
        """(after collection, before any boot; under pytest-xdist, the controller at session start,
        with every entry this machine can run) The runs --benchmark-compare chose, against what is
        known of the selected entries before their boot (``baseline.check_before_boot``): one line per
        entry, on the terminal and in the notes, saying which stored run it is compared with; a run
        named that none of them can be compared with stops the session (exit code 4)."""
        if not baseline_store.compared_spec(self.config):
            return
        try:
            entries = list(self.matrix.entries)
        except MatrixError:
            return
        if items is not None:
            selected = {cfg.id for item in items if (cs := getattr(item, "callspec", None)) is not None
                        and (cfg := cs.params.get("llmgate_config")) is not None
                        and item.get_closest_marker("skip") is None}
            entries = [e for e in entries if e.id in selected]
        elif hardware.why_no_gpu():
            entries = [e for e in entries if e.device != "gpu"]
        lines = baseline_store.check_before_boot(
            self.config, {e.id: functools.partial(self.entry_fingerprint, e) for e in entries}, hardware.describe(),
            self.settings.allow_mismatch)
        for line in lines:
            self.say(f"llmgate: {line}")
            self.note_once(line)

    def finished_run(self) -> FinishedRun:
        """The record of this run that the layers below read (``store.finished``): copies of what it
        kept, taken once its verdicts are final (``finish``)."""
        try:
            entries = list(self.matrix.entries)
        except MatrixError:
            entries = []
        hashes: dict[str, str | None] = {}
        for cid in dict.fromkeys(v.config_id for v in self.verdicts if v.samples):
            try:
                hashes[cid] = self.pool.model_hash(self.matrix.by_id(cid))
            except Exception:
                hashes[cid] = None
        return FinishedRun(
            started=self.started, worker=self.worker, argv=tuple(self.config.invocation_params.args),
            verdicts=tuple(self.verdicts), boots={cid: list(bs) for cid, bs in self.boots.items()},
            boot_values={k: {n: list(f.values) for n, f in by_boot.items()} for k, by_boot in self.boot_figures.items()},
            entry_seconds=dict(self.entry_seconds), entry_ids=tuple(e.id for e in entries),
            config_details={e.id: e.describe() for e in entries}, model_hashes=hashes,
            notes=tuple(self.notes), not_saved=tuple(self.not_saved), summary=self.summary,
            report_files=tuple(self.report_files))

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

    def min_effect(self, metric: metrics.Metric, key: str, cfg: ServerConfig | None, item: pytest.Item) -> float:
        for source in (self.settings.min_effect, marker_min_effect(item), cfg.min_effect if cfg else {}):
            for k in (key, metric.name):
                if k in source:
                    return float(source[k])
        return metric.min_effect

    def tuned(self, metric: metrics.Metric) -> metrics.Metric:
        """``metric`` with the floor ``--llmgate-min-effect METRIC=FRACTION:ABS`` gave it (its
        ``min_abs_effect``, in the metric's own unit), else ``metric`` itself."""
        floor = self.settings.min_abs_effect.get(metric.name)
        return metric if floor is None else dataclasses.replace(metric, min_abs_effect=floor)

    def finish(self, session: pytest.Session) -> None:
        """(pytest_sessionfinish) Stop every server, complete the notes, build the run's record
        (``record``: what the history and llmgate's terminal section read), append the run history,
        write report.json and summary.md (under pytest-xdist, on the controller: merged from the
        workers' reports, whose verdicts are rebuilt as Verdicts), and show the verdicts to
        ``pytest_llmgate_verdicts``."""
        try:
            self._finish(session)
        finally:
            if self.record is not None:         # completed with what the reports made of it
                self.record = self.record.with_reports(
                    verdicts=self.verdicts, boots=self.boots, notes=self.notes, not_saved=self.not_saved,
                    summary=self.summary, report_files=self.report_files)

    def _finish(self, session: pytest.Session) -> None:
        gs = self
        gs.interrupts.begin_stopping()          # a signal from here on hurries the stopping, never breaks it off
        if gs.interrupts.received and gs.interrupted is None:      # arrived after the last test
            gs.interrupted = {"signal": gs.interrupts.received, "during": None, "reason": None}
        if gs.interrupted is not None:
            if gs.servers:
                say(session.config, f"llmgate: interrupted by {gs.interrupted.get('signal') or 'an interrupt'}: "
                                    f"stopping {len(gs.servers)} server(s)")
            registry.signal_all_live()       # all at once, then wait for each
        for cid in list(gs.servers):
            gs.pool.shutdown(cid)
        for cid in registry.stop_all_live():   # a probe's or an A/B test's server, a boot broken off
            say(session.config, f"llmgate: {cid}: stopped a server the interrupted test had started")
        argv = list(session.config.invocation_params.args)
        # pytest-benchmark saved (or failed to save) before this hook: a baseline that could not be
        # written fails the run, and what was measured is still reported below
        not_saved = [line] if (line := baseline_store.save_failure(session.config)) else []
        if not_saved and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        gs.not_saved = list(not_saved)
        if gs.interrupted is not None:          # a duet cut short: what both sides finished is still judged
            duet_compare.judge_cut(gs)
        # the regime is known once an entry's decode window ran, maybe after its other verdicts
        gs.verdicts[:] = [dataclasses.replace(v, regime=gs.regimes[v.config_id]["regime"])
                          if not v.regime and v.config_id in gs.regimes else v for v in gs.verdicts]
        single = sorted({f"{v.config_id} {v.key}" for v in gs.verdicts if v.mde_lower_bound})
        if single:
            gs.notes.append(f"{len(single)} verdict(s) compared one boot a side ({', '.join(single[:4])}"
                            f"{', …' if len(single) > 4 else ''}): the boot-to-boot noise was not measured, so their MDE "
                            f"is a lower bound and a move of one boot's size can pass for a change; run and save the "
                            f"baseline with --llmgate-boots 2 or more")
        assumed = sorted({f"{v.config_id} {v.key}" for v in gs.verdicts if v.noise_assumed and v.baseline is not None})
        if assumed:
            gs.notes.append(f"{len(assumed)} verdict(s) compared one boot a side ({', '.join(assumed[:4])}"
                            f"{', …' if len(assumed) > 4 else ''}): no boot measured the boot-to-boot noise, so "
                            f"llmgate's conservative prior for the device stood in for it (their MDE is wide: only what "
                            f"that noise cannot explain is flagged, and what it cannot rule out is inconclusive); record "
                            f"and compare with --llmgate-boots 2 or more to see smaller changes")
        if not gs.worker and not distribution.workers(session.config):
            gs.gate_exit(session)
        gs.record = record = gs.finished_run()      # the verdicts are final: what the history and the reports read
        try:
            from llmgate.store import history
            written = history.record_run(record, session.config, int(session.exitstatus))
            if written:
                say(session.config, f"llmgate: run history: {written}")
        except Exception as e:                                   # the run's results stand without it
            gs.notes.append(f"run history not written: {type(e).__name__}: {e}")
        if gs.interrupted is not None:
            gs.interrupted["not_run"] = not_run(session, gs)
            gs.notes.append(interrupted_line(gs.interrupted))
        if gs.verdicts:
            session.config.hook.pytest_llmgate_verdicts(config=session.config, verdicts=list(gs.verdicts))
        if gs.verdicts or gs.boots or ((gs.interrupted is not None or gs.shard is not None)
                                       and not distribution.workers(session.config)):
            gs.out_dir.mkdir(parents=True, exist_ok=True)
            gs.summary = summary = reports.build(
                device=hardware.describe(), settings=dataclasses.asdict(gs.settings), boots=gs.boots,
                verdicts=gs.verdicts, notes=gs.notes, raw=gs.raw, configs=gs.config_detail,
                argv=argv, exit_status=int(session.exitstatus))
            summary["worker"] = gs.worker
            summary["gpu_sampling"] = list(gs.gpu_sampling)
            if gs.shard is not None:
                summary["shard"] = gs.shard.info()        # llmgate merge reads it
            summary["interrupted"] = gs.interrupted
            summary["baseline_not_saved"] = not_saved
            gs.outcome_of(session, summary)
            gs.report_files = reports.write_all(summary, gs.out_dir,
                                               None if gs.worker else os.environ.get("GITHUB_STEP_SUMMARY"),
                                               history_dir=history_folder(session.config))
        elif distribution.workers(session.config):
            # the controller: the workers wrote their reports under out/gwN/ before they finished
            parts = []
            for f in sorted(gs.out_dir.glob("gw*/report.json")):
                if f.stat().st_mtime < gs.started:
                    continue                                    # left by an earlier run
                try:
                    parts.append(json.loads(f.read_text(encoding="utf-8")))
                except (OSError, ValueError) as e:
                    gs.notes.append(f"could not read the worker report {f}: {e}")
            if parts:
                gs.not_saved += [line for r in parts for line in r.get("baseline_not_saved") or []]
                if gs.not_saved and session.exitstatus == pytest.ExitCode.OK:
                    session.exitstatus = pytest.ExitCode.TESTS_FAILED     # a worker's baseline was not saved
                gs.summary = summary = reports.merge(parts, argv, int(session.exitstatus))
                summary["baseline_not_saved"] = list(gs.not_saved)
                summary["interrupted"] = gs.interrupted or next((r["interrupted"] for r in parts if r.get("interrupted")),
                                                                None)
                if gs.shard is not None:          # the workers collected; the controller did not
                    summary["shard"] = {**gs.shard.info(), "entries": sorted(
                        {e for r in parts for e in (r.get("shard") or {}).get("entries", [])})}
                gs.boots.update(summary["boots"])
                gs.verdicts[:] = [Verdict.from_dict(v) for v in summary["verdicts"]]      # the workers' verdicts
                gs.gate_exit(session)
                summary["exit_status"] = int(session.exitstatus)
                gs.outcome_of(session, summary)
                session.config.hook.pytest_llmgate_verdicts(config=session.config, verdicts=list(gs.verdicts))
                gs.notes = summary["notes"] + gs.notes
                gs.report_files = reports.write_all(summary, gs.out_dir, os.environ.get("GITHUB_STEP_SUMMARY"),
                                                    history_dir=history_folder(session.config))


    def compared(self) -> bool:
        """Whether this run compares: --benchmark-compare, or A/B mode's same-run comparison."""
        return bool(baseline_store.compared_spec(self.config)) or bool(self.settings.ab)

    def gate_exit(self, session: pytest.Session) -> None:
        """A comparison whose verdicts had no comparable baseline, or are inconclusive, fails the run
        (exit status 1; the tests stay passed) unless --llmgate-accept says that is expected."""
        fails = outcome.gate_failures([v.to_dict() for v in self.verdicts], self.compared(), self.settings.accept)
        if fails and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def outcome_of(self, session: pytest.Session, summary: dict[str, Any]) -> None:
        """What report.json says of the run as a whole: whether it compared, pytest's counts, the outcome."""
        summary["compared"] = self.compared()
        summary["tests"] = session_counts(session.config)
        o = outcome.outcome(summary)
        summary["outcome"] = {"status": o.status, "headline": o.headline, "lines": o.lines + ([o.fate] if o.fate else [])}


RUN_KEY = pytest.StashKey[GateRun]()


def history_folder(config: pytest.Config) -> Path | None:
    """The run history the report page charts (``--llmgate-history``; None with ``--llmgate-no-history``)."""
    from llmgate.store import history
    try:
        return history.folder_for(config)
    except (ValueError, TypeError):          # options not registered (a bare config in a test)
        return None


def session_counts(config: pytest.Config) -> dict[str, int]:
    """pytest's counts of this session, as its last line gives them (the terminal's statistics)."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(tr, "stats", None) or {}
    return {name: len([r for r in stats.get(cat, []) if getattr(r, "count_towards_summary", True)])
            for name, cat in (("passed", "passed"), ("failed", "failed"), ("errors", "error"), ("skipped", "skipped"),
                              ("xfailed", "xfailed"), ("xpassed", "xpassed"))}


def marker_min_effect(item: pytest.Item) -> dict[str, float]:
    m = item.get_closest_marker("llmgate")
    return dict(m.kwargs.get("min_effect") or {}) if m else {}


def not_run(session: pytest.Session, gs: GateRun) -> list[str] | None:
    """Collected tests that never finished, the interrupted one excluded (None under pytest-xdist,
    where this process does not know which tests were meant for it)."""
    if distribution.worker(session.config) or distribution.workers(session.config):
        return None
    running = gs.interrupted.get("during") if gs.interrupted else None
    return [i.nodeid for i in session.items if i.nodeid not in gs.finished and i.nodeid != running]


def interrupted_line(info: dict[str, Any]) -> str:
    what = f"interrupted by {info['signal']}" if info.get("signal") else f"interrupted ({info.get('reason')})"
    where = f" during {info['during']}" if info.get("during") else ""
    not_run = info.get("not_run")
    rest = f"; {len(not_run)} test(s) not run" if not_run else ""
    return f"{what}{where}: every server was stopped; what was measured is reported{rest}"
