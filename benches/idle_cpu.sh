#!/usr/bin/env bash
# What `tts-rt serve` costs with nobody speaking: CPU time (utime + stime of
# the whole process, from /proc) and voluntary context switches per second
# over a window, after a few seconds to settle. Interleave builds in a loop:
#   for r in 1 2 3; do for b in BEFORE AFTER; do benches/idle_cpu.sh $b; done; done
# Usage: benches/idle_cpu.sh BIN [WINDOW_S (20)] [MODEL_DIR (tests/fixtures/tiny-a)]
# Listens on a loopback port only; Linux (procfs).
set -euo pipefail
bin=${1:?tts-rt binary}
win=${2:-20}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model=${3:-$root/tests/fixtures/tiny-a}
port=$((20000 + RANDOM % 20000))
"$bin" serve --model "$model" --port "$port" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
sleep 4
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
switches() { cat /proc/"$pid"/task/*/status | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s}'; }
a=$(cpu) c0=$(switches)
sleep "$win"
b=$(cpu) c1=$(switches)
# utime/stime are in USER_HZ (100 per second on Linux): 10 ms each.
echo "$bin: $(awk -v d=$((b - a)) -v w="$win" 'BEGIN {printf "%.1f", d * 10 / w}') ms of CPU per second," \
  "$(((c1 > c0 ? c1 - c0 : 0) / win)) context switches per second (window ${win} s; threads that exit take theirs along)"
