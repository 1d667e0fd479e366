"""Duet mode (``--llmgate-ab``, the default A/B mode), through pytester (no engine): the scenarios that
measure boots run once per boot pair, both sides at the same time (each in a thread of its own with a
gate of its side), and side B is judged against side A pair by pair (log B ÷ A)."""

import json
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

import boot_runs

pytest_plugins = ["pytester"]

ENTRIES = """
[defaults]
engine = "vllm"
model = "tiny"

[[matrix]]
id = "first"
"""

PER_PAIR_TEST = """
import json, os
import pytest
from llmgate.core import metrics

@pytest.mark.boots
def test_measure(llmgate_config, llmgate_boot, gate):
    values = json.loads(os.environ["VALUES"])
    side, k = gate.side, int(llmgate_boot)
    assert side in ("A", "B") and llmgate_boot.plan.duet and llmgate_boot.side is None
    gate.record(metrics.DECODE_TOK_S, values[side][k - 1])
    # a latency figure: one statistic a boot, with its sampling variance
    gate.record(metrics.TTFT_C1, [values["ttft_" + side][k - 1]], "p128", sampling=0.00002, requests=400)
"""


def boots(level, spread=(1.0, 1.004, 0.996)):
    return [[level * s * r for r in (1.0, 1.002, 0.998, 1.001, 0.999)] for s in spread]


def run(pytester, values, *args):
    return boot_runs.run(pytester, ENTRIES, PER_PAIR_TEST, values, "--llmgate-ab", "A=/opt/pinned/python",
                         "--llmgate-ab", "B=/opt/nightly/python", "--llmgate-boots", "3", *args)


def verdicts(pytester):
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    return {v["key"]: v for v in report["verdicts"]}


def test_a_duet_runs_one_test_per_boot_pair_and_judges_b_against_a_pair_by_pair(pytester):
    pytester.makefile(".toml", llmgate=ENTRIES)
    pytester.makepyfile(test_rec=PER_PAIR_TEST)
    r = pytester.runpytest("--collect-only", "-q", "--llmgate-ab", "A=/x", "--llmgate-ab", "B=/y", "--llmgate-boots", "2")
    ids = [ln.split("::", 1)[1] for ln in r.stdout.lines if ln.startswith("test_rec.py::")]
    assert ids == ["test_measure[first-pair1]", "test_measure[first-pair2]"]

    # the machine moved the pairs' levels by ±10% together; B is 8% slower on every pair: regressed (at a
    # 5% minimum effect), though each pair's level moved more than that
    levels = (100, 110, 92)
    values = {"A": [b[0] for b in (boots(lv, (1.0,)) for lv in levels)],
              "B": [b[0] for b in (boots(lv * 0.92, (1.0,)) for lv in levels)],
              "ttft_A": [0.0200, 0.0220, 0.0184], "ttft_B": [0.0200 * 1.08, 0.0220 * 1.081, 0.0184 * 1.079]}
    r = run(pytester, values, "--benchmark-save=duet", "--llmgate-min-effect", "decode_tok_s=0.05",
            "--llmgate-min-effect", "ttft_c1=0.05")
    out = r.stdout.str()
    assert r.ret == 1, out[-3000:]
    by_key = verdicts(pytester)
    for key in ("decode_tok_s", "ttft_c1@p128"):
        v = by_key[key]
        assert v["status"] == "regressed", v
        assert v["comparison"] == "duet, 3 boot pairs" and v["baseline_in_run"], v
        assert v["boots"] == {"baseline": 3, "now": 3}, v
        assert "duet: 3 boot pair(s)" in v["note"], v
        assert abs(v["change"] - (-0.08 if key == "decode_tok_s" else 0.08)) < 0.005, v
        assert v["mde"] is not None and v["mde"] < 0.08, v
    assert "within-pair sampling" in by_key["ttft_c1@p128"]["method"], by_key["ttft_c1@p128"]["method"]
    assert "boot pair 1 of 3, side A" in out and "boot pair 1 of 3, side B" in out, out[-3000:]
    # the saved baseline holds side B's pairs under the usual key, with side A's values beside them
    (saved,) = pytester.path.glob("baselines/*/0001_duet.json")
    names = {b["fullname"]: b for b in json.loads(saved.read_text())["benchmarks"]}
    assert "measure[first]::decode_tok_s" in names, list(names)
    duet = names["measure[first]::decode_tok_s"]["extra_info"]["llmgate"]["duet"]
    assert duet["baseline_side"] == "A" and duet["candidate_side"] == "B" and duet["pairs"] == 3
    assert [round(x) for x in duet["baseline_side_boot_values"]] == [100, 110, 92]


