# Timed CI steps, for bash scripts that source this file:
#
#   ci_step NAME COMMAND [ARG...]   run one step; the first failure ends the script (after the table)
#   ci_finish                       print the table; the script's success
#
# Any non-zero exit status fails its step, pytest's 5 (no tests collected) included.  The table
# (step, seconds, exit status, the total) goes to stdout, and as Markdown to $GITHUB_STEP_SUMMARY
# when that is set, also when a step failed; the script then exits with that step's status.
# CI_DRY_RUN=1: the steps are listed and timed, not run (each one succeeds).

CI_ROWS=()

_ci_now() {
  if [ -n "${EPOCHREALTIME:-}" ]; then echo "${EPOCHREALTIME/,/.}"; else date +%s.%N; fi
}

ci_step() {
  local name=$1 t0 t1 rc
  shift
  echo "::: $name: $*"
  t0=$(_ci_now)
  if [ -n "${CI_DRY_RUN:-}" ]; then rc=0; else "$@"; rc=$?; fi
  t1=$(_ci_now)
  CI_ROWS+=("$name"$'\t'"$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"$'\t'"$rc")
  if [ "$rc" -eq 5 ]; then echo "::: '$*' collected no tests (pytest exit 5): failing" >&2; fi
  if [ "$rc" -ne 0 ]; then
    echo "::: '$*' failed with exit code $rc" >&2
    ci_table
    exit "$rc"
  fi
}

# the table of the steps run so far: aligned on stdout, Markdown appended to $GITHUB_STEP_SUMMARY
ci_table() {
  local row name secs rc total width=4
  total=$(printf '%s\n' "${CI_ROWS[@]}" | awk -F'\t' '{ t += $2 } END { printf "%.1f", t }')
  for row in "${CI_ROWS[@]}"; do
    name=${row%%$'\t'*}
    [ "${#name}" -gt "$width" ] && width=${#name}
  done
  echo
  echo "::: time per step"
  printf "%-${width}s  %8s  %4s\n" "step" "seconds" "exit"
  for row in "${CI_ROWS[@]}"; do
    IFS=$'\t' read -r name secs rc <<<"$row"
    printf "%-${width}s  %8s  %4s\n" "$name" "$secs" "$rc"
  done
  printf "%-${width}s  %8s\n" "total" "$total"
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    {
      echo "### CI time per step"
      echo
      echo "| step | seconds | exit status |"
      echo "|---|---:|---:|"
      for row in "${CI_ROWS[@]}"; do
        IFS=$'\t' read -r name secs rc <<<"$row"
        echo "| ${name//|/\\|} | $secs | $rc |"
      done
      echo "| **total** | **$total** | |"
      echo
    } >>"$GITHUB_STEP_SUMMARY"
  fi
}

ci_finish() {
  ci_table
  exit 0
}
