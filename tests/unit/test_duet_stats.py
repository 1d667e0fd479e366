"""A duet's statistics (``analysis.paired.judge_duet``) and its turns (``runner.duet.Turns``), engine-free."""

import math
import statistics
import threading
import time

import pytest

from llmgate.analysis import noise_prior, stats
from llmgate.analysis.paired import judge_duet
from llmgate.core import metrics
from llmgate.runner.duet import Cancelled, Turns

# issue 46's H200 A/A: side A's TTFT at 128 tokens on three boot pairs, and B ÷ A on each (the requests'
# 95% CIs about ±1.3%: a sampling SE of ~0.7% a pair)
A_LEVELS = (0.01144, 0.01391, 0.01468)
AA_RATIOS = (0.983, 0.995, 1.003)
SAMPLING = 0.007 ** 2 / 2          # each side's share of a pair's sampling variance


def duet(ratios, levels=A_LEVELS, metric=metrics.TTFT_C1, device="gpu", min_effect=0.03):
    return judge_duet(metric, "ttft_c1@p128", "x", [[a] for a in levels], [[a * r] for a, r in zip(levels, ratios)],
                      min_effect, 0.05, "A", [SAMPLING] * len(levels), [SAMPLING] * len(levels),
                      requests=[400.0] * len(levels), assumed=noise_prior.duet_assumed(device, metric))


def test_the_h200_a_a_passes_and_sees_under_three_percent_at_three_pairs():
    v = duet(AA_RATIOS)
    assert v.status not in ("regressed", "improved"), v.line()
    assert v.mde is not None and v.mde < 0.03, v.line()
    assert v.boots == (3, 3) and v.comparison == "duet, 3 boot pairs"
    # both parts are said
    assert "within-pair sampling 0.70%" in v.method and "pair part" in v.method, v.method


def test_a_four_percent_slowdown_on_every_pair_is_flagged_though_the_levels_moved_28_percent():
    v = duet([r * 1.04 for r in AA_RATIOS])
    assert v.status == "regressed", v.line()
    assert 0.02 < v.change < 0.06 and v.p_value < 0.05


def test_one_pair_rests_on_the_prior_and_more_pairs_narrow_the_mde():
    one = duet(AA_RATIOS[:1], A_LEVELS[:1])
    two = duet(AA_RATIOS[:2], A_LEVELS[:2])
    three = duet(AA_RATIOS)
    assert one.mde > two.mde > three.mde, (one.mde, two.mde, three.mde)
    assert one.noise_assumed and "prior" in one.method


def test_pairs_that_agree_by_chance_are_not_read_as_no_noise():
    # two pairs whose ratios happen to agree to 0.01%: the prior's pair part and the sampling part stay
    v = duet((1.001, 1.0011), A_LEVELS[:2])
    assert v.mde > 0.02, v.line()


def test_a_pair_needs_values_on_both_sides():
    with pytest.raises(ValueError):
        judge_duet(metrics.TTFT_C1, "k", "x", [[1.0]], [[1.0], [1.0]])


