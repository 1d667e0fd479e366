#!/usr/bin/env bash
# Issue 36 item 4: the seed's engine comparison on its own terms on one H200 (matrices/gpu-engines-seed.toml):
# vLLM, then SGLang, a 4B-class shape with online FP8 weights at a 12 GB budget, 8 users at once,
# K boots each in one session; SGLang's TTFT p95 and aggregate tok/s ÷ vLLM's (same session), the
# seed's figures beside them (--llmgate-reference seed-rtx4070).
#
#   gpu/engines-seed-campaign.sh start   after both packs' parts are stashed and SGLang installed
#                                        (gpu/README.md: the calls); carry .gpu-vllm3, .gpu-wheels-slim
#                                        and .gpu-model: installs vLLM, copies the tree and starts `run`
#                                        in the background (start it without a pipe: `... start > $OUT/start.txt`)
#   gpu/engines-seed-campaign.sh wait S  waits up to S seconds for the end, then copies what there is to $OUT
#   gpu/engines-seed-campaign.sh run     1. save: both entries, test_concurrency (c=8), K boots each
#                                           → baseline h200-engines-seed-k3
#                                        2. aa (if AA_S > 0): the same again, compared with 1 (an A/A of
#                                           the ratio: what the gate calls a change when nothing changed)
# env: BOOTS (default 3), SAVE_S (default 1100), AA_S (default 0), DRY=1 (print the commands)
set -uo pipefail
cd "$(dirname "$0")/.."
work=/root/engines-seed
store=/root/engines-seed-baselines
MATRIX=matrices/gpu-engines-seed.toml
files=(plugin/llmgate/scenarios/test_concurrency.py)
common=(--benchmark-storage="file://$store" -p no:cacheprovider --llmgate-boots "${BOOTS:-3}" -k "not arrival"
        --llmgate-reference seed-rtx4070)
. gpu/campaign-lib.sh

case "${1:-}" in
start) campaign_start gpu/engines-seed-campaign.sh BOOTS="${BOOTS:-3}" SAVE_S="${SAVE_S:-1100}" AA_S="${AA_S:-0}" ;;
wait)  campaign_wait "${2:-540}" "$store" ;;
run)
  mkdir -p "$work"
  machine_line
  session save "${SAVE_S:-1100}" -- --benchmark-save=h200-engines-seed-k3
  if [ "${AA_S:-0}" -gt 0 ]; then
    session aa "$AA_S" -- --benchmark-compare=0001
  fi
  touch "$work/done"
  ;;
*) sed -n '2,17p' "$0"; exit 2 ;;
esac
