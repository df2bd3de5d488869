#!/usr/bin/env bash
# Batching across sessions: `tts-rt bench` of two binaries (before / after),
# interleaved, at several concurrency levels, summarised per binary and
# level as the median over runs (min..max) of
#   - aggregate frames/s of a round: concurrency × frames / the round's
#     wall time (requests of a round start together; wall = max e2el_ms),
#   - per-session rtf, required_prebuffer_ms, and continuity at the
#     prebuffer (requests continuous / requests),
# plus the 1-minute load average before each run (the machine is shared).
# The arm order alternates every run (before, after / after, before / ...).
# EXTRA adds arguments to every `tts-rt bench` call, e.g.
#   EXTRA="--precision int8,int8,int8"
#
# Usage:
#   benches/batching.sh MODEL_DIR BEFORE_BIN AFTER_BIN [RUNS=3] [FRAMES=20] [CONC=1,2,3] [REPEATS=2]
# e.g. (the previous commit built in its own worktree, never `git stash`):
#   git worktree add /tmp/wt-base <commit> && (cd /tmp/wt-base && CARGO_TARGET_DIR=/tmp/tb cargo build --release)
#   benches/batching.sh /tmp/q06b /tmp/tb/release/tts-rt target/release/tts-rt 3 20
set -euo pipefail
model=${1:?model dir}
before=${2:?before binary}
after=${3:?after binary}
runs=${4:-3}
frames=${5:-20}
conc=${6:-1,2,3}
repeats=${7:-2}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "raw results in $out" >&2
read -r -a extra <<<"${EXTRA:-}"
for i in $(seq 1 "$runs"); do
  order="before after"
  [ $((i % 2)) -eq 0 ] && order="after before"
  for which in $order; do
    bin=$before
    [ "$which" = after ] && bin=$after
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "run $i $which (load $load)" >&2
    "$bin" bench --model "$model" --lengths short --concurrency "$conc" \
      --repeats "$repeats" --warmup 1 --frames "$frames" --greedy \
      ${extra[@]+"${extra[@]}"} \
      --json --jsonl "$out/$which-$i.jsonl" >"$out/$which-$i.json"
    echo "$which $i $load" >>"$out/loads.txt"
  done
done
python3 - "$out" "$runs" "$frames" <<'PY'
import json, sys, statistics, collections
out, runs, frames = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
loads = collections.defaultdict(list)
for l in open(f"{out}/loads.txt"):
    w, i, v = l.split()
    loads[w].append(float(v))
def fmt(v, d=2):
    if not v:
        return "n/a"
    return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}..{max(v):.{d}f})"
print(f"frames per request {frames}; runs per binary {runs}")
extra = ""
import os
if os.environ.get("EXTRA"):
    extra = os.environ["EXTRA"]
print(f"extra bench arguments: {extra or '(none)'}")
for which in ["before", "after"]:
    fps = collections.defaultdict(list)    # per level: one value per round
    rtf = collections.defaultdict(list)    # per level: one value per request
    pre = collections.defaultdict(list)
    cont = collections.defaultdict(lambda: [0, 0])
    stats = []
    for i in range(1, runs + 1):
        rounds = collections.defaultdict(list)
        for l in open(f"{out}/{which}-{i}.jsonl"):
            r = json.loads(l)
            if r["warmup"]:
                continue
            # label: length/cN/rK/sJ
            _, c, rk, _ = r["request"].split("/")
            rounds[(int(c[1:]), rk)].append(r["metrics"])
        for (c, _), ms in rounds.items():
            wall = max(m["e2el_ms"] for m in ms) / 1e3
            fps[c].append(sum(m["frames"] for m in ms) / wall)
            for m in ms:
                rtf[c].append(m["rtf"])
                pre[c].append(m["required_prebuffer_ms"])
                cont[c][0] += bool(m.get("continuity_ok_at_prebuffer"))
                cont[c][1] += 1
        doc = json.load(open(f"{out}/{which}-{i}.json"))
        e = doc["engine"]
        stats.append({k: e.get(k) for k in ["steps", "batched_inputs", "max_batch"]})
    print(f"\n## {which}: load {fmt(loads[which], 2)}")
    print("| concurrency | aggregate frames/s | per-session rtf | required_prebuffer_ms | continuous at prebuffer |")
    print("|---|---|---|---|---|")
    for c in sorted(fps):
        print(f"| {c} | {fmt(fps[c], 2)} | {fmt(rtf[c], 2)} | {fmt(pre[c], 0)} | {cont[c][0]}/{cont[c][1]} |")
    print("engine stats per run:", json.dumps(stats))
PY
