"""Engine adapters behind one contract (``base.Engine``), found by name.

An engine is registered under the entry-point group ``llmgate.engines``: the name a matrix
writes (``engine = "myname"``) → ``"package.module:AdapterClass"``, or a module holding a
class ``Adapter``.  llmgate registers its own engines (vllm, sglang, llamacpp, mlx) the same
way in its ``pyproject.toml``; ``BUILTIN`` is the fallback that lets a checkout that is not
installed (``PYTHONPATH=plugin``) find them too.  ``check(adapter)`` is the conformance
check every adapter passes (``contract.py``); third-party adapters call it in their own tests.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import inspect
import sys
import types

from llmgate.core.types import did_you_mean
from llmgate.engines.base import BaseAdapter, BootDiagnosis, Engine, EngineInfo, port_clash
from llmgate.engines.contract import ContractError, check, problems

GROUP = "llmgate.engines"

# name → module holding a class ``Adapter`` (what pyproject.toml registers under GROUP)
BUILTIN = {
    "vllm": "llmgate.engines.vllm:Adapter",
    "sglang": "llmgate.engines.sglang:Adapter",
    "llamacpp": "llmgate.engines.llamacpp:Adapter",
    "mlx": "llmgate.engines.mlx:Adapter",
}


class EngineError(LookupError):
    """An engine that cannot be had: unknown, registered twice, or broken.  The message is one line."""

    def __str__(self) -> str:           # LookupError would quote it like a key
        return str(self.args[0]) if self.args else ""


@dataclasses.dataclass(frozen=True)
class Registration:
    """Where an engine's adapter comes from: ``target`` ("module:attr" or "module") and the
    distribution whose entry point names it (None: llmgate's built-in table)."""

    name: str
    target: str
    package: str | None = None

    @property
    def origin(self) -> str:
        return (f"entry point {self.name!r} = {self.target!r} of package {self.package}" if self.package
                else f"built-in engine {self.name!r} ({self.target})")


@functools.lru_cache(maxsize=4)
def _scan(path: tuple[str, ...]) -> dict[str, tuple[Registration, ...]]:
    """Every registration per name, the entry points of the distributions on ``path`` first."""
    found: dict[str, list[Registration]] = {}
    for dist in importlib.metadata.distributions(path=list(path)):
        try:
            eps = [ep for ep in dist.entry_points if ep.group == GROUP]
            package = dist.metadata["Name"] or "?"
        except Exception:               # a distribution with unreadable metadata registers nothing
            continue
        for ep in eps:
            reg = Registration(ep.name, ep.value.strip(), package)
            regs = found.setdefault(ep.name, [])
            if all(r.target != reg.target for r in regs):   # one package seen twice (editable + path)
                regs.append(reg)
    for name, target in BUILTIN.items():
        found.setdefault(name, [Registration(name, target)])
    return {k: tuple(v) for k, v in found.items()}


def registrations() -> dict[str, tuple[Registration, ...]]:
    """What is registered under each engine name (read again whenever sys.path changes)."""
    return _scan(tuple(sys.path))


def names() -> list[str]:
    return sorted(registrations())


@functools.lru_cache(maxsize=64)
def _load(reg: Registration) -> type:
    module_name, _, attr = reg.target.partition(":")
    try:
        obj: object = importlib.import_module(module_name.strip())
        for part in (attr.strip().split(".") if attr.strip() else []):
            obj = getattr(obj, part)
    except Exception as e:
        raise EngineError(f"engine {reg.name!r}: {reg.origin} does not load: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")) from None
    if isinstance(obj, types.ModuleType):
        if not inspect.isclass(getattr(obj, "Adapter", None)):
            raise EngineError(f"engine {reg.name!r}: {reg.origin}: module {obj.__name__} has no class Adapter")
        obj = obj.Adapter
    if not inspect.isclass(obj):
        raise EngineError(f"engine {reg.name!r}: {reg.origin} names {type(obj).__name__} {obj!r}, "
                          f"not an adapter class")
    return obj


def get(name: str) -> Engine:
    """A fresh adapter for engine ``name``; EngineError (one line) when it is unknown, registered
    by two packages, or its entry point does not load (other engines are unaffected)."""
    regs = registrations().get(name)
    if not regs:
        raise EngineError(f"unknown engine {name!r}{did_you_mean(name, names())} (known: {', '.join(names())})")
    if len(regs) > 1:
        raise EngineError(f"engine {name!r} is registered twice: " + "; ".join(r.origin for r in regs))
    cls = _load(regs[0])
    try:
        adapter = cls()
    except Exception as e:
        raise EngineError(f"engine {name!r}: {regs[0].origin}: {cls.__name__}() failed: {type(e).__name__}: {e}") from None
    return adapter


__all__ = ["BUILTIN", "GROUP", "BaseAdapter", "BootDiagnosis", "ContractError", "Engine", "EngineError",
           "EngineInfo", "Registration", "check", "get", "names", "port_clash", "problems", "registrations"]
