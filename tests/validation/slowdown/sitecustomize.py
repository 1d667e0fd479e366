"""An engine made slower on purpose, to prove what the gate can see (issues 12 and 23).

Put this folder first on the engine's PYTHONPATH (gpu/make-slow-launcher.sh writes such a
launcher) and set one or more of three knobs; each is off when unset or 0, and each prints what
it did to the engine's log (stderr), so a run shows which one was on:

- ``LLMGATE_SLOWDOWN_US=N`` (issue 12, the step knob): every forward pass of vLLM's Llama model
  (``LlamaForCausalLM.forward``, which every model step of the V1 and V2 runners and of the CPU
  runner goes through, batch of 1 or of 16) does N µs more work, in the engine's own process —
  the engine really is slower, not the client path.  A step of length t becomes t + N long, a
  slowdown of N / (t + N): decode and throughput move, TTFT a little.  Log: "llmgate slowdown: …".
- ``LLMGATE_PREFILL_SLOWDOWN_US=N`` (issue 23, prefill only): the same N µs of extra work, but
  only in forward passes whose number of input tokens exceeds ``LLMGATE_PREFILL_THRESHOLD_TOKENS``
  (default 32), i.e. steps that carry prefill tokens.  The count is the length of the forward's
  ``positions`` argument (its last dimension; else ``input_ids``' or ``inputs_embeds``' first;
  with none of them the log says so once and nothing is slowed).  In vLLM 0.32.0's sources the
  runners pass it by keyword, cut to the step's padded size: V1 ``GPUModelRunner._model_forward``
  (``self.positions[:num_input_tokens]``) and ``_dummy_run`` (``[:num_tokens_padded]``), which the
  CPU runner inherits; V2 (vllm/v1/worker/gpu/model_runner.py) ``self.model(**model_inputs)``
  with ``input_batch.positions`` = ``input_buffers.positions[:num_tokens_after_padding]``; on a GPU
  that is the CUDA-graph-padded size.  ``LlamaForCausalLM.forward(input_ids, positions,
  intermediate_tensors=None, inputs_embeds=None)`` there; 0.26.0's runner source was not read here
  (the step knob, wrapping the same method, ran on it: gpu/runs/2026-12-01-sensitivity/README.md).  A pure decode step at up
  to 32 concurrent requests carries at most 32 tokens (padded to a capture size of at most 32) and
  is never slowed; a step with one of the gate's 64–128-token prompts always is.  Under CUDA
  graphs the kernel is captured with the graphs of sizes above the threshold and replayed with
  them — wanted, since decode-only steps at low concurrency use the small sizes.  Not prefill-only
  where a decode-only step carries more than the threshold: above 32 concurrent requests, or with
  speculative decoding (1 + k tokens a request); raise the threshold there.  (Prefix caching
  could leave fewer new tokens to a step; the gate's prompts share no prefix, llmgate/load/workloads.py.)
  Meant to lengthen the engine's prefill (TTFT, and vLLM's own ``request_prefill_time_seconds``
  and ``time_to_first_token_seconds``), for the gate to flag and attribute to prefill.
  Log: "llmgate prefill slowdown: …".
- ``LLMGATE_FRONTEND_DELAY_MS=N`` (issue 23, front end): the API server's OpenAI handlers
  (``OpenAIServingCompletion.create_completion`` in ``vllm.entrypoints.openai.completion.serving``
  and ``OpenAIServingChat.create_chat_completion`` in
  ``vllm.entrypoints.openai.chat_completion.serving``, the modules of vLLM 0.26 and 0.32; the
  pre-0.15 names ``vllm.entrypoints.openai.serving_completion`` / ``serving_chat`` are tried too)
  first ``await asyncio.sleep(N / 1000)``, then run as before (vLLM's API server runs on uvloop,
  whose timers count whole milliseconds, ``round(delay * 1000)``: give a whole N; 2.5 would wait
  2 ms, give or take the loop's millisecond clock).  The client's TTFT grows by N ms;
  the engine's own TTFT histogram (``vllm:time_to_first_token_seconds``) should not, because its
  start, the request's ``arrival_time``, is taken later, inside the handler:
  ``create_completion`` → ``_create_completion`` → ``render_completion_request`` (after
  ``_check_model``) → ``OnlineRenderer.render_completion`` → ``preprocess_completion`` →
  ``preprocess_cmpl`` →
  ``BaseRenderer.render_cmpl_async`` (vllm/renderers/base.py), whose first line is
  ``arrival_time = time.time()``, stored in the ``EngineInput`` (``engine_input["arrival_time"]``)
  and taken from there by ``InputProcessor.process_inputs`` (``prompt.get("arrival_time",
  time.time())``) into the ``EngineCoreRequest``; the output processor's
  ``RequestStateStats.arrival_time`` is that value and ``IterationStats`` observes
  ``first_token_latency = iteration_timestamp - arrival_time`` (vllm/v1/metrics/stats.py).  Chat:
  ``render_chat_request`` → ``render_chat`` → ``preprocess_chat`` → ``render_chat_async``, the
  same first line.  Read in
  vLLM 0.32.0's sources (the CPU build); nothing before the handler in the route
  (``@with_cancellation``, ``@load_aware_call``, ``validate_json_request``) nor a middleware
  (vllm/entrypoints/serve/middleware/) takes the arrival time.
  For 0.26.0 (the H200's; its source was not read here): its API reference
  (docs.vllm.ai/en/v0.26.0/api/vllm/entrypoints/openai/completion/serving/) has the same module
  and class (``OpenAIServingCompletion``, based on ``GenerateBaseServing``, its source from line
  55 as in 0.32.0); a version of the file stored from the public repository (commit 030ea52e,
  also on ``GenerateBaseServing``) has the same ``create_completion`` → ``_create_completion`` →
  ``render_completion_request`` order; vLLM PR 47787 (merged 2026-07-07, before 0.26.0) says the
  Python front end "stamps it at the renderer entry, before both" rendering and tokenizing; the
  chat module is in the API references of 0.24.0 and 0.29.0.  So the sleep, at the handler's first
  line, comes before arrival_time: a pure front-end delay, seen in the client's TTFT and in the
  gate's "front end: client − engine TTFT", not in the engine's timers.  A name not found is said
  in the log ("NOT delayed"), never guessed around.  (vLLM's optional Rust front end,
  ``VLLM_USE_RUST_FRONTEND=1``, off by default, bypasses these handlers: no delay there.)
  Log: "llmgate frontend delay: …".
- ``LLMGATE_FRONTEND_BLOCK_US=N`` (issue 46, front end below a millisecond): the same handlers first
  busy-wait N µs (time.perf_counter) in the API server's event loop, blocking it, then run as
  before: a front-end delay of any size (uvloop's millisecond timers round the sleep above: 0.6 ms
  became 1 ms on the H200, 2026-12-04), the kind the issue's own client saw at +0.5 ms (+5.5% of TTFT
  at 128 tokens).  It blocks the loop, so under concurrency it also delays the other requests' work
  in the API server; meant for c=1.  Log: "llmgate frontend delay: … busy-waits …".

- ``LLMGATE_ADMIT_DELAY_US=N`` (issue 35, prefill on the host): in the engine core, every scheduler
  step that admits a new request (``SchedulerOutput.scheduled_new_reqs`` not empty: its prompt
  tokens are in the step) busy-waits N µs after ``Scheduler.schedule`` returns and before the model
  step runs.  ``schedule`` has taken the request's SCHEDULED timestamp by then (vLLM 0.32.0,
  vllm/v1/core/sched/scheduler.py; ``AsyncScheduler`` inherits the method), so the wait lands in
  vLLM's own prefill time (first token − scheduled) and TTFT: host-side work in the prefill path,
  the kind the issue saw missed at c=1.  Written because ``LLMGATE_PREFILL_SLOWDOWN_US``, inside the
  model's forward, did not act on the H200 (vLLM 0.26.0 compiles and graph-captures the forward:
  gpu/runs/2026-12-03-latency/README.md).  At c=1 a request is admitted once (its prompt fits one step), so its TTFT grows
  by N µs; decode-only steps are never slowed.  Log: "llmgate admit delay: …".
- ``LLMGATE_KNOB_SWITCH=PATH`` (with any knobs above): the knobs act only while the file PATH names
  them (words ``step``, ``prefill``, ``admit``, ``frontend``; a missing or empty file: none), read
  again whenever its modification time changes.  One boot then serves the same engine with a knob
  off and on, in turns, for an independent client to measure what a knob really does
  (gpu/knob-check.py).  The GPU kernels of ``step`` and ``prefill`` are captured into CUDA graphs
  and cannot be switched there; ``admit`` and ``frontend`` can.

How the GPU knobs work: the extra work is a kernel on the forward's CUDA stream
(``torch.cuda._sleep``), so it serialises with the model's own kernels, and it is part of what
vLLM captures into its CUDA graphs (the forward is called inside the capture), so it is replayed
with every step of the sizes it was captured for.  (The first version waited before
``GPUModelRunner.execute_model``: the V2 runner overlapped it with batched steps, c=8 was not
slowed at all.)  Its length in GPU cycles is calibrated once, at the first forward outside a
capture that needs it (vLLM's memory-profiling run, whose token count is above any threshold),
against CUDA events at the clock the GPU runs at then, and printed to the engine's log:
"llmgate slowdown: … µs per forward asked, … measured by CUDA events".  On the CPU it is a busy
wait of N µs (time.perf_counter) before the forward, its first one measured the same way.

The gate's figures are checked against these in gpu/runs/2026-12-02-issue23/README.md and
gpu/runs/2026-12-03-latency-2/README.md.
"""

