"""Server process lifecycle: spawn in its own process group on loopback, log to a
file, wait for readiness with progress, sample its memory, tear the whole group
down and make sure nothing is left behind.

The server gets its own process group (so the whole tree can be signalled) but
stays in the caller's Linux process session: under autogroup scheduling a new
session is a new CPU group, and on 2 cores vLLM's busy-polling EngineCore then
starved the API server's streaming (client TTFT 1.2-2.6 s against the engine's
~15 ms; docs/lab/cpu.md).

Between the gate and the engine runs ``llmgate.process.watchdog`` (in a process group of its own): the
engine dies with the process that started it even when that one is killed with SIGKILL, and
what the engine's processes leave behind is reaped.  Each running server has a record under
the output folder (``llmgate.process.strays``) so that a later run can stop one that escaped both.
Before a GPU entry boots, the GPUs' free memory is checked against the engine's budget
(``device.gpu_room.busy_gpu``): a card held by another process is named at once, not after the engine's
out-of-memory traceback.

The servers not yet stopped are kept by ``llmgate.process.registry`` (a signal or the session's
end stops them there); the ports come from ``llmgate.process.ports``, the memory and CPU meters
from ``llmgate.process.meters``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from llmgate import engines
from llmgate.device import gpu_room
from llmgate.process import logs
from llmgate.process import registry
from llmgate.process import strays
from llmgate.models import tinymodel
from llmgate.models import tokenizer
from llmgate.process import watchdog
from llmgate.engines import EngineInfo
from llmgate.process.interrupts import HURRY
from llmgate.process.logs import tail
from llmgate.process.meters import EngineCpu, MemorySampler
from llmgate.process.ports import HOST, free_port, port_in_use
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.process.proctree import Death, Tree

Progress = Callable[[str, float, str], None]  # (config id, elapsed seconds, last log line)


class BootError(RuntimeError):
    """The server did not come up; the message carries the reason and the log's tail."""

    def __init__(self, message: str, diagnosis: engines.BootDiagnosis | None = None):
        super().__init__(message)
        self.diagnosis = diagnosis


class PortInUse(BootError):
    """The engine could not bind its port: another process took it between our check and the
    engine's bind (its log says so, ``engines.port_clash``).  The boot is tried again on another port."""


class Unsupported(BootError):
    """This machine cannot run the configuration at all (``Engine.unsupported``): its tests skip,
    saying why, instead of failing; nothing was started."""


class ServerDied(RuntimeError):
    """The server process ended while it was being used."""


API_KEY_ENV = "LLMGATE_API_KEY"     # the key the servers are started with and the client sends

# after a server of this process stopped, the busy-GPU check waits this long for the memory its
# processes held to show as free (the driver releases it as they end; NVML may tell a moment later)
# before it refuses the next entry: entries of one session run one after the other on one GPU
GPU_SETTLE_S = 20.0


