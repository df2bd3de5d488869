#!/usr/bin/env bash
# Client-interop tests: independent clients (Python `websockets`, the official
# `openai` package, headless Chromium for the browser page, Pipecat's and
# LiveKit Agents' ElevenLabs/Cartesia TTS, Cartesia's SDK) against a real
# `tts-rt serve`, the same clients against a full one (test_capacity.py),
# and every command in README.md (test_readme.py). Creates its own venv (target/client-venv, or
# $TTS_RT_CLIENT_VENV). Tests $TTS_RT_BIN when set, else builds (or brings up
# to date) this tree's debug binary. Usage: tests/python/run.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${TTS_RT_CLIENT_VENV:-target/client-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# A download that arrives damaged (pip names it by a hash mismatch against the
# index) or a dropped connection is retried with a fresh download, up to three
# attempts; a requirement that cannot be met fails all three and stops here.
for attempt in 1 2 3; do
  if "$VENV/bin/pip" install -q --disable-pip-version-check --retries 5 \
      $([ "$attempt" -gt 1 ] && echo --no-cache-dir) -r tests/python/requirements.txt; then
    break
  fi
  if [ "$attempt" -eq 3 ]; then
    echo "client-interop: pip could not install tests/python/requirements.txt (3 attempts)" >&2
    exit 1
  fi
  echo "client-interop: pip install failed (attempt $attempt of 3); retrying with a fresh download" >&2
  sleep 5
done
# The binary under test: $TTS_RT_BIN as given, else this tree's debug build.
# In CI, `cargo test --workspace` has just built it from this very tree (a
# `cargo build --bin` could rebuild it with other dependency features);
# anywhere else it is brought up to date, so a stale binary is never tested.
if [ -z "${TTS_RT_BIN:-}" ]; then
  TTS_RT_BIN="$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/tts-rt"
  if [ "${CI:-}" != true ] || [ ! -x "$TTS_RT_BIN" ]; then
    cargo build --locked --bin tts-rt
  fi
fi
export TTS_RT_BIN
set +e
"$VENV/bin/python" -m pytest -q tests/python "$@"
rc=$?
set -e
# pytest exit 5 = no tests collected: a failure here, not a pass.
if [ "$rc" -ne 0 ]; then
  echo "client-interop tests failed (pytest exit $rc)" >&2
  exit 1
fi
