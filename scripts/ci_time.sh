#!/usr/bin/env bash
# The wall time of CI's own command on a fresh clone, on this machine:
#     bash scripts/ci_time.sh [OUT]
# clones HEAD into ../ci-check (a sibling, so that ../shared is beside it, as on CI), runs
# `bash .ci/run` there, appends a row to experiments/results/ci_times.md (the date, the
# revision, the CPU, the emulation, the exit status, the whole run's seconds and pytest's summary
# line) and writes OUT (default: a temporary file it names) with the machine, the summary and the
# 20 slowest tests, and beside it OUT's name ending .log instead of .txt: the run's whole output.
# With SELFSUP_CPU_FLAGS, ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA set (another CPU kind,
# emulated: see pyterrier_selfsup/machine.py), the command it records names them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev="$(git rev-parse --short HEAD)"
out="${1:-$(mktemp --suffix=.ci_time.txt)}"
clone="$(cd .. && pwd)/ci-check"
rm -rf "$clone"
git clone -q . "$clone"
log="${out%.txt}.log"  # (pytest's whole output, kept to read)
started=$(date +%s)
rc=0
(cd "$clone" && bash .ci/run) > "$log" 2>&1 || rc=$?
seconds=$(( $(date +%s) - started ))
{
  echo "# bash .ci/run on a fresh clone at $rev: $seconds s of wall time (exit status $rc)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $("$clone/.venv/bin/python" -c \
    'from pyterrier_selfsup.harness.provenance import machine; print(machine())')"
  emulated=
  for name in ATEN_CPU_CAPABILITY ONEDNN_MAX_CPU_ISA SELFSUP_CPU_FLAGS; do
    if [ -n "${!name+set}" ]; then emulated+="$name=$(printf %q "${!name}") "; fi
  done
  echo "command: ${emulated}bash scripts/ci_time.sh"
  echo
  tail -n 1 "$log"
  grep -h '^browser: ' "$log" || echo 'browser: installed before the run'
  echo
  echo "the 20 slowest:"
  grep -A20 'slowest 20 durations' "$log" | tail -n 20
  if [ "$rc" -ne 0 ]; then  # (what failed, as pytest summarised it)
    echo
    echo "what failed:"
    grep -E '^(FAILED|ERROR) ' "$log" || tail -n 40 "$log"
  fi
} > "$out"
"$clone/.venv/bin/python" - "$out" experiments/results/ci_times.md <<'PY'
import shlex
import sys
lines = open(sys.argv[1]).read().splitlines()
field = {line.split(': ', 1)[0]: line.split(': ', 1)[1] for line in lines if ': ' in line}
head = lines[0].split(' at ', 1)[1]
rev, rest = head.split(': ', 1)
wall, rc = rest.split(' s of wall time (exit status ')
emulation = ' '.join(word.split('=')[0] + '=' + shlex.quote(word.split('=', 1)[1])
                     for word in shlex.split(field['command']) if '=' in word) or 'none'
cpu = field['machine'].removeprefix('Linux x86_64, ').split(', 2 cores')[0]
summary = next((line.strip('= ') for line in lines if line.startswith('=')), '')
row = [field['date'], rev, cpu, emulation, rc.rstrip(')'), wall, summary]
with open(sys.argv[2], 'a') as table:
    table.write('| ' + ' | '.join(row) + ' |\n')
PY
echo "wrote $out, its log $log and a row of experiments/results/ci_times.md"
exit "$rc"
