#!/usr/bin/env bash
# Side-by-side benchmark: tts-rt vs the official PyTorch implementation
# (qwen-tts 0.1.1) on the same checkpoint, text and frame count.
# Run with --help for the options; docs/benchmarks.md has a run and its reading.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: benches/side_by_side.sh [options]

Runs `tts-rt speak` and the official qwen-tts (PyTorch) on the SAME checkpoint,
text and fixed frame count (end-of-speech suppressed on both sides), in
interleaved passes with the arm order rotated every pass, each run in a fresh
process. Prints per-stage time per frame (talker, code predictor, code2wav),
prefill and total for each arm as median (min..max) over the passes, the ratio
official / tts-rt, and provenance; writes the same as JSON.

Options (defaults in brackets):
  --model DIR          hub-layout checkpoint. Default: a random full-size 0.6B
                       generated once with `tts-rt gen-checkpoint --preset 0.6b
                       --seed 0` into target/side_by_side/q06b (reused when complete)
  --frames N           codec frames per run (80 ms of audio each) [50]
  --passes N           interleaved passes; every arm runs once per pass [3]
  --tts-precision L    tts-rt arms, comma-separated precisions; a per-stage pair is
                       written TALKER:CP[:CODE2WAV] (e.g. f32,int8,int8:f32,int8:int8:bf16)
                       [f32,int8]
  --ref-dtype L        official arms, comma-separated: bf16, f32, f16 [bf16,f32]
  --threads N          threads for both (RAYON_NUM_THREADS / torch.set_num_threads,
                       OMP_NUM_THREADS) [2]
  --text TEXT          [The quick brown fox jumps over the lazy dog near the river bank today.]
  --speaker NAME       [ryan]
  --language NAME      [english]
  --seed N             sampling seed of pass 1 (pass p uses seed+p-1) [1]
  --warmup-frames N    official arm: frames of the untimed warm-up generation [4]
  --bin PATH           tts-rt binary to use (default: cargo build --release here)
  --rev REV            build tts-rt at git revision REV in a temporary worktree
                       (target dir target/side_by_side/target) instead of the
                       working tree, so uncommitted edits cannot leak in
  --json PATH          report path [target/side_by_side/side_by_side-DATE.json]
  --max-load X         refuse to start when the 1-minute load average exceeds X
  --wait-load X        after building, wait (up to --wait-max seconds [1800]) until the
                       1-minute load average is below X before measuring
  --busy-load X        label the run BUSY when the 1-minute load before it exceeds X [1.0]
  --target X           ratio official-bf16 / fastest tts-rt to call "met" [6]
  -h, --help           this text

Environment:
  TTS_RT_REF_VENV      venv of the official implementation [tools/.venv]; created
                       from benches/requirements-ref.txt when missing (a few minutes,
                       ~6 GB: PyPI torch is a CUDA build)
  CARGO_TARGET_DIR     where the default build goes [target]

Needs torch: not part of .ci/run.
EOF
}

die() { echo "side_by_side.sh: $*" >&2; exit 2; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="" frames=50 passes=3 tts_prec="f32,int8" ref_dtype="bf16,f32" threads=2
text="The quick brown fox jumps over the lazy dog near the river bank today."
speaker=ryan language=english seed=1 warmup=4 bin="" rev="" json="" max_load="" busy_load=1.0 target=6 wait_load="" wait_max=1800
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --model|--frames|--passes|--tts-precision|--ref-dtype|--threads|--text|--speaker|--language|--seed|--warmup-frames|--bin|--rev|--json|--max-load|--busy-load|--target|--wait-load|--wait-max)
            [ $# -ge 2 ] || die "$1 needs a value (see --help)"
            case "$1" in
                --model) model=$2 ;; --frames) frames=$2 ;; --passes) passes=$2 ;;
                --tts-precision) tts_prec=$2 ;; --ref-dtype) ref_dtype=$2 ;; --threads) threads=$2 ;;
                --text) text=$2 ;; --speaker) speaker=$2 ;; --language) language=$2 ;;
                --seed) seed=$2 ;; --warmup-frames) warmup=$2 ;; --bin) bin=$2 ;; --rev) rev=$2 ;;
                --json) json=$2 ;; --max-load) max_load=$2 ;; --busy-load) busy_load=$2 ;;
                --target) target=$2 ;; --wait-load) wait_load=$2 ;; --wait-max) wait_max=$2 ;;
            esac
            shift 2 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_num() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]]; }
