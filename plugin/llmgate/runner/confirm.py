"""The confirmation policy: what a test's verdicts do to it once it has run.  Refusals fail it
at once; a regression is re-measured once on a fresh server (a confirmation run) and fails the
test only if the re-measurement regresses too; one that does not becomes a note and a warning.
A verdict that spans the entry's measurement boots already is not re-measured."""

from __future__ import annotations

import pytest

from llmgate.analysis.verdict import Verdict
from llmgate.runner.pool import ServerPool
from llmgate.runner.recorder import Recorder
from llmgate.runner.terminal import say


def settle(item: pytest.Item, rec: Recorder, pool: ServerPool) -> None:
    """(after the test's call) Pass, fail or re-measure ``item`` by the verdicts it recorded."""
    rec.count_requests()               # all requests succeeded: one row saying how many there were
    if rec.refusals:
        lines = "\n".join("  " + v.line() for v in rec.refusals)
        pytest.fail(f"refusing to compare with {rec.refusals[0].baseline_source} (pass --llmgate-allow-mismatch to "
                    f"compare anyway):\n{lines}", pytrace=False)
    if not rec.regressions:
        return
    if not rec.confirmable:
        _fail_regressed(rec.regressions, "")
    first = rec.start_confirmation()
    first_bad = [v for v in first if v.failed]
    cfg = rec.entry
    handle = pool.reboot(cfg) if cfg is not None else None
    where = f"on a fresh server (boot {handle.boot_number})" if handle is not None else "once more"
    say(item.config, f"llmgate: {item.nodeid}: {len(first_bad)} metric(s) regressed; confirmation run {where}")
    item.runtest()
    rec.count_requests()
    confirmed = [v for v in rec.regressions if v.key in {f.key for f in first_bad}]
    if confirmed:
        firsts = {v.key: v for v in first_bad}
        _fail_regressed(confirmed, f"first measurement and the confirmation run {where} both regressed; first run:\n"
                        + "\n".join("  " + firsts[v.key].line() for v in confirmed) + "\nconfirmation run:\n")
    for v in first_bad:
        note = f"{v.key}: first measurement regressed ({v.change:+.1%}), the confirmation run {where} did not"
        rec.note(note)
        item.warn(pytest.PytestWarning(f"llmgate: {note}"))


def _fail_regressed(verdicts: list[Verdict], preface: str) -> None:
    lines = "\n".join("  " + v.line() for v in verdicts)
    pytest.fail(f"performance regression against {verdicts[0].baseline_source}:\n{preface}{lines}", pytrace=False)