import asyncio
import functools
import importlib.abc
import inspect
import os
import sys
import time


def _number(name: str, default: float = 0.0) -> float:
    return float(os.environ.get(name, "") or default)


_US = _number("LLMGATE_SLOWDOWN_US")
_PREFILL_US = _number("LLMGATE_PREFILL_SLOWDOWN_US")
_PREFILL_THRESHOLD = int(_number("LLMGATE_PREFILL_THRESHOLD_TOKENS", 32))
_FRONTEND_MS = _number("LLMGATE_FRONTEND_DELAY_MS")
_FRONTEND_BLOCK_US = _number("LLMGATE_FRONTEND_BLOCK_US")
_ADMIT_US = _number("LLMGATE_ADMIT_DELAY_US")
_SWITCH = os.environ.get("LLMGATE_KNOB_SWITCH", "")

# the engine core's scheduler (vLLM V1, 0.8 to 0.32): where a request is admitted
_SCHEDULER = "vllm.v1.core.sched.scheduler"
# the model every gate entry of the GPU matrices and the CPU defaults is declared as (a Llama shape)
_LLAMA = "vllm.model_executor.models.llama"
# the OpenAI handlers' entry coroutines: (module, class, method); vLLM 0.26 and 0.32, then pre-0.15
_HANDLERS = (
    ("vllm.entrypoints.openai.completion.serving", "OpenAIServingCompletion", "create_completion"),
    ("vllm.entrypoints.openai.chat_completion.serving", "OpenAIServingChat", "create_chat_completion"),
    ("vllm.entrypoints.openai.serving_completion", "OpenAIServingCompletion", "create_completion"),
    ("vllm.entrypoints.openai.serving_chat", "OpenAIServingChat", "create_chat_completion"),
)
_PER_PREFILL = f"per forward of more than {_PREFILL_THRESHOLD} input tokens"
# what the knobs did in this process (the unit test reads it): forward calls that queued or did the
# prefill wait, handler calls that were delayed; and each wait's calibration
_state: dict = {"prefill_waits": 0, "frontend_delays": 0, "admit_waits": 0}


