"""The manual and its pages stay short and true to the code (issue 47): README.md is at most 300
lines and gpu/README.md at most 150; every relative link of README.md, docs/**/*.md, gpu/README.md
and the run pages (gpu/runs/**/README.md) names a file that exists (and, into a
Markdown page, a heading that exists, by GitHub's anchor rules); every `llmgate SUBCOMMAND` they show
is a subcommand of the `llmgate` command (llmgate.cli's table; the dated run pages are not held to this); every `--llmgate-...` option they
show is one the plugin registers (read from its source); no `python -m llmgate.X` is shown.
Seconds, no engine.  Each check is also run on a broken sample, so that it is seen to fail."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

import llmgate
from llmgate import cli

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
GPU_README = REPO / "gpu" / "README.md"
# the manual, its pages and the GPU recipe: current, every check; the dated run pages: their links
PAGES = [README, *sorted((REPO / "docs").rglob("*.md")), GPU_README]
RUN_PAGES = sorted((REPO / "gpu" / "runs").rglob("README.md"))
MAX_README_LINES = 300
MAX_GPU_README_LINES = 150

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
OPTION = re.compile(r"--llmgate-[a-z0-9]+(?:-[a-z0-9]+)*")
# `llmgate WORD` where a command starts: a line's (or a code span's) start, after a `$ ` prompt,
# `&&`, `||`, a pipe or `$(` (not after `;` or `(`: prose in a quoted message has those)
COMMAND = re.compile(r"(?:^(?:\$\s+)?|&&\s*|\|\|?\s*|\$\(\s*)llmgate\s+([A-Za-z][\w-]*)")
PYTHON_M = re.compile(r"python3?\s+-m\s+llmgate\.")


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def split_code(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose lines, code-block lines), each as (line number, text); fences themselves dropped."""
    prose, code, inside = [], [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        (code if inside else prose).append((n, line))
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case, everything but
    letters, digits, `_`, `-` and spaces dropped, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a Markdown text (outside code blocks), with GitHub's -1, -2 … for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in split_code(text)[0]:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path, text: str) -> list[str]:
    problems = []
    for n, line in split_code(text)[0]:
        line = CODE_SPAN.sub("", line)
        for target in [*LINK.findall(line), *IMAGE.findall(line)]:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):          # http(s):, mailto: …
                continue
            path, _, anchor = target.partition("#")
            where = f"{rel(page) if page.is_relative_to(REPO) else page}:{n}: ({target})"
            if not path:                                               # a pure #anchor, in this page
                if anchor not in anchors(text):
                    problems.append(f"{where}: no heading for #{anchor} in this page")
                continue
            dest = (page.parent / path).resolve()
            if not dest.exists():
                problems.append(f"{where}: {path} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                problems.append(f"{where}: no heading for #{anchor} in {path}")
    return problems


def shown_snippets(text: str) -> list[tuple[int, str]]:
    """What a page shows as code: each code-block line, and each code span of its prose."""
    prose, code = split_code(text)
    out = [(n, line.strip()) for n, line in code]
    out += [(n, span.strip()) for n, line in prose for _, span in CODE_SPAN.findall(line)]
    return out


def unknown_subcommands(text: str) -> list[str]:
    bad = []
    for n, snippet in shown_snippets(text):
        for word in COMMAND.findall(snippet):
            if word.isupper():                                         # a placeholder: `llmgate COMMAND --help`
                continue
            if word not in cli.COMMANDS:
                bad.append(f"line {n}: `llmgate {word}` in {snippet!r}")
    return bad


@functools.cache
def registered_options() -> frozenset[str]:
    """Every option the plugin registers (`addoption("--llmgate-…")` calls anywhere in llmgate's
    source), read from the source, so that a new option needs no list here."""
    found = set()
    for source in Path(llmgate.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("addoption", "_addoption")):
                found |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return frozenset(o for o in found if o.startswith("--llmgate-"))


def unknown_options(text: str, known: frozenset[str]) -> list[str]:
    return [f"line {n}: {o}" for n, line in enumerate(text.splitlines(), 1)
            for o in OPTION.findall(line) if o not in known]


# ---- the manual and its pages ----

def test_the_readme_is_a_short_manual():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines, more than {MAX_README_LINES}: move depth to a page under docs/ "
        "and dated measurements to docs/lab/, and link them")