def test_a_floor_in_the_metrics_own_unit_from_the_command_line(pytester):
    # B's TTFT is 8% (1.5-1.8 ms) slower on every pair: over a 2 ms floor it does not count, over 1 ms it does
    levels = (100, 110, 92)
    values = {"A": [boots(lv, (1.0,))[0] for lv in levels], "B": [boots(lv, (1.0,))[0] for lv in levels],
              "ttft_A": [0.0200, 0.0220, 0.0184], "ttft_B": [0.0200 * 1.08, 0.0220 * 1.081, 0.0184 * 1.079]}
    run(pytester, values, "--llmgate-accept", "inconclusive", "--llmgate-min-effect", "ttft_c1=0.05:0.002")
    v = verdicts(pytester)["ttft_c1@p128"]
    assert v["status"] != "regressed" and v["min_abs_effect"] == 0.002, v
    r = run(pytester, values, "--llmgate-min-effect", "ttft_c1=0.05:0.001")
    assert r.ret == 1, r.stdout.str()[-3000:]
    v = verdicts(pytester)["ttft_c1@p128"]
    assert v["status"] == "regressed" and v["min_abs_effect"] == 0.001, v
    r = pytester.runpytest("--llmgate-min-effect", "ttft_c1=0.05:soon")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--llmgate-min-effect 'ttft_c1=0.05:soon'*FRACTION[[]:ABS[]]*"])


def test_a_duet_of_the_same_engine_passes_where_the_pairs_moved_together(pytester):
    levels = (100, 112, 90)
    values = {"A": [boots(lv, (1.0,))[0] for lv in levels],
              "B": [boots(lv * f, (1.0,))[0] for lv, f in zip(levels, (1.004, 0.997, 1.001))],
              "ttft_A": [0.0200, 0.0230, 0.0181], "ttft_B": [0.0201, 0.0229, 0.0181]}
    r = run(pytester, values, "--llmgate-accept", "inconclusive")
    assert r.ret == 0, r.stdout.str()[-3000:]
    statuses = {k: v["status"] for k, v in verdicts(pytester).items() if k != "failed_requests"}
    assert set(statuses.values()) <= {"unchanged", "inconclusive"}, statuses
    # the TTFT pairs agree within 0.5% over 400 requests a side: the duet rules a 10% change out
    assert statuses["ttft_c1@p128"] == "unchanged", statuses


def test_a_test_outside_the_boot_pairs_is_not_a_missing_comparison(pytester):
    # a quality check (no `boots` mark) records a figure in A/B mode: its own checks gate it, it is
    # not "not gated"; the pairs' verdicts decide the run
    src = PER_PAIR_TEST + """

def test_quality(llmgate_config, gate):
    gate.record(metrics.PASS_RATE, [1.0], "guaranteed")
"""
    levels = (100, 112, 90)
    values = {"A": [boots(lv, (1.0,))[0] for lv in levels], "B": [boots(lv, (1.0,))[0] for lv in levels],
              "ttft_A": [0.0200, 0.0230, 0.0181], "ttft_B": [0.0201, 0.0229, 0.0181]}
    r = boot_runs.run(pytester, ENTRIES, src, values, "--llmgate-ab", "A=/opt/pinned/python", "--llmgate-ab",
                      "B=/opt/nightly/python", "--llmgate-boots", "3", "--llmgate-accept", "inconclusive")
    assert r.ret == 0, r.stdout.str()[-3000:]
    v = verdicts(pytester)["quality_pass_rate@guaranteed"]
    assert v["status"] == "no baseline" and v["no_baseline"] == "not compared in A/B mode", v
    assert "its own checks are its gate" in v["note"], v
    assert "not gated" not in r.stdout.str(), r.stdout.str()[-3000:]
    # alone, nothing was compared: it never reads as passed
    r = boot_runs.run(pytester, ENTRIES, src, values, "--llmgate-ab", "A=/opt/pinned/python", "--llmgate-ab",
                      "B=/opt/nightly/python", "--llmgate-boots", "3", "-k", "quality")
    summary = (pytester.path / ".llmgate" / "summary.md").read_text()
    assert "measured, not compared" in summary and "no regression" not in summary, summary[:800]


