"""The self-tests' CPU vLLM entry (tests/support/cpu_vllm.py): on a pytest-xdist worker its engine
computes on the worker's own core; outside xdist vLLM binds as it chooses."""

import tomllib

import cpu_vllm
from llmgate.config import matrix


def test_each_xdist_worker_binds_its_engine_to_a_core_of_its_own():
    assert [cpu_vllm.core_binding(w, 2) for w in ("gw0", "gw1", "gw2")] == ["0", "1", "0"]
    assert cpu_vllm.core_binding("gw3", 8) == "3"
    assert cpu_vllm.core_binding("", 2) is None             # not an xdist worker
    assert cpu_vllm.core_binding("gw1", 1) is None          # one core: nothing to choose


def test_the_entry_is_a_valid_matrix_entry_with_the_binding(monkeypatch, tmp_path):
    for worker, bind in (("gw1", "1"), ("", None)):
        monkeypatch.setattr(cpu_vllm, "_WORKER", worker)
        monkeypatch.setattr(cpu_vllm.os, "cpu_count", lambda: 2)
        text = cpu_vllm.entry("e", kv_cache_bytes=48_000_000)
        (tmp_path / "llmgate.toml").write_text(text)
        (cfg,) = matrix.load(tmp_path / "llmgate.toml").entries
        assert cfg.env.get("VLLM_CPU_OMP_THREADS_BIND") == bind, text
        assert cfg.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        assert tomllib.loads(text)["matrix"][0]["kv_cache_bytes"] == 48_000_000
