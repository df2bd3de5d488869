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
#         fixed=--realtime-load,0   (the fixed bound: MAX_STREAMS admits;
#         the script sets --max-streams, so an arm must not)
#   env: TTS_RT (binary; default target/release/tts-rt), PRECISION (fast),
#        FRAMES (250: 20 s utterances), MAX_STREAMS (6), REPEATS (2),
#        WARMUP (0), LENGTH (ten), OUT (raw JSON; default a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/arms_lib.sh
. benches/arms_lib.sh
arms_args "benches/continuous_streams.sh MODEL_DIR [PASSES] ARM..." 3 "slack=--slack-order,true arrival=--slack-order,false" "$@"
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
doc = json.load(open(f))
sb = doc["scoreboard"]
read = ((doc.get("provenance") or {}).get("host") or {}).get("read_gb_s", {}).get("median")
read = "missing" if read is None else f"{read:.1f}"
levels = " ".join(
    f"{l['offered']}:{'/'.join(map(str, l['admitted']))}a{'/'.join(map(str, l['continuous']))}c{'/'.join(map(str, l['refused']))}r"
    for l in sb["levels"])
cal = sb["calibration"] or {}
print(f"pass {p} {label:10s} load {load:>5s} read {read} GB/s capacity {sb['capacity_streams']} "
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
