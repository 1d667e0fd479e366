#!/usr/bin/env bash
# An engine interpreter whose vLLM is made slower on purpose (tests/validation/slowdown):
#   gpu/make-slow-launcher.sh N [BASE_LAUNCHER]              → prints the new launcher's path
#   KNOB=prefill gpu/make-slow-launcher.sh N [BASE_LAUNCHER]
#   KNOB=frontend gpu/make-slow-launcher.sh N [BASE_LAUNCHER]
#   KNOB=admit gpu/make-slow-launcher.sh N [BASE_LAUNCHER]
#   KNOB=frontend-block gpu/make-slow-launcher.sh N [BASE_LAUNCHER]
# KNOB (default step) picks what N is:
#   step      N µs more work in every model step (LLMGATE_SLOWDOWN_US)     → vllm-slowN-python
#   prefill   N µs more work in every step of more than
#             $LLMGATE_PREFILL_THRESHOLD_TOKENS (default 32) input tokens
#             (LLMGATE_PREFILL_SLOWDOWN_US; the threshold is written into
#             the launcher when set here)                                  → vllm-prefillN-python (-tT when set)
#   frontend  N ms in the API server before the engine sees a request
#             (LLMGATE_FRONTEND_DELAY_MS)                                  → vllm-frontendNms-python
#   frontend-block  N µs of busy wait in the API server before the engine
#             sees a request, blocking its loop: any size, for c=1
#             (LLMGATE_FRONTEND_BLOCK_US)                                  → vllm-frontendblockN-python
#   admit     N µs of host work in the engine core in every scheduler step
#             that admits a request (LLMGATE_ADMIT_DELAY_US)               → vllm-admitN-python
# LLMGATE_KNOB_SWITCH=FILE set here is written into the launcher too (-switch in its name): the
# knobs then act only while FILE names them (gpu/knob-check.py).
# in /tmp/llmgate-slow/.  BASE_LAUNCHER defaults to $LLMGATE_VLLM_PYTHON (made by gpu/run-gate.sh),
# else python3; a launcher made here may be the base of another (the knobs stack).  Point
# LLMGATE_VLLM_PYTHON (or an entry's `launcher`, which is not part of the fingerprint) at it: the
# entry stays comparable with its baseline, as a slower nightly would be.
set -euo pipefail
usage="usage: [KNOB=step|prefill|frontend|frontend-block|admit] make-slow-launcher.sh N [BASE_LAUNCHER]"
n=${1:?$usage}
base=${2:-${LLMGATE_VLLM_PYTHON:-$(command -v python3)}}
inject=$(cd "$(dirname "$0")/.." && pwd)/tests/validation/slowdown
case ${KNOB:-step} in
  step)     var=LLMGATE_SLOWDOWN_US name=slow$n ;;
  prefill)  var=LLMGATE_PREFILL_SLOWDOWN_US name=prefill$n ;;
  frontend) var=LLMGATE_FRONTEND_DELAY_MS name=frontend${n}ms ;;
  frontend-block) var=LLMGATE_FRONTEND_BLOCK_US name=frontendblock$n ;;
  admit)    var=LLMGATE_ADMIT_DELAY_US name=admit$n ;;
  *) echo "make-slow-launcher.sh: unknown KNOB '$KNOB' (step, prefill, frontend, frontend-block or admit)" >&2; echo "$usage" >&2; exit 2 ;;
esac
settings="$var=$n"
if [ "${KNOB:-step}" = prefill ] && [ -n "${LLMGATE_PREFILL_THRESHOLD_TOKENS:-}" ]; then
  settings="$settings LLMGATE_PREFILL_THRESHOLD_TOKENS=$LLMGATE_PREFILL_THRESHOLD_TOKENS"
  name=$name-t$LLMGATE_PREFILL_THRESHOLD_TOKENS
fi
if [ -n "${LLMGATE_KNOB_SWITCH:-}" ]; then
  settings="$settings LLMGATE_KNOB_SWITCH=$LLMGATE_KNOB_SWITCH"
  name=$name-switch
fi
out=/tmp/llmgate-slow/vllm-$name-python      # not in /tmp/llmgate-launchers: run-gate.sh exports one variable per launcher there
mkdir -p /tmp/llmgate-slow
if [ "$base" -ef "$out" ]; then
  echo "make-slow-launcher.sh: $out would overwrite its own base; name another BASE_LAUNCHER" >&2; exit 2
fi
line="export PYTHONPATH=\"$inject\${PYTHONPATH:+:\$PYTHONPATH}\" $settings"
if head -c 2 "$base" | grep -q '#!' && grep -q '^exec ' "$base"; then
  # a launcher script (gpu/run-gate.sh's): the same, with the slowdown before its exec
  awk -v add="$line" '/^exec /{print add} {print}' "$base" > "$out"
else
  printf '#!/bin/sh\n%s\nexec %s "$@"\n' "$line" "$base" > "$out"
fi
chmod +x "$out"
echo "$out"
