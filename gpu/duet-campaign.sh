#!/usr/bin/env bash
# Issue 46's campaign on one H200 lease: duet mode (--llmgate-ab, both sides resident on the card, every
# measurement interleaved between them) on the embedded default's gpu-vllm-8b, K boot pairs.
#
#   gpu/duet-campaign.sh start      (after the vLLM pack's first parts are stashed: carry .gpu-vllm3 and
#                                    .gpu-wheels-slim) installs the engine, copies the tree and starts
#                                    `run` in the background (setsid); start it without a pipe
#   gpu/duet-campaign.sh wait S     waits up to S seconds for the end, then copies the logs' tails,
#                                    reports and summaries to $OUT
#   gpu/duet-campaign.sh run        the sessions, one after the other:
#     1. aa:    the same vLLM on both sides (an A/A): decode c=1, c=8, TTFT c=1 at 128 and 2,048 tokens,
#               and $AA_EXTRA (default: the Poisson loads); nothing may read regressed or improved
#     2. knobs: side B slowed on purpose (tests/validation/slowdown, gpu/make-slow-launcher.sh):
#               PREFILL_US µs more work in every step that prefills more than 32 tokens (default 800:
#               ~+4% of TTFT at 128 tokens) and FRONTEND_MS ms in the API server before the engine
#               sees a request (default 0.6); TTFT c=1 only, minimum effects lowered to what the duet
#               can see (3% TTFT and prefill); both must be flagged and attributed
# env: PAIRS (default 3), AA_K (-k of the A/A, default "gpu-vllm-8b and not arrival"), AA_DEADLINE and
# KNOBS_DEADLINE (seconds, default 1050 and 520: one lease holds both), DRY=1
set -uo pipefail
cd "$(dirname "$0")/.."
work=/root/duet
MATRIX=
files=()
common=(-p no:cacheprovider --llmgate-boots "${PAIRS:-3}" --durations=0)
. gpu/campaign-lib.sh
base=/tmp/llmgate-launchers/vllm-python

case "${1:-}" in
start) campaign_start gpu/duet-campaign.sh PAIRS="${PAIRS:-3}" PREFILL_US="${PREFILL_US:-800}" \
         FRONTEND_MS="${FRONTEND_MS:-0.6}" AA_K="${AA_K:-gpu-vllm-8b and not arrival}" \
         AA_DEADLINE="${AA_DEADLINE:-1050}" KNOBS_DEADLINE="${KNOBS_DEADLINE:-520}" ;;
wait)  campaign_wait "${2:-540}" ;;
run)
  mkdir -p "$work"
  machine_line
  files=(plugin/llmgate/scenarios/test_decode.py plugin/llmgate/scenarios/test_concurrency.py
         plugin/llmgate/scenarios/test_latency.py)
  session aa "${AA_DEADLINE:-1050}" -- -k "${AA_K:-gpu-vllm-8b and not arrival}" --llmgate-ab "A=$base" --llmgate-ab "B=$base"
  slow=$(KNOB=prefill gpu/make-slow-launcher.sh "${PREFILL_US:-800}" "$base")
  slow=$(KNOB=frontend gpu/make-slow-launcher.sh "${FRONTEND_MS:-0.6}" "$slow")
  echo "side B of the knobs: $slow"
  files=(plugin/llmgate/scenarios/test_latency.py)
  session knobs "${KNOBS_DEADLINE:-520}" -- -k "gpu-vllm-8b and ttft_c1" --llmgate-ab "A=$base" --llmgate-ab "B=$slow" \
    --llmgate-min-effect ttft_c1=0.03 --llmgate-min-effect engine_prefill=0.03 --llmgate-min-effect engine_ttft=0.03
  touch "$work/done"
  ;;
*) sed -n '2,19p' "$0"; exit 2 ;;
esac
