"""How often does the verdict cry wolf, and how often does it catch a real slowdown?

Boots the same vLLM configuration in N+1 fresh sessions (a new server each), measures decode
tok/s and TTFT at c=1 in each, directly and through the loopback delay proxy (a fixed delay
per decode step: a real, injected slowdown).  Session 0 is the stored baseline; every later
session is judged against it twice: direct (A/A: any "regressed" is a false alarm) and
through the proxy (injected: "regressed" is a detection).  Printed for two sets of minimum
effects: the metric defaults and the wide ones of the embedded CPU matrix.

    python tests/validation/repeat_verdicts.py --sessions 10 --delay-ms 3

Not a test (it takes ~1 minute a session); its output is what an issue note quotes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from delay_proxy import DelayProxy  # noqa: E402
from llmgate.config import matrix  # noqa: E402
from llmgate.core import metrics
from llmgate.analysis import stats
from llmgate.load.workloads import PromptMaker, decode_run  # noqa: E402
from llmgate.process.server import Server  # noqa: E402
from llmgate.analysis.verdict import REGRESSED, judge  # noqa: E402

ENTRY = """
[[matrix]]
id = "cpu-validate"
engine = "vllm"
model = "tiny"
dtype = "bfloat16"
max_model_len = 1024
kv_cache_bytes = 200_000_000
"""
EFFECTS = {"metric defaults": {"decode_tok_s": metrics.DECODE_TOK_S.min_effect, "ttft_c1": metrics.TTFT_C1.min_effect},
           "CPU matrix (wide)": {"decode_tok_s": 0.5, "ttft_c1": 1.0}}


def measure(handle, prompts, repeats: int) -> dict[str, list[float]]:
    res = decode_run(handle, prompts, 64, 128, repeats, 1, 120, f"validate-{time.monotonic_ns()}")
    if res.failures:
        raise RuntimeError(res.failures[0].error)
    return {"decode_tok_s": [s.decode_tok_s for s in res.ok], "ttft_c1": [s.ttft for s in res.ok]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10, help="sessions judged against the baseline session")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--delay-ms", type=float, default=3.0, help="added to every decode step by the proxy")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmgate-validate-"))
    (work / "llmgate.toml").write_text(ENTRY)
    m = matrix.load(work / "llmgate.toml")
    cfg = m.entries[0]
    prompts = PromptMaker(m.tokenizer_folder(cfg))
    runs = []
    for k in range(args.sessions + 1):
        server = Server(cfg, m, work / "logs", boot_number=k + 1)
        h = server.start()
        try:
            direct = measure(h, prompts, args.repeats)
            proxy = DelayProxy(h.base_url, args.delay_ms / 1000)
            delayed = measure(dataclasses.replace(h, base_url=proxy.start()), prompts, args.repeats)
            proxy.stop()
        finally:
            server.stop()
        runs.append((direct, delayed))
        print(f"session {k}: boot {h.startup_s:.1f} s, decode {stats.median(direct['decode_tok_s']):.1f} tok/s "
              f"(delayed {stats.median(delayed['decode_tok_s']):.1f}), TTFT {stats.median(direct['ttft_c1']) * 1000:.1f} ms "
              f"(delayed {stats.median(delayed['ttft_c1']) * 1000:.1f})", flush=True)
    base = runs[0][0]
    for name, effects in EFFECTS.items():
        print(f"\nminimum effects: {name} {effects}")
        for key, metric in (("decode_tok_s", metrics.DECODE_TOK_S), ("ttft_c1", metrics.TTFT_C1)):
            aa = [judge(metric, key, cfg.id, d[key], base[key], effects[key]) for d, _ in runs[1:]]
            inj = [judge(metric, key, cfg.id, x[key], base[key], effects[key]) for _, x in runs[1:]]
            fa = sum(v.status == REGRESSED for v in aa)
            det = sum(v.status == REGRESSED for v in inj)
            print(f"  {key}: A/A false alarms {fa}/{len(aa)} (changes {', '.join(f'{v.change:+.0%}' for v in aa)}); "
                  f"injected detected {det}/{len(inj)} (changes {', '.join(f'{v.change:+.0%}' for v in inj)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
