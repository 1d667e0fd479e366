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
#     1. aa:    the same vLLM on both sides (an A/A): $AA_K (default decode c=1, c=8, TTFT c=1 at 128 and
#               2,048 tokens and the Poisson loads: the tests of boots of the entry's gate and latency
#               levers but the concurrency sweep and the arrival-rate test); nothing may read regressed
#               or improved; windows in rounds (`[scenarios] duet_rounds`, default 3)
#     2. knobs: side B slowed on purpose (tests/validation/slowdown, gpu/make-slow-launcher.sh):
#               ADMIT_US µs of host work in the engine core in every scheduler step that admits a
#               request (default 600 on an H200, 1,200 on an H100: the prefill path, ~+4% of TTFT at 128 tokens; the forward's
#               prefill knob is graph-captured on the H200 and did not act at 800 µs) and
#               FRONTEND_BLOCK_US µs of busy wait in the API server before the engine sees a request
#               (default 500); TTFT c=1 at 128 tokens only (gpu/duet-knobs.toml), minimum effects
#               lowered to what the duet can see (3% TTFT, engine TTFT and prefill; the front end 5%
#               and 0.3 ms; AA_MIN=1 gives the A/A the same); both must be
#               flagged and attributed
#     3. cores: an A/A of TTFT c=1 at 128 tokens (gpu/duet-knobs.toml) with each side's server pinned to
#               cores of its own (taskset: PIN_A, default 4-9; PIN_B, 10-15) and the client to PIN_CLIENT
#               (0-3): is a boot's own speed (the duet's pair part) where its processes land?
# env: PAIRS (default 3), AA_PAIRS, CORES_PAIRS and KNOBS_PAIRS (each session's boot pairs, default PAIRS), AA_K (-k of
# the A/A), AA_FILES (its scenario files, default decode, concurrency, latency; plugin/llmgate/scenarios:
# all), AA_MATRIX (the A/A's matrix, e.g. gpu/duet-knobs.toml: TTFT at 128 tokens only), ORDER (default "aa knobs"), KNOBS_DEADLINE, AA_DEADLINE and CORES_DEADLINE (seconds, default 700, 1,080 and 700),
# DRY=1
# Run on 2026-12-07 (gpu/runs/2026-12-07-duet-short-h100): every default scenario with the KV sizes learned,
#   TTFT c=1 and Poisson at half length (AA_MATRIX=gpu/duet-short.toml, AA_FILES=plugin/llmgate/scenarios,
#   AA_K=gpu-vllm-8b): 18.8 min on an H100.  Ready: on an H200, the 2026-12-06 selection (default AA_FILES
#   and AA_K) at full length with the sizes learned (no AA_MATRIX; ~19 min est.): is decode's per-boot speed the card's?
#   Since a00b1d5 a c=1 request no longer builds a TLS context (73 ms a request's cycle on that H100 at 128
#   tokens, ~29 ms of it the engine's): its TTFT c=1 rows say how many requests a side now gets in 30 s.
set -uo pipefail
cd "$(dirname "$0")/.."
work=/root/duet
MATRIX=
files=()
common=(-p no:cacheprovider --durations=0)       # each session gives its own --llmgate-boots
. gpu/campaign-lib.sh
base=/tmp/llmgate-launchers/vllm-python
# the knobs' minimum effects: what the duet can see of TTFT c=1 (3%), and the front end at 5% and 0.3 ms
# (its default floor, 0.5 ms, is the knob's own size); AA_MIN=1 gives the A/A the same, as its control
knob_min=(--llmgate-min-effect ttft_c1=0.03 --llmgate-min-effect engine_prefill=0.03
          --llmgate-min-effect engine_ttft=0.03 --llmgate-min-effect frontend_ttft=0.05:0.0003)
aa_k="gpu-vllm-8b and (decode_c1 or test_concurrency or ttft_c1 or poisson_load) and not sweep and not arrival_rate"

case "${1:-}" in
start) campaign_start gpu/duet-campaign.sh PAIRS="${PAIRS:-3}" ADMIT_US="${ADMIT_US:-}" AA_MIN="${AA_MIN:-}" \
         FRONTEND_BLOCK_US="${FRONTEND_BLOCK_US:-500}" AA_K="${AA_K:-$aa_k}" KNOBS_PAIRS="${KNOBS_PAIRS:-${PAIRS:-3}}" \
         AA_DEADLINE="${AA_DEADLINE:-1080}" KNOBS_DEADLINE="${KNOBS_DEADLINE:-700}" \
         AA_PAIRS="${AA_PAIRS:-${PAIRS:-3}}" AA_MATRIX="${AA_MATRIX:-}" AA_FILES="${AA_FILES:-}" ORDER="${ORDER:-aa knobs}" \
         CORES_PAIRS="${CORES_PAIRS:-${PAIRS:-3}}" CORES_DEADLINE="${CORES_DEADLINE:-700}" \
         PIN_A="${PIN_A:-4-9}" PIN_B="${PIN_B:-10-15}" PIN_CLIENT="${PIN_CLIENT:-0-3}" ;;
