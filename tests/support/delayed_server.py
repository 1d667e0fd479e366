"""A launcher that serves an engine binary behind the delay proxy (``delay_proxy.py``): side B of the
llama.cpp A/B self-test (tests/timing/test_ab_engine.py), a build that is slower by ``DELAY_S`` a
token and otherwise the same.

    python delayed_server.py BINARY DELAY_S ARGS...

runs ``BINARY ARGS`` with its ``--port`` moved to a free port and the proxy on the port it was given;
a signal is passed on to the binary, and the launcher exits with it.  ARGS without ``--port`` (a
``--version`` call): ``BINARY ARGS`` as they are."""

import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from delay_proxy import DelayProxy  # noqa: E402


def main() -> int:
    binary, delay_s, args = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    if "--port" not in args:
        os.execv(binary, [binary, *args])
    i = args.index("--port") + 1
    port = int(args[i])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        args[i] = str(s.getsockname()[1])
    child = subprocess.Popen([binary, *args])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    proxy = DelayProxy(f"http://127.0.0.1:{args[i]}", delay_s)
    proxy.start(port)
    rc = child.wait()
    proxy.stop()
    return rc


if __name__ == "__main__":
    sys.exit(main())
