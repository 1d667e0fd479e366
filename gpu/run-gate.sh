#!/usr/bin/env bash
# Prepare and launch the GPU gate on a machine with no network, given a carried engine.
#
#   gpu/run-gate.sh [PYTEST ARGS...]          (from the repository root)
#
# 1. Engine: sources $LLMGATE_ENGINE_ENV (a file holding the engine's `export ...` line) if set;
#    else runs the last part's device-install.sh of a carried pack (.gpu-vllmN/, made by
#    ../shared/gpu/build-pack.sh; it unpacks into /tmp/site-vllm once per machine); else uses
#    whatever engine this python3 has.
# 2. llmgate's dependencies: those this python3 (with the engine's PYTHONPATH) lacks are
#    installed from carried wheels ($LLMGATE_WHEELS, default .gpu-wheels/) into their own
#    folder ($LLMGATE_SITE, default /tmp/site-llmgate), after the engine on PYTHONPATH: torch
#    and the engine's packages are never replaced.  The plugin is used from plugin/ (-p).
# 3. Model: the matrix's config-only model folders go into $LLMGATE_CACHE (default .gpu-model/
#    when carried, else made there by gpu/make-model.py).
# 4. pytest -m gpu --llmgate-matrix $LLMGATE_MATRIX (default matrices/gpu.toml) "$@", under
#    `timeout -s INT $LLMGATE_DEADLINE_S` when that is set (pytest then stops cleanly, stops
#    the servers and still writes its results).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${LLMGATE_PYTHON:-python3}

if [ -n "${LLMGATE_ENGINE_ENV:-}" ]; then
  . "$LLMGATE_ENGINE_ENV"
else
  last=$(ls -d .gpu-vllm*/ .gpu-sglang*/ 2>/dev/null | while read -r d; do [ -f "$d/device-install.sh" ] && echo "$d"; done | head -1 || true)
  if [ -n "$last" ]; then
    bash "$last/device-install.sh" > /tmp/engine-env.sh
    . /tmp/engine-env.sh
  fi
fi
export PYTHONUNBUFFERED=1

site=${LLMGATE_SITE:-/tmp/site-llmgate}
wheels=${LLMGATE_WHEELS:-$root/.gpu-wheels}
mkdir -p "$wheels"
eval "$("$py" gpu/prepare.py "$wheels" "$site")"

if [ -z "${LLMGATE_CACHE:-}" ] && [ -d "$root/.gpu-model/models" ]; then
  export LLMGATE_CACHE=$root/.gpu-model
fi
matrix=${LLMGATE_MATRIX:-matrices/gpu.toml}
"$py" gpu/make-model.py "$matrix"

# the plugin from plugin/ unless an installed copy registers it through its entry point
plugin=(-p llmgate.plugin)
if "$py" -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'llmgate' for e in m.entry_points(group='pytest11')))"; then
  plugin=()
fi

nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.memory --format=csv,noheader || true
"$py" - <<'PY'
import importlib.metadata as m
for d in ("vllm", "sglang", "torch", "transformers", "pytest", "pytest-benchmark", "nvidia-ml-py"):
    try:
        print(f"{d} {m.version(d)}")
    except m.PackageNotFoundError:
        pass
PY

cmd=("$py" -m pytest "${plugin[@]}" -m gpu --llmgate-matrix "$matrix" "$@")
echo "+ ${cmd[*]}"
if [ -n "${LLMGATE_DEADLINE_S:-}" ]; then
  exec timeout -s INT -k 60 "$LLMGATE_DEADLINE_S" "${cmd[@]}"
fi
exec "${cmd[@]}"