def _on(knob: str) -> bool:
    """Whether ``knob`` acts now: always, unless LLMGATE_KNOB_SWITCH names a file; then while that
    file names it (re-read when its modification time changes)."""
    if not _SWITCH:
        return True
    try:
        mtime = os.stat(_SWITCH).st_mtime_ns
    except OSError:
        _state["switch"] = (None, frozenset())
        return False
    seen = _state.get("switch")
    if seen is None or seen[0] != mtime:
        try:
            with open(_SWITCH, encoding="utf-8") as f:
                words = frozenset(f.read().split())
        except OSError:
            words = frozenset()
        _state["switch"] = seen = (mtime, words)
    return knob in seen[1]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- the model step: GPU kernel or CPU busy wait -------------------------------------------------

def _per_us(torch) -> float:
    """GPU cycles per µs at the clock the GPU runs at now, from a 2 ms probe (after warm ones)."""
    if "per_us" not in _state:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe = 2_000_000
        for _ in range(3):
            start.record()
            torch.cuda._sleep(probe)
            end.record()
            end.synchronize()
        _state["per_us"] = probe / (start.elapsed_time(end) * 1000.0)
    return _state["per_us"]


def _wait_gpu(torch, key: str, us: float, what: str, per: str = "per forward") -> None:
    """Queue ``us`` µs of GPU work (calibrated at its first call, which must be outside a capture)."""
    cycles = _state.get(key)
    if cycles is None:
        per_us = _per_us(torch)
        cycles = _state[key] = max(1, int(us * per_us))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _say(f"{what}: {us:g} µs {per} asked, {start.elapsed_time(end) * 1000:.1f} µs measured by CUDA "
             f"events ({cycles} GPU cycles, {per_us:.0f} cycles/µs)")
    torch.cuda._sleep(cycles)


