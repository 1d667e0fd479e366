"""``python -m llmgate.history`` (README.md): the run history; the code is in ``llmgate.store.history``."""

import sys

from llmgate.store.history import main

__all__ = ['main']

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
