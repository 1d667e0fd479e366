"""The CI script's timed steps (.ci/steps.sh, used by .ci/run): the table of step, seconds and exit
status with the total, on stdout and in $GITHUB_STEP_SUMMARY, also when a step fails; the first
failure (pytest's exit 5 included) ends the script with that step's status.  Stub commands only."""

import configparser
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="the CI scripts are bash")


def steps(script: str, tmp_path: Path, summary: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "CI_DRY_RUN")}
    if summary:
        env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "summary.md")
    return subprocess.run([BASH, "-c", f". {REPO / '.ci' / 'steps.sh'}\n{script}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def table(out: str) -> dict[str, list[str]]:
    """The table under '::: time per step': step name → [seconds, exit status]."""
    lines = out.split("::: time per step\n", 1)[1].splitlines()
    assert lines[0].split() == ["step", "seconds", "exit"]
    rows = {}
    for line in lines[1:]:
        name, *rest = line.rsplit(None, 2) if not line.startswith("total") else line.rsplit(None, 1)
        rows[name.strip()] = rest
    return rows


def test_every_step_is_timed_and_the_total_is_their_sum(tmp_path):
    r = steps('ci_step "first" true\nci_step "a pause, | in its name" sleep 0.3\n'
              'ci_step "writes" sh -c "echo hello > out.txt"\nci_finish\necho not reached', tmp_path)
    assert r.returncode == 0, r.stderr
    assert "::: first: true" in r.stdout and "not reached" not in r.stdout
    rows = table(r.stdout)
    assert list(rows) == ["first", "a pause, | in its name", "writes", "total"]
    assert [rows[k][1] for k in ("first", "a pause, | in its name", "writes")] == ["0", "0", "0"]
    secs = {k: float(v[0]) for k, v in rows.items()}
    assert secs["a pause, | in its name"] >= 0.3 and secs["first"] < secs["a pause, | in its name"]
    assert secs["total"] == pytest.approx(sum(v for k, v in secs.items() if k != "total"), abs=0.15)
    assert (tmp_path / "out.txt").read_text() == "hello\n"       # the steps really ran
    md = (tmp_path / "summary.md").read_text().splitlines()
    assert md[:4] == ["### CI time per step", "", "| step | seconds | exit status |", "|---|---:|---:|"]
    assert md[4] == f"| first | {rows['first'][0]} | 0 |"
    assert md[5].startswith("| a pause, \\| in its name | ")     # a | in a name does not split the row
    assert md[7] == f"| **total** | **{rows['total'][0]}** | |"


def test_a_failing_step_prints_the_table_and_exits_with_its_status(tmp_path):
    (tmp_path / "summary.md").write_text("an earlier step's summary\n")
    r = steps('ci_step "ok" true\nci_step "breaks" sh -c "exit 3"\nci_step "never" touch never\nci_finish', tmp_path)
    assert r.returncode == 3
    assert "'sh -c exit 3' failed with exit code 3" in r.stderr
    rows = table(r.stdout)
    assert list(rows) == ["ok", "breaks", "total"] and rows["breaks"][1] == "3"
    assert not (tmp_path / "never").exists()
    md = (tmp_path / "summary.md").read_text()
    assert md.startswith("an earlier step's summary\n### CI time per step")    # appended
    assert "| breaks | " in md and md.count("| 3 |") == 1 and "never" not in md


def test_pytest_collecting_no_tests_fails_the_run(tmp_path):
    r = steps('ci_step "no tests" sh -c "exit 5"\nci_finish', tmp_path, summary=False)
    assert r.returncode == 5
    assert "collected no tests (pytest exit 5): failing" in r.stderr
    assert table(r.stdout)["no tests"][1] == "5"
    assert not (tmp_path / "summary.md").exists()         # no $GITHUB_STEP_SUMMARY: stdout only


def test_the_ci_script_dry_run_lists_its_steps_and_the_readme_commands_among_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI_DRY_RUN"}
    env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "summary.md")
    r = subprocess.run([BASH, str(REPO / ".ci" / "run"), "--dry-run"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    rows = table(r.stdout)
    assert all(v[1] == "0" for k, v in rows.items() if k != "total")
    # llama-server builds in the background from before the README's two commands (steps, in the
    # README's order) until it is waited for, before the step that runs it
    order = list(rows)
    assert order[-1] == "total"
    assert order.index("chromium") < order.index("selftest")          # the report page's browser self-tests
    assert order.index("llama-server (started)") < order.index("gate") < order.index("selftest") \
        < order.index("llama-server (waited for)") < order.index("gate (llama.cpp, MLX-LM)"), order
    assert "::: selftest: python3 -m tox -e selftest -- --durations=15" in r.stdout
    assert "::: gate: python3 -m tox -e gate" in r.stdout
    assert (tmp_path / "summary.md").read_text().count("\n| ") == 1 + len(rows)     # the header, a row each


def test_the_readme_s_second_command_starts_the_llama_server_build_that_ci_shares(tmp_path):
    """`tox -e selftest` alone sets up llama-server (issue 34): after gate's environment exists and
    before the tests, it starts the build in the background (returning at once: the build runs beside
    the tests); .ci/run starts the same build earlier, at the same priority, so that the lock makes
    them one build (tests/unit/test_build_lock.py)."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    pre = [line.strip() for line in ini["testenv:selftest"]["commands_pre"].strip().splitlines()]
    start = "{work_dir}{/}gate{/}bin{/}python -m llmgate install llama-server --background"
    assert start in pre, pre
    assert any(" -e gate --notest" in line for line in pre[:pre.index(start)]), pre     # gate's python exists
    assert "--background" not in ini["testenv:selftest"]["commands"]
    ci = (REPO / ".ci" / "run").read_text()
    llama_start = ci.split("llama_start() {", 1)[1].split("\n}", 1)[0]
    assert "setsid sh -c 'echo 19 > /proc/self/autogroup 2>/dev/null; exec nice -n 19 " in llama_start
    assert "python3 -m llmgate install llama-server'" in llama_start
