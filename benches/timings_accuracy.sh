#!/usr/bin/env bash
# Word-timing accuracy in one command: real speech with exact word starts
# (espeak-ng, 10 languages x 12 utterances x 3 rates), scored for the
# aligner and for two fixed anchors (docs/timings-accuracy.md).
#
#   1. installs espeak-ng if missing (apt-get, when run as root);
#   2. builds the corpus into target/timings-corpus if it is absent
#      (tools/timings_truth.py, a few seconds);
#   3. builds the aligner (cargo build --release -p tts-audio --example
#      align) unless --aligner or --anchors-only is given;
#   4. runs benches/timings_accuracy.py and prints the table; the JSON goes
#      to target/timings-accuracy.json unless --json-out is given.
#
# Usage:
#   benches/timings_accuracy.sh                          # the real aligner
#   benches/timings_accuracy.sh --aligner "python3 benches/timings_fake_aligner.py"  # harness self-check
#   benches/timings_accuracy.sh --anchors-only
# Every argument goes through to benches/timings_accuracy.py (--chunk-ms,
# --first-chunk-ms, --langs, --start-ref onset, ...). Env: PYTHON (python3),
# CORPUS (target/timings-corpus; delete it to rebuild). Stdlib Python only.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py=${PYTHON:-python3}
corpus=${CORPUS:-target/timings-corpus}

if ! ldconfig -p 2>/dev/null | grep -q 'libespeak-ng\.so\.1 '; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing espeak-ng ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q espeak-ng >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q espeak-ng >/dev/null; }
  else
    echo "espeak-ng is not installed (libespeak-ng.so.1 not found)." >&2
    echo "Install it, e.g. 'sudo apt-get install -y espeak-ng' (Debian/Ubuntu), then run this again." >&2
    exit 1
  fi
fi

if [ ! -f "$corpus/manifest.json" ]; then
  "$py" tools/timings_truth.py --out "$corpus"
fi

build=1 json=0
for a in "$@"; do
  case $a in
    --aligner|--aligner=*|--anchors-only) build=0 ;;
    --json-out|--json-out=*) json=1 ;;
  esac
done
if [ "$build" = 1 ]; then
  cargo build --release -p tts-audio --example align >&2 || {
    echo "could not build the aligner example (tts-audio's examples/align);" \
      "score the harness alone with --aligner \"python3 benches/timings_fake_aligner.py\" or --anchors-only" >&2
    exit 1
  }
fi
extra=()
[ "$json" = 1 ] || extra=(--json-out target/timings-accuracy.json)
exec "$py" benches/timings_accuracy.py --corpus "$corpus" "${extra[@]}" "$@"
