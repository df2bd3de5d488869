#!/usr/bin/env bash
# wyoming-bench (the Wyoming TTS benchmark from PyPI, pinned) against one
# `tts-rt serve --wyoming-port`: TTFT and RTF, one-shot and streamed, as
# Home Assistant's Wyoming client sees them. Prints the host class first.
#
# usage: benches/wyoming_bench.sh MODEL_DIR [ROUNDS=3]
#   env: TTS_RT (binary; default target/release/tts-rt), PRECISION (fast),
#        VENV (default target/wyoming-bench-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/serve_lib.sh
model=${1:?usage: benches/wyoming_bench.sh MODEL_DIR [ROUNDS]}
rounds=${2:-3}
bin=${TTS_RT:-target/release/tts-rt}
precision=${PRECISION:-fast}
venv=${VENV:-target/wyoming-bench-venv}
if [ ! -x "$venv/bin/wyoming-bench" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q wyoming-bench==2026.10.0
fi
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus," \
  "isa: $(grep -m1 -o -w -E 'avx512_bf16|avx512_vnni|avx512f|avx2|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "build: $(build_commit .), precision $precision, rounds $rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" serve --model "$model" --port 0 --wyoming-port "$port" --precision "$precision" \
  --max-frames 250 >"$out/s.out" 2>"$out/s.log" &
pid=$!
addr=$(serve_addr "$out/s" "$pid")
serve_ready "$addr"
"$venv/bin/wyoming-bench" tts "127.0.0.1:$port" --rounds "$rounds" --warmup 1
kill -TERM "$pid"; wait "$pid" || true
