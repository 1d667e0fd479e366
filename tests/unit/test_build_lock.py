"""One llama.cpp build at a time: while one process builds (a stand-in cmake that takes 2 s), a
second ``build_llama_server`` waits for it and then finds the binary built, and ``wait_for_build``
(what the self-test that runs llama-server calls first) returns only once the build has ended, saying
whose build it waited for.  Without a build in progress it returns at once.

``--background`` (tox -e selftest's start): returns at once, its build detached in a session of its
own at nice 19 (its autogroup too), and starts nothing while a build runs or once one is there;
``.ci/run``'s own start then waits for that build and finds it built.  ``await_llama_server`` (the
llama-server self-test's fixture) starts a build when none ran, and a failed build is one line,
at once the second time, not a hang or a second build."""

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgate.tools import install

CMAKE = """#!/bin/sh
if [ "$1" = "--build" ]; then
  sleep "${STUB_BUILD_S:-2}"
  [ -n "${STUB_FAIL:-}" ] && { echo "stub: the compiler broke" >&2; exit 2; }
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


def stub_cmake(tmp_path: Path, monkeypatch) -> dict[str, str]:
    """A stand-in cmake first on PATH (no llama-server there), an empty cache: the environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cmake").write_text(CMAKE)
    (bin_dir / "cmake").chmod(0o755 | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "LLMGATE_CACHE": str(tmp_path / "cache")}
    env.pop("LLMGATE_LLAMA_SERVER", None)
    monkeypatch.delenv("LLMGATE_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("LLMGATE_CACHE", env["LLMGATE_CACHE"])
    return env


def test_a_second_build_and_the_timing_tests_wait_for_the_first(tmp_path, monkeypatch):
    env = stub_cmake(tmp_path, monkeypatch)
    src = source(tmp_path)
    assert install.wait_for_build() == 0.0                  # no build ever: at once
    first = subprocess.Popen([sys.executable, "-m", "llmgate", "install", "llama-server", "--jobs", "1",
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
    first = subprocess.Popen([sys.executable, "-m", "llmgate", "install", "llama-server", "--jobs", "1",
                              "--source", str(src)], env=env, stdout=subprocess.PIPE, text=True)
    while lock.read_text().strip() != str(first.pid):
        assert first.poll() is None, "the first build never took the lock"
        time.sleep(0.02)
    said = []
    binary = install.build_llama_server(jobs=1, source=src, log=said.append)
    assert said[0] == f"waiting for the llama.cpp build of pid {first.pid} to finish …", said
    assert said[1:] == [f"llama-server already built: {binary}"], said
    assert first.wait() == 0


def background(env: dict[str, str], src: Path) -> tuple[float, str]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "llmgate", "install", "llama-server", "--background", "--jobs", "1",
                        "--source", str(src)], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return time.monotonic() - t0, r.stdout


def ended(pid: int, within: float = 30) -> None:
    t0 = time.monotonic()
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() - t0 < within, f"pid {pid} still runs"
        time.sleep(0.05)


def test_a_background_build_returns_at_once_at_the_lowest_priority_and_is_built_once(tmp_path, monkeypatch):
    env = {**stub_cmake(tmp_path, monkeypatch), "STUB_BUILD_S": "4"}
    src = source(tmp_path)
    secs, out = background(env, src)
    # at once, and not holding the caller's output open (tox reads it to its end)
    assert secs < 3, (secs, out)
    m = re.search(r"building llama-server in the background at the lowest priority \(pid (\d+);", out)
    assert m, out
    pid = int(m.group(1))
    lock = tmp_path / "cache" / "llama.cpp" / install.LOCK
    t0 = time.monotonic()
    while not (lock.is_file() and lock.read_text().strip() == str(pid)):
        assert time.monotonic() - t0 < 20 and Path(f"/proc/{pid}").exists(), "the build never took the lock"
        time.sleep(0.02)
    assert install.build_in_progress() == str(pid)
    assert os.getsid(pid) == pid                                    # a session of its own
    assert int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]) == 19    # nice 19
    autogroup = Path(f"/proc/{pid}/autogroup")
    if autogroup.is_file():                                        # a kernel with scheduler autogroups
        assert autogroup.read_text().split()[-1] == "19", autogroup.read_text()

    # a second start while it runs starts nothing; .ci/run's own start (a build) waits for it, then finds it
    secs, out = background(env, src)
    assert out.strip() == f"llmgate install: a llama.cpp build (pid {pid}) is in progress: not starting another"
    said: list[str] = []
    binary = install.build_llama_server(jobs=1, source=src, log=said.append)
    assert said == [f"waiting for the llama.cpp build of pid {pid} to finish …",
                    f"llama-server already built: {binary}"], said
    ended(pid)
    assert "built " in (tmp_path / "cache" / "llama.cpp" / install.BUILD_LOG).read_text()
    secs, out = background(env, src)
    assert out.strip() == f"llmgate install: llama-server already there: {binary}"
    assert install.await_llama_server(log=said.append) == binary and len(said) == 2     # at once, silently


def test_the_self_test_starts_a_build_when_none_ran_and_a_failed_build_is_one_line(tmp_path, monkeypatch):
    env = stub_cmake(tmp_path, monkeypatch)
    src = source(tmp_path)
    monkeypatch.setenv("STUB_FAIL", "1")
    said: list[str] = []
    with pytest.raises(install.BuildFailed) as e:
        install.await_llama_server(args=["--jobs", "1", "--source", str(src)], log=said.append)
    why = str(e.value)
    log_file = tmp_path / "cache" / "llama.cpp" / install.BUILD_LOG
    assert "\n" not in why and why.endswith(f"its output: {log_file}"), why
    assert re.fullmatch(r"the llama-server build \(pid \d+, [-\d: ]+\) failed: `cmake --build` exited with "
                        r"status 2; its output: \S+", why), why
    assert said[0].startswith("building llama-server in the background") and "exit status 1" in said[-1], said
    assert "stub: the compiler broke" in log_file.read_text()
    # the next run of the test fails at once with the same line, starting no second build
    t0 = time.monotonic()
    with pytest.raises(install.BuildFailed) as again:
        install.await_llama_server(args=["--jobs", "1", "--source", str(src)], log=said.append)
    assert str(again.value) == why and time.monotonic() - t0 < 1 and install.build_in_progress() is None

    # a new start (tox -e selftest's) builds again; the test waits for it and the failure is forgotten
    monkeypatch.delenv("STUB_FAIL")
    env.pop("STUB_FAIL", None)
    background(env, src)
    said = []
    binary = install.await_llama_server(args=["--jobs", "1", "--source", str(src)], log=said.append)
    assert binary.is_file() and binary == install.built_llama_server() and install.last_failure() is None
