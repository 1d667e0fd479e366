#!/usr/bin/env python3
"""What a slowdown knob really does to TTFT, seen by a client that is not llmgate's (issue 35).

    LLMGATE_VLLM_PYTHON=LAUNCHER python3 gpu/knob-check.py --entry gpu-vllm-8b --switch FILE \\
        --knobs admit frontend --out DIR [--rounds 3] [--requests 60] [--lengths 128 2048]

LAUNCHER is a vLLM interpreter made by gpu/make-slow-launcher.sh with the knobs set and
LLMGATE_KNOB_SWITCH=FILE (tests/validation/slowdown/sitecustomize.py): the knobs act only while FILE
names them.  The entry is booted once, with llmgate's own server layer (the same arguments as the
gate's boots); then, in rounds, each state ("off", then each knob alone, in an order rotated each
round) is switched on by writing FILE and measured by the client below.

The client is independent of llmgate's load layer on purpose: its own few lines of httpx, one
streaming /v1/completions request at a time (c=1), each prompt a fresh list of random token ids
of the given length (no two share a prefix, so the prefix cache never shortens a prefill),
``max_tokens`` 4, ``ignore_eos``; TTFT = from sending the request to the first streamed chunk that
carries a choice.  Two requests of each block are warm-up and not counted.

Prints and writes DIR/knob-check.json: per state and prompt length, each round's median TTFT, and
each knob's paired change against "off" of the same round (median over rounds, with their range).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugin"))


def ttft_once(client: httpx.Client, url: str, model: str, ids: list[int], max_tokens: int) -> float:
    body = {"model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "ignore_eos": True}
    t0 = time.perf_counter()
    first = None
    with client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if first is None and line.startswith("data:") and '"choices"' in line:
                first = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("no streamed choice came back")
    return first


def block(client, url, model, vocab, length, n, rng, max_tokens):
    def prompt():
        return [rng.randrange(10, vocab) for _ in range(length)]

    for _ in range(2):
        ttft_once(client, url, model, prompt(), max_tokens)
    return [ttft_once(client, url, model, prompt(), max_tokens) for _ in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entry", default="gpu-vllm-8b")
    ap.add_argument("--matrix", default=None, help="a matrix file (default: the embedded default)")
    ap.add_argument("--switch", required=True, type=Path)
    ap.add_argument("--knobs", nargs="+", default=["admit", "frontend"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 2048])
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()

    from importlib.resources import files

    from llmgate.config import matrix as matrix_mod
    from llmgate.process.server import Server

    path = a.matrix or str(files("llmgate").joinpath("config/default_matrix.toml"))
    m = matrix_mod.load(path)
    cfg = m.by_id(a.entry)
    a.out.mkdir(parents=True, exist_ok=True)
    a.switch.write_text("")                                  # every knob off while it boots
    server = Server(cfg, m, a.out / "logs", say=print)
    t0 = time.monotonic()
    handle = server.start()
    print(f"booted {cfg.id} in {time.monotonic() - t0:.0f} s: {handle.base_url} ({handle.engine_info})", flush=True)
    vocab = int(json.loads((handle.model_path / "config.json").read_text())["vocab_size"]) \
        if (handle.model_path / "config.json").is_file() else 1000
    rng = random.Random(35)
    states = ["off", *a.knobs]
    rows: list[dict] = []
    try:
        with httpx.Client(timeout=120.0, headers=handle.auth_headers()) as client:
            url = handle.base_url.rstrip("/") + "/v1/completions"
            for rnd in range(a.rounds):
                order = states[rnd % len(states):] + states[:rnd % len(states)]
                for state in order:
                    a.switch.write_text("" if state == "off" else state + "\n")
                    time.sleep(0.2)
                    for length in a.lengths:
                        values = block(client, url, handle.model_name, vocab, length, a.requests, rng, a.max_tokens)
                        rows.append({"round": rnd, "state": state, "length": length, "n": len(values),
                                     "median_ms": statistics.median(values) * 1e3,
                                     "mean_ms": statistics.fmean(values) * 1e3})
                        print(f"round {rnd} {state:>9} p{length}: median {rows[-1]['median_ms']:.2f} ms, "
                              f"mean {rows[-1]['mean_ms']:.2f} ms ({len(values)} requests)", flush=True)
    finally:
        a.switch.write_text("")
        server.stop()
    summary = []
    for knob in a.knobs:
        for length in a.lengths:
            def at(state, rnd):
                return next(r for r in rows if r["state"] == state and r["round"] == rnd and r["length"] == length)
            deltas = [at(knob, r)["median_ms"] - at("off", r)["median_ms"] for r in range(a.rounds)]
            rel = [at(knob, r)["median_ms"] / at("off", r)["median_ms"] - 1 for r in range(a.rounds)]
            summary.append({"knob": knob, "length": length, "delta_ms_median": statistics.median(deltas),
                            "delta_ms_range": [min(deltas), max(deltas)], "change_median": statistics.median(rel),
                            "change_range": [min(rel), max(rel)],
                            "off_median_ms": statistics.median(at("off", r)["median_ms"] for r in range(a.rounds))})
            s = summary[-1]
            print(f"{knob:>9} p{length}: TTFT {s['delta_ms_median']:+.2f} ms ({s['change_median']:+.1%}; rounds "
                  f"{s['change_range'][0]:+.1%} … {s['change_range'][1]:+.1%}) over {s['off_median_ms']:.2f} ms off")
    (a.out / "knob-check.json").write_text(json.dumps({"entry": cfg.id, "rows": rows, "summary": summary,
                                                        "launcher": os.environ.get("LLMGATE_VLLM_PYTHON")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
