#!/usr/bin/env bash
# Overload: CLIENTS clients at once against one `tts-rt serve`, admission by
# measured real-time capacity (`--realtime-load 0.9`, the default) against
# the fixed bound alone (`--realtime-load 0 --max-requests 16`, the old
# default), interleaved over PASSES passes with the arm order rotated.
# Per pass and arm: admitted, refused, admitted streams continuous at
# 200 ms, refusal latency p50/max, frames/s in all and of the continuous
# streams alone (benches/overload.py).
#
# usage: benches/overload.sh MODEL_DIR [PASSES=3] [CLIENTS=20]
#   env: TTS_RT (binary; default target/release/tts-rt), PRECISION (fast),
#        MAX_FRAMES (250: 20 s utterances at most)
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/serve_lib.sh
model=${1:?usage: benches/overload.sh MODEL_DIR [PASSES] [CLIENTS]}
passes=${2:-3}
clients=${3:-20}
bin=${TTS_RT:-target/release/tts-rt}
precision=${PRECISION:-fast}
max_frames=${MAX_FRAMES:-250}
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus," \
  "isa: $(grep -m1 -o -w -E 'avx512_bf16|avx512_vnni|avx512f|avx2|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "build: $(build_commit .), precision $precision, max_frames $max_frames, clients $clients, load $(cut -d' ' -f1-3 /proc/loadavg)"

arm_flags() {
  case $1 in
    measured) echo "--realtime-load 0.9" ;;
    fixed) echo "--realtime-load 0 --max-requests 16" ;;
  esac
}

run_arm() {
  local arm=$1 pass=$2 p="$out/$1-$2"
  # shellcheck disable=SC2046
  "$bin" serve --model "$model" --port 0 --precision "$precision" \
    --max-frames "$max_frames" $(arm_flags "$arm") >"$p.out" 2>"$p.log" &
  local pid=$!
  local addr
  addr=$(serve_addr "$p" "$pid")
  serve_ready "$addr"
  python3 benches/overload.py "$addr" --clients "$clients" >"$p.json"
  kill -TERM "$pid"; wait "$pid" || true
  python3 - "$arm" "$pass" "$p.json" <<'PY'
import json, sys
arm, p, f = sys.argv[1:]
r = json.load(open(f))
fmt = lambda v: "missing" if v is None else f"{v:.0f}"
print(f"pass {p} {arm:8s} admitted {r['admitted']:2d} continuous {r['admitted_continuous']:2d} "
      f"refused {r['refused']:2d} other {r['other']} refusal_ms p50 {fmt(r['refusal_ms_p50'])} "
      f"max {fmt(r['refusal_ms_max'])} frames/s {r['frames_per_s']:.1f} "
      f"(continuous {r['continuous_frames_per_s']:.1f}) "
      f"rtf {['%.2f' % x for x in r['rtf_admitted']]}")
PY
}

for pass in $(seq 1 "$passes"); do
  if [ $((pass % 2)) -eq 1 ]; then arms="measured fixed"; else arms="fixed measured"; fi
  for arm in $arms; do run_arm "$arm" "$pass"; done
done
