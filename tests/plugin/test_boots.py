"""The boot as the unit, through pytester (no engine): a test marked `boots` runs once per
measurement boot of its entry, its metrics are stored once with every boot's values and a noise
model, and judged on boot values with the MDE beside the change."""

import json

import boot_runs

pytest_plugins = ["pytester"]

ENTRIES = """
[defaults]
engine = "vllm"
model = "tiny"

[[matrix]]
id = "first"

[[matrix]]
id = "second"
"""

PER_BOOT_TEST = """
import json, os
import pytest
from llmgate.core import metrics

@pytest.mark.boots
def test_measure(llmgate_config, llmgate_boot, gate):
    values = json.loads(os.environ["VALUES"])
    gate.record(metrics.DECODE_TOK_S, values[llmgate_config.id][llmgate_boot - 1])

def test_once(llmgate_config):
    pass
"""


def run(pytester, values, *args):
    return boot_runs.run(pytester, ENTRIES, PER_BOOT_TEST, values, *args)


def boots(level, spread=(1.0, 1.004, 0.996)):
    return [[level * s * r for r in (1.0, 1.002, 0.998, 1.001, 0.999)] for s in spread]


def test_one_item_per_boot_in_boot_order_and_one_stored_entry_with_every_boot(pytester):
    pytester.makefile(".toml", llmgate=ENTRIES)
    pytester.makepyfile(test_rec=PER_BOOT_TEST)
    r = pytester.runpytest("--collect-only", "-q", "--llmgate-boots", "3")
    ids = [ln.split("::", 1)[1] for ln in r.stdout.lines if ln.startswith("test_rec.py::")]
    assert ids == ["test_measure[first-boot1]", "test_once[first]", "test_measure[first-boot2]",
                   "test_measure[first-boot3]", "test_measure[second-boot1]", "test_once[second]",
                   "test_measure[second-boot2]", "test_measure[second-boot3]"]
    # one boot (the CPU default): the ids stay as they were
    r = pytester.runpytest("--collect-only", "-q")
    r.stdout.fnmatch_lines(["*test_measure[[]first[]]", "*test_measure[[]second[]]"])

    r = run(pytester, {"first": boots(100), "second": boots(50)}, "--llmgate-boots", "3", "--benchmark-save=base")
    r.assert_outcomes(passed=8)
    r.stdout.fnmatch_lines(["*first decode_tok_s: boot 1 of 3*judged after boot 3*"])
    saved = json.loads(next((pytester.path / "baselines").rglob("*.json")).read_text())
    entries = {b["fullname"]: b["extra_info"]["llmgate"] for b in saved["benchmarks"]}
    info = entries["measure[first]::decode_tok_s"]
    assert info["schema"] == 3 and len(info["boots"]) == 3 and len(info["values"]) == 15
    assert info["noise"]["df"] == 2 and 0 < info["noise"]["between_cv"] < 0.01


def test_compare_judges_boot_values_with_their_mde_and_catches_a_small_regression(pytester):
    run(pytester, {"first": boots(100), "second": boots(50)}, "--llmgate-boots", "3",
        "--benchmark-save=base").assert_outcomes(passed=8)
    r = run(pytester, {"first": boots(100.3, (0.998, 1.003, 1.0)), "second": boots(50)}, "--llmgate-boots", "3",
            "--benchmark-compare", "-rA")
    r.assert_outcomes(passed=8)
    r.stdout.fnmatch_lines(["*| MDE *", "*first*| 3×5 *| unchanged*"])
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    v = next(v for v in rep["verdicts"] if v["config"] == "first" and v["key"] == "decode_tok_s")
    assert v["method"].startswith("t-test on boot values") and v["boots"] == {"baseline": 3, "now": 3}
    assert 0 < v["mde"] < 0.02 and v["noise"]["df"] == 4
    r = run(pytester, {"first": boots(93), "second": boots(50)}, "--llmgate-boots", "3", "--benchmark-compare")
    r.assert_outcomes(passed=7, failed=1)
    line = next(ln for ln in r.stdout.lines if "first decode_tok_s (" in ln and "→ now" in ln)
    assert "(3 boots) → now 93.0 tok/s (3 boots), change -7.0%" in line and "regressed" in line and "MDE " in line


