#!/usr/bin/env bash
# How many streams a machine keeps continuous: `tts-rt bench --scoreboard`
# (admission by measured real-time capacity, as `serve` runs it) for each
# arm, arms interleaved and their order rotated every pass; per pass and arm
# one line (the levels' admitted/continuous/refused per round, the headline),
# then per arm the headline's median (min..max) over the passes. A missing
# figure prints as "missing", never 0.
#
# usage: benches/continuous_streams.sh MODEL_DIR [PASSES=3] ARM...
#   ARM = LABEL=FLAGS, FLAGS being extra bench flags with commas for spaces,
#   e.g.  slack=--slack-order,true  arrival=--slack-order,false
#         fixed3=--realtime-load,0,--max-streams,3
#   env: TTS_RT (binary; default target/release/tts-rt), PRECISION (fast),
#        FRAMES (250: 20 s utterances), MAX_STREAMS (6), REPEATS (2),
#        WARMUP (0), LENGTH (ten), OUT (raw JSON; default a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: benches/continuous_streams.sh MODEL_DIR [PASSES] ARM...}
passes=${2:-3}
shift 2 || shift $#
[ $# -gt 0 ] || set -- slack=--slack-order,true arrival=--slack-order,false
arms=("$@")
bin=${TTS_RT:-target/release/tts-rt}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

# shellcheck source=benches/arms_lib.sh
. benches/arms_lib.sh
host_line
echo "binary: $bin, precision ${PRECISION:-fast}, frames ${FRAMES:-250}, max streams ${MAX_STREAMS:-6}," \
  "repeats ${REPEATS:-2}, warm-up ${WARMUP:-0}, text ${LENGTH:-ten}"

# run LABEL PASS LOAD FLAG...: one scoreboard of one arm, and its line.
run() {
  local label=$1 pass=$2 load=$3
  shift 3
  local f="$out/$label-$pass.json"
  "$bin" bench --model "$model" --scoreboard --json --precision "${PRECISION:-fast}" \
    --lengths "${LENGTH:-ten}" --frames "${FRAMES:-250}" --max-streams "${MAX_STREAMS:-6}" \
    --repeats "${REPEATS:-2}" --warmup "${WARMUP:-0}" "$@" >"$f" 2>"$f.log"
  python3 - "$label" "$pass" "$load" "$f" <<'PY'
import json, sys
label, p, load, f = sys.argv[1:]
sb = json.load(open(f))["scoreboard"]
levels = " ".join(
    f"{l['offered']}:{'/'.join(map(str, l['admitted']))}a{'/'.join(map(str, l['continuous']))}c{'/'.join(map(str, l['refused']))}r"
    for l in sb["levels"])
cal = sb["calibration"] or {}
print(f"pass {p} {label:10s} load {load:>5s} capacity {sb['capacity_streams']} "
      f"(calibrated {cal.get('streams', 'off')}) held {sb['continuous_streams']}  levels {levels}")
PY
}
rotate_arms "$passes" run "${arms[@]}"

python3 - "$out" "${arms[@]}" <<'PY'
import glob, json, statistics, sys
out, arms = sys.argv[1], sys.argv[2:]
print("\narm         continuous streams held: median (min..max) over passes")
for arm in arms:
    label = arm.split("=", 1)[0]
    v = [json.load(open(f))["scoreboard"]["continuous_streams"]
         for f in sorted(glob.glob(f"{out}/{label}-*.json"))]
    v = [x for x in v if x is not None]
    s = f"{statistics.median(v):g} ({min(v)}..{max(v)}), n={len(v)}" if v else "missing"
    print(f"{label:10s}  {s}")
PY
