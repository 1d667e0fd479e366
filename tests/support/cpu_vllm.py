"""The vLLM entry the tests of tests/engine boot on the CPU: the tiny model in float32 (an AVX2-only
CPU prefills bf16 4× slower), a short context, a KV budget of the test's choosing, and vLLM's
model worker inside EngineCore (``VLLM_ENABLE_V1_MULTIPROCESSING = "0"``: a boot imports vLLM
twice, not three times; tests/conftest.py says why).

On a pytest-xdist worker the entry also binds the engine's compute to a core of the worker's own
(``VLLM_CPU_OMP_THREADS_BIND``).  vLLM's CPU build binds its OpenMP threads itself ("auto"): on
2 cores it reserves core 1 for its API server and computes on core 0, every engine alike (its log:
"core ids=[0]", "reserved_cpus=[1]").  So the engines of ``tox -e selftest``'s two workers shared
core 0, each at half speed, while core 1 held the API servers, the engine-free tests and CI's
background build.  gw0 computes on core 0, gw1 on core 1; outside xdist vLLM's own choice stands."""

import os

# read when the worker imports this module: the tests' autouse fixture removes the variable from
# the environment of each test (tests/conftest.py), where entry() is called
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def core_binding(worker: str | None = None, cpus: int | None = None) -> str | None:
    """The core an engine started on pytest-xdist worker ``worker`` (``gw0``, ``gw1`` …) computes on;
    None outside xdist or on one core (vLLM's own binding then)."""
    worker = _WORKER if worker is None else worker
    cpus = cpus or os.cpu_count() or 1
    if not worker.startswith("gw") or not worker[2:].isdigit() or cpus < 2:
        return None
    return str(int(worker[2:]) % cpus)


def entry(id: str, *, model: str = "tiny", max_model_len: int = 1024, kv_cache_bytes: int = 200_000_000,
          extra: str = "") -> str:
    """One ``[[matrix]]`` table of an ``llmgate.toml``; ``extra`` adds lines of its own."""
    core = core_binding()
    bind = f', VLLM_CPU_OMP_THREADS_BIND = "{core}"' if core is not None else ""
    return (f'\n[[matrix]]\nid = "{id}"\nengine = "vllm"\nmodel = "{model}"\ndtype = "float32"\n'
            f"max_model_len = {max_model_len}\nkv_cache_bytes = {kv_cache_bytes}\n"
            f'env = {{ VLLM_ENABLE_V1_MULTIPROCESSING = "0"{bind} }}\n' + extra)