def test_alternate_mode_still_boots_the_sides_in_turn(pytester):
    pytester.makefile(".toml", llmgate=ENTRIES)
    pytester.makepyfile(test_rec=PER_PAIR_TEST)
    r = pytester.runpytest("--collect-only", "-q", "--llmgate-ab", "A=/x", "--llmgate-ab", "B=/y", "--llmgate-boots", "2",
                           "--llmgate-ab-mode", "alternate")
    ids = [ln.split("::", 1)[1] for ln in r.stdout.lines if ln.startswith("test_rec.py::")]
    assert ids == ["test_measure[first-boot1.A]", "test_measure[first-boot2.B]", "test_measure[first-boot3.A]",
                   "test_measure[first-boot4.B]"]


def test_a_failure_on_one_side_fails_the_test_and_stops_the_other(pytester):
    src = PER_PAIR_TEST + """

@pytest.mark.boots
def test_fails_on_b(llmgate_config, llmgate_boot, gate):
    if gate.side == "B":
        assert False, "side B broke"
"""
    r = boot_runs.run(pytester, ENTRIES, src, {"A": [[1.0]], "B": [[1.0]], "ttft_A": [0.02], "ttft_B": [0.02]},
                      "--llmgate-ab", "A=/x", "--llmgate-ab", "B=/y", "--llmgate-boots", "1", "-k", "fails_on_b")
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*side B broke*"])


ROUNDS_TEST = """
import json, os
import pytest
from llmgate.core import metrics

@pytest.mark.boots
def test_windows(llmgate_config, llmgate_boot, gate):
    values = json.loads(os.environ["VALUES"])
    side, k = gate.side, int(llmgate_boot)
    gate._side.round_window({"min_s": 1.0, "max_s": 2.0, "min_requests": 3}, True)   # as gate.steady does: rounds
    r = gate._side.round
    with open(f"ran-{side}-{k}-{r}", "w"):
        pass
    with gate._side.turn():                # one window's turn
        pass
    # the machine's drift between windows (the same in both sides' turns of a round), side B's ratio
    drift = values["drift"][k - 1][r - 1]
    gate.record(metrics.AGGREGATE_TOK_S, [1000.0 * drift * values[side][k - 1][r - 1]], "c8")
"""


def test_a_test_of_windows_runs_in_rounds_paired_round_by_round(pytester):
    drift = [[1.0, 0.93, 1.07], [1.05, 0.96, 1.0], [0.95, 1.04, 1.01]]
    same = {"drift": drift, "A": [[1.0] * 3] * 3, "B": [[1.003, 0.998, 1.0], [0.997, 1.002, 1.001], [1.0, 1.004, 0.997]]}
    r = boot_runs.run(pytester, ENTRIES, ROUNDS_TEST, same, "--llmgate-ab", "A=/x", "--llmgate-ab", "B=/y",
                      "--llmgate-boots", "3", "--llmgate-accept", "inconclusive")
    assert r.ret == 0, r.stdout.str()[-3000:]
    ran = sorted(p.name for p in pytester.path.glob("ran-*"))
    assert len(ran) == 18 and "ran-B-3-3" in ran, ran          # 3 rounds a side on each of 3 pairs
    v = verdicts(pytester)["aggregate_tok_s@c8"]
    assert v["comparison"] == "duet, 3 boot pairs, 3 rounds a pair", v["comparison"]
    # the drift (±7%) cancels round by round: what is left is the rounds' ratios (±0.3%) and the CPU's prior
    # for a boot pair's part (8%: each boot's own speed, measured in A/As)
    assert v["status"] != "regressed" and v["mde"] < 0.10, v
    assert "in rounds of windows (3 a side a pair" in v["note"], v["note"]
    assert "within-pair rounds" in v["method"] and "in rounds of windows" in v["method"], v["method"]
    slower = dict(same, B=[[x * 0.90 for x in row] for row in same["B"]])
    for p in pytester.path.glob("ran-*"):
        p.unlink()
    r = boot_runs.run(pytester, ENTRIES, ROUNDS_TEST, slower, "--llmgate-ab", "A=/x", "--llmgate-ab", "B=/y",
                      "--llmgate-boots", "3")
    assert r.ret == 1, r.stdout.str()[-3000:]
    assert verdicts(pytester)["aggregate_tok_s@c8"]["status"] == "regressed"