is_uint "$frames" && [ "$frames" -ge 1 ] || die "--frames must be a positive integer, got '$frames'"
is_uint "$passes" && [ "$passes" -ge 1 ] || die "--passes must be a positive integer, got '$passes'"
is_uint "$threads" && [ "$threads" -ge 1 ] || die "--threads must be a positive integer, got '$threads'"
is_uint "$seed" || die "--seed must be a non-negative integer, got '$seed'"
is_uint "$warmup" || die "--warmup-frames must be a non-negative integer, got '$warmup'"
is_num "$busy_load" || die "--busy-load must be a number, got '$busy_load'"
is_num "$target" || die "--target must be a number, got '$target'"
[ -z "$max_load" ] || is_num "$max_load" || die "--max-load must be a number, got '$max_load'"
[ -z "$wait_load" ] || is_num "$wait_load" || die "--wait-load must be a number, got '$wait_load'"
is_uint "$wait_max" || die "--wait-max must be a whole number of seconds, got '$wait_max'"
[ -z "$bin" ] || [ -z "$rev" ] || die "give --bin or --rev, not both"
if [ -n "$bin" ]; then bin_given=true; else bin_given=false; fi
[ "$passes" -ge 3 ] || echo "side_by_side.sh: warning: $passes pass(es); the measuring rules want at least 3" >&2

arms=()
IFS=, read -r -a precs <<<"$tts_prec"
for p in "${precs[@]}"; do
    [[ "$p" =~ ^[a-z0-9]+(:[a-z0-9]+){0,2}$ ]] || die "--tts-precision: bad entry '$p' (e.g. f32, int8, int8:f32, int8:int8:bf16)"
    arms+=("tts-rt:$p")
done
IFS=, read -r -a dts <<<"$ref_dtype"
for d in "${dts[@]}"; do
    case "$d" in bf16|f32|f16) arms+=("official:$d") ;; *) die "--ref-dtype: '$d' is not bf16, f32 or f16" ;; esac
done
[ "${#arms[@]}" -ge 2 ] || die "need at least two arms"

