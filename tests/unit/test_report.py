"""The session report: JSON valid against its schema, Markdown, plots with their data."""

import json
from importlib.resources import files

import jsonschema
import pytest

from llmgate.core import metrics
from llmgate.report import reports as report
from llmgate.analysis.verdict import judge

pytest.importorskip("matplotlib")


@pytest.fixture(autouse=True)
def _plots(monkeypatch):
    monkeypatch.delenv("LLMGATE_PLOTS")          # conftest turns them off for the other tests


def test_llmgate_plots_0_leaves_the_plots_out(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGATE_PLOTS", "0")
    assert {f.name for f in report.write_all(build(verdicts()), tmp_path, None)} == {"report.json", "summary.md",
                                                                                    "report.html"}


def verdicts():
    out = []
    for c, tok, ttft in ((1, 100.0, 0.02), (4, 300.0, 0.05), (8, 420.0, 0.09)):
        out.append(judge(metrics.AGGREGATE_TOK_S, f"aggregate_tok_s@c{c}", "cfg", [tok, tok * 1.02, tok * 0.98],
                         [tok * 1.5, tok * 1.52, tok * 1.48], 0.1, 0.05, "0001_base"))
        out.append(judge(metrics.TTFT_P95, f"ttft_p95@c{c}", "cfg", [ttft] * 3, None))
    out.append(judge(metrics.DECODE_TOK_S, "decode_tok_s", "cfg", [120.0, 130.0, 125.0], [124.0, 126.0, 128.0], 0.1))
    for n, cold, warm in ((512, 0.05, 0.02), (2048, 0.2, 0.03)):
        out.append(judge(metrics.TTFT_C1, f"ttft_c1@prefix{n}-cold", "cfg", [cold] * 3, None))
        out.append(judge(metrics.TTFT_C1, f"ttft_c1@prefix{n}-warm", "cfg", [warm] * 3, None))
    import dataclasses
    return [dataclasses.replace(v, test="test_concurrency") for v in out]


def build(vs):
    raw = {("cfg", "test_concurrency", "aggregate_tok_s@c4"): {
        "now": {"waves": [{"ttft_s": [0.04, 0.05, 0.06, None]}]}, "baseline": {"waves": [{"ttft_s": [0.02, 0.03]}]}}}
    return report.build(device={"cpu": "test cpu"}, settings={"repeats": 3}, boots={"cfg": [
        {"boot": 1, "engine": "vllm", "version": "0.32.0", "startup_s": 30.0, "log": "x.log"}]},
        verdicts=vs, notes=["a note"], raw=raw, configs=lambda cid: {"id": cid}, exit_status=1,
        argv=["-m", "engine", "--api-key", "sekrit", "--token=abc"])


def test_report_is_valid_json_with_samples_and_no_secrets(tmp_path):
    rep = build(verdicts())
    schema = json.loads(files("llmgate").joinpath("data/report.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(rep)), schema)
    assert rep["counts"]["regressed"] == 3 and rep["counts"]["no baseline"] == 7
    agg = next(v for v in rep["verdicts"] if v["key"] == "aggregate_tok_s@c4")
    assert agg["now"]["values"] == [300.0, 306.0, 294.0] and len(agg["baseline"]["values"]) == 3
    assert agg["raw"]["waves"][0]["ttft_s"][0] == 0.04
    assert "sekrit" not in json.dumps(rep) and "abc" not in json.dumps(rep)


def test_markdown_and_plots_are_written_and_appended_to_the_step_summary(tmp_path):
    summary = tmp_path / "step.md"
    summary.write_text("earlier step\n")
    files_written = report.write_all(build(verdicts()), tmp_path / "out", str(summary))
    names = {f.name for f in files_written}
    assert {"report.json", "summary.md", "ttft.png", "tok_s.png", "concurrency.png", "prefix_cache.png"} <= names
    md = (tmp_path / "out" / "summary.md").read_text()
    assert md.startswith("## llmgate: ❌ regressions")
    assert "| cfg | aggregate tok/s @c4 (higher is better) |" in md and "**regressed**" in md
    assert summary.read_text().startswith("earlier step\n## llmgate")
    for f in files_written:
        if f.suffix == ".png":
            assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 10_000


def test_plots_are_left_out_when_there_is_no_data(tmp_path):
    vs = [judge(metrics.GREEDY, "greedy_repeatable", "cfg", [1.0], None)]
    files_written = report.write_all(build(vs), tmp_path, None)
    assert {f.name for f in files_written} == {"report.json", "summary.md", "report.html"}


def test_an_interrupt_after_the_last_test_says_nothing_was_left_to_run():
    """A deadline's SIGINT on the H200 (2026-12-04) came while the last test's servers were stopping,
    after its figures were saved: the summary said "the rest was not run" of a run with nothing left."""
    rep = build(verdicts())
    rep["interrupted"] = {"signal": "SIGINT", "during": "t.py::test_last", "reason": None, "not_run": []}
    assert "it was the last test: none was left to run" in report.markdown(rep)
    rep["interrupted"] = {"signal": "SIGINT", "during": None, "reason": None, "not_run": []}
    assert "every test had run" in report.markdown(rep)
    rep["interrupted"] = {"signal": "SIGINT", "during": "t.py::test_1", "reason": None, "not_run": ["t.py::test_2"]}
    md = report.markdown(rep)
    assert "the rest was not run" in md and "`t.py::test_2`" in md


def test_the_terminal_table_fits_120_columns_and_keeps_the_range_of_every_value():
    import dataclasses

    from llmgate.analysis.verdict import judge_boots

    long_id = "a-rather-long-matrix-entry-id-of-a-team"
    vs = [dataclasses.replace(v, config_id=long_id, test="test_poisson_load_at_a_rate") for v in verdicts()]
    # one boot a side: the verdict's own summary is of one boot value; the range is its repeats'
    vs.append(dataclasses.replace(judge_boots(metrics.ENGINE_QUEUE, "engine_queue@c1-p2048-rate0.5", long_id,
                                              [[0.010, 0.012, 0.011]], [[0.010, 0.011, 0.012]]),
                                  test="test_poisson_load_at_a_rate", regime="host-bound"))
    full = report.verdict_table(vs)
    assert max(len(ln) for ln in full.splitlines()) > 120
    text, dropped = report.terminal_table(vs)
    assert max(len(ln) for ln in text.splitlines()) <= 120, text
    assert dropped[:2] == ["regime", "range"]
    assert "| verdict" in text and "| MDE" in text and "| change" in text
    row = next(r for r in report.verdict_rows(vs[-1:]))
    assert row[report.HEADERS.index("range")] == "10.0 ms – 12.0 ms"
    # summary.md keeps every column, with the range, and the MDE legend
    md = report.markdown(build(vs))
    assert "| range |" in md and "10.0 ms – 12.0 ms" in md and report.MDE_LEGEND in md


def outcome_of(**fields):
    from llmgate.report import outcome

    rep = build(verdicts())
    rep.update(exit_status=0, tests={"passed": 3}, compared=True, settings={})
    rep.update(fields)
    return outcome.outcome(rep)


def test_the_headline_follows_the_runs_real_outcome():
    import dataclasses

    from llmgate.analysis.verdict import Verdict

    decided = [dataclasses.replace(Verdict.from_dict(v), status="unchanged").to_dict() for v in build(verdicts())["verdicts"]]
    missing = [dict(v, status="no baseline", no_baseline="no baseline for this test") for v in decided[:2]] + decided[2:]
    undecided = [dict(v, status="inconclusive") for v in decided[:3]] + decided[3:]
    regressed = [dict(decided[0], status="regressed")] + decided[1:]
    assert outcome_of(verdicts=decided).headline == "✅ no regression"
    # tests that failed beyond a regression (a dead engine) come first, whatever else
    o = outcome_of(verdicts=regressed + missing, exit_status=1, tests={"passed": 1, "failed": 1, "errors": 4})
    assert o.headline == "❌ failed: 1 failed, 4 error(s) (1 with a regressed verdict)" and o.severity == "bad"
    assert outcome_of(verdicts=[], exit_status=1, tests={"failed": 1, "errors": 4}).headline.startswith("❌ failed")
    # then interrupted, baseline not saved, not compared, regressed, not gated, inconclusive
    assert outcome_of(verdicts=missing, interrupted={"signal": "SIGINT"}).headline == "⚠️ interrupted"
    assert outcome_of(verdicts=missing, baseline_not_saved=["x"], exit_status=1).headline == "❌ baseline not saved"
    assert outcome_of(verdicts=decided, compared=False).headline.startswith("ℹ️ measured, not compared")
    assert outcome_of(verdicts=regressed + missing, exit_status=1,
                      tests={"failed": 1}).headline == "❌ regressions (1)"
    o = outcome_of(verdicts=missing + undecided)
    assert o.headline.startswith("❌ not gated: 2 of ") and o.fails and o.severity == "bad"
    assert any(ln.startswith("not gated: 2 of ") and "no baseline for this test (2)" in ln for ln in o.lines)
    assert any(ln.startswith("inconclusive: 3 of ") for ln in o.lines)
    o = outcome_of(verdicts=undecided)
    assert o.headline.startswith("❌ inconclusive: 3 of ") and o.fate.startswith("the run fails (exit status 1)")
    # accepted: no longer failing, never green
    o = outcome_of(verdicts=undecided, settings={"accept": ["inconclusive"]})
    assert o.headline.startswith("⚠️ inconclusive") and not o.fails and o.severity == "warn"
    o = outcome_of(verdicts=missing, settings={"accept": ["inconclusive"]})
    assert o.headline.startswith("❌ not gated") and o.fails                # only what was accepted
    assert outcome_of(verdicts=[]).headline == "⚠️ nothing measured"


def test_accept_takes_a_comma_list_and_refuses_what_it_does_not_know():
    from llmgate.report import outcome

    assert outcome.parse_accept(["no-baseline,inconclusive", "inconclusive"]) == ("no-baseline", "inconclusive")
    with pytest.raises(ValueError, match="'unchanged' is not one of no-baseline, inconclusive"):
        outcome.parse_accept(["unchanged"])


def test_engine_label_names_build_commit_and_launcher():
    from llmgate.engines.base import engine_label

    assert engine_label({"engine": "vllm", "version": "0.32.0", "commit": None}) == "vllm 0.32.0"
    assert engine_label({"engine": "vllm", "version": "0.32.0", "commit": "1a2b3c4d5e6f7"}, "/opt/b/python") == \
        "vllm 0.32.0 (commit 1a2b3c4d5e, launcher /opt/b/python)"
    assert engine_label(None) == "" and engine_label({"engine": None, "version": None}) == ""


def test_the_summary_names_the_gpus_a_run_measured_on_not_only_its_host():
    # every GPU run's summary.md once read "Device: Intel(R) Xeon(R) Processor"
    rep = build(verdicts())
    rep["device"] = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_count": 16,
                     "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total": 85520809984}]}
    assert "Device: 1× NVIDIA H100 80GB HBM3 (80 GiB each) on Intel(R) Xeon(R) Processor · " in report.markdown(rep)
    rep["device"] = {"cpu": "AMD EPYC 7B13"}
    assert "Device: AMD EPYC 7B13 · " in report.markdown(rep)
