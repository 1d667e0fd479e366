"""One llama.cpp build at a time: while one process builds (a stand-in cmake that takes 2 s), a
second ``build_llama_server`` waits for it and then finds the binary built, and ``wait_for_build``
(what the self-test that runs llama-server calls first) returns only once the build has ended, saying
whose build it waited for.  Without a build in progress it returns at once."""

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from llmgate.tools import install

CMAKE = """#!/bin/sh
if [ "$1" = "--build" ]; then
  sleep 2
  mkdir -p "$2/bin" && touch "$2/bin/llama-server"
  exit 0
fi
mkdir -p "$4" && touch "$4/CMakeCache.txt"
"""


def source(tmp_path: Path) -> Path:
    src = tmp_path / "llama.cpp"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("")
    (src / install.SRC_MANIFEST).write_text(json.dumps({"sdist": "s.tar.gz", "sdist_sha256_16": "k" * 16,
                                                         "llama_cpp_commit": "abc"}))
    return src


def test_a_second_build_and_the_timing_tests_wait_for_the_first(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cmake").write_text(CMAKE)
    (bin_dir / "cmake").chmod(0o755 | stat.S_IEXEC)
    src = source(tmp_path)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LLMGATE_CACHE": str(tmp_path / "cache")}
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("LLMGATE_CACHE", env["LLMGATE_CACHE"])
    assert install.wait_for_build() == 0.0                  # no build ever: at once
    first = subprocess.Popen([sys.executable, "-m", "llmgate.install", "llama-server", "--jobs", "1",
                              "--source", str(src)], env=env, stdout=subprocess.PIPE, text=True)
    lock = tmp_path / "cache" / "llama.cpp" / install.LOCK
    t0 = time.monotonic()
    while not (lock.is_file() and lock.read_text().strip() == str(first.pid)):
        assert time.monotonic() - t0 < 20 and first.poll() is None, "the first build never took the lock"
        time.sleep(0.02)
    home = tmp_path / "cache" / "llama.cpp" / ("k" * 16)
    said: list[str] = []
    waited = install.wait_for_build(log=said.append)
    assert (home / "llmgate-build.json").is_file(), "wait_for_build returned while the build ran"
    assert waited > 0.5 and said == [f"waiting for the llama.cpp build of pid {first.pid} to finish …"], (waited, said)
    assert first.wait() == 0 and first.stdout.read().strip().endswith("/build/bin/llama-server")
    assert install.wait_for_build(log=said.append) == 0.0 and len(said) == 1      # over: at once, silently

    # a second build started while the first runs waits for it, then finds its binary
    (home / "llmgate-build.json").unlink()
    (home / "build" / "bin" / "llama-server").unlink()
    first = subprocess.Popen([sys.executable, "-m", "llmgate.install", "llama-server", "--jobs", "1",
                              "--source", str(src)], env=env, stdout=subprocess.PIPE, text=True)
    while lock.read_text().strip() != str(first.pid):
        assert first.poll() is None, "the first build never took the lock"
        time.sleep(0.02)
    said = []
    binary = install.build_llama_server(jobs=1, source=src, log=said.append)
    assert said[0] == f"waiting for the llama.cpp build of pid {first.pid} to finish …", said
    assert said[1:] == [f"llama-server already built: {binary}"], said
    assert first.wait() == 0