@dataclasses.dataclass
class ServerHandle:
    """A running server as tests see it."""

    config: ServerConfig
    base_url: str
    model_path: Path          # the model as the engine loads it (a converted copy, a .gguf file…)
    model_name: str
    tokenizer_path: Path      # the folder with tokenizer.json the prompts are counted with
    model_hash: str
    engine: engines.Engine
    engine_info: EngineInfo
    log_path: Path
    startup_s: float
    pid: int
    boot_number: int
    memory: MemorySampler
    process: subprocess.Popen = dataclasses.field(repr=False)     # the watchdog: it ends as the engine ended
    api_key: str | None = dataclasses.field(default=None, repr=False)
    tree: Tree | None = dataclasses.field(default=None, repr=False)
    # how far the log went when the server was last seen alive: its first error from there is the
    # one shown when it dies (not a later request's error about the dead engine)
    alive_at: int = dataclasses.field(default=0, repr=False)
    # where its death was first told with its log's tail (the test then running), once it was
    death_told: str | None = dataclasses.field(default=None, repr=False)

    @property
    def eos_token_id(self) -> int | None:
        return tokenizer.eos_token_id(self.tokenizer_path)

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def alive(self) -> bool:
        """False once the server, or any process it runs with (vLLM's EngineCore, its workers), has ended."""
        return self.process.poll() is None and (self.tree is None or self.tree.first_death() is None)

    def _first_death(self) -> Death | None:
        first = self.tree.first_death() if self.tree is not None else None
        code = self.process.poll()
        if first is None and code is None:
            return None
        if first is not None and self.tree is not None:
            first = self.tree.settle(first)
        if first is None or first.root:
            if code is None and first is not None:
                code = first.code
            if code is None:                     # the watchdog ends as the engine did, once it stopped the rest
                try:
                    code = self.process.wait(10)
                except subprocess.TimeoutExpired:
                    code = None
            return Death(self.pid, "server", True, code, first.seen if first else time.time())
        return first

    def death(self) -> str | None:
        """How the server died, in a few words (``exit code -9 (SIGKILL)``; ``VLLM::EngineCore (pid N)
        ended: …``); None if alive."""
        d = self._first_death()
        if d is None:
            return None
        return d.exit_words() if d.root else f"{d.title} (pid {d.pid}) ended: {d.exit_words()}"

    def check_alive(self, settle_s: float = 0.0) -> None:
        """Raise ServerDied if the server or a process of it has ended (``death_report``: the first
        time with the log's first error and its tail).  ``settle_s``: after failed requests, how long
        to give a death to show (a client can see the connection reset a moment before the kernel
        reports the process ended)."""
        # the log's size first, then whether a process ended: what the log held then was written alive
        size, d = logs.size(self.log_path), self._first_death()
        deadline = time.monotonic() + settle_s
        while d is None and time.monotonic() < deadline:
            time.sleep(0.05)
            size, d = logs.size(self.log_path), self._first_death()
        if d is None:
            self.alive_at = size
            return
        raise ServerDied(self.death_report(during_run=True))

    def death_report(self, during_run: bool = False) -> str:
        """What a test says of the dead server.  The first time: how it died (which process, its exit
        code), the first error its log has since the server was last seen alive (the engine's
        ``first_error``) and the log's tail; after that one line that points there, so a session
        whose server died shows its log once.  ``during_run``: the death interrupted this test's run."""
        d = self._first_death()
        if d is None:
            return f"{self.config.id}: the server is running"
        if self.death_told is not None:
            return (f"{self.config.id}: the server died earlier in this session ({self.death()}); its log's "
                    f"first error and tail are in the report of {self.death_told}; the log: {self.log_path}")
        current = os.environ.get("PYTEST_CURRENT_TEST", "")           # "path::test[id] (call)"
        self.death_told = current.rpartition(" (")[0] or current or "the first test that saw it"
        if not during_run:
            head = f"{self.config.id}: the server died earlier in this session ({self.death()})"
        elif d.root:
            head = (f"{self.config.id}: {self.engine.name} server (pid {self.pid}) exited with code "
                    f"{d.exit_words().removeprefix('exit code ')} during the run")
        else:
            code = self.process.poll()
            server = "is still running" if code is None else f"exited with code {code} after it"
            head = (f"{self.config.id}: the {self.engine.name} server's process {d.title} (pid {d.pid}) "
                    f"ended during the run: {d.exit_words()}; the server (pid {self.pid}) {server}")
        error = self.engine.first_error(logs.read_from(self.log_path, self.alive_at))
        first = (f"its log's first error since it was last seen alive: {error}" if error else
                 "its log has no error line since it was last seen alive")
        return f"{head}\n{first}\nlast lines of {self.log_path}:\n{tail(self.log_path)}"

    def log_tail(self, lines: int = 25) -> str:
        return tail(self.log_path, lines)

    def cpu_meter(self) -> EngineCpu:
        """``with handle.cpu_meter() as m: …; m.summary()``: CPU time the engine's processes used."""
        return EngineCpu(self.pid)

