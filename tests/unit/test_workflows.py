"""The GitHub Actions workflows (.github/workflows/*.yml) as a self-test: zizmor, the Actions
security linter (the `test` extra), audits them offline with its default ("regular") persona and
finds nothing of medium severity or above; and a few cheap checks of our own, which need no zizmor:
every action pinned to a full commit SHA with its tag in a trailing comment, every checkout with
persist-credentials: false, permissions set at the top and in every job.  Each check is also run
on a sample workflow that breaks it, so that a check which can no longer fail is noticed."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
BLOCKING = {"medium", "high"}           # zizmor's severities: informational, low, medium, high

# `uses: owner/repo[/path]@<40 hex>  # tag`, or a local action / reusable workflow (./...)
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>[^\s#]+)(?P<comment>\s+#\s*\S.*)?$")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")

UNSAFE_SAMPLE = """\
name: sample
on: [push]
jobs:
  t:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.head_commit.message }}"
"""


def workflow_files() -> list[Path]:
    files = sorted([*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")])
    assert files, f"no workflows under {WORKFLOWS}"
    return files


def zizmor() -> list[str]:
    exe = Path(sys.executable).with_name("zizmor")
    found = str(exe) if exe.exists() else shutil.which("zizmor")
    if found is None:
        pytest.skip("zizmor is not installed (it comes with the test extra: pip install 'pytest-llmgate[test]')")
    return [found]


def zizmor_findings(*inputs: Path) -> list[dict]:
    """zizmor's findings of medium severity or above, offline, not ignored by a `# zizmor: ignore` comment."""
    r = subprocess.run([*zizmor(), "--offline", "--no-exit-codes", "--no-progress", "--format", "json-v1",
                        "--min-severity", "medium", *map(str, inputs)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"zizmor failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return [f for f in json.loads(r.stdout)
            if f["determinations"]["severity"].lower() in BLOCKING and not f.get("ignored")]


def describe(findings: list[dict]) -> str:
    lines = []
    for f in findings:
        loc = f["locations"][0]
        where = loc["symbolic"]["key"].get("Local", {}).get("verbatim_path", "?")
        row = loc["concrete"]["location"]["start_point"]["row"] + 1
        lines.append(f"{where}:{row}: {f['ident']} ({f['determinations']['severity']}): {f['desc']}")
    return "\n".join(lines)


def structural_problems(path: Path) -> list[str]:
    """Our own checks of one workflow file (no zizmor needed)."""
    text = path.read_text()
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        m = USES.match(line)
        if m is None:
            continue
        ref = m["ref"].strip("'\"")
        if ref.startswith("./"):
            continue
        if not PINNED.match(ref):
            problems.append(f"{path.name}:{n}: {ref} is not pinned to a full 40-hex commit SHA")
        elif m["comment"] is None:
            problems.append(f"{path.name}:{n}: {ref} has no trailing comment naming its tag")
    doc = yaml.safe_load(text)
    if "permissions" not in doc:
        problems.append(f"{path.name}: no top-level permissions (the token would get the repository's default)")
    for name, job in (doc.get("jobs") or {}).items():
        if "permissions" not in job:
            problems.append(f"{path.name}: job {name} sets no permissions of its own")
        for step in job.get("steps") or []:
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                persist = (step.get("with") or {}).get("persist-credentials")
                if str(persist).lower() != "false":
                    problems.append(f"{path.name}: job {name}: a checkout without persist-credentials: false")
    return problems


@pytest.fixture
def unsafe_workflow(tmp_path) -> Path:
    path = tmp_path / ".github" / "workflows" / "sample.yml"
    path.parent.mkdir(parents=True)
    path.write_text(UNSAFE_SAMPLE)
    return path


def test_zizmor_finds_nothing_of_medium_severity_or_above():
    findings = zizmor_findings(WORKFLOWS)
    assert findings == [], "zizmor --offline .github/workflows/:\n" + describe(findings)


def test_zizmor_flags_an_unsafe_sample(unsafe_workflow):
    idents = {f["ident"] for f in zizmor_findings(unsafe_workflow)}
    assert {"unpinned-uses", "artipacked", "excessive-permissions", "template-injection"} <= idents, idents


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_workflow_structure(path):
    assert structural_problems(path) == []


def test_structural_checks_flag_an_unsafe_sample(unsafe_workflow):
    problems = structural_problems(unsafe_workflow)
    assert any("actions/checkout@v4 is not pinned" in p for p in problems), problems
    assert any("no top-level permissions" in p for p in problems), problems
    assert any("job t sets no permissions" in p for p in problems), problems
    assert any("without persist-credentials: false" in p for p in problems), problems


def test_structural_checks_want_the_tag_comment(tmp_path):
    path = tmp_path / "w.yml"
    path.write_text(UNSAFE_SAMPLE.replace("actions/checkout@v4", "actions/checkout@" + "0" * 40))
    assert any("no trailing comment naming its tag" in p for p in structural_problems(path))
