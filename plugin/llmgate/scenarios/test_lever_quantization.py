"""Lever 1, weight quantization: the same model at several weight precisions.

Decode tok/s at concurrency 1 with a long generation, start-up time and peak memory per
entry; what is gated is each entry's decode speed divided by its reference entry's
(full precision) measured in the same session (seed, RTX 4070: FP8 1.07x, AWQ4 ~1.4x of FP16).
"""

import statistics

import llmgate
from llmgate import metrics


@llmgate.scenario("quantization")
def test_weight_precision(gate):
    cfg = gate.levers.require("quantization")
    sc, h = gate.matrix.scenarios, gate.server
    result = gate.sequential(sc.decode_prompt_tokens, sc.decode_output_tokens, seed="quantization")
    tok_s = [s.decode_tok_s for s in result.ok]
    peak = h.memory.peak()
    gate.record(metrics.DECODE_TOK_S, tok_s, raw=result.raw())
    gate.record(metrics.PREFILL_TOK_S, [s.prompt_tokens / s.ttft for s in result.ok])
    gate.record(metrics.STARTUP_S, [h.startup_s])
    if peak:
        gate.record(metrics.PEAK_RSS, [peak])
    gate.levers.remember("quantization", {"decode_tok_s": tok_s, "startup_s": h.startup_s, "peak_rss": peak,
                                   "weights": f"{cfg.model} dtype={cfg.dtype} quantization={cfg.quantization}"})

    ref, ref_figures = gate.levers.reference("quantization")
    if ref is not None:
        assert ref_figures is not None, (f"{cfg.id}: reference entry {ref.id!r} was not measured in this session "
                                         f"(it must list the 'quantization' lever and run first)")
        base = statistics.median(ref_figures["decode_tok_s"])
        gate.record(metrics.SPEEDUP, [v / base for v in tok_s], "quantization",
                    reference=ref.id, reference_decode_tok_s=ref_figures["decode_tok_s"])
