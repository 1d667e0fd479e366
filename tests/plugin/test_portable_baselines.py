"""A baseline is identified by content, not place: saved in one checkout, committed, it compares in
a clone in another folder (CI's), where ``llmgate tinymodel`` made the same model again.
No absolute path is fingerprinted (the model, its tokenizer, a draft model, a file in ``args``, the
project's folder in ``env``): each by its last part and, for a file or a model folder, its content
hash.  A file stored with absolute paths (before) compares as well, read portably, and ``llmgate
migrate`` rewrites it.  Engine-free: the scenario records the figures it is
given (``llmgate_config``, not ``llmgate_server``: nothing is booted)."""

import json
import subprocess
import sys

import pytest

from llmgate.store import benchmark_files, fingerprint as fingerprints

pytest_plugins = ["pytester"]

MATRIX = """
[[matrix]]
id = "team-cpu"
engine = "vllm"
model = "models/our-model"          # a folder by path, resolved against this file's folder
tokenizer = "models/our-model"
max_model_len = 1024
speculative = { method = "draft_model", model = "models/our-draft", num_speculative_tokens = 2 }
"""

# a team's conftest puts paths of its checkout into the entry: a file, and the checkout itself
CONFTEST = """
import dataclasses

def pytest_llmgate_matrix(config, matrix):
    root = config.rootpath
    return dataclasses.replace(matrix, entries=tuple(
        dataclasses.replace(e, args=("--chat-template", str(root / "template.jinja")),
                            env={"PYTHONPATH": str(root)} if WITH_ENV else {})
        for e in matrix.entries))
"""

SCENARIO = """
import json, os
from llmgate.core import metrics

def test_decode_c1(llmgate_config, gate):
    gate.record(metrics.DECODE_TOK_S, json.loads(os.environ["VALUES"]))
"""

SAME = [100.0, 101.0, 99.0, 100.0, 100.0]
SLOWER = [20.0, 20.5, 19.5, 20.0, 20.0]        # far beyond what one CPU boot a side can swing


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=llmgate", "-c", "user.email=llmgate@example.invalid", *args],
                   cwd=cwd, check=True, capture_output=True)


def make_models(folder):
    """The README's step, in this checkout: the model (and a one-layer draft) made by llmgate."""
    for name, extra in (("our-model", []), ("our-draft", ["--layers", "1"])):
        subprocess.run([sys.executable, "-m", "llmgate", "tinymodel", f"models/{name}", *extra], cwd=folder,
                       check=True, capture_output=True)


def new_project(folder, with_env=True):
    folder.mkdir()
    (folder / "llmgate.toml").write_text(MATRIX)
    (folder / "conftest.py").write_text(f"WITH_ENV = {with_env}\n" + CONFTEST)
    (folder / "test_gate.py").write_text(SCENARIO)
    (folder / "template.jinja").write_text("{{ messages }}\n")
    (folder / ".gitignore").write_text(".llmgate/\nmodels/\n")
    make_models(folder)
    git(folder, "init", "-q")
    return folder


def gate(pytester, folder, values, *args):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps(values))
        return pytester.runpytest_subprocess("--rootdir", str(folder), str(folder / "test_gate.py"),
                                             "-p", "no:cacheprovider", *args)


def clone(first, second):
    git(first, "add", "-A")
    git(first, "commit", "-q", "-m", "llmgate baseline")
    subprocess.run(["git", "clone", "-q", str(first), str(second)], check=True, capture_output=True)
    make_models(second)


def verdict(folder):
    (v,) = json.loads((folder / ".llmgate" / "report.json").read_text())["verdicts"][:1]
    return v


def test_a_baseline_saved_in_one_folder_compares_in_a_clone_in_another(pytester):
    first = new_project(pytester.path / "first")
    gate(pytester, first, SAME, "--benchmark-save=ours").assert_outcomes(passed=1)
    (saved,) = benchmark_files.stored_files(first / "baselines")
    (bench,) = json.loads(saved.read_text())["benchmarks"]
    fp = bench["extra_info"]["llmgate"]["fingerprint"]
    # no absolute path in what is compared (the provenance beside it keeps them, for the reader)
    assert str(pytester.path) not in json.dumps(fp), fp
    assert str(first) in json.dumps(bench["extra_info"]["llmgate"]["config"])
    cfg = fp["config"]
    assert cfg["model"] == "our-model"                       # its content: fp["model_hash"]
    assert cfg["tokenizer"].startswith("our-model@sha256:") and cfg["speculative"]["model"].startswith("our-draft@sha256:")
    assert cfg["args"][0] == "--chat-template" and cfg["args"][1].startswith("template.jinja@sha256:")
    assert cfg["env"] == {"PYTHONPATH": "."}

    second = pytester.path / "second"
    clone(first, second)
    r = gate(pytester, second, SAME, "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines([f"llmgate: team-cpu: compared with {saved.parent.name}/{saved.name}",
                            "*| decode tok/s (c=1) *| 100.0 tok/s *| +0.0% *| inconclusive *|"])
    assert "no baseline" not in r.stdout.str()
    assert verdict(second)["baseline_source"] == f"{saved.parent.name}/{saved.name}"
    # and it gates there: a slower engine fails against the baseline of the other folder
    r = gate(pytester, second, SLOWER, "--benchmark-compare", "--llmgate-no-confirm")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines([f"*performance regression against {saved.parent.name}/{saved.name}:*",
                            "*team-cpu decode_tok_s*baseline 100.0 tok/s*→ now 20.0 tok/s*regressed*"])
    # content, not name: the same file name with another content is another configuration
    (second / "template.jinja").write_text("{{ messages | reverse }}\n")
    r = gate(pytester, second, SAME, "--benchmark-compare")
    r.assert_outcomes(passed=1)
    was, now = (f"['--chat-template', 'template.jinja@sha256:{fingerprints.portable_config({'a': str(f)})['a'][-16:]}']"
                for f in (first / "template.jinja", second / "template.jinja"))
    assert was != now
    assert (f"team-cpu: no baseline for this configuration: the nearest, {saved.parent.name}/{saved.name}, "
            f"configuration differs: args: {was} → {now}") in r.stdout.str()