def test_the_gpu_readme_is_a_recipe():
    lines = len(GPU_README.read_text().splitlines())
    assert lines <= MAX_GPU_README_LINES, (
        f"gpu/README.md has {lines} lines, more than {MAX_GPU_README_LINES}: a run's account goes to its "
        "gpu/runs/DATE-NAME/README.md, linked from gpu/runs/README.md")


@pytest.mark.parametrize("page", PAGES + RUN_PAGES, ids=rel)
def test_every_relative_link_resolves(page):
    assert broken_links(page, page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_llmgate_subcommand_shown_exists(page):
    assert unknown_subcommands(page.read_text()) == [], f"llmgate's subcommands: {sorted(cli.COMMANDS)}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_llmgate_option_shown_is_registered(page):
    known = registered_options()
    assert unknown_options(page.read_text(), known) == [], f"registered: {sorted(known)}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_python_m_llmgate_module_is_shown(page):
    bad = [f"line {n}: {line.strip()}" for n, line in enumerate(page.read_text().splitlines(), 1)
           if PYTHON_M.search(line)]
    assert bad == [], "show the `llmgate` console script (llmgate.cli) instead"


# ---- each check, on something broken ----

def test_the_options_are_read_from_the_source():
    known = registered_options()
    assert {"--llmgate-ab", "--llmgate-boots", "--llmgate-accept", "--llmgate-shard"} <= known
    assert unknown_options("`--llmgate-boots 3` and `--llmgate-bootz 3`", known) == ["line 1: --llmgate-bootz"]


def test_the_checks_find_what_is_broken(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# There\n\n## A `thing`: its part\n\n```\n# not a heading\n```\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n## The seed's five levers\n\n"
        "[ok](docs/there.md) [ok](docs/there.md#a-thing-its-part) [ok](#the-seeds-five-levers) "
        "[web](https://example.com/x) ![img](docs/there.md)\n"
        "[gone](docs/nowhere.md) [bad anchor](docs/there.md#not-a-heading) [bad](#nope)\n"
        "`[in a span](docs/nowhere.md)`\n\n```\n[in a block](docs/nowhere.md)\n```\n")
    problems = broken_links(page, page.read_text())
    assert len(problems) == 3, problems
    assert "docs/nowhere.md does not exist" in problems[0]
    assert "no heading for #not-a-heading in docs/there.md" in problems[1]
    assert "no heading for #nope in this page" in problems[2]

    text = ("```\nllmgate merge --out x a.json\nllmgate mergee a.json\n$ llmgate bisect a b\n"
            "git commit -m \"llmgate baseline\"\n```\n"
            "Run `llmgate histroy` or `llmgate COMMAND --help`; `llmgate.toml`; `cd x && llmgate tinymodel m`;\n"
            "`x: a; llmgate converts only its own` `ls | llmgate strayz`.\n")
    assert unknown_subcommands(text) == ["line 3: `llmgate mergee` in 'llmgate mergee a.json'",
                                         "line 7: `llmgate histroy` in 'llmgate histroy'",
                                         "line 8: `llmgate strayz` in 'ls | llmgate strayz'"]
    assert PYTHON_M.search("python -m llmgate.report.merge") and not PYTHON_M.search("python -m llmgate ")


def test_github_anchors():
    assert slug("`llmgate.Metric` and `llmgate.metrics`") == "llmgatemetric-and-llmgatemetrics"
    assert slug("KV dtype → max_model_len") == "kv-dtype--max_model_len"
    assert slug("Comparisons 2 and 3: a duet and alternating boots") == "comparisons-2-and-3-a-duet-and-alternating-boots"
    assert anchors("# A\n## A\n## A\n") == {"a", "a-1", "a-2"}
