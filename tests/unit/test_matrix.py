"""Matrix loading and validation: every bad entry is one line naming file, entry and key."""

import json
from pathlib import Path

import pytest

from llmgate.config import matrix
from llmgate.models import tinymodel
from llmgate.config.matrix import MatrixError


def load_text(tmp_path, text, name="llmgate.toml"):
    p = tmp_path / name
    p.write_text(text)
    return matrix.load(p)


GOOD = """
[defaults]
engine = "vllm"
model = "tiny"
kv_cache_bytes = 1_000_000_000

[models.tiny-draft]
layers = 1

[[matrix]]
id = "a"
dtype = "bfloat16"

[[matrix]]
id = "b"
kv_cache_dtype = "fp8"
prefix_caching = false
speculative = { method = "draft_model", model = "tiny-draft", num_speculative_tokens = 3 }
args = ["--max-num-seqs", "4"]
env = { FOO = "1" }
"""


def test_good_matrix(tmp_path):
    m = load_text(tmp_path, GOOD)
    a, b = m.entries
    assert (a.id, a.engine, a.model, a.dtype, a.kv_cache_bytes) == ("a", "vllm", "tiny", "bfloat16", 1_000_000_000)
    assert b.kv_cache_dtype == "fp8" and b.prefix_caching is False
    assert b.args == ("--max-num-seqs", "4") and b.env == {"FOO": "1"}
    assert b.speculative["num_speculative_tokens"] == 3
    assert m.models["tiny-draft"].layers == 1
    assert m.by_id("b") is b


def test_embedded_default_is_valid():
    m = matrix.load(matrix.DEFAULT_MATRIX)
    assert [e.engine for e in m.entries] == ["vllm"] * 2
    cpu = m.entries[0]                      # first, as before: the Quick start gate runs it
    assert (cpu.id, cpu.model, cpu.device, cpu.kv_cache_bytes) == ("cpu-vllm-tiny", "tiny", "cpu", 1_000_000_000)
    # the headline command's entry (`-m gpu`): the GPU-bound 8B shape, a budget in bytes (the same on any card)
    gpu = m.entries[1]
    assert (gpu.id, gpu.model, gpu.gpu_memory_bytes, gpu.gpu_memory_utilization) == (
        "gpu-vllm-8b", "llama3-8b-shape", 40_000_000_000, None)
    assert gpu.device == "gpu" and gpu.load_format == "dummy" and gpu.model in m.models and not gpu.min_effect
    # the same shape as matrices/gpu.toml's, so the same config-only folder and content hash
    assert m.models["llama3-8b-shape"] == matrix.load(Path(__file__).parents[2] / "matrices" / "gpu.toml").models[
        "llama3-8b-shape"]


@pytest.mark.parametrize("entry, fragment", [
    ('gpu_memory_bytes = 12e9', 'key \'gpu_memory_bytes\' is a GPU budget, for device = "gpu" entries'),
    ('device = "gpu"\ngpu_memory_bytes = 12e9\ngpu_memory_utilization = 0.5', "both set the GPU budget: give one"),
    ('device = "gpu"\ngpu_memory_bytes = "12 GB"', "key 'gpu_memory_bytes' must be an integer or a number"),
    ('device = "gpu"\ngpu_memory_bytes = 12.5e3', "must be a number of bytes, at least 1e6"),
    ('device = "gpu"\ngpu_memory_bytes = -12e9', "must be a number of bytes, at least 1e6"),
    ('device = "gpu"\ngpu_memory_bytes = nan', "must be a number of bytes, at least 1e6"),
    ('device = "gpu"\ngpu_memory_bytes = 1000000000.5', "must be a whole number of bytes"),
])
def test_gpu_memory_bytes_is_checked(tmp_path, entry, fragment):
    with pytest.raises(MatrixError) as e:
        load_text(tmp_path, '[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\n' + entry + "\n")
    assert fragment in str(e.value) and "matrix entry 'x'" in str(e.value)


def test_gpu_memory_bytes_is_a_whole_number_of_bytes(tmp_path):
    m = load_text(tmp_path, '[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\ndevice = "gpu"\n'
                            'gpu_memory_bytes = 12e9\n')
    assert m.entries[0].gpu_memory_bytes == 12_000_000_000 and isinstance(m.entries[0].gpu_memory_bytes, int)
    assert m.entries[0].describe()["gpu_memory_bytes"] == 12_000_000_000


def test_pyproject_table(tmp_path):
    text = '[project]\nname = "x"\n\n[tool.llmgate]\n[[tool.llmgate.matrix]]\nid = "p"\nengine = "vllm"\nmodel = "tiny"\n'
    m = load_text(tmp_path, text, "pyproject.toml")
    assert m.entries[0].id == "p"


@pytest.mark.parametrize("entry, fragment", [
    ('id = "x"\nengine = "nope"\nmodel = "tiny"', "matrix entry 'x': key 'engine': unknown engine 'nope'"),
    ('id = "x"\nengine = "vllm"\nmodel = "tiny"\ncolour = "red"', "matrix entry 'x': unknown key 'colour'"),
    ('id = "x"\nengine = "vllm"\nmodel = "/no/such/model"', "matrix entry 'x': key 'model': path '/no/such/model' does not exist"),
    ('engine = "vllm"\nmodel = "tiny"', "matrix entry #1: missing required key 'id'"),
    ('id = "x"\nengine = "vllm"\nmodel = "tiny"\nmax_model_len = "long"', "key 'max_model_len' must be an integer"),
    ('id = "x"\nengine = "vllm"\nmodel = "tiny"\nprefix_caching = 1', "key 'prefix_caching' must be true or false"),
    ('id = "x"\nengine = "vllm"\nmodel = "tiny"\nmax_model_len = true', "key 'max_model_len' must be an integer"),
    ('id = "x y"\nengine = "vllm"\nmodel = "tiny"', "key 'id' must be letters"),
    ('id = "x"\nengine = "vllm"\nmodel = "tiny"\ndevice = "tpu"', "key 'device' must be one of cpu, gpu"),
    ('id = "x"\nengine = "vllm"\nmodel = "tiny"\nspeculative = { num_speculative_tokens = 2 }', "key 'speculative' needs a 'method'"),
    ('id = "x"\nengine = "vllm"\nmodel = "tiny"\nargs = ["--a", 1]', "key 'args' must be a list of strings"),
])
def test_bad_entries_are_one_line(tmp_path, entry, fragment):
    with pytest.raises(MatrixError) as e:
        load_text(tmp_path, "[[matrix]]\n" + entry + "\n")
    msg = str(e.value)
    assert fragment in msg
    assert "\n" not in msg
    assert msg.startswith(str(tmp_path / "llmgate.toml"))


