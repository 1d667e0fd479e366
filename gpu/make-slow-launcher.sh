#!/usr/bin/env bash
# An engine interpreter whose vLLM is slower by N µs per model step (tests/validation/slowdown):
#   gpu/make-slow-launcher.sh N [BASE_LAUNCHER]   → prints the new launcher's path
# BASE_LAUNCHER defaults to $LLMGATE_VLLM_PYTHON (made by gpu/run-gate.sh), else python3.  Point
# LLMGATE_VLLM_PYTHON (or an entry's `launcher`, which is not part of the fingerprint) at it: the
# entry stays comparable with its baseline, as a slower nightly would be.
set -euo pipefail
us=${1:?usage: make-slow-launcher.sh MICROSECONDS [BASE_LAUNCHER]}
base=${2:-${LLMGATE_VLLM_PYTHON:-$(command -v python3)}}
inject=$(cd "$(dirname "$0")/.." && pwd)/tests/validation/slowdown
out=/tmp/llmgate-slow/vllm-slow${us}-python      # not in /tmp/llmgate-launchers: run-gate.sh exports one variable per launcher there
mkdir -p /tmp/llmgate-slow
line="export PYTHONPATH=\"$inject\${PYTHONPATH:+:\$PYTHONPATH}\" LLMGATE_SLOWDOWN_US=$us"
if head -c 2 "$base" | grep -q '#!' && grep -q '^exec ' "$base"; then
  # a launcher script (gpu/run-gate.sh's): the same, with the slowdown before its exec
  awk -v add="$line" '/^exec /{print add} {print}' "$base" > "$out"
else
  printf '#!/bin/sh\n%s\nexec %s "$@"\n' "$line" "$base" > "$out"
fi
chmod +x "$out"
echo "$out"