class Server:
    """Start/stop one configuration.  ``start()`` returns a ready ``ServerHandle``."""

    def __init__(self, cfg: ServerConfig, matrix: Matrix, log_dir: Path, boot_number: int = 1,
                 progress: Progress | None = None, port: int | None = None,
                 say: Callable[[str], None] | None = None):
        self.cfg, self.matrix, self.log_dir = cfg, matrix, Path(log_dir)
        self.boot_number, self.progress, self.port = boot_number, progress, port
        self.say = say or (lambda line: None)
        self.engine = engines.get(cfg.engine)
        self.proc: subprocess.Popen | None = None       # the watchdog, whose child is the engine
        self.pid: int | None = None                     # the engine's pid (and process group)
        self.handle: ServerHandle | None = None
        self.log_path: Path | None = None               # this boot's log, once it is started
        self._known_pids: set[int] = set()
        self._record: Path | None = None
        self._tree: Tree | None = None
        self.signalled = False                          # its process group was told to stop
        self._stop_lock = threading.Lock()

    # -- model -------------------------------------------------------------------------
    def _resolved(self) -> tuple[ServerConfig, Path]:
        """The configuration with its model (and draft model) as this engine loads them."""
        model = self.matrix.entry_model(self.cfg)
        if not model.exists():
            raise BootError(f"{self.cfg.id}: model path {str(model)!r} does not exist")
        why = self.engine.check_model(self.cfg, model)
        if why:
            raise BootError(f"{self.cfg.id}: {why}")
        why = self.engine.unsupported(self.cfg, model)
        if why:
            raise Unsupported(f"{self.cfg.id}: {why}")
        cfg = self.cfg
        try:
            if cfg.speculative and isinstance(cfg.speculative.get("model"), str):
                draft = self.engine.prepare_model(cfg, self.matrix.resolve_model(cfg.speculative["model"]))
                cfg = dataclasses.replace(cfg, speculative={**cfg.speculative, "model": str(draft)})
            model = self.engine.prepare_model(cfg, model)
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            raise BootError(f"{self.cfg.id}: could not prepare the model for {self.engine.name}: {e}") from None
        return cfg, model

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> ServerHandle:
        why = self.engine.unavailable(self.cfg)
        if why:
            raise BootError(f"{self.cfg.id}: {why}")
        try:
            engines.base.gpu_memory_fraction(self.cfg)     # a byte budget this card cannot give
        except ValueError as e:
            raise BootError(f"{self.cfg.id}: {e}") from None
        if self.cfg.device == "gpu":
            def check() -> str | None:
                return gpu_room.busy_gpu(self.cfg.id, self.cfg.env, self.cfg.tensor_parallel,
                                       lambda total: self.engine.gpu_budget_bytes(self.cfg, total))
            busy = check()
            settle_until = registry.last_stop() + GPU_SETTLE_S
            while busy and registry.last_stop() and time.monotonic() < settle_until and not HURRY.is_set():
                time.sleep(1.0)                 # the server stopped just before may still be releasing it
                busy = check()
            if busy:
                raise BootError(busy)
        cfg, model = self._resolved()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        last_error: PortInUse | None = None
        for attempt in range(3):  # a port taken between our check and the engine's bind: pick another
            port = self.port if (self.port and attempt == 0) else free_port()
            if self.port and attempt == 0 and port_in_use(port):
                port = free_port()
                self.say(f"llmgate: {cfg.id}: port {self.port} is in use on {HOST}; using {port} instead")
            elif attempt:
                self.say(f"llmgate: {cfg.id}: the port was taken while it booted; retrying on {port}")
            try:
                return self._start_once(cfg, model, port, attempt)
            except PortInUse as e:
                last_error = e
        assert last_error is not None
        raise last_error

    def _start_once(self, cfg: ServerConfig, model: Path, port: int, attempt: int) -> ServerHandle:
        log_path = self.log_path = self.log_dir / logs.log_name(cfg.id, self.boot_number, attempt)
        self._model = model
        cmd = self.engine.command(cfg, model, HOST, port)
        env = {**os.environ, **self.engine.environment(cfg), **cfg.env}
        api_key = os.environ.get(API_KEY_ENV) or None
        if api_key and self.engine.api_key_env:
            env[self.engine.api_key_env] = api_key          # from the environment, never on the command line
        elif api_key:
            self.say(f"llmgate: {cfg.id}: {API_KEY_ENV} is set but {self.engine.name} takes no API key from its "
                     f"environment: this server runs without one")
            api_key = None
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        base_url = f"http://{HOST}:{port}"
        sampler: MemorySampler | None = None
        try:
            with open(log_path, "wb") as log:
                log.write(("$ " + " ".join(cmd) + "\n").encode())
                log.flush()
                t0 = time.monotonic()
                registry.add(self)
                self.proc = subprocess.Popen(watchdog.command(cmd), stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=env, process_group=0)
            self.pid = self._engine_pid()
            records = registry.records_dir()
            if self.pid is not None and records is not None:
                self._record = strays.write(records, pid=self.pid, entry=cfg.id, engine=self.engine.name,
                                            cmdline=cmd, log=str(log_path), watchdog_pid=self.proc.pid)
            sampler = MemorySampler(self.pid or self.proc.pid)
            sampler.start()
            startup = self._wait_ready(base_url, log_path, t0)
            with httpx.Client(timeout=30, headers=auth) as http:
                info = self.engine.info(http, base_url, cfg)
            self._tree = Tree(self.pid or self.proc.pid)
            self._tree.adopt()
        except BaseException:
            if sampler is not None:
                sampler.stop()
            self.stop()
            raise
        self.handle = ServerHandle(
            config=self.cfg, base_url=base_url, model_path=model, model_name=str(model),
            tokenizer_path=self.matrix.tokenizer_folder(self.cfg),
            model_hash=tinymodel.model_hash(model), engine=self.engine, engine_info=info, log_path=log_path,
            startup_s=startup, pid=self.pid or self.proc.pid, boot_number=self.boot_number, memory=sampler,
            process=self.proc, api_key=api_key, tree=self._tree, alive_at=logs.size(log_path))
        return self.handle

    def _engine_pid(self, timeout_s: float = 60.0) -> int | None:
        """The engine's pid: the watchdog's child (None if the watchdog ended before it had one)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                kids = psutil.Process(self.proc.pid).children()
            except psutil.Error:
                kids = []
            if kids:
                return kids[0].pid
            if self.proc.poll() is not None:
                return None
            time.sleep(0.01)
        return None

    def _wait_ready(self, base_url: str, log_path: Path, t0: float) -> float:
        assert self.proc is not None
        deadline = t0 + self.cfg.boot_timeout_s
        next_progress = t0 + 5.0
        with httpx.Client(timeout=5) as http:
            while True:
                self._remember_children()
                code = self.proc.poll()
                if code is not None:
                    text = tail(log_path, 400)
                    diag = self.engine.diagnose_boot(text)
                    reason = diag.reason if diag else f"exited with code {code}"
                    error = PortInUse if engines.port_clash(text) else BootError
                    raise error(f"{self.cfg.id}: {self.engine.name} server exited with code {code} while booting: "
                                    f"{reason}\nlast lines of {log_path}:\n{tail(log_path)}", diag)
                if self.engine.ready(http, base_url, str(self._model)):
                    return time.monotonic() - t0
                now = time.monotonic()
                if now > deadline:
                    raise BootError(f"{self.cfg.id}: {self.engine.name} server not ready after "
                                    f"{self.cfg.boot_timeout_s:.0f} s (boot_timeout_s); last lines of {log_path}:\n"
                                    f"{tail(log_path)}")
                if self.progress and now >= next_progress:
                    self.progress(self.cfg.id, now - t0, tail(log_path, 1))
                    next_progress = now + 5.0
                time.sleep(0.25)

    def _remember_children(self) -> None:
        if self.proc is None:
            return
        try:
            for c in psutil.Process(self.pid or self.proc.pid).children(recursive=True):
                self._known_pids.add(c.pid)
        except psutil.Error:
            pass

    def signal_group(self, sig: int) -> None:
        """Signal the engine's process group (any thread)."""
        if self.pid is None:
            return
        self.signalled = True
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self) -> bool:
        return self.pid is not None and bool(self._survivors(self.pid))

    def stop(self, grace_s: float = 20.0) -> list[int]:
        """Terminate the engine's whole process group; return the pids that had to be killed after
        the grace period (cut short when a second interrupt asks the session to hurry)."""
        with self._stop_lock:
            return self._stop(grace_s)

    def _stop(self, grace_s: float) -> list[int]:
        registry.discard(self)
        if self.proc is None:
            return []
        if self._tree is not None:
            self._tree.close()                  # what ends from here on is the stop, not a failure
        self._remember_children()
        if self.handle:
            self.handle.memory.stop()
        pgid = self.pid
        if not self.signalled:                  # a second SIGTERM could break vLLM's own shutdown off
            self.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not HURRY.is_set() and self.proc.poll() is None:
            time.sleep(0.1)
        while time.monotonic() < deadline and not HURRY.is_set() and pgid is not None and self._survivors(pgid):
            time.sleep(0.2)
        killed = []
        for p in (self._survivors(pgid) if pgid is not None else []):
            try:
                p.kill()
                killed.append(p.pid)
            except psutil.Error:
                pass
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(10)                  # the watchdog ends once the engine's processes are gone
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        strays.remove(self._record)
        self._record = None
        registry.note_stopped()
        return killed

    def _survivors(self, pgid: int) -> list[psutil.Process]:
        out = []
        for pid in {pgid} | self._known_pids.copy():      # copy(): another thread may be adding
            try:
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid not in {x.pid for x in out} and os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (psutil.Error, ProcessLookupError, PermissionError):
                pass
        return out
