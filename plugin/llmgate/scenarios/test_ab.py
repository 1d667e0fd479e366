"""A/B mode, the pre-upgrade gate in its strongest form: the pinned engine (A) and the
candidate (B) booted alternately in this job — A B A B … — and measured with the same
workload; B fails if it is slower than A beyond the metric's minimum effect and beyond the
boot-to-boot noise.

    pytest --pyargs llmgate.scenarios -k test_ab --llmgate-ab A=/venvs/vllm-pinned/bin/python \\
                                 --llmgate-ab B=/venvs/vllm-nightly/bin/python
"""

import pytest

from llmgate import ab


# Both sides are measured in this job, so the noise to allow for is boot to boot, not day to day:
# tighter than the CPU default matrix's stored-baseline minimum effects (override per run with
# --llmgate-min-effect, which takes precedence).
@pytest.mark.llmgate(min_effect={"decode_tok_s": 0.10, "ttft_c1": 0.25, "aggregate_tok_s": 0.10, "ttft_p95": 0.25})
@pytest.mark.ab
def test_ab(llmgate_config, llmgate_exclusive, gate):
    st = gate.settings
    (a_name, a_launcher), (b_name, b_launcher) = st.ab
    workload = ab.standard_workload(st.repeats, st.warmup, st.request_timeout, st.concurrency)
    result = ab.run_ab(gate.entry, gate.matrix, gate.log_dir(f"ab-{gate.entry.id}"),
                       (ab.Side(a_name, a_launcher), ab.Side(b_name, b_launcher)), st.ab_rounds, workload,
                       progress=gate.boot_progress, say=gate.say)
    verdicts = ab.judge_ab(result, a_name, b_name, st.alpha, gate.min_effect)
    gate.attach(verdicts)
