#!/usr/bin/env bash
# What word timings cost a stream: `tts-rt bench` with and without
# --word-timings (each request's words timed on its client thread as its
# audio streams, as the server does for a client that asks), the two arms
# back to back in every round, their order rotated each round. Prints per
# arm the median (min..max) over rounds of each run's p50 rtf and ttfp, and
# NOT A RANKING where the ranges overlap.
#
# Usage: benches/timings_cost.sh CHECKPOINT_DIR [extra bench flags]
#   Env: ROUNDS (5), BIN (default: a release build of this tree).
# A full-size random checkpoint: `tts-rt gen-checkpoint --preset 0.6b
# --tokenizer-from tests/fixtures/tiny-b --out DIR`. Loopback only: `bench`
# runs the engine in-process.
set -euo pipefail
ckpt=${1:?checkpoint dir}
shift
rounds=${ROUNDS:-5}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${BIN:-}" ]; then
  (cd "$root" && cargo build --release --quiet --bin tts-rt)
  BIN="${CARGO_TARGET_DIR:-$root/target}/release/tts-rt"
fi
out=$(mktemp -d)
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores" >&2
echo "command: $0 $ckpt $* (ROUNDS=$rounds)" >&2
flags=(--lengths medium --concurrency 1 --repeats 2 --frames 120 --json "$@")
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then arms=(off on); else arms=(on off); fi
  for arm in "${arms[@]}"; do
    extra=()
    [ "$arm" = on ] && extra=(--word-timings)
    "$BIN" bench --model "$ckpt" "${flags[@]}" "${extra[@]}" >"$out/$arm.$r.json"
    echo "round $r: $arm done" >&2
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
def p50(arm, key):
    vals = []
    for r in range(1, rounds + 1):
        d = json.load(open(f"{out}/{arm}.{r}.json"))
        vals.append(d["cells"][0]["summary"][key]["p50"])
    return vals
print(f"{'metric':<8} {'timings off':>24} {'timings on':>24}")
for key, unit in (("rtf", ""), ("ttfp_ms", " ms")):
    a, b = p50("off", key), p50("on", key)
    fmt = lambda v: f"{statistics.median(v):.3f} ({min(v):.3f}..{max(v):.3f})"
    overlap = not (max(a) < min(b) or max(b) < min(a))
    print(f"{key:<8} {fmt(a):>24} {fmt(b):>24}  {'NOT A RANKING' if overlap else ''}")
PY
