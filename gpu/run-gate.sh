#!/usr/bin/env bash
# Prepare and launch the GPU gate on a machine with no network, given a carried engine.
#
#   gpu/run-gate.sh [PYTEST ARGS...]          (from the repository root)
#
# 1. Engines: sources $LLMGATE_ENGINE_ENV (a file holding the engine's `export ...` line) if set;
#    else installs every carried pack (.gpu-vllmN/, .gpu-sglangN/, made by
#    ../shared/gpu/build-pack.sh; the last part's device-install.sh unpacks it into
#    /tmp/site-ENGINE once per machine, from the earlier parts stashed in /root/stash-ENGINE or
#    /root/stash) and puts each behind its own interpreter, /tmp/llmgate-launchers/ENGINE-python,
#    named by $LLMGATE_VLLM_PYTHON / $LLMGATE_SGLANG_PYTHON: the engines never share a
#    PYTHONPATH (SGLang pins an older transformers than vLLM), nor share pytest's; else uses
#    whatever engine this python3 has.  LLMGATE_INSTALL_ONLY=1: stop after this step.
# 2. llmgate's dependencies: those this python3 (with the engine's PYTHONPATH) lacks are
#    installed from carried wheels ($LLMGATE_WHEELS, default .gpu-wheels/) into their own
#    folder ($LLMGATE_SITE, default /tmp/site-llmgate), after the engine on PYTHONPATH: torch
#    and the engine's packages are never replaced.  The plugin is used from plugin/ (-p).
# 3. Model: the matrix's config-only model folders go into $LLMGATE_CACHE (default .gpu-model/
#    when carried, else made there by gpu/make-model.py).
#    llama.cpp: $LLMGATE_LLAMA_SERVER, else the CUDA build of gpu/build-llama-server-cuda.sh on this
#    machine; LLMGATE_EXTRAS="gpu llamacpp" also installs gguf (GGUFs are written here).
#    LLMGATE_SLOWDOWN_US=N: vLLM's launcher is wrapped to be N µs slower per model step
#    (gpu/make-slow-launcher.sh: the gate's own sensitivity check; the fingerprint stays the same);
#    LLMGATE_PREFILL_SLOWDOWN_US=N: N µs per step with prefill tokens; LLMGATE_FRONTEND_DELAY_MS=N:
#    N ms in vLLM's API server before the engine sees a request (issue 23); LLMGATE_ADMIT_DELAY_US=N:
#    N µs of host work in vLLM's engine core in every step that admits a request (issue 35).
# 4. pytest -m gpu --llmgate-matrix $LLMGATE_MATRIX (default matrices/gpu.toml; set and empty: no
#    --llmgate-matrix, the embedded default's GPU entries) "$@", under
#    `timeout -s INT $LLMGATE_DEADLINE_S` when that is set (pytest then stops cleanly, stops
#    the servers and still writes its results).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${LLMGATE_PYTHON:-python3}

# NVLink multicast stays off on shared multi-GPU hosts, whatever an engine's environment says
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -n "${LLMGATE_ENGINE_ENV:-}" ]; then
  . "$LLMGATE_ENGINE_ENV"
else
  launchers=/tmp/llmgate-launchers
  mkdir -p "$launchers"
  for last in $(ls -d .gpu-vllm*/ .gpu-sglang*/ 2>/dev/null); do
    [ -f "$last/device-install.sh" ] || continue
    engine=$(cat "$last/engine")
    if [ ! -f "/tmp/site-$engine/$engine/__init__.py" ] && [ -d "/root/stash-$engine" ]; then
      rm -rf /root/stash && mv "/root/stash-$engine" /root/stash
    fi
    bash "$last/device-install.sh" > "$launchers/$engine.env"
    { echo '#!/bin/sh'; echo 'unset PYTHONPATH'; cat "$launchers/$engine.env"
      echo 'export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1'
      echo "exec $(command -v "$py") \"\$@\""; } > "$launchers/$engine-python"
    chmod +x "$launchers/$engine-python"
  done
  # launchers made by an earlier call on this machine stay usable without carrying the packs again
  for launcher in "$launchers"/*-python; do
    [ -x "$launcher" ] || continue
    engine=$(basename "$launcher" -python)
    var=LLMGATE_$(echo "$engine" | tr a-z A-Z)_PYTHON
    export "$var=$launcher"
    echo "$engine: $launcher (\$$var)"
  done
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
fi
export PYTHONUNBUFFERED=1
# llama.cpp: the CUDA llama-server gpu/build-llama-server-cuda.sh built on this machine, unless one is named
if [ -z "${LLMGATE_LLAMA_SERVER:-}" ]; then
  for b in "${LLMGATE_LLAMA_CACHE:-/root/llmgate-llama}"/llama.cpp/*-cuda*/build/bin/llama-server; do
    [ -x "$b" ] && [ -f "$(dirname "$(dirname "$(dirname "$b")")")/llmgate-build.json" ] || continue
    export LLMGATE_LLAMA_SERVER=$b
    echo "llamacpp: $b (\$LLMGATE_LLAMA_SERVER)"
  done
