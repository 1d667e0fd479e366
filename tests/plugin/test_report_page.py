"""A session's end, through pytester (no engine): report.json carries the GPU sampling a scenario
recorded beside a figure (``gate.record(..., gpu_sampling=...)``, as test_decode.py does on a GPU
entry), and report.html, written beside it, shows it with every verdict; the terminal names the page."""

import json

import browser

pytest_plugins = ["pytester"]

RECORDING = """
from llmgate.core import metrics

SAMPLED = {"0": {"memory_used_start": 1e9, "memory_used_peak": 2e9, "utilization_mean": 96.0,
                 "utilization_max": 100.0, "samples": 12, "sm_mhz": {"min": 1410, "median": 1980.0, "max": 1980},
                 "throttle": {"hw_slowdown": 0.5}}}

def test_measure(gate):
    gate.record(metrics.DECODE_TOK_S, [100.0, 101.0, 99.0], gpu_sampling=SAMPLED)
    gate.record(metrics.TTFT_P95, [0.1, 0.1, 0.1], "c8")
"""


def test_the_gpu_sampling_is_in_report_json_and_on_the_page(pytester):
    pytester.makepyfile(test_rec=RECORDING)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    out = pytester.path / ".llmgate"
    rep = json.loads((out / "report.json").read_text())
    (sampled,) = rep["gpu_sampling"]
    assert sampled["key"] == "decode_tok_s" and sampled["test"] == "test_measure" and sampled["boot"] is None
    assert sampled["gpus"]["0"]["throttle"] == {"hw_slowdown": 0.5}
    dom = browser.read((out / "report.html").read_text())
    assert sorted(row["data-key"] for row in dom.rows) == ["decode_tok_s", "ttft_p95@c8"]
    assert "1410–1980 MHz (median 1980)" in dom.texts["clocks"] and "hw_slowdown 50%" in dom.texts["clocks"]
    r.stdout.fnmatch_lines([f"report page: {out / 'report.html'} (open it in a browser*"])
    assert "**Report page:** `report.html`" in (out / "summary.md").read_text()
