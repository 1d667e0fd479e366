"""What the gate makes of engine logs, without a process: the live "booting …" line, log names
per session and their pruning, each engine's first error line, the boots table's start-up cell.
(tests/plugin/test_boot_and_death.py has the same against a stand-in engine's process.)"""

import re

import pytest

from llmgate import engines
from llmgate.process import logs
from llmgate.report.reports import boot_table
from llmgate.runner.terminal import boot_progress, ending

# a vLLM CPU boot's progress line of 404 characters (the live line started mid-word, 380 wide)
VLLM_LINE = ("(EngineCore_DP0 pid=2753) INFO 03-15 16:21:44 [cpu_worker.py:121] Model loading took 0.0061 GiB "
             "memory and 0.812345 seconds; torch.compile backend inductor, compilation level 3, cudagraph mode "
             "NONE, splitting ops ['vllm::unified_attention', 'vllm::unified_attention_with_output', "
             "'vllm::mamba_mixer2', 'vllm::mamba_mixer', 'vllm::short_conv', 'vllm::linear_attention', "
             "'vllm::plamo2_mamba_mixer', 'vllm::gdn_attention', 'vllm::sparse_attn_indexer'], "
             "max_capture_size 512 done")


@pytest.mark.parametrize("entry", ["cpu-vllm-tiny", "an-entry-with-a-rather-long-name-for-its-matrix-row-x"])
def test_a_boot_progress_line_fits_and_starts_with_a_whole_word(entry):
    line = boot_progress(entry, 25.4, VLLM_LINE)
    assert len(line) <= 120 and line.startswith(f"llmgate: booting {entry}: 25 s, log: …"), line
    shown = line.partition(", log: …")[2]
    assert VLLM_LINE.endswith(" " + shown), line             # the end of the line, from a word's start
    before = VLLM_LINE[:-len(shown) - 1].split()[-1]
    assert len(line) + 1 + len(before) > 120                  # the word before it would not have fitted


def test_ending_keeps_what_fits_and_never_cuts_a_word_at_its_start():
    assert ending("  Loading   weights\tdone \x1b[0m ", 40) == "Loading weights done"      # whitespace, escapes
    assert ending("alpha beta gamma", 11) == "…beta gamma"
    assert ending("alpha beta gamma", 10) == "…gamma"          # "…beta gamma" is 11
    assert ending("alpha beta gamma", 12) == "…beta gamma"
    assert ending("see /a/very/long/path/to/the/model/weights.safetensors", 20) == "see…"
    assert ending("/a/very/long/path/to/the/model/weights.safetensors", 20) == "/a/very/long/path/t…"
    assert ending("anything", 0) == ""
    # an entry id longer than the line: the entry in full, no log
    assert boot_progress("x" * 130, 3, "Loading weights") == f"llmgate: booting {'x' * 130}: 3 s"


def test_log_names_carry_the_session_and_prune_keeps_the_last_ten(tmp_path, monkeypatch):
    monkeypatch.setitem(logs._session, "stamp", None)
    assert logs.log_name("e", 2) == "e.2.log" and logs.log_name("e", 2, 1) == "e.2-retry1.log"
    stamp = logs.session_stamp(0.0, 4242)
    assert re.fullmatch(r"19700101-\d{6}-4242|19691231-\d{6}-4242", stamp), stamp
    logs.name_by_session("20260315-120000-7")
    assert logs.log_name("cpu-vllm-tiny", 1) == "cpu-vllm-tiny.boot1.20260315-120000-7.log"
    assert logs.log_name("cpu-vllm-tiny", 3, 2) == "cpu-vllm-tiny.boot3-retry2.20260315-120000-7.log"
    # 12 earlier sessions (two in one second, told apart by their pid), some in a probe's folder
    stamps = [f"20260314-1000{n:02d}-50" for n in range(11)] + ["20260314-100010-9"]
    for n, s in enumerate(stamps):
        (tmp_path / ("probe" if n % 3 == 0 else "")).mkdir(exist_ok=True)
        (tmp_path / ("probe" if n % 3 == 0 else "") / f"e.boot1.{s}.log").write_text("x")
    (tmp_path / "e.boot1.20260315-120000-7.log").write_text("this session's")
    (tmp_path / "e.1.log").write_text("an older llmgate's")
    (tmp_path / "notes.txt").write_text("not a log")
    removed = logs.prune(tmp_path)
    # kept: this session and the nine before it; the oldest three removed, wherever they were
    gone = {"20260314-100000-50", "20260314-100001-50", "20260314-100002-50"}
    assert {re.search(r"\.([\d-]+)\.log$", p.name).group(1) for p in removed} == gone
    left = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert left == {f"e.boot1.{s}.log" for s in stamps if s not in gone} | {
        "e.boot1.20260315-120000-7.log", "e.1.log", "notes.txt"}
    assert "e.boot1.20260314-100010-9.log" in left            # the newer of the two of one second… both kept
    assert logs.prune(tmp_path) == [] and logs.prune(tmp_path / "nowhere") == []


