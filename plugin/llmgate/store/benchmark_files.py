"""pytest-benchmark's side of the baselines: what llmgate relies on in its internals
(``RELIES_ON``, checked by ``tests/plugin/test_benchmark_internals.py``, which fails naming the
missing one when a pytest-benchmark release changes them), its session (under pytest-xdist, a
folder a run will be saved in, its table), and the stored files themselves: which files a
storage folder holds, checking one before it is read, and writing one whole or not at all.

A stored entry's timing data are the metric's values in "bigger is worse" form (seconds as they
are; tok/s as seconds per token), so ``--benchmark-compare-fail=median:10%`` works in the right
direction; its ``extra_info["llmgate"]`` (``EXTRA_KEY``) holds the natural values, unit,
direction and provenance that llmgate's own verdict reads back.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import pytest

EXTRA_KEY = "llmgate"
SCHEMA_VERSION = 3          # 2: every entry carries a fingerprint; 3: values per boot ("boots") and a noise model
READABLE_SCHEMAS = (2, 3)   # a schema-2 entry reads as one boot with no noise model


class BaselineError(ValueError):
    """A stored baseline file that cannot be used; the message names the file and the problem."""


# What the store/ modules rely on in pytest-benchmark (checked by tests/plugin/test_benchmark_internals.py):
RELIES_ON = {
    "config attribute": ["_benchmarksession"],
    "options": ["benchmark_storage", "benchmark_compare", "benchmark_save", "benchmark_autosave",
                "benchmark_disable"],
    "default storage": ["file://./.benchmarks"],
    "session attributes": ["benchmarks", "logger", "storage", "compare", "compared_mapping", "groups", "quiet",
                           "disabled", "skip", "save", "autosave", "options"],
    "fixture": ["pytest_benchmark.fixture.BenchmarkFixture(node, add_stats, logger, warner, disabled, **options)",
                "BenchmarkFixture._make_stats", "name", "fullname", "group", "extra_info"],
    "stats": ["Metadata.stats.update"],
    "file storage": ["FileStorage.load", "FileStorage.get", "FileStorage._next_num", "FileStorage.save",
                     "FileStorage.logger"],
    "utils": ["pytest_benchmark.utils.safe_dumps"],
}
PYTEST_BENCHMARK_DEFAULT_STORAGE = "file://./.benchmarks"


def benchmark_session(config: pytest.Config):
    return getattr(config, "_benchmarksession", None)


def check_storage_writable(config: pytest.Config) -> None:
    """(pytest_sessionstart) With --benchmark-save or --benchmark-autosave, the folder the run will
    be stored in (``<storage>/<machine id>/``) must take a new file; otherwise a usage error now,
    before any boot, rather than a traceback after the whole run.  Leaves no folder or file behind."""
    bs = benchmark_session(config)
    if bs is None or not (bs.save or bs.autosave) or bs.skip or config.getoption("benchmark_disable", False):
        return
    storage = bs.storage
    if not hasattr(storage, "get") or not hasattr(storage, "_next_num"):
        return                                        # not file storage (elasticsearch)
    folder = Path(storage.path) / storage.default_machine_id if storage.default_machine_id else Path(storage.path)
    problem = unwritable(folder)
    if problem:
        save = config.getoption("benchmark_save", None)
        option = f"--benchmark-save={save}" if save else "--benchmark-autosave"
        raise pytest.UsageError(f"llmgate: {option}: the baseline cannot be stored: {problem}. Nothing was run "
                                f"(fix the folder, or store elsewhere with --benchmark-storage=file://DIR)")


def unwritable(folder: Path) -> str | None:
    """Why a new file cannot be written in ``folder`` (made if missing, and then removed again), in a
    few words; None when it can.  Tried for real: file permissions do not stop root, a read-only file
    system or an immutable folder do."""
    folder = Path(folder)
    made: list[Path] = []
    p = folder
    while not p.exists() and p != p.parent:
        made.append(p)
        p = p.parent
    if not p.is_dir():
        return f"{p} is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = new_temp(folder, ".llmgate-write-check")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        return f"cannot write in {folder}: {e.strerror or e}"
    finally:
        for d in made:                                # deepest first
            try:
                d.rmdir()
            except OSError:
                break
    return None


def enable_on_xdist_worker(config: pytest.Config, worker: str) -> None:
    """pytest-benchmark turns itself off under pytest-xdist, as its timings would share the CPU.
    llmgate's measurements time servers on the GPUs of each worker, so a worker keeps storing and
    comparing: it saves as NAME-gwN (one file per worker, NNNN_NAME-gwN.json)."""
    bs = benchmark_session(config)
    if bs is None or config.getoption("benchmark_disable") or bs.skip:
        return
    bs.disabled = False
    if hasattr(bs, "xdist_warning"):        # pytest-benchmark >= 5.3 (5.2 only warns, at configure)
        bs.xdist_warning = False
    suffix_saves(config, worker)


def suffix_saves(config: pytest.Config, part: str) -> None:
    """Save this process's share of a run as NAME-PART (NNNN_NAME-PART.json): an xdist worker's
    (gwN) or a shard's (shK, ``--llmgate-shard``); a comparison with the run takes every part of NAME
    (``store.baseline.PART_FILE``)."""
    bs = benchmark_session(config)
    if bs is None:
        return
    if bs.save:
        bs.save = f"{bs.save}-{part}"
    if bs.autosave:
        bs.autosave = f"{bs.autosave}-{part}"


def is_llmgate(bench: dict[str, Any]) -> bool:
    """A stored entry that llmgate wrote (not a plain pytest-benchmark one)."""
    return isinstance((bench.get("extra_info") or {}).get(EXTRA_KEY), dict)


def hide_benchmark_table(config: pytest.Config) -> int:
    """(pytest_terminal_summary, before pytest-benchmark's) pytest-benchmark's table shows every
    entry as a time ("time in ms"): llmgate's tok/s metrics are stored as their inverse (seconds
    per token), so its rows read wrongly there.  Take llmgate's rows out of the table; its
    --benchmark-compare-fail checks stay (they ran at sessionfinish and are raised after the table).
    Returns how many of llmgate's entries were hidden."""
    bs = benchmark_session(config)
    if bs is None or not bs.groups:
        return 0
    kept, hidden = [], set()
    for name, benches in bs.groups:
        rest = [b for b in benches if not is_llmgate(b)]
        hidden.update(b["fullname"] for b in benches if is_llmgate(b))
        if rest:
            kept.append((name, rest))
    if kept:
        bs.groups = kept
    elif hidden:
        bs.quiet = True          # no table at all; an empty one would skip the regression checks too
    return len(hidden)


