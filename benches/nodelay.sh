#!/usr/bin/env bash
# Client-observed time to first audio over HTTP (`POST /v1/audio/speech`,
# streamed pcm) and the realtime WebSocket, with TCP_NODELAY on and off on
# each side of the connection:
#
# - server side: two `BIN serve` processes on the same checkpoint, one as
#   shipped (TCP_NODELAY on every accepted socket) and one started with
#   `TTS_RT_NODELAY=off` (the measurement switch the binary reads once at
#   start, passed to transport/src/listener.rs: accepted sockets keep
#   Nagle's algorithm on);
# - client side: the request's socket with TCP_NODELAY set, or with Nagle
#   left on (what a client that never sets it gets).
#
# 2 routes x 2 server arms x 2 client arms = 8 arms, interleaved, their
# order rotated every pass. Timed from the request's last byte written to
# the first audio byte read (HTTP: the first body byte after the headers;
# WebSocket: the first binary audio frame), and to the last byte (HTTP: the
# connection closes; WebSocket: `context.done`). Per arm the median and
# min..max over the runs, with the 1-minute load at each run's start; per
# route each arm against "server on, client on", with "NOT A RANKING" where
# the two arms' min..max ranges overlap.
#
# Usage:
#   benches/nodelay.sh BIN MODEL_DIR [PASSES=10] [PRECISION=int8]
# Env: OUT=dir keeps the raw runs (nodelay.json) and the servers' logs;
# TTS_RT_WEIGHTS_CACHE=dir is passed on to both servers (reuse int8 weights).
# Needs python3 with `websockets` (tests/python/requirements.txt). Starts its
# own two servers on 127.0.0.1, any free port (loopback only), and stops
# them at the end.
#
# Run it on a quiet machine: figures from a loaded one say little
# (docs/benchmarks.md, "TCP_NODELAY: first audio on the wire").
set -euo pipefail
# shellcheck source=benches/serve_lib.sh
. "$(dirname "$0")/serve_lib.sh"
bin=${1:?tts-rt binary}
model=${2:?model dir}
passes=${3:-10}
precision=${4:-int8}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "raw results in $out" >&2
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done' EXIT

# A server on any free loopback port, per server arm (on: as shipped; off:
# TTS_RT_NODELAY=off). Started here, not in a subshell, so the trap stops them.
for name in on off; do
  TTS_RT_NODELAY=$name "$bin" serve --model "$model" --precision "$precision" \
    --host 127.0.0.1 --port 0 >"$out/serve-$name.out" 2>"$out/serve-$name.log" &
  pids+=($!)
done
addr_on=$(serve_addr "$out/serve-on" "${pids[0]}")
addr_off=$(serve_addr "$out/serve-off" "${pids[1]}")
for a in "$addr_on" "$addr_off"; do serve_ready "$a"; done
commit=$(build_commit "$(dirname "$0")")
python3 - "$addr_on" "$addr_off" "$passes" "$out" "$commit" "$precision" "$model" <<'PY'
import json, os, platform, socket, statistics, sys, time
from websockets.sync.client import connect

addr_on, addr_off, passes, out, commit, precision, model = sys.argv[1:8]
passes = int(passes)
SERVERS = {"on": addr_on, "off": addr_off}
TEXT = "Hello there, this is a short reply."
SESSION = {"greedy": True, "max_frames": 40}

def hostport(addr):
    h, p = addr.rsplit(":", 1)
    return h, int(p)

def sock(addr, nodelay):
    s = socket.create_connection(hostport(addr), timeout=120)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if nodelay else 0)
    return s

def http(addr, nodelay):
    body = json.dumps({"input": TEXT, "voice": "alloy", "response_format": "pcm", **SESSION}).encode()
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: {addr}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    s = sock(addr, nodelay)
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
        status = buf.split(b"\r\n", 1)[0]
        if b" 200 " not in status:
            raise RuntimeError(f"HTTP answer {status!r}")
        rest = buf.split(b"\r\n\r\n", 1)[1]
        while not rest:
            rest = s.recv(65536)
            if not rest:
                raise RuntimeError("closed before any audio")
        first = time.perf_counter() - t0
        while s.recv(65536):
            pass
        return first, time.perf_counter() - t0
    finally:
        s.close()

