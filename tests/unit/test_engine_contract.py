"""One engine contract: every registered engine (the built-ins and any adapter another installed
package registers under the entry-point group ``llmgate.engines``) passes the conformance check,
without booting.  Entry points are tested with scratch distributions (a ``NAME-0.dist-info``
folder on sys.path, which importlib.metadata reads like an installed package)."""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path

import pytest

from llmgate import engines
from llmgate.config import matrix
from llmgate.engines import base, contract

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("name", engines.names())
def test_every_registered_engine_fits_the_contract(name):
    engines.check(engines.get(name), name)


def test_the_contract_covers_every_attribute_the_gate_uses_on_an_adapter():
    """Whatever the gate's modules and scenarios use on ``handle.engine`` / ``self.engine`` /
    ``engines.get(...)`` is in the Protocol, so an adapter that fits it is enough."""
    used: set[str] = set()
    sources = [p for p in (ROOT / "plugin" / "llmgate").rglob("*.py") if "engines" not in p.parts]
    sources += list((ROOT / "tests" / "perf").rglob("*.py"))
    for p in sources:
        text = p.read_text()
        used |= set(re.findall(r"\b(?:h|handle|self)\.engine\.(\w+)", text))
        used |= set(re.findall(r"engines\.get\([^)]*\)\.(\w+)", text))
    assert {"command", "ready", "diagnose_boot", "stream_fields", "cannot"} <= used   # the scan sees the callers
    contract_names = set(contract.methods()) | set(contract.ATTRIBUTES)
    assert used - contract_names == set()
    assert set(contract.methods()) <= set(dir(base.BaseAdapter)) | {"command", "info"}


class Careless(base.BaseAdapter):
    name = "careless"
    structured_slack = -1

    def command(self, cfg, model, host, port):
        if cfg.device == "gpu":
            return ["serve", str(model), "--host", "0.0.0.0", "--port", str(port)]   # every interface
        return ["serve", str(model), "--host", host, "--port", port]                  # an int

    def info(self, http, base_url):                                       # cfg missing
        return None

    def stream_fields(self):
        return {"stream_options": {"include_usage": {1, 2}}}              # not JSON

    def diagnose_boot(self, log_text):
        return base.BootDiagnosis("line one\nline two")

    def ready(self, http, base_url, model_name):
        return http.get(base_url + self.health_path).status_code == 200    # raises while nothing listens


def test_check_names_every_problem_of_a_careless_adapter():
    found = contract.problems(Careless(), "other-name")
    text = "\n".join(found)
    for fragment in ("attribute 'structured_slack' = -1 is not valid",
                     "attribute 'name' is 'careless', but it is registered as 'other-name'",
                     "method info(http, base_url) does not take the contract's arguments (http, base_url, cfg)",
                     "command(cpu config) returned ['serve', '/nonexistent/llmgate-contract-model', '--host', "
                     "'127.0.0.1', '--port', ",
                     "not a non-empty list of strings",
                     "'0.0.0.0', '--port', ",
                     "it does not bind 127.0.0.1 (the host it was given)",
                     "stream_fields() returned",
                     "not JSON-serialisable",
                     "diagnose_boot(a log it cannot know) returned",
                     "its reason is not one non-empty line",
                     "raised ConnectError"):
        assert fragment in text, text
    with pytest.raises(contract.ContractError, match=r"engine adapter 'careless' .* does not fit the contract"):
        engines.check(Careless())


def test_an_adapter_without_command_is_told_so():
    class Bare(base.BaseAdapter):
        name = "bare"

    found = contract.problems(Bare())
    assert "method command() is missing" in found and "method info() is missing" in found


