"""Write the config-only model folders a GPU matrix names, into llmgate's model cache, ahead of a run.

GPU entries load random weights with ``load_format = "dummy"``, so a model of a large shape
(``[models.NAME]`` in the matrix: llmgate.models.tinymodel.TinySpec fields) needs only its
config.json and tokenizer files.  A run makes them itself when they are missing (the matrix's
model resolution builds ``llmgate.models.tinymodel.build(..., config_only=True)`` for dummy entries:
same config, same locally trained tokenizer, same manifest, no model.safetensors, cached as
``$LLMGATE_CACHE/models/NAME-KEY-config``); this script only does it beforehand, e.g. to carry
the folders to a machine (gpu/run-gate.sh).  The content hash covers config and tokenizer, and
the name in the matrix keeps baselines portable between checkouts.

    python gpu/make-model.py matrices/gpu.toml [NAME ...]    (default: every model whose
                                                              entries all use load_format dummy)
"""

from __future__ import annotations

import json
import sys

from llmgate.config import matrix as matrix_mod
from llmgate.models import tinymodel


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    m = matrix_mod.load(argv[0])
    names = argv[1:] or sorted({e.model for e in m.entries if e.model in m.models and e.model != "tiny"
                                and all(x.load_format == "dummy" for x in m.entries if x.model == e.model)})
    for name in names:
        folder = m.resolve_model(name, "dummy")
        man = json.loads((folder / tinymodel.MANIFEST).read_text())
        print(f"{name}: {folder} (vocab {man['vocab_size']}, {man['parameters'] / 1e9:.3f} B parameters, "
              f"content hash {man['content_hash'][:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
