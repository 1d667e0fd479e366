"""The model's own tokenizer, found in a folder: what exact-length prompts are counted with.

A folder has one when it holds ``tokenizer.json`` (read with ``tokenizers``), or
``tokenizer_config.json`` with the files of a slow tokenizer (``tokenizer.model``, or
``vocab.json`` and ``merges.txt``), which ``transformers`` converts (it must be installed: vLLM,
SGLang and MLX-LM bring it).  ``missing(folder)`` says in one line what a folder lacks, without
loading anything; the matrix asks it of every entry whose model is a path.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

SLOW_FILES = (("tokenizer.model",), ("vocab.json", "merges.txt"), ("spiece.model",))


# what a tokenizer is read from (besides SLOW_FILES): its content, whatever else the folder holds
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def content_hash(folder: Path | str) -> str | None:
    """sha256 over the names and bytes of the tokenizer's files in ``folder`` (not the weights a
    model folder beside them may hold); None when it has none of them."""
    folder = Path(folder)
    names = sorted({*TOKENIZER_FILES, *(f for group in SLOW_FILES for f in group)})
    found = [folder / n for n in names if (folder / n).is_file()]
    if not found:
        return None
    h = hashlib.sha256()
    for f in found:
        data = f.read_bytes()
        h.update(f"{f.name}\0{len(data)}\0".encode() + data)
    return h.hexdigest()


def _slow_files(folder: Path) -> tuple[str, ...] | None:
    for group in SLOW_FILES:
        if all((folder / f).is_file() for f in group):
            return group
    return None


def missing(folder: Path | str) -> str | None:
    """None when a tokenizer can be read from ``folder``; otherwise what is missing, in one line."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder} is not a folder"
    if (folder / "tokenizer.json").is_file():
        return None
    if not (folder / "tokenizer_config.json").is_file():
        return f"{folder} has no tokenizer.json (nor tokenizer_config.json with its vocabulary files)"
    files = _slow_files(folder)
    if files is None:
        return (f"{folder} has tokenizer_config.json but neither tokenizer.json nor the files of a slow tokenizer "
                f"({' or '.join(' and '.join(g) for g in SLOW_FILES)})")
    if importlib.util.find_spec("transformers") is None:
        return (f"{folder} has no tokenizer.json, and reading its {' and '.join(files)} needs transformers "
                f"(pip install transformers, or save the tokenizer as tokenizer.json)")
    return None


@functools.lru_cache(maxsize=8)
def _load(folder: str) -> Any:
    from tokenizers import Tokenizer

    path = Path(folder)
    if (path / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(path / "tokenizer.json"))
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(folder, use_fast=True, local_files_only=True)
    except Exception as e:
        raise ValueError(f"{folder}: transformers could not read its tokenizer: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}") from None
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"{folder}: transformers has no fast (tokenizers) version of its {type(tok).__name__}; "
                         f"save the tokenizer as tokenizer.json")
    return tok.backend_tokenizer


def load(folder: Path | str) -> Any:
    """The folder's tokenizer as a ``tokenizers.Tokenizer``; FileNotFoundError naming what is missing."""
    why = missing(folder)
    if why:
        raise FileNotFoundError(f"{why}: needed for exact-length prompts")
    return _load(str(Path(folder).resolve()))


def eos_token_id(folder: Path | str) -> int | None:
    """The end-of-sequence id: config.json, else generation_config.json, else the id of
    tokenizer_config.json's ``eos_token`` in the tokenizer; None when none of them says."""
    folder = Path(folder)
    for name in ("config.json", "generation_config.json"):
        try:
            eos = json.loads((folder / name).read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        eos = eos[0] if isinstance(eos, list) and eos else eos
        if isinstance(eos, int):
            return eos
    try:
        token = json.loads((folder / "tokenizer_config.json").read_text()).get("eos_token")
        token = token.get("content") if isinstance(token, dict) else token
        return load(folder).token_to_id(token) if isinstance(token, str) else None
    except (OSError, ValueError, AttributeError):
        return None
