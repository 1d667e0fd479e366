"""llmgate merge: reports that cannot be one result are refused in one line."""

import json

from llmgate import cli


def report(tmp_path, name, index=None, of=None, status=0):
    rep = {"verdicts": [], "boots": {}, "notes": [], "device": {}, "settings": {}, "exit_status": status}
    if index is not None:
        rep["shard"] = {"index": index, "of": of, "entries": []}
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(rep))
    return str(p)


def test_refused_inputs(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert cli.main(["merge", "--out", out, report(tmp_path, "plain")]) == 2
    assert "not the report of a shard" in capsys.readouterr().err
    assert cli.main(["merge", "--out", out, report(tmp_path, "a", 1, 2), report(tmp_path, "b", 2, 3)]) == 2
    assert "different splits" in capsys.readouterr().err
    assert cli.main(["merge", "--out", out]) == 2
    assert "no report" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert cli.main(["merge", "--out", out, str(tmp_path / "bad.json")]) == 2
    assert "not a readable report" in capsys.readouterr().err


def test_no_report_at_all_with_shards_given_names_every_share_missing(tmp_path, capsys):
    assert cli.main(["merge", "--out", str(tmp_path / "out"), "--shards", "2"]) == 1
    err = capsys.readouterr().err
    assert "shard 1/2 missing" in err and "shard 2/2 missing" in err


def test_a_share_that_exited_non_zero_fails_the_merge(tmp_path, capsys):
    args = ["--out", str(tmp_path / "out"), report(tmp_path, "a", 1, 2), report(tmp_path, "b", 2, 2, status=1)]
    assert cli.main(["merge", *args]) == 1
    assert "shard 2/2 exited 1" in capsys.readouterr().err
