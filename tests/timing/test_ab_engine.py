"""A/B mode against a real engine on the CPU, as a user runs it (``--llmgate-ab``, a duet by default),
with llama.cpp's llama-server (it boots in a second or two, where vLLM's CPU build takes ~30 s), and
the gate's self-validation on it:

- A/A: the same llama-server binary as both sides reads no change;
- injected regression: side B is the same binary behind a loopback proxy that delays every
  streamed token by ``DELAY_S`` (``delayed_server.py``: a launcher, as a nightly build would be
  given); its decode is flagged regressed, by about the injected size.

Both runs are the packaged decode scenario on K = 2 boot pairs, both servers resident, decode in
rounds of windows paired round by round (``runner/compare/duet.py``).  ``llmgate bisect`` makes
the same run at each step.  A duet of two real vLLM servers: tests/engine/test_duet_vllm.py."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from llmgate.config import matrix
from llmgate.engines import llamacpp

pytestmark = pytest.mark.real_engine      # (and timing: its folder)
pytest_plugins = ["pytester"]

MATRIX = """
[[matrix]]
id = "cpu-ab"
engine = "llamacpp"
model = "tiny"
max_model_len = 1024
max_num_seqs = 4
"""
DELAY_S = 0.003     # added to every streamed token (a decode step is 2.5–10 ms here): decode ~25–55% slower
PERF = Path(__file__).resolve().parents[2] / "plugin" / "llmgate" / "scenarios"
SUPPORT = Path(__file__).resolve().parents[1] / "support"


def duet(pytester, binary, side_b, out):
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "decode_c1", "--llmgate-ab", f"A={binary}",
                                      "--llmgate-ab", f"B={side_b}", "--llmgate-boots", "2", "--llmgate-alpha", "0.01",
                                      "--llmgate-accept", "inconclusive", "--llmgate-no-history", "--llmgate-out", out)
    report = json.loads((pytester.path / out / "report.json").read_text())
    return r, {v["key"]: v for v in report["verdicts"]}


@pytest.fixture
def llama_cache(llama_server_built, monkeypatch):
    """The cache the llama-server build is in (``<cache>/llama.cpp/<key>/build/bin/llama-server``), for
    the nested runs too: pytester gives them a HOME of their own, where no llama-server is built and
    the tiny model and its GGUF would be made again."""
    cache = llama_server_built.parents[4]
    assert (cache / "llama.cpp").is_dir(), llama_server_built
    monkeypatch.setenv("LLMGATE_CACHE", str(cache))
    return llama_server_built


def test_a_duet_of_llama_server_reads_no_change_in_an_aa_and_catches_an_injected_slowdown(llama_cache, pytester):
    llama_server_built = llama_cache
    shutil.copy(PERF / "test_decode.py", pytester.path / "test_decode.py")
    pytester.makefile(".toml", llmgate=MATRIX)
    binary = llamacpp.find_binary(matrix.load(pytester.path / "llmgate.toml").entries[0])
    assert binary == llama_server_built, (binary, llama_server_built)
    slow = pytester.path / "llama-server-delayed"
    slow.write_text(f"#!/bin/sh\nexec {sys.executable} {SUPPORT / 'delayed_server.py'} {binary} {DELAY_S} \"$@\"\n")
    slow.chmod(0o755)

    aa, aa_v = duet(pytester, binary, binary, "aa")
    out = aa.stdout.str()
    assert aa.ret == 0, out[-6000:]
    decode = aa_v["decode_tok_s"]
    assert decode["comparison"] == "duet, 2 boot pairs, 3 rounds a pair", decode
    flagged = {k: v["status"] for k, v in aa_v.items() if v["status"] in ("regressed", "improved")}
    assert not flagged, (flagged, out[-6000:])

    injected, inj_v = duet(pytester, binary, slow, "injected")
    out = injected.stdout.str()
    slow_decode = inj_v["decode_tok_s"]
    print("\n".join(f"{k}: {v['status']} {v['change']:+.1%} (MDE {v.get('mde')})" for k, v in inj_v.items()
                    if v.get("change") is not None))
    assert slow_decode["status"] == "regressed", (slow_decode, out[-6000:])
    assert -0.8 < slow_decode["change"] < -0.15, slow_decode        # about the injected slowdown, not something else
    assert injected.ret == 1 and "duet" in slow_decode["comparison"]
