"""llmgate: a pytest plugin that gates LLM serving engines on performance regressions.

The public API for a team's own scenarios (docs/api.md):

- ``llmgate.scenario()``: marks a test function as a scenario: it runs once per matrix entry
  (and, with ``boots=True``, once per measurement boot of the entry);
- the ``gate`` fixture (``llmgate.Gate``): the entry, its running server, prompts, settings,
  the matrix's ``[scenarios]``, ways to run a workload, and ``record(metric, values)``;
- ``llmgate.Metric(...)``: a metric of one's own (unit, which direction is better, minimum effect);
  the built-in ones are in ``llmgate.metrics`` (``llmgate.metrics.DECODE_TOK_S`` …).

The packaged scenarios: ``pytest --pyargs llmgate.scenarios``.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from . import metrics
from .metrics import Metric

__all__ = ["Gate", "Metric", "metrics", "scenario"]

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
        from .gate import Gate
        return Gate
    raise AttributeError(name)
