"""Test ids and matrix entries: which entry a test id belongs to (pytest-xdist's scheduling, the
reports' count of entries skipped whole)."""

from __future__ import annotations

# the user property (pytest's item.user_properties, carried by its reports) of a test skipped because
# its entry does not enable the test's lever: the value is the lever
LEVER_OFF = "llmgate_lever_off"


def entry_scope(nodeid: str, entry_ids: list[str]) -> str:
    """The matrix entry a test id belongs to (its ``[...]`` holds the entry id, alone or joined
    to other parameters' ids by ``-``); the test id itself for tests of no entry."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    params = nodeid[nodeid.index("[") + 1:-1]
    for cid in sorted(entry_ids, key=len, reverse=True):
        if params == cid or params.startswith(cid + "-") or params.endswith("-" + cid) or f"-{cid}-" in params:
            return "llmgate-entry:" + cid
    return nodeid
