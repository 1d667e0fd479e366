"""The keys of stored baselines: ``<scenario>[<matrix entry>]::<metric>[@<variant>]``
(``decode_c1[cpu-vllm-tiny]::decode_tok_s``): the scenario is the test function's name without
``test_``, so the key does not depend on where the scenario's file lies (in the installed
package, in a team's own ``tests/``).  Files stored with the keys of llmgate 0.1
(``tests/perf/test_decode.py::test_decode_c1[h200]::…``) are read as the new keys, and
``llmgate migrate DIR`` (``run`` here) rewrites them, and gives
fingerprints stored with absolute paths their portable form (``fingerprint.migrate_fingerprint``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from llmgate.store.benchmark_files import EXTRA_KEY, BaselineError, is_llmgate, new_temp, stored_files, validate_file
from llmgate.store.fingerprint import migrate_fingerprint


# -- keys: scenario + matrix entry + metric (+ variant) ----------------------------------------
def scenario_name(item: pytest.Item) -> str:
    """The scenario a test is: its function's name without ``test_``."""
    name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    return name.removeprefix("test_")


def stored_key(item: pytest.Item) -> str:
    """The test's part of its stored keys: ``scenario[entry]`` (``decode_c1[cpu-vllm-tiny]``);
    the ids of other parameters, when the test has any, in brackets before the entry's
    (``sweep[long][cpu-vllm-tiny]``).  Independent of the file's path, of the boot a test
    measures (one stored entry spans the boots of a run) and of pytest-xdist's ``@group``."""
    scenario = scenario_name(item)
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return scenario
    cfg = callspec.params.get("llmgate_config")
    pid = callspec.id
    if cfg is None:
        return f"{scenario}[{pid}]"
    boot = callspec.params.get("llmgate_boot")
    entry_part = cfg.id
    plan = getattr(boot, "plan", None)
    if plan is not None:
        # the id its entry's plan gave the boot (runner.boots.EntryBoots.test_id: ENTRY-bootK,
        # ENTRY-bootK.SIDE, ENTRY-pairK)
        entry_part = plan.test_id(cfg, int(boot))
        entry_part = entry_part if entry_part in pid else cfg.id
    elif boot is not None:
        # ENTRY-bootK, or in A/B mode ENTRY-bootK.SIDE
        m = re.search(re.escape(f"{cfg.id}-boot{boot}") + r"(\.[^-\]]+)?", pid)
        entry_part = m.group(0) if m else cfg.id
    others = "-".join(p for p in pid.replace(entry_part, "\0", 1).split("\0") if p).strip("-")
    return f"{scenario}[{others}][{cfg.id}]" if others else f"{scenario}[{cfg.id}]"


def base_nodeid(nodeid: str) -> str:
    """A node id without its parameters (the boots of one test share their stored keys)."""
    return nodeid.split("[", 1)[0]


OLD_KEY = re.compile(r"^(?P<path>[^:\[]*\.py)::(?P<func>[^\[:@]+)(?:\[(?P<params>[^\]]*)\])?(?:@[^:]*)?::(?P<key>.+)$")


def current_key(fullname: str, entry: str | None = None) -> str:
    """A stored name in today's form: a name of llmgate 0.1 (``<file>::<test>[<params>]::<key>``)
    becomes ``<scenario>[<params>]::<key>`` (the entry id, when ``entry`` names it among the
    params, last in its own brackets); a current name is returned as it is."""
    m = OLD_KEY.match(fullname)
    if m is None:
        return fullname
    scenario = m["func"].removeprefix("test_")
    params, key = m["params"], m["key"]
    if params is None:
        return f"{scenario}::{key}"
    if entry and params != entry and entry in params:
        others = "-".join(p for p in params.replace(entry, "\0", 1).split("\0") if p).strip("-")
        return f"{scenario}[{others}][{entry}]::{key}"
    return f"{scenario}[{params}]::{key}"


def entry_of(bench: dict[str, Any]) -> str | None:
    """The matrix entry a stored llmgate entry measured (its configuration's id); None outside the matrix."""
    info = (bench.get("extra_info") or {}).get(EXTRA_KEY) or {}
    cfg = info.get("config") or (info.get("fingerprint") or {}).get("config") or {}
    return cfg.get("id") if isinstance(cfg, dict) else None


def migrate_bench(bench: dict[str, Any]) -> bool:
    """Give one stored llmgate entry today's key (its ``fullname`` and ``name``); True if it changed."""
    if not is_llmgate(bench):
        return False
    new = current_key(bench["fullname"], entry_of(bench))
    if new == bench["fullname"]:
        return False
    bench["fullname"] = bench["name"] = new
    return True


def migrate_file(path: Path) -> int:
    """Rewrite a stored file's llmgate entries with today's keys and portable fingerprints (whole or
    not at all); returns how many changed (0: the file is left as it is).  Values, stats and
    provenance are kept."""
    from pytest_benchmark.utils import safe_dumps

    validate_file(path)
    data = json.loads(Path(path).read_text(encoding="utf8"))
    changed = sum(migrate_bench(b) | (is_llmgate(b) and migrate_fingerprint(b)) for b in data["benchmarks"])
    if changed:
        names = [b["fullname"] for b in data["benchmarks"]]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise BaselineError(f"{path}: migrating gives two entries the key {dup[0]!r}; the file was left untouched")
        fd, tmp = new_temp(Path(path).parent, Path(path).name)
        with os.fdopen(fd, "wb") as f:
            f.write(safe_dumps(data, ensure_ascii=True, indent=4).encode())
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))     # the rewritten file keeps its mode
        os.replace(tmp, path)
    return changed


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate migrate``'s arguments (llmgate.cli)."""
    ap.add_argument("folders", nargs="+", type=Path, metavar="DIR",
                    help="baseline storage folders (e.g. baselines/) or stored files")


def run(args: argparse.Namespace) -> int:
    """``llmgate migrate DIR…``: rewrite stored files' llmgate entries with keys and fingerprints
    independent of file paths."""
    total = 0
    for folder in args.folders:
        files = stored_files(folder) if folder.is_dir() else [folder]
        for f in files:
            try:
                n = migrate_file(f)
            except BaselineError as e:
                print(f"llmgate: {e}")
                return 1
            total += n
            print(f"{f}: {n} entr{'y' if n == 1 else 'ies'} migrated" if n else f"{f}: already current")
    print(f"{total} entr{'y' if total == 1 else 'ies'} migrated")
    return 0
