"""llmgate: a pytest plugin that gates LLM serving engines on performance regressions.

The public API for a team's own scenarios (docs/api.md):

- ``llmgate.scenario()``: marks a test function as a scenario: it runs once per matrix entry
  (and, with ``boots=True``, once per measurement boot of the entry);
- the ``gate`` fixture (``llmgate.Gate``): the entry, its running server, prompts, settings,
  the matrix's ``[scenarios]``, ways to run a workload, and ``record(metric, values)``;
- ``llmgate.Metric(...)``: a metric of one's own (unit, which direction is better, minimum effect);
  the built-in ones are in ``llmgate.metrics`` (``llmgate.metrics.DECODE_TOK_S`` …).

The modules the lever and quality scenarios use are public under their documented names
(``llmgate.probe``, ``llmgate.quality``, ``llmgate.device``, ``llmgate.stats``,
``llmgate.figures``, ``llmgate.requests``, ``llmgate.verdict``, ``llmgate.matrix``: ``from llmgate import probe``); they
live in the layers of docs/architecture.md and are imported here on first use.

The packaged scenarios: ``pytest --pyargs llmgate.scenarios``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from llmgate.core import metrics
from llmgate.core.metrics import Metric

if TYPE_CHECKING:
    from llmgate.analysis import stats as stats, verdict as verdict
    from llmgate.config import matrix as matrix
    from llmgate.levers import probe as probe, quality as quality
    from llmgate.runner import figures as figures, requests as requests
    from llmgate.runner.gate import Gate as Gate

__all__ = ["Gate", "Metric", "metrics", "scenario"]

# the documented modules (docs/api.md) by their public names, where they live now
_PUBLIC_MODULES = {"probe": "llmgate.levers.probe", "quality": "llmgate.levers.quality",
                   "stats": "llmgate.analysis.stats", "verdict": "llmgate.analysis.verdict",
                   "figures": "llmgate.runner.figures", "requests": "llmgate.runner.requests",
                   "matrix": "llmgate.config.matrix",
                   "metrics": "llmgate.core.metrics"}


class _PublicNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import llmgate.probe`` and ``from llmgate.matrix import ServerConfig`` as docs/api.md writes
    them: the public name is the module of its layer (the same object, imported on first use)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        name = fullname.removeprefix("llmgate.")
        if name == fullname or name not in _PUBLIC_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(_PUBLIC_MODULES[spec.name.removeprefix("llmgate.")])

    def exec_module(self, module: Any) -> None:
        pass                           # the module of its layer, already executed


if not any(isinstance(f, _PublicNames) for f in sys.meta_path):
    sys.meta_path.append(_PublicNames())

F = TypeVar("F", bound=Callable[..., Any])


def scenario(lever: str = "gate", *, boots: bool = False) -> Callable[[F], F]:
    """Make a test function a scenario of the matrix: it is parametrized over the matrix's
    entries (``test_x[cpu-vllm-tiny]``) and runs on those whose ``levers`` list ``lever``
    (every entry takes part in ``"gate"`` unless its ``levers`` say otherwise); with
    ``boots=True`` it runs on each of the entry's measurement boots and its metrics are judged
    after the last one (``--llmgate-boots``)."""
    import pytest

    def mark(fn: F) -> F:
        fn = pytest.mark.lever(lever)(fn)
        # the entry's server is a fixture of the test: a boot that fails is the test's setup error
        fn = pytest.mark.usefixtures("llmgate_server")(fn)
        if boots:
            fn = pytest.mark.boots(fn)
        return fn

    return mark


def __getattr__(name: str) -> Any:
    if name == "Gate":                 # imported on use: `import llmgate` stays light
        from llmgate.runner.gate import Gate
        return Gate
    if name in _PUBLIC_MODULES:
        return importlib.import_module(_PUBLIC_MODULES[name])
    raise AttributeError(name)
