#!/usr/bin/env bash
# Build llama-server (and llama-quantize, for the GGUF quantizations) with CUDA on the GPU machine,
# from the llama-cpp-python sdist's llama.cpp, with `llmgate install` (the CPU build's code path):
#
#   gpu/build-llama-server-cuda.sh            (from the repository root; prints the build time)
#
# - Source: $LLMGATE_LLAMA_SRC, default .gpu-llama/llama.cpp-src.tar.xz, the slim source pack made
#   here by `PYTHONPATH=plugin python3 -m llmgate install llama-src .gpu-llama/llama.cpp-src.tar.xz`
#   (8 MB; the 77 MB sdist does not fit one carry).  Unpacked once into the build cache.
# - CUDA architectures: $LLMGATE_LLAMA_CUDA_ARCH, default 90 (H200); "off" is the CPU build
#   (the same path, for checking it on a machine without CUDA).
# - Build cache: $LLMGATE_LLAMA_CACHE, default /root/llmgate-llama (outside the working tree, which
#   a carry replaces): llama.cpp/<sdist sha256[:16]>-cuda90/build/bin/llama-server.
# - Only the llama-server and llama-quantize targets, with Ninja, -j $(nproc).  The command stops
#   itself after $LLMGATE_BUILD_DEADLINE_S seconds (default 540, under the device's 10 minutes)
#   and exits 3 saying so: run it again on the same machine and Ninja continues where it stopped.
# - cuBLAS and the driver library are found where the image has them (the toolkit, else torch's
#   nvidia cuBLAS wheel and the driver's libcuda.so.1; see below).  LLMGATE_LLAMA_CONFIGURE_ONLY=1:
#   CMake's configure step only.
# - On success: prints `export LLMGATE_LLAMA_SERVER=...` (gpu/run-gate.sh finds the binary itself).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${LLMGATE_PYTHON:-python3}
src=${LLMGATE_LLAMA_SRC:-.gpu-llama/llama.cpp-src.tar.xz}
arch=${LLMGATE_LLAMA_CUDA_ARCH:-90}
export LLMGATE_CACHE=${LLMGATE_LLAMA_CACHE:-/root/llmgate-llama}
[ -f "$src" ] || [ -d "$src" ] || { echo "no llama.cpp source at $src (see the header of $0)" >&2; exit 2; }
extra=()
if [ "$arch" != off ]; then
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  nvcc --version | tail -1
  cuda_home=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
  # cuBLAS: a toolkit put together from pip wheels may lack it (seen on the CPU host: nvcc, cudart,
  # no cuBLAS); then torch's own nvidia cuBLAS wheel gives headers and libraries, behind a folder
  # of links with the names CMake looks for (libcublas.so) and the binary loads (libcublas.so.13)
  if [ ! -f "$cuda_home/include/cublas_v2.h" ] && [ ! -f "$cuda_home/targets/x86_64-linux/include/cublas_v2.h" ]; then
    cub=$("$py" - <<'PY'
import importlib.util, pathlib
for name in ("nvidia.cu13", "nvidia.cublas", "nvidia.cu12"):
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        continue
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (pathlib.Path(root) / "include" / "cublas_v2.h").is_file():
            print(root)
            raise SystemExit
PY
)
    [ -n "$cub" ] || { echo "no cuBLAS: not in $cuda_home, and no nvidia cuBLAS wheel for $py" >&2; exit 2; }
    shim=${LLMGATE_LLAMA_CACHE:-/root/llmgate-llama}/cublas
    mkdir -p "$shim/lib"
    ln -sfn "$cub/include" "$shim/include"
    for f in "$cub"/lib/libcublas*.so*; do ln -sf "$f" "$shim/lib/$(basename "$f")"; done
    for l in cublas cublasLt; do
      so=$(ls "$shim"/lib/lib$l.so.* | head -1); ln -sf "$so" "$shim/lib/lib$l.so"
    done
    echo "cuBLAS from $cub (links in $shim)"
    extra+=("--cmake-arg=-DCUDA_cublas_LIBRARY=$shim/lib/libcublas.so" "--cmake-arg=-DCUDA_cublasLt_LIBRARY=$shim/lib/libcublasLt.so"
            "--cmake-arg=-DCMAKE_CUDA_FLAGS=-I$shim/include" "--cmake-arg=-DCMAKE_CXX_FLAGS=-I$shim/include"
            "--cmake-arg=-DCMAKE_BUILD_RPATH=$shim/lib")
  fi
  # the driver library for ggml's virtual-memory pool: the toolkit's stub, else the driver's own
  if [ ! -f "$cuda_home/lib64/stubs/libcuda.so" ] && [ ! -f "$cuda_home/targets/x86_64-linux/lib/stubs/libcuda.so" ]; then
    drv=$(ls /usr/lib/x86_64-linux-gnu/libcuda.so /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 2>/dev/null | head -1 || true)
    if [ -n "$drv" ]; then
      extra+=("--cmake-arg=-DCUDA_cuda_driver_LIBRARY=$drv")
      echo "CUDA driver library: $drv"
    else
      extra+=("--cmake-arg=-DGGML_CUDA_NO_VMM=ON")
      echo "no libcuda.so to link: GGML_CUDA_NO_VMM=ON (ggml's legacy memory pool)"
    fi
  fi
fi
cmake --version | head -1
command -v ninja >/dev/null && echo "ninja $(ninja --version)" || echo "no ninja: CMake's default generator"
start=$(date +%s)
set +e
PYTHONPATH=plugin${PYTHONPATH:+:$PYTHONPATH} "$py" -m llmgate install llama-server --source "$src" --cuda "$arch" \
  --jobs "${LLMGATE_BUILD_JOBS:-$(nproc)}" --deadline-s "${LLMGATE_BUILD_DEADLINE_S:-540}" "${extra[@]}" \
  ${LLMGATE_LLAMA_CONFIGURE_ONLY:+--configure-only} 2>&1 | tee /tmp/llmgate-llama-build.out
rc=${PIPESTATUS[0]}
set -e
echo "build call: $(( $(date +%s) - start )) s, exit $rc"
[ $rc -eq 0 ] || exit $rc
[ -n "${LLMGATE_LLAMA_CONFIGURE_ONLY:-}" ] && exit 0
binary=$(tail -1 /tmp/llmgate-llama-build.out)
[ -x "$binary" ] || { echo "no binary named on the build's last line: $binary" >&2; exit 1; }
cat "$(dirname "$(dirname "$(dirname "$binary")")")/llmgate-build.json"
ls -la "$binary" "$(dirname "$binary")/llama-quantize"
"$binary" --version 2>&1 | tail -2
"$binary" --list-devices 2>&1 | tail -3 || true
echo "export LLMGATE_LLAMA_SERVER=$binary"
