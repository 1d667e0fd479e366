"""The slowdown knobs of tests/validation/slowdown/sitecustomize.py (issues 12 and 23), without an
engine: the module is loaded by path, its environment set first, against tiny stand-ins for the
vLLM modules it patches (files of the same module names in a temporary folder put first on
sys.path, so its import hook finds them as it would find vLLM's) and a stand-in torch (no CUDA:
the CPU busy wait; or a recording torch.cuda: the kernels it would queue and capture).  Timings are
lower bounds only: a wait must be at least as long as asked, however busy the machine is."""

import asyncio
import importlib
import importlib.util
import inspect
import itertools
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

SITECUSTOMIZE = Path(__file__).resolve().parents[1] / "validation" / "slowdown" / "sitecustomize.py"
KNOBS = ("LLMGATE_SLOWDOWN_US", "LLMGATE_PREFILL_SLOWDOWN_US", "LLMGATE_PREFILL_THRESHOLD_TOKENS",
         "LLMGATE_FRONTEND_DELAY_MS", "LLMGATE_FRONTEND_BLOCK_US", "LLMGATE_ADMIT_DELAY_US", "LLMGATE_KNOB_SWITCH")
LLAMA = "vllm.model_executor.models.llama"
COMPLETION = "vllm.entrypoints.openai.completion.serving"
CHAT = "vllm.entrypoints.openai.chat_completion.serving"
SCHEDULER = "vllm.v1.core.sched.scheduler"

# the stand-ins: the names sitecustomize patches, with what vLLM's have of them
FAKE_VLLM = {
    "vllm/__init__.py": "",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "",
    "vllm/model_executor/models/llama.py": """
        class LlamaForCausalLM:
            calls = []

            def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
                LlamaForCausalLM.calls.append(positions.shape[-1])
                return "hidden states"
        """,
    "vllm/v1/__init__.py": "",
    "vllm/v1/core/__init__.py": "",
    "vllm/v1/core/sched/__init__.py": "",
    "vllm/v1/core/sched/scheduler.py": """
        import types


        class Scheduler:
            def __init__(self, plan):
                self.plan = list(plan)     # the steps to come: how many new requests each admits

            def schedule(self, throttle_prefills=False):
                n = self.plan.pop(0)
                return types.SimpleNamespace(scheduled_new_reqs=["request"] * n, throttle=throttle_prefills)
        """,
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/completion/__init__.py": "",
    "vllm/entrypoints/openai/completion/serving.py": """
        import time


        class OpenAIServingCompletion:
            started = []     # when the body began: where vLLM's renderer takes the request's arrival_time

            async def create_completion(self, request, raw_request=None):
                OpenAIServingCompletion.started.append(time.perf_counter())
                return ("completion", request, raw_request)
        """,
    "vllm/entrypoints/openai/chat_completion/__init__.py": "",
    "vllm/entrypoints/openai/chat_completion/serving.py": """
        import time


        class OpenAIServingChat:
            started = []

            async def create_chat_completion(self, request, raw_request=None):
                OpenAIServingChat.started.append(time.perf_counter())
                return ("chat", request, raw_request)
        """,
    # the pre-0.15 names: one re-exporting a class already delayed, one without the method
    "vllm/entrypoints/openai/serving_completion.py": """
        from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion  # noqa: F401
        """,
    "vllm/entrypoints/openai/serving_chat.py": """
        class OpenAIServingChat:
            pass
        """,
}
_copies = itertools.count()


def _vllm_modules() -> list[str]:
    return [name for name in sys.modules if name == "vllm" or name.startswith("vllm.")]


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    root = tmp_path / "site"
    for rel, text in FAKE_VLLM.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for name in _vllm_modules():
        monkeypatch.delitem(sys.modules, name)     # a vLLM imported before comes back afterwards (monkeypatch)
    monkeypatch.syspath_prepend(str(root))          # the stand-ins shadow an installed vLLM
    meta_path = list(sys.meta_path)
    yield root
    sys.meta_path[:] = meta_path                     # the import hook a loaded copy inserted
    for name in _vllm_modules():
        del sys.modules[name]                        # the stand-ins
    importlib.invalidate_caches()
    assert not any(getattr(f, "__module__", "").startswith("llmgate_slowdown_") for f in sys.meta_path)


