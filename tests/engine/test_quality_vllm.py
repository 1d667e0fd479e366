"""Quality checks against a real vLLM server on the CPU: deliberately broken configurations
must fail with a report a person can act on.

- greedy outputs recorded in a baseline with one model (seed 0) and compared with another
  (seed 1): the determinism test fails naming the first differing token and both texts;
  with --llmgate-determinism=warn it passes and says so in the notes;
- an entry that asks for max_model_len 1024 but whose extra engine args boot it with 512:
  the prompt-length property fails with the falsifying example and a request to replay.
"""

import shutil
from pathlib import Path

import pytest

import cpu_vllm

pytest_plugins = ["pytester"]

PERF = Path(__file__).resolve().parents[2] / "plugin" / "llmgate" / "scenarios"
OTHER_MODEL = """
[models.tiny-other]
seed = 1
"""


def entry(model: str) -> str:
    return OTHER_MODEL + cpu_vllm.entry("cpu-vllm-q", model=model, extra='levers = ["quality"]\n')


COMMON = ["-p", "no:cacheprovider", "--llmgate-hypothesis-examples", "8"]


@pytest.fixture
def qdir(pytester):
    for name in ("test_quality_determinism.py", "test_quality_limits.py"):
        shutil.copy(PERF / name, pytester.path / name)
    return pytester


def test_greedy_outputs_of_another_model_fail_as_a_quality_change(qdir):
    p = qdir
    p.makefile(".toml", llmgate=entry("tiny"))
    r = p.runpytest_subprocess(*COMMON, "test_quality_determinism.py", "--benchmark-save=seed0")
    r.assert_outcomes(passed=1)

    p.makefile(".toml", llmgate=entry("tiny-other"))
    r = p.runpytest_subprocess(*COMMON, "test_quality_determinism.py", "--benchmark-compare", "--llmgate-allow-mismatch")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert "quality change:" in out and "greedy outputs differ from the baseline" in out, out
    r.stdout.fnmatch_lines(["*p0: greedy output changed at token *", "*baseline: '*", "*now:      '*"])

    r = p.runpytest_subprocess(*COMMON, "test_quality_determinism.py", "--benchmark-compare",
                               "--llmgate-allow-mismatch", "--llmgate-determinism=warn")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*quality change:*greedy outputs differ from the baseline*"])


def test_server_booted_shorter_than_its_entry_fails_the_length_property(qdir):
    p = qdir
    p.makefile(".toml", llmgate=entry("tiny") + 'args = ["--max-model-len", "512"]\n')
    r = p.runpytest_subprocess(*COMMON, "test_quality_limits.py", "--hypothesis-seed=1")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    # prompts past 512 are refused (400) or their output cut short, though the entry says 1024
    # (seen: "prompt 512 + max_tokens 1 within max_model_len 1024: request failed: HTTP 400: …max_tokens
    # must be at least 1, got 0", and "prompt 481 + max_tokens 32 …: 31 tokens generated, 32 asked")
    assert "within max_model_len 1024: " in out, out
    assert ("Falsifying example" in out or "Failing test case" in out) and "reproduce: curl" in out, out
