#!/usr/bin/env bash
# What a dialect socket costs the server per audio frame, and its time to
# first audio, for two builds of tts-rt: each round starts both builds'
# servers in turn (order rotated), speaks CONTEXTS contexts over the
# ElevenLabs multi-stream socket and over the native /v1/realtime socket
# (the control: its path is the same in both builds), and reads the server
# process's CPU time per frame from /proc. On a small checkpoint the
# engine's own cost per frame is small, so the transport's share shows.
#
# Usage:
#   benches/dialect_frames.sh BEFORE_BIN AFTER_BIN MODEL_DIR
#   Env: ROUNDS (5), CONTEXTS (20), PYTHON (a python with `websockets`,
#   e.g. the client venv tests/python/run.sh makes), PORT (18931).
# Loopback only.
set -euo pipefail
before=${1:?before binary}
after=${2:?after binary}
model=${3:?model dir}
rounds=${ROUNDS:-5}
contexts=${CONTEXTS:-20}
py=${PYTHON:-python3}
port=${PORT:-18931}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out=$(mktemp)
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores" >&2
for r in $(seq 1 "$rounds"); do
  for i in 0 1; do
    if [ $(((i + r) % 2)) = 0 ]; then bin=$before arm=before; else bin=$after arm=after; fi
    "$bin" serve --model "$model" --host 127.0.0.1 --port "$port" --max-frames 120 \
      >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do
      curl -fs "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
      sleep 0.1
    done
    for socket in elevenlabs native; do
      line=$("$py" "$here/dialect_frames.py" "127.0.0.1:$port" "$pid" "$socket" "$contexts")
      echo "$arm $r $line" | tee -a "$out" >&2
    done
    kill -TERM "$pid"
    wait "$pid" || true
  done
done
"$py" - "$out" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    arm, _, js = line.split(" ", 2)
    m = json.loads(js)
    rows.setdefault((m["socket"], arm), []).append(m)
print(f"{'socket':<11} {'arm':<7} {'CPU us/frame median (min..max)':<34} {'ttfp p50 ms median (min..max)'}")
for (socket, arm), ms in sorted(rows.items()):
    c = [m["cpu_us_per_frame"] for m in ms]
    t = [m["ttfp_ms_p50"] for m in ms]
    print(f"{socket:<11} {arm:<7} {statistics.median(c):>8.0f} ({min(c):.0f}..{max(c):.0f}){'':<16} "
          f"{statistics.median(t):>6.1f} ({min(t):.1f}..{max(t):.1f})")
EOF
rm -f "$out"
