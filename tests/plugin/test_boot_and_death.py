"""What the gate says of a server's boot and death, and where its logs go, against a stand-in
engine (tests/support/stand_in_engine.py: a real process under the watchdog, no engine):

- a boot that keeps logging long lines shows live "booting …" lines of at most 120 characters,
  none starting mid-word; a Ctrl-C during a boot is "interrupted" in the boots table and report.json
  (a boot that timed out stays "failed"), and the log paths the table names exist;
- a second session does not overwrite the first one's logs; the logs of the last ten sessions stay;
- a server killed mid-session: its death is told once with its first error since it was last seen
  alive (not an earlier one, not a later one) and its log's tail; after that in one line.
"""

import json
import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest

import stand_in_engine
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.process import logs
from llmgate.process.server import Server, ServerDied

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent


def stand_in_session(pytester) -> Path:
    """The pytester folder with the stand-in engine registered and a model folder; its path."""
    (pytester.path / "stand_in_engine.py").write_text((HERE.parent / "support" / "stand_in_engine.py").read_text())
    stand_in_engine.register(pytester.path)
    return stand_in_engine.model_folder(pytester.path / "model")


def entry(id_: str, model: Path, *args: str, extra: str = "") -> str:
    return (f'[[matrix]]\nid = "{id_}"\nengine = "stand-in"\nmodel = "{model}"\nargs = {json.dumps(list(args))}\n'
            + extra)


def test_boot_progress_fits_and_an_interrupted_boot_says_so(pytester):
    model = stand_in_session(pytester)
    pytester.makefile(".toml", llmgate=entry("slow", model, "never-ready", extra="boot_timeout_s = 7\n")
                      + entry("cut", model, "interrupt-gate", extra="boot_timeout_s = 120\n"))
    pytester.makepyfile(test_boot="def test_boot(llmgate_server):\n    pass\n")
    # SIGINT as a terminal gives it, even where this run was started with it ignored (`cmd &`)
    pytester.makeconftest("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    out = r.stdout.str()
    assert r.ret == 2, out                                   # interrupted
    # the live lines: the end of the log's long last line, cut before a whole word
    live = [ln for ln in out.splitlines() if ln.startswith("llmgate: booting slow: ") and ", log: " in ln]
    assert live, out
    for line in live:
        assert len(line) <= 120, line
        shown = line.partition(", log: ")[2]
        assert shown.startswith("…") and stand_in_engine.LONG.endswith(shown[1:]), line
        assert stand_in_engine.LONG[-len(shown[1:]) - 1] == " ", line          # a whole first word
    assert "slow: stand-in server not ready after 7 s (boot_timeout_s)" in out
    # the boots table: the timed-out boot failed, the one a Ctrl-C broke off was interrupted
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| (slow|cut) +\| +1 \| stand-in +\| \? +\| ([^|]+)\|", out, re.M)}
    assert rows == {"slow": "failed", "cut": "interrupted"}, out
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert report["boots"]["cut"][0]["interrupted"] is True and report["boots"]["cut"][0]["startup_s"] is None
    assert "interrupted" not in report["boots"]["slow"][0]
    for cid in ("slow", "cut"):                              # the log each boot wrote, named by the session
        log = Path(report["boots"][cid][0]["log"])
        assert log.is_file() and re.fullmatch(rf"{cid}\.boot1\.\d{{8}}-\d{{6}}-\d+\.log", log.name), log
        assert log.parent == pytester.path / ".llmgate" / "logs"


def test_a_later_session_keeps_the_earlier_logs_and_the_last_ten_sessions_stay(pytester):
    model = stand_in_session(pytester)
    pytester.makefile(".toml", llmgate=entry("quick", model))
    pytester.makepyfile(test_up="def test_up(llmgate_server):\n    assert llmgate_server.log_path.is_file()\n")
    folder = pytester.path / ".llmgate" / "logs"
    folder.mkdir(parents=True)
    # eleven earlier sessions (the oldest first), and a log of an older llmgate (kept: not named by session)
    for n in range(11):
        (folder / f"quick.boot1.20250101-0000{n:02d}-{100 + n}.log").write_text(f"session {n}\n")
    (folder / "quick.1.log").write_text("an older llmgate's\n")
    first = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    first.assert_outcomes(passed=1)
    time.sleep(1.1)                                          # the next session starts in another second
    second = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    second.assert_outcomes(passed=1)
    names = sorted(p.name for p in folder.glob("*.log"))
    ours = [n for n in names if not n.startswith("quick.boot1.2025")]
    assert len(ours) == 3 and "quick.1.log" in ours, names   # both sessions' logs and the old one
    kept = sorted(n for n in names if n.startswith("quick.boot1.2025"))
    assert kept == [f"quick.boot1.20250101-0000{n:02d}-{100 + n}.log" for n in range(3, 11)], names
    for run in (first, second):                              # each session's table names its own log
        (log,) = re.findall(r"\| (\S+quick\.boot1\.\S+\.log) *\|", run.stdout.str())
        assert Path(log).is_file() and "INFO: stand-in engine" in Path(log).read_text()
    assert len(set(re.findall(r"quick\.boot1\.(\d{8}-\d{6}-\d+)\.log", first.stdout.str() + second.stdout.str()))) == 2


def test_a_dead_server_is_told_once_with_its_first_error_since_it_was_last_seen_alive(tmp_path, monkeypatch):
    stand_in_engine.register(tmp_path / "dist")
    monkeypatch.syspath_prepend(str(tmp_path / "dist"))
    monkeypatch.setitem(logs._session, "stamp", None)      # no session: a script's own Server
    model = stand_in_engine.model_folder(tmp_path / "model")
    cfg = ServerConfig(id="victim", engine="stand-in", model=str(model))
    server = Server(cfg, Matrix(entries=(cfg,), models={}, source="test"), tmp_path / "logs")
    h = server.start()
    try:
        assert h.log_path == tmp_path / "logs" / "victim.1.log"

        def log(line: str) -> None:
            httpx.get(h.base_url + "/log", params={"line": line}).raise_for_status()

        log("ERROR a request was refused, and the server served on")          # before it was last seen alive
        h.check_alive()
        log("ERROR worker 3 lost its connection")                          # the one that explains the death
        log("Traceback (most recent call last):")
        log('  File "engine.py", line 1, in step')
        log("EngineDeadError: a later request's error about the dead engine")
        for n in range(30):
            log(f"INFO: line {n} after it")
        os.kill(h.pid, signal.SIGKILL)
        with pytest.raises(ServerDied) as e:
            h.check_alive(settle_s=10)
        first = str(e.value).splitlines()
        assert first[0] == f"victim: stand-in server (pid {h.pid}) exited with code -9 (SIGKILL) during the run"
        assert first[1] == "its log's first error since it was last seen alive: ERROR worker 3 lost its connection"
        assert first[2] == f"last lines of {h.log_path}:" and first[-1] == "INFO: line 29 after it"
        assert len(first) == 3 + 25
        # later: one line, no tail
        again = h.death_report()
        here = os.environ["PYTEST_CURRENT_TEST"].rpartition(" (")[0]
        assert again == (f"victim: the server died earlier in this session (exit code -9 (SIGKILL)); its log's first "
                         f"error and tail are in the report of {here}; the log: {h.log_path}")
        with pytest.raises(ServerDied) as e:
            h.check_alive()
        assert str(e.value) == again
    finally:
        server.stop()
