"""The session's servers: one per matrix entry (two in a duet: side A's and side B's, resident
together), booted on first use, rebooted for each measurement boot (or boot pair) or a
confirmation run, stopped at the end (or when a test needs the machine to itself).  Every boot is
recorded (boot number, engine, version, start-up, log, A/B mode's side; a boot that failed has no
start-up, one an interrupt broke off says so).  The engines' logs carry the session's name
(``process.logs``): those of the last ten sessions are kept."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest

from llmgate.engines import get as engine_adapter
from llmgate.device import gpu_room
from llmgate.runner.boots import EntryBoots, MeasurementBoot, boot_config, side_config
from llmgate.runner.settings import Settings
from llmgate.runner.terminal import boot_progress, say
from llmgate.load.workloads import PromptMaker
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.process import logs
from llmgate.process.server import BootError, Server, ServerHandle, Unsupported


OWN_LAUNCHER = "the entry's own launcher"     # a side of --llmgate-pinned that runs what the entry would


class ServerPool:
    """The running servers of a session, by entry id, and the record of every boot."""

    def __init__(self, config: pytest.Config, log_dir: Path, settings: Settings):
        self.config, self.log_dir = config, log_dir
        self.settings = settings
        # A/B mode's sides: measurement boot k of an entry boots with its side's launcher; () none
        self.sides = settings.ab
        self.matrix: Matrix | None = None                     # the session's, once it is loaded
        self.servers: dict[str, Server] = {}
        self.partners: dict[str, Server] = {}                 # a duet: entry → side B's server (side A's in servers)
        self._plans: dict[str, EntryBoots] = {}
        self.boots: dict[str, list[dict[str, Any]]] = {}      # entry → one record per boot
        self.pairs_booted: set[str] = set()                   # a duet: entries whose first boot pair is up
        self.kv_sized: dict[str, dict[str, int]] = {}         # a duet: entry → side → the KV cache its boot sized
        self.entries: dict[str, ServerConfig] = {}            # entry id → the matrix's configuration (a
                                                              # handle's is its boot's: a side's launcher, KV cache)
        self.boot_up: dict[str, int] = {}                      # entry → which of its K measurement boots is up
        self._prompt_makers: dict[str, PromptMaker] = {}
        self._model_hashes: dict[str, str | None] = {}
        self.log_stamp = logs.session_stamp()                 # this session's part of its logs' names
        logs.name_by_session(self.log_stamp)
        self._pruned = False

    def logs_ready(self) -> Path:
        """(before a boot) The logs folder, the logs of sessions before the last ten removed (once)."""
        if not self._pruned:
            self._pruned = True
            logs.name_by_session(self.log_stamp)
            logs.prune(self.log_dir)
        return self.log_dir

    def say(self, line: str) -> None:
        say(self.config, line)

    def _matrix(self) -> Matrix:
        if self.matrix is None:
            raise RuntimeError("the server pool was asked to boot before the session's matrix was loaded")
        return self.matrix

    def progress(self, cid: str, elapsed: float, last_line: str) -> None:
        """What a booting server reports (``Server(progress=…)``): the live ``booting …`` line."""
        self.say(boot_progress(cid, elapsed, last_line))

    def handle(self, cid: str) -> ServerHandle | None:
        """The handle of entry ``cid``'s running server (None when none runs)."""
        server = self.servers.get(cid)
        return server.handle if server is not None else None

    def plan(self, cfg: ServerConfig) -> EntryBoots:
        """The entry's measurement boots (``EntryBoots.decide``), decided once a session: where tests
        are parametrized and where they boot, the same answer (a duet that does not fit says why)."""
        if cfg.id not in self._plans:
            self._plans[cfg.id] = plan = EntryBoots.decide(self.settings, cfg, self._room_for_two)
            if plan.fallback:
                self.say(f"llmgate: {cfg.id}: no duet, alternating boots instead: {plan.fallback}")
        return self._plans[cfg.id]

    @staticmethod
    def _room_for_two(cfg: ServerConfig) -> str | None:
        if cfg.device != "gpu":
            return None
        adapter = engine_adapter(cfg.engine)
        return gpu_room.room_for_two(cfg.id, cfg.env, cfg.tensor_parallel,
                                     lambda total: adapter.gpu_budget_bytes(cfg, total))

    def partner(self, cid: str) -> ServerHandle | None:
        """A duet: the handle of side B's server of entry ``cid`` (side A's is ``handle``)."""
        server = self.partners.get(cid)
        return server.handle if server is not None else None

    def boot(self, cfg: ServerConfig) -> ServerHandle:
        """Boot entry ``cfg`` (the configuration of its measurement boot now up; in a duet both sides)."""
        cfg = self.entries.setdefault(cfg.id, cfg)
        if self.sides and self.plan(cfg).duet:
            return self._boot_pair(cfg)
        if self.sides and cfg.id not in self.boots:
            # A/B mode: an entry's first boot of a session compiles and fills caches (on the H200 it came
            # out 1.8% slower on decode and 4% at c=8 than the five boots after it), and it would always
            # be side A's: it is booted once, not measured, and stopped, so that neither side carries it
            self.say(f"llmgate: {cfg.id}: a warm-up boot first (A/B mode: the first boot of a session is not measured)")
            self._boot(cfg, warmup=True)
            self.shutdown(cfg.id)
        return self._boot(cfg)

    def _boot_pair(self, cfg: ServerConfig) -> ServerHandle:
        """A duet's boot pair, left running together: side A's handle is returned, side B's is
        ``partner``.  The two servers boot at once where neither boot depends on the other
        (``boot_together``), else one after the other (A first on odd pairs, B first on even ones, so
        that neither side is always the one booted on a fresher machine)."""
        k = self.boot_up.get(cfg.id, 1)
        order = list(self.sides) if k % 2 else list(self.sides)[::-1]
        servers: dict[str, Server] = {}
        sized = self.boot_together(cfg)
        if sized is not None:
            self.say(f"llmgate: {cfg.id}: booting both sides at once (" + (
                "the entry fixes its KV cache)" if not sized else "each side's KV cache fixed at the size its first "
                "boot sized: " + ", ".join(f"{name} {sized[name] / (1 << 30):.2f} GiB" for name, _ in self.sides) + ")"))
            try:
                started = self._start_together([self._server(cfg, side=side, pair=k, kv_cache_bytes=sized.get(side[0]))
                                                 for side in order])
                servers = {name: server for (name, _), server in zip(order, started)}
            except Unsupported:
                raise
            except BootError as e:
                first = str(e).splitlines()[0]
                self.say(f"llmgate: {cfg.id}: boot pair {k} did not come up booted at once ({first}); "
                         f"booting its sides one after the other instead")
        if not servers:
            try:
                for side in order:
                    server, record = self._server(cfg, side=side, pair=k)
                    self._start(server, record)
                    servers[side[0]] = server
                    self._learn_kv_cache(cfg, side[0], server, record)
            except BaseException:
                for server in servers.values():
                    server.stop()
                raise
        self.servers[cfg.id] = servers[self.sides[0][0]]
        self.partners[cfg.id] = servers[self.sides[1][0]]
        self.pairs_booted.add(cfg.id)
        handle = self.servers[cfg.id].handle
        assert handle is not None
        return handle

    def boot_together(self, cfg: ServerConfig) -> dict[str, int] | None:
        """Whether a duet boots its pair's two servers at once, and with what: None where it boots
        them one after the other, else the KV cache each side is given (empty where the entry fixes
        its own).  At once where the engine says neither boot sizes anything from the memory the other
        is taking (``boots_beside``: vLLM where the entry fixes its KV cache, or where each side's
        first boot said what it sized, ``_learn_kv_cache``, and is given that size): the pair boots in
        the time of one.  The entry's first pair of a session still boots one side after the other:
        its first boot fills the engine's caches (compiled graphs), which the second then reads
        instead of the two writing them at once."""
        if cfg.id not in self.pairs_booted:
            return None
        adapter = engine_adapter(cfg.engine)
        if cfg.kv_cache_bytes is not None:
            return {} if adapter.boots_beside(cfg) else None
        sized = self.kv_sized.get(cfg.id, {})
        if all(name in sized and adapter.boots_beside(dataclasses.replace(cfg, kv_cache_bytes=sized[name]))
               for name, _ in self.sides):
            return {name: sized[name] for name, _ in self.sides}
        return None

    def _learn_kv_cache(self, cfg: ServerConfig, side: str, server: Server, record: dict[str, Any]) -> None:
        """A duet side booted on its own, where the entry leaves the KV cache to the engine: the size
        its boot gave the cache (``kv_cache_sized``, from its log), kept for the side's later boots,
        which then size nothing from the memory the other side takes and may boot beside it
        (``boot_together``).  The first such boot of a side is kept; its record says what it sized."""
        if cfg.kv_cache_bytes is not None or side in self.kv_sized.get(cfg.id, {}) or server.log_path is None:
            return
        try:
            text = server.log_path.read_text(errors="replace")
        except OSError:
            return
        size = engine_adapter(cfg.engine).kv_cache_sized(text)
        if size:
            self.kv_sized.setdefault(cfg.id, {})[side] = size
            record["kv_cache_sized"] = size

    def _start_together(self, prepared: list[tuple[Server, dict[str, Any]]]) -> list[Server]:
        """Start the prepared servers at once (a thread each) and wait for all; the servers, in order.  A
        boot that fails stops the others at once (their records say so) and its error is raised; an
        interrupt stops them all."""
        errors: list[BaseException] = []
        lock = threading.Lock()

        def start(server: Server, record: dict[str, Any]) -> None:
            try:
                self._start(server, record)
            except BaseException as e:          # noqa: BLE001 - raised in the caller's thread below
                with lock:
                    first = not errors
                    errors.append(e)
                if first:
                    for other, other_record in prepared:
                        if other is not server:
                            other_record["side"] += ", stopped: the other side's boot failed"
                            other.stop()

        threads = [threading.Thread(target=start, args=item, daemon=True) for item in prepared]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        except BaseException:
            for server, _ in prepared:
                server.stop()
            raise
        if errors:
            for server, _ in prepared:
                server.stop()           # also one that had not started its process when the other failed
            raise errors[0]
        return [server for server, _ in prepared]

    def _boot(self, cfg: ServerConfig, warmup: bool = False) -> ServerHandle:
        """Boot entry ``cfg``'s server (A/B mode's side of the measurement boot now up); ``warmup``:
        a boot that is not measured (its record says so)."""
        server, record = self._server(cfg, warmup=warmup)
        handle = self._start(server, record)
        self.servers[cfg.id] = server
        return handle

    def _server(self, cfg: ServerConfig, warmup: bool = False, side: tuple[str, str] | None = None,
                pair: int | None = None, kv_cache_bytes: int | None = None) -> tuple[Server, dict[str, Any]]:
        """The server of the next boot of ``cfg``, not started, and its boot record; ``side`` (name,
        launcher) and ``pair``: a duet's side of boot pair ``pair``; ``kv_cache_bytes``: the KV cache
        it is given (the size the side's first boot sized), where the entry leaves it to the engine."""
        n = len(self.boots.get(cfg.id, [])) + 1
        side_name: str | None
        if side is not None:
            run_cfg, side_name = side_config(cfg, side[1]), side[0]
        else:
            run_cfg, side_name = boot_config(cfg, self.sides, self.boot_up.get(cfg.id, 1))
        record: dict[str, Any] = {"boot": n, "engine": cfg.engine, "startup_s": None}
        if kv_cache_bytes is not None:      # the fingerprint stays the entry's: the same cache, sized once
            run_cfg = dataclasses.replace(run_cfg, kv_cache_bytes=kv_cache_bytes)
            record["kv_cache_bytes"] = kv_cache_bytes
        if side_name is not None:
            record["side"] = side_name if pair is None else f"{side_name} (pair {pair})"
        if warmup:
            record["side"] = "warm-up, not measured"
        self.boots.setdefault(cfg.id, []).append(record)
        server = Server(run_cfg, self._matrix(), self.logs_ready(), boot_number=n, progress=self.progress,
                        port=cfg.port, say=self.say)
        self.say(f"llmgate: booting {cfg.id} ({cfg.engine}, boot {n} of this session"
                 + (f", side {side_name}: {run_cfg.launcher or OWN_LAUNCHER}" if side_name is not None else "") + ")")
        return server, record

    def _start(self, server: Server, record: dict[str, Any]) -> ServerHandle:
        """Start a prepared server and complete its boot record (a failed boot keeps its log's path)."""
        cid, run_cfg = server.cfg.id, server.cfg
        try:
            handle = server.start()
        except BootError:
            record["log"] = str(server.log_path or self.log_dir)
            raise
        except KeyboardInterrupt:           # Ctrl-C (or SIGTERM, SIGHUP: process.interrupts) during the boot
            record.update(interrupted=True, log=str(server.log_path or self.log_dir))
            raise
        record.update(startup_s=handle.startup_s, version=handle.engine_info.version, log=str(handle.log_path))
        if handle.engine_info.commit:
            record["commit"] = handle.engine_info.commit
        if run_cfg.launcher:
            record["launcher"] = run_cfg.launcher
        self.say(f"llmgate: {cid} ready in {handle.startup_s:.1f} s "
                 f"({handle.engine_info.engine} {handle.engine_info.version}) at {handle.base_url}")
        return handle

    def reboot(self, cfg: ServerConfig) -> ServerHandle | None:
        """Stop this configuration's server and boot a fresh one; the handle tests hold is updated
        in place (so fixtures keep pointing at the live server).  None when it was not running."""
        cfg = self.entries.get(cfg.id, cfg)
        server = self.servers.get(cfg.id)
        if server is None or server.handle is None:
            return None
        old, old_partner = server.handle, self.partner(cfg.id)
        self.shutdown(cfg.id)
        new = self._boot_pair(cfg) if old_partner is not None else self._boot(cfg)
        for f in dataclasses.fields(ServerHandle):
            setattr(old, f.name, getattr(new, f.name))
        self.servers[cfg.id].handle = old
        if old_partner is not None:
            new_partner = self.partners[cfg.id].handle
            for f in dataclasses.fields(ServerHandle):
                setattr(old_partner, f.name, getattr(new_partner, f.name))
            self.partners[cfg.id].handle = old_partner
        return old

    def ensure_boot(self, cfg: ServerConfig, k: MeasurementBoot) -> None:
        """Measurement boot ``k`` of this entry is up: reboot until it is (boots go forward only)."""
        current = self.boot_up.setdefault(cfg.id, 1)
        while current < k:
            self.boot_up[cfg.id] = current + 1          # the boot below is boot current + 1 (its side's launcher)
            handle = self.reboot(cfg)
            if handle is None:
                self.boot_up[cfg.id] = current
                break
            current += 1
            self.say(f"llmgate: {cfg.id}: measurement boot {'pair ' if k.plan.duet else ''}{current} of "
                     f"{k.plan.per_side}")

    def shutdown(self, cfg_id: str) -> None:
        for server in (self.servers.pop(cfg_id, None), self.partners.pop(cfg_id, None)):
            if server is not None:
                killed = server.stop()
                if killed:
                    self.say(f"llmgate: {cfg_id}: killed {len(killed)} process(es) that outlived SIGTERM: {killed}")

    def shutdown_all(self, why: str) -> None:
        for cid in list(self.servers):
            self.say(f"llmgate: stopping {cid}: {why}")
            self.shutdown(cid)

    def prompts(self, handle: ServerHandle) -> PromptMaker:
        """Exact-length prompts in the server's tokenizer (one maker per tokenizer)."""
        key = str(handle.tokenizer_path)
        if key not in self._prompt_makers:
            self._prompt_makers[key] = PromptMaker(handle.tokenizer_path)
        return self._prompt_makers[key]

    def model_hash(self, cfg: ServerConfig) -> str | None:
        key = f"{cfg.model}|{cfg.load_format}"       # a dummy-weights entry's model is config-only
        if key not in self._model_hashes:
            try:
                from llmgate.models import tinymodel
                self._model_hashes[key] = tinymodel.model_hash(self._matrix().entry_model(cfg))
            except OSError:
                self._model_hashes[key] = None
        return self._model_hashes[key]


class OwnServers:
    """The ``llmgate_exclusive`` fixture's value, for a scenario that boots servers of its own (A/B
    mode, the max_model_len probe) while the session's are stopped."""

    def __init__(self, pool: ServerPool):
        self._pool = pool

    def log_dir(self, name: str) -> Path:
        """The folder for the logs of servers the scenario boots itself (``.llmgate/logs/<name>``)."""
        return self._pool.logs_ready() / name

    def boot_progress(self, cid: str, elapsed: float, last_line: str) -> None:
        """What a booting server reports (``Server(progress=…)``): the live ``booting …`` line."""
        self._pool.progress(cid, elapsed, last_line)

    def say(self, line: str) -> None:
        """A line on the terminal now (not only in the summary)."""
        self._pool.say(line)

    def add_boots(self, label: str, rows: list[dict[str, Any]]) -> None:
        """Rows for the session's boots table, under ``label`` (``boot``, ``engine``, ``version``,
        ``startup_s``, ``log``)."""
        self._pool.boots.setdefault(label, []).extend(rows)
