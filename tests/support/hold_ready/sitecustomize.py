"""Keeps a vLLM server booting until it is told to stop (the double-Ctrl-C self-test,
tests/timing/test_signals_vllm.py): put this folder on the engine's PYTHONPATH.

vLLM's API server starts its EngineCore, then calls ``serve_http`` to listen; this makes
``serve_http`` first wait (``LLMGATE_HOLD_READY_S``, default 600 s), so the boot stays "EngineCore
up, API server not ready" for as long as a test needs to signal it there, however slow the
machine.  It prints "llmgate hold: ..." to stderr (the server's log) when the hold begins, for
the test to wait on.  ``serve_http`` is in ``vllm.entrypoints.launchers.launcher`` (vLLM 0.32)
or ``vllm.entrypoints.launcher`` (earlier); a module without it says so in the log."""

import asyncio
import functools
import importlib.abc
import os
import sys

_S = float(os.environ.get("LLMGATE_HOLD_READY_S", "") or 600)
_TARGETS = ("vllm.entrypoints.launchers.launcher", "vllm.entrypoints.launcher")


def _patch(module) -> None:
    original = getattr(module, "serve_http", None)
    if original is None:
        print(f"llmgate hold: {module.__name__} has no serve_http: NOT held", file=sys.stderr, flush=True)
        return

    @functools.wraps(original)
    async def serve_http(*args, **kwargs):
        print(f"llmgate hold: serve_http waits {_S:g} s (pid {os.getpid()})", file=sys.stderr, flush=True)
        await asyncio.sleep(_S)
        return await original(*args, **kwargs)

    module.serve_http = serve_http


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _Finder())