def _wait_cpu(key: str, us: float, what: str, per: str = "per forward") -> None:
    t0 = time.perf_counter()
    t_end = t0 + us / 1e6
    while time.perf_counter() < t_end:
        pass
    if key not in _state:
        _state[key] = True
        _say(f"{what}: {us:g} µs {per} asked, {(time.perf_counter() - t0) * 1e6:.1f} µs measured "
             f"(CPU busy wait)")


def _num_tokens(args: tuple, kwargs: dict) -> int | None:
    """The step's token count from forward(input_ids, positions, intermediate_tensors, inputs_embeds)."""
    for name, index, dim in (("positions", 1, -1), ("input_ids", 0, 0), ("inputs_embeds", 3, 0)):
        value = kwargs[name] if name in kwargs else (args[index] if len(args) > index else None)
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[dim])
    return None


def _patch_llama(module) -> None:
    cls = module.LlamaForCausalLM
    original = cls.forward

    def forward(self, *args, **kwargs):
        import torch

        prefill = False
        if _PREFILL_US > 0 and _on("prefill"):
            n = _num_tokens(args, kwargs)
            prefill = n is not None and n > _PREFILL_THRESHOLD
            if n is None and "no_count" not in _state:
                _state["no_count"] = True
                _say("llmgate prefill slowdown: no token count in this forward's arguments, not slowed")
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            capturing = torch.cuda.is_current_stream_capturing()
            # calibrated outside a capture; inside one, captured with the step
            if _US > 0 and _on("step") and ("cycles" in _state or not capturing):
                _wait_gpu(torch, "cycles", _US, "llmgate slowdown")
            if prefill and ("prefill_cycles" in _state or not capturing):
                _wait_gpu(torch, "prefill_cycles", _PREFILL_US, "llmgate prefill slowdown", _PER_PREFILL)
                _state["prefill_waits"] += 1
        else:
            if _US > 0 and _on("step"):
                _wait_cpu("said", _US, "llmgate slowdown")
            if prefill:
                _wait_cpu("prefill_said", _PREFILL_US, "llmgate prefill slowdown", _PER_PREFILL)
                _state["prefill_waits"] += 1
        return original(self, *args, **kwargs)

    cls.forward = forward
    if _US > 0:
        _say(f"llmgate slowdown: {module.__name__}.{cls.__name__}.forward does {_US:g} µs more work per call "
             f"(pid {os.getpid()})")
    if _PREFILL_US > 0:
        _say(f"llmgate prefill slowdown: {module.__name__}.{cls.__name__}.forward does {_PREFILL_US:g} µs more "
             f"work per call of more than {_PREFILL_THRESHOLD} input tokens (pid {os.getpid()})")


