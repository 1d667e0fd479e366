"""The vLLM entry the tests of tests/engine boot on the CPU: the tiny model in float32 (an AVX2-only
CPU prefills bf16 4× slower), a short context, a KV budget of the test's choosing, and vLLM's
model worker inside EngineCore (``VLLM_ENABLE_V1_MULTIPROCESSING = "0"``: a boot imports vLLM
twice, not three times; tests/conftest.py says why)."""


def entry(id: str, *, model: str = "tiny", max_model_len: int = 1024, kv_cache_bytes: int = 200_000_000,
          extra: str = "") -> str:
    """One ``[[matrix]]`` table of an ``llmgate.toml``; ``extra`` adds lines of its own."""
    return (f'\n[[matrix]]\nid = "{id}"\nengine = "vllm"\nmodel = "{model}"\ndtype = "float32"\n'
            f"max_model_len = {max_model_len}\nkv_cache_bytes = {kv_cache_bytes}\n"
            'env = { VLLM_ENABLE_V1_MULTIPROCESSING = "0" }\n' + extra)
