"""An engine made slower on purpose, to prove what the gate can see (issue 12's validation).

Put this folder first on the engine's PYTHONPATH and set LLMGATE_SLOWDOWN_US=N: every forward pass
of vLLM's Llama model (``LlamaForCausalLM.forward``, which every model step of the V1 and V2 runners
and of the CPU runner goes through, batch of 1 or of 16) then does N µs more work, in the engine's
own process — the engine really is slower, not the client path.

- On a GPU the extra work is a kernel on the forward's CUDA stream (``torch.cuda._sleep``), so it
  serialises with the model's own kernels, and it is part of what vLLM captures into its CUDA
  graphs (the forward is called inside the capture), so it is replayed with every step of every
  batch size.  (The first version waited before ``GPUModelRunner.execute_model``: the V2 runner
  overlapped it with batched steps, c=8 was not slowed at all.)  Its length in GPU cycles is
  calibrated once, at the first forward outside a capture (vLLM's memory-profiling run), against
  CUDA events at the clock the GPU runs at then, and printed to the engine's log:
  "llmgate slowdown: … µs per forward asked, … measured by CUDA events".
- On the CPU it is a busy wait of N µs (time.perf_counter) before the forward, measured the same way.

A step of length t becomes t + N long, a slowdown of N / (t + N); the gate's figures are checked
against that in the closing note.  Used by gpu/make-slow-launcher.sh.
"""

import importlib.abc
import os
import sys
import time

_US = float(os.environ.get("LLMGATE_SLOWDOWN_US", "0") or 0)
# the model every gate entry of the GPU matrices and the CPU defaults is declared as (a Llama shape)
_TARGETS = ("vllm.model_executor.models.llama",)
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
        print(f"llmgate slowdown: {_US:g} µs per forward asked, {start.elapsed_time(end) * 1000:.1f} µs measured by CUDA "
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
        print(f"llmgate slowdown: {_US:g} µs per forward asked, {(time.perf_counter() - t0) * 1e6:.1f} µs measured "
              f"(CPU busy wait)", file=sys.stderr, flush=True)


def _patch(module) -> None:
    cls = module.LlamaForCausalLM
    original = cls.forward

    def forward(self, *args, **kwargs):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            if "cycles" in _state or not torch.cuda.is_current_stream_capturing():
                _wait_gpu(torch)            # calibrated outside a capture; inside one, captured with the step
        else:
            _wait_cpu()
        return original(self, *args, **kwargs)

    cls.forward = forward
    print(f"llmgate slowdown: {module.__name__}.{cls.__name__}.forward does {_US:g} µs more work per call "
          f"(pid {os.getpid()})", file=sys.stderr, flush=True)


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