def old_style(path, root):
    """Rewrite a stored file as llmgate stored it before its paths were portable: the absolute
    paths of the folder it was saved in, in the fingerprint's configuration."""
    data = json.loads(path.read_text())
    for b in data["benchmarks"]:
        cfg = b["extra_info"]["llmgate"]["fingerprint"]["config"]
        cfg["model"] = cfg["tokenizer"] = str(root / "models" / "our-model")
        cfg["speculative"]["model"] = str(root / "models" / "our-draft")
        cfg["args"] = ["--chat-template", str(root / "template.jinja")]
    path.write_text(json.dumps(data, indent=4))


def test_a_file_stored_with_absolute_paths_compares_and_is_migrated(pytester):
    first = new_project(pytester.path / "first", with_env=False)
    gate(pytester, first, SAME, "--benchmark-save=ours").assert_outcomes(passed=1)
    (saved,) = benchmark_files.stored_files(first / "baselines")
    old_style(saved, first)
    provenance = json.loads(saved.read_text())["benchmarks"][0]["extra_info"]["llmgate"]["config"]
    second = pytester.path / "second"
    clone(first, second)
    stored = second / "baselines" / saved.parent.name / saved.name
    before = stored.read_bytes()
    assert str(first / "models" / "our-model") in before.decode()
    # read as migrated: compared, the file itself unchanged
    r = gate(pytester, second, SLOWER, "--benchmark-compare", "--llmgate-no-confirm")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*team-cpu decode_tok_s*baseline 100.0 tok/s*→ now 20.0 tok/s*regressed*"])
    assert stored.read_bytes() == before
    # migrate rewrites the fingerprint (names, the contents it never recorded left out) and nothing else
    m = subprocess.run([sys.executable, "-m", "llmgate", "migrate", str(second / "baselines")],
                       capture_output=True, text=True, check=True)
    assert f"{stored}: 1 entry migrated" in m.stdout, m.stdout
    (bench,) = json.loads(stored.read_text())["benchmarks"]
    cfg = bench["extra_info"]["llmgate"]["fingerprint"]["config"]
    assert (cfg["model"], cfg["tokenizer"], cfg["speculative"]["model"], cfg["args"]) == \
        ("our-model", "our-model", "our-draft", ["--chat-template", "template.jinja"])
    assert bench["extra_info"]["llmgate"]["config"] == provenance          # the provenance keeps its paths
    benchmark_files.validate_file(stored)
    r = gate(pytester, second, SAME, "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*| decode tok/s (c=1) *| 100.0 tok/s *| +0.0% *| inconclusive *|"])
    again = subprocess.run([sys.executable, "-m", "llmgate", "migrate", str(second / "baselines")],
                           capture_output=True, text=True, check=True)
    assert f"{stored}: already current" in again.stdout


def test_paths_are_held_by_last_part_and_content(tmp_path):
    """Every absolute path, wherever it hides in a string; a URL is not a path."""
    tpl = tmp_path / "tpl.jinja"
    tpl.write_text("x")
    digest = fingerprints.portable_config({"args": [str(tpl)]})["args"][0].split("@sha256:")[1]
    assert len(digest) == 16
    cfg = {"id": "e", "model": str(tmp_path / "m"), "launcher": "/opt/venv/bin/python", "boots": 3,
           "args": [f"--chat-template={tpl}", "--url", "http://host:8000/v1", "--n", "4"],
           "env": {"LD_LIBRARY_PATH": "/usr/lib/a:/opt/b/lib", "ROOT": str(tmp_path), "SUB": str(tmp_path / "src")},
           "speculative": {"method": "ngram", "num_speculative_tokens": 4}}
    out = fingerprints.portable_config(cfg, root=tmp_path)
    assert out == {"id": "e", "model": "m",
                   "args": [f"--chat-template=tpl.jinja@sha256:{digest}", "--url", "http://host:8000/v1", "--n", "4"],
                   "env": {"LD_LIBRARY_PATH": "a:lib", "ROOT": ".", "SUB": "src"},
                   "speculative": {"method": "ngram", "num_speculative_tokens": 4}}
    # a stored fingerprint with absolute paths is read portably; a current one as it is
    legacy = {"config": {"model": "/old/checkout/models/m", "args": [f"--chat-template=/old/checkout/{tpl.name}"]}}
    read = fingerprints.legacy_paths(legacy)
    assert read["config"] == {"model": "m", "args": ["--chat-template=tpl.jinja"]}
    assert fingerprints.legacy_paths(read) is read
    # … and compares with today's, whose file content it did not record
    now = {"config": {"model": "m", "args": [f"--chat-template=tpl.jinja@sha256:{digest}"]}}
    assert fingerprints.fingerprint_mismatch(legacy, now) == []
    other = {"config": {"model": "m", "args": ["--chat-template=other.jinja@sha256:" + "0" * 16]}}
    assert fingerprints.fingerprint_mismatch(legacy, other) != []
