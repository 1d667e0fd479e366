"""Install llmgate's Python dependencies that this interpreter lacks, from carried wheels, into
their own folder: nothing is downloaded, nothing already installed is replaced (torch, the
engine and its packages stay as they are).

    python3 gpu/prepare.py WHEELS_DIR SITE_DIR      → prints `export PYTHONPATH=...` on stdout

Every requirement of pyproject.toml's [project] dependencies and of the extras named in
EXTRAS is checked against what this interpreter (with the current PYTHONPATH) has; an
unsatisfied one is taken from WHEELS_DIR, with the requirements of that wheel that are
unsatisfied too.  Run it with the engine's PYTHONPATH already set, so that the engine's
carried packages count as installed.
"""

from __future__ import annotations

import email.parser
import os
import importlib.metadata as md
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
from pip._vendor.packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
# LLMGATE_EXTRAS="gpu llamacpp": also gguf (and what it needs) for llama.cpp entries, whose GGUFs are written there
EXTRAS = tuple(os.environ.get("LLMGATE_EXTRAS", "gpu").split())
ALSO = ("hypothesis>=6.100",)     # the packaged quality scenarios import it, whatever is selected


def installed(req: Requirement) -> str | None:
    try:
        v = md.version(req.name)
    except md.PackageNotFoundError:
        return None
    return v if req.specifier.contains(v, prereleases=True) else None


def wheels(folder: Path) -> dict[str, list[tuple[Version, Path]]]:
    out: dict[str, list[tuple[Version, Path]]] = {}
    for w in folder.glob("*.whl"):
        name, version = w.name.split("-")[:2]
        out.setdefault(canonicalize_name(name), []).append((Version(version), w))
    return out


def requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if re.match(r"[^/]+\.dist-info/METADATA$", n))
        msg = email.parser.Parser().parsestr(z.read(meta).decode())
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            out.append(r)
    return out


def main(argv: list[str]) -> int:
    folder, site = Path(argv[0]), Path(argv[1])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    for extra in EXTRAS:
        todo += [Requirement(r) for r in project["optional-dependencies"][extra]]
    todo += [Requirement(r) for r in ALSO]
    have = wheels(folder)
    chosen: dict[str, Path] = {}
    missing = []
    while todo:
        req = todo.pop(0)
        key = canonicalize_name(req.name)
        if key in chosen:
            continue
        v = installed(req)
        if v is not None:
            print(f"prepare: {req} satisfied by installed {req.name} {v}", file=sys.stderr)
            continue
        fits = sorted((ver, w) for ver, w in have.get(key, []) if req.specifier.contains(ver, prereleases=True))
        if not fits:
            missing.append(str(req))
            continue
        chosen[key] = fits[-1][1]
        print(f"prepare: {req} not satisfied here: carrying {fits[-1][1].name}", file=sys.stderr)
        todo += requires(fits[-1][1])
    if missing:
        print(f"prepare: not installed and no wheel in {folder}: {', '.join(missing)}", file=sys.stderr)
        return 1
    if chosen:
        site.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, chosen.values())], check=True)
    print(f"export PYTHONPATH=${{PYTHONPATH:+$PYTHONPATH:}}{site}:{ROOT / 'plugin'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
