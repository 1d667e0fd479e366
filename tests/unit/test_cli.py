"""The ``llmgate`` command (llmgate.cli): one subcommand per tool, each with its --help; a usage error
is one line and exit 2; ``python -m llmgate`` and the console script are the same command; a
subcommand runs its module's ``run`` (a few of them run here, engine-free); ``llmgate --help``
imports no tool's module; no module of the package but the watchdog keeps a ``__main__`` block."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from llmgate import cli

REPO = Path(__file__).resolve().parents[2]
TOOLS = ["tinymodel", "install", "strays", "history", "reference", "merge", "sensitivity", "bisect", "migrate", "venvs"]


def llmgate(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m llmgate ARGS`` with this checkout's llmgate first on the path (as .ci/run runs it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugin"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "llmgate", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_every_tool_is_a_subcommand_and_the_help_lists_them(capsys):
    assert list(cli.COMMANDS) == TOOLS
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: llmgate ")
    listed = re.findall(r"^    (\w+)", out, flags=re.M)
    assert listed == TOOLS, out


@pytest.mark.parametrize("name", TOOLS)
def test_each_subcommand_has_its_help(name, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: llmgate {name} ") and cli.COMMANDS[name][1] in " ".join(out.split()), out


@pytest.mark.parametrize("args, says", [
    ((), "the following arguments are required: COMMAND"),
    (("nosuchtool",), "invalid choice: 'nosuchtool'"),
    (("--nosuchoption",), "the following arguments are required: COMMAND"),
    (("merge", "report.json"), "the following arguments are required: --out"),
    (("history", "--alpha", "often"), "argument --alpha: invalid float value: 'often'"),
    (("sensitivity",), "the following arguments are required: files"),
    (("strays", "a", "b"), "unrecognized arguments: b"),
    # found by the tool after parsing (argparse.ArgumentError from its run): the same one line
    (("install", "llama-src"), "llama-src needs OUT"),
])
def test_a_usage_error_is_one_line_and_exit_2(args, says):
    r = llmgate(*args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "\n" not in err and err.startswith("llmgate") and ": error: " in err and says in err, err
    assert err.endswith("--help)") and r.stdout == ""


def test_python_dash_m_llmgate_and_the_console_script_are_the_same_command():
    r = llmgate("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: llmgate ") and r.stderr == "", r.stderr
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"] == {"llmgate": "llmgate.cli:main"}
    script = Path(sys.executable).with_name("llmgate")
    if not script.is_file():                 # llmgate run from the checkout (PYTHONPATH), not installed
        found = shutil.which("llmgate")
        if found is None:
            pytest.skip("no llmgate console script installed beside this interpreter")
        script = Path(found)
    s = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert s.returncode == 0 and s.stdout == r.stdout


def test_the_top_level_help_imports_no_tool():
    code = ("import sys\nfrom llmgate import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', ' '.join(sorted(m for m in sys.modules if m.startswith('llmgate.'))))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "plugin")}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    loaded = set(r.stdout.split("LOADED", 1)[1].split())
    assert not loaded & {module for module, _ in cli.COMMANDS.values()}, loaded


def test_each_tool_module_gives_add_arguments_and_run():
    import importlib

    for name, (module, _) in cli.COMMANDS.items():
        m = importlib.import_module(module)
        assert callable(m.add_arguments) and callable(m.run), name
        assert not hasattr(m, "main"), f"{module}.main: the tool runs through llmgate.cli"


def test_no_module_but_the_watchdog_is_run_by_its_path():
    """The watchdog is started as a file (process.watchdog.command); every other tool is a subcommand."""
    mains = sorted(str(p.relative_to(REPO / "plugin" / "llmgate")) for p in (REPO / "plugin" / "llmgate").rglob("*.py")
                   if re.search(r"^if __name__ == .__main__.:", p.read_text(), flags=re.M))
    assert mains == ["__main__.py", "process/watchdog.py"], mains
    from llmgate.process import watchdog
    cmd = watchdog.command(["true"])
    assert cmd[1:3] == ["-P", str(Path(watchdog.__file__).resolve())], cmd


# -- subcommands that run engine-free: the dispatch reaches the tool ---------------------------------------
def test_migrate_rewrites_a_baseline_folder(tmp_path):
    root = tmp_path / "baselines"
    shutil.copytree(REPO / "tests" / "data" / "baseline-keys-0.1", root)
    r = llmgate("migrate", str(root))
    assert r.returncode == 0 and "2 entries migrated" in r.stdout, (r.stdout, r.stderr)
    again = llmgate("migrate", str(root))
    assert again.returncode == 0 and "already current" in again.stdout and "0 entries migrated" in again.stdout


def test_history_of_an_empty_store_and_of_none(tmp_path):
    r = llmgate("history", str(tmp_path))
    assert r.returncode == 1 and r.stderr.strip() == f"llmgate history: 0 record(s) in {tmp_path}, no series matches"
    r = llmgate("history", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.strip() == f"llmgate history: no history folder {tmp_path / 'missing'}"


def test_sensitivity_of_a_committed_baseline():
    stored = REPO / "baselines" / "Linux-CPython-3.12-64bit" / "0005_h200-8b.json"
    r = llmgate("sensitivity", str(stored), "--entry", "h200-8b-bf16", "--metric", "decode_tok_s", "--markdown")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("| ") and "h200-8b-bf16" in r.stdout and "decode_tok_s" in r.stdout, r.stdout


def test_strays_with_nothing_left(tmp_path):
    r = llmgate("strays", str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == f"llmgate: no server left by an earlier run under {tmp_path}"