def test_turns_alternate_one_side_at_a_time_in_a_random_order_within_each_pair():
    turns = Turns(("A", "B"), "seed")
    running = []
    overlap = []

    def side(name):
        turns.begin(name)
        for _ in range(20):
            with turns.turn(name):
                time.sleep(0.001)
            # the work between turns runs alone too (the baton): never beside the other side's turn
            running.append(name)
            if len(running) > 1:
                overlap.append(name)
            time.sleep(0.001)
            running.remove(name)
        turns.finish(name)

    threads = [threading.Thread(target=side, args=(n,)) for n in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not overlap
    order = turns.order
    assert len(order) == 40 and turns.out_of_turn == 0
    pairs = [order[i:i + 2] for i in range(0, 40, 2)]
    assert all(sorted(p) == ["A", "B"] for p in pairs), order
    firsts = {p[0] for p in pairs}
    assert firsts == {"A", "B"}, order          # the order within a pair is drawn, not fixed


def test_a_side_that_is_done_or_parked_does_not_hold_the_other_up():
    turns = Turns(("A", "B"), "seed")
    turns.finish("B")
    turns.begin("A")
    t0 = time.monotonic()
    for _ in range(5):
        with turns.turn("A"):
            pass
    assert time.monotonic() - t0 < 1.0
    turns2 = Turns(("A", "B"), "s2")
    turns2.begin("A")
    with turns2.parked("B"):
        for _ in range(3):
            with turns2.turn("A"):
                pass
        turns2.finish("A")
    assert turns2.order == ["A", "A", "A"]


def test_a_side_holding_on_beyond_the_grace_time_is_passed_and_cancel_stops_a_waiting_side():
    turns = Turns(("A", "B"), "x", grace_s=0.3)
    turns.begin("B")                 # B runs and never asks for a turn
    got = []
    t = threading.Thread(target=lambda: [turns.turn("A").__enter__(), got.append(time.monotonic())])
    t0 = time.monotonic()
    t.start()
    t.join(5)
    assert got and 0.25 < got[0] - t0 < 3.0 and turns.out_of_turn == 1
    turns = Turns(("A", "B"), "y")
    turns.begin("B")                 # B runs (and holds on); A waits for its turn, until the duet is stopped
    raised = []

    def a_side():
        try:
            with turns.turn("A"):
                pass
        except Cancelled as e:
            raised.append(e)
    t = threading.Thread(target=a_side)
    t.start()
    threading.Timer(0.2, turns.cancel).start()
    t.join(5)
    assert raised and turns.order == []


# -- the H200 campaign of 2026-12-04 (gpu/runs/2026-12-04-duet), replayed ---------------------------------
import json                                    # noqa: E402
from pathlib import Path                       # noqa: E402

RECORDED = Path(__file__).resolve().parents[1] / "data" / "duet-h200-2026-12-04"


def replay(name, folder=RECORDED):
    """The campaign's figures judged again as a duet judges them now (a side's sampling variance: half the
    pair's, as the report keeps their mean)."""
    out = {}
    for v in json.loads((folder / f"{name}.json").read_text()):
        m = metrics.get(v["key"])
        k, w = len(v["boot_values"]), v["sampling_log_var"]
        grain = v.get("grain") or ("request" if v["test"] == "test_ttft_c1" else "window")
        samp = [w / 2] * k if w is not None else None
        out[v["key"] if v["test"] in ("test_ttft_c1", "test_poisson_load") else f'{v["test"]}:{v["key"]}'] = judge_duet(
            m, v["key"], "gpu-vllm-8b", [[x] for x in v["baseline_boot_values"]], [[x] for x in v["boot_values"]],
            v["min_effect"], 0.05, "A", samp, samp, assumed=noise_prior.duet_assumed("gpu", m, grain))
    return out


def test_the_h200_duet_a_a_reads_no_change_and_ttft_c1_sees_three_percent_at_three_pairs():
    verdicts = replay("aa")
    flagged = {k: (v.status, round(v.change, 3)) for k, v in verdicts.items() if v.status in ("regressed", "improved")}
    # as first judged, with the window prior at 4%, five window rows read regressed or improved (the decode
    # window's engine prefill +12%, TTFT p95/p99, engine TTFT and front end at 70% Poisson load −11…−22%)
    assert flagged == {}, flagged
    for key in ("ttft_c1@p128", "ttft_c1@p2048"):
        assert verdicts[key].mde <= 0.03, (key, verdicts[key].mde)
    assert verdicts["engine_prefill@c1-p2048"].mde <= 0.03


# the later A/As of issue 46 (gpu/runs/2026-12-05-duet, 2026-12-05-duet-rounds: H100; 2026-12-06-duet-h200):
# nine more boot pairs, the engine's TTFT parts read per request in the last two, windows in rounds in the last
LATER_AA = ("duet-h100-2026-12-05", "duet-h100-2026-12-05-rounds", "duet-h200-2026-12-06")


@pytest.mark.parametrize("session", LATER_AA)
def test_every_recorded_gpu_duet_a_a_reads_no_change_under_the_priors(session):
    verdicts = replay("aa", RECORDED.parent / session)
    flagged = {k: (v.status, round(v.change, 3)) for k, v in verdicts.items() if v.status in ("regressed", "improved")}
    assert flagged == {}, flagged
    assert verdicts["ttft_c1@p2048"].mde <= 0.035, verdicts["ttft_c1@p2048"].line()


def test_the_h200_duet_front_end_knob_is_flagged_and_attributed_to_the_front_end():
    verdicts = replay("knobs")
    # side B: 0.6 ms in vLLM's API server per request (and a prefill knob that did not act: the engine's
    # own prefill did not move), two boot pairs
    assert verdicts["frontend_ttft@c1-p128"].status == "regressed"
    assert verdicts["ttft_c1@p128"].status == "regressed" and 0.02 < verdicts["ttft_c1@p128"].change < 0.07
    assert verdicts["engine_prefill@c1-p128"].status not in ("regressed", "improved")


def rounds_duet(a_rounds, b_rounds, metric=metrics.AGGREGATE_TOK_S, device="gpu", min_effect=0.03):
    return judge_duet(metric, "aggregate_tok_s@c8", "x", a_rounds, b_rounds, min_effect, 0.05, "A",
                      paired_rounds=True, assumed=noise_prior.duet_assumed(device, metric, "rounds"))


# three pairs of three rounds a side, the machine drifting ±6% between windows (the same drift on both
# sides of a round, as turns A B / B A give it), each round's ratio off by ±0.5%
DRIFT = ((1.0, 0.94, 1.06), (1.03, 0.97, 0.95), (0.96, 1.05, 1.0))
JITTER = ((1.004, 0.996, 1.0), (0.997, 1.005, 0.998), (1.002, 0.995, 1.003))


def _rounds(level, factor=1.0):
    a = [[level * d for d in pair] for pair in DRIFT]
    b = [[level * d * j * factor for d, j in zip(pair, jit)] for pair, jit in zip(DRIFT, JITTER)]
    return a, b


def test_rounds_paired_round_by_round_cancel_the_drift_between_windows():
    a, b = _rounds(1500.0)
    v = rounds_duet(a, b)
    assert v.status not in ("regressed", "improved"), v.line()
    assert v.comparison == "duet, 3 boot pairs, 3 rounds a pair"
    assert "within-pair rounds" in v.method, v.method
    # the drift (±6%) is not in the MDE: the rounds' ratios (±0.5%) and the prior's pair part are
    assert v.mde is not None and v.mde < 0.03, v.line()
    # the same figures unpaired (each side's rounds as repeats): the drift stays in, the MDE is far wider
    unpaired = judge_duet(metrics.AGGREGATE_TOK_S, "k", "x", a, b, 0.03, 0.05, "A",
                          assumed=noise_prior.duet_assumed("gpu", metrics.AGGREGATE_TOK_S, "rounds"))
    assert unpaired.mde > 1.5 * v.mde, (unpaired.mde, v.mde)


def test_a_three_percent_throughput_loss_in_every_round_is_flagged():
    a, b = _rounds(1500.0, factor=0.97)
    v = rounds_duet(a, b)
    assert v.status == "regressed", v.line()
    assert -0.04 < v.change < -0.02


def test_rounds_need_as_many_on_both_sides():
    with pytest.raises(ValueError):
        rounds_duet([[1.0, 1.0]], [[1.0]])


def test_a_round_of_windows_is_a_share_of_the_window_on_a_gpu_and_a_whole_one_on_the_cpu():
    from llmgate.config.matrix import Scenarios
    from llmgate.runner.duet import DuetRun, DuetSide

    sc = Scenarios()
    assert sc.duet_split("gpu") and not sc.duet_split("cpu")
    assert Scenarios(duet_split_window=True).duet_split("cpu") and not Scenarios(duet_split_window=False).duet_split("gpu")
    side = DuetSide("A", None, Turns(("A", "B"), "seed"), DuetRun(("A", "B")), rounds=3)
    gpu = sc.steady("gpu", 8)
    first = side.round_window(gpu, sc.duet_split("gpu"))
    assert first["min_s"] == gpu["min_s"] / 3 and first["max_s"] == gpu["max_s"] / 3
    assert first["min_requests"] == -(-gpu["min_requests"] // 3) and "settled" not in first and side.windows
    cpu = sc.steady("cpu", 8)
    assert side.round_window(cpu, sc.duet_split("cpu")) == cpu         # the CPU's: a whole window a round
    side.round = 2                                                      # warm after the side's first round
    assert side.round_window(cpu, False) == dict(cpu, settled=True)
    one = DuetSide("A", None, Turns(("A", "B"), "seed"), DuetRun(("A", "B")), rounds=1)
    assert one.round_window(gpu, True) == gpu


def test_duet_split_window_in_a_matrix_is_true_or_false():
    from llmgate.config.matrix import MatrixError, _scenarios

    assert _scenarios({"duet_split_window": False}, "m").duet_split("gpu") is False
    with pytest.raises(MatrixError, match="'duet_split_window' must be true or false"):
        _scenarios({"duet_split_window": 1}, "m")


def test_an_mde_beyond_a_thousand_percent_is_shown_as_such():
    from llmgate.analysis.verdict import mde_pct

    assert mde_pct(0.042) == "4.2%" and mde_pct(10.0) == "1000.0%" and mde_pct(0.5, 0) == "50%"
    assert mde_pct(1.3e140) == "> 1,000%" and mde_pct(11.0, 0) == "> 1,000%"


def _drifting_pairs(n=200, drift=0.30, noise=0.02, seed=1):
    """Two sides' requests taken in turns while the machine's speed wanders by ``drift`` (shared by the
    two requests of a turn pair), each request with ``noise`` of its own."""
    import random

    rng = random.Random(seed)
    level, a, b = 1.0, [], []
    for _ in range(n):
        level = max(0.5, level * math.exp(rng.gauss(0, drift / 10)))
        a.append(0.05 * level * math.exp(rng.gauss(0, noise)))
        b.append(0.05 * level * math.exp(rng.gauss(0, noise)))
    return a, b


def test_requests_resampled_in_pairs_keep_what_moved_both_sides():
    a, b = _drifting_pairs()
    apart = stats.sampling_log_var(a, "median") + stats.sampling_log_var(b, "median")
    paired = stats.paired_sampling_log_var(a, b)
    assert paired < apart / 4, (paired, apart)                   # the shared drift is not counted twice
    # sides that share nothing: about the sides' own sum
    ia, ib = _drifting_pairs(drift=0.0, noise=0.10, seed=2)
    together = stats.sampling_log_var(ia, "median") + stats.sampling_log_var(ib, "median")
    assert stats.paired_sampling_log_var(ia, ib) == pytest.approx(together, rel=0.5)
    assert stats.paired_sampling_log_var([1.0, 2.0], [1.0, 2.0]) is None
    assert stats.paired_sampling_log_var([1.0, 0.0, 2.0, 3.0], [1.0, 2.0, 0.0, 3.0]) is None   # 2 usable pairs


def test_a_duet_of_requests_in_pairs_rests_on_their_paired_sampling():
    pairs = [_drifting_pairs(seed=s) for s in (3, 4)]
    a_vals = [[statistics.median(x)] for x, _ in pairs]
    b_vals = [[statistics.median(y)] for _, y in pairs]
    apart = [stats.sampling_log_var(x, "median") for x, _ in pairs], [stats.sampling_log_var(y, "median") for _, y in pairs]
    common = dict(requests=[200.0] * 2, assumed=noise_prior.duet_assumed("cpu", metrics.TTFT_C1))
    sides = judge_duet(metrics.TTFT_C1, "ttft_c1@p128", "x", a_vals, b_vals, 0.05, 0.05, "A", apart[0], apart[1], **common)
    paired = judge_duet(metrics.TTFT_C1, "ttft_c1@p128", "x", a_vals, b_vals, 0.05, 0.05, "A", apart[0], apart[1],
                        pair_sampling=[stats.paired_sampling_log_var(x, y) for x, y in pairs], **common)
    assert "requests resampled in pairs" in paired.method and "requests resampled in pairs" not in sides.method
    assert paired.mde < sides.mde, (paired.line(), sides.line())
    # a pair without paired values: the sides' own, summed
    partial = judge_duet(metrics.TTFT_C1, "ttft_c1@p128", "x", a_vals, b_vals, 0.05, 0.05, "A", apart[0], apart[1],
                         pair_sampling=[stats.paired_sampling_log_var(*pairs[0]), None], **common)
    assert partial.mde == pytest.approx(sides.mde)
