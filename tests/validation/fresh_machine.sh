#!/usr/bin/env bash
# What a new user does with llmgate (issue 34), not run by CI: clone the repository into a temporary
# folder, start from empty caches (LLMGATE_CACHE and pip's cache dir each an empty folder, a fresh tox
# workdir in the fresh clone, no llama-server on PATH nor in $LLMGATE_LLAMA_SERVER, no other LLMGATE_*
# setting), and run the README's Quick start commands verbatim, as they stand in README.md's first code
# block under "Quick start" (read the way ../shared/hooks/before-stop reads them), one after the other.
# Nothing .ci/run adds (OpenBLAS, its background llama-server build, its steps) is used.
#
#   tests/validation/fresh_machine.sh [REPO] [--keep]     REPO: a path or URL (default: this checkout)
#   tests/validation/fresh_machine.sh --print-commands    the commands it would run, one a line
#
# Prints each command's wall time and exit status, then one final line; exits non-zero if either
# command failed.  Each command's output goes to a log in a folder of its own (printed, kept); the
# clone and the caches are removed at the end unless --keep.  On a 2-core machine: 30+ minutes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && git rev-parse --show-toplevel)

# the README's Quick start commands: the first code block under a "Quick start" heading, without
# "$ " prompts, comments and blank lines (as ../shared/hooks/before-stop reads them)
quick_start_commands() {
  awk 'BEGIN{h=0;inb=0;done=0}
    /^#+ .*[Qq]uick ?[Ss]tart/ {h=1; next}
    h && !done && /^```/ { if (inb) {done=1} else {inb=1}; next }
    h && inb && !done { print }' "$1" | sed -e 's/^[$] //' | grep -v '^\s*#' | grep -v '^\s*$'
}

repo=$here keep=0
for arg in "$@"; do
  case "$arg" in
    --print-commands) quick_start_commands "$here/README.md"; exit $? ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) repo=$arg ;;
  esac
done

work=$(mktemp -d /tmp/llmgate-fresh.XXXXXX)
# a llama-server build that command 2 started in the background (its own session, the build lock's
# pid) and left running, when it stopped early: stopped before its folder goes (--keep: left to end)
cleanup() {
  local lock="$work/llmgate-cache/llama.cpp/build.lock" pid
  [ "$keep" = 1 ] && return
  if [ -f "$lock" ] && ! flock -n -s "$lock" true 2>/dev/null; then
    pid=$(tr -dc 0-9 <"$lock")
    if [ -n "$pid" ]; then
      echo "::: stopping the llama-server build left running (session $pid)"
      pkill -TERM -s "$pid" 2>/dev/null
      flock -w 30 -s "$lock" true 2>/dev/null
    fi
  fi
  rm -rf "$work"
}
trap cleanup EXIT
echo "::: fresh machine: $repo cloned into $work/llmgate"
git clone -q "$repo" "$work/llmgate" || { echo "::: fresh machine: FAIL (git clone $repo)"; exit 2; }
cd "$work/llmgate" || exit 2
echo "::: commit $(git rev-parse --short HEAD) ($(git log -1 --format=%s | cut -c1-80))"

mapfile -t cmds < <(quick_start_commands README.md)
if [ "${#cmds[@]}" -ne 2 ]; then
  echo "::: fresh machine: FAIL (the README's Quick start holds ${#cmds[@]}, not 2 commands)"
  exit 2
fi

logs=$(mktemp -d /tmp/llmgate-fresh-logs.XXXXXX)
echo "::: logs in $logs"

# empty caches and a new user's environment
for v in $(compgen -e | grep '^LLMGATE_'); do unset "$v"; done
unset TOX_WORK_DIR PIP_NO_CACHE_DIR VIRTUAL_ENV
export LLMGATE_CACHE="$work/llmgate-cache" PIP_CACHE_DIR="$work/pip-cache"
mkdir -p "$LLMGATE_CACHE" "$PIP_CACHE_DIR"
path=
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ ! -x "$d/llama-server" ] && path=${path:+$path:}$d
done
export PATH=$path
if command -v llama-server >/dev/null; then echo "::: fresh machine: FAIL (llama-server still on PATH)"; exit 2; fi

now() { date +%s.%N; }
t_all=$(now) failed=0 summary=()
for i in "${!cmds[@]}"; do
  n=$((i + 1))
  echo "::: command $n: ${cmds[$i]}   ($(date -u +%H:%M:%S) UTC; output: $logs/command$n.log)"
  t0=$(now)
  bash -c "${cmds[$i]}" >"$logs/command$n.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')
  tail -n 5 "$logs/command$n.log" | sed 's/^/    /'
  echo "::: command $n: exit status $rc in $secs s"
  summary+=("command $n: rc $rc, $secs s")
  [ "$rc" -eq 0 ] || failed=1
done
total=$(awk -v a="$t_all" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')
if [ "$failed" = 0 ]; then verdict=PASS; else verdict=FAIL; fi
echo "::: fresh machine: $verdict ($(IFS=';'; echo "${summary[*]}" | sed 's/;/; /g'); $total s in all)"
exit "$failed"
