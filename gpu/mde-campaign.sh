#!/usr/bin/env bash
# Issue 36's campaign on one H200 lease: K = 3 baselines, saved, for the matrices/gpu.toml entries that
# had none, so that gpu/README.md's MDE table has a measured figure for every entry.
#
#   gpu/mde-campaign.sh start      (after the vLLM pack's parts are stashed: carry .gpu-vllm3,
#                                   .gpu-wheels-slim and .gpu-model) installs the engine, copies the tree
#                                   and starts `run` in the background (setsid); start it without a pipe
#                                   (`... start > $OUT/start.txt`)
#   gpu/mde-campaign.sh wait S     waits up to S seconds for the end, then copies the logs' tails,
#                                   reports, summaries and saved baselines to $OUT
#   gpu/mde-campaign.sh run        the sessions, one after the other, each saving its baseline:
#     1. ngram:  the n-gram pair (h200-8b-bf16-v1, the reference on vLLM's V1 model runner, and
#                h200-8b-ngram), the speculative lever, K boots each → h200-ngram-k3
#     2. fp8:    h200-12gb-fp8 (host-bound, 1.7B shape, 12 GB budget), decode c=1 and c=8 → h200-12gb-fp8-k3
#     3. full:   h200-full-bf16 (the same shape, the whole card), decode c=1 and c=8 → h200-full-bf16-k3
# env: BOOTS (default 3), DRY=1 (print the commands)
set -uo pipefail
cd "$(dirname "$0")/.."
work=/root/mde
store=/root/mde-baselines
MATRIX=matrices/gpu.toml
files=()
common=(--benchmark-storage="file://$store" -p no:cacheprovider --llmgate-boots "${BOOTS:-3}")
. gpu/campaign-lib.sh

case "${1:-}" in
start) campaign_start gpu/mde-campaign.sh BOOTS="${BOOTS:-3}" ;;
wait)  campaign_wait "${2:-540}" "$store" ;;
run)
  mkdir -p "$work"
  machine_line
  files=(plugin/llmgate/scenarios/test_lever_speculative.py)
  session ngram 700 -- -k "h200-8b-bf16-v1 or h200-8b-ngram" --llmgate-reference seed-rtx4070 \
    --benchmark-save=h200-ngram-k3
  files=(plugin/llmgate/scenarios/test_decode.py plugin/llmgate/scenarios/test_concurrency.py)
  session fp8 420 -- -k "h200-12gb-fp8 and not arrival" --benchmark-save=h200-12gb-fp8-k3
  session full 420 -- -k "h200-full-bf16 and not arrival" --benchmark-save=h200-full-bf16-k3
  touch "$work/done"
  ;;
*) sed -n '2,17p' "$0"; exit 2 ;;
esac
