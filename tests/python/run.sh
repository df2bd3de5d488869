#!/usr/bin/env bash
# Client-interop tests: independent clients (Python `websockets`, the official
# `openai` package, headless Chromium for the browser page) against a real
# `tts-rt serve`. Creates its own venv; needs the tts-rt binary (built here if
# missing). Usage: tests/python/run.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${TTS_RT_CLIENT_VENV:-target/client-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check -r tests/python/requirements.txt
export TTS_RT_BIN="${TTS_RT_BIN:-$PWD/target/debug/tts-rt}"
if [ ! -x "$TTS_RT_BIN" ]; then
  cargo build --locked --bin tts-rt
fi
set +e
"$VENV/bin/python" -m pytest -q tests/python "$@"
rc=$?
set -e
# pytest exit 5 = no tests collected: a failure here, not a pass.
if [ "$rc" -ne 0 ]; then
  echo "client-interop tests failed (pytest exit $rc)" >&2
  exit 1
fi
