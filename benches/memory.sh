#!/usr/bin/env bash
# Memory under load: one `tts-rt bench` process per (checkpoint, precision,
# concurrency) running REQUESTS requests, summarised as RssAnon (anonymous
# resident memory; the weights are memory-mapped and not in it):
#   after load (incl. int8/q4 quantization), the sampled peak of the load
#   phase and of the request phase, after request 10 and after the last
#   request, the growth between them and the least-squares slope over
#   requests 10..N, the same over the second half (requests N/2+1..N:
#   has it levelled off?) (docs/benchmarks.md, "Memory"), and at the end.
#
# Usage:
#   benches/memory.sh BIN FRAMES REQUESTS NAME=DIR:PRECISION...
# e.g.
#   benches/memory.sh target/release/tts-rt 2 100 \
#     0.6b-f32=/work/scratch/q06b:f32 0.6b-int8=/work/scratch/q06b:int8
# Env: CONC="1 3" (concurrency levels; each gets ceil(REQUESTS/c) rounds),
#      OUT=dir for the raw JSON (default: a temp dir).
set -euo pipefail
bin=${1:?tts-rt binary}
frames=${2:?frames per request}
requests=${3:?requests per process}
shift 3
[ $# -gt 0 ] || { echo "give at least one NAME=DIR:PRECISION" >&2; exit 2; }
conc=${CONC:-1 3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "raw results in $out" >&2
for spec in "$@"; do
  name=${spec%%=*}
  rest=${spec#*=}
  dir=${rest%:*}
  prec=${rest##*:}
  for c in $conc; do
    rounds=$(( (requests + c - 1) / c ))
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "$name c$c: $rounds rounds (load $load)" >&2
    t0=$(date +%s)
    "$bin" bench --model "$dir" --precision "$prec" --lengths ten \
      --concurrency "$c" --repeats "$rounds" --warmup 0 --frames "$frames" \
      --greedy --json >"$out/$name-c$c.json"
    echo "$name c$c $load $(( $(date +%s) - t0 ))" >>"$out/runs.txt"
  done
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def mb(kb):
    return "missing" if kb is None else f"{kb / 1024:.1f}"
def growth(v, a):
    # RssAnon after request `a` (1-based) to the last: delta, least-squares slope.
    ys = v[a - 1:]
    n = len(ys)
    if n < 2:
        return "n/a"
    xm, ym = (n - 1) / 2, sum(ys) / n
    slope = sum((i - xm) * (y - ym) for i, y in enumerate(ys)) / sum((i - xm) ** 2 for i in range(n))
    return f"{ys[-1] - ys[0]:+} / {slope:+.2f}"
print("| config | conc | requests | after load MB | load peak MB | request peak MB | after req 10 MB | after last MB | growth kB / slope kB/req, 10..N | same, N/2+1..N | end MB | load 1m | wall s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for line in open(f"{out}/runs.txt"):
    name, c, load, wall = line.split()
    d = json.load(open(f"{out}/{name}-{c}.json"))
    r = d["rss_anon_kb"]
    cell = d["cells"][0]
    m = cell["rss_anon_kb"]
    after = m["after_request"]
    g = m["growth"] or {}
    a10 = after[9] if len(after) >= 10 else None
    print(f"| {name} | {c[1:]} | {len(after)} | {mb(r['after_load'])} | {mb(r['load_peak'])} | "
          f"{mb(r['requests_peak'])} | {mb(a10)} | {mb(after[-1] if after else None)} | "
          f"{growth(after, 10)} | {growth(after, len(after) // 2 + 1)} | "
          f"{mb(r['end'])} | {load} | {wall} |")
PY