def ws(addr, nodelay):
    with connect(f"ws://{addr}/v1/realtime", sock=sock(addr, nodelay), proxy=None,
                 max_size=4 << 20) as c:
        # websockets' sync client sets TCP_NODELAY on every socket it is
        # given, after the caller's setsockopt: put the arm's setting back.
        c.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if nodelay else 0)
        assert c.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == (1 if nodelay else 0)
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
            kind = json.loads(m)["type"]
            if kind in ("context.failed", "context.cancelled"):
                raise RuntimeError(kind)
            if kind == "context.done":
                return first, time.perf_counter() - t0

ROUTES = {"http": http, "ws": ws}
ARMS = [(r, s, c) for r in ROUTES for s in ("on", "off") for c in ("on", "off")]
name = lambda a: f"{a[0]} server={a[1]} client={a[2]}"
runs = []
for p in range(passes):
    k = p % len(ARMS)
    for arm in ARMS[k:] + ARMS[:k]:
        load = float(open("/proc/loadavg").read().split()[0])
        route, srv, cli = arm
        try:
            first, last = ROUTES[route](SERVERS[srv], cli == "on")
            err = None
        except Exception as e:  # recorded as missing, never as zero
            first = last = None
            err = f"{type(e).__name__}: {e}"
            print(f"{name(arm)}: {err}", file=sys.stderr)
        runs.append({"pass": p, "route": route, "server_nodelay": srv, "client_nodelay": cli,
                     "load1": load, "first_audio_ms": first and first * 1e3,
                     "last_byte_ms": last and last * 1e3, "error": err})
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
prov = {"commit": commit, "cpu": cpu, "cpus": os.cpu_count(), "precision": precision,
        "model": model, "passes": passes, "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "kernel": platform.release(), "text": TEXT, "session": SESSION}
json.dump({"provenance": prov, "runs": runs}, open(f"{out}/nodelay.json", "w"), indent=1)

loads = [r["load1"] for r in runs]
print(f"commit {commit}, {cpu}, {os.cpu_count()} CPUs, precision {precision}, {prov['date']}, "
      f"{passes} passes, 1-min load {min(loads):.2f}..{max(loads):.2f}")
def cell(v):
    return f"{statistics.median(v):.0f} ({min(v):.0f}..{max(v):.0f})" if v else "missing"
print("| route | server TCP_NODELAY | client TCP_NODELAY | first audio ms: median (min..max) | last byte ms: median (min..max) | runs | vs server on, client on |")
print("|---|---|---|---|---|---|---|")
for arm in ARMS:
    rs = [r for r in runs if (r["route"], r["server_nodelay"], r["client_nodelay"]) == arm]
    f = [r["first_audio_ms"] for r in rs if r["first_audio_ms"] is not None]
    l = [r["last_byte_ms"] for r in rs if r["last_byte_ms"] is not None]
    base = [r["first_audio_ms"] for r in runs if (r["route"], r["server_nodelay"], r["client_nodelay"]) == (arm[0], "on", "on") and r["first_audio_ms"] is not None]
    if arm[1:] == ("on", "on"):
        vs = "(baseline)"
    elif f and base:
        d = statistics.median(f) - statistics.median(base)
        overlap = min(f) <= max(base) and min(base) <= max(f)
        vs = f"{d:+.0f} ms" + (" NOT A RANKING" if overlap else "")
    else:
        vs = "missing"
    fails = len(rs) - len(f)
    print(f"| {arm[0]} | {arm[1]} | {arm[2]} | {cell(f)} | {cell(l)} | {len(f)}"
          + (f" ({fails} failed)" if fails else "") + f" | {vs} |")
PY
