"""The comparisons a recorded figure is judged by, one file each behind one contract,
``judge(recorder, figure) -> Verdict | None`` (None: not judged yet, on a measurement boot or boot
pair before the entry's last):

- ``stored``: against the boots a baseline of an earlier run stored (``--benchmark-compare``; a run
  with nothing to compare with stores its figures and reads ``no baseline``);
- ``alternating``: A/B mode's sides booted in turn (``--llmgate-ab-mode alternate``, or where two
  servers do not fit together);
- ``duet``: A/B mode's sides resident together, the measurement interleaved (the default).

The recorder (``runner/recorder.py``) makes the ``Figure`` and ``choose`` picks the comparison from
the entry's plan of measurement boots (``runner/boots.py``).  An entry compared with a reference
entry of the matrix (its ``reference``) is not a comparison of this kind: the lever scenarios record
the ratio to the reference as a figure of its own (``levers/shared.py``), which one of these judges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llmgate.analysis.verdict import Verdict
from llmgate.runner.compare import alternating, duet, stored
from llmgate.runner.compare.figure import Figure

if TYPE_CHECKING:
    from llmgate.runner.recorder import Recorder

Comparison = Callable[["Recorder", Figure], "Verdict | None"]


def choose(rec: Recorder, fig: Figure) -> Comparison:
    """A duet's side records into the duet; a measurement boot of A/B mode's sides into alternating
    boots; everything else into the stored comparison."""
    if fig.boot is not None and fig.cfg is not None and rec.side is not None:
        return duet.judge
    if fig.boot is not None and fig.cfg is not None and fig.boot.plan.sides:
        return alternating.judge
    return stored.judge