fi
# the gate's own sensitivity checks (tests/validation/slowdown): vLLM made slower by N µs per model
# step (LLMGATE_SLOWDOWN_US), by N µs per step with prefill tokens (LLMGATE_PREFILL_SLOWDOWN_US,
# above LLMGATE_PREFILL_THRESHOLD_TOKENS, default 32) or by N ms in its API server before the engine
# sees a request (LLMGATE_FRONTEND_DELAY_MS); several set: their launchers stack
for knob in step:LLMGATE_SLOWDOWN_US prefill:LLMGATE_PREFILL_SLOWDOWN_US frontend:LLMGATE_FRONTEND_DELAY_MS \
            admit:LLMGATE_ADMIT_DELAY_US; do
  var=${knob#*:}
  [ -n "${!var:-}" ] || continue
  LLMGATE_VLLM_PYTHON=$(KNOB=${knob%%:*} gpu/make-slow-launcher.sh "${!var}")
  export LLMGATE_VLLM_PYTHON
  unset "$var"
  echo "vllm slowed by its launcher: $LLMGATE_VLLM_PYTHON"
done
# install the carried engines now and run later (a call's carry limit may not fit every part with the run)
[ -n "${LLMGATE_INSTALL_ONLY:-}" ] && exit 0

site=${LLMGATE_SITE:-/tmp/site-llmgate}
wheels=${LLMGATE_WHEELS:-$root/.gpu-wheels}
mkdir -p "$wheels"
eval "$("$py" gpu/prepare.py "$wheels" "$site")"

if [ -z "${LLMGATE_CACHE:-}" ] && [ -d "$root/.gpu-model/models" ]; then
  export LLMGATE_CACHE=$root/.gpu-model
fi
# LLMGATE_MATRIX= (set, empty): the embedded default, as `pytest -m gpu` with no --llmgate-matrix
# (its config-only models are made on first use)
matrix=${LLMGATE_MATRIX-matrices/gpu.toml}
matrix_opt=()
if [ -n "$matrix" ]; then
  "$py" gpu/make-model.py "$matrix"
  matrix_opt=(--llmgate-matrix "$matrix")
fi

# the plugin from plugin/ unless an installed copy registers it through its entry point
plugin=(-p llmgate.plugin)
if "$py" -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'llmgate' for e in m.entry_points(group='pytest11')))"; then
  plugin=()
fi

nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.memory --format=csv,noheader || true
"$py" - <<'PY'
import importlib.metadata as m
for d in ("torch", "transformers", "pytest", "pytest-benchmark", "pytest-xdist", "nvidia-ml-py"):
    try:
        print(f"{d} {m.version(d)}")
    except m.PackageNotFoundError:
        pass
PY

for v in LLMGATE_VLLM_PYTHON LLMGATE_SGLANG_PYTHON; do
  [ -n "${!v:-}" ] && { "${!v}" -c "import importlib.metadata as m
for d in ('vllm', 'sglang', 'transformers'):
    try: print('$v:', d, m.version(d))
    except m.PackageNotFoundError: pass" || true; }
done
cmd=("$py" -m pytest "${plugin[@]}" -m gpu "${matrix_opt[@]}" "$@")
echo "+ ${cmd[*]}"
if [ -n "${LLMGATE_DEADLINE_S:-}" ]; then
  exec timeout -s INT -k 60 "$LLMGATE_DEADLINE_S" "${cmd[@]}"
fi
exec "${cmd[@]}"
