#!/bin/bash
# One device call: gpu/run-call.sh NAME DEADLINE_S [run-gate.sh args...]: the run, then its saved baselines,
# report, summary and server logs copied to $OUT (the device tool brings back only $OUT)
# env: MATRIX (unset: the embedded default), RESTORE=1 (put /root/saved baselines back first)
set -o pipefail
cd "$(dirname "$0")/.."
name=$1 deadline=$2; shift 2
export LLMGATE_WHEELS=$PWD/.gpu-wheels-slim PYTHONUNBUFFERED=1
[ -d .gpu-model ] && export LLMGATE_CACHE=$PWD/.gpu-model
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,clocks_throttle_reasons.active --format=csv
if [ -n "${RESTORE:-}" ]; then mkdir -p baselines/Linux-CPython-3.12-64bit && cp /root/saved/*.json baselines/Linux-CPython-3.12-64bit/ && ls baselines/Linux-CPython-3.12-64bit/; fi
start=$(date +%s)
LLMGATE_MATRIX=${MATRIX-} LLMGATE_DEADLINE_S=$deadline gpu/run-gate.sh "$@" --llmgate-out /root/lg-$name 2>&1 | tee $OUT/$name.log | grep -v "^llmgate: booting .* s …" | tail -n 160
rc=$?
echo "rc=$rc pytest+install wall=$(( $(date +%s) - start )) s"
mkdir -p /root/saved
for f in baselines/Linux-CPython-3.12-64bit/*h200-*.json; do
  case "$f" in *000[1-5]_*) ;; *) cp "$f" /root/saved/ && cp "$f" $OUT/ ;; esac
done
cp /root/lg-$name/report.json $OUT/$name-report.json 2>/dev/null; cp /root/lg-$name/summary.md $OUT/$name-summary.md 2>/dev/null
tar czf $OUT/$name-logs.tgz -C /root/lg-$name logs 2>/dev/null
if [ -n "${CACHE_OUT:-}" ]; then du -sh /root/.cache/vllm 2>/dev/null; tar czf $OUT/vllm-cache.tgz -C /root/.cache vllm 2>/dev/null; ls -la $OUT/vllm-cache.tgz; fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,memory.used --format=csv,noheader
ls -la $OUT
