"""The client's cost between requests: a loop of single requests (TTFT at c=1, request by request in
a duet) makes an httpx client per request, and httpx builds a TLS context per client (its CA bundle
loaded: 22–27 ms on the 2-core machine, a third of such a loop's time against a real vLLM).  Every
client of a process shares one (``load.client.tls_context``)."""

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llmgate.load import client, workloads
from llmgate.load.workloads import Request


class _Stream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        usage = {"prompt_tokens": 3, "completion_tokens": 1}
        for event in ({"choices": [{"index": 0, "text": "a", "finish_reason": "length"}], "usage": usage},):
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")


class _Handle:
    def __init__(self, url):
        self.base_url = url

    def auth_headers(self):
        return {}

    def check_alive(self):
        pass


@pytest.fixture
def handle():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stream)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield _Handle(f"http://127.0.0.1:{srv.server_address[1]}")
    srv.shutdown()


def test_a_loop_of_single_requests_loads_the_ca_bundle_once(handle, monkeypatch):
    loads = []
    real = ssl.SSLContext.load_verify_locations

    def counted(self, *a, **kw):
        loads.append(a or kw)
        return real(self, *a, **kw)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    client.tls_context.cache_clear()
    try:
        for i in range(4):
            res = workloads.run(handle, [Request({"model": "m", "prompt": f"p{i}", "max_tokens": 1})], 1)
            assert res.samples[0].ok, res.samples[0].error
        client.sync_client().close()
    finally:
        client.tls_context.cache_clear()
    assert len(loads) == 1, f"the CA bundle was loaded {len(loads)} times for 4 requests and a /metrics reader"