def load(monkeypatch, **env):
    """A fresh copy of sitecustomize, run as at interpreter start-up with these knobs (the others unset)."""
    for name in KNOBS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    spec = importlib.util.spec_from_file_location(f"llmgate_slowdown_{next(_copies)}", SITECUSTOMIZE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tokens(*shape):
    """A stand-in tensor: the knobs read only its shape."""
    return types.SimpleNamespace(shape=shape)


def cpu_torch(monkeypatch):
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False,
                                                             is_initialized=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", torch)


class FakeCuda:
    """torch.cuda as the knobs use it, on a GPU at 1000 cycles/µs: ``_sleep`` kernels are recorded
    (queued, or captured while ``capturing``), events read the cycles slept between them."""

    def __init__(self):
        self.sleeps: list[int] = []
        self.capturing = False
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = 0

            def record(self):
                self.at = sum(cuda.sleeps)

            def synchronize(self):
                assert not cuda.capturing, "no synchronisation inside a CUDA-graph capture"

            def elapsed_time(self, end):
                return (end.at - self.at) / 1000 / 1000      # ms

        self.Event = Event

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def is_current_stream_capturing(self):
        return self.capturing

    def _sleep(self, cycles):
        self.sleeps.append(cycles)


def timed(call, *args, **kwargs):
    t0 = time.perf_counter()
    out = call(*args, **kwargs)
    return time.perf_counter() - t0, out


def test_prefill_knob_waits_only_in_steps_above_the_threshold(fake_vllm, monkeypatch, capsys):
    us = 20_000                                              # 20 ms: far above any timer's grain
    cpu_torch(monkeypatch)
    knobs = load(monkeypatch, LLMGATE_PREFILL_SLOWDOWN_US=us)
    llama = importlib.import_module(LLAMA)
    model = llama.LlamaForCausalLM()
    assert "does 20000 µs more work per call of more than 32 input tokens" in capsys.readouterr().err

    # decode steps: up to the threshold (32 by default) no wait, whatever the call's form
    for n in (1, 8, 32):
        assert model.forward(tokens(n), tokens(n)) == "hidden states"
    assert model.forward(input_ids=tokens(32), positions=tokens(32), intermediate_tensors=None) == "hidden states"
    assert knobs._state["prefill_waits"] == 0

    # steps with prefill tokens: positional, and by keyword as vLLM's runners call it; M-RoPE positions
    # (3, n) count their last dimension
    took, out = timed(model.forward, tokens(33), tokens(33))
    assert out == "hidden states" and took >= 0.99 * us / 1e6, took
    took, out = timed(model.forward, input_ids=tokens(128), positions=tokens(128), intermediate_tensors=None,
                      inputs_embeds=None)
    assert out == "hidden states" and took >= 0.99 * us / 1e6, took
    took, _ = timed(model.forward, None, tokens(3, 64))
    assert took >= 0.99 * us / 1e6, took
    assert knobs._state["prefill_waits"] == 3
    assert llama.LlamaForCausalLM.calls == [1, 8, 32, 32, 33, 128, 64]    # the model's forward ran every time
    err = capsys.readouterr().err
    assert "llmgate prefill slowdown: 20000 µs per forward of more than 32 input tokens asked" in err, err
    assert "(CPU busy wait)" in err and err.count("llmgate prefill slowdown") == 1, err    # said once


def test_prefill_threshold_is_a_knob_too(fake_vllm, monkeypatch):
    us = 10_000
    cpu_torch(monkeypatch)
    knobs = load(monkeypatch, LLMGATE_PREFILL_SLOWDOWN_US=us, LLMGATE_PREFILL_THRESHOLD_TOKENS=100)
    model = importlib.import_module(LLAMA).LlamaForCausalLM()
    model.forward(input_ids=tokens(64), positions=tokens(64))
    model.forward(input_ids=tokens(100), positions=tokens(100))
    assert knobs._state["prefill_waits"] == 0
    took, _ = timed(model.forward, input_ids=tokens(101), positions=tokens(101))
    assert took >= 0.99 * us / 1e6 and knobs._state["prefill_waits"] == 1


def test_step_knob_still_waits_in_every_step(fake_vllm, monkeypatch, capsys):
    us = 10_000
    cpu_torch(monkeypatch)
    knobs = load(monkeypatch, LLMGATE_SLOWDOWN_US=us)
    model = importlib.import_module(LLAMA).LlamaForCausalLM()
    for n in (1, 128):
        took, out = timed(model.forward, tokens(n), tokens(n))
        assert out == "hidden states" and took >= 0.99 * us / 1e6, (n, took)
    assert knobs._state["prefill_waits"] == 0
    err = capsys.readouterr().err
    assert "llmgate slowdown: vllm.model_executor.models.llama.LlamaForCausalLM.forward does 10000 µs more work" in err
    assert "llmgate slowdown: 10000 µs per forward asked" in err and "prefill" not in err, err


def test_gpu_kernels_calibrated_outside_a_capture_and_captured_with_the_large_sizes(fake_vllm, monkeypatch, capsys):
    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    knobs = load(monkeypatch, LLMGATE_SLOWDOWN_US=300, LLMGATE_PREFILL_SLOWDOWN_US=2500)
    model = importlib.import_module(LLAMA).LlamaForCausalLM()
    probe, step, prefill = 2_000_000, 300_000, 2_500_000

    model.forward(input_ids=tokens(8), positions=tokens(8))     # a first small step: the clock probed once
    assert cuda.sleeps == [probe] * 3 + [step, step]             # step kernel measured, then queued
    cuda.capturing = True                                        # a capture before prefill was calibrated
    model.forward(input_ids=tokens(64), positions=tokens(64))
    assert cuda.sleeps[5:] == [step]                             # no calibration (no sync) inside a capture
    cuda.capturing = False                                       # the profiling run: the most tokens
    model.forward(input_ids=tokens(8192), positions=tokens(8192))
    assert cuda.sleeps[6:] == [step, prefill, prefill]           # measured at the clock already probed
    cuda.capturing = True                                        # the graphs: large sizes carry the kernel
    model.forward(input_ids=tokens(64), positions=tokens(64))
    model.forward(input_ids=tokens(32), positions=tokens(32))
    assert cuda.sleeps[9:] == [step, prefill, step]
    assert knobs._state["prefill_waits"] == 2
    err = capsys.readouterr().err
    assert ("llmgate slowdown: 300 µs per forward asked, 300.0 µs measured by CUDA events "
            "(300000 GPU cycles, 1000 cycles/µs)") in err, err
    assert ("llmgate prefill slowdown: 2500 µs per forward of more than 32 input tokens asked, 2500.0 µs "
            "measured by CUDA events (2500000 GPU cycles, 1000 cycles/µs)") in err, err


def test_frontend_knob_delays_the_handler_before_its_body(fake_vllm, monkeypatch, capsys):
    ms = 50
    knobs = load(monkeypatch, LLMGATE_FRONTEND_DELAY_MS=ms)
    completion = importlib.import_module(COMPLETION)
    chat = importlib.import_module(CHAT)
    importlib.import_module("vllm.entrypoints.openai.serving_completion")   # re-exports the class delayed
    importlib.import_module("vllm.entrypoints.openai.serving_chat")         # a class without the handler

    async def call(handler, *args):
        t0 = time.perf_counter()
        out = await handler(*args)
        return t0, time.perf_counter() - t0, out

    for cls, method, result in ((completion.OpenAIServingCompletion, "create_completion", "completion"),
                                (chat.OpenAIServingChat, "create_chat_completion", "chat")):
        handler = getattr(cls(), method)
        assert inspect.iscoroutinefunction(handler) and handler.__name__ == method
        t0, took, out = asyncio.run(call(handler, "request", "raw request"))
        assert out == (result, "request", "raw request")                      # the original's result
        assert took >= 0.9 * ms / 1000, took
        assert cls.started[-1] - t0 >= 0.9 * ms / 1000, cls.started[-1] - t0   # the body began after the delay
    assert knobs._state["frontend_delays"] == 2                               # once each, not twice
    err = capsys.readouterr().err
    assert f"{COMPLETION}.OpenAIServingCompletion.create_completion waits 50 ms before it renders" in err, err
    assert f"{CHAT}.OpenAIServingChat.create_chat_completion waits 50 ms" in err, err
    assert "vllm.entrypoints.openai.serving_chat has no coroutine OpenAIServingChat.create_chat_completion: NOT " \
           "delayed" in err, err


def test_frontend_block_knob_busy_waits_below_a_millisecond(fake_vllm, monkeypatch, capsys):
    us = 20_000                                      # long enough to tell from the call's own cost
    knobs = load(monkeypatch, LLMGATE_FRONTEND_BLOCK_US=us)
    completion = importlib.import_module(COMPLETION)

    async def call(handler, *args):
        t0 = time.perf_counter()
        out = await handler(*args)
        return t0, time.perf_counter() - t0, out

    cls = completion.OpenAIServingCompletion
    t0, took, out = asyncio.run(call(cls().create_completion, "request", "raw request"))
    assert out == ("completion", "request", "raw request")
    assert took >= 0.95 * us / 1e6 and cls.started[-1] - t0 >= 0.95 * us / 1e6, took
    assert knobs._state["frontend_delays"] == 1
    err = capsys.readouterr().err
    assert f"{COMPLETION}.OpenAIServingCompletion.create_completion busy-waits 20000 µs before it renders" in err, err
    assert "llmgate frontend delay (busy wait): 20000 µs per request, blocking the API server's loop asked" in err, err


@pytest.mark.parametrize("value", [None, "0", ""])
def test_knobs_unset_patch_nothing(fake_vllm, monkeypatch, capsys, value):
    before = list(sys.meta_path)
    env = {} if value is None else {name: value for name in KNOBS if name != "LLMGATE_PREFILL_THRESHOLD_TOKENS"}
    knobs = load(monkeypatch, **env)
    assert sys.meta_path == before and knobs._TARGETS == ()                  # no import hook at all
    assert not any(isinstance(f, knobs._Finder) for f in sys.meta_path)
    llama = importlib.import_module(LLAMA)
    completion = importlib.import_module(COMPLETION)
    assert llama.LlamaForCausalLM.forward.__qualname__ == "LlamaForCausalLM.forward"        # the originals
    assert completion.OpenAIServingCompletion.create_completion.__module__ == COMPLETION
    assert not hasattr(completion.OpenAIServingCompletion.create_completion, "_llmgate_delayed")
    assert "llmgate" not in capsys.readouterr().err


def test_admit_knob_waits_after_a_step_that_admits_a_request(fake_vllm, monkeypatch, capsys):
    us = 20_000
    knobs = load(monkeypatch, LLMGATE_ADMIT_DELAY_US=us)
    sched = importlib.import_module(SCHEDULER)
    assert "Scheduler.schedule waits 20000 µs in every step that admits a request" in capsys.readouterr().err
    scheduler = sched.Scheduler([0, 1, 0, 3])
    took, out = timed(scheduler.schedule)
    assert out.scheduled_new_reqs == [] and knobs._state["admit_waits"] == 0       # a decode-only step
    took, out = timed(scheduler.schedule, True)
    assert took >= 0.99 * us / 1e6 and out.throttle is True and knobs._state["admit_waits"] == 1, took
    scheduler.schedule(throttle_prefills=False)
    took, _ = timed(scheduler.schedule)
    assert took >= 0.99 * us / 1e6 and knobs._state["admit_waits"] == 2           # once a step, however many
    err = capsys.readouterr().err
    assert "llmgate admit delay: 20000 µs per step that admits a request asked" in err and "CPU busy wait" in err


def test_a_switch_file_turns_knobs_on_and_off_by_name(fake_vllm, monkeypatch, tmp_path):
    switch = tmp_path / "knobs"
    knobs = load(monkeypatch, LLMGATE_ADMIT_DELAY_US=20_000, LLMGATE_FRONTEND_DELAY_MS=1,
                 LLMGATE_KNOB_SWITCH=switch)
    scheduler = importlib.import_module(SCHEDULER).Scheduler([1] * 6)
    handler = importlib.import_module(COMPLETION).OpenAIServingCompletion().create_completion
    scheduler.schedule()                                        # no file: every knob off
    asyncio.run(handler("request"))
    assert knobs._state["admit_waits"] == 0 and knobs._state["frontend_delays"] == 0
    switch.write_text("admit\n")
    took, _ = timed(scheduler.schedule)
    asyncio.run(handler("request"))
    assert took >= 0.019 and knobs._state["admit_waits"] == 1 and knobs._state["frontend_delays"] == 0
    switch.write_text("frontend")                               # changed: read again
    import os
    os.utime(switch, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    scheduler.schedule()
    asyncio.run(handler("request"))
    assert knobs._state["admit_waits"] == 1 and knobs._state["frontend_delays"] == 1
    switch.unlink()
    scheduler.schedule()
    asyncio.run(handler("request"))
    assert knobs._state["admit_waits"] == 1 and knobs._state["frontend_delays"] == 1
