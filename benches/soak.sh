#!/usr/bin/env bash
# Soak: `tts-rt serve` on loopback driven by several clients over HTTP and
# the WebSocket, with disconnects and cancels mixed in, while the server's
# RssAnon and open files are sampled every few seconds (benches/soak_driver.py).
# Prints requests, errors by kind, audio seconds, ttfp/total percentiles and
# the RssAnon / open-files trend (first vs last quarter, slope).
#
# Usage: benches/soak.sh [CHECKPOINT_DIR]       (default tests/fixtures/tiny-a)
#   SOAK_MINUTES   how long (default 30)
#   SOAK_CLIENTS   concurrent clients (default 4)
#   TTS_RT_BIN     the binary (default: this tree's debug build, built if absent)
#   SOAK_SERVE_ARGS extra `serve` flags (e.g. "--precision bf16")
#   SOAK_MAX_FRAMES frames per request at most (default 150, 12 s: above every
#                  soak text's speech; random weights never end an utterance,
#                  so without a cap each request would run for minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-tests/fixtures/tiny-a}"
MINUTES="${SOAK_MINUTES:-30}"
CLIENTS="${SOAK_CLIENTS:-4}"
BIN="${TTS_RT_BIN:-${CARGO_TARGET_DIR:-target}/debug/tts-rt}"
if [ ! -x "$BIN" ]; then
  cargo build --locked --bin tts-rt
fi
LOG="$(mktemp -t tts-rt-soak.XXXXXX)"
OUT="$(mktemp -t tts-rt-soak-out.XXXXXX)"
# shellcheck disable=SC2086 # extra flags are words
"$BIN" serve --model "$MODEL" --host 127.0.0.1 --port 0 --max-frames "${SOAK_MAX_FRAMES:-150}" ${SOAK_SERVE_ARGS:-} >"$OUT" 2>"$LOG" &
PID=$!
cleanup() {
  kill -TERM "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -f "$LOG" "$OUT"
}
trap cleanup EXIT
ADDR=""
for _ in $(seq 600); do
  ADDR="$(grep -o 'http://[^ ]*' "$OUT" | head -1 | sed 's#http://##' || true)"
  [ -n "$ADDR" ] && break
  kill -0 "$PID" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 0.1
done
[ -n "$ADDR" ] || { echo "soak: serve printed no address" >&2; exit 1; }
HOSTPORT="${ADDR%%/*}"
for _ in $(seq 1200); do
  if python3 - "$HOSTPORT" <<'PY'
import http.client, sys
h, p = sys.argv[1].rsplit(":", 1)
c = http.client.HTTPConnection(h, int(p), timeout=5)
c.request("GET", "/ready")
sys.exit(0 if c.getresponse().status == 200 else 1)
PY
  then break; fi
  kill -0 "$PID" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 0.25
done
echo "soak: serving $MODEL on $HOSTPORT (pid $PID) for $MINUTES min with $CLIENTS clients"
python3 benches/soak_driver.py --addr "$HOSTPORT" --pid "$PID" --minutes "$MINUTES" --clients "$CLIENTS"
