"""``python -m llmgate.strays DIR`` (README.md, the GPU workflow): stop servers an earlier run left; the code is in ``llmgate.process.strays``."""

import sys

from llmgate.process.strays import main

__all__ = ['main']

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
