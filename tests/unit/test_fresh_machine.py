"""tests/validation/fresh_machine.sh (issue 34; not run by CI): it runs the README's Quick start
commands, as README.md shows them, and nothing else.  Here with stand-in commands in a scratch
repository (seconds, no engine): the commands it reads are those of the README's Quick start block;
each runs in the fresh clone, from empty caches, with no llama-server on PATH, and is reported with
its time and exit status, then one final line; a failed command fails the script."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "validation" / "fresh_machine.sh"
BASH, GIT = shutil.which("bash"), shutil.which("git")
pytestmark = pytest.mark.skipif(BASH is None or GIT is None, reason="the script is bash and clones with git")


def readme_quick_start(readme: str) -> list[str]:
    """The commands of the first code block under the "Quick start" heading, read in Python."""
    after = re.split(r"^#+ .*quick ?start.*$", readme, maxsplit=1, flags=re.M | re.I)[1]
    block = after.split("```", 2)[1].split("\n", 1)[1]          # its opening fence's line dropped
    return [line.removeprefix("$ ") for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_it_reads_the_two_commands_the_readme_shows():
    r = subprocess.run([BASH, str(SCRIPT), "--print-commands"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    shown = readme_quick_start((REPO / "README.md").read_text())
    assert r.stdout.splitlines() == shown and len(shown) == 2, (r.stdout, shown)
    assert shown[1] == "python3 -m tox -e selftest"
    script = SCRIPT.read_text()
    assert ".ci/" not in script.split("set -uo pipefail", 1)[1]          # nothing of CI's


def test_it_runs_them_in_a_fresh_clone_from_empty_caches_and_reports_each(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text(
        "# x\n\n## Quick start\n\n```\n"
        "echo first; find \"$LLMGATE_CACHE\" \"$PIP_CACHE_DIR\" -mindepth 1 | wc -l; echo \"cache=$LLMGATE_CACHE\"; pwd\n"
        "$ sh -c 'command -v llama-server || echo no llama-server; echo \"x=${LLMGATE_X:-unset}\"; exit 3'\n"
        "```\n\nText.\n\n```\nnot a command\n```\n")
    (repo / "marker").write_text("cloned\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "readme"]):
        subprocess.run([GIT, *cmd], cwd=repo, env=env, check=True)
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "llama-server"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {**env, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "LLMGATE_X": "set",
           "LLMGATE_LLAMA_SERVER": str(fake)}
    r = subprocess.run([BASH, str(SCRIPT), str(repo)], capture_output=True, text=True, env=env, timeout=60)
    out = r.stdout
    assert r.returncode == 1, (out, r.stderr)
    logs = Path(re.search(r"logs in (\S+)", out).group(1))
    first = (logs / "command1.log").read_text().splitlines()
    assert first[0] == "first" and first[1] == "0"                       # both caches empty
    assert first[2].startswith("cache=/tmp/llmgate-fresh.") and first[3].endswith("/llmgate")   # in the clone
    assert (logs / "command2.log").read_text().splitlines() == ["no llama-server", "x=unset"]
    assert re.search(r"^::: command 1: exit status 0 in \d+ s$", out, re.M), out
    assert re.search(r"^::: command 2: exit status 3 in \d+ s$", out, re.M), out
    assert re.fullmatch(r"::: fresh machine: FAIL \(command 1: rc 0, \d+ s; command 2: rc 3, \d+ s; \d+ s in all\)",
                        out.splitlines()[-1]), out
    clone = Path(first[3])
    assert not clone.exists()                                            # removed without --keep
    shutil.rmtree(logs)


def test_a_readme_without_two_quick_start_commands_fails_before_running_anything(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("## Quick start\n\n```\ntouch /nonexistent-dir/x\n```\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "readme"]):
        subprocess.run([GIT, *cmd], cwd=repo, env=env, check=True)
    r = subprocess.run([BASH, str(SCRIPT), str(repo)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and r.stdout.splitlines()[-1] == \
        "::: fresh machine: FAIL (the README's Quick start holds 1, not 2 commands)", r.stdout
    assert "logs in" not in r.stdout and not Path(re.search(r"cloned into (\S+)/llmgate", r.stdout).group(1)).exists()


def test_a_build_the_commands_left_running_is_stopped_before_its_folder_goes(tmp_path):
    """Command 2 ends early (a failed tier) while the llama-server build it started runs on in its own
    session: the script stops that session (the build lock names it) before removing the caches."""
    repo = tmp_path / "repo"
    repo.mkdir()
    lock = '"$LLMGATE_CACHE/llama.cpp/build.lock"'
    (repo / "README.md").write_text(
        "## Quick start\n\n```\ntrue\n"
        f"mkdir -p \"$LLMGATE_CACHE/llama.cpp\" && (setsid sh -c 'echo $$ > {lock}; exec flock {lock} sleep 300' "
        ">/dev/null 2>&1 &) && sleep 1 && exit 1\n```\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "readme"]):
        subprocess.run([GIT, *cmd], cwd=repo, env=env, check=True)
    r = subprocess.run([BASH, str(SCRIPT), str(repo)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1, r.stdout
    m = re.search(r"^::: stopping the llama-server build left running \(session (\d+)\)$", r.stdout, re.M)
    assert m, r.stdout
    pid = int(m.group(1))
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    assert not Path(re.search(r"cloned into (\S+)/llmgate", r.stdout).group(1)).exists()
    shutil.rmtree(re.search(r"logs in (\S+)", r.stdout).group(1))