# --- the API server: a delay before the handler renders the request --------------------------

def _delayed(original):
    @functools.wraps(original)
    async def handler(self, *args, **kwargs):
        if _on("frontend"):
            if _FRONTEND_MS > 0:
                await asyncio.sleep(_FRONTEND_MS / 1000.0)  # before the renderer takes arrival_time
            if _FRONTEND_BLOCK_US > 0:
                _wait_cpu("frontend_block_said", _FRONTEND_BLOCK_US, "llmgate frontend delay (busy wait)",
                          "per request, blocking the API server's loop")
            _state["frontend_delays"] += 1
        return await original(self, *args, **kwargs)

    handler._llmgate_delayed = True
    return handler


def _patch_handlers(module) -> None:
    for name, cls_name, method in _HANDLERS:
        if name != module.__name__:
            continue
        cls = getattr(module, cls_name, None)
        original = getattr(cls, method, None)
        if original is None or not inspect.iscoroutinefunction(original):
            _say(f"llmgate frontend delay: {name} has no coroutine {cls_name}.{method}: NOT delayed")
            continue
        if getattr(original, "_llmgate_delayed", False):     # a module re-exporting a class already delayed
            continue
        setattr(cls, method, _delayed(original))
        what = " and ".join(([f"waits {_FRONTEND_MS:g} ms"] if _FRONTEND_MS > 0 else [])
                            + ([f"busy-waits {_FRONTEND_BLOCK_US:g} µs"] if _FRONTEND_BLOCK_US > 0 else []))
        _say(f"llmgate frontend delay: {name}.{cls_name}.{method} {what} before it "
             f"renders the request (pid {os.getpid()})")


# --- the engine core: host work when a step admits a request -------------------------------------

def _patch_scheduler(module) -> None:
    cls = getattr(module, "Scheduler", None)
    original = getattr(cls, "schedule", None)
    if original is None:
        _say(f"llmgate admit delay: {module.__name__} has no Scheduler.schedule: NOT delayed")
        return

    @functools.wraps(original)
    def schedule(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if getattr(out, "scheduled_new_reqs", None) and _on("admit"):
            _wait_cpu("admit_said", _ADMIT_US, "llmgate admit delay", "per step that admits a request")
            _state["admit_waits"] += 1
        return out

    cls.schedule = schedule
    _say(f"llmgate admit delay: {module.__name__}.Scheduler.schedule waits {_ADMIT_US:g} µs in every step that "
         f"admits a request (pid {os.getpid()})")


# --- the import hook -------------------------------------------------------------------------

_PATCHES: dict = {}
if _US > 0 or _PREFILL_US > 0:
    _PATCHES[_LLAMA] = _patch_llama
if _ADMIT_US > 0:
    _PATCHES[_SCHEDULER] = _patch_scheduler
if _FRONTEND_MS > 0 or _FRONTEND_BLOCK_US > 0:
    _PATCHES.update((name, _patch_handlers) for name, _, _ in _HANDLERS)
_TARGETS = tuple(_PATCHES)


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
        patch = _PATCHES[name]

        def patched_exec(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = patched_exec
        return spec


if _TARGETS:
    sys.meta_path.insert(0, _Finder())
