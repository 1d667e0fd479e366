"""the embedded default model: ``python -m llmgate.tinymodel OUT`` (README.md); the code is in ``llmgate.models.tinymodel``."""

import sys

from llmgate.models.tinymodel import TinySpec, build, main

__all__ = ['TinySpec', 'build', 'main']

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
