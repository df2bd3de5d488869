#!/usr/bin/env bash
# Two builds of tts-rt on the same engine workloads: for every configuration
# the two arms run back to back, their order rotated every round, and each
# round starts with the host's two-thread bf16 streaming rate (the LM
# stages' speed follows the host's memory bandwidth, which other tenants of
# a shared machine move). Then a table per configuration: rtf, ttfp, tpot
# and required prebuffer as median (min..max) over the rounds of each run's
# p50, continuity at the configured prebuffer, and NOT A RANKING where the
# two arms' ranges overlap.
#
# Usage:
#   benches/before_after.sh BEFORE_BIN AFTER_BIN Q06B_DIR [Q17B_DIR]
#   Env: ROUNDS (3), OUT (raw results; default a temp dir), CACHE (a
#   --weights-cache dir, default none).
# The checkpoints: `tts-rt gen-checkpoint --preset 0.6b --tokenizer-from
# tests/fixtures/tiny-b --out Q06B_DIR` (and --preset 1.7b). Loopback only:
# `bench` runs the engine in-process.
set -euo pipefail
before=${1:?before binary}
after=${2:?after binary}
q06b=${3:?0.6B checkpoint dir}
q17b=${4:-}
rounds=${ROUNDS:-3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
: >"$out/runs.txt"
: >"$out/bandwidth.txt"
echo "raw results in $out" >&2
cache=()
[ -n "${CACHE:-}" ] && cache=(--weights-cache "$CACHE")
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
(cd "$root" && cargo build --release --quiet -p tts-kernels --example stream_ab)
stream_ab="${CARGO_TARGET_DIR:-$root/target}/release/examples/stream_ab"
configs=(
  "fast-c1|$q06b|fast|--lengths ten --concurrency 1 --repeats 3 --frames 30"
  "fast-c3|$q06b|fast|--lengths ten --concurrency 3 --repeats 1 --frames 30"
  "balanced-c1|$q06b|balanced|--lengths ten --concurrency 1 --repeats 3 --frames 30"
  "fast-20s|$q06b|fast|--lengths ten,medium --concurrency 1 --repeats 1 --frames 250"
)
[ -n "$q17b" ] && configs+=("1.7b-fast-c1|$q17b|fast|--lengths ten --concurrency 1 --repeats 2 --frames 30")
steal_pct() { # /proc/stat cpu line before, after
  local -a a=($1) b=($2)
  local tot=0 k
  for k in $(seq 1 10); do tot=$((tot + b[k] - a[k])); done
  echo $((100 * (b[8] - a[8]) / (tot > 0 ? tot : 1)))
}
for r in $(seq 1 "$rounds"); do
  bw=$(RAYON_NUM_THREADS=2 "$stream_ab" bf16 5 | awk '{for (i = 1; i < NF; i++) if ($i == "median") print $(i + 1)}')
  echo "round $r: bf16 on 2 threads streams $bw GiB/s" | tee -a "$out/bandwidth.txt" >&2
  for c in "${configs[@]}"; do
    IFS='|' read -r label model prec args <<<"$c"
    for i in 0 1; do
      if [ $(((i + r) % 2)) = 0 ]; then bin=$before arm=before; else bin=$after arm=after; fi
      s0=$(grep '^cpu ' /proc/stat)
      load=$(cut -d' ' -f1 /proc/loadavg)
      # shellcheck disable=SC2086 # args are words
      "$bin" bench --model "$model" --precision "$prec" "${cache[@]}" --warmup 1 --greedy $args \
        --json >"$out/$label-$arm-$r.json" 2>/dev/null
      echo "$label $arm round $r load $load steal $(steal_pct "$s0" "$(grep '^cpu ' /proc/stat)")%" \
        | tee -a "$out/runs.txt" >&2
    done
  done
done
python3 - "$out" <<'PY'
import glob, json, os, statistics as st, sys
from collections import defaultdict
d = sys.argv[1]
cells = defaultdict(list)
for f in glob.glob(d + "/*.json"):
    label, arm, _ = os.path.basename(f)[:-5].rsplit("-", 2)
    try:
        doc = json.load(open(f))
    except ValueError:
        continue
    for c in doc["cells"]:
        cells[(label, c["length"], c["concurrency"])].append((arm, c))
def p50s(cs, arm, key):
    return [c["summary"][key]["p50"] for a, c in cs if a == arm
            and c["summary"].get(key) and c["summary"][key]["p50"] is not None]
def fmt(v):
    return f"{st.median(v):.3f} ({min(v):.3f}..{max(v):.3f})" if v else "missing"
for k in sorted(cells):
    cs = cells[k]
    print(f"\n{k[0]}: {k[1]} text, concurrency {k[2]}")
    for key in ["rtf", "ttfp_ms", "tpot_ms", "required_prebuffer_ms"]:
        b, a = p50s(cs, "before", key), p50s(cs, "after", key)
        tag = ""
        if a and b and not (max(a) < min(b) or max(b) < min(a)):
            tag = "  NOT A RANKING"
        print(f"  {key:22} before {fmt(b):28} after {fmt(a):28}{tag}")
    for arm in ["before", "after"]:
        ok = sum(c["continuity_ok_at_prebuffer"] or 0 for a, c in cs if a == arm)
        n = sum(c["n"] for a, c in cs if a == arm)
        print(f"  continuity_ok at the prebuffer, {arm}: {ok}/{n}")
print()
print(open(d + "/bandwidth.txt").read(), end="")
PY
