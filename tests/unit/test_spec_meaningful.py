"""Which speculative entries' acceptance is recorded as a figure: context drafts (n-gram) always;
trained drafts (draft model, EAGLE, MTP) only without random weights; llmgate's own truncated draft
of a seeded [models] target counts (it shares the target's weights)."""

from pathlib import Path

import pytest

from llmgate.config import matrix
from llmgate.config.matrix import ServerConfig

ROOT = Path(__file__).resolve().parents[2]


def cfg(method, load_format=None, model="/real/model", draft=None):
    spec = {"method": method, "num_speculative_tokens": 2, **({"model": draft} if draft else {})}
    return ServerConfig(id="s", engine="vllm", model=model, load_format=load_format, speculative=spec)


def test_context_drafts_always_count():
    for method in ("ngram", "ngram_gpu", "suffix"):
        assert matrix.spec_acceptance_meaningful(cfg(method, "dummy")) is None
        assert matrix.spec_acceptance_meaningful(cfg(method, model="tiny"), {"tiny": object()}) is None


@pytest.mark.parametrize("method", ["eagle", "eagle3", "mtp", "qwen3_5_mtp", "draft_model", "medusa", "dflash"])
def test_trained_drafts_on_random_weights_do_not_count(method):
    why = matrix.spec_acceptance_meaningful(cfg(method, "dummy", model="/x"))
    assert why and "random" in why and method in why
    # trained weights (a real checkpoint given by path): they count
    assert matrix.spec_acceptance_meaningful(cfg(method, model="/x"), {"tiny": object()}) is None


def test_heads_for_a_random_models_shape_do_not_count_but_its_own_truncated_draft_does():
    models = {"tiny": object(), "tiny-draft": object()}
    assert matrix.spec_acceptance_meaningful(cfg("draft_model", model="tiny", draft="tiny-draft"), models) is None
    why = matrix.spec_acceptance_meaningful(cfg("draft_model", model="tiny", draft="/some/draft"), models)
    assert why and "[models] shape has random weights" in why
    why = matrix.spec_acceptance_meaningful(cfg("eagle", model="tiny", draft="/eagle-head"), models)
    assert why and "[models] shape has random weights" in why
    assert "not known" in matrix.spec_acceptance_meaningful(cfg("something-new"))


def test_the_shipped_matrices():
    cpu = matrix.load(ROOT / "matrices" / "levers-cpu.toml")
    gpu = matrix.load(ROOT / "matrices" / "gpu.toml")
    got = {e.id: matrix.spec_acceptance_meaningful(e, m.models) for m in (cpu, gpu) for e in m.entries if e.speculative}
    assert set(got) >= {"cpu-spec-ngram", "cpu-spec-draft", "h200-8b-ngram"}
    assert all(v is None for v in got.values()), got
