"""Real vLLM on the CPU boots from a model folder given by path (the tiny model copied to a tmp
folder without llmgate's manifest, as a team's own Hugging Face folder is), serves a prompt of
the exact length counted with the tokenizer found in that folder, and names the folder's
content hash.  One boot (~60–90 s on 2 cores)."""

import shutil

import httpx
import pytest

from llmgate import matrix, tinymodel
from llmgate.load import PromptMaker
from llmgate.server import Server

pytestmark = pytest.mark.engine


def test_vllm_boots_from_a_model_folder_given_by_path(tmp_path):
    folder = tmp_path / "weights" / "my-model"
    folder.mkdir(parents=True)
    for p in tinymodel.build().iterdir():
        if p.name != tinymodel.MANIFEST:
            shutil.copy2(p, folder / p.name)
    (tmp_path / "llmgate.toml").write_text(
        '[[matrix]]\nid = "cpu-vllm-path"\nengine = "vllm"\nmodel = "weights/my-model"\ndtype = "bfloat16"\n'
        "max_model_len = 512\nkv_cache_bytes = 48_000_000\n")
    m = matrix.load(tmp_path / "llmgate.toml")
    cfg = m.entries[0]
    assert cfg.model == str(folder)
    server = Server(cfg, m, tmp_path / "logs")
    handle = server.start()
    try:
        assert handle.model_path == folder and handle.tokenizer_path == folder
        assert handle.model_hash == tinymodel.content_hash(folder)
        prompts = PromptMaker(handle.tokenizer_path)
        r = httpx.post(handle.base_url + "/v1/completions", timeout=120, json={
            "model": handle.model_name, "prompt": prompts.text(100, "path"), "max_tokens": 4,
            **handle.engine.fixed_length_fields(cfg, handle.eos_token_id)})
        r.raise_for_status()
        usage = r.json()["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (100, 4)
    finally:
        server.stop()
