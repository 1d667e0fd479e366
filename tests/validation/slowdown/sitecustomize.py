"""An engine made slower on purpose, to prove what the gate can see (issue 12's validation).

Put this folder first on the engine's PYTHONPATH and set LLMGATE_SLOWDOWN_US=N: every vLLM model
step (``GPUModelRunner.execute_model`` of the V1 runner, which the CPU runner inherits, and of
the V2 runner) then waits N µs before its
forward pass, in the engine's own process — the engine really is slower, not the client path.

- On a GPU the wait is a kernel on the step's CUDA stream (``torch.cuda._sleep``), so it
  serialises with the step's own kernels (a host-side sleep could hide under asynchronous
  scheduling).  Its length in GPU cycles is calibrated once against CUDA events at the clock the
  GPU runs at, and the wait measured by CUDA events is printed to the engine's log:
  "llmgate slowdown: … µs per step (measured …)".
- On the CPU it is a busy wait of N µs (time.perf_counter), measured the same way.

The expected slowdown of a step of length t is N / (t + N); the gate's figures are checked
against that in the closing note.  Used by gpu/make-slow-launcher.sh.
"""

import importlib.abc
import os
import sys
import time

_US = float(os.environ.get("LLMGATE_SLOWDOWN_US", "0") or 0)
# the V1 runner (the CPU runner inherits it) and the V2 runner (vllm.v1.worker.gpu.model_runner,
# vLLM's default for plain decoder models on a GPU in 0.26): each has GPUModelRunner.execute_model
_TARGETS = ("vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner")
_state: dict = {}


def _wait_gpu(torch) -> None:
    cycles = _state.get("cycles")
    if cycles is None:
        # cycles per µs at the clock the GPU runs at now, from a 2 ms probe (after a warm one)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe = 2_000_000
        for _ in range(3):
            start.record()
            torch.cuda._sleep(probe)
            end.record()
            end.synchronize()
        per_us = probe / (start.elapsed_time(end) * 1000.0)
        cycles = _state["cycles"] = max(1, int(_US * per_us))
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        print(f"llmgate slowdown: {_US:g} µs per step asked, {start.elapsed_time(end) * 1000:.1f} µs measured by CUDA "
              f"events ({cycles} GPU cycles, {per_us:.0f} cycles/µs)", file=sys.stderr, flush=True)
    torch.cuda._sleep(cycles)


def _wait_cpu() -> None:
    t_end = time.perf_counter() + _US / 1e6
    while time.perf_counter() < t_end:
        pass
    if not _state.get("said"):
        _state["said"] = True
        t0 = time.perf_counter()
        t_end = t0 + _US / 1e6
        while time.perf_counter() < t_end:
            pass
        print(f"llmgate slowdown: {_US:g} µs per step asked, {(time.perf_counter() - t0) * 1e6:.1f} µs measured "
              f"(CPU busy wait)", file=sys.stderr, flush=True)


def _patch(module) -> None:
    cls = module.GPUModelRunner
    original = cls.execute_model

    def execute_model(self, *args, **kwargs):
        import torch

        on_gpu = torch.cuda.is_available() and str(getattr(self, "device", "cuda")).startswith("cuda")
        # warm-up, profiling and CUDA-graph capture steps stay as they are (a kernel captured into a
        # graph would be replayed on top of the wait)
        if kwargs.get("dummy_run") or (on_gpu and torch.cuda.is_current_stream_capturing()):
            return original(self, *args, **kwargs)
        if on_gpu:
            _wait_gpu(torch)
        else:
            _wait_cpu()
        return original(self, *args, **kwargs)

    cls.execute_model = execute_model
    print(f"llmgate slowdown: {module.__name__}.{cls.__name__}.execute_model waits {_US:g} µs per step "
          f"(pid {os.getpid()})",
          file=sys.stderr, flush=True)


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

        def patched_exec(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = patched_exec
        return spec


if _US > 0:
    sys.meta_path.insert(0, _Finder())
