"""The conformance check of an engine adapter, without booting its engine.

``problems(adapter)`` lists what does not fit the contract (``base.Engine``); ``check(adapter)``
raises ``ContractError`` with all of them.  An adapter in another package calls it in its own
tests::

    from llmgate import engines

    def test_my_adapter_fits_the_contract():
        engines.check(engines.get("myname"))      # or engines.check(MyAdapter())

It checks: the attributes and their types; that every method of the contract is there and
takes the contract's arguments; and what the methods that need no server return for a CPU and
a GPU configuration — ``command()`` is a list of strings that names the model and binds the
host and port it is given, ``unavailable()`` is None or a reason, the request fields are
JSON-serialisable tables, ``diagnose_boot()`` and ``first_error()`` of a log it cannot know
give None or one line, the signal readers take empty scrapes, and ``ready()`` says False (not an
exception) while nothing listens.  It does not check ``info``, ``prepare_model``, ``distribution`` or
``reset_prefix_cache`` beyond their signatures: those need the engine.
"""

from __future__ import annotations

import inspect
import json
import socket
from pathlib import Path
from typing import Any, Callable

import httpx

from llmgate.core.types import LEVERS, ServerConfig
from llmgate.engines.meters import ENGINE_PARTS, Delta, Scrape, SpecAcceptance
from llmgate.engines.base import BootDiagnosis, Engine

HOST = "127.0.0.1"
GARBAGE_LOG = ("INFO starting\x1b[0m up… \n\n\t%s {} [[ ]] \\x00 ünïcödé 12345\n" * 40 +
               "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n")
