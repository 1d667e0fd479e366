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

MATRIX=
. gpu/campaign-lib.sh

case "${1:-}" in
start)
  campaign_start gpu/latency-campaign.sh CAMPAIGN="${CAMPAIGN:-2}"
  ;;
wait)
  campaign_wait "${2:-540}" /root/lat-baselines
  cp "$work"/knobs/knob-check.json "$OUT/" 2>/dev/null
  ;;
run)
  mkdir -p "$work"
  a=${LLMGATE_VLLM_PYTHON:-/tmp/llmgate-launchers/vllm-python}
  machine_line
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
