"""The streaming client's parsing and failure handling, against canned server-sent events
served on loopback (the real-engine behaviour is covered by the engine tests)."""

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from llmgate.load.client import stream_request

# times the client against a stub server: run alone, not beside another xdist worker (tox.ini)

SCRIPTS: dict[str, tuple[int, list[tuple[float, bytes]]]] = {}


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(text, completion=None, finish=None):
    e = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if completion is not None:
        e["usage"] = {"prompt_tokens": 7, "completion_tokens": completion}
    return e


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        status, parts = SCRIPTS[self.path]
        self.send_response(status)
        self.send_header("content-type", "text/event-stream" if status == 200 else "application/json")
        self.send_header("connection", "close")
        self.end_headers()
        for delay, data in parts:
            time.sleep(delay)
            self.wfile.write(data)
            self.wfile.flush()


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def run(url, path, timeout=5.0):
    async def go():
        async with httpx.AsyncClient() as http:
            return await stream_request(http, url + path, {"prompt": "x", "max_tokens": 3}, timeout)
    return asyncio.run(go())


def test_counts_tokens_from_usage_not_chunks(server):
    SCRIPTS["/multi"] = (200, [(0.05, event(chunk("a", 1))), (0.03, event(chunk("bcd", 4))),
                               (0.01, event(chunk("", 4, "length"))), (0, event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}})),
                               (0, b"data: [DONE]\n\n")])
    s = run(server, "/multi")
    assert s.ok, s.error
    assert s.completion_tokens == 4 and s.prompt_tokens == 7
    assert s.chunk_tokens == [1, 3]          # the empty finish chunk carries no token
    assert len(s.itl) == 3                   # one ITL per token after the first chunk
    assert s.ttft >= 0.05 and s.text == "abcd" and s.finish_reason == "length"


def test_http_error_is_a_failed_sample(server):
    SCRIPTS["/500"] = (500, [(0, b'{"error": "engine exploded"}')])
    s = run(server, "/500")
    assert not s.ok and s.status == 500 and "HTTP 500" in s.error and "engine exploded" in s.error


def test_malformed_event_is_a_failed_sample(server):
    SCRIPTS["/bad"] = (200, [(0, event(chunk("a", 1))), (0, b"data: {not json\n\n")])
    s = run(server, "/bad")
    assert not s.ok and "malformed SSE event" in s.error


def test_stream_cut_short_is_a_failed_sample(server):
    SCRIPTS["/short"] = (200, [(0, event(chunk("a", 1)))])
    s = run(server, "/short")
    assert not s.ok and "without [DONE]" in s.error


def timed(url, path, timeout=5.0):
    t = time.perf_counter()
    s = run(url, path, timeout)
    return s, time.perf_counter() - t


def test_hung_stream_times_out(server):
    """The timeout is the whole request's: a stream that trickles a token every 0.1 s for 5 s
    (no read waits long) stops at 0.5 s.  Its margin is what a quick request costs this machine
    now (a fresh event loop, client and connection: what the timed-out one pays too), measured
    before and after it."""
    SCRIPTS["/quick"] = (200, [(0, event(chunk("a", 1))), (0, b"data: [DONE]\n\n")])
    SCRIPTS["/hang"] = (200, [(0, event(chunk("a", 1))), *[(0.1, event(chunk("b", n))) for n in range(2, 52)],
                              (0, b"data: [DONE]\n\n")])
    quick = [timed(server, "/quick")[1] for _ in range(3)]
    s, took = timed(server, "/hang", timeout=0.5)
    quick += [timed(server, "/quick")[1] for _ in range(3)]
    assert not s.ok and s.error.startswith("timeout: no complete response within 0.5 s") and s.text.startswith("ab"), s.error
    # not before its time, and not at the stream's end (5 s): at 0.5 s and what a request costs now
    assert 0.5 <= took < 0.5 + 4 * max(quick), (took, quick)


def test_error_event_in_stream(server):
    SCRIPTS["/err"] = (200, [(0, event({"error": {"message": "overloaded"}}))])
    s = run(server, "/err")
    assert not s.ok and "overloaded" in s.error


def test_missing_usage_cannot_be_counted(server):
    SCRIPTS["/nousage"] = (200, [(0, event(chunk("a"))), (0, b"data: [DONE]\n\n")])
    s = run(server, "/nousage")
    assert not s.ok and "no usage" in s.error


def test_chat_deltas(server):
    SCRIPTS["/chat"] = (200, [(0, event({"choices": [{"delta": {"content": "hi"}}]})),
                              (0, event({"choices": [{"delta": {"content": " there"}}]})),
                              (0, event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})),
                              (0, b"data: [DONE]\n\n")])
    s = run(server, "/chat")
    assert s.ok and s.text == "hi there" and s.completion_tokens == 2 and s.chunk_tokens is None


def test_several_client_processes_keep_request_order_and_count_everything(server, monkeypatch):
    from llmgate.load import workloads as load

    class Handle:            # what load.run needs of a server handle
        base_url = server

        def check_alive(self):
            pass

        def auth_headers(self):
            return {}

    for n in range(6):
        SCRIPTS[f"/w{n}"] = (200, [(0.02, event(chunk("a" * (n + 1), n + 1))), (0, b"data: [DONE]\n\n")])
    SCRIPTS["/w-bad"] = (500, [(0, b'{"error": "no"}')])
    reqs = [load.Request({"prompt": "x", "max_tokens": 3}, f"/w{n}") for n in range(6)]
    reqs.insert(3, load.Request({"prompt": "x"}, "/w-bad"))
    res = load.run(Handle(), reqs, concurrency=4, timeout=10, workers=2)
    assert len(load.client_pids()) >= 2
    assert [s.text for s in res.samples] == ["a", "aa", "aaa", "", "aaaa", "aaaaa", "aaaaaa"]
    assert len(res.failures) == 1 and "HTTP 500" in res.failures[0].error
    assert res.wall_s >= 0.02 and res.concurrency == 4
    monkeypatch.setenv("LLMGATE_CLIENT_WORKERS", "3")
    assert load.client_workers(16) == 3
    monkeypatch.delenv("LLMGATE_CLIENT_WORKERS")
    assert load.client_workers(1) == 1