def test_pinned_names_side_a_and_the_entries_own_launcher_is_side_b(pytester):
    pytester.makefile(".toml", llmgate=ENTRIES)
    pytester.makepyfile(test_rec=PER_PAIR_TEST)
    r = pytester.runpytest("--collect-only", "-q", "--llmgate-pinned", "/venvs/pinned/bin/python", "--llmgate-boots", "2",
                           "--llmgate-ab-mode", "alternate")
    ids = [ln.split("::", 1)[1] for ln in r.stdout.lines if ln.startswith("test_rec.py::")]
    assert ids == ["test_measure[first-boot1.pinned]", "test_measure[first-boot2.current]",
                   "test_measure[first-boot3.pinned]", "test_measure[first-boot4.current]"], r.stdout.str()
    from llmgate.runner.boots import side_config
    from llmgate.config.matrix import ServerConfig
    cfg = ServerConfig(id="x", engine="vllm", model="tiny", launcher="/own/python")
    assert side_config(cfg, "").launcher == "/own/python"              # side "current": the entry's own
    assert side_config(cfg, "/venvs/pinned/bin/python").launcher == "/venvs/pinned/bin/python"
    r = pytester.runpytest("--collect-only", "-q", "--llmgate-pinned", "/p", "--llmgate-ab", "A=/x", "--llmgate-ab", "B=/y")
    assert r.ret != 0
    r.stderr.fnmatch_lines(["*--llmgate-pinned and --llmgate-ab name the sides twice*"])


def test_an_interrupted_duet_judges_the_pairs_both_sides_finished_and_still_reads_interrupted(pytester):
    # pair 3 of 3 is cut by an interrupt (Ctrl-C, the deadline's SIGINT) before either side records: the
    # two finished pairs are judged, each verdict saying so; nothing is saved as a baseline; the run
    # reads interrupted (exit 2), never passed
    src = PER_PAIR_TEST.replace("    values = json.loads", "    if int(llmgate_boot) == 3:\n"
                                "        raise KeyboardInterrupt\n    values = json.loads")
    levels = (100, 110, 92)
    values = {"A": [b[0] for b in (boots(lv, (1.0,)) for lv in levels)],
              "B": [b[0] for b in (boots(lv * 0.92, (1.0,)) for lv in levels)],
              "ttft_A": [0.0200, 0.0220, 0.0184], "ttft_B": [0.0200 * 1.08, 0.0220 * 1.081, 0.0184 * 1.079]}
    r = boot_runs.run(pytester, ENTRIES, src, values, "--llmgate-ab", "A=/x", "--llmgate-ab", "B=/y",
                      "--llmgate-boots", "3", "--benchmark-save=cut", "--llmgate-min-effect", "decode_tok_s=0.05")
    out = r.stdout.str()
    assert r.ret == 2, out[-3000:]
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert report["interrupted"] and report["outcome"]["status"] != "passed", report["outcome"]
    by_key = {v["key"]: v for v in report["verdicts"]}
    for key in ("decode_tok_s", "ttft_c1@p128"):
        v = by_key[key]
        assert v["comparison"] == "duet, 2 boot pairs", v
        assert "cut by an interrupt: judged on the 2 of 3 boot pairs both sides finished" in v["note"], v["note"]
    assert by_key["decode_tok_s"]["status"] == "regressed", by_key["decode_tok_s"]
    assert not list(pytester.path.glob("baselines/*/*_cut.json")), "a cut run saved a baseline"
    summary = (pytester.path / ".llmgate" / "summary.md").read_text()
    assert summary.startswith("## llmgate: ⚠️ interrupted"), summary[:300]
    assert "exit status 1" not in summary, summary[:600]          # the interrupt's status 2 is the run's


UP_EACH_PAIR = """
import pytest

@pytest.mark.boots
def test_up(llmgate_server, llmgate_boot):
    assert llmgate_boot.plan.duet
"""


