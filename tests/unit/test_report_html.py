"""report.html, the page a reviewer opens (llmgate.report.html), without an engine: every verdict of
report.json a row, regressions first; everything that comes from the run HTML-escaped; nothing
fetched (no external src or href); a chart and the phase that moved for each flagged verdict, the run
history with its change points; the GPU's clocks and throttling; written by the report writer and
by the sharded merge and named by summary.md.  The last test opens it in headless Chromium where
that is installed (tests/timing/test_use_in_a_repository.py opens a real run's page)."""

import dataclasses
import json
import re
from collections import Counter

import pytest

import browser
from llmgate import cli
from llmgate.analysis.paired import judge_duet
from llmgate.analysis.verdict import judge, judge_boots
from llmgate.core import metrics
from llmgate.report import html as page
from llmgate.report import reports
from llmgate.store import history

EVIL = '<img src=x onerror="alert(1)">&amp;'
ENTRY = "cpu-<b>tiny</b>"


def verdicts():
    """A run's verdicts of every kind: a decode regression over three boots a side with the engine
    timers of its test (decode moved), a TTFT whose note carries its attribution, improved,
    unchanged, inconclusive, no baseline, refused, a duet."""
    out = []
    dec = judge_boots(metrics.DECODE_TOK_S, "decode_tok_s", ENTRY, [[40.0, 41, 39], [42.0, 40, 41], [39.0, 40, 41]],
                      [[100.0, 101, 99], [98.0, 99, 100], [102.0, 101, 100]], 0.05, 0.05, "Linux/0001_base.json",
                      comparison="stored")
    out.append(dataclasses.replace(dec, test="test_decode_c1", note=f"a note with {EVIL}"))
    for metric, now, base in ((metrics.ENGINE_TPOT, 0.025, 0.010), (metrics.ENGINE_PREFILL, 0.0101, 0.0100),
                              (metrics.FRONTEND_TTFT, 0.0020, 0.0021), (metrics.ENGINE_QUEUE, 0.00002, 0.00001)):
        v = judge_boots(metric, metric.name, ENTRY, [[now * f] * 3 for f in (1, 1.01, 0.99)],
                        [[base * f] * 3 for f in (1, 1.01, 0.99)], None, 0.05, "Linux/0001_base.json", comparison="stored")
        out.append(dataclasses.replace(v, test="test_decode_c1"))
    ttft = judge(metrics.TTFT_C1, "ttft_c1", ENTRY, [0.05, 0.051, 0.049], [0.04, 0.041, 0.039], None, 0.05, "0001_base")
    out.append(dataclasses.replace(ttft, test="test_latency", attribution="where (engine timers, window means): queue "
                                   "+0.1 ms, prefill +9.0 ms (+90%) regressed; client +10.0 ms; most of it: prefill"))
    out.append(dataclasses.replace(judge(metrics.AGGREGATE_TOK_S, "aggregate_tok_s@c4", ENTRY, [130.0, 131, 129],
                                         [100.0, 101, 99], None, 0.05, "0001_base"), test="test_concurrency"))
    out.append(dataclasses.replace(judge(metrics.TTFT_P95, "ttft_p95@c4", ENTRY, [0.1, 0.1, 0.1], [0.1, 0.1, 0.1],
                                         None, 0.05, "0001_base"), test="test_concurrency"))
    out.append(dataclasses.replace(judge(metrics.E2E_P50, "e2e_p50", ENTRY, [0.5], [0.45], None, 0.05, "0001_base"),
                                   test="test_latency"))
    out.append(dataclasses.replace(judge(metrics.PEAK_RSS, "peak_rss", ENTRY, [1e9], None), test="test_memory",
                                   note="no baseline for this test: the nearest, x.json, differs"))
    refused = judge(metrics.TTFT_P50, "ttft_p50@c8", "other", [0.2] * 3, None)
    out.append(dataclasses.replace(refused, test="test_concurrency", status="refused: not comparable",
                                   note="model differs: tiny vs small"))
    duet = judge_duet(metrics.DECODE_TOK_S, "decode_tok_s", "duet-entry", [[100.0] * 3, [101.0] * 3, [99.0] * 3],
                      [[93.0] * 3, [94.0] * 3, [92.0] * 3], 0.05)
    out.append(dataclasses.replace(duet, test="test_decode_c1"))
    return out


