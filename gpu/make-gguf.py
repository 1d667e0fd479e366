"""Make the GGUF files a matrix's llama.cpp entries load, ahead of a run, on the machine itself
(no network): the [models] shape with llmgate's seeded random weights (llmgate.models.tinymodel: the
Hugging Face folder with model.safetensors, then the same weights written as a bf16 GGUF with Q/K
rows permuted as convert_hf_to_gguf.py does), then each entry's ``quantization`` (Q8_0, Q4_K_M …)
with the llama-quantize beside the entry's llama-server.  Exactly what a session would do before
the entry's first boot (``Server._resolved``), so the session finds them in the cache
($LLMGATE_CACHE) and spends no test time on them.

    PYTHONPATH=plugin python3 gpu/make-gguf.py matrices/gpu-llamacpp.toml [ENTRY_ID ...]

Needs the ``gguf`` package (the llamacpp extra: LLMGATE_EXTRAS="gpu llamacpp" gpu/prepare.py
installs it from carried wheels) and, for a quantization, llama-quantize ($LLMGATE_LLAMA_SERVER's
folder, or the entry's launcher).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from llmgate.config import matrix as matrix_mod
from llmgate.process.server import BootError, Server


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    m = matrix_mod.load(argv[0])
    wanted = set(argv[1:])
    entries = [e for e in m.entries if e.engine == "llamacpp" and (not wanted or e.id in wanted)]
    if not entries:
        print(f"{argv[0]}: no llama.cpp entries{' named ' + ', '.join(sorted(wanted)) if wanted else ''}",
              file=sys.stderr)
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as logs:
        for cfg in entries:
            t0 = time.monotonic()
            try:
                _, model = Server(cfg, m, Path(logs))._resolved()
            except BootError as e:
                print(f"{cfg.id}: {e}", file=sys.stderr)
                failed += 1
                continue
            print(f"{cfg.id}: {model} ({model.stat().st_size / 1e9:.2f} GB) in {time.monotonic() - t0:.0f} s",
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
