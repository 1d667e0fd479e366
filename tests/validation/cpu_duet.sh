#!/usr/bin/env bash
# Issue 46's CPU acceptance: the embedded default (real vLLM on the CPU, the tiny model) in duet mode,
# K = 2 boot pairs, in sessions of its own (not run by CI; the machine should be otherwise idle):
#
#   tests/validation/cpu_duet.sh aa N        N A/A sessions (default 3): the same interpreter on both
#                                            sides; nothing may read regressed or improved
#   tests/validation/cpu_duet.sh knob US     one session whose side B does US µs more work in every
#                                            model forward (tests/validation/slowdown, the step knob;
#                                            default 500: ~10% of the tiny model's decode step here);
#                                            KNOB=frontend-block: US µs of busy wait in the API server
#                                            per request instead (5000: ~10% of TTFT c=1 at 128 tokens)
#   tests/validation/cpu_duet.sh table       every session's verdicts and MDEs, one row per metric
#
# env: PY (the engine's and pytest's interpreter, default .tox/gate/bin/python), OUT (default
# .llmgate/cpu-duet), PAIRS (default 2), K (a -k of the packaged scenarios, default all of them)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=${PY:-$repo/.tox/gate/bin/python}
out=${OUT:-$repo/.llmgate/cpu-duet}
pairs=${PAIRS:-2}
mkdir -p "$out"

session() {   # NAME B_LAUNCHER
  local name=$1 b=$2 dir="$out/$1" t0
  t0=$(date +%s)
  echo "== $name $(date -u +%H:%M:%S): A=$py B=$b, $pairs boot pairs"
  (cd "$out" && "$py" -m pytest --pyargs llmgate.scenarios -m "engine and not gpu" -p no:cacheprovider \
     ${K:+-k "$K"} --llmgate-ab "A=$py" --llmgate-ab "B=$b" --llmgate-boots "$pairs" \
     --llmgate-accept inconclusive --llmgate-out "$dir" > "$dir.log" 2>&1)
  echo "== $name rc=$? $(( $(date +%s) - t0 )) s: $(grep -m1 -o '[0-9]* regressed · [0-9]* improved[^|]*' "$dir/summary.md" 2>/dev/null)"
}

case "${1:-}" in
aa)
  n=${2:-3}
  for i in $(seq 1 "$n"); do session "aa$(date -u +%m%d-%H%M)-$i" "$py"; done ;;
knob)
  us=${2:-500}
  case ${KNOB:-step} in
    step) var=LLMGATE_SLOWDOWN_US ;;
    frontend-block) var=LLMGATE_FRONTEND_BLOCK_US ;;
    *) echo "cpu_duet.sh: KNOB is step or frontend-block" >&2; exit 2 ;;
  esac
  slow="$out/vllm-${KNOB:-step}$us-python"
  printf '#!/bin/sh\nexport PYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" %s=%s\nexec "%s" "$@"\n' \
    "$repo/tests/validation/slowdown" "$var" "$us" "$py" > "$slow"
  chmod +x "$slow"
  session "knob-${KNOB:-step}$us-$(date -u +%m%d-%H%M)" "$slow" ;;
table)
  "$py" - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
runs = sorted(p for p in out.iterdir() if (p / "report.json").is_file())
rows: dict[str, dict[str, str]] = {}
for run in runs:
    doc = json.loads((run / "report.json").read_text())
    for v in doc["verdicts"]:
        if v.get("mde") is None:
            continue
        cell = f"{v['status']} {v.get('change') or 0:+.1%} (MDE {v['mde']:.1%})"
        rows.setdefault(f"{v['config']} {v['key']}", {})[run.name] = cell
print("| metric | " + " | ".join(r.name for r in runs) + " |")
print("|---|" + "---|" * len(runs))
for key in sorted(rows):
    print(f"| {key} | " + " | ".join(rows[key].get(r.name, "—") for r in runs) + " |")
EOF
  ;;
*) sed -n '2,15p' "$0"; exit 2 ;;
esac
