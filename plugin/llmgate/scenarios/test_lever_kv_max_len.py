"""Lever 3, KV-cache dtype → max_model_len: the largest max_model_len that boots AND serves
one real request of that length under the entry's fixed KV budget (CPU: kv_cache_bytes,
GPU: gpu_memory_utilization), found from the engine's own estimate after a failed boot
(verified with a boot and a request) or by bisection.  Decode speed is measured on the
verified server, so a quantized KV cache's slowdown is seen too (seed: fp8 KV 64k → 96k,
decode slowdown under 0.4%).

This test boots its own servers, so it runs after all the others, with the session's servers
stopped (the ``llmgate_exclusive`` fixture).
"""

import pytest

from llmgate import metrics, probe, stats


@pytest.mark.lever("kv_max_len")
def test_max_model_len(llmgate_config, llmgate_exclusive, gate):
    cfg, st, sc = gate.levers.require("kv_max_len"), gate.settings, gate.matrix.scenarios

    def measure(handle, prompts):
        res = gate.sequential(sc.decode_prompt_tokens, sc.decode_output_tokens, seed="kv-decode",
                              server=handle, prompts=prompts)
        return {"decode_tok_s": [s.decode_tok_s for s in res.ok]}

    try:
        result = probe.probe_max_model_len(cfg, gate.matrix, llmgate_exclusive.log_dir(f"probe-{cfg.id}"),
                                           start=sc.probe_start, output_tokens=sc.probe_verify_output_tokens,
                                           timeout=min(st.request_timeout, sc.probe_verify_timeout_s),
                                           progress=llmgate_exclusive.boot_progress, on_verified=measure)
    except probe.Unsupported as e:             # this machine cannot run the entry at any length
        pytest.skip(str(e))
    llmgate_exclusive.add_boots(f"{cfg.id} (probe)", [
        {"boot": i + 1, "engine": cfg.engine, "startup_s": a.startup_s, "version": result.engine_version,
         "log": f"max_model_len={a.max_model_len}: {'served' if a.served else 'failed'}"}
        for i, a in enumerate(result.attempts)])
    attempts = "; ".join(f"{a.max_model_len}: {'boot ok' if a.booted else 'boot failed'}"
                         f"{', served' if a.served else ''} ({a.reason[:120]})" for a in result.attempts)
    assert result.verified_max_model_len, f"{cfg.id}: no max_model_len both booted and served ({attempts})"

    raw = result.as_dict()
    gate.record(metrics.MAX_MODEL_LEN, [result.verified_max_model_len], kv_cache_dtype=cfg.kv_cache_dtype,
                kv_cache_bytes=cfg.kv_cache_bytes, gpu_memory_utilization=cfg.gpu_memory_utilization,
                boots=result.boots, used_engine_estimate=result.used_engine_estimate, raw=raw)
    if result.log_facts.get("kv_cache_tokens"):
        gate.record(metrics.KV_TOKENS, [result.log_facts["kv_cache_tokens"]])
    tok_s = result.measured["decode_tok_s"]
    gate.record(metrics.DECODE_TOK_S, tok_s, "kv-verified")
    gate.levers.remember("kv_max_len", {"max_model_len": result.verified_max_model_len, "decode_tok_s": tok_s,
                                 "kv_cache_dtype": cfg.kv_cache_dtype, "boots": result.boots})

    ref, ref_figures = gate.levers.reference("kv_max_len")
    if ref is None:
        return
    if ref_figures is None:
        pytest.fail(f"{cfg.id}: reference entry {ref.id!r} was not probed in this session")
    ratio = result.verified_max_model_len / ref_figures["max_model_len"]
    gate.record(metrics.LEN_RATIO, [ratio], reference=ref.id)
    base = stats.median(ref_figures["decode_tok_s"])
    gate.record(metrics.SPEEDUP, [v / base for v in tok_s], "kv-dtype", reference=ref.id)
    gate.note(probe.lever_summary(cfg.kv_cache_dtype, ref.kv_cache_dtype, result.verified_max_model_len,
                                  ref_figures["max_model_len"], result.boots, ref_figures["boots"],
                                  tok_s, ref_figures["decode_tok_s"]))
    if cfg.kv_cache_dtype.startswith("fp8") and ref.kv_cache_dtype == "auto":
        # what the lever is for: the same budget holds more context
        assert ratio > 1.0, (f"{cfg.id}: KV cache {cfg.kv_cache_dtype} fits {result.verified_max_model_len} tokens, "
                             f"not more than {ref.id} ({ref.kv_cache_dtype}): {ref_figures['max_model_len']}")
