"""``python -m llmgate.install llama-server`` (README.md, CI): build llama.cpp's binaries; the code is in ``llmgate.tools.install``."""

import sys

from llmgate.tools.install import main

__all__ = ['main']

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
