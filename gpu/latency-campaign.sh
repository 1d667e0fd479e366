#!/usr/bin/env bash
# Issue 35's campaign on one H200 lease (the embedded default's 8B entry, gpu-vllm-8b): the latency
# and throughput gate compared within one session, then the project's own knobs against it.
#
#   gpu/latency-campaign.sh start        (after the vLLM pack's parts are stashed: carry .gpu-vllm3 and
#                                         .gpu-wheels-slim) installs the engine, copies the tree to
#                                         /root/lat-src and starts `run` in the background (setsid), so
#                                         that the sessions outlive a 10-minute device call
#   gpu/latency-campaign.sh wait S       waits up to S seconds for the end, then copies what there is
#                                         (logs' tails, reports, summaries, the saved baseline) to $OUT
#   gpu/latency-campaign.sh run          the sessions, one after the other:
#     1. aa:       A/A in A/B mode: the same vLLM launcher as sides A and B, K = 3 boots a side
#                  alternating A B A B A B, decode c=1, c=8, TTFT c=1 at 128 and 2,048 prompt tokens,
#                  Poisson loads at 30% and 70% of capacity with goodput; saved as a baseline
#                  (side B's boots, the noise model of both sides)
#     2. prefill:  LLMGATE_PREFILL_SLOWDOWN_US (N µs of GPU work in every step with prefill tokens),
#                  one boot against session 1's stored baseline (this machine)
#     3. frontend: LLMGATE_FRONTEND_DELAY_MS (N ms in vLLM's API server before the engine sees a
#                  request), one boot against it
#   (CAMPAIGN=1: the above, the first lease's; the default, the second lease's:)
#     1. knobs:    gpu/knob-check.py: one boot, an independent client, the admit knob
#                  (LLMGATE_ADMIT_DELAY_US, host work in the prefill path) and the front-end knob
#                  switched on in turns
#     2. ab-admit: A/B mode, A the plain engine, B the admit knob's, K = 3 a side, TTFT at c=1
#     3. stored:   the unchanged engine, one boot, against the committed 0011 (confirmation on)
# env: PREFILL_US (default 1500), FRONTEND_MS (default 1), ADMIT_US (default 5000), BOOTS (default 3),
#      STORED_S (default 450), CAMPAIGN (1, 2 or 3: the second lease's step 3 alone, latency
#      scenarios only; default 2), DRY=1 (print the commands).  Start it without a pipe
#      (`... start > $OUT/start.txt`): the background run keeps a pipe open and the call waits to its limit
set -uo pipefail
cd "$(dirname "$0")/.."
work=/root/latency
files=(plugin/llmgate/scenarios/test_decode.py plugin/llmgate/scenarios/test_concurrency.py
       plugin/llmgate/scenarios/test_latency.py)
common=(-k "gpu-vllm-8b and not arrival" --benchmark-storage=file:///root/lat-baselines -p no:cacheprovider)

session() {    # NAME DEADLINE_S [env assignments...] -- [pytest args...]
  local name=$1 deadline=$2; shift 2
  local envs=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local cmd=(env "${envs[@]}" LLMGATE_MATRIX= LLMGATE_WHEELS="$PWD/.gpu-wheels-slim" LLMGATE_DEADLINE_S="$deadline"
             gpu/run-gate.sh "${files[@]}" "${common[@]}" --llmgate-out "$work/$name" "$@")
  echo "== $name $(date +%T): ${cmd[*]}"
  [ -n "${DRY:-}" ] && return 0
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,clocks_throttle_reasons.active --format=csv,noheader
  local t0=$SECONDS
  "${cmd[@]}" > "$work/$name.log" 2>&1
  echo "== $name rc=$? $((SECONDS - t0)) s"
}

case "${1:-}" in
start)
  mkdir -p "$work"
  LLMGATE_INSTALL_ONLY=1 gpu/run-gate.sh || exit 1            # the pack → /tmp/site-vllm, /tmp/llmgate-launchers
  rm -rf /root/lat-src && mkdir -p /root/lat-src && cp -r . /root/lat-src/ && rm -rf /root/lat-src/.gpu-vllm*
  cd /root/lat-src && setsid nohup env CAMPAIGN="${CAMPAIGN:-2}" bash gpu/latency-campaign.sh run > "$work/campaign.log" 2>&1 < /dev/null &
  sleep 5; cat "$work/campaign.log"; echo started
  ;;
