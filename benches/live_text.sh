#!/usr/bin/env bash
# Time to first audio of live text (`chunking.mode: live`) against segmented
# text (the default clause segmentation, and sentence) for an LLM-like token
# stream: the reply's words sent as tokens at RATE tokens/s over the realtime
# WebSocket, timed on the client from its first text byte to the first audio
# frame received (and the server's own `ttfp_from_text_ms`). Arms are
# interleaved, their order rotated every pass; per arm the median and the
# spread (min..max, and p10..p90 when there are 10+ runs) over runs, with the
# 1-minute load at each run's start, and each segmented arm against live
# ("NOT A RANKING" where the min..max ranges overlap).
#
# Usage:
#   benches/live_text.sh BIN MODEL_DIR [PASSES=5] [RATE=30] [PRECISION=int8]
# Env:
#   UNTIL=first  (default) the context is cancelled once its first audio has
#                arrived: first audio depends only on what came before it, and
#                a random-weight checkpoint never ends a segment by itself
#                (every segment runs to MAX_FRAMES), so whole contexts would
#                take minutes. `segments` is then those submitted by the cancel.
#   UNTIL=done   the whole reply is spoken (`context.end`, then `context.done`):
#                adds the segments and the pauses (waits for text) of the
#                whole context.
#   MAX_FRAMES=40  codec frames per segment at most (session `max_frames`).
#   OUT=dir      keeps the raw runs (runs.json) and the server's log.
#   TTS_RT_WEIGHTS_CACHE=dir is read by the server (reuse int8 weights).
# Needs python3 with `websockets` (tests/python/requirements.txt). Starts its
# own `BIN serve` on 127.0.0.1, any free port, and stops it at the end.
#
# Run it on a quiet machine: figures from a loaded one say little
# (docs/benchmarks.md, "Live text: ttfp against segmented text").
set -euo pipefail
# shellcheck source=benches/serve_lib.sh
. "$(dirname "$0")/serve_lib.sh"
bin=${1:?tts-rt binary}
model=${2:?model dir}
passes=${3:-5}
rate=${4:-30}
precision=${5:-int8}
until_=${UNTIL:-first}
max_frames=${MAX_FRAMES:-40}
case "$until_" in first | done) ;; *) echo "UNTIL must be first or done, got '$until_'" >&2; exit 2 ;; esac
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "raw results in $out" >&2
"$bin" serve --model "$model" --precision "$precision" --host 127.0.0.1 --port 0 \
  >"$out/serve.out" 2>"$out/serve.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
addr=$(serve_addr "$out/serve" "$server")
serve_ready "$addr"
commit=$(build_commit "$(dirname "$0")")
python3 - "$addr" "$passes" "$rate" "$out" "$until_" "$max_frames" "$commit" "$precision" "$model" <<'PY'
import json, os, statistics, sys, time
from websockets.sync.client import connect

addr, passes, rate, out, until, max_frames, commit, precision, model = sys.argv[1:10]
passes, rate, max_frames = int(passes), float(rate), int(max_frames)
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
TERMINAL = ("context.done", "context.failed", "context.cancelled")

def run(arm):
    load = float(open("/proc/loadavg").read().split()[0])
    with connect(f"ws://{addr}/v1/realtime", proxy=None, max_size=4 << 20) as ws:
        json.loads(ws.recv())  # session.created
        ws.send(json.dumps({"type": "session.update", "session": {
            **ARMS[arm], "greedy": True, "max_frames": max_frames}}))
        upd = json.loads(ws.recv())
        if upd.get("type") != "session.updated":
            raise RuntimeError(f"session.update refused: {upd}")
        t0 = first = done = sent_at_first = None
        i = 0  # tokens sent; len(tokens) + 1 once context.end (or the cancel) went out
        next_at = time.monotonic()
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
                m = ws.recv(timeout=max(0.0, next_at - now) if i <= len(tokens) else 120)
            except TimeoutError:
                if i > len(tokens):
                    raise RuntimeError("no terminal message within 120 s")
                continue
            if isinstance(m, bytes):
                if first is None:
                    first = time.monotonic()
                    sent_at_first = min(i, len(tokens))
                    if until == "first":
                        ws.send(json.dumps({"type": "context.cancel", "context_id": "r"}))
                        i = len(tokens) + 1  # nothing more to send
            else:
                m = json.loads(m)
                if m["type"] in TERMINAL:
                    done = m
                elif m["type"] == "error":
                    raise RuntimeError(f"error: {m}")
    met = done.get("metrics") or {}
    ok = done["type"] == ("context.cancelled" if until == "first" else "context.done")
    return {"arm": arm, "load1": load, "client_first_audio_ms": (first - t0) * 1e3 if first else None,
            "server_ttfp_from_text_ms": met.get("ttfp_from_text_ms"), "server_ttfp_ms": met.get("ttfp_ms"),
            "segments": met.get("segments"), "pauses": len(met.get("pauses") or []),
            "tokens_before_first_audio": sent_at_first, "outcome": done["type"], "ok": ok}

