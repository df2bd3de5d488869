#!/usr/bin/env bash
# Does a stream stay continuous at its prebuffer: chunks cut by the listener's
# deadline (`--pace-chunks true`, the default) against the schedule alone
# (`false`). One stream at a time (`tts-rt bench --concurrency 1`), arms
# interleaved and their order rotated every pass; per pass and arm one line,
# then per arm the streams continuous at --prebuffer-ms over all passes and
# the required prebuffer's median (min..max) over the passes' medians. A
# missing figure prints as "missing", never 0.
#
# usage: benches/chunk_pace.sh MODEL_DIR [PASSES=6] [ARM...]
#   ARM = LABEL=FLAGS (commas for spaces); default
#         paced=--pace-chunks,true schedule=--pace-chunks,false
#   env: TTS_RT (binary; default target/release/tts-rt), PRECISION (fast),
#        FRAMES (100: 8 s utterances), REPEATS (3 per run), PREBUFFER (200),
#        OUT (raw JSON; default a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/arms_lib.sh
. benches/arms_lib.sh
arms_args "benches/chunk_pace.sh MODEL_DIR [PASSES] [ARM...]" 6 "paced=--pace-chunks,true schedule=--pace-chunks,false" "$@"
host_line
echo "binary: $bin, precision ${PRECISION:-fast}, frames ${FRAMES:-100}, repeats ${REPEATS:-3}," \
  "prebuffer ${PREBUFFER:-200} ms"

# run LABEL PASS LOAD FLAG...: one run of one arm, and its line.
run() {
  local label=$1 pass=$2 load=$3
  shift 3
  local f="$out/$label-$pass.json"
  "$bin" bench --model "$model" --json --precision "${PRECISION:-fast}" --lengths ten \
    --frames "${FRAMES:-100}" --concurrency 1 --repeats "${REPEATS:-3}" --warmup 1 \
    --prebuffer-ms "${PREBUFFER:-200}" "$@" >"$f" 2>"$f.log"
  python3 - "$label" "$pass" "$load" "$f" <<'PY'
import json, sys
label, p, load, f = sys.argv[1:]
doc = json.load(open(f))
c = doc["cells"][0]
s = c["summary"]
read = ((doc.get("provenance") or {}).get("host") or {}).get("read_gb_s", {}).get("median")
read = "missing" if read is None else f"{read:.1f}"
def get(k, q):
    v = (s.get(k) or {}).get(q)
    return "missing" if v is None else f"{v:.0f}"
print(f"pass {p} {label:9s} load {load:>5s} read {read} GB/s continuous {c['continuity_ok_at_prebuffer']}/{c['n']}  "
      f"required prebuffer ms p50 {get('required_prebuffer_ms', 'p50')} max {get('required_prebuffer_ms', 'max')}  "
      f"tpot ms p50 {get('tpot_ms', 'p50')}  code2wav ms p50 {get('code2wav_ms', 'p50')}")
PY
}
rotate_arms "$passes" run "${arms[@]}"

python3 - "$out" "${arms[@]}" <<'PY'
import glob, json, statistics, sys
out, arms = sys.argv[1], sys.argv[2:]
print("\narm        continuous / streams   required prebuffer ms: median (min..max) of the passes' p50")
for arm in arms:
    label = arm.split("=", 1)[0]
    cells = [json.load(open(f))["cells"][0] for f in sorted(glob.glob(f"{out}/{label}-*.json"))]
    ok = sum(c["continuity_ok_at_prebuffer"] for c in cells)
    n = sum(c["n"] for c in cells)
    v = [c["summary"]["required_prebuffer_ms"]["p50"] for c in cells
         if (c["summary"].get("required_prebuffer_ms") or {}).get("p50") is not None]
    s = f"{statistics.median(v):.0f} ({min(v):.0f}..{max(v):.0f}), n={len(v)}" if v else "missing"
    print(f"{label:9s}  {ok} / {n}{'':14s}{s}")
PY