@pytest.mark.parametrize("text, line", [
    ('[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\nmax_model_lenn = 1024\n',
     "matrix entry 'x': unknown key 'max_model_lenn'; did you mean 'max_model_len'? (allowed: args, "),
    ('[[matrix]]\nid = "x"\nengine = "llama.cpp"\nmodel = "tiny"\n',
     "matrix entry 'x': key 'engine': unknown engine 'llama.cpp'; did you mean 'llamacpp'? (known: "),
    ('[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\nlevers = ["gate", "prefix-cache"]\n',
     "matrix entry 'x': key 'levers': unknown lever 'prefix-cache'; did you mean 'prefix_cache'? (known: gate, "),
    ('[defaults]\nMAX_NUM_SEQS = 4\n[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\n',
     "matrix entry 'x': unknown key 'MAX_NUM_SEQS'; did you mean 'max_num_seqs'? (allowed: "),
    ('[scenario]\n[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\n',
     "unknown top-level key 'scenario'; did you mean 'scenarios'? (allowed: "),
    ('[scenarios]\nwindow_sec = 3\n[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\n',
     "scenarios: unknown key 'window_sec'; did you mean 'window_s'? (allowed: "),
    ('[models.t]\nlayer = 1\n[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "t"\n',
     "models.t: unknown key 'layer'; did you mean 'layers'? (allowed: "),
    # nothing close: no guess, the list only
    ('[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\ncolour = "red"\n',
     "matrix entry 'x': unknown key 'colour' (allowed: args, "),
])
def test_a_misspelt_name_is_one_line_with_a_guess(tmp_path, text, line):
    with pytest.raises(MatrixError) as e:
        load_text(tmp_path, text)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'llmgate.toml'}: ") and line in msg and "\n" not in msg, msg


def test_duplicate_ids(tmp_path):
    text = '[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\n[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "tiny"\n'
    with pytest.raises(MatrixError, match="used by two entries"):
        load_text(tmp_path, text)


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(MatrixError, match="not valid TOML"):
        load_text(tmp_path, "[[matrix]\n")
    with pytest.raises(MatrixError, match="matrix file not found"):
        matrix.load(tmp_path / "absent.toml")


def test_relative_model_path_is_relative_to_the_file(tmp_path):
    tinymodel.build(tmp_path / "models" / "m")          # a model folder (test_model_path.py: what one needs)
    m = load_text(tmp_path, '[[matrix]]\nid = "x"\nengine = "vllm"\nmodel = "models/m"\n')
    assert m.entries[0].model == str(tmp_path / "models" / "m")


def test_discover_order(tmp_path):
    assert matrix.discover(tmp_path, None) == matrix.DEFAULT_MATRIX
    (tmp_path / "pyproject.toml").write_text("[tool.llmgate]\n")
    assert matrix.discover(tmp_path, None) == tmp_path / "pyproject.toml"
    (tmp_path / "llmgate.toml").write_text("")
    assert matrix.discover(tmp_path, None) == tmp_path / "llmgate.toml"
    assert matrix.discover(tmp_path, "other.toml") == tmp_path / "other.toml"


def test_max_model_len_beyond_the_models_positions_is_refused_where_the_engine_refuses_it(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    entry = '[[matrix]]\nid = "e"\nengine = "vllm"\nmodel = "m"\nmax_model_len = 65536\n'

    def config(**c):
        (folder / "config.json").write_text(json.dumps(c))

    config(max_position_embeddings=32768)
    with pytest.raises(MatrixError, match="key 'max_model_len': 65536 is more than the 32768 positions"):
        load_text(tmp_path, entry)
    # vLLM's own switch lets it through, and so does the matrix
    load_text(tmp_path, entry + 'env = { VLLM_ALLOW_LONG_MAX_MODEL_LEN = "1" }\n')
    # a rope scaling that vLLM multiplies the positions by: not judged here
    config(max_position_embeddings=32768, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    load_text(tmp_path, entry)
    # one that keeps them (Llama 3's) is
    config(max_position_embeddings=32768, rope_scaling={"rope_type": "llama3", "factor": 8.0})
    with pytest.raises(MatrixError, match="65536 is more than the 32768"):
        load_text(tmp_path, entry)
    # a multimodal config keeps it in text_config
    config(text_config={"max_position_embeddings": 8192})
    with pytest.raises(MatrixError, match="65536 is more than the 8192"):
        load_text(tmp_path, entry)
    # a [models] shape says it in its spec: nothing is built to know
    with pytest.raises(MatrixError, match="65536 is more than the 4096 positions model 'small' has"):
        load_text(tmp_path, '[models.small]\nmax_position = 4096\n' + entry.replace('"m"', '"small"'))
    assert not list(tinymodel.default_cache_dir().glob("small-*"))
