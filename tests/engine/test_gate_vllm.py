"""A server that dies while booting, against a real vLLM on the CPU (a pytester session that
boots it): its tests fail with the last lines of its log and no process is left behind.

Save, compare (passes) and a slowed engine (fails, after a confirmation run on a fresh server)
are one flow in ``test_use_in_a_repository.py``, run from an installed wheel.
"""

import re
import shutil
from pathlib import Path

import pytest

import cpu_vllm
from engine_procs import engine_processes

pytest_plugins = ["pytester"]

PERF = Path(__file__).resolve().parents[2] / "plugin" / "llmgate" / "scenarios"
SMALL = ["--llmgate-repeats", "4", "--llmgate-concurrency", "4", "-p", "no:cacheprovider", "-k", "not arrival"]


@pytest.fixture
def gate_dir(pytester):
    shutil.copy(PERF / "test_concurrency.py", pytester.path / "test_concurrency.py")
    return pytester


def test_server_dying_at_boot_fails_with_log_tail_and_leaves_nothing(gate_dir):
    p = gate_dir
    # 16k tokens of context cannot fit a 20 MB KV cache (8 KiB per token in float32): vLLM refuses at boot
    p.makefile(".toml", llmgate=cpu_vllm.entry("cpu-vllm-tiny", max_model_len=16384, kv_cache_bytes=20_000_000))
    r = p.runpytest_subprocess(*SMALL)
    r.assert_outcomes(errors=1)
    out = r.stdout.str()
    assert "cpu-vllm-tiny: vllm server exited with code" in out
    assert "vLLM estimates at most" in out
    assert re.search(r"last lines of \S+/\.llmgate/logs/cpu-vllm-tiny\.boot1\.\d{8}-\d{6}-\d+\.log:", out), out
    assert not engine_processes(p.path)