def boot_span(log: str):
    """(began, ended) of a stand-in's boot from its log (ended None: the boot did not end)."""
    import stand_in_engine
    began = ended = None
    for line in open(log).read().splitlines():
        if line.startswith(stand_in_engine.BOOT_BEGAN):
            began = float(line[len(stand_in_engine.BOOT_BEGAN):])
        elif line.startswith(stand_in_engine.BOOT_ENDED):
            ended = float(line[len(stand_in_engine.BOOT_ENDED):])
    return began, ended


def test_a_pair_boots_both_sides_at_once_where_the_entry_fixes_its_kv_cache(pytester):
    """With kv_cache_bytes (no memory profile that could see the other side's boot), the second pair on
    boots A and B at once; the first pair, and an entry that sizes its cache by profiling, boot one side
    after the other.  A pair that does not come up booted at once is booted again one side at a time."""
    import stand_in_engine
    from test_boot_and_death import entry, stand_in_session

    model = stand_in_session(pytester)
    lock = pytester.path / "booting.lock"
    pytester.makefile(".toml", llmgate=entry("fixed", model, "boot-s=2", extra="kv_cache_bytes = 1000000\n")
                      + entry("profiled", model, "boot-s=2")
                      + entry("sized", model, "boot-s=2", "kv-profiled=3000000")
                      + entry("alone", model, "boot-s=2", f"alone={lock}", extra="kv_cache_bytes = 1000000\n"))
    pytester.makepyfile(test_up=UP_EACH_PAIR)
    py = stand_in_engine.sys.executable
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llmgate-ab", f"A={py}", "--llmgate-ab", f"B={py}",
                                      "--llmgate-boots", "3", "--llmgate-accept", "inconclusive")
    out = r.stdout.str()
    assert r.parseoutcomes().get("passed") == 12, out
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    jsonschema.validate(report, json.loads(files("llmgate").joinpath("data/report.schema.json").read_text()))
    boots = report["boots"]

    def pairs(cid):
        by_pair: dict[int, list] = {}
        for b in boots[cid]:
            pair = int(b["side"].split("(pair ")[1].split(")")[0])
            by_pair.setdefault(pair, []).append((b["side"][0], b["startup_s"], boot_span(b["log"])))
        return by_pair

    def overlap(spans):
        (a0, a1), (b0, b1) = spans
        return max(a0, b0) < min(a1, b1)

    fixed = pairs("fixed")
    assert sorted(fixed) == [1, 2, 3] and all(len(p) == 2 for p in fixed.values())
    assert not overlap([s for _, _, s in fixed[1]])                  # the first pair fills the caches
    assert overlap([s for _, _, s in fixed[2]]) and overlap([s for _, _, s in fixed[3]])
    assert out.count("llmgate: fixed: booting both sides at once") == 2
    profiled = pairs("profiled")
    assert all(not overlap([s for _, _, s in profiled[k]]) for k in (1, 2, 3))
    assert "profiled: booting both sides at once" not in out
    # an engine that says what its first boot sized: each side's later boots are given that size, at once
    sized = pairs("sized")
    assert not overlap([s for _, _, s in sized[1]])
    assert overlap([s for _, _, s in sized[2]]) and overlap([s for _, _, s in sized[3]])
    assert out.count("llmgate: sized: booting both sides at once (each side's KV cache fixed at the size its "
                     "first boot sized: A 0.00 GiB, B 0.00 GiB)") == 2
    for b in boots["sized"]:
        text = Path(b["log"]).read_text()
        first = b["side"].endswith("(pair 1)")
        assert (stand_in_engine.KV_SIZED + "3000000" in text) == first, (b, text)
        assert (stand_in_engine.KV_GIVEN + "3000000" in text) == (not first), (b, text)
        assert b.get("kv_cache_sized" if first else "kv_cache_bytes") == 3000000, b
    # at once, one of the two exits (another is booting): the pair boots again, one side after the other
    alone = pairs("alone")
    for k in (2, 3):
        failed = [b for b in alone[k] if b[1] is None]
        up = [b for b in alone[k] if b[1] is not None]
        assert len(failed) >= 1 and len(up) == 2 and {b[0] for b in up} == {"A", "B"}
        assert not overlap([s for _, _, s in up])
        assert f"llmgate: alone: boot pair {k} did not come up booted at once (alone: stand-in server exited with code 1" in out
    assert "booting its sides one after the other instead" in out
