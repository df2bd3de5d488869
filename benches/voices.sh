#!/usr/bin/env bash
# Voices on a Base checkpoint: the cost of making one, and a stored voice's
# time to first packet against a preset speaker's (docs/benchmarks.md,
# "Voices").
#
# 1. The cost of making a voice: `bench --clone-cost` (x-vector and codes
#    timed apart on synthetic 3, 10 and 20 s clips; RUNS interleaved runs
#    after one warm-up of each; median and range) on --threads 2.
# 2. ttfp of the ten-word sentence at concurrency 1, greedy, 2 fixed frames,
#    in both text modes, for three arms, interleaved with their order
#    rotated every pass:
#      cv   the same weights read as a CustomVoice checkpoint (a directory of
#           symlinks to BASE's files with a CustomVoice config.json: the
#           nine preset speakers and twelve languages): a preset speaker;
#      xv   BASE, a stored voice made once from a 5 s synthetic clip, x-vector
#           only (its prompt has the CustomVoice layout, the x-vector in the
#           speaker's row);
#      icl  BASE, the same voice with its reference codes and transcript
#           (the prompt grows by the reference's frames and text);
#      cv0, xv0, icl0  the same with the talker's prefix cache off
#           (`--prefix-cache-mb 0`): every request prefills every row. With
#           it on (the default) the rows a voice's requests share (role,
#           codec prefix with the speaker or x-vector, an ICL clone's
#           transcript) are computed by the warm-up request only.
#    Per arm: the median (min..max) over passes of each run's ttfp_ms p50,
#    the prompt rows and the 1-minute load before each run.
#
# Usage:
#   benches/voices.sh BIN BASE_DIR [PASSES=3] [REPEATS=5] [RUNS=7]
# Env: OUT=dir for the raw JSON (default: a temp dir), MODES="prefill streaming",
#      ARMS="cv cv0 xv xv0 icl icl0".
set -euo pipefail
bin=${1:?tts-rt binary}
base=${2:?Base checkpoint dir}
passes=${3:-3}
repeats=${4:-5}
runs=${5:-7}
modes=${MODES:-prefill streaming}
arm_names=${ARMS:-cv cv0 xv xv0 icl icl0}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "raw results in $out" >&2

echo "clone cost ($runs runs, load $(cut -d' ' -f1 /proc/loadavg))" >&2
"$bin" --threads 2 bench --clone-cost --model "$base" --clone-runs "$runs" --json >"$out/clone-cost.json"

cv="$out/cv-view"
mkdir -p "$cv"
base_abs=$(cd "$base" && pwd)
for f in model.safetensors speech_tokenizer generation_config.json vocab.json merges.txt \
  tokenizer_config.json preprocessor_config.json; do
  ln -sfn "$base_abs/$f" "$cv/$f"
done
python3 - "$base/config.json" "$cv/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["tts_model_type"] == "base", c["tts_model_type"]
c["tts_model_type"] = "custom_voice"
t = c["talker_config"]
spk = {"serena": 3066, "vivian": 3065, "uncle_fu": 3010, "ryan": 3061, "aiden": 2861,
       "ono_anna": 2873, "sohee": 2864, "eric": 2875, "dylan": 2878}
t["spk_id"] = spk
t["spk_is_dialect"] = {k: False for k in spk}
t["spk_is_dialect"].update({"eric": "sichuan_dialect", "dylan": "beijing_dialect"})
t["codec_language_id"].update({"beijing_dialect": 2074, "sichuan_dialect": 2062})
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY

arms=()
for m in $modes; do for a in $arm_names; do arms+=("$a:$m"); done; done
n=${#arms[@]}
for pass in $(seq 1 "$passes"); do
  for k in $(seq 0 $((n - 1))); do
    arm=${arms[$(( (k + pass - 1) % n ))]}
    voice=${arm%%:*}
    mode=${arm##*:}
    flag=()
    [ "$mode" = streaming ] && flag+=(--text-streaming)
    model=$base
    case $voice in
      cv*) model=$cv ;;
      xv*) flag+=(--x-vector-only) ;;
    esac
    case $voice in
      *0) flag+=(--prefix-cache-mb 0) ;;
    esac
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "pass $pass $arm (load $load)" >&2
    "$bin" --threads 2 bench --model "$model" --lengths ten --concurrency 1 \
      --repeats "$repeats" --warmup 1 --frames 2 --greedy --ref-seconds 5 "${flag[@]}" --json \
      >"$out/$voice-$mode-$pass.json"
    echo "$voice $mode $pass $load" >>"$out/runs.txt"
  done
