"""`llmgate sensitivity`: what a stored baseline can see, read from committed files."""

import json
from pathlib import Path

from llmgate import cli
from llmgate.report import sensitivity

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "baselines" / "Linux-CPython-3.12-64bit"


def test_three_boots_give_an_mde_and_the_boots_for_a_target():
    rows = {r[1]: r for r in sensitivity.rows(STORED / "0005_h200-8b.json", entry="h200-8b-bf16")}
    decode, c8 = rows["decode_tok_s"], rows["aggregate_tok_s@c8"]
    assert decode[2] == "3" and c8[2] == "3"
    # decode on the H200's 8B entry is the GPU-bound figure: a small MDE, reached at the file's K
    assert float(decode[6].rstrip("%")) < 1.0 and decode[10] == "≤3"
    # c=8 throughput is noisier: a larger MDE, and more boots for 5% than for a looser target
    assert float(c8[6].rstrip("%")) > float(decode[6].rstrip("%"))
    loose = {r[1]: r for r in sensitivity.rows(STORED / "0005_h200-8b.json", entry="h200-8b-bf16", target=0.5)}
    assert loose["aggregate_tok_s@c8"][10] == "≤3"
    # against this file from a later session: decode carries no session offset, c=8 a small one, and
    # TTFT at c=8 one that no number of boots averages away
    assert decode[7] == decode[6]
    assert float(c8[7].rstrip("%")) > float(c8[6].rstrip("%"))
    ttft = rows["ttft_p50@c8"]
    assert float(ttft[7].rstrip("%")) > float(ttft[6].rstrip("%")) + 20


def test_one_boot_says_its_noise_is_unknown(tmp_path):
    data = json.loads((STORED / "0005_h200-8b.json").read_text())
    for b in data["benchmarks"]:
        info = b["extra_info"]["llmgate"]
        info["boots"] = info["boots"][:1]
        info["noise"] = None
    one = tmp_path / "one.json"
    one.write_text(json.dumps(data))
    rows = sensitivity.rows(one, metric="decode_tok_s")
    assert rows and rows[0][2] == "1" and rows[0][4] == "1 boot: unknown" and rows[0][6] == "—"


def test_bad_input_is_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"benchmarks": [')
    assert cli.main(["sensitivity", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a readable JSON file" in err
    assert cli.main(["sensitivity", str(STORED / "0005_h200-8b.json"), "--target", "5"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err
    assert cli.main(["sensitivity", str(STORED / "0005_h200-8b.json"), "--entry", "no-such-entry"]) == 1
    assert "no llmgate figure matches" in capsys.readouterr().err


def test_a_metric_two_scenarios_record_is_told_apart_by_its_scenario():
    rows = sensitivity.rows(STORED / "0016_h200-8b-llamacpp-k3.json", entry="h200-8b-llamacpp-q4_k_m",
                            metric="decode_tok_s")
    assert sorted((r[1], r[2]) for r in rows) == [("decode_tok_s (decode_c1)", "3"),
                                                  ("decode_tok_s (weight_precision)", "1")]
