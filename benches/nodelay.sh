#!/usr/bin/env bash
# Client-observed time to first audio over HTTP (`POST /v1/audio/speech`,
# streamed pcm) and the realtime WebSocket, with the client's socket in
# TCP_NODELAY and with Nagle left on. The server sets TCP_NODELAY on every
# accepted socket and has no switch to turn it off, so only the client side
# varies here (what an SDK that does not set it sees, against one that
# does). Timed from the request's last byte written to the first audio
# byte read (HTTP: the first body byte after the headers; WebSocket: the
# first binary audio frame). Arms interleaved, their order rotated every
# pass; per arm the median and min..max over runs, with the 1-minute load
# at the start.
#
# Usage:
#   benches/nodelay.sh BIN MODEL_DIR [PASSES=10] [PRECISION=int8]
# Needs python3 with `websockets` (tests/python/requirements.txt). Starts its
# own `BIN serve` on 127.0.0.1 (loopback only) and stops it at the end.
#
# Run it on a quiet machine only: figures from a loaded one say nothing
# (docs/benchmarks.md, "TCP_NODELAY: first audio on the wire").
set -euo pipefail
bin=${1:?tts-rt binary}
model=${2:?model dir}
passes=${3:-10}
precision=${4:-int8}
port=${PORT:-18735}
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
python3 - "$port" "$passes" "$out" <<'PY'
import json, socket, statistics, sys, time
from websockets.sync.client import connect

port, passes, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
TEXT = "Hello there, this is a short reply."
SESSION = {"greedy": True, "max_frames": 40}

def sock(nodelay):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if nodelay else 0)
    return s

def http(nodelay):
    body = json.dumps({"input": TEXT, "voice": "alloy", "response_format": "pcm", **SESSION}).encode()
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    s = sock(nodelay)
    try:
        # Headers and body in two writes, as most HTTP clients send them:
        # the second small write is what Nagle holds for the peer's ACK.
        s.sendall(head)
        s.sendall(body)
        t0 = time.perf_counter()
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("closed before the headers")
            buf += chunk
        rest = buf.split(b"\r\n\r\n", 1)[1]
        while not rest:
            rest = s.recv(65536)
            if not rest:
                raise RuntimeError("closed before any audio")
        first = time.perf_counter() - t0
        while s.recv(65536):
            pass
        return first
    finally:
        s.close()

def ws(nodelay):
    with connect(f"ws://127.0.0.1:{port}/v1/realtime", sock=sock(nodelay), max_size=4 << 20) as c:
        json.loads(c.recv())  # session.created
        c.send(json.dumps({"type": "session.update", "session": SESSION}))
        json.loads(c.recv())  # session.updated
        c.send(json.dumps({"type": "context.append", "context_id": "c", "text": TEXT}))
        c.send(json.dumps({"type": "context.end", "context_id": "c"}))
        t0 = time.perf_counter()
        first = None
        while True:
            m = c.recv()
            if isinstance(m, bytes):
                if first is None and len(m) > 16:
                    first = time.perf_counter() - t0
                continue
            if json.loads(m)["type"] in ("context.done", "context.failed", "context.cancelled"):
                return first

ARMS = {f"{route} nodelay={nd}": (fn, nd) for route, fn in (("http", http), ("ws", ws)) for nd in (True, False)}
names = list(ARMS)
results = {n: [] for n in names}
loads = []
for p in range(passes):
    order = names[p % len(names):] + names[:p % len(names)]
    for n in order:
        loads.append(float(open("/proc/loadavg").read().split()[0]))
        fn, nd = ARMS[n]
        results[n].append(fn(nd) * 1e3)
json.dump({"results": results, "loads": loads}, open(f"{out}/nodelay.json", "w"))
print(f"first audio, client-observed, ms ({passes} runs per arm; 1-min load {min(loads):.2f}..{max(loads):.2f})")
for n in names:
    r = sorted(results[n])
    print(f"  {n:22s} median {statistics.median(r):7.1f}  min..max {r[0]:.1f}..{r[-1]:.1f}")
PY
