"""The package decides by types and values, never by the words of a message (issue 37).

A self-test that reads every module of plugin/llmgate and flags a branch on message text: a
comparison or ``.startswith()``/``.endswith()`` whose text is an error's or a note's (``str(e)``,
``error``, ``note``, ``why``, ``reason``, ``mde_basis``…), or that looks for words (a string with a
space in it).  What such a check should be instead: an exception type (``PortInUse``, httpx's
``RemoteProtocolError``), an enum carried beside the text (``NoBaseline``, ``MdeBasis``), or a
count (``Swept.not_stopped``).  ``ALLOWED`` names each place that may still read text, and why.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "plugin" / "llmgate"

# names whose value is a message (an error's, a note's, a reason's) rather than data
MESSAGE_NAMES = {"e", "err", "error", "exc", "exception", "message", "msg", "note", "notes", "why", "reason",
                 "reasons", "problem", "problems", "detail", "details", "mde_basis", "basis", "status_text"}

# (module, the source text of the check) → why it may read text
ALLOWED = {
    ("engines/contract.py", '"\\n" in v.reason'):
        "the contract check validates that a diagnosis is one line; it decides nothing by its words",
    ("device/hardware.py", 'line.lower().startswith("model name")'):
        "reads the field of that name in /proc/cpuinfo (a file's format, not a message)",
    ("runner/run.py", "line not in self.notes"):
        "note_once: the same whole note is said once; nothing is decided by its words",
}


def _terminal(node: ast.AST) -> str | None:
    """The last name of ``a.b.c`` / ``a``, through calls like ``x.lower()`` and ``str(x)``."""
    while True:
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "str" and node.args:
                node = node.args[0]
                continue
            if isinstance(f, ast.Attribute) and f.attr in ("lower", "upper", "strip", "casefold"):
                node = f.value
                continue
            return None
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Name):
            return node.id
        return None


def _is_message(node: ast.AST) -> bool:
    return _terminal(node) in MESSAGE_NAMES


def _words(node: ast.AST) -> bool:
    """A literal that holds words (a space), or a tuple of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return " " in node.value.strip()
    if isinstance(node, ast.Tuple):
        return any(_words(x) for x in node.elts)
    return False


def text_decisions(source: str) -> list[tuple[int, str]]:
    """(line, source text) of each check on message text in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            right = node.comparators[-1]
            if _is_message(right) or _words(node.left):
                found.append(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith")):
            if _is_message(node.func.value) or any(_is_message(a) or _words(a) for a in node.args):
                found.append(node)
    return [(n.lineno, ast.get_source_segment(source, n) or "") for n in found]


def test_no_decision_by_the_words_of_a_message():
    flagged, allowed_seen = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line, text in text_decisions(path.read_text(encoding="utf-8")):
            if (rel, text) in ALLOWED:
                allowed_seen.add((rel, text))
            else:
                flagged.append(f"plugin/llmgate/{rel}:{line}: {text}")
    assert not flagged, ("decided by the words of a message (use an exception type, an enum or a value; or name "
                         "the place in ALLOWED with why):\n  " + "\n  ".join(flagged))
    assert allowed_seen == set(ALLOWED), f"ALLOWED names places that are gone: {set(ALLOWED) - allowed_seen}"


def test_the_check_finds_what_it_is_for():
    """The six kinds of check issue 37 removed are all found."""
    old = '''
if "address already in use" not in str(e).lower(): pass
if sample.error and "without sending a response" in sample.error.lower(): pass
head if head.startswith("no baseline") else None
detail = [d for d in why if d.startswith(problem)]
if self.mde_basis and not self.mde_basis.startswith(("boots", "pairs", "against")): pass
any(line.startswith("llmgate: could not stop") for line in lines)
'''
    assert len(text_decisions(old)) == 6
    assert text_decisions('if line.startswith("data:"): pass\nif "ttft" in timers: pass\n') == []