PROV = {"engine": {"engine": "vllm", "version": "0.32.0"}, "device": {"cpu": "Test CPU"}, "model_hash": "abc",
        "config_fingerprint": "f00"}
GPU = {"config": ENTRY, "test": "test_decode_c1", "key": "decode_tok_s", "boot": 2, "side": None,
       "gpus": {"0": {"memory_used_start": 1e9, "memory_used_peak": 2e9, "utilization_mean": 97.0,
                      "utilization_max": 100.0, "samples": 40, "sm_mhz": {"min": 1500, "median": 1900.0, "max": 1980},
                      "mem_mhz": {"min": 2619, "median": 2619.0, "max": 2619}, "temp_c_max": 71, "power_w_mean": 612.0,
                      "throttle": {"gpu_idle": 0.1, "sw_thermal_slowdown": 0.25}}}}


def report(tmp_path, vs=None):
    logs = tmp_path / "out" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "cpu.boot1.log").write_text("engine output")
    rep = reports.build(
        device={"cpu": "Test CPU", "cpu_count": 2, "system": "Linux 6"}, settings={"repeats": 3},
        boots={ENTRY: [{"boot": 1, "engine": "vllm", "version": "0.32.0", "startup_s": 30.0,
                        "log": str(logs / "cpu.boot1.log"), "launcher": f'/opt/"nightly"/{EVIL}'},
                       {"boot": 2, "engine": "vllm", "version": "0.32.0", "startup_s": None,
                        "log": "/elsewhere/cpu.boot2.log"}]},
        verdicts=vs if vs is not None else verdicts(), notes=[f"a run note {EVIL}"], raw={},
        configs=lambda cid: {"id": cid}, argv=["-m", "engine", EVIL], exit_status=1)
    rep["gpu_sampling"] = [GPU]
    return rep


def rendered(tmp_path, rep=None, history_dir=None):
    rep = rep or report(tmp_path)
    text = page.render(rep, tmp_path / "out", history_dir)
    return rep, text, browser.read(text)


def test_every_verdict_is_a_row_and_the_regressions_come_first(tmp_path):
    rep, _, dom = rendered(tmp_path)
    rows = [(r["data-entry"], r["data-test"], r["data-key"], r["data-status"]) for r in dom.rows]
    assert Counter(rows) == Counter((v["config"], v["test"], v["key"], v["status"]) for v in rep["verdicts"])
    statuses = [r[3] for r in rows]
    regressed = statuses.count("regressed")
    assert regressed >= 3 and statuses[:regressed] == ["regressed"] * regressed, statuses
    rank = [page.RANK[s] for s in statuses]
    assert rank == sorted(rank), statuses
    # among the regressions, the figures before the engine timers that explain them, the largest worsening first
    worse = {(v["config"], v["test"], v["key"]): v["worse_change"] for v in rep["verdicts"]}
    timers = [r[2] in page.PHASES or r[2] in page.TOTALS for r in rows[:regressed]]
    assert timers == sorted(timers) and timers[-1] and not timers[0], rows[:regressed]
    firsts = [worse[r[:3]] for r, t in zip(rows[:regressed], timers) if not t]
    assert firsts == sorted(firsts, reverse=True)
    assert dom.texts["badge"] == "FAIL"


def test_what_comes_from_the_run_is_escaped(tmp_path):
    _, text, dom = rendered(tmp_path)
    assert "<img" not in text and "<b>tiny" not in text and 'onerror="' not in text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;amp;" in text        # the note, argv, launcher
    assert text.count("<script>") == 1                                                 # the page's own only
    assert "cpu-&lt;b&gt;tiny&lt;/b&gt;" in text
    assert {r["data-entry"] for r in dom.rows} >= {ENTRY}                             # the DOM reads it back whole


