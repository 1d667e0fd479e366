"""The pytest plugin itself, driven with pytester: options, markers, matrix parametrization,
baseline storage and the compare verdict (without an engine; see test_use_in_a_repository.py for the real one)."""

import json

import pytest

pytest_plugins = ["pytester"]

TWO_ENTRIES = """
[defaults]
engine = "vllm"
model = "tiny"

[[matrix]]
id = "first"

[[matrix]]
id = "second-gpu"
device = "gpu"
"""


def test_options_are_listed(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*llmgate*", "*--llmgate-matrix=PATH*", "*--llmgate-min-effect=METRIC=FRACTION*"])


def test_markers_are_registered(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.engine:*", "@pytest.mark.gpu:*"])


def test_matrix_parametrizes_the_config_fixture(pytester):
    pytester.makefile(".toml", llmgate=TWO_ENTRIES)
    pytester.makepyfile("""
        def test_config(llmgate_config):
            assert llmgate_config.engine == "vllm"
    """)
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_config[[]first[]]", "*test_config[[]second-gpu[]]"])


def test_engine_marker_and_gpu_skip_with_reason(pytester):
    pytester.makefile(".toml", llmgate=TWO_ENTRIES)
    pytester.makepyfile("""
        def test_config(llmgate_config):
            pass
    """)
    result = pytester.runpytest("-m", "engine", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*no NVIDIA GPU*"])
    # llmgate's section names the entry that did not run at all, with the reason; not the one that ran
    result.stdout.fnmatch_lines(["*= llmgate =*", "second-gpu: 1 test(s) skipped: no NVIDIA GPU*"])
    assert not [ln for ln in result.stdout.lines if ln.startswith("first: ")]
    result = pytester.runpytest("-m", "gpu")
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.OK


GOOD_ENTRY = '''[[matrix]]
id = "team-cpu"
engine = "vllm"
model = "tiny"
max_model_len = 1024
'''


def no_tokenizer_folder(root):
    """A model folder vLLM could load (config.json, weights) that lacks the tokenizer files."""
    folder = root / "models" / "our-model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def model_of_32k_positions(root):
    """A model folder vLLM could load whose config.json allows 32,768 positions."""
    folder = root / "models" / "qwen-32k"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen2", "max_position_embeddings": 32768}')
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    return folder


# the four a new user typed: a key misspelt, a model folder without its tokenizer, a model path
# that does not exist, an engine misspelt.  (edit of GOOD_ENTRY, the message after "<file>: ")
BAD_MATRICES = {
    "key misspelt": (lambda root: GOOD_ENTRY.replace("max_model_len", "max_model_lenn"),
                     lambda root: "matrix entry 'team-cpu': unknown key 'max_model_lenn'; did you mean 'max_model_len'? "
                                  "(allowed: args, boot_timeout_s, "),
    "no tokenizer": (lambda root: GOOD_ENTRY.replace('"tiny"', '"models/our-model"'),
                     lambda root: f"matrix entry 'team-cpu': key 'model': {root / 'models' / 'our-model'} has no "
                                  f"tokenizer.json (nor tokenizer_config.json with its vocabulary files): needed for "
                                  f"exact-length prompts (set tokenizer = \"FOLDER\" to a folder that has one)"),
    "no such model": (lambda root: GOOD_ENTRY.replace('"tiny"', '"models/nowhere"'),
                      lambda root: f"matrix entry 'team-cpu': key 'model': path '{root / 'models' / 'nowhere'}' does "
                                   f"not exist (use an existing model folder or a name from [models], e.g. 'tiny')"),
    "engine misspelt": (lambda root: GOOD_ENTRY.replace('"vllm"', '"vllmm"'),
                        lambda root: "matrix entry 'team-cpu': key 'engine': unknown engine 'vllmm'; did you mean 'vllm'? "
                                     "(known: llamacpp, mlx, sglang, vllm)"),
    # vLLM would boot, refuse it ~10 s later, and every test would error with its traceback
    "max_model_len beyond the model": (
        lambda root: GOOD_ENTRY.replace('"tiny"', '"models/qwen-32k"').replace("1024", "65536"),
        lambda root: f"matrix entry 'team-cpu': key 'max_model_len': 65536 is more than the 32768 positions "
                     f"{root / 'models' / 'qwen-32k' / 'config.json'} allows (max_position_embeddings); vllm refuses "
                     f"it at boot: set max_model_len to at most 32768"),
    "max_model_len beyond the tiny model": (
        lambda root: GOOD_ENTRY.replace("1024", "65536"),
        lambda root: "matrix entry 'team-cpu': key 'max_model_len': 65536 is more than the 32768 positions model "
                     "'tiny' has (its max_position); vllm refuses it at boot: set max_model_len to at most 32768"),
}


@pytest.mark.parametrize("bad", list(BAD_MATRICES))
def test_a_bad_matrix_is_one_usage_error_before_collection(pytester, bad):
    """The packaged scenarios (14 modules that each take the matrix) on a bad llmgate.toml: one
    line, once, exit code 4, before anything is collected or booted; not a collection error per
    module chained to the first ("During handling of the above exception …")."""
    edit, message = BAD_MATRICES[bad]
    no_tokenizer_folder(pytester.path)
    model_of_32k_positions(pytester.path)
    toml = pytester.makefile(".toml", llmgate=edit(pytester.path))
    expected = f"{toml}: {message(pytester.path)}"
    r = pytester.runpytest_subprocess("--pyargs", "llmgate.scenarios", "-p", "no:cacheprovider")
    out = r.stdout.str() + r.stderr.str()
    assert r.ret == pytest.ExitCode.USAGE_ERROR, out
    assert out.count(expected) == 1, out
    (line,) = [ln for ln in r.stderr.lines if ln.strip()]           # the whole of what is said
    assert line.startswith("ERROR: " + expected), line
    for word in ("During handling", "Traceback", "ERROR collecting", "collected", "booting"):
        assert word not in out, (word, out)
    assert not (pytester.path / ".llmgate" / "logs").exists()       # nothing booted


def test_a_bad_matrix_stops_even_a_run_without_scenarios(pytester):
    """llmgate.toml is llmgate's file: a broken one is said at once, whatever the run collects; without
    one the embedded default loads (harmless to a session of other tests), and a good one too."""
    pytester.makepyfile("def test_plain(): pass\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)          # the embedded default
    pytester.makefile(".toml", llmgate=GOOD_ENTRY)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    toml = pytester.makefile(".toml", llmgate="not toml at all [[[")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [ln for ln in r.stderr.lines if ln.strip()]
    assert line.startswith(f"ERROR: {toml}: not valid TOML: "), line
    assert "test_plain" not in r.stdout.str() and "Traceback" not in r.stdout.str() + r.stderr.str()


def test_explicit_matrix_option(pytester):
    pytester.makefile(".toml", other='[[matrix]]\nid = "from-option"\nengine = "vllm"\nmodel = "tiny"\n')
    pytester.makepyfile("def test_x(llmgate_config): pass\n")
    result = pytester.runpytest("--llmgate-matrix", "other.toml", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_x[[]from-option[]]"])


def test_bad_min_effect_option(pytester):
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest("--llmgate-min-effect", "nonsense=0.1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--llmgate-min-effect 'nonsense=0.1'*known metric*"])


RECORDING_TEST = """
import json, os
from llmgate.core import metrics

def test_measure(gate):
    values = json.loads(os.environ["VALUES"])
    gate.record(metrics.DECODE_TOK_S, values["tok_s"])
    gate.record(metrics.TTFT_P95, values["ttft"], "c8")
"""


def run_with(pytester, tok_s, ttft, *args):
    pytester.makepyfile(test_rec=RECORDING_TEST)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps({"tok_s": tok_s, "ttft": ttft}))
        return pytester.runpytest_subprocess(*args)


def stored_files(pytester):
    return sorted((pytester.path / "baselines").rglob("*.json"))


def test_save_then_compare_passes_then_regression_fails(pytester):
    base_tok, base_ttft = [100, 102, 98, 101, 99], [0.100, 0.105, 0.098, 0.101, 0.103]
    r = run_with(pytester, base_tok, base_ttft, "--benchmark-save=base")
    r.assert_outcomes(passed=1)
    files = stored_files(pytester)
    assert len(files) == 1, "pytest-benchmark storage should default to baselines/"
    saved = json.loads(files[0].read_text())
    entry = {b["fullname"]: b for b in saved["benchmarks"]}["measure::decode_tok_s"]
    assert entry["extra_info"]["llmgate"]["values"] == base_tok
    assert entry["extra_info"]["llmgate"]["better"] == "higher"
    assert entry["stats"]["median"] == pytest.approx(1 / 100)  # stored as s/token: bigger is worse

    # same numbers within noise: passes
    r = run_with(pytester, [99, 101, 100, 103, 98], [0.102, 0.099, 0.104, 0.100, 0.101], "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*decode tok/s*unchanged*"])

    # faster is not a failure
    r = run_with(pytester, [150, 151, 149, 152, 150], base_ttft, "--benchmark-compare")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*improved*"])

    # slower decode and higher TTFT: the test itself fails, naming metric, baseline, now and change
    r = run_with(pytester, [70, 71, 69, 72, 70], [0.150, 0.160, 0.155, 0.152, 0.158], "--benchmark-compare")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert "performance regression" in out
    assert "decode_tok_s" in out and "baseline 100.0 tok/s" in out and "now 70.0 tok/s" in out and "-30.0%" in out
    assert "ttft_p95@c8" in out and "baseline 101.0 ms" in out and "now 155.0 ms" in out


def test_pytest_benchmark_compare_fail_keeps_working_in_the_right_direction(pytester):
    run_with(pytester, [100] * 5, [0.1] * 5, "--benchmark-save=base").assert_outcomes(passed=1)
    # higher tok/s is better: pytest-benchmark's own check must not call it a regression
    r = run_with(pytester, [200] * 5, [0.1] * 5, "--benchmark-compare", "--benchmark-compare-fail=median:10%")
    assert r.ret == 0, r.stdout.str()
    r = run_with(pytester, [50] * 5, [0.1] * 5, "--benchmark-compare", "--benchmark-compare-fail=median:10%",
                 "--llmgate-min-effect", "decode_tok_s=0.9")
    assert r.ret != 0
    both = r.stdout.str() + r.stderr.str()
    assert "Performance has regressed" in both and "measure::decode_tok_s" in both


def test_min_effect_option_and_marker(pytester):
    run_with(pytester, [100] * 5, [0.1] * 5, "--benchmark-save=base").assert_outcomes(passed=1)
    r = run_with(pytester, [80] * 5, [0.1] * 5, "--benchmark-compare", "--llmgate-min-effect", "decode_tok_s=0.25")
    r.assert_outcomes(passed=1)
    r = run_with(pytester, [80] * 5, [0.1] * 5, "--benchmark-compare")
    r.assert_outcomes(failed=1)


def test_lever_marker_skips_entries_without_the_lever_before_any_boot(pytester):
    pytester.makefile(".toml", llmgate="""
[defaults]
engine = "vllm"
model = "tiny"
[[matrix]]
id = "with"
levers = ["prefix_cache"]
[[matrix]]
id = "without"
""")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.lever("prefix_cache")
        def test_lever(llmgate_config):
            assert llmgate_config.id == "with"
    """)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*without: lever 'prefix_cache' is not enabled for this entry (levers = [[]'gate'[]])*"])


def test_reference_must_be_listed_earlier(pytester):
    pytester.makefile(".toml", llmgate="""
[defaults]
engine = "vllm"
model = "tiny"
[[matrix]]
id = "variant"
reference = "full"
[[matrix]]
id = "full"
""")
    pytester.makepyfile("def test_x(llmgate_config): pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *matrix entry 'variant': key 'reference': 'full' is not an entry listed before this one*"])


def test_pytest_benchmark_table_hides_llmgate_metrics_unless_asked(pytester):
    """pytest-benchmark prints every entry as a time: llmgate's tok/s (stored as seconds per token)
    would read as "time in ms".  Hidden by default, back with --llmgate-benchmark-table; a plain
    pytest-benchmark test of the same session keeps its row, and --benchmark-compare-fail still checks."""
    pytester.makepyfile(test_plain="def test_plain(benchmark):\n    benchmark(lambda: None)\n")
    r = run_with(pytester, [100] * 5, [0.1] * 5, "--benchmark-save=base")
    r.assert_outcomes(passed=2)
    out = r.stdout.str()
    assert "stored as 1/x" not in out and "measure::decode_tok_s" not in out
    assert "test_plain" in out and "Legend:" in out                     # the plain benchmark's table stays
    r.stdout.fnmatch_lines(["*pytest-benchmark's table of llmgate's 2 stored metric(s) is not shown*"
                            "--llmgate-benchmark-table*table of 2 verdict(s) below"])

    r = run_with(pytester, [100] * 5, [0.1] * 5, "--benchmark-compare", "--llmgate-benchmark-table")
    r.assert_outcomes(passed=2)
    out = r.stdout.str()
    assert "stored as 1/x" in out and "measure::decode_tok_s (0001_base)" in out   # compared with 0001
    assert "is not shown" not in out

    # llmgate's entries only: no pytest-benchmark table at all, its regression check still fails the run
    (pytester.path / "test_plain.py").unlink()
    r = run_with(pytester, [50] * 5, [0.1] * 5, "--benchmark-compare", "--benchmark-compare-fail=median:10%",
                 "--llmgate-min-effect", "decode_tok_s=0.9")
    assert r.ret != 0
    out = r.stdout.str()
    assert "Legend:" not in out and "stored as 1/x" not in out
    assert "Performance has regressed" in out + r.stderr.str()
