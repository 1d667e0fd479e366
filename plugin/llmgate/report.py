"""What people read: the terminal table at the end of a session."""

from __future__ import annotations

from collections.abc import Iterable

from tabulate import tabulate

from .verdict import Verdict


def verdict_rows(verdicts: Iterable[Verdict]) -> list[list[str]]:
    rows = []
    for v in sorted(verdicts, key=lambda v: (v.config_id, v.test, v.key)):
        m = v.metric
        spread = f"{m.display(v.now.min)} – {m.display(v.now.max)}" if v.now.n > 1 else ""
        rows.append([
            v.config_id, v.test.removeprefix("test_"), f"{m.label}" + (f" @{v.key.split('@', 1)[1]}" if "@" in v.key else ""),
            m.display(v.now.median), spread, str(v.now.n),
            m.display(v.baseline.median) if v.baseline else "—",
            f"{v.change:+.1%}" if v.change is not None else "—",
            v.status,
        ])
    return rows


def verdict_table(verdicts: Iterable[Verdict]) -> str:
    return tabulate(verdict_rows(verdicts),
                    headers=["configuration", "test", "metric", "now (median)", "range", "n", "baseline", "change", "verdict"],
                    tablefmt="github")


def boot_table(boots: dict[str, list[dict]]) -> str:
    rows = []
    for cid, items in sorted(boots.items()):
        for b in items:
            rows.append([cid, b.get("boot"), b.get("engine", ""), b.get("version") or "?",
                         f"{b['startup_s']:.1f} s" if b.get("startup_s") is not None else "failed",
                         b.get("log", "")])
    return tabulate(rows, headers=["configuration", "boot", "engine", "version", "start-up", "log"], tablefmt="github")
