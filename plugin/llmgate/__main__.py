"""``python -m llmgate``: the ``llmgate`` command (llmgate.cli), for where the console script is not
on PATH (a checkout run with ``PYTHONPATH=plugin``, as .ci/run does before llmgate is installed)."""

import sys

from llmgate.cli import main

if __name__ == "__main__":
    sys.exit(main())