arms = list(ARMS)
runs = []
for p in range(passes):
    for k in range(len(arms)):
        arm = arms[(k + p) % len(arms)]
        try:
            r = run(arm)
        except Exception as e:  # recorded as missing, never as zero
            r = {"arm": arm, "client_first_audio_ms": None, "error": f"{type(e).__name__}: {e}", "ok": False}
        r["pass"] = p
        print(json.dumps(r), file=sys.stderr)
        runs.append(r)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
prov = {"commit": commit, "cpu": cpu, "cpus": os.cpu_count(), "precision": precision, "model": model,
        "passes": passes, "rate": rate, "until": until, "max_frames": max_frames,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "reply": REPLY, "tokens": len(tokens)}
json.dump({"provenance": prov, "runs": runs}, open(f"{out}/runs.json", "w"), indent=1)

def spread(v):
    if not v:
        return "missing"
    v = sorted(v)
    s = f"{statistics.median(v):.0f} ({v[0]:.0f}..{v[-1]:.0f})"
    if len(v) >= 10:
        q = statistics.quantiles(v, n=10)
        s += f", p10..p90 {q[0]:.0f}..{q[-1]:.0f}"
    return s

loads = [r["load1"] for r in runs if "load1" in r]
print(f"commit {commit}, {cpu}, {os.cpu_count()} CPUs, precision {precision}, {prov['date']}, "
      f"{passes} passes, {rate:.0f} tokens/s ({len(tokens)} tokens), until {until}, max_frames {max_frames}, "
      f"1-min load {min(loads, default=0):.2f}..{max(loads, default=0):.2f}")
seg_col = "segments" if until == "done" else "segments by the cancel"
print(f"| text ({rate:.0f} tokens/s) | client first audio ms: median (min..max) | server ttfp_from_text_ms | "
      f"tokens sent before it | {seg_col} | pauses | runs | load 1m | vs live |")
print("|---|---|---|---|---|---|---|---|---|")
first_of = {a: [r["client_first_audio_ms"] for r in runs if r["arm"] == a and r["ok"]
                and r["client_first_audio_ms"] is not None] for a in arms}
for arm in arms:
    rs = [r for r in runs if r["arm"] == arm and r["ok"] and r["client_first_audio_ms"] is not None]
    failed = len([r for r in runs if r["arm"] == arm]) - len(rs)
    srv = [r["server_ttfp_from_text_ms"] for r in rs if r["server_ttfp_from_text_ms"] is not None]
    segs = [r["segments"] for r in rs if r["segments"] is not None]
    toks = [r["tokens_before_first_audio"] for r in rs if r["tokens_before_first_audio"] is not None]
    f, base = first_of[arm], first_of["live"]
    if arm == "live":
        vs = "(baseline)"
    elif f and base:
        overlap = min(f) <= max(base) and min(base) <= max(f)
        vs = f"{statistics.median(f) - statistics.median(base):+.0f} ms" + (" NOT A RANKING" if overlap else "")
    else:
        vs = "missing"
    lr = f"{min(r['load1'] for r in rs):.2f}..{max(r['load1'] for r in rs):.2f}" if rs else "-"
    pauses = format(statistics.median(r["pauses"] for r in rs), 'g') if rs and until == "done" else "-"
    print(f"| {arm} | {spread(f)} | {spread(srv)} | {format(statistics.median(toks), 'g') if toks else 'missing'} | "
          f"{format(statistics.median(segs), 'g') if segs else 'missing'} | {pauses} | "
          f"{len(rs)}{f' ({failed} failed)' if failed else ''} | {lr} | {vs} |")
PY
