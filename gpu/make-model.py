"""Write the config-only model folders a GPU matrix names, into llmgate's model cache.

GPU entries load random weights with ``load_format = "dummy"``, so a model of a large shape
(``[models.NAME]`` in the matrix: llmgate.tinymodel.TinySpec fields) needs only its
config.json and tokenizer files.  This writes exactly what ``llmgate.tinymodel.build`` would
write for that spec -- same config, same locally trained tokenizer, same manifest and cache
folder name (``$LLMGATE_CACHE/models/NAME-KEY``) -- except model.safetensors, which would
be GiBs of numbers vLLM never reads.  The content hash then covers config and tokenizer,
and the name in the matrix keeps baselines portable between checkouts.

    python gpu/make-model.py matrices/gpu.toml [NAME ...]    (default: every model whose
                                                              entries all use load_format dummy)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from llmgate import matrix as matrix_mod
from llmgate import tinymodel


def config_only(name: str, spec: tinymodel.TinySpec) -> Path:
    saved = tinymodel.write_safetensors, tinymodel.checkpoint_tensors
    tinymodel.write_safetensors = lambda path, tensors: None        # no weights file
    tinymodel.checkpoint_tensors = lambda spec, vocab: {}
    try:
        return tinymodel.build(spec=spec, name=name)
    finally:
        tinymodel.write_safetensors, tinymodel.checkpoint_tensors = saved


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    m = matrix_mod.load(argv[0])
    names = argv[1:] or sorted({e.model for e in m.entries if e.model in m.models and e.model != "tiny"
                                and all(x.load_format == "dummy" for x in m.entries if x.model == e.model)})
    for name in names:
        folder = tinymodel.default_cache_dir() / f"{name}-{m.models[name].key()}"
        if (folder / tinymodel.MANIFEST).is_file() and (folder / "model.safetensors").exists():
            print(f"{name}: {folder} holds full weights already; leaving it", file=sys.stderr)
        folder = config_only(name, m.models[name])
        man = json.loads((folder / tinymodel.MANIFEST).read_text())
        print(f"{name}: {folder} (vocab {man['vocab_size']}, {man['parameters'] / 1e9:.3f} B parameters, "
              f"content hash {man['content_hash'][:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