# vLLM 0.32.0 on the CPU after a kill -9 of its EngineCore (tests/engine/test_failures_vllm.py), shortened
VLLM_DEATH = """\
INFO:     127.0.0.1:50932 - "POST /v1/completions HTTP/1.1" 200 OK
(APIServer pid=18752) INFO 12-04 16:39:10 [utils.py:628] [shutdown] Process manager: send sigterm to process EngineCore
(APIServer pid=18752) WARNING 12-04 16:39:10 [core_client.py:817] [shutdown] MPClient: engine core exited unexpectedly; starting cleanup
(APIServer pid=18752) INFO 12-04 16:39:10 [core_client.py:777] [shutdown] MPClient: complete
(APIServer pid=18752) ERROR 12-04 16:39:10 [async_llm.py:906] AsyncLLM output_handler failed.
(APIServer pid=18752) ERROR 12-04 16:39:10 [async_llm.py:906] Traceback (most recent call last):
(APIServer pid=18752) ERROR 12-04 16:39:10 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""
# an earlier vLLM's line for the same (vllm/v1/engine/core_client.py)
VLLM_OLDER_DEATH = """\
(APIServer pid=10) INFO 03-15 16:22:00 [loggers.py:123] Engine 000: Avg prompt throughput: 6.4 tokens/s
(APIServer pid=10) ERROR 03-15 16:22:01 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.
(APIServer pid=10) ERROR 03-15 16:22:01 [async_llm.py:480] AsyncLLM output_handler failed.
"""
SGLANG_DEATH = """\
[2026-03-13 14:24:20] INFO:     127.0.0.1:5050 - "POST /v1/completions HTTP/1.1" 200 OK
[2026-03-13 14:24:23] Scheduler hit an exception: Traceback (most recent call last):
  File "scheduler.py", line 1, in event_loop
AssertionError: fp8 tensor core is not supported in fa2 backend
[2026-03-13 14:24:23] Received sigquit from a child process. It usually means the child failed.
"""
LLAMACPP_DEATH = """\
srv  update_slots: all slots are idle
ggml/src/ggml-cpu/ops.cpp:4211: GGML_ASSERT(i01 >= 0 && i01 < ne01) failed
"""
BARE_TRACEBACK = """\
INFO: serving
Traceback (most recent call last):
  File "server.py", line 9, in handle
    raise RuntimeError("the worker is gone")
RuntimeError: the worker is gone
ERROR: a later line
"""


@pytest.mark.parametrize("engine, text, first", [
    ("vllm", VLLM_DEATH, "(APIServer pid=18752) WARNING 12-04 16:39:10 [core_client.py:817] [shutdown] MPClient: "
                         "engine core exited unexpectedly; starting cleanup"),
    ("vllm", VLLM_OLDER_DEATH, "(APIServer pid=10) ERROR 03-15 16:22:01 [core_client.py:564] Engine core proc "
                               "EngineCore_DP0 died unexpectedly, shutting down client."),
    ("sglang", SGLANG_DEATH, "[2026-03-13 14:24:23] Scheduler hit an exception: Traceback (most recent call last):"),
    ("llamacpp", LLAMACPP_DEATH, "ggml/src/ggml-cpu/ops.cpp:4211: GGML_ASSERT(i01 >= 0 && i01 < ne01) failed"),
    ("mlx", BARE_TRACEBACK, "RuntimeError: the worker is gone"),
    ("vllm", "INFO: all well\nWARNING: slow\n", None),
])
def test_each_engine_names_its_first_error_line(engine, text, first):
    assert engines.get(engine).first_error(text) == first


def test_the_boots_table_says_which_boot_was_interrupted():
    table = boot_table({"e": [{"boot": 1, "engine": "vllm", "version": "0.1", "startup_s": 12.34, "log": "a.log"},
                              {"boot": 2, "engine": "vllm", "startup_s": None, "log": "b.log"},
                              {"boot": 3, "engine": "vllm", "startup_s": None, "interrupted": True, "log": "c.log"}]})
    cells = [[c.strip() for c in row.split("|")[1:-1]] for row in table.splitlines()[2:]]
    assert [(c[1], c[4]) for c in cells] == [("1", "12.3 s"), ("2", "failed"), ("3", "interrupted")], table


def test_vllm_reads_the_kv_cache_its_memory_profile_sized():
    """vLLM's worker log after the memory profile (gpu_worker.py, format_gib: 2 decimals); one line a
    worker under tensor parallelism, of which vLLM keeps the smallest; an engine that does not say: None."""
    vllm = engines.get("vllm")
    line = "(EngineCore_DP0 pid=412) INFO 12-07 19:50:01 [gpu_worker.py:298] Available KV cache memory: {} GiB\n"
    assert vllm.kv_cache_sized(line.format("20.53")) == int(20.53 * (1 << 30))
    assert vllm.kv_cache_sized(line.format("21.4") + line.format("20.9") + line.format("22")) == int(20.9 * (1 << 30))
    assert vllm.kv_cache_sized("INFO [kv_cache_utils.py:1087] GPU KV cache size: 167,824 tokens\n") is None
    assert engines.get("llamacpp").kv_cache_sized(line.format("20.53")) is None
