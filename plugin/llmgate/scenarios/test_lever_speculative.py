"""Lever 2, speculative decoding: acceptance from the engine's own counters, and speedup.

Per entry with a speculative configuration, at a short and at a long prompt: acceptance
rate (accepted / draft tokens), mean acceptance length (1 + accepted / drafts) and
per-position acceptance, from /metrics counter deltas around each request; and decode
tok/s divided by the reference entry's (same model without speculation, same session: the median
of its boots' medians).  Measured on each of the entry's boots (``--llmgate-boots``), so that its
figures are judged with the boot as the unit, like decode's.
The reference entry runs the same workload and records its decode speed.  An entry whose drafts
come from the context (n-gram) runs the lookup workload instead (``lookup-p64``: a prompt holding
every pair of a few words, generation restricted to them), where its drafter proposes by
construction; its reference runs both.

Acceptance is recorded (and compared with baselines and the seed) only where it means something
(``gate.levers.acceptance_meaningful()``): drafts from the context (n-gram prompt lookup)
always; drafts from trained weights (a draft model, EAGLE, MTP) only when neither side has random
weights.  Otherwise the counters are kept in the speed-up's raw data and named in a note as not
meaningful: what such a method costs is still measured and gated.  Context drafts on random
weights are recorded with a caveat (``gate.levers.acceptance_caveat()``, in a note and in the stored
figures): a random model repeats itself, so they are an upper bound of what real text gets.
"""

import statistics

import pytest

import llmgate
from llmgate import figures, metrics, requests


@llmgate.scenario("speculative", boots=True)
def test_speculative_decoding(gate):
    cfg = gate.levers.require("speculative")
    sc, st, h, pm = gate.matrix.scenarios, gate.settings, gate.server, gate.prompts
    ref, ref_figures = gate.levers.reference("speculative")
    if cfg.speculative and ref is None:
        pytest.fail(f"{cfg.id}: a speculative entry needs `reference` = the same model without speculation")
    kept: dict[str, list[float]] = {}
    not_meaningful = gate.levers.acceptance_meaningful() if cfg.speculative else None
    caveat = gate.levers.acceptance_caveat() if cfg.speculative and not not_meaningful else None
    if caveat:
        gate.note(caveat)
    # The workloads.  Drafts from the context (n-gram prompt lookup) are proposed only where the
    # context's last n tokens (n >= prompt_lookup_min) occurred before in it (vLLM 0.32:
    # v1/spec_decode/ngram_proposer.py, _find_longest_matched_ngram_and_propose_tokens, over prompt
    # and output).  Which tokens a random-weight model repeats depends on the machine's floating
    # point (a new machine proposed none at p64), so such an entry measures the lookup workload:
    # every pair of a few words is in the prompt and generation is restricted to those words, so
    # every step ends in a pair seen before and the drafter proposes, whatever the model emits
    # (llmgate.requests.lookup).  Its reference measures that workload too, beside the plain one
    # that the other entries (a draft model, whose drafts are not restricted) are compared with.
    lookup = requests.lookup_workload(cfg, h, gate.matrix)
    workloads = []
    for n_prompt in sc.spec_prompt_tokens:
        if n_prompt + sc.spec_output_tokens > cfg.max_model_len:
            continue
        if not (lookup and cfg.speculative):
            workloads.append((f"p{n_prompt}", n_prompt, requests.fresh))
        if lookup:
            workloads.append((f"lookup-p{n_prompt}", n_prompt, requests.lookup))
    for variant, n_prompt, make in workloads:
        if st.warmup:
            gate.run(make(h, pm, st.warmup, n_prompt, sc.spec_output_tokens, f"spec-warm-{variant}"), 1, account=False)
        acceptances, samples = [], []
        for r in range(st.repeats):
            before = gate.scrape()
            res = gate.run(make(h, pm, 1, n_prompt, sc.spec_output_tokens, f"spec-{variant}-{r}"), 1)
            after = gate.scrape()
            samples += res.ok
            acceptances.append(h.engine.spec_acceptance(figures.delta(before, after)))
        tok_s = [s.decode_tok_s for s in samples]
        kept[variant] = tok_s
        gate.record(metrics.DECODE_TOK_S, tok_s, variant)
        counters = None
        if cfg.speculative:
            if any(a is None for a in acceptances):
                # reported as unsupported, never as zero; the speed-up below is still measured
                gate.note(f"{variant}: {h.engine.name} publishes no speculative-decoding acceptance figures")
            elif not_meaningful:
                # seen, kept with the speed-up's raw data, never stored as an acceptance figure
                counters = [vars(a) for a in acceptances]
                rates = [a.rate for a in acceptances if a.rate is not None]
                seen = f"acceptance rate {statistics.median(rates):.2f} seen" if rates else "no drafts accepted"
                gate.note(f"{variant}: {seen}, not recorded: not meaningful: {not_meaningful}")
            else:
                assert all(a.proposed for a in acceptances), f"{cfg.id}: no drafts were proposed at {variant}"
                gate.record(metrics.SPEC_ACCEPT_RATE, [a.rate for a in acceptances], variant,
                            counters=[vars(a) for a in acceptances], caveat=caveat)
                if all(a.mean_length is not None for a in acceptances):
                    gate.record(metrics.SPEC_ACCEPT_LEN, [a.mean_length for a in acceptances], variant)
                for pos in range(min(len(a.position_rates) for a in acceptances)):
                    gate.record(metrics.SPEC_POS_RATE, [a.position_rates[pos] for a in acceptances],
                                f"{variant}-pos{pos}")
            if ref_figures is None:
                pytest.fail(f"{cfg.id}: reference entry {ref.id!r} was not measured in this session")
            # the reference's boots ran before this entry's (matrix order): the speed-up of this boot
            # is over the reference's boot of the same number, as the engine ratio is (paired_base)
            theirs = {b: statistics.median(f[variant]) for b, f in sorted(gate.levers.reference_boots("speculative").items())
                      if variant in f}
            if theirs:
                base, ref_boot = gate.levers.paired_base(theirs)
                extra = {"acceptance_not_meaningful": not_meaningful, "counters": counters} if counters else {}
                if caveat:
                    extra["caveat"] = caveat
                gate.record(metrics.SPEEDUP, [v / base for v in tok_s], f"speculative-{variant}",
                            reference=ref.id, reference_boot_medians=list(theirs.values()), reference_boot=ref_boot,
                            **extra)
    assert kept, f"{cfg.id}: no prompt length of {sc.spec_prompt_tokens} fits max_model_len {cfg.max_model_len}"
    gate.levers.remember("speculative", kept)
