#!/usr/bin/env bash
# Checks deploy/systemd/tts-rt.service offline (called by .ci/run):
# `systemd-analyze verify` (syntax, directives, the ExecStart binary), and
# `systemd-analyze security --offline` (the hardening's exposure score, held
# at or under MAX_EXPOSURE). Neither needs systemd running as PID 1; running
# the unit does, so that is not done here (a line says so). Ends with one
# line: `systemd: ok (...)`, `systemd: SKIPPED (...)` or `systemd: FAILED (...)`.
set -euo pipefail
cd "$(dirname "$0")/../.."
MAX_EXPOSURE=2.0
target=$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)
bin=${TTS_RT_BIN:-$target/debug/tts-rt}
unit=deploy/systemd/tts-rt.service
fail() { echo "systemd: FAILED ($*)"; exit 1; }

if ! command -v systemd-analyze >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y -qq systemd >/dev/null 2>&1 ||
    { echo "systemd: SKIPPED (no systemd-analyze, and apt-get could not install systemd)"; exit 0; }
fi
[ -x "$bin" ] || fail "no binary at $bin (verify checks that ExecStart's program exists)"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

# verify resolves ExecStart's program: point it at the binary CI built,
# under the unit's own file name.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/local/bin/tts-rt|$bin|" "$unit" >"$dir/tts-rt.service"
if ! out=$(systemd-analyze verify "$dir/tts-rt.service" 2>&1) || [ -n "$out" ]; then
  echo "$out" | sed 's/^/  /'
  fail "systemd-analyze verify $unit"
fi
exposure=$(systemd-analyze security --offline=true "$dir/tts-rt.service" 2>&1 |
  sed -n 's/.*Overall exposure level for tts-rt.service: \([0-9.]*\).*/\1/p')
[ -n "$exposure" ] || fail "systemd-analyze security printed no exposure level"
awk -v e="$exposure" -v m="$MAX_EXPOSURE" 'BEGIN {exit !(e <= m)}' ||
  fail "exposure $exposure is above $MAX_EXPOSURE: a hardening line was lost"
pid1=$(cat /proc/1/comm 2>/dev/null || echo unknown)
if [ "$pid1" = systemd ]; then
  note="not started (CI does not install units on its host)"
else
  note="not started: PID 1 here is $pid1, not systemd"
fi
echo "systemd: ok (systemd-analyze $(systemd-analyze --version | head -1 | awk '{print $2}') verify clean; exposure $exposure <= $MAX_EXPOSURE; $note)"
