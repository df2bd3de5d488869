#!/usr/bin/env bash
# Per-stage milliseconds per frame of `tts-rt speak`, median (min..max) of N
# runs, with provenance. Usage:
#   benches/stage_times.sh MODEL_DIR [RUNS=3] [FRAMES=40] [extra speak args...]
# e.g. tts-rt gen-checkpoint --preset 0.6b --out /tmp/q06b && benches/stage_times.sh /tmp/q06b 5
set -euo pipefail
model=${1:?model dir}
runs=${2:-3}
frames=${3:-40}
shift $(( $# < 3 ? $# : 3 ))
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/tts-rt
text="The quick brown fox jumps over the lazy dog near the river bank today."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq 1 "$runs"); do
  "$bin" speak "$text" --model "$model" --out "$out/x.wav" --max-frames "$frames" --seed "$i" --timings "$@" \
    2>>"$out/timings.jsonl" >/dev/null
done
python3 - "$out/timings.jsonl" "$model" <<'PY'
import json, subprocess, sys, statistics, os, platform
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def med(k):
    v = [r[k] for r in rows if r.get(k) is not None]
    if not v:
        return "missing"
    return f"{statistics.median(v):.1f} ({min(v):.1f}..{max(v):.1f})"
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
print(f"model {sys.argv[2]}; runs {len(rows)}; frames {[r['frames'] for r in rows]}; prompt rows {rows[0]['prompt_rows']}")
print(f"commit {commit}; cpu {cpu}; isa {rows[0]['isa']}; threads {rows[0]['threads']}; decode {rows[0]['decode']}")
print("stage                   ms/frame median (min..max)")
for k, name in [("talker_ms_per_frame", "talker"), ("code_predictor_ms_per_frame", "code predictor"),
                ("code2wav_ms_per_frame", "code2wav"), ("prefill_ms", "prefill (ms total)")]:
    print(f"{name:<24}{med(k)}")
tot = [r["talker_ms_per_frame"] + r["code_predictor_ms_per_frame"] + r["code2wav_ms_per_frame"] for r in rows]
print(f"{'sum (no prefill)':<24}{statistics.median(tot):.1f} ({min(tot):.1f}..{max(tot):.1f})  -> rtf ~ {statistics.median(tot)/rows[0]['frame_ms']:.2f} (frame = {rows[0]['frame_ms']:.0f} ms of audio)")
PY
