#!/usr/bin/env bash
# Regenerate tests/fixtures/{tiny-a,tiny-b,goldens}. Creates the reference venv on first use.
#   TTS_RT_REF_VENV  venv to use/create (default: tools/.venv)
#   extra args are passed to make_fixtures.py (e.g. --only tiny-a, --skip-verify)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${TTS_RT_REF_VENV:-$here/.venv}"
if [ ! -x "$venv/bin/python" ]; then
    echo "creating reference venv at $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --upgrade pip >&2
    "$venv/bin/python" -m pip install -r "$here/requirements.txt" >&2
fi
exec "$venv/bin/python" "$here/make_fixtures.py" "$@"
