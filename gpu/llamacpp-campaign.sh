#!/usr/bin/env bash
# Issue 36 item 1: llama.cpp with CUDA beside vLLM on one H200, K = 3 boots each, the 8B shape
# (matrices/gpu-llamacpp.toml), with a llama-server built on the CPU machine and carried.
#
#   gpu/llamacpp-campaign.sh pack        here, on the CPU machine: llama-server and llama-quantize of
#                                        gpu/build-llama-server-cuda.sh's build ($LLMGATE_LLAMA_CACHE,
#                                        default /root/llmgate-llama), with their llmgate-build.json,
#                                        into .gpu-llama-cuda1/, 2/ (xz, a 45 MiB part each; git-ignored)
#   gpu/llamacpp-campaign.sh stash       on the GPU machine, one call per carried part (carry
#                                        .gpu-llama-cudaK): keeps it in /root/stash-llama
#   gpu/llamacpp-campaign.sh start       on the GPU machine (after the vLLM pack's parts and the
#                                        binary's are stashed; carry .gpu-vllm3, .gpu-wheels-llama and
#                                        .gpu-model): installs vLLM, unpacks the binary where
#                                        gpu/run-gate.sh finds it, behind a wrapper that gives it the
#                                        CUDA 13 runtime and cuBLAS it links (torch's nvidia wheels, else
#                                        the image's toolkit), checks that it lists the GPU, starts `run` in the
#                                        background (start it without a pipe: `... start > $OUT/start.txt`)
#   gpu/llamacpp-campaign.sh wait S      waits up to S seconds for the end, then copies what there is to $OUT
#   gpu/llamacpp-campaign.sh run         1. the GGUFs (gpu/make-gguf.py: bf16 from the seeded weights,
#                                           Q4_K_M by llama-quantize), timed
#                                        2. one session: h200-8b-bf16 (vLLM), h200-8b-llamacpp-bf16,
#                                           h200-8b-llamacpp-q4_k_m, decode c=1, c=8 and the quantization
#                                           lever, K boots each → baseline h200-8b-llamacpp-k3
# env: BOOTS (default 3), DEADLINE_S (the session's, default 1150), KEXPR (pytest -k, default
#      "not arrival"), SAVE (the baseline's name, default h200-8b-llamacpp-k3), DRY=1 (print the commands)
set -uo pipefail
cd "$(dirname "$0")/.."
work=/root/llamacpp
store=/root/llamacpp-baselines
MATRIX=matrices/gpu-llamacpp.toml
WHEELS=$PWD/.gpu-wheels-llama
files=(plugin/llmgate/scenarios/test_decode.py plugin/llmgate/scenarios/test_concurrency.py
       plugin/llmgate/scenarios/test_lever_quantization.py)
common=(--benchmark-storage="file://$store" -p no:cacheprovider --llmgate-boots "${BOOTS:-3}")
llama_cache=${LLMGATE_LLAMA_CACHE:-/root/llmgate-llama}
. gpu/campaign-lib.sh

# the folders holding libcudart.so.13 and libcublas.so.13 on this machine: the nvidia wheels' of this
# python3 (torch's own, so llama.cpp and vLLM use the same libraries), else the toolkit's
cuda_lib_dirs() {
  local dirs=() lib d
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    d=$( { python3 -c 'import nvidia, os, glob, sys
for p in nvidia.__path__:
    for f in glob.glob(os.path.join(p, "*", "lib", sys.argv[1])): print(f)' "$lib" 2>/dev/null
           ls -d /usr/local/cuda/lib64/$lib /usr/local/cuda/targets/x86_64-linux/lib/$lib 2>/dev/null; } | head -1)
    [ -n "$d" ] && dirs+=("$(dirname "$d")")
  done
  printf '%s\n' "${dirs[@]}" | awk '!seen[$0]++' | paste -sd:
}

