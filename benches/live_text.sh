#!/usr/bin/env bash
# Time to first audio of live text (`chunking.mode: live`) against segmented
# text (the default clause segmentation, and sentence) for an LLM-like token
# stream: the reply's words sent as tokens at RATE tokens/s over the realtime
# WebSocket, timed on the client from its first text byte to the first audio
# frame received (and the server's own `ttfp_from_text_ms`). Arms are
# interleaved, their order rotated every pass; per arm the median and the
# spread (min..max, and p10..p90 when there are 10+ runs) over runs, with the
# 1-minute load at each run's start.
#
# Usage:
#   benches/live_text.sh BIN MODEL_DIR [PASSES=5] [RATE=30] [PRECISION=int8]
# Needs python3 with `websockets` (tests/python/requirements.txt). Starts its
# own `BIN serve` on 127.0.0.1 and stops it at the end.
#
# Run it on a quiet machine only: figures from a loaded one say nothing
# (docs/benchmarks.md, "Live text: ttfp against segmented text").
set -euo pipefail
bin=${1:?tts-rt binary}
model=${2:?model dir}
passes=${3:-5}
rate=${4:-30}
precision=${5:-int8}
port=${PORT:-18734}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "raw results in $out" >&2
"$bin" serve --model "$model" --precision "$precision" --host 127.0.0.1 --port "$port" \
  2>"$out/serve.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
  sleep 0.5
done
python3 - "$port" "$passes" "$rate" "$out" <<'PY'
import json, statistics, sys, time
from websockets.sync.client import connect

port, passes, rate, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
REPLY = ("Sure, I can help with that. The quickest way is to take the train to the "
         "central station, then walk two blocks north. It should take about twenty "
         "minutes in total, and the trains run every ten minutes until midnight.")
words = REPLY.split(" ")
tokens = [words[0]] + [" " + w for w in words[1:]]
ARMS = {
    "live": {"chunking": {"mode": "live"}, "text_mode": "streaming"},
    "clause": {"chunking": {"mode": "clause"}, "text_mode": "streaming"},
    "sentence": {"chunking": {"mode": "sentence"}, "text_mode": "streaming"},
}

def run(arm):
    load = float(open("/proc/loadavg").read().split()[0])
    with connect(f"ws://127.0.0.1:{port}/v1/realtime", proxy=None, max_size=4 << 20) as ws:
        json.loads(ws.recv())  # session.created
        ws.send(json.dumps({"type": "session.update", "session": {**ARMS[arm], "greedy": True}}))
        json.loads(ws.recv())  # session.updated
        t0 = None
        first = None
        i = 0
        next_at = time.monotonic()
        done = None
        while done is None:
            now = time.monotonic()
            if i <= len(tokens) and now >= next_at:
                if i < len(tokens):
                    ws.send(json.dumps({"type": "context.append", "context_id": "r", "text": tokens[i]}))
                    t0 = t0 or time.monotonic()
                else:
                    ws.send(json.dumps({"type": "context.end", "context_id": "r"}))
                i += 1
                next_at += 1.0 / rate
                continue
            try:
                m = ws.recv(timeout=max(0.0, next_at - now) if i <= len(tokens) else 60)
            except TimeoutError:
                continue
            if isinstance(m, bytes):
                first = first or time.monotonic()
            else:
                m = json.loads(m)
                if m["type"] in ("context.done", "context.failed", "context.cancelled"):
                    done = m
    met = done.get("metrics", {})
    return {"arm": arm, "load": load, "client_ttfa_ms": (first - t0) * 1e3 if first else None,
            "server_ttfp_from_text_ms": met.get("ttfp_from_text_ms"), "segments": met.get("segments"),
            "pauses": len(met.get("pauses") or []), "outcome": done["type"]}

arms = list(ARMS)
runs = []
for p in range(passes):
    for k in range(len(arms)):
        arm = arms[(k + p) % len(arms)]
        r = run(arm)
        print(json.dumps(r), file=sys.stderr)
        runs.append(r)
json.dump(runs, open(f"{out}/runs.json", "w"), indent=1)

def spread(v):
    v = sorted(v)
    s = f"{statistics.median(v):.0f} ({v[0]:.0f}..{v[-1]:.0f})"
    if len(v) >= 10:
        q = statistics.quantiles(v, n=10)
        s += f", p10..p90 {q[0]:.0f}..{q[-1]:.0f}"
    return s

print(f"| text ({rate:.0f} tokens/s) | client first audio ms: median (min..max) | server ttfp_from_text_ms | segments | pauses | runs | load 1m |")
print("|---|---|---|---|---|---|---|")
for arm in arms:
    rs = [r for r in runs if r["arm"] == arm and r["client_ttfa_ms"] is not None]
    if not rs:
        continue
    srv = [r["server_ttfp_from_text_ms"] for r in rs if r["server_ttfp_from_text_ms"] is not None]
    print(f"| {arm} | {spread([r['client_ttfa_ms'] for r in rs])} | {spread(srv) if srv else '-'} | "
          f"{statistics.median(r['segments'] or 0 for r in rs):.0f} | {statistics.median(r['pauses'] for r in rs):.0f} | "
          f"{len(rs)} | {min(r['load'] for r in rs):.2f}..{max(r['load'] for r in rs):.2f} |")
PY
