"""Record a real vLLM server's /metrics text for the CPU unit tests of the parsers (the KV probe's
``vllm:cache_config_info`` → one request's room, speculative acceptance counters).

Boots the entry ``cpu-spec-ngram`` of ``matrices/levers-cpu.toml`` (n-gram prompt lookup) once,
scrapes /metrics, sends one request whose prompt repeats a sentence (so prompt lookup finds
drafts), scrapes again and writes both texts.

    PYTHONPATH=plugin python tests/validation/record_vllm_metrics.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugin"))

from llmgate.config import matrix  # noqa: E402
from llmgate.process.server import Server  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def main(out: Path) -> int:
    m = matrix.load(ROOT / "matrices" / "levers-cpu.toml")
    cfg = m.by_id("cpu-spec-ngram")
    out.mkdir(parents=True, exist_ok=True)
    server = Server(cfg, m, out / "logs", boot_number=1)
    h = server.start()
    try:
        with httpx.Client(timeout=300) as http:
            before = http.get(h.base_url + "/metrics").text
            prompt = "The cat sat on the mat and looked at the door. " * 24
            r = http.post(h.base_url + "/v1/completions", headers=h.auth_headers(),
                          json={"model": h.model_name, "prompt": prompt, "max_tokens": 64, "temperature": 0,
                                "ignore_eos": True})
            r.raise_for_status()
            after = http.get(h.base_url + "/metrics").text
        (out / "metrics-before.txt").write_text(before)
        (out / "metrics-after.txt").write_text(after)
        (out / "request.json").write_text(json.dumps({"config": cfg.describe(), "version": h.engine_info.version,
                                                      "usage": r.json().get("usage")}, indent=2))
        print(f"vLLM {h.engine_info.version}: wrote {out}/metrics-before.txt, metrics-after.txt; usage {r.json().get('usage')}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
