"""llama.cpp with CUDA, before any GPU: the build's CMake flags and its deadline (a build stopped
at its deadline stops with every process under it, and says to run again), the slim source pack's
manifest, and the adapter's checks of a GPU entry's binary (--list-devices) and its commit."""

import json
import os
import stat
import tarfile
import time
from pathlib import Path

import pytest

from llmgate import cli
from llmgate.tools import install
from llmgate.engines import llamacpp
from llmgate.config.matrix import ServerConfig

def test_cuda_flags():
    cpu = install.cmake_flags("off")
    assert cpu == install.CMAKE_FLAGS and "-DGGML_CUDA=ON" not in cpu
    cuda = install.cmake_flags("90", ["-DGGML_CUDA_NO_VMM=ON"])
    assert cuda[-3:] == ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90", "-DGGML_CUDA_NO_VMM=ON"]
    assert cuda[:len(install.CMAKE_FLAGS)] == install.CMAKE_FLAGS


def write_exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_a_build_past_its_deadline_stops_with_its_children_and_says_run_again(tmp_path, monkeypatch):
    """A stand-in cmake whose --build starts a long-running child (as CMake starts Ninja)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pidfile = tmp_path / "child.pid"
    write_exe(bin_dir / "cmake", f"""#!/bin/sh
if [ "$1" = "--build" ]; then
  sleep 300 & echo $! > {pidfile}
  wait
fi
mkdir -p "$4" && touch "$4/CMakeCache.txt"
""")
    src = tmp_path / "llama.cpp"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("")
    (src / install.SRC_MANIFEST).write_text(json.dumps({"sdist": "s.tar.gz", "sdist_sha256_16": "k" * 16,
                                                         "llama_cpp_commit": "abc"}))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("LLMGATE_CACHE", str(tmp_path / "cache"))
    t0 = time.monotonic()
    with pytest.raises(install.BuildIncomplete, match=r"stopped at its deadline \(2 s; \d+ s on it in all\): run the same command again"):
        install.build_llama_server(jobs=1, cuda_arch="90", deadline_s=2, source=src, log=lambda *a: None)
    assert time.monotonic() - t0 < 30
    child = int(pidfile.read_text())
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)                                   # the "ninja" under it is gone too
    home = tmp_path / "cache" / "llama.cpp" / ("k" * 16 + "-cuda90")
    assert float((home / "llmgate-build-seconds").read_text()) >= 2     # the next call adds to it
    assert not (home / "llmgate-build.json").exists()


def test_slim_source_pack_names_its_sdist_and_commit(tmp_path, monkeypatch):
    tree = tmp_path / "t" / "llama.cpp"
    (tree / "ggml").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)")
    (tree / install.SRC_MANIFEST).write_text(json.dumps({"sdist": "x.tar.gz", "sdist_sha256_16": "0123456789abcdef",
                                                          "llama_cpp_commit": "0c1e570"}))
    pack = tmp_path / "src.tar.xz"
    with tarfile.open(pack, "w:xz") as tar:
        tar.add(tree, arcname="llama.cpp")
    monkeypatch.setenv("LLMGATE_CACHE", str(tmp_path / "cache"))
    src, info = install.source_tree(pack, log=lambda *a: None)
    assert info["llama_cpp_commit"] == "0c1e570" and (src / "CMakeLists.txt").is_file()
    assert src == tmp_path / "cache" / "llama.cpp" / "0123456789abcdef" / "src-slim"


def test_a_gpu_entry_needs_a_binary_that_lists_a_gpu(tmp_path, monkeypatch):
    cuda = write_exe(tmp_path / "llama-server", """#!/bin/sh
echo "ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143156 MiB):" >&2
echo "Available devices:"
echo "  CUDA0: NVIDIA H200 (143156 MiB, 142530 MiB free)"
""")
    cpu = write_exe(tmp_path / "llama-server-cpu", "#!/bin/sh\necho 'Available devices:'\necho '  (none)'\n")
    llamacpp._devices.cache_clear()
    assert llamacpp._devices(str(cuda)) == ("CUDA0: NVIDIA H200 (143156 MiB, 142530 MiB free)",)
    assert llamacpp._devices(str(cpu)) == ()
    adapter = llamacpp.Adapter()
    gpu = ServerConfig(id="g", engine="llamacpp", model="tiny", device="gpu", launcher=str(cpu))
    why = adapter.unavailable(gpu)
    assert why and "lists no GPU device" in why and "gpu/build-llama-server-cuda.sh" in why
    assert adapter.unavailable(ServerConfig(id="g", engine="llamacpp", model="tiny", device="gpu",
                                            launcher=str(cuda))) is None
    assert adapter.unavailable(ServerConfig(id="c", engine="llamacpp", model="tiny", launcher=str(cpu))) is None


def test_the_commit_of_a_build_without_git_metadata_comes_from_its_manifest(tmp_path):
    home = tmp_path / "832db0699007f1be-cuda90"
    (home / "build" / "bin").mkdir(parents=True)
    binary = write_exe(home / "build" / "bin" / "llama-server",
                       "#!/bin/sh\necho 'version: 0.5.0-dev (build 0, commit unknown)' >&2\n")
    (home / "llmgate-build.json").write_text(json.dumps({"llama_cpp_commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f"}))
    llamacpp._version.cache_clear()
    info = llamacpp.Adapter().info(None, "", ServerConfig(id="c", engine="llamacpp", model="tiny", launcher=str(binary)))
    assert info.version == "0.5.0-dev build 0" and info.commit == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def test_a_source_that_is_no_pack_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    """--source given the sdist, its folder or a path that is not there: one line naming what it takes.
    (A cache of its own: in the user's, it would wait for a build in progress and leave its failure there.)"""
    monkeypatch.setenv("LLMGATE_CACHE", str(tmp_path / "cache"))
    tarball = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        readme = tmp_path / "README.md"
        readme.write_text("not a slim pack")
        tar.add(readme, arcname="llama_cpp_python-0.3.36/README.md")
    for source in (tmp_path, tarball, tmp_path / "missing.tar.xz"):
        assert cli.main(["install", "llama-server", "--source", str(source), "--configure-only"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "--source takes a slim source pack" in err and str(source) in err, err
