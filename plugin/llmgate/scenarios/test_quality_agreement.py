"""Quality: quantization agreement.  For fixed prompts, the greedy tokens of a quantized entry
against those of its full-precision reference measured in the same session: the first
position where they diverge and the share of positions that agree."""

import pytest

import llmgate
from llmgate import metrics, quality

PROMPTS = 4
PROMPT_TOKENS = 32
OUTPUT_TOKENS = 64


@llmgate.scenario("quantization")
def test_quantization_agreement(gate):
    h, st, pm = gate.server, gate.settings, gate.prompts
    outputs = []
    for i in range(PROMPTS):
        prompt = pm.text(PROMPT_TOKENS, f"agreement-{i}")
        done, body = quality.complete(h, prompt, OUTPUT_TOKENS, h.engine.fixed_length_fields(h.config, h.eos_token_id),
                                      timeout=st.request_timeout)
        assert done.status == 200, f"HTTP {done.status}: {done.error}"
        ids = done.token_ids if done.token_ids is not None else \
            pm.tok.encode(done.text, add_special_tokens=False).ids
        outputs.append({"text": done.text, "ids": ids})
    gate.levers.remember("agreement", {"outputs": outputs})
    ref, ref_figures = gate.levers.reference("agreement")
    if ref is None:
        return
    if ref_figures is None:
        pytest.fail(f"{gate.entry.id}: reference {ref.id!r} was not measured in this session")
    agree, first = [], []
    for mine, theirs in zip(outputs, ref_figures["outputs"]):
        agree.append(quality.agreement(mine["ids"], theirs["ids"]))
        pos = quality.first_difference(mine["ids"], theirs["ids"])
        first.append(float(OUTPUT_TOKENS if pos is None else pos))
    gate.record(metrics.AGREEMENT, agree, reference=ref.id,
                texts=[{"now": m["text"], "reference": t["text"]} for m, t in zip(outputs, ref_figures["outputs"])])
    gate.record(metrics.DIVERGENCE, first, reference=ref.id)
