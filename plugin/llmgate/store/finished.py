"""The record of a finished run: what the layers below the runner read of it.

``llmgate.runner.run.GateRun`` (the run object) builds one ``FinishedRun`` at the session's end,
once its verdicts are final, and hands it down: the run history (``store.history.record_run``)
is written from it, and llmgate's terminal section (``report.reports.terminal_section``) shows it,
completed with what the reports made of it (``with_reports``).  No layer below the runner reads
the run object itself.  Here, in the lowest layer that reads it, so that both import it downward.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from llmgate.analysis.verdict import Verdict

# (entry, test, metric key): one figure of one test of one matrix entry
FigureKey = tuple[str, str, str]


@dataclasses.dataclass(frozen=True)
class FinishedRun:
    """One finished run (one pytest invocation), as plain data: copies of what the run kept, so that
    what the run object does later does not change it.  Pytest's ``config`` is not part of it:
    whoever reads an option or pytest-benchmark's session is given the config beside it."""

    started: float                                   # time.time() at the run's start
    worker: str | None                               # the pytest-xdist worker ("gw0"), None alone or on the controller
    argv: tuple[str, ...]                            # pytest's arguments, as invoked
    verdicts: tuple[Verdict, ...]
    boots: dict[str, list[dict[str, Any]]]           # entry id → one record per boot (the pool's)
    # the repeat values of each measurement boot (--llmgate-boots K): figure → boot number → values
    boot_values: dict[FigureKey, dict[int, list[float]]]
    entry_seconds: dict[str, float]                  # wall seconds of each entry's tests (boots included)
    entry_ids: tuple[str, ...]                       # the matrix's entries (none: the matrix did not load)
    config_details: dict[str, dict[str, Any]]        # entry id → its configuration (``ServerConfig.describe``)
    model_hashes: dict[str, str | None]              # entry id → its model's content hash, for each verdict's entry
    notes: tuple[str, ...] = ()
    not_saved: tuple[str, ...] = ()                  # why the baseline was not saved (one line each)
    summary: dict[str, Any] | None = None            # report.json's document, once written
    report_files: tuple[Path, ...] = ()              # the files the reports wrote

    def config_detail(self, cid: str) -> dict[str, Any] | None:
        """An entry's configuration as plain data (None: not an entry of the matrix)."""
        return self.config_details.get(cid)

    def with_reports(self, *, verdicts: list[Verdict], boots: dict[str, list[dict[str, Any]]], notes: list[str],
                     not_saved: list[str], summary: dict[str, Any] | None, report_files: list[Path]) -> FinishedRun:
        """This record with what the run's end added once the history was written: the reports, their
        notes, and (on pytest-xdist's controller) the workers' verdicts and boots."""
        return dataclasses.replace(self, verdicts=tuple(verdicts), boots={k: list(v) for k, v in boots.items()},
                                   notes=tuple(notes), not_saved=tuple(not_saved), summary=summary,
                                   report_files=tuple(report_files))
