#!/usr/bin/env bash
# Issue 5's targets in one rerunnable command: for each configuration
# (checkpoint, --precision, text mode) one `tts-rt bench` run per pass,
# configurations interleaved and their order rotated every pass, then one
# table: ttfp_ms p50 of the ten-word sentence at concurrency 1, rtf p50 at
# concurrency 1, continuity at the 200 ms prebuffer and aggregate frames/s at
# concurrency C (default 3), peak RssAnon, each as median (min..max) over the
# passes, with the 1-minute load average before every run. A missing figure
# prints as "missing", never 0.
#
# Usage:
#   benches/scoreboard.sh BIN PASSES FRAMES CONFIG...
#   CONFIG = LABEL=MODEL_DIR:PRECISION[:streaming][:c3]
#     e.g. 0.6B-f32=/tmp/q06b:f32 0.6B-best=/tmp/q06b:f32,f32,bf16:streaming:c3
#   Each run: bench --model MODEL_DIR --precision PRECISION --lengths ten
#             --concurrency 1[,C] --repeats REPEATS --warmup 1 --frames FRAMES
#             [--text-streaming] --json
#   Env: REPEATS (default 3), C (default 3), OUT (raw results; default a
#   temp dir), WAIT_LOAD (wait until the 1-minute load is below it, max 5 min).
set -euo pipefail
bin=${1:?tts-rt binary}
passes=${2:?passes}
frames=${3:?frames per utterance}
shift 3
[ $# -gt 0 ] || { echo "give at least one CONFIG" >&2; exit 2; }
configs=("$@")
repeats=${REPEATS:-3}
conc=${C:-3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
: >"$out/runs.txt"
echo "raw results in $out" >&2
n=${#configs[@]}
for pass in $(seq 1 "$passes"); do
  for k in $(seq 0 $((n - 1))); do
    cfg=${configs[$(( (k + pass - 1) % n ))]}
    label=${cfg%%=*}
    rest=${cfg#*=}
    IFS=: read -r model prec opt1 opt2 <<<"$rest"
    flags=()
    levels=1
    for o in "${opt1:-}" "${opt2:-}"; do
      case "$o" in
        streaming) flags+=(--text-streaming) ;;
        c3) levels="1,$conc" ;;
        "") ;;
        *) echo "unknown option $o in $cfg" >&2; exit 2 ;;
      esac
    done
    if [ -n "${WAIT_LOAD:-}" ]; then
      for _ in $(seq 60); do
        awk -v l="$WAIT_LOAD" '{exit !($1 < l)}' /proc/loadavg && break
        sleep 5
      done
    fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "pass $pass $label (load $load)" >&2
    "$bin" bench --model "$model" --precision "$prec" --lengths ten \
      --concurrency "$levels" --repeats "$repeats" --warmup 1 --frames "$frames" \
      "${flags[@]}" --json >"$out/$label-$pass.json"
    echo "$label $pass $load" >>"$out/runs.txt"
  done
done
python3 - "$out" "$conc" "$bin" "$frames" "$repeats" <<'PY'
import collections, json, statistics, subprocess, sys
out, conc, binary, frames, repeats = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
runs = collections.defaultdict(list)
order = []
for line in open(f"{out}/runs.txt"):
    label, p, load = line.split()
    if label not in runs:
        order.append(label)
    runs[label].append((json.load(open(f"{out}/{label}-{p}.json")), float(load)))

def cell(d, c):
    for x in d["cells"]:
        if x["concurrency"] == c:
            return x
    return None

def mmm(v, d=0):
    v = [x for x in v if x is not None]
    if not v:
        return "missing"
    return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}..{max(v):.{d}f})"

def p50(c, k):
    try:
        return c["summary"][k]["p50"]
    except (KeyError, TypeError):
        return None

d0 = runs[order[0]][0][0]
pv = d0["provenance"]
print(f"binary {binary}; commit {pv.get('git_commit')}; cpu {pv.get('cpu_model')}; isa {pv.get('isa')}; "
      f"threads {pv.get('threads', pv.get('rayon_threads'))}; {frames} frames per utterance (fixed), "
      f"{repeats} measured requests per cell and run, ten-word sentence")
print()
print(f"| configuration | prompt rows | ttfp_ms p50 (c1) | rtf p50 (c1) | rtf p50 (c{conc}) | continuity_ok at 200 ms (c{conc}) | aggregate frames/s (c{conc}) | peak RssAnon MB | runs | load 1m before each run |")
print("|---|---|---|---|---|---|---|---|---|---|")
for label in order:
    rs = runs[label]
    c1 = [cell(d, 1) for d, _ in rs]
    cc = [cell(d, conc) for d, _ in rs]
    rows = c1[0]["prompt_rows"] if c1[0] else None
    rows = f"{rows['prefill']} + {rows['trailing_text']}" if rows else "missing"
    cont = [c for c in cc if c is not None]
    cont_s = ", ".join(f"{c['continuity_ok_at_prebuffer']}/{c['n']}" for c in cont) if cont else "not run"
    fps = []
    for c in cont:
        e2el = p50(c, "e2el_ms")
        fpr = c["frames"] / max(c["n"], 1)
        fps.append(conc * fpr / (e2el / 1000) if e2el else None)
    peak = [(d.get("rss_anon_kb") or {}).get("peak") for d, _ in rs]
    peak = [p / 1024 if p is not None else None for p in peak]
    print(f"| {label} | {rows} | {mmm([p50(c, 'ttfp_ms') for c in c1])} | {mmm([p50(c, 'rtf') for c in c1], 2)} | "
          f"{mmm([p50(c, 'rtf') for c in cont], 2) if cont else 'not run'} | {cont_s} | "
          f"{mmm(fps, 2) if cont else 'not run'} | {mmm(peak)} | {len(rs)} | {', '.join(f'{l:.2f}' for _, l in rs)} |")
print()
print("aggregate frames/s (c): concurrency x frames per request / p50 e2el of the cell — an estimate from the cell's")
print("median request; per-request figures are in the raw JSON.")
PY