def test_the_page_is_self_contained(tmp_path):
    _, text, dom = rendered(tmp_path)
    assert dom.external == []
    hrefs = re.findall(r'(?:src|href)="([^"]*)"', text)
    assert hrefs and all(not re.match(r"[a-z]+:|//", h) for h in hrefs), hrefs       # relative or #anchors only
    assert "<link" not in text and "@import" not in text and "url(" not in text
    assert "<style>" in text and "<svg" in text
    # the engine log in the report's folder is linked relative to the page; one elsewhere is named, not linked
    assert 'href="logs/cpu.boot1.log"' in text
    assert "/elsewhere/cpu.boot2.log" in text and 'href="/elsewhere' not in text


def test_flagged_verdicts_have_their_chart_and_the_phase_that_moved(tmp_path):
    rep, text, dom = rendered(tmp_path)
    cards = {(c["data-entry"], c["data-key"]) for c in dom.cards}
    for v in rep["verdicts"]:
        if v["status"] in ("regressed", "improved"):
            assert (v["config"], v["key"]) in cards, v["key"]
    assert (ENTRY, "ttft_p95@c4") not in cards                       # unchanged, no move: no chart
    i = next(k for k, c in enumerate(dom.cards) if c["data-key"] == "decode_tok_s" and c["data-entry"] == ENTRY)
    where = dom.texts[f"where-{i}"]
    assert "engine timers of this test" in where and "moved: decode (time per output token) +150%" in where, where
    # prefill within its min effect; the idle queue's +100% is 0.01 ms, within its 1 ms floor: neither moved
    assert "prefill +1%" in where and "queue +100%" in where
    assert where.endswith("; moved: decode (time per output token) +150%"), where
    assert f'id="boots-{i}"' in text
    j = next(k for k, c in enumerate(dom.cards) if c["data-key"] == "ttft_c1")
    assert "most of it: prefill" in dom.texts[f"where-{j}"]
    # the table's cell says it in short
    assert "moved: decode (time per output token) +150%" in text
    # a duet's chart joins each boot pair's two values
    k = next(k for k, c in enumerate(dom.cards) if c["data-entry"] == "duet-entry")
    assert text.split(f'id="boots-{k}"', 1)[1].split("</svg>", 1)[0].count('class="pair"') == 3


def test_the_header_names_comparisons_engines_device_and_gpu_clocks(tmp_path):
    _, text, dom = rendered(tmp_path)
    ctx = dom.texts["context"]
    assert "stored baseline Linux/0001_base.json" in ctx and "duet (both builds up at once" in ctx
    assert "not comparable" in ctx and "Test CPU (2 logical cores)" in ctx
    clocks = dom.texts["clocks"]
    assert "1500–1980 MHz (median 1900)" in clocks and "moved >5%" in clocks
    assert "sw_thermal_slowdown 25%" in clocks and "gpu_idle" not in clocks
    engines = dom.texts["engines"]
    assert "0.32.0" in engines and 'nightly' in engines and "failed" in engines
    assert "1 regressed" not in dom.texts["counts"] and "regressed ·" in dom.texts["counts"]
    notes = dom.texts["notes"]
    assert "model differs: tiny vs small" in notes and "no baseline for this test: the nearest" in notes
    assert "a run note" in notes


def test_the_run_history_is_charted_with_its_change_points(tmp_path):
    folder = tmp_path / "history"
    for i, level in enumerate((100, 101, 99, 100, 60, 61, 59, 40)):
        s = history.make_series(ENTRY, "test_decode_c1", "decode_tok_s", "tok/s", "higher",
                                [[level, level * 1.01, level * 0.99], [level * 1.005] * 3], PROV)
        history.write(history.make_record([s], 1_700_000_000 + 86400 * i), folder)
    _, text, dom = rendered(tmp_path, history_dir=folder)
    i = next(k for k, c in enumerate(dom.cards) if c["data-key"] == "decode_tok_s" and c["data-entry"] == ENTRY)
    assert f'id="history-{i}"' in text
    card = text.split(f'id="chart-{i}"', 1)[1].split('class="card', 1)[0]
    assert "Run history (8 run(s)" in card and card.count('class="cp"') >= 1 and "step -4" in card
    # without a history folder the page says so
    _, text, _ = rendered(tmp_path, history_dir=tmp_path / "none")
    assert "no run history in" in text and 'id="history-' not in text


