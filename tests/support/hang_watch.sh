#!/bin/sh
# Runs a command again and again with one busy-looping process per core beside it, and stops at the first
# run that takes longer than a limit: it then writes every thread's stack (gdb) to a file and kills the run.
# For hangs that only show on a loaded machine (CONTRIBUTING.md, "Flaky tests").
#
# Usage: tests/support/hang_watch.sh RUNS LIMIT_S STACKS_FILE COMMAND [ARGS...]
# Exit status: 0 when every run finished (whatever its status), 1 at a hang, 2 on bad usage.
[ $# -ge 4 ] || { echo "usage: $0 RUNS LIMIT_S STACKS_FILE COMMAND [ARGS...]" >&2; exit 2; }
runs=$1; limit=$2; stacks=$3; shift 3
hogs=""
for _ in $(seq "$(nproc)"); do sh -c 'while :; do :; done' & hogs="$hogs $!"; done
trap 'kill $hogs 2>/dev/null' EXIT INT TERM
for i in $(seq "$runs"); do
  "$@" > /dev/null 2>&1 &
  pid=$!
  start=$(date +%s)
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ $(( $(date +%s) - start )) -gt "$limit" ]; then
      echo "run $i of $runs: still running after ${limit} s; stacks in $stacks"
      gdb -p "$pid" -batch -ex "thread apply all bt" > "$stacks" 2>&1
      kill -9 "$pid"
      exit 1
    fi
  done
  wait "$pid"
  echo "run $i of $runs: status $? after $(( $(date +%s) - start )) s"
done