wait)  campaign_wait "${2:-540}" ;;
run)
  mkdir -p "$work"
  machine_line
  # the prefill-path knob sized to about +4% of the card's TTFT at 128 tokens: ~14 ms on an H200 (600 µs),
  # ~24.5 ms on an H100, where 600 µs moved the engine's prefill by only 0.3-0.55 ms (1,200 µs)
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  case "$card" in *H100*) ADMIT_US=${ADMIT_US:-1200} ;; *) ADMIT_US=${ADMIT_US:-600} ;; esac
  echo "card: $card; admit knob ${ADMIT_US} µs, front-end knob ${FRONTEND_BLOCK_US:-500} µs"
  slow=$(KNOB=admit gpu/make-slow-launcher.sh "${ADMIT_US}" "$base")
  slow=$(KNOB=frontend-block gpu/make-slow-launcher.sh "${FRONTEND_BLOCK_US:-500}" "$slow")
  echo "side B of the knobs: $slow"; grep '^export' "$slow"
  for which in ${ORDER:-aa knobs}; do
    case "$which" in
    aa)
      if [ -n "${AA_FILES:-}" ]; then read -r -a files <<< "$AA_FILES"
      else files=(plugin/llmgate/scenarios/test_decode.py plugin/llmgate/scenarios/test_concurrency.py
                  plugin/llmgate/scenarios/test_latency.py); fi
      MATRIX=${AA_MATRIX:+$PWD/$AA_MATRIX} session aa "${AA_DEADLINE:-1080}" -- -k "${AA_K:-$aa_k}" --llmgate-ab "A=$base" --llmgate-ab "B=$base" \
        --llmgate-accept inconclusive --llmgate-boots "${AA_PAIRS:-${PAIRS:-3}}" ${AA_MIN:+"${knob_min[@]}"} ;;
    knobs)
      files=(plugin/llmgate/scenarios/test_latency.py)
      MATRIX=$PWD/gpu/duet-knobs.toml session knobs "${KNOBS_DEADLINE:-700}" -- -k "gpu-vllm-8b and ttft_c1" \
        --llmgate-ab "A=$base" --llmgate-ab "B=$slow" --llmgate-accept inconclusive \
        --llmgate-boots "${KNOBS_PAIRS:-${PAIRS:-3}}" "${knob_min[@]}" ;;
    cores)
      mkdir -p /tmp/llmgate-cores
      for side in A B; do
        cores=$([ "$side" = A ] && echo "${PIN_A:-4-9}" || echo "${PIN_B:-10-15}")
        printf '#!/bin/sh\nexec taskset -c %s %s "$@"\n' "$cores" "$base" > "/tmp/llmgate-cores/vllm-$side-python"
        chmod +x "/tmp/llmgate-cores/vllm-$side-python"
      done
      echo "cores: A on ${PIN_A:-4-9}, B on ${PIN_B:-10-15}, the client on ${PIN_CLIENT:-0-3} of $(nproc) cores"
      files=(plugin/llmgate/scenarios/test_latency.py)
      PREFIX="taskset -c ${PIN_CLIENT:-0-3}" MATRIX=$PWD/gpu/duet-knobs.toml session cores "${CORES_DEADLINE:-700}" -- \
        -k "gpu-vllm-8b and ttft_c1" --llmgate-ab "A=/tmp/llmgate-cores/vllm-A-python" \
        --llmgate-ab "B=/tmp/llmgate-cores/vllm-B-python" --llmgate-accept inconclusive \
        --llmgate-boots "${CORES_PAIRS:-${PAIRS:-3}}" ;;
    *) echo "ORDER: unknown session '$which' (aa, knobs, cores)"; exit 2 ;;
    esac
  done
  grep -h "llmgate admit delay\|llmgate frontend delay" "$work"/knobs/logs/*.log 2>/dev/null | sort | uniq -c | head -n 12
  touch "$work/done"
  ;;
*) sed -n '2,19p' "$0"; exit 2 ;;
esac