def test_an_old_report_without_the_newer_fields_renders(tmp_path):
    rep = report(tmp_path)
    for k in ("gpu_sampling", "outcome", "compared", "tests"):
        rep.pop(k, None)
    for v in rep["verdicts"]:
        for k in ("comparison", "mde_kind", "engine", "baseline_engine", "boot_values", "baseline_boot_values"):
            v.pop(k, None)
    _, text, dom = rendered(tmp_path, rep)
    assert len(dom.rows) == len(rep["verdicts"]) and "predates GPU sampling" in text


def test_the_writer_writes_the_page_and_summary_md_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGATE_PLOTS", "0")
    for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    out = tmp_path / "out"
    files = reports.write_all(report(tmp_path), out, None, history_dir=tmp_path / "history")
    assert [f.name for f in files] == ["report.json", "summary.md", "report.html"]
    md = (out / "summary.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("**Report page:**"))
    assert f"`{out / 'report.html'}`" in line and "artifacts" not in line
    assert json.loads((out / "report.json").read_text())["gpu_sampling"] == [GPU]
    # in GitHub Actions the line links the run's artifacts
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    reports.write_all(report(tmp_path), out, None)
    assert "[run's artifacts](https://github.com/o/r/actions/runs/42#artifacts)" in (out / "summary.md").read_text()


def test_a_page_that_cannot_be_rendered_leaves_the_rest_of_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGATE_PLOTS", "0")

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(page, "render", broken)
    files = reports.write_all(report(tmp_path), tmp_path / "o", None)
    assert [f.name for f in files] == ["report.json", "summary.md"]
    assert "report.html not written: RuntimeError: boom" in json.loads((tmp_path / "o" / "report.json").read_text())["notes"]


def test_the_sharded_merge_writes_the_page_with_the_history(tmp_path, capsys):
    parts = []
    for k, vs in ((1, verdicts()[:5]), (2, verdicts()[5:])):
        rep = report(tmp_path, vs)
        rep["shard"] = {"index": k, "of": 2, "entries": [ENTRY]}
        rep["exit_status"] = 0
        p = tmp_path / f"sh{k}.json"
        p.write_text(json.dumps(rep, default=str))
        parts.append(str(p))
    folder = tmp_path / "history"
    s = history.make_series(ENTRY, "test_decode_c1", "decode_tok_s", "tok/s", "higher", [[40.0, 41.0]], PROV)
    history.write(history.make_record([s], 1_700_000_000), folder)
    out = tmp_path / "merged"
    assert cli.main(["merge", "--out", str(out), "--history", str(folder), *parts]) == 0
    assert "report page" in capsys.readouterr().out
    dom = browser.read((out / "report.html").read_text())
    doc = json.loads((out / "report.json").read_text())
    assert len(dom.rows) == len(doc["verdicts"]) == len(verdicts())
    assert "1/2" in dom.texts["context"] and "2/2" in dom.texts["context"]
    assert "Run history (1 run(s), too few for change points" in (out / "report.html").read_text()
    assert len(doc["gpu_sampling"]) == 2
    assert "**Report page:** `report.html`" in (out / "summary.md").read_text()


@pytest.mark.skipif(browser.chromium() is None, reason=browser.WHY_SKIPPED)
def test_the_page_in_headless_chromium(tmp_path):
    out = tmp_path / "out"
    path = page.write(report(tmp_path), out, None)
    opened = browser.open_page(path, tmp_path / "chromium", tmp_path / "shot.png")
    dom = browser.read(opened.dom)
    assert opened.script_errors() == [], opened.script_errors()
    assert dom.root.get("data-llmgate-ready") == "1" and dom.texts["llmgate-js"] == "page script ran"
    assert dom.texts["shown"] == f"{len(dom.rows)} of {len(dom.rows)} verdict(s) shown"
    assert len(dom.rows) == len(verdicts()) and dom.rows[0]["data-status"] == "regressed"
    assert opened.screenshot.stat().st_size > 20_000
