"""Quality: greedy determinism.  Fixed prompts at temperature 0 must give the same tokens
twice on one server, and the same tokens as the stored baseline: a changed output after an
engine bump is a quality change, reported with the first differing position and both
texts (--llmgate-determinism=warn makes it a warning instead of a failure)."""

import pytest

import llmgate
from llmgate import metrics, quality

PROMPTS = 4
PROMPT_TOKENS = 32
OUTPUT_TOKENS = 32


def greedy(h, prompt, timeout):
    done, body = quality.complete(h, prompt, OUTPUT_TOKENS, h.engine.fixed_length_fields(h.config, h.eos_token_id),
                                  timeout=timeout)
    assert done.status == 200, f"HTTP {done.status}: {done.error}\n{quality.as_curl(h, body)}"
    return done


@llmgate.scenario("quality")
def test_greedy_determinism(gate):
    h, st, pm = gate.server, gate.settings, gate.prompts
    outputs, same = {}, []
    for i in range(PROMPTS):
        prompt = pm.text(PROMPT_TOKENS, f"determinism-{i}")
        first, second = greedy(h, prompt, st.request_timeout), greedy(h, prompt, st.request_timeout)
        ids = first.token_ids if first.token_ids is not None else None
        outputs[f"p{i}"] = {"text": first.text, "token_ids": ids}
        pos = quality.first_difference(first.token_ids or first.text, second.token_ids or second.text)
        same.append(1.0 if pos is None else 0.0)
        assert pos is None, (f"prompt {i}: two greedy runs on one server differ at position {pos}:\n"
                             f"  first:  {first.text!r}\n  second: {second.text!r}")
    base = gate.baseline_info(metrics.GREEDY)
    gate.record(metrics.GREEDY, same, outputs=outputs)
    if base is None or "outputs" not in base:
        return
    changes = []
    for name, now in outputs.items():
        old = base["outputs"].get(name)
        if old is None:
            continue
        a = old["token_ids"] if old.get("token_ids") is not None and now["token_ids"] is not None else old["text"]
        b = now["token_ids"] if old.get("token_ids") is not None and now["token_ids"] is not None else now["text"]
        pos = quality.first_difference(a, b)
        if pos is not None:
            unit = "token" if isinstance(a, list) else "character"
            changes.append(f"{name}: greedy output changed at {unit} {pos}:\n    baseline: {old['text']!r}\n"
                           f"    now:      {now['text']!r}")
    if changes:
        message = f"quality change: {len(changes)} of {len(outputs)} greedy outputs differ from the baseline\n" + \
                  "\n".join(changes)
        if st.determinism == "fail":
            pytest.fail(message, pytrace=False)
        gate.note(message)
