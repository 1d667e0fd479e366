"""Engines that are not a pip install away, built locally and cached outside the repository.

    python -m llmgate.install llama-server [--jobs N]

llama-server: the sdist of ``llama-cpp-python`` (PyPI) carries the full llama.cpp source under
``vendor/llama.cpp``.  Only the ``llama-server`` and ``llama-quantize`` targets are built, as a
portable AVX2 build (no -march=native: CI machines differ), static, without the web UI
download or OpenSSL.  The build lands in ``$LLMGATE_CACHE/llama.cpp/<sdist sha256[:16]>/``
with ``llmgate-build.json`` recording the llama.cpp commit the sdist names; a second call
with the same sdist does nothing.  About 8-10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
]
TARGETS = ["llama-server", "llama-quantize"]


def cache_root() -> Path:
    return Path(os.environ.get("LLMGATE_CACHE", Path.home() / ".cache" / "llmgate")) / "llama.cpp"


def built_llama_server() -> Path | None:
    """The newest llama-server built by this module, if any."""
    root = cache_root()
    found = sorted(root.glob("*/llmgate-build.json"), key=lambda p: p.stat().st_mtime)
    for manifest in reversed(found):
        binary = manifest.parent / "build" / "bin" / "llama-server"
        if binary.is_file():
            return binary
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_llama_server(jobs: int | None = None, log=print) -> Path:
    root = cache_root()
    downloads = root / "sdist"
    downloads.mkdir(parents=True, exist_ok=True)
    sdists = sorted(downloads.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        log(f"downloading the {LLAMA_CPP_PYTHON} sdist (llama.cpp source) from the package index")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "-d", str(downloads), LLAMA_CPP_PYTHON], check=True)
        sdists = sorted(downloads.glob("llama_cpp_python-*.tar.gz"))
    sdist = sdists[-1]
    key = _sha256(sdist)[:16]
    home = root / key
    manifest = home / "llmgate-build.json"
    binary = home / "build" / "bin" / "llama-server"
    if manifest.is_file() and binary.is_file():
        log(f"llama-server already built: {binary}")
        return binary
    src = home / "src"
    if not (src / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
        shutil.rmtree(src, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=root))
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (home).mkdir(parents=True, exist_ok=True)
        os.replace(next(tmp.iterdir()), src)
        shutil.rmtree(tmp, ignore_errors=True)
    llama = src / "vendor" / "llama.cpp"
    head = src / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD"
    commit = head.read_text().strip() if head.is_file() else None
    build = home / "build"
    jobs = jobs or os.cpu_count() or 2
    t0 = time.monotonic()
    log(f"building llama-server from {sdist.name} (llama.cpp {commit or 'commit unknown'}) with {jobs} jobs …")
    subprocess.run(["cmake", "-S", str(llama), "-B", str(build), *CMAKE_FLAGS], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", *TARGETS, "-j", str(jobs)], check=True)
    manifest.write_text(json.dumps({"sdist": sdist.name, "sdist_sha256_16": key, "llama_cpp_commit": commit,
                                    "cmake_flags": CMAKE_FLAGS, "build_seconds": round(time.monotonic() - t0, 1)},
                                   indent=2))
    log(f"built {binary} in {time.monotonic() - t0:.0f} s")
    return binary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmgate.install", description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=["llama-server"])
    ap.add_argument("--jobs", type=int, default=None)
    a = ap.parse_args(argv)
    print(build_llama_server(a.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
