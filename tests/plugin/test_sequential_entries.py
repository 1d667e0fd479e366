"""Entries of one session on one GPU run one after the other: the server of an entry is stopped
(``ServerPool.shutdown``, which waits for its whole process group) before the next entry's boots,
also when each entry spans several measurement boots and when a second engine follows the first
(matrices/gpu-engines-1gpu.toml: vLLM, then SGLang).  Through pytester with the session's boot and
shutdown (the server pool's) replaced by stand-ins that log (no engine)."""


pytest_plugins = ["pytester"]
CONFTEST = """
import json, os, pathlib
from llmgate.runner.pool import ServerPool

LOG = pathlib.Path(os.environ["EVENTS"])

def log(*what):
    with LOG.open("a") as f:
        f.write(" ".join(map(str, what)) + "\\n")

class Handle:
    def __init__(self, cfg):
        self.config = cfg
    def alive(self):
        return True

def boot(self, cfg):
    live = [cid for cid, s in self.servers.items()]
    log("boot", cfg.id, cfg.engine, "live:" + ",".join(live))
    self.servers[cfg.id] = object()
    self.boots.setdefault(cfg.id, []).append({"boot": len(self.boots.get(cfg.id, [])) + 1})
    return Handle(cfg)

def shutdown(self, cfg_id):
    if self.servers.pop(cfg_id, None) is not None:
        log("stop", cfg_id)

ServerPool.boot = boot
ServerPool.shutdown = shutdown
"""

MATRIX = """
[defaults]
model = "tiny"

[[matrix]]
id = "a-vllm"
engine = "vllm"
levers = ["gate", "concurrency", "prefix_cache"]

[[matrix]]
id = "b-sglang"
engine = "sglang"
levers = ["gate", "concurrency", "prefix_cache"]
"""

TESTS = """
import pytest

def test_one(llmgate_server):
    pass

def test_two(llmgate_server):
    pass
"""


def test_each_entry_is_stopped_before_the_next_boots(pytester, tmp_path, monkeypatch):
    events = tmp_path / "events.txt"
    monkeypatch.setenv("EVENTS", str(events))
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".toml", llmgate=MATRIX)
    pytester.makepyfile(test_x=TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    r.assert_outcomes(passed=4)
    assert events.read_text().splitlines() == [
        "boot a-vllm vllm live:", "stop a-vllm", "boot b-sglang sglang live:", "stop b-sglang"]
