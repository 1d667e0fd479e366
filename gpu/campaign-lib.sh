# Shared by the GPU campaigns (gpu/latency-campaign.sh, gpu/mde-campaign.sh): sessions run one after
# the other in the background, so that they outlive a 10-minute device call, and a `wait` call that
# copies what there is to $OUT.  Source it after setting:
#   work   the campaign's folder on the device (logs, reports, the `done` mark)
#   files  the scenario files a session runs; common: the pytest arguments every session takes
#   WHEELS (optional): the carried wheels of llmgate's dependencies (default .gpu-wheels-slim)
# MATRIX (optional): the matrix a session runs (set and empty: the embedded default's GPU entries)
# PREFIX (optional): words put before the session's command (e.g. "taskset -c 0-3")

session() {    # NAME DEADLINE_S [env assignments...] -- [pytest args...]
  local name=$1 deadline=$2; shift 2
  local envs=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local pre=()
  [ -n "${PREFIX:-}" ] && read -r -a pre <<< "$PREFIX"
  local cmd=("${pre[@]}" env "${envs[@]}" LLMGATE_MATRIX="${MATRIX-}" LLMGATE_WHEELS="${WHEELS:-$PWD/.gpu-wheels-slim}" LLMGATE_DEADLINE_S="$deadline"
             gpu/run-gate.sh "${files[@]}" "${common[@]}" --llmgate-out "$work/$name" "$@")
  echo "== $name $(date +%T): ${cmd[*]}"
  [ -n "${DRY:-}" ] && return 0
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,clocks_throttle_reasons.active --format=csv,noheader
  local t0=$SECONDS
  "${cmd[@]}" > "$work/$name.log" 2>&1
  echo "== $name rc=$? $((SECONDS - t0)) s"
}

campaign_start() {    # SCRIPT [env assignments for the run...]: install the engine, copy the tree, start `run`
  local script=$1; shift
  mkdir -p "$work"
  rm -f "$work/done"            # a campaign before this one on the lease left its mark: `wait` would not wait
  LLMGATE_INSTALL_ONLY=1 gpu/run-gate.sh || return 1            # the pack → /tmp/site-vllm, /tmp/llmgate-launchers
  local src=$work-src
  rm -rf "$src" && mkdir -p "$src" && cp -r . "$src/" && rm -rf "$src"/.gpu-vllm*
  cd "$src" && setsid nohup env "$@" bash "$script" run > "$work/campaign.log" 2>&1 < /dev/null &
  sleep 5; cat "$work/campaign.log"; echo started
}

campaign_wait() {    # S [baseline folder]: wait up to S seconds for the end, then copy what there is to $OUT
  local end=$((SECONDS + ${1:-540})) store=${2:-}
  while [ ! -f "$work/done" ] && [ "$SECONDS" -lt "$end" ]; do sleep 10; done
  cat "$work/campaign.log"
  for f in "$work"/*.log; do echo "---- $f"; grep -v "booting .* s …" "$f" | tail -n 60; done
  for d in "$work"/*/; do
    local n
    n=$(basename "$d")
    cp "$d/report.json" "$OUT/$n-report.json" 2>/dev/null; cp "$d/summary.md" "$OUT/$n-summary.md" 2>/dev/null
  done
  for f in "$work"/*.log; do cp "$f" "$OUT/"; done
  [ -n "$store" ] && find "$store" -name '*.json' -exec cp {} "$OUT/" \; 2>/dev/null
  [ -f "$work/done" ] && { tar czf "$OUT/$(basename "$work")-logs.tgz" -C "$work" $(cd "$work" && ls -d */logs 2>/dev/null) 2>/dev/null; echo CAMPAIGN DONE; }
  ls -la "$OUT"
}

machine_line() {
  echo "machine: $(PYTHONPATH=plugin python3 -c 'from llmgate.device.hardware import machine_id; print(machine_id())' 2>&1 | tail -1)"
}
