#!/usr/bin/env bash
# Three replicas behind HAProxy, on loopback (called by .ci/run):
#   1. three `tts-rt serve` with the tiny-a fixture on ephemeral 127.0.0.1
#      ports (each with its --health-port), HAProxy (Debian's) in front
#      with deploy/replicas/haproxy.cfg as it is;
#   2. a steady mixed load (HTTP WAV and PCM streams, realtime contexts on
#      long and short sessions), every answer checked whole;
#   3. a rolling restart (SIGTERM, exit, start, ready, one at a time): lost
#      answers must be 0;
#   4. SIGKILL of one replica mid-load: only its own streams may fail, each
#      with an error the client sees; none short and looking complete;
#   5. how long a full replica's 429 takes to reach a client, direct and
#      through HAProxy.
# rolling.py does the steps; this script finds its tools and ends every
# process it started (by pid) however it exits. Bounded to 110 s. Ends with
# one line: `replicas: ok (...)` or `replicas: FAILED (...)` (exit 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
t0=$SECONDS
target=$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)
work=$target/replicas
bin=${TTS_RT_BIN:-$target/debug/tts-rt}
mkdir -p "$work"
log=$work/ci.log
: >"$log"

fail() {
  [ -s "$log" ] && tail -25 "$log" | sed 's/^/  | /'
  echo "replicas: FAILED ($*; details: $log and $work/run/)"
  exit 1
}

# Every process rolling.py starts is in run/pids as it starts: each is
# ended by its pid on any exit (a timeout, a failure, an interrupt).
cleanup() {
  local pid
  if [ -f "$work/run/pids" ]; then
    while read -r pid; do
      kill -KILL "$pid" 2>/dev/null || true
    done <"$work/run/pids"
  fi
}
trap cleanup EXIT

[ -x "$bin" ] || fail "no binary at $bin (build it, or set TTS_RT_BIN)"
if ! command -v haproxy >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y -qq haproxy >>"$log" 2>&1 ||
    fail "no haproxy, and apt-get could not install it (.ci/run's system packages step installs it)"
fi
ha_version=$(haproxy -v 2>&1 | awk 'NR == 1 {print $3}')

# The client-interop venv when it is there (it has websockets); else a small
# venv of this test's own, with the same pinned websockets.
py=${TTS_RT_CLIENT_VENV:-$target/client-venv}/bin/python
if ! { [ -x "$py" ] && "$py" -c 'import websockets' 2>/dev/null; }; then
  py=$work/venv/bin/python
  if ! { [ -x "$py" ] && "$py" -c 'import websockets' 2>/dev/null; }; then
    if ! { python3 -m venv "$work/venv" >>"$log" 2>&1 &&
      "$work/venv/bin/pip" install -q --disable-pip-version-check --retries 5 \
        "$(grep -E '^websockets==' tests/python/requirements.txt)" >>"$log" 2>&1; }; then
      fail "could not make a venv with websockets for the load clients"
    fi
  fi
fi

# The config must parse as shipped (addresses from the environment).
TTS_RT_LB_BIND=127.0.0.1:1 TTS_RT_LB_ADMIN=$work/check.sock TTS_RT_R1=127.0.0.1:2 TTS_RT_R2=127.0.0.1:3 \
  TTS_RT_R3=127.0.0.1:4 TTS_RT_R1_HEALTH=5 TTS_RT_R2_HEALTH=6 TTS_RT_R3_HEALTH=7 \
  haproxy -c -q -f deploy/replicas/haproxy.cfg >>"$log" 2>&1 || fail "haproxy -c refused deploy/replicas/haproxy.cfg"

rm -rf "$work/run"
mkdir -p "$work/run"
set +e
timeout -k 5 110 "$py" -W ignore::DeprecationWarning deploy/replicas/rolling.py --bin "$bin" --model tests/fixtures/tiny-a \
  --config deploy/replicas/haproxy.cfg --work "$work/run" --json "$work/figures.json" >"$work/run/out.txt" 2>&1
rc=$?
set -e
cleanup
grep -v '^summary: ' "$work/run/out.txt" | sed 's/^/  /'
cat "$work/run/out.txt" >>"$log"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then fail "the run passed its 110 s bound"; fi
[ "$rc" -eq 0 ] || fail "$(grep -m1 '^FAILED' "$work/run/out.txt" || echo "rolling.py exited $rc")"
summary=$(sed -n 's/^summary: //p' "$work/run/out.txt")
echo "replicas: ok (HAProxy $ha_version; $summary; $((SECONDS - t0)) s)"
