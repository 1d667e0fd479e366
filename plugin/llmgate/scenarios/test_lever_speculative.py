"""Lever 2, speculative decoding: acceptance from the engine's own counters, and speedup.

Per entry with a speculative configuration, at a short and at a long prompt: acceptance
rate (accepted / draft tokens), mean acceptance length (1 + accepted / drafts) and
per-position acceptance, from /metrics counter deltas around each request; and decode
tok/s divided by the reference entry's (same model without speculation, same session).
The reference entry runs the same workload and records its decode speed.
"""

import statistics

import pytest

import llmgate
from llmgate import metrics


@llmgate.scenario("speculative")
def test_speculative_decoding(gate):
    cfg = gate.require_lever("speculative")
    sc, st, h = gate.scenarios, gate.settings, gate.server
    ref, ref_figures = gate.reference("speculative")
    if cfg.speculative and ref is None:
        pytest.fail(f"{cfg.id}: a speculative entry needs `reference` = the same model without speculation")
    figures: dict[str, list[float]] = {}
    for n_prompt in sc.spec_prompt_tokens:
        if n_prompt + sc.spec_output_tokens > cfg.max_model_len:
            continue
        variant = f"p{n_prompt}"
        gate.sequential(n_prompt, sc.spec_output_tokens, 0, seed=f"spec-warm-{variant}")
        acceptances, samples = [], []
        for r in range(st.repeats):
            before = gate.scrape()
            res = gate.run(gate.fresh_requests(1, n_prompt, sc.spec_output_tokens, f"spec-{variant}-{r}"), 1)
            after = gate.scrape()
            samples += res.ok
            acceptances.append(h.engine.spec_acceptance(gate.delta(before, after)))
        tok_s = [s.decode_tok_s for s in samples]
        figures[variant] = tok_s
        gate.record(metrics.DECODE_TOK_S, tok_s, variant)
        if cfg.speculative:
            if any(a is None for a in acceptances):
                # reported as unsupported, never as zero; the speed-up below is still measured
                gate.note(f"{variant}: {h.engine.name} publishes no speculative-decoding acceptance figures")
            else:
                assert all(a.proposed for a in acceptances), f"{cfg.id}: no drafts were proposed at {variant}"
                gate.record(metrics.SPEC_ACCEPT_RATE, [a.rate for a in acceptances], variant,
                            counters=[vars(a) for a in acceptances])
                if all(a.mean_length is not None for a in acceptances):
                    gate.record(metrics.SPEC_ACCEPT_LEN, [a.mean_length for a in acceptances], variant)
                for pos in range(min(len(a.position_rates) for a in acceptances)):
                    gate.record(metrics.SPEC_POS_RATE, [a.position_rates[pos] for a in acceptances],
                                f"{variant}-pos{pos}")
            if ref_figures is None:
                pytest.fail(f"{cfg.id}: reference entry {ref.id!r} was not measured in this session")
            if variant in ref_figures:
                base = statistics.median(ref_figures[variant])
                gate.record(metrics.SPEEDUP, [v / base for v in tok_s], f"speculative-{variant}",
                            reference=ref.id)
    assert figures, f"{cfg.id}: no prompt length of {sc.spec_prompt_tokens} fits max_model_len {cfg.max_model_len}"
    gate.remember("speculative", figures)
