"""A stand-in engine for the engine-free tiers: a real process that the gate boots, watches and
stops like an engine (under the watchdog, in its own process group), serving ``/health`` with
Python's http.server, and logging what a test asks of it.  ``register(folder)`` writes a
distribution under ``folder`` whose entry point names this adapter as engine ``stand-in`` (put the
folder on sys.path, or make it the cwd of a pytester session).

The process, ``python stand_in_engine.py HOST PORT MODEL [WORD…]``, logs a few INFO lines, then:
``never-ready``: keeps booting ("loading …" lines, a long one among them), never listening;
``interrupt-gate``: as never-ready, and sends SIGINT to the gate (a Ctrl-C during the boot);
otherwise it serves: ``GET /health`` is 200, ``GET /log?line=TEXT`` writes TEXT to its log.
``boot-s=S``: it boots for S seconds first (its log says when the boot began and ended, in
``time.time()``); ``alone=PATH``: a boot that finds another one of ``PATH`` under way exits 1;
``kv-profiled=N``: a boot not given its KV cache (``kv=N``, from the entry's ``kv_cache_bytes``) logs
that it sized one of N bytes, as vLLM's memory profile does; given one, it logs that size.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

NAME = "stand-in"
GATE_PID = "STAND_IN_GATE_PID"
LONG = ("(EngineCore pid=4242) INFO 03-15 16:21:44 [gpu_model_runner.py:2653] Loading weights took 0.01 GiB "
        "and 0.81 seconds; " + "the model is now warming up its compiled graphs for batch sizes 1 2 4 8 16; " * 5
        + "warm-up done")


def register(folder: Path) -> None:
    """A distribution in ``folder`` that registers this module's adapter as engine ``stand-in``."""
    info = Path(folder) / "stand_in_engine-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stand-in-engine\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[llmgate.engines]\n{NAME} = stand_in_engine:Adapter\n")


def model_folder(folder: Path) -> Path:
    """A model folder the matrix takes (a tokenizer.json in it); the stand-in loads nothing."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text("{}")
    return folder


try:
    from llmgate.engines.base import BaseAdapter, EngineInfo
except ImportError:                 # the engine process itself needs none of llmgate
    BaseAdapter = object            # type: ignore[assignment,misc]


class Adapter(BaseAdapter):          # type: ignore[misc,valid-type]
    name: ClassVar[str] = NAME

    def command(self, cfg: Any, model: Path, host: str, port: int) -> list[str]:
        kv = [f"kv={cfg.kv_cache_bytes}"] if cfg.kv_cache_bytes is not None else []
        return [sys.executable, __file__, host, str(port), str(model), *cfg.args, *kv]

    def environment(self, cfg: Any) -> dict[str, str]:
        return {GATE_PID: str(os.getpid())}

    def boots_beside(self, cfg: Any) -> bool:
        return cfg.kv_cache_bytes is not None          # as vLLM's

    def kv_cache_sized(self, log_text: str) -> int | None:
        sizes = [int(m) for m in re.findall(re.escape(KV_SIZED) + r"(\d+)", log_text)]
        return min(sizes) if sizes else None

    def info(self, http: Any, base_url: str, cfg: Any = None) -> Any:
        return EngineInfo(NAME, "0")


def _serve(host: str, port: int) -> None:
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from urllib.parse import parse_qs, urlparse

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path == "/log":
                for line in parse_qs(url.query).get("line", []):
                    print(line, flush=True)
            self.send_response(200 if url.path in ("/health", "/log") else 404)
            self.end_headers()

        def log_message(self, fmt: str, *args: Any) -> None:
            pass                    # what a test writes is the log's only text after the start

    print(f"INFO: serving on http://{host}:{port}", flush=True)
    HTTPServer((host, port), Handler).serve_forever()


BOOT_BEGAN, BOOT_ENDED = "INFO: boot began at ", "INFO: boot ended at "
KV_SIZED, KV_GIVEN = "INFO: KV cache sized by profiling memory: ", "INFO: KV cache given: "


def _boot(words: list[str]) -> None:
    opts = dict(w.split("=", 1) for w in words if "=" in w)
    lock = Path(opts["alone"]) if "alone" in opts else None
    print(f"{BOOT_BEGAN}{time.time():.3f}", flush=True)
    if lock is not None:
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            print(f"ERROR: another stand-in is booting ({lock})", flush=True)
            sys.exit(1)
        signal.signal(signal.SIGTERM, lambda *_: (lock.unlink(missing_ok=True), sys.exit(143)))
    time.sleep(float(opts.get("boot-s", 0)))
    if "kv" in opts:
        print(f"{KV_GIVEN}{opts['kv']}", flush=True)
    elif "kv-profiled" in opts:
        print(f"{KV_SIZED}{opts['kv-profiled']}", flush=True)
    if lock is not None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        lock.unlink()
    print(f"{BOOT_ENDED}{time.time():.3f}", flush=True)


def main(argv: list[str]) -> None:
    host, port, model, *words = argv
    print(f"INFO: stand-in engine {os.getpid()} loading {model}", flush=True)
    _boot(words)
    if "never-ready" in words or "interrupt-gate" in words:
        print(LONG, flush=True)
        if "interrupt-gate" in words:
            time.sleep(1.0)
            os.kill(int(os.environ[GATE_PID]), signal.SIGINT)
        while True:
            time.sleep(0.5)
            print(LONG, flush=True)
    _serve(host, int(port))


if __name__ == "__main__":
    main(sys.argv[1:])
