"""``python -m llmgate.reference`` (README.md): the seed's figures beside a run's; the code is in ``llmgate.report.reference``."""

import sys

from llmgate.report.reference import main

__all__ = ['main']

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