def _scratch_dist(root: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    info = root / f"{dist}-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[llmgate.engines]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))


ALIAS = """
    from llmgate.engines.vllm import Adapter as Vllm

    class Alias(Vllm):
        name = "vllm-alias"
"""


def test_an_engine_registered_by_another_package_is_found_and_checked(tmp_path, monkeypatch):
    _scratch_dist(tmp_path, "scratch-engines", {"vllm-alias": "scratch_alias:Alias", "vllm-mod": "scratch_mod"},
                  {"scratch_alias": ALIAS, "scratch_mod": ALIAS.replace("Alias", "Adapter").replace("vllm-alias", "vllm-mod")})
    assert "vllm-alias" not in engines.names()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert {"vllm-alias", "vllm-mod", "vllm", "llamacpp"} <= set(engines.names())
    alias = engines.get("vllm-alias")
    assert type(alias).__module__ == "scratch_alias" and alias.name == "vllm-alias"
    engines.check(alias, "vllm-alias")
    engines.check(engines.get("vllm-mod"), "vllm-mod")       # a module holding a class Adapter
    (reg,) = engines.registrations()["vllm-alias"]
    assert reg.package == "scratch-engines" and reg.target == "scratch_alias:Alias"
    # a matrix names it like a built-in
    (tmp_path / "llmgate.toml").write_text('[[matrix]]\nid = "a"\nengine = "vllm-alias"\nmodel = "tiny"\n')
    assert matrix.load(tmp_path / "llmgate.toml").entries[0].engine == "vllm-alias"


def test_a_broken_entry_point_is_one_line_naming_its_package_and_breaks_nothing_else(tmp_path, monkeypatch):
    _scratch_dist(tmp_path, "broken-engines", {"broken": "no_such_module_xyz:Adapter", "empty": "scratch_empty"},
                  {"scratch_empty": "X = 1\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(engines.EngineError) as e:
        engines.get("broken")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == ("engine 'broken': entry point 'broken' = 'no_such_module_xyz:Adapter' of package broken-engines "
                   "does not load: ModuleNotFoundError: No module named 'no_such_module_xyz'")
    with pytest.raises(engines.EngineError, match=r"module scratch_empty has no class Adapter"):
        engines.get("empty")
    engines.check(engines.get("vllm"), "vllm")              # the others still load
    (tmp_path / "llmgate.toml").write_text('[[matrix]]\nid = "a"\nengine = "broken"\nmodel = "tiny"\n'
                                           '[[matrix]]\nid = "b"\nengine = "vllm"\nmodel = "tiny"\n')
    with pytest.raises(matrix.MatrixError) as e:
        matrix.load(tmp_path / "llmgate.toml")
    assert "\n" not in str(e.value)
    assert str(e.value).startswith(f"{tmp_path / 'llmgate.toml'}: matrix entry 'a': key 'engine': engine 'broken': "
                                   f"entry point 'broken' = 'no_such_module_xyz:Adapter' of package broken-engines")


def test_two_packages_with_one_engine_name_are_named(tmp_path, monkeypatch):
    _scratch_dist(tmp_path / "a", "pkg-a", {"twin": "scratch_twin_a:Alias"}, {"scratch_twin_a": ALIAS})
    _scratch_dist(tmp_path / "b", "pkg-b", {"twin": "scratch_twin_b:Alias"}, {"scratch_twin_b": ALIAS})
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    with pytest.raises(engines.EngineError, match=r"engine 'twin' is registered twice: .*package pkg-\w.*package pkg-\w"):
        engines.get("twin")


def test_an_unknown_engine_lists_the_known_ones():
    with pytest.raises(engines.EngineError) as e:
        engines.get("nope")
    assert str(e.value) == f"unknown engine 'nope' (known: {', '.join(engines.names())})"
    assert "llamacpp, mlx, sglang, vllm" in str(e.value)
    with pytest.raises(engines.EngineError) as e:
        engines.get("sglangg")
    assert str(e.value).startswith("unknown engine 'sglangg'; did you mean 'sglang'? (known: ")


def test_pyproject_registers_the_builtin_engines_by_entry_point():
    """The installed package finds its engines through the entry-point group; the table in
    engines/__init__.py is only the fallback of a checkout that is not installed, and says the same."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][engines.GROUP] == engines.BUILTIN