load1() { cut -d' ' -f1 /proc/loadavg; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
if [ -n "$max_load" ] && awk -v l="$(load1)" -v m="$max_load" 'BEGIN{exit !(l>m)}'; then
    die "1-minute load $(load1) is above --max-load $max_load: the cores are busy, not measuring"
fi

work="$root/target/side_by_side"
mkdir -p "$work"
tmp=$(mktemp -d)
cleanup() {
    rm -rf "$tmp"
    if [ -n "${wt:-}" ]; then git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the official implementation's venv ---------------------------------------------
venv="${TTS_RT_REF_VENV:-$root/tools/.venv}"
if [ ! -x "$venv/bin/python" ]; then
    echo "creating reference venv at $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --upgrade pip >&2
    (cd "$root/benches" && "$venv/bin/python" -m pip install -r requirements-ref.txt >&2)
fi
"$venv/bin/python" -c "import qwen_tts, torch" 2>/dev/null \
    || die "$venv has no working qwen_tts/torch; remove it or point TTS_RT_REF_VENV elsewhere"

# --- tts-rt binary ----------------------------------------------------------------
if [ -n "$rev" ]; then
    commit=$(git -C "$root" rev-parse --verify "$rev^{commit}") || die "--rev $rev: not a commit"
    # A fixed path: cargo's fingerprints include it, so reruns build incrementally.
    wt="$work/wt"
    git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"
    git -C "$root" worktree add --force --detach "$wt" "$commit" >/dev/null
    echo "building tts-rt at ${commit:0:10} (worktree, target $work/target)" >&2
    (cd "$wt" && CARGO_TARGET_DIR="$work/target" cargo build --release --quiet --bin tts-rt)
    bin="$work/target/release/tts-rt"
    dirty=false
    built_from="git $commit (clean worktree)"
elif [ -z "$bin" ]; then
    (cd "$root" && cargo build --release --quiet --bin tts-rt)
    bin="${CARGO_TARGET_DIR:-$root/target}/release/tts-rt"
    commit=$(git -C "$root" rev-parse HEAD)
    if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then dirty=true; else dirty=false; fi
    built_from="working tree at $commit$([ "$dirty" = true ] && echo ' with uncommitted changes')"
else
    [ -x "$bin" ] || die "--bin $bin is not an executable"
    commit=$(git -C "$root" rev-parse HEAD)
    dirty=unknown
    built_from="--bin $bin (commit unknown; repo HEAD $commit)"
fi

# --- checkpoint -----------------------------------------------------------------
complete() {
    local d=$1 f
    for f in config.json generation_config.json model.safetensors vocab.json merges.txt \
        tokenizer_config.json preprocessor_config.json speech_tokenizer/config.json \
        speech_tokenizer/model.safetensors speech_tokenizer/preprocessor_config.json; do
        [ -s "$d/$f" ] || return 1
    done
    "$bin" voices --model "$d" >/dev/null 2>&1   # loads and checks every tensor
}
model_note="given"
if [ -z "$model" ]; then
    model="$work/q06b"
    model_note="random full-size 0.6B: tts-rt gen-checkpoint --preset 0.6b --seed 0"
    if ! complete "$model"; then
        echo "generating $model (full-size random 0.6B, ~2.3 GB)" >&2
        rm -rf "$model"
        "$bin" gen-checkpoint --preset 0.6b --seed 0 --out "$model" >&2
    fi
fi
complete "$model" || die "$model is not a complete checkpoint (missing files, or tts-rt voices --model fails)"
model=$(cd "$model" && pwd)

# --- runs -------------------------------------------------------------------------
if [ -n "$wait_load" ]; then
    waited=0
    while awk -v l="$(load1)" -v m="$wait_load" 'BEGIN{exit !(l>=m)}'; do
        [ "$waited" -lt "$wait_max" ] || { echo "side_by_side.sh: load still $(load1) after ${wait_max}s; measuring anyway (labelled)" >&2; break; }
        sleep 15; waited=$((waited + 15))
    done
    echo "waited ${waited}s for load < $wait_load" >&2
fi
runs="$tmp/runs.jsonl"
: >"$runs"
load_before=$(loadavg)
echo "load average before: $load_before; arms: ${arms[*]}; $passes passes of $frames frames" >&2
n_arms=${#arms[@]}
# GNU time gives tts-rt's CPU time (the official driver measures its own).
if [ -x /usr/bin/time ]; then timer=(/usr/bin/time -f '%e %U %S' -o "$tmp/time"); else timer=(env); fi
for ((p = 0; p < passes; p++)); do
    for ((k = 0; k < n_arms; k++)); do
        arm=${arms[$(((k + p) % n_arms))]}
        s=$((seed + p))
        l0=$(load1)
        t0=$(date +%s.%N)
        case "$arm" in
            tts-rt:*)
                prec=${arm#tts-rt:}
                if ! RAYON_NUM_THREADS=$threads "${timer[@]}" "$bin" speak "$text" --model "$model" --speaker "$speaker" \
                    --language "$language" --precision "${prec//:/,}" --max-frames "$frames" --ignore-eos \
                    --seed "$s" --timings --out "$tmp/x.wav" 2>"$tmp/err" >/dev/null; then
                    cat "$tmp/err" >&2; die "arm $arm failed in pass $((p + 1))"
                fi
                line=$(grep '^{' "$tmp/err" | tail -n 1)
                # cores busy on average over the process = (user + sys) / wall
                busy=$([ -s "$tmp/time" ] && awk '{ if ($1 > 0) printf "%.3f", ($2 + $3) / $1; else print "null" }' "$tmp/time" || echo null) ;;
            official:*)
                if ! OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads "$venv/bin/python" \
                    "$root/benches/side_by_side_ref.py" run --model "$model" --frames "$frames" \
                    --dtype "${arm#official:}" --threads "$threads" --text "$text" --speaker "$speaker" \
                    --language "$language" --seed "$s" --warmup-frames "$warmup" \
                    >"$tmp/out" 2>"$tmp/err"; then
                    cat "$tmp/err" >&2; die "arm $arm failed in pass $((p + 1))"
                fi
                line=$(grep '^{' "$tmp/out" | tail -n 1)
                busy=null ;;  # measured by the driver over the timed generation only
        esac
        [ -n "$line" ] || { cat "$tmp/err" >&2; die "arm $arm printed no timings line"; }
        wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
        printf '{"arm":"%s","pass":%d,"position":%d,"seed":%d,"load1_before":%s,"load1_after":%s,"process_wall_s":%s,"cpu_cores_busy":%s,"timings":%s}\n' \
            "$arm" $((p + 1)) $((k + 1)) "$s" "$l0" "$(load1)" "$wall" "$busy" "$line" >>"$runs"
        echo "pass $((p + 1))/$passes  $arm  ${wall}s  load $l0 -> $(load1)" >&2
    done
done
load_after=$(loadavg)

# --- report -----------------------------------------------------------------------
[ -n "$json" ] || json="$work/side_by_side-$(date -u +%Y%m%dT%H%M%SZ).json"
rerun="benches/side_by_side.sh --model $model --frames $frames --passes $passes --tts-precision $tts_prec --ref-dtype $ref_dtype --threads $threads --seed $seed --warmup-frames $warmup --speaker $speaker --language $language"
[ -z "$rev" ] || rerun="$rerun --rev ${commit:0:12}"
[ "$bin_given" = false ] || rerun="$rerun --bin $bin"
rerun="$rerun --text '${text//\'/\'\\\'\'}'"
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ' | sed 's/ $//')
"$venv/bin/python" - "$tmp/meta.json" "$frames" "$passes" "$threads" "$text" "$speaker" "$language" \
    "$model" "$model_note" "$rerun" "$cpu" "$flags" "$(nproc)" "$load_before" "$load_after" "$busy_load" \
    "$commit" "$dirty" "$built_from" "$target" "$bin" "${arms[@]}" <<'PY'
import json, os, sys
(out, frames, passes, threads, text, speaker, language, model, note, rerun, cpu, flags, cores,
 lb, la, busy, commit, dirty, built, target, binary, *arms) = sys.argv[1:]
cfg = json.load(open(os.path.join(model, "config.json")))
t = cfg["talker_config"]
cp = t["code_predictor_config"]
json.dump({
    "frames": int(frames), "passes": int(passes), "threads": int(threads), "text": text,
    "speaker": speaker, "language": language, "model": model,
    "model_note": note + f"; talker {t['num_hidden_layers']}x{t['hidden_size']}, code predictor "
                         f"{cp['num_hidden_layers']}x{cp['hidden_size']}, {t['num_code_groups']} groups",
    "rerun": rerun, "arms": arms, "target_ratio": float(target), "binary": binary,
    "provenance": {"cpu": cpu, "cpu_flags": flags, "cores": int(cores), "load_before": lb,
                   "load_after": la, "busy": float(lb.split()[0]) > float(busy),
                   "busy_threshold": float(busy), "git_commit": commit,
                   "git_dirty": dirty == "true", "built_from": built,
                   "env": {k: os.environ.get(k) for k in ("TTS_RT_ISA", "TTS_RT_REF_VENV")}},
}, open(out, "w"), indent=1)
PY
"$venv/bin/python" - "$runs" "$tmp/flat.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w") as f:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        r.update(r.pop("timings"))
        f.write(json.dumps(r) + "\n")
PY
"$venv/bin/python" "$root/benches/side_by_side_ref.py" summarize --runs "$tmp/flat.jsonl" \
    --meta "$tmp/meta.json" --json "$json"