case "${1:-}" in
pack)
  shopt -s nullglob
  builds=("$llama_cache"/llama.cpp/*-cuda*/build/bin/llama-server)
  [ "${#builds[@]}" -gt 0 ] || { echo "no CUDA llama-server under $llama_cache (gpu/build-llama-server-cuda.sh)" >&2; exit 2; }
  b=${builds[-1]}
  top=$(dirname "$(dirname "$(dirname "$b")")")
  [ -x "$(dirname "$b")/llama-quantize" ] || { echo "no llama-quantize beside $b" >&2; exit 2; }
  [ -f "$top/llmgate-build.json" ] || { echo "no llmgate-build.json in $top: the build did not finish" >&2; exit 2; }
  rm -rf .gpu-llama-cuda* && tmp=$(mktemp -d)
  rel=llama.cpp/$(basename "$top")
  tar -C "$llama_cache" -cJf - "$rel/llmgate-build.json" "$rel/build/bin/llama-server" "$rel/build/bin/llama-quantize" |
    split -b 45M - "$tmp/part."
  sums=$(cd "$tmp" && sha256sum part.*)
  k=0
  for part in "$tmp"/part.*; do
    k=$((k + 1)); mkdir -p ".gpu-llama-cuda$k"; mv "$part" ".gpu-llama-cuda$k/"; echo "$sums" > ".gpu-llama-cuda$k/SHA256SUMS"
  done
  rmdir "$tmp"; ls -la .gpu-llama-cuda*
  ;;
stash)
  mkdir -p /root/stash-llama && for d in .gpu-llama-cuda*/; do cp "$d"/part.* "$d"/SHA256SUMS /root/stash-llama/; done
  ls /root/stash-llama
  ;;
unpack)    # on the GPU machine, from the parts in /root/stash-llama (start does it)
  [ -f /root/stash-llama/SHA256SUMS ] || { echo "no part of the llama.cpp binary stashed (stash)" >&2; exit 2; }
  (cd /root/stash-llama && sha256sum -c --quiet SHA256SUMS) || { echo "parts missing or damaged" >&2; exit 2; }
  mkdir -p "$llama_cache" && cat /root/stash-llama/part.* | tar -C "$llama_cache" -xJf -
  b=$(ls "$llama_cache"/llama.cpp/*-cuda*/build/bin/llama-server | tail -1)
  libs=$(cuda_lib_dirs)
  echo "llama-server: $b; CUDA libraries: ${libs:-none found}"
  # each binary behind a wrapper that gives it (only it: vLLM keeps its own) those libraries; exec
  # keeps the pid, so the gate's process and memory sampling see llama-server itself
  for t in llama-server llama-quantize; do
    f=$(dirname "$b")/$t
    [ -f "$f.bin" ] || mv "$f" "$f.bin"
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$0.bin" "$@"\n' "$libs" > "$f"
    chmod +x "$f"
  done
  LD_LIBRARY_PATH=$libs ldd "$b.bin" | grep -E "not found|cuda|cublas" || true
  "$b" --version 2>&1 | tail -2
  "$b" --list-devices 2>&1 | tail -3
  ;;
start)
  bash "$0" unpack || exit 1
  campaign_start gpu/llamacpp-campaign.sh BOOTS="${BOOTS:-3}" DEADLINE_S="${DEADLINE_S:-1150}" KEXPR="${KEXPR:-not arrival}" \
    SAVE="${SAVE:-h200-8b-llamacpp-k3}"
  ;;
wait)
  campaign_wait "${2:-540}" "$store"
  ;;
run)
  mkdir -p "$work"
  machine_line
  export LLMGATE_EXTRAS="gpu llamacpp" LLMGATE_CACHE=$PWD/.gpu-model
  LLMGATE_LLAMA_SERVER=$(ls "$llama_cache"/llama.cpp/*-cuda*/build/bin/llama-server | tail -1)
  export LLMGATE_LLAMA_SERVER
  echo "== gguf $(date +%T)"
  t0=$SECONDS
  if [ -z "${DRY:-}" ]; then
    ( eval "$(python3 gpu/prepare.py "$WHEELS" /tmp/site-llmgate)" && python3 gpu/make-model.py "$MATRIX" &&
      PYTHONPATH=plugin${PYTHONPATH:+:$PYTHONPATH} python3 gpu/make-gguf.py "$MATRIX" ) > "$work/gguf.log" 2>&1
    echo "== gguf rc=$? $((SECONDS - t0)) s"; tail -5 "$work/gguf.log"; df -h "$PWD" | tail -1
  fi
  session llamacpp "${DEADLINE_S:-1150}" -- -k "${KEXPR:-not arrival}" --llmgate-reference seed-rtx4070 \
    --benchmark-save="${SAVE:-h200-8b-llamacpp-k3}"
  touch "$work/done"
  ;;
*) sed -n '2,24p' "$0"; exit 2 ;;
esac