done

python3 - "$out" <<'PY'
import json, sys, statistics, collections
out = sys.argv[1]
d = json.load(open(f"{out}/clone-cost.json"))
cc = d["clone_cost"]
print(f"clone cost: {cc['runs']} runs, threads {d['provenance']['threads']}, isa {d['provenance']['isa']}, commit {d['provenance']['git_commit'][:7]}")
print("| clip | x-vector ms: median (min..max) | x-vector ms per s | codes ms: median (min..max) | codes ms per s | first call (warm-up) x-vector / codes ms |")
print("|---|---|---|---|---|---|")
def mm(v):
    return f"{v['median']:.1f} ({v['min']:.1f}..{v['max']:.1f})"
for r in cc["rows"]:
    w = r["warmup"]
    print(f"| {r['seconds']:g} s | {mm(r['x_vector_ms'])} | {r['x_vector_ms_per_s']:.1f} | {mm(r['codes_ms'])} | "
          f"{r['codes_ms_per_s']:.1f} | {w['x_vector_ms']:.0f} / {w['codes_ms']:.0f} |")
runs = collections.defaultdict(list)
made = {}
for line in open(f"{out}/runs.txt"):
    voice, mode, p, load = line.split()
    d = json.load(open(f"{out}/{voice}-{mode}-{p}.json"))
    c = d["cells"][0]
    runs[(voice, mode)].append((c["summary"]["ttfp_ms"]["p50"], float(load), c["prompt_rows"], c["summary"]["ttfp_ms"]["n"]))
    m = d["voice"].get("make_once")
    if m:
        made.setdefault(voice, []).append(m)
def mmm(v, d=0):
    return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}..{max(v):.{d}f})"
names = {"cv": "preset speaker (CustomVoice view of the same weights)",
         "xv": "stored voice, x-vector only", "icl": "stored voice, ICL (5 s reference)"}
for k in list(names):
    names[k + "0"] = names[k] + ", prefix cache off"
print()
print("| voice | text | prompt rows (prefill + trailing) | rows from the prefix cache | ttfp_ms p50: median (min..max) over runs | runs × requests | load 1m at start |")
print("|---|---|---|---|---|---|---|")
for (voice, mode), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    rows = rs[0][2]
    print(f"| {names[voice]} | {mode} | {rows['prefill']} + {rows['trailing_text']} | {rows.get('shared_prefix', 0)} | {mmm([r[0] for r in rs])} | "
          f"{len(rs)} × {rs[0][3]} | {', '.join(f'{r[1]:.2f}' for r in rs)} |")
def compare(mode, x, y):
    a = [r[0] for r in runs.get((y, mode), [])]
    b = [r[0] for r in runs.get((x, mode), [])]
    if a and b:
        ratio = statistics.median(b) / statistics.median(a)
        overlap = min(a) <= max(b) and min(b) <= max(a)
        print(f"{mode}: {x} / {y} = {ratio:.3f}" + ("  (ranges overlap: not a ranking)" if overlap else ""))
for mode in sorted({m for _, m in runs}):
    for x, y in (("xv", "cv"), ("icl", "cv"), ("xv0", "cv0"), ("icl0", "cv0"), ("cv", "cv0"), ("xv", "xv0"), ("icl", "icl0")):
        compare(mode, x, y)
for v, ms in made.items():
    print(f"{v}: made once per run: x-vector {mmm([m['x_vector_ms'] for m in ms])} ms, codes "
          + ("n/a (x-vector only)" if ms[0]["codes_ms"] is None else f"{mmm([m['codes_ms'] for m in ms])} ms"))
PY
