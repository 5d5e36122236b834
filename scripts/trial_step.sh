# Sourced by the trial scripts (new_user_trial.sh, wheel_trial.sh), with $out set to their results
# file: step TITLE COMMAND... runs the command, and appends its wall time and output to $out
# (progress bars, weight loading and the package index's notices left out).
step() {
  local title="$1"; shift
  local started log rc
  started=$(date +%s); log="$(mktemp)"
  "$@" > "$log" 2>&1; rc=$?
  {
    echo "## $title"
    echo
    echo "\$ $*"
    echo "exit status $rc, $(( $(date +%s) - started )) s"
    echo
    grep -v -e 'it/s]' -e '^Loading weights' -e 'Writing model shards' -e '^WARNING: Location' \
      "$log" | tail -n "${STEP_LINES:-40}"
    echo
  } >> "$out"
  return $rc
}
