"""pytest-xdist support: one worker per GPU share, every test of a matrix entry on one worker.

Registered as a plugin of the session by ``llmgate.plugin`` (its hooks are optional: without
pytest-xdist they are never called)."""

from __future__ import annotations

import os

import pytest

from llmgate.device import hardware
from llmgate.config.ids import entry_scope


def worker(config: pytest.Config) -> str | None:
    """This process's pytest-xdist worker id (gw0, gw1 …); None in the controller or without xdist."""
    wi = getattr(config, "workerinput", None)
    return wi.get("workerid") if wi else None


def workers(config: pytest.Config) -> int:
    """How many workers this controller starts (0: not distributing)."""
    if getattr(config, "workerinput", None) is not None or getattr(config.option, "dist", "no") == "no":
        return 0
    return len(getattr(config.option, "tx", None) or [])


def configure(config: pytest.Config) -> None:
    """Controller: there must be a GPU share for every worker.  Worker: pin its GPUs
    (CUDA_VISIBLE_DEVICES, inherited by the servers it starts)."""
    n = workers(config)
    if n:
        visible = hardware.visible_gpus()
        if visible and n > len(visible):
            raise pytest.UsageError(f"llmgate gives each pytest-xdist worker its own GPU(s): -n {n} but "
                                    f"{len(visible)} GPU(s) visible; use -n {len(visible)} or fewer (or "
                                    f"CUDA_VISIBLE_DEVICES= to run CPU entries only)")
    wi = getattr(config, "workerinput", None)
    if wi is not None and wi.get("llmgate_gpus") is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = wi["llmgate_gpus"]
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"      # CUDA's numbering = NVML's


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(controller, pytest-xdist) What a worker needs before it configures: its GPU share."""
    config = node.config
    visible = hardware.visible_gpus()
    if visible:
        n = max(1, workers(config))
        k = int(str(node.gateway.id).removeprefix("gw") or 0) % n
        node.workerinput["llmgate_gpus"] = ",".join(str(i) for i in hardware.worker_share(visible, k, n))


def entry_scheduling(config: pytest.Config, log, entry_ids: list[str], groups: dict[str, str] | None = None):
    """(controller, pytest-xdist) A scheduler that sends every test of one matrix entry to the same
    worker, in order, so each server boots once; the entries spread over the workers (one per GPU
    share).  ``groups`` maps an entry to the entry whose worker it must share: an entry with a
    ``reference`` is compared with figures its reference measured in the same process, so a
    reference chain is one unit of scheduling (``reference_groups``).  The hook that asks for it is
    in ``llmgate.plugin`` (it knows the session's matrix)."""
    from xdist.scheduler import LoadScopeScheduling

    groups = groups or {}
    prefix = "llmgate-entry:"

    class EntryScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = entry_scope(nodeid, entry_ids)
            if scope.startswith(prefix):
                cid = scope[len(prefix):]
                return prefix + groups.get(cid, cid)
            return scope

    return EntryScheduling(config, log)


def reference_groups(references: dict[str, str | None]) -> dict[str, str]:
    """Each entry → the first entry of its reference chain (``reference`` → its ``reference`` …),
    given each entry's ``reference`` (None for none)."""
    groups = {}
    for cid in references:
        root, seen = cid, {cid}
        while references.get(root) and references[root] not in seen:
            root = references[root]
            seen.add(root)
        groups[cid] = root
    return groups