# -- files -------------------------------------------------------------------------------------
STORED_FILE_GLOBS = ("[0-9][0-9][0-9][0-9]_*.json", "*/[0-9][0-9][0-9][0-9]_*.json")


def stored_files(root: Path) -> list[Path]:
    """The files pytest-benchmark would load from a storage folder (reference data elsewhere is not one)."""
    out: set[Path] = set()
    for pattern in STORED_FILE_GLOBS:
        out.update(p for p in Path(root).glob(pattern) if p.is_file())
    return sorted(out)


def validate_file(path: Path) -> None:
    """Raise BaselineError naming the file and the problem; never changes the file."""
    def bad(problem: str) -> BaselineError:
        return BaselineError(f"{path}: {problem} (the file was left untouched: fix or remove it, "
                             f"or point --benchmark-storage elsewhere)")

    try:
        data = json.loads(Path(path).read_text(encoding="utf8"))
    except UnicodeDecodeError as e:
        raise bad(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise bad(f"not valid JSON: {e.msg}: line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise bad("not a pytest-benchmark result (no 'benchmarks' list)")
    for i, b in enumerate(data["benchmarks"]):
        where = f"benchmarks[{i}]"
        if not isinstance(b, dict) or not isinstance(b.get("fullname"), str):
            raise bad(f"{where} has no 'fullname'")
        where = f"benchmark {b['fullname']!r}"
        stats = b.get("stats")
        if not isinstance(stats, dict) or not all(isinstance(stats.get(k), (int, float)) for k in ("min", "max", "median", "mean")):
            raise bad(f"{where} has no numeric 'stats' (min, max, median, mean)")
        info = (b.get("extra_info") or {}).get(EXTRA_KEY)
        if info is None:
            continue  # a plain pytest-benchmark entry: not llmgate's to judge
        if not isinstance(info, dict):
            raise bad(f"{where}: extra_info.{EXTRA_KEY} is not an object")
        schema = info.get("schema")
        if schema not in READABLE_SCHEMAS:
            raise bad(f"{where}: llmgate schema {schema!r}, this llmgate reads schemas "
                      f"{', '.join(map(str, READABLE_SCHEMAS))} (record a new baseline)")
        values = info.get("values")
        if (not isinstance(values, list) or not values
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
            raise bad(f"{where}: 'values' must be a non-empty list of numbers")
        if info.get("better") not in ("higher", "lower") or not isinstance(info.get("unit"), str):
            raise bad(f"{where}: 'better' must be 'higher' or 'lower' and 'unit' a string")
        fp = info.get("fingerprint")
        if not isinstance(fp, dict) or not {"device", "model_hash", "config", "engine"} <= set(fp):
            raise bad(f"{where}: no fingerprint (device, model_hash, config, engine)")
        boots = info.get("boots")
        if schema >= 3 and (not isinstance(boots, list) or not boots or not all(
                isinstance(b, list) and b and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in b)
                for b in boots)):
            raise bad(f"{where}: 'boots' must be a non-empty list of non-empty lists of numbers")


def validate_storage(root: Path) -> list[Path]:
    files = stored_files(root)
    for f in files:
        validate_file(f)
    return files


def new_temp(folder: Path, name: str) -> tuple[int, Path]:
    """A new temporary file in ``folder`` (open for writing, its descriptor and path) with the mode a
    file gets under the user's umask (0644 under umask 022), not mkstemp's 0600: a baseline is a
    file others read (a CI job under another user, a reviewer's checkout)."""
    for _ in range(100):
        tmp = Path(folder) / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: no free temporary name for {name}")


def atomic_write(path: Path, data: bytes) -> None:
    """Write a new file whole or not at all; an existing file is never replaced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = new_temp(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)            # fails if the target exists: nothing is overwritten
    finally:
        os.unlink(tmp)


def make_save_atomic(storage, on_failure=None) -> None:
    """pytest-benchmark's FileStorage.save writes in place; save through atomic_write instead.
    ``on_failure(line)``: a save that fails (the file system turned read-only, the folder went
    away, the file exists) is told in one line instead of raised: raised, it would end the session
    with a traceback before llmgate wrote its report, the run history and the verdict table."""
    from pytest_benchmark.utils import safe_dumps

    if not hasattr(storage, "get") or not hasattr(storage, "_next_num"):
        return  # not file storage (elasticsearch): leave it alone

    def save(output_json, save):
        target = None
        try:
            target = storage.get(f"{storage._next_num}_{save}.json")
            if target.exists():
                raise BaselineError(f"{target}: exists already; not overwriting a stored baseline")
            atomic_write(target, safe_dumps(output_json, ensure_ascii=True, indent=4).encode())
        except (OSError, BaselineError) as e:
            if on_failure is None:
                raise
            if isinstance(e, BaselineError):
                why = str(e)
            else:
                folder = Path(target).parent if target is not None else Path(storage.path)
                why = f"{target or folder} could not be written: " + (unwritable(folder) or f"{e.strerror or e}")
            on_failure(f"baseline not saved: {why}")
            return
        storage.logger.info(f"Saved benchmark data in: {target}")

    storage.save = save
