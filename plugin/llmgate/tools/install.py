"""Engines that are not a pip install away, built locally and cached outside the repository.

    llmgate install llama-server [--jobs N]

llama-server: the sdist of ``llama-cpp-python`` (PyPI) carries the full llama.cpp source under
``vendor/llama.cpp``.  Only the ``llama-server`` and ``llama-quantize`` targets are built, as a
portable AVX2 build (no -march=native: CI machines differ), static, without the web UI
download or OpenSSL.  The build lands in ``$LLMGATE_CACHE/llama.cpp/<sdist sha256[:16]>/``
with ``llmgate-build.json`` recording the llama.cpp commit the sdist names; a second call
with the same sdist does nothing.  About 8-10 minutes on 2 cores (seen 1,174 s on CI's 2 cores).
One build at a time: a second call waits for the first (a lock in the cache folder), and
``wait_for_build`` lets what needs the binary wait for a build in progress (CI builds in the
background at the lowest priority while the self-tests run; the one that runs llama-server waits).

With ``--cuda ARCH`` (e.g. 90 for an H200) the same source is built with ``-DGGML_CUDA=ON
-DCMAKE_CUDA_ARCHITECTURES=ARCH`` into ``<key>-cuda<ARCH>/``; ``--cuda off`` is the CPU build.
Ninja is used when it is on PATH.  ``--deadline-s S`` stops the build after S seconds and says
so: run it again and Ninja goes on where it stopped (for machines whose commands are limited
to 10 minutes).  ``--source`` takes the llama.cpp tree from a slim source pack made by

    llmgate install llama-src OUT.tar.xz

(the sdist's vendor/llama.cpp without its vocab models, docs, tests, examples and benches:
the 77 MB sdist does not fit a 64 MiB carry; the pack names the sdist and llama.cpp commit).

``--background`` (what ``tox -e selftest`` runs before its tests, README's Quick start) starts the
same build detached and returns at once, unless a llama-server is already there (built, on PATH, or
``$LLMGATE_LLAMA_SERVER``) or a build is in progress (``.ci/run``'s: the lock above is shared).  It
runs as ``.ci/run`` runs its own: a session of its own whose scheduler autogroup is niced to 19,
under ``nice -n 19``, so it takes only the CPU the tests leave idle; its output goes to
``build.log`` in the cache folder.  ``await_llama_server`` is what the self-test that runs
llama-server calls: it waits for a build in progress, starts one when none ran, and turns a failed
build into one line (``BuildFailed``, from ``build-failed.json``, which a failed build writes).

Why one module over ~450 lines: one build of llama-server under one lock: finding, fetching,
building and waiting for it share the cache folder's layout and the lock's rules.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
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
LOCK = "build.lock"          # in cache_root(): held by the process that builds, its pid inside
BUILD_LOG = "build.log"      # in cache_root(): the output of the last build started with --background
FAILED = "build-failed.json"  # in cache_root(): written by a build that failed, removed when one starts


def cache_root() -> Path:
    return Path(os.environ.get("LLMGATE_CACHE", Path.home() / ".cache" / "llmgate")) / "llama.cpp"


def _lock_file() -> Path:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    return root / LOCK


def _say_waiting(f, log) -> None:
    f.seek(0)
    log(f"waiting for the llama.cpp build of pid {f.read().strip() or '?'} to finish …")


@contextlib.contextmanager
def _build_lock(log=print):
    """Held while this process downloads, unpacks or builds: a second build waits for the first."""
    with open(_lock_file(), "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say_waiting(f, log)
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield
        finally:
            f.truncate(0)


def build_in_progress() -> str | None:
    """The pid (as the lock file names it) of a llama.cpp build holding the lock now, else None."""
    path = cache_root() / LOCK
    if not path.is_file():
        return None
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None
        except BlockingIOError:
            return f.read().strip() or "?"


def wait_for_build(log=print) -> float:
    """Seconds spent waiting for a llama.cpp build in progress (``llmgate install``,
    another process) to end; 0 when none runs.  Says once whose build it waits for."""
    path = cache_root() / LOCK
    if not path.is_file():
        return 0.0
    t0 = time.monotonic()
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return 0.0
        except BlockingIOError:
            _say_waiting(f, log)
            fcntl.flock(f, fcntl.LOCK_SH)
    return time.monotonic() - t0


def find_llama_server(launcher: str | None = None) -> Path | None:
    """The llama-server to run: ``launcher``, else ``$LLMGATE_LLAMA_SERVER``, else ``llama-server``
    on PATH, else the newest one this module built; None when there is none."""
    for cand in (launcher, os.environ.get("LLMGATE_LLAMA_SERVER"), shutil.which("llama-server")):
        if cand and Path(cand).is_file():
            return Path(cand)
    return built_llama_server()


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


SRC_MANIFEST = "llmgate-src.json"
# not needed to build llama-server / llama-quantize (CMake adds tests, examples and benches only when asked)
SLIM_EXCLUDE = ("models", "docs", "tests", "examples", "benches", "media")


class BadSource(ValueError):
    """``--source`` is neither a slim source pack nor the folder of one (said in one line)."""


class BuildIncomplete(RuntimeError):
    """The build stopped at its deadline; running it again continues it."""


def _sdist(log=print) -> Path:
    root = cache_root()
    downloads = root / "sdist"
    downloads.mkdir(parents=True, exist_ok=True)
    sdists = sorted(downloads.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        log(f"downloading the {LLAMA_CPP_PYTHON} sdist (llama.cpp source) from the package index")
        # the sdist, not a wheel, of llama-cpp-python only: pip prepares its metadata, and with
        # --no-binary :all: it built the build requirements from source too (CMake bootstrapped: minutes)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", LLAMA_CPP_PYTHON.split("==")[0],
                        "-d", str(downloads), LLAMA_CPP_PYTHON], check=True)
        sdists = sorted(downloads.glob("llama_cpp_python-*.tar.gz"))
    return sdists[-1]


def _extract(archive: Path, into: Path) -> None:
    """Unpack ``archive`` so that its one top-level folder becomes ``into``."""
    shutil.rmtree(into, ignore_errors=True)
    into.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=into.parent))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        os.replace(next(tmp.iterdir()), into)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def source_tree(source: Path | None = None, log=print) -> tuple[Path, dict]:
    """The llama.cpp source folder to build and what it is (sdist name, its sha256[:16] = the
    build key, llama.cpp commit): from the sdist (downloaded once), or from a slim source pack."""
    root = cache_root()
    if source is None:
        sdist = _sdist(log)
        key = _sha256(sdist)[:16]
        src = root / key / "src"
        if not (src / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
            _extract(sdist, src)
        head = src / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD"
        return src / "vendor" / "llama.cpp", {"sdist": sdist.name, "sdist_sha256_16": key,
                                               "llama_cpp_commit": head.read_text().strip() if head.is_file() else None}
    source = Path(source)
    what = ("a slim source pack written by `llmgate install llama-src OUT.tar.xz`, or the "
            "folder it unpacks to")
    if source.is_dir():
        if not (source / SRC_MANIFEST).is_file():
            raise BadSource(f"{source} has no {SRC_MANIFEST}: --source takes {what}")
        return source, json.loads((source / SRC_MANIFEST).read_text())
    try:
        with tarfile.open(source) as tar:                   # a slim pack: its manifest first
            member = next((m for m in tar.getmembers() if m.name.endswith("/" + SRC_MANIFEST)), None)
            if member is None:
                raise BadSource(f"{source} holds no {SRC_MANIFEST}: --source takes {what}")
            info = json.loads(tar.extractfile(member).read())
    except (OSError, tarfile.TarError) as e:
        raise BadSource(f"{source}: {e}; --source takes {what}") from None
    src = root / info["sdist_sha256_16"] / "src-slim"
    if not (src / "CMakeLists.txt").is_file():
        log(f"unpacking {source} ({info['sdist']}, llama.cpp {info['llama_cpp_commit']})")
        _extract(source, src)
    return src, info


def pack_source(out: Path, log=print) -> Path:
    """A slim tar.xz of the sdist's llama.cpp source (see the module docstring)."""
    llama, info = source_tree(log=log)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / SRC_MANIFEST
        manifest.write_text(json.dumps(info, indent=2))
        with tarfile.open(out, "w:xz", preset=6) as tar:
            for p in sorted(llama.iterdir()):
                if p.name not in SLIM_EXCLUDE:
                    tar.add(p, arcname=f"llama.cpp/{p.name}")
            tar.add(manifest, arcname=f"llama.cpp/{SRC_MANIFEST}")
    log(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {info['sdist']}, llama.cpp {info['llama_cpp_commit']}")
    return out


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; compilers of the group may linger a moment
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def cmake_flags(cuda_arch: str | None, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    if not cuda_arch or cuda_arch == "off":
        return [*CMAKE_FLAGS, *extra]
    return [*CMAKE_FLAGS, "-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}", *extra]


def build_llama_server(jobs: int | None = None, log=print, cuda_arch: str | None = None,
                       deadline_s: float | None = None, source: Path | None = None,
                       cmake_args: list[str] | tuple[str, ...] = (), configure_only: bool = False) -> Path:
    """Build llama-server and llama-quantize (see the module docstring); the binary's path.
    Raises BuildIncomplete when ``deadline_s`` ran out first (run again to continue)."""
    with _build_lock(log):
        failed = cache_root() / FAILED
        failed.unlink(missing_ok=True)
        try:
            return _build(jobs, log, cuda_arch, deadline_s, source, cmake_args, configure_only)
        except BuildIncomplete:
            raise
        except Exception as e:          # what await_llama_server reports, in one line
            if isinstance(e, subprocess.CalledProcessError):    # `cmake --build`, `python3 -m pip download`
                words = [Path(str(e.cmd[0])).name, *map(str, e.cmd[1:])]
                why = f"`{' '.join(words[:4 if words[1:2] == ['-m'] else 2])}` exited with status {e.returncode}"
            else:
                why = f"{type(e).__name__}: {e}"
            failed.write_text(json.dumps({"pid": os.getpid(), "error": why, "at": time.strftime("%Y-%m-%d %H:%M:%S")}))
            raise


class BuildFailed(RuntimeError):
    """The last llama.cpp build failed (its one-line reason and where its output is)."""


def last_failure() -> str | None:
    """One line about the last build, when it failed (build-failed.json), else None."""
    try:
        rec = json.loads((cache_root() / FAILED).read_text())
    except (OSError, ValueError):
        return None
    log_file = cache_root() / BUILD_LOG
    return (f"the llama-server build (pid {rec.get('pid')}, {rec.get('at')}) failed: {rec.get('error')}"
            + (f"; its output: {log_file}" if log_file.is_file() else ""))


def start_in_background(args: list[str] | tuple[str, ...] = (), log=print) -> subprocess.Popen | None:
    """Start ``python -m llmgate install llama-server ARGS`` detached at the lowest priority (see the
    module docstring) and return it at once; None, starting nothing, when a llama-server is already
    there or a build is in progress."""
    found = find_llama_server()
    if found is not None:
        log(f"llama-server already there: {found}")
        return None
    pid = build_in_progress()
    if pid:
        log(f"a llama.cpp build (pid {pid}) is in progress: not starting another")
        return None
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    (root / FAILED).unlink(missing_ok=True)     # the last build's failure, if any: this one replaces it
    env = dict(os.environ)              # the child runs this very llmgate, installed or not
    plugin_dir = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([plugin_dir, *filter(None, [env.get("PYTHONPATH")])])
    # .ci/run's llama_start, in Python: a session of its own whose scheduler autogroup is niced to 19
    # (where the kernel groups processes by session, a nice value weighs only against the same
    # session's processes, and every engine server runs in a session of its own), and nice 19 in it
    cmd = ["sh", "-c", 'echo 19 > /proc/self/autogroup 2>/dev/null; exec nice -n 19 "$0" "$@"',
           sys.executable, "-m", "llmgate", "install", "llama-server", *args]
    with open(root / BUILD_LOG, "w") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    log(f"building llama-server in the background at the lowest priority (pid {proc.pid}; cold, 6-20 minutes "
        f"of both cores), output in {root / BUILD_LOG}")
    return proc


def await_llama_server(args: list[str] | tuple[str, ...] = (), log=print) -> Path:
    """The llama-server to run, waiting for a build in progress, or starting one (in the background, as
    ``--background`` does) and waiting for it when none ran.  Raises BuildFailed, in one line, when
    the build failed (this one or the last one)."""
    waited = wait_for_build(log)
    if waited:
        log(f"waited {waited:.0f} s for the llama.cpp build")
    found = find_llama_server()
    if found is not None:
        return found
    why = last_failure()
    if why is None:
        t0 = time.monotonic()
        proc = start_in_background(args, log=log)
        rc = proc.wait() if proc is not None else 0
        log(f"the llama.cpp build ended after {time.monotonic() - t0:.0f} s (exit status {rc})")
        found = find_llama_server()
        if found is not None:
            return found
        why = last_failure() or (f"the llama-server build exited with status {rc} and built nothing; "
                                 f"its output: {cache_root() / BUILD_LOG}")
    raise BuildFailed(why)


def _build(jobs, log, cuda_arch, deadline_s, source, cmake_args, configure_only) -> Path:
    llama, info = source_tree(source, log)
    cuda = cuda_arch if cuda_arch and cuda_arch != "off" else None
    home = cache_root() / (info["sdist_sha256_16"] + (f"-cuda{cuda}" if cuda else ""))
    manifest = home / "llmgate-build.json"
    binary = home / "build" / "bin" / "llama-server"
    if manifest.is_file() and binary.is_file():
        log(f"llama-server already built: {binary}")
        return binary
    build = home / "build"
    jobs = jobs or os.cpu_count() or 2
    flags = cmake_flags(cuda, cmake_args)
    generator = ["-G", "Ninja"] if shutil.which("ninja") and not (build / "Makefile").is_file() else []
    spent_file = home / "llmgate-build-seconds"      # over every call that worked on this build
    spent = float(spent_file.read_text()) if spent_file.is_file() else 0.0
    t0 = time.monotonic()
    log(f"building llama-server from {info['sdist']} (llama.cpp {info['llama_cpp_commit'] or 'commit unknown'}) "
        f"with {jobs} jobs{f', CUDA architectures {cuda}' if cuda else ''}"
        f"{f', {spent:.0f} s spent on it before' if spent else ''} …")
    home.mkdir(parents=True, exist_ok=True)
    if not (build / "CMakeCache.txt").is_file():
        subprocess.run(["cmake", "-S", str(llama), "-B", str(build), *generator, *flags], check=True)
    if configure_only:
        log(f"configured {build} in {time.monotonic() - t0:.0f} s (not built: configure only)")
        return build
    left = None if deadline_s is None else max(1.0, deadline_s - (time.monotonic() - t0))
    # its own process group: at the deadline the compilers and Ninja under CMake stop with it.  Not
    # its own session: with Linux's scheduler autogroups a new session would get a share of the CPU
    # of its own, whatever priority the caller runs at (.ci/run builds at the lowest)
    proc = subprocess.Popen(["cmake", "--build", str(build), "--target", *TARGETS, "-j", str(jobs)],
                            process_group=0)
    try:
        if proc.wait(timeout=left):
            raise subprocess.CalledProcessError(proc.returncode, proc.args)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        spent += time.monotonic() - t0
        spent_file.write_text(f"{spent:.1f}")
        raise BuildIncomplete(f"the build stopped at its deadline ({deadline_s:.0f} s; {spent:.0f} s on it in all): "
                              f"run the same command again, it continues where it stopped ({build})") from None
    spent += time.monotonic() - t0
    manifest.write_text(json.dumps({**info, "cmake_flags": flags, "generator": "Ninja" if generator or
                                    (build / "build.ninja").is_file() else "default", "jobs": jobs,
                                    "build_seconds": round(spent, 1)}, indent=2))
    spent_file.unlink(missing_ok=True)
    log(f"built {binary} in {spent:.0f} s ({time.monotonic() - t0:.0f} s in this call)")
    return binary


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate install``'s arguments (llmgate.cli)."""
    ap.add_argument("what", choices=["llama-server", "llama-src"],
                    help="llama-server: build it; llama-src: write the slim source pack to OUT")
    ap.add_argument("out", nargs="?", help="llama-src: the .tar.xz to write")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--cuda", metavar="ARCH", default=None, help="CUDA architectures (90 for an H200); off: CPU")
    ap.add_argument("--deadline-s", type=float, default=None, help="stop after this long; run again to continue")
    ap.add_argument("--source", type=Path, default=None, help="a slim source pack (llama-src) or its folder")
    ap.add_argument("--cmake-arg", action="append", default=[], help="one more CMake argument (repeatable)")
    ap.add_argument("--configure-only", action="store_true", help="run CMake's configure step, build nothing")
    ap.add_argument("--background", action="store_true",
                    help="start the build detached at the lowest priority and return at once (nothing when "
                         "a llama-server is there or a build is in progress)")


def run(a: argparse.Namespace) -> int:
    """``llmgate install llama-server|llama-src``: build llama-server, or write the slim source pack."""
    if a.background:
        if a.what != "llama-server":
            raise argparse.ArgumentError(None, "--background is for llama-server")
        forward = [*(["--jobs", str(a.jobs)] if a.jobs else []), *(["--cuda", a.cuda] if a.cuda else []),
                   *(["--deadline-s", str(a.deadline_s)] if a.deadline_s else []),
                   *(["--source", str(a.source.resolve())] if a.source else []),
                   *(f"--cmake-arg={x}" for x in a.cmake_arg), *(["--configure-only"] if a.configure_only else [])]
        start_in_background(forward, log=lambda msg: print(f"llmgate install: {msg}", flush=True))
        return 0
    if a.what == "llama-src":
        if not a.out:
            raise argparse.ArgumentError(None, "llama-src needs OUT (the .tar.xz to write)")
        pack_source(Path(a.out))
        return 0
    try:
        print(build_llama_server(a.jobs, cuda_arch=a.cuda, deadline_s=a.deadline_s, source=a.source,
                                 cmake_args=a.cmake_arg, configure_only=a.configure_only))
    except BuildIncomplete as e:
        print(f"llmgate install: {e}", file=sys.stderr)
        return 3
    except BadSource as e:
        print(f"llmgate install: {e}", file=sys.stderr)
        return 2
    return 0