ATTRIBUTES: dict[str, Callable[[Any], bool]] = {
    "name": lambda v: isinstance(v, str) and bool(v),
    "health_path": lambda v: isinstance(v, str) and v.startswith("/"),
    "metrics_path": lambda v: v is None or (isinstance(v, str) and v.startswith("/")),
    "api_key_env": lambda v: v is None or (isinstance(v, str) and bool(v)),
    "structured_slack": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
}
STRUCTURED_SPECS = ({"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}},
                    {"type": "regex", "pattern": "[a-z]{3}", "gbnf": 'root ::= [a-z] [a-z] [a-z]'},
                    {"type": "choice", "choices": ["yes", "no"]})


class ContractError(AssertionError):
    """An adapter that does not fit the engine contract; the message lists every problem."""


def methods() -> dict[str, inspect.Signature]:
    """The contract's methods and their signatures (from ``base.Engine``)."""
    return {n: inspect.signature(f) for n, f in vars(Engine).items()
            if not n.startswith("_") and inspect.isfunction(f)}


def check(adapter: object, name: str | None = None) -> None:
    """Raise ContractError listing everything in which ``adapter`` does not fit the contract
    (``name``: the name it is registered under, which its ``name`` attribute must be)."""
    found = problems(adapter, name)
    if found:
        label = getattr(adapter, "name", None) or type(adapter).__name__
        raise ContractError(f"engine adapter {label!r} ({type(adapter).__module__}.{type(adapter).__qualname__}) "
                            f"does not fit the contract:\n  - " + "\n  - ".join(found))


def problems(adapter: object, name: str | None = None) -> list[str]:
    """Everything in which ``adapter`` does not fit the contract; empty when it fits."""
    out: list[str] = []
    for attr, ok in ATTRIBUTES.items():
        if not hasattr(adapter, attr):
            out.append(f"attribute {attr!r} is missing")
        elif not ok(getattr(adapter, attr)):
            out.append(f"attribute {attr!r} = {getattr(adapter, attr)!r} is not valid")
    if name is not None and getattr(adapter, "name", None) != name:
        out.append(f"attribute 'name' is {getattr(adapter, 'name', None)!r}, but it is registered as {name!r}")
    missing = set()
    for meth, sig in methods().items():
        why = _signature_problem(adapter, meth, sig)
        if why:
            out.append(why)
            missing.add(meth)
    engine = getattr(adapter, "name", None) or "contract"
    configs = (ServerConfig(id="contract-cpu", engine=engine, model="tiny", device="cpu", kv_cache_bytes=1 << 30),
               ServerConfig(id="contract-gpu", engine=engine, model="tiny", device="gpu", gpu_memory_utilization=0.5))
    for call, what, ok in _calls(adapter, configs):
        if call.split("(")[0] in missing:
            continue
        try:
            value = what()
        except Exception as e:
            out.append(f"{call} raised {type(e).__name__}: {e}")
            continue
        why = ok(value)
        if why:
            out.append(f"{call} returned {_short(value)}: {why}")
    return out


def _signature_problem(adapter: object, meth: str, sig: inspect.Signature) -> str | None:
    impl = getattr(adapter, meth, None)
    if impl is None:
        return f"method {meth}() is missing"
    if not callable(impl):
        return f"{meth} is not a method"
    params = [p for p in sig.parameters.values() if p.name != "self"]
    try:
        impl_sig = inspect.signature(impl)
    except (TypeError, ValueError):
        return None                         # a builtin or C callable: cannot tell, the calls below still run
    try:
        impl_sig.bind(*[None] * len(params))     # the gate passes them by position
    except TypeError:
        want = ", ".join(p.name for p in params)
        return f"method {meth}{impl_sig} does not take the contract's arguments ({want})"
    return None


def _calls(a: Any, configs: tuple[ServerConfig, ...]) -> list[tuple[str, Callable[[], Any], Callable[[Any], str | None]]]:
    model = Path("/nonexistent/llmgate-contract-model")
    port = _closed_port()
    calls: list[tuple[str, Callable[[], Any], Callable[[Any], str | None]]] = []
    for cfg in configs:
        d = cfg.device
        calls += [
            (f"command({d} config)", lambda c=cfg: a.command(c, model, HOST, port), lambda v: _command_problem(v, model, port)),
            (f"environment({d} config)", lambda c=cfg: a.environment(c), _str_dict),
            (f"unavailable({d} config)", lambda c=cfg: a.unavailable(c), _none_or_line),
            (f"check_model({d} config, a missing path)", lambda c=cfg: a.check_model(c, model), _none_or_line),
            (f"unsupported({d} config, a missing path)", lambda c=cfg: a.unsupported(c, model), _none_or_line),
            (f"fixed_length_fields({d} config, 2)", lambda c=cfg: a.fixed_length_fields(c, 2), _json_dict),
            (f"fixed_length_fields({d} config, None)", lambda c=cfg: a.fixed_length_fields(c, None), _json_dict),
            (f"gpu_budget_bytes({d} config, 80 GB)", lambda c=cfg: a.gpu_budget_bytes(c, 80 * 10**9), _budget),
            (f"max_len_beyond_model({d} config)", lambda c=cfg: a.max_len_beyond_model(c),
             lambda v: None if isinstance(v, bool) else "not a bool"),
        ]
        calls += [(f"cannot({lever!r}, {d} config)", lambda lv=lever, c=cfg: a.cannot(lv, c), _none_or_line)
                  for lever in (*LEVERS, "limits")]
    calls += [
        ("stream_fields()", lambda: a.stream_fields(), _json_dict),
        ("token_ids_fields()", lambda: a.token_ids_fields(), _json_dict),
        ("allowed_tokens_fields([5, 7])", lambda: a.allowed_tokens_fields([5, 7]),
         lambda v: None if v is None else _json_dict(v)),
        ("extract_token_ids({'token_ids': [1, 2]})", lambda: a.extract_token_ids({"token_ids": [1, 2], "text": "ab"}),
         lambda v: None if v is None or (isinstance(v, list) and all(isinstance(i, int) for i in v)) else "not None or a list of ints"),
        ("extract_token_ids({})", lambda: a.extract_token_ids({}), lambda v: None if v is None else "not None"),
        ("diagnose_boot(a log it cannot know)", lambda: a.diagnose_boot(GARBAGE_LOG), _diagnosis),
        ("diagnose_boot('')", lambda: a.diagnose_boot(""), _diagnosis),
        ("first_error(a log it cannot know)", lambda: a.first_error(GARBAGE_LOG), _none_or_line),
        ("first_error('')", lambda: a.first_error(""), _none_or_line),
        ("read_log(a log it cannot know)", lambda: a.read_log(GARBAGE_LOG), _dict),
        ("spec_acceptance(an empty delta)", lambda: a.spec_acceptance(_empty_delta()),
         lambda v: None if v is None or isinstance(v, SpecAcceptance) else "not None or a SpecAcceptance"),
        ("prefix_cache_hits(an empty delta)", lambda: a.prefix_cache_hits(_empty_delta()), _none_or_number),
        ("server_ttft(an empty delta)", lambda: a.server_ttft(_empty_delta()), _none_or_number),
        ("engine_timers(an empty delta)", lambda: a.engine_timers(_empty_delta()), _timers),
        ("timers_path()", lambda: a.timers_path(),
         lambda v: None if v is None or (isinstance(v, str) and v.startswith("/")) else "not None or a path"),
        ("kv_capacity(an empty scrape)", lambda: a.kv_capacity(Scrape.parse("")),
         lambda v: None if v is None or (isinstance(v, int) and not isinstance(v, bool)) else "not None or an int"),
        (f"ready(nothing listening on {HOST}:{port})", lambda: _ready(a, port), lambda v: None if v is False else "not False"),
    ]
    calls += [(f"structured_fields({s['type']!r} spec)", lambda s=s: a.structured_fields(s),
               lambda v: None if v is None else _json_dict(v)) for s in STRUCTURED_SPECS]
    return calls


def _timers(v: Any) -> str | None:
    if not isinstance(v, dict):
        return "not a dict"
    bad = [k for k in v if k not in ENGINE_PARTS]
    if bad:
        return f"unknown parts {bad} (known: {', '.join(ENGINE_PARTS)})"
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v.values()):
        return "values that are not numbers"
    return None


