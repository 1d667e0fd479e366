"""Quality: structured-output validity under sampling.  Every constrained case is sampled
several times at temperature 1 (seeded): each output must satisfy its schema / pattern.
On vLLM its structured-outputs config disallows free whitespace (seen here with default
settings: 2 of 5 outputs valid; with disable_any_whitespace: 10 of 10)."""

import pytest

import llmgate
from llmgate import metrics, quality

SAMPLES = 5


@llmgate.scenario("quality")
def test_structured_validity(gate):
    h = gate.server
    cases = [c for c in quality.load_corpus() if c.structured]
    if all(h.engine.structured_fields(c.structured) is None for c in cases):
        pytest.skip(f"{h.engine.name} has no constrained decoding")
    valid, invalid = 0, []
    for case in cases:
        fields = h.engine.structured_fields(case.structured)
        if fields is None:
            continue
        for k in range(SAMPLES):
            done, body = quality.complete(h, case.prompt, case.max_tokens + h.engine.structured_slack, fields,
                                          temperature=1.0, seed=1000 + k,
                                          timeout=gate.settings.request_timeout)
            bad = [c for c in quality.check_case(case, done.text) if not c.ok] if done.status == 200 else ["HTTP error"]
            if bad:
                invalid.append(f"{case.id} sample {k}: {done.text[:80]!r} {bad[0]}\n    {quality.as_curl(h, body)}")
            else:
                valid += 1
    total = valid + len(invalid)
    gate.record(metrics.VALID_RATE, [valid / total], samples=total)
    assert not invalid, f"{len(invalid)} of {total} constrained outputs were invalid:\n" + "\n".join(invalid)