wait)
  end=$((SECONDS + ${2:-540}))
  while [ ! -f "$work/done" ] && [ "$SECONDS" -lt "$end" ]; do sleep 10; done
  cat "$work/campaign.log"
  for f in "$work"/*.log; do echo "---- $f"; grep -v "booting .* s …" "$f" | tail -n 60; done
  for d in "$work"/*/; do
    n=$(basename "$d")
    cp "$d/report.json" "$OUT/$n-report.json" 2>/dev/null; cp "$d/summary.md" "$OUT/$n-summary.md" 2>/dev/null
  done
  for f in "$work"/*.log; do cp "$f" "$OUT/"; done
  cp "$work"/knobs/knob-check.json "$OUT/" 2>/dev/null
  find /root/lat-baselines -name '*.json' -exec cp {} "$OUT/" \; 2>/dev/null
  [ -f "$work/done" ] && { tar czf "$OUT/latency-logs.tgz" -C "$work" $(cd "$work" && ls -d */logs 2>/dev/null) 2>/dev/null; echo CAMPAIGN DONE; }
  ls -la "$OUT"
  ;;
run)
  mkdir -p "$work"
  a=${LLMGATE_VLLM_PYTHON:-/tmp/llmgate-launchers/vllm-python}
  echo "machine: $(PYTHONPATH=plugin python3 -c 'from llmgate.device.hardware import machine_id; print(machine_id())' 2>&1 | tail -1)"
  if [ "${CAMPAIGN:-2}" = 1 ]; then           # 2026-12-03, first lease
    session aa 1250 -- --llmgate-ab "A=$a" --llmgate-ab "B=$a" --llmgate-boots "${BOOTS:-3}" --benchmark-save=h200-latency-aa
    session prefill 300 LLMGATE_PREFILL_SLOWDOWN_US="${PREFILL_US:-1500}" -- --llmgate-boots 1 --benchmark-compare=0001 \
      --llmgate-no-confirm
    session frontend 300 LLMGATE_FRONTEND_DELAY_MS="${FRONTEND_MS:-1}" -- --llmgate-boots 1 --benchmark-compare=0001 \
      --llmgate-no-confirm
  elif [ "${CAMPAIGN:-2}" = 3 ]; then           # the second lease's step 3, latency scenarios only
    files=(plugin/llmgate/scenarios/test_latency.py)
    common=(-k "gpu-vllm-8b" --benchmark-storage="file://$PWD/baselines" -p no:cacheprovider)
    session stored "${STORED_S:-400}" -- --llmgate-boots 1 --benchmark-compare=0011
  else                                          # 2026-12-03, second lease
    # 1. the knobs as an independent client sees them: one boot, each knob switched on in turns
    sw=$work/knob-switch
    l1=$(LLMGATE_KNOB_SWITCH=$sw KNOB=admit gpu/make-slow-launcher.sh "${ADMIT_US:-5000}" "$a")
    l2=$(KNOB=frontend gpu/make-slow-launcher.sh "${FRONTEND_MS:-1}" "$l1")
    echo "== knobs $(date +%T): $l2"
    t0=$SECONDS
    ( eval "$(python3 gpu/prepare.py "$PWD/.gpu-wheels-slim" /tmp/site-llmgate)"
      export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
      LLMGATE_VLLM_PYTHON=$l2 timeout -s INT 300 python3 gpu/knob-check.py --entry gpu-vllm-8b --switch "$sw" \
      --knobs admit frontend --rounds 3 --requests 60 --lengths 128 2048 --out "$work/knobs" ) > "$work/knobs.log" 2>&1
    echo "== knobs rc=$? $((SECONDS - t0)) s"
    # 2. the admit knob (host work in the prefill path) judged in A/B mode: TTFT at c=1 only
    slow=$(KNOB=admit gpu/make-slow-launcher.sh "${ADMIT_US:-5000}" "$a")
    files=(plugin/llmgate/scenarios/test_latency.py)
    common=(-k "gpu-vllm-8b and ttft_c1" --benchmark-storage=file:///root/lat-baselines -p no:cacheprovider)
    session ab-admit 700 -- --llmgate-ab "A=$a" --llmgate-ab "B=$slow" \
      --llmgate-boots "${BOOTS:-3}"
    # 3. the unchanged engine, one boot, against the committed A/A baseline of the first lease (0011),
    #    as a user's `--benchmark-compare` would, confirmation on
    files=(plugin/llmgate/scenarios/test_decode.py plugin/llmgate/scenarios/test_concurrency.py
           plugin/llmgate/scenarios/test_latency.py)
    common=(-k "gpu-vllm-8b and not arrival" --benchmark-storage="file://$PWD/baselines" -p no:cacheprovider)
    session stored "${STORED_S:-450}" -- --llmgate-boots 1 --benchmark-compare=0011
  fi
  touch "$work/done"
  ;;
*)
  sed -n '2,20p' "$0"; exit 2
  ;;
esac
