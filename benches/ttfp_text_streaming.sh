#!/usr/bin/env bash
# Time to first packet of the ten-word sentence at concurrency 1, with the
# text in the prefill (default) and streamed one token per frame
# (`--text-streaming`), per precision: arms interleaved, their order rotated
# every pass; per arm the median (min..max) over passes of each run's
# ttfp_ms p50, the prompt rows, and the 1-minute load before each run.
#
# Usage:
#   benches/ttfp_text_streaming.sh BIN MODEL_DIR [PASSES=3] [REPEATS=5] [PRECISIONS="f32 int8"]
# Each run: bench --lengths ten --concurrency 1 --repeats REPEATS --warmup 1
#           --frames 2 --greedy [--text-streaming] --json
set -euo pipefail
bin=${1:?tts-rt binary}
model=${2:?model dir}
passes=${3:-3}
repeats=${4:-5}
precisions=${5:-f32 int8}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "raw results in $out" >&2
arms=()
for p in $precisions; do arms+=("$p:prefill" "$p:streaming"); done
n=${#arms[@]}
for pass in $(seq 1 "$passes"); do
  for k in $(seq 0 $((n - 1))); do
    arm=${arms[$(( (k + pass - 1) % n ))]}
    prec=${arm%%:*}
    mode=${arm##*:}
    flag=()
    [ "$mode" = streaming ] && flag=(--text-streaming)
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "pass $pass $arm (load $load)" >&2
    "$bin" bench --model "$model" --precision "$prec" --lengths ten --concurrency 1 \
      --repeats "$repeats" --warmup 1 --frames 2 --greedy "${flag[@]}" --json \
      >"$out/$prec-$mode-$pass.json"
    echo "$prec $mode $pass $load" >>"$out/runs.txt"
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics, collections
out = sys.argv[1]
runs = collections.defaultdict(list)
for line in open(f"{out}/runs.txt"):
    prec, mode, p, load = line.split()
    d = json.load(open(f"{out}/{prec}-{mode}-{p}.json"))
    c = d["cells"][0]
    runs[(prec, mode)].append((c["summary"]["ttfp_ms"]["p50"], float(load), c["prompt_rows"], c["summary"]["ttfp_ms"]["n"]))
def mmm(v, d=0):
    return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}..{max(v):.{d}f})"
print("| precision | text | prompt rows (prefill + trailing) | ttfp_ms p50: median (min..max) over runs | runs × requests | load 1m at start |")
print("|---|---|---|---|---|---|")
for (prec, mode), rs in runs.items():
    rows = rs[0][2]
    print(f"| {prec} | {mode} | {rows['prefill']} + {rows['trailing_text']} | {mmm([r[0] for r in rs])} | "
          f"{len(rs)} × {rs[0][3]} | {', '.join(f'{r[1]:.2f}' for r in rs)} |")
for prec in sorted({p for p, _ in runs}):
    a = [r[0] for r in runs[(prec, "prefill")]]
    b = [r[0] for r in runs[(prec, "streaming")]]
    if a and b:
        ratio = statistics.median(a) / statistics.median(b)
        overlap = min(a) <= max(b) and min(b) <= max(a)
        print(f"{prec}: prefill / streaming = {ratio:.2f}x" + ("  NOT A RANKING" if overlap else ""))
PY