def _command_problem(cmd: Any, model: Path, port: int) -> str | None:
    if not isinstance(cmd, list) or not cmd or not all(isinstance(x, str) for x in cmd):
        return "not a non-empty list of strings"
    text = " ".join(cmd)
    if HOST not in text:
        return f"it does not bind {HOST} (the host it was given)"
    if not any(str(port) in x for x in cmd):
        return f"it does not name port {port} (the port it was given)"
    if str(model) not in text:
        return "it does not name the model path it was given"
    if any(h in cmd for h in ("0.0.0.0", "::")):
        return "it binds every interface"
    return None


def _ready(a: Any, port: int) -> Any:
    with httpx.Client(timeout=2) as http:
        return a.ready(http, f"http://{HOST}:{port}", "model")


def _closed_port() -> int:
    with socket.socket() as s:               # bound and closed: nothing listens there now
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _empty_delta() -> Delta:
    return Delta(Scrape.parse(""), Scrape.parse(""))


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 200 else r[:200] + "…"


def _none_or_line(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        return "not None or a non-empty string"
    return None


def _dict(v: Any) -> str | None:
    return None if isinstance(v, dict) else "not a dict"


def _str_dict(v: Any) -> str | None:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        return "not a dict of strings to strings (environment variables)"
    return None


def _json_dict(v: Any) -> str | None:
    if not isinstance(v, dict):
        return "not a dict (request fields)"
    try:
        json.dumps(v)
    except (TypeError, ValueError) as e:
        return f"not JSON-serialisable ({e})"
    return None


def _diagnosis(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, BootDiagnosis):
        return "not None or a BootDiagnosis"
    if not isinstance(v.reason, str) or not v.reason.strip() or "\n" in v.reason:
        return "its reason is not one non-empty line"
    return None


def _none_or_number(v: Any) -> str | None:
    return None if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) else "not None or a number"


def _budget(v: Any) -> str | None:
    if v is None:
        return None
    if (not isinstance(v, tuple) or len(v) != 2 or not isinstance(v[0], int) or v[0] <= 0
            or not isinstance(v[1], str)):
        return "not None or (bytes > 0, how it was reckoned)"
    return None
