"""The timing math: TTFT, ITL, TPOT and decode tok/s from chunk arrival times and usage counts."""

import pytest

from llmgate.analysis import stats
from llmgate.load.samples import LoadResult, Sample


def sample(offsets, tokens=None, completion=None, ok=True, e2e=None):
    completion = completion if completion is not None else (sum(tokens) if tokens else len(offsets))
    return Sample(ok=ok, start=0.0, e2e=e2e or (offsets[-1] if offsets else 0.0), ttft=offsets[0] if offsets else None,
                  chunk_offsets=list(offsets), chunk_tokens=tokens, completion_tokens=completion)


def test_one_token_per_chunk():
    s = sample([0.10, 0.12, 0.15, 0.19], tokens=[1, 1, 1, 1])
    assert s.ttft == 0.10
    assert s.itl == pytest.approx([0.02, 0.03, 0.04])
    assert s.tpot == pytest.approx((0.19 - 0.10) / 3)
    assert s.decode_tok_s == pytest.approx(3 / 0.09)


def test_multi_token_chunks_count_every_token():
    # a chunk carrying 3 accepted speculative tokens after a 30 ms gap is 3 ITLs of 10 ms, not one of 30
    s = sample([0.1, 0.13, 0.14], tokens=[1, 3, 1])
    assert s.itl == pytest.approx([0.01, 0.01, 0.01, 0.01])
    assert s.completion_tokens == 5
    assert s.tpot == pytest.approx(0.04 / 4)


def test_tokens_spread_evenly_when_engine_does_not_say():
    s = sample([0.1, 0.2, 0.3], tokens=None, completion=5)  # 4 tokens after the first chunk, over 2 chunks
    assert s.itl == pytest.approx([0.05] * 4)  # one value per token
    assert s.tpot == pytest.approx(0.2 / 4)


def test_first_chunk_with_several_tokens():
    s = sample([0.5, 0.6], tokens=[2, 1])
    assert s.decode_tokens == 1
    assert s.tpot == pytest.approx(0.1)


def test_single_chunk_has_no_decode_rate():
    s = sample([0.2], tokens=[1])
    assert s.itl == []
    assert s.tpot is None and s.decode_tok_s is None


def test_failed_sample_has_no_rate():
    s = sample([0.1, 0.2], tokens=[1, 1], ok=False)
    assert s.tpot is None


def test_percentile_matches_linear_interpolation():
    xs = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert stats.percentile(xs, 50) == 5.5
    assert stats.percentile(xs, 95) == pytest.approx(9.55)
    assert stats.percentile(xs, 0) == 1 and stats.percentile(xs, 100) == 10
    assert stats.percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError):
        stats.percentile([], 50)


def test_summary_spread():
    s = stats.Summary.of([10, 11, 9, 10, 30])
    assert s.median == 10 and s.min == 9 and s.max == 30 and s.n == 5
    assert s.iqr == 1 and s.rel_spread == pytest.approx(0.1)


def test_load_metrics_aggregate_and_failures():
    ok = [sample([0.1 * i + 0.05, 0.1 * i + 0.07], tokens=[1, 1]) for i in range(4)]
    bad = Sample(ok=False, start=0, e2e=1.0, error="HTTP 500: boom")
    result = LoadResult(ok + [bad], wall_s=2.0, concurrency=2)
    m = stats.load_metrics(result)
    assert m["aggregate_tok_s"] == pytest.approx(8 / 2.0)  # failed requests add no tokens
    assert m["requests_failed"] == 1 and m["requests_ok"] == 4
    assert m["ttft_p50"] == pytest.approx(stats.percentile([0.05, 0.15, 0.25, 0.35], 50))
    assert m["itl_p95"] == pytest.approx(0.02)