def test_a_single_boot_compared_with_a_single_boot_assumes_the_devices_noise_and_says_so(pytester):
    run(pytester, {"first": boots(100)[:1], "second": boots(50)[:1]}, "--benchmark-save=base").assert_outcomes(passed=4)
    # +12%: far beyond the repeats' 0.2% spread, well inside what one CPU boot swings against the next
    # it is no regression, and not "unchanged" either: one boot a side cannot rule a 5% one out, so the
    # row is inconclusive and the run fails (exit 1) while its tests pass, unless that is accepted
    r = run(pytester, {"first": boots(112)[:1], "second": boots(50)[:1]}, "--benchmark-compare", "-rA")
    r.assert_outcomes(passed=4)
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*first*| ~*% ! | inconclusive*",
                            "*compared one boot a side*llmgate's conservative prior*--llmgate-boots 2 or more*"])
    r = run(pytester, {"first": boots(112)[:1], "second": boots(50)[:1]}, "--benchmark-compare",
            "--llmgate-accept", "inconclusive")
    r.assert_outcomes(passed=4)
    assert r.ret == 0
    md = (pytester.path / ".llmgate" / "summary.md").read_text()
    assert md.startswith("## llmgate: ⚠️ inconclusive: ") and "✅" not in md
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    v = next(v for v in rep["verdicts"] if v["config"] == "first" and v["key"] == "decode_tok_s")
    assert v["method"].startswith("t-test on boot values") and "assumed: llmgate's prior for a cpu entry" in v["method"]
    assert v["noise_assumed"].startswith("llmgate's prior for a cpu entry") and v["mde"] > 0.3
    # a 5× slowdown is far beyond it: regressed, after the confirmation run repeats it
    r = run(pytester, {"first": boots(20)[:1], "second": boots(50)[:1]}, "--benchmark-compare")
    r.assert_outcomes(passed=3, failed=1)
    r.stdout.fnmatch_lines(["*first decode_tok_s*change -80.0%*regressed*assumed: llmgate's prior*"])


ACCOUNTED = PER_BOOT_TEST.replace("""    gate.record(metrics.DECODE_TOK_S, values[llmgate_config.id][llmgate_boot - 1])
""", """    gate.record(metrics.DECODE_TOK_S, values[llmgate_config.id][llmgate_boot - 1])
    from llmgate.load.samples import LoadResult, Sample
    gate._recorder.account(LoadResult([Sample(ok=True, start=0.0, e2e=1.0)] * 2, 1.0, 1))
""")


def test_the_failed_requests_row_is_one_per_test_and_says_what_its_test_was_compared_with(pytester):
    """A test measured on K boots has one "requests that failed" row, beside the figures judged
    after its last boot, counting every boot's requests; it reads "unchanged" only where those
    figures had a baseline, "no baseline" (with the figures' reason) where they had none."""
    def rows(*args):
        r = boot_runs.run(pytester, ENTRIES, ACCOUNTED, {"first": boots(100), "second": boots(50)},
                          "--llmgate-boots", "3", *args)
        r.assert_outcomes(passed=8)
        rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
        return [v for v in rep["verdicts"] if v["metric"] == "failed_requests"]

    for args, status in ((("--benchmark-compare",), "no baseline"), (("--benchmark-save=base",), "no baseline"),
                         (("--benchmark-compare",), "unchanged")):
        got = rows(*args)
        assert sorted(v["config"] for v in got) == ["first", "second"], got
        assert all(v["status"] == status and v["note"] == "0 of 6 requests failed" for v in got), got
        if args == ("--benchmark-compare",) and status == "no baseline":
            assert all(v["no_baseline"] == "no baseline stored" for v in got), got
