"""The vLLM processes a test started: API servers and engine cores whose working directory is
under the test's own folder.  A server launched by llmgate inherits the pytest session's
working directory, so other engines on the machine (a developer's own, another test run's)
are not counted."""

from pathlib import Path

import psutil


def engine_processes(under: Path) -> list[str]:
    """``pid cmdline`` of each live vLLM process started from ``under`` or below it."""
    root = str(Path(under).resolve())
    out = []
    for p in psutil.process_iter(["cmdline", "cwd", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        cwd = p.info["cwd"] or ""
        if p.info["status"] == psutil.STATUS_ZOMBIE or not (cwd == root or cwd.startswith(root + "/")):
            continue
        if "vllm.entrypoints.openai.api_server" in cmd or "VLLM::" in cmd:
            out.append(f"{p.pid} {cmd[:100]}")
    return out
