#!/usr/bin/env python3
"""The soak's clients and sampler (benches/soak.sh starts the server).

Several client threads drive a running `tts-rt serve` on loopback until the
deadline, each picking at random: an HTTP request (complete WAV, streamed
PCM, or a streamed body dropped after its first bytes) or a WebSocket
context (spoken whole, cancelled after its first audio, or the socket
dropped mid-stream). A sampler reads the server's RssAnon and open-file
count from /proc every few seconds. At the end it prints requests by kind,
errors by kind, audio seconds, latency percentiles (ttfp = request sent ->
first audio byte; total = request sent -> last byte or context.done) and
the RssAnon / open-files trend (first vs last quarter, least-squares
slope). Standard library only (a minimal WebSocket client is below).
"""

import argparse
import base64
import http.client
import json
import os
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter

TEXTS = [
    "Hello there, this is the soak speaking.",
    "A second sentence, a little longer than the first one, with a comma.",
    "Short.",
    "Numbers like 42 and 1999 are read out as words by the model.",
]


class WebSocket:
    """A minimal RFC 6455 client: text out (masked), frames in."""

    def __init__(self, host, port, path, timeout=300):
        self.s = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.s.recv(4096)
            if not chunk:
                raise ConnectionError("closed during the upgrade")
            buf += chunk
        head, self.buf = buf.split(b"\r\n\r\n", 1)
        status = head.split(b" ", 2)[1].decode()
        if status != "101":
            raise RuntimeError(f"upgrade refused: {status}")

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.s.sendall(head + mask + masked)

    def send_json(self, obj):
        self._send_frame(0x1, json.dumps(obj).encode())

    def recv(self):
        """('text', dict) | ('binary', bytes) | ('close', code)."""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read(8))
            payload = self._read(n)
            if opcode == 0x1:
                return "text", json.loads(payload)
            if opcode == 0x2:
                return "binary", payload
            if opcode == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                return "close", code
            if opcode == 0x9:
                self._send_frame(0xA, payload)

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = Counter()
        self.errors = Counter()
        self.audio_s = 0.0
        self.ttfp = []
        self.total = []

    def ok(self, kind, ttfp=None, total=None, audio_s=0.0):
        with self.lock:
            self.requests[kind] += 1
            self.audio_s += audio_s
            if ttfp is not None:
                self.ttfp.append(ttfp)
            if total is not None:
                self.total.append(total)

    def err(self, kind, why):
        with self.lock:
            self.requests[kind] += 1
            self.errors[why] += 1


def http_speech(host, port, body, stats, kind, drop_after=None):
    t0 = time.monotonic()
    c = http.client.HTTPConnection(host, port, timeout=300)
    try:
        c.request("POST", "/v1/audio/speech", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            r.read()
            stats.err(kind, f"http {r.status}")
            return
        rate = int(r.getheader("x-sample-rate", "24000"))
        first = r.read(1)
        ttfp = time.monotonic() - t0
        if drop_after is not None:
            r.read(drop_after)
            stats.ok(kind, ttfp=ttfp)
            return
        rest = r.read()
        total = time.monotonic() - t0
        n = len(first) + len(rest)
        if body.get("response_format") == "wav":
            n -= 44
        stats.ok(kind, ttfp=ttfp, total=total, audio_s=max(n, 0) / 2 / rate)
    except (OSError, http.client.HTTPException) as e:
        stats.err(kind, f"http {type(e).__name__}")
    finally:
        c.close()


def ws_context(host, port, text, stats, kind, then=None):
    t0 = time.monotonic()
    try:
        ws = WebSocket(host, port, "/v1/realtime")
    except (OSError, RuntimeError) as e:
        stats.err(kind, f"ws connect {e}")
        return
    try:
        ws.recv()  # session.created
        t0 = time.monotonic()
        ws.send_json({"type": "context.append", "context_id": "s", "text": text})
        ws.send_json({"type": "context.end", "context_id": "s"})
        ttfp, samples, rate, seq = None, 0, 24000, 0
        while True:
            what, m = ws.recv()
            if what == "binary":
                flags, hlen = m[1], struct.unpack("<H", m[2:4])[0]
                got_seq, rate = struct.unpack("<II", m[8:16])
                if got_seq != seq:
                    stats.err(kind, "ws seq gap")
                    return
                seq += 1
                samples += (len(m) - hlen) // (4 if flags & 2 else 2)
                if ttfp is None:
                    ttfp = time.monotonic() - t0
                    if then == "cancel":
                        ws.send_json({"type": "context.cancel", "context_id": "s"})
                    elif then == "drop":
                        stats.ok(kind, ttfp=ttfp)
                        return
            elif what == "text":
                t = m.get("type")
                if t == "context.done":
                    stats.ok(kind, ttfp=ttfp, total=time.monotonic() - t0, audio_s=samples / rate)
                    return
                if t == "context.cancelled":
                    stats.ok(kind, ttfp=ttfp, audio_s=samples / rate)
                    return
                if t == "context.failed":
                    stats.err(kind, f"ws failed {m.get('code')}")
                    return
                if t == "error":
                    stats.err(kind, f"ws error {m.get('code')}")
                    return
            else:
                stats.err(kind, f"ws closed {m}")
                return
    except (OSError, ConnectionError, ValueError) as e:
        stats.err(kind, f"ws {type(e).__name__}")
    finally:
        ws.close()


def client(host, port, deadline, stats, seed):
    rnd = random.Random(seed)
    while time.monotonic() < deadline:
        text = rnd.choice(TEXTS)
        pick = rnd.random()
        if pick < 0.2:
            http_speech(host, port, {"input": text, "response_format": "wav"}, stats, "http wav")
        elif pick < 0.4:
            http_speech(host, port, {"input": text, "response_format": "pcm"}, stats, "http pcm stream")
        elif pick < 0.45:
            http_speech(host, port, {"input": text, "response_format": "pcm"}, stats, "http disconnect", drop_after=512)
        elif pick < 0.85:
            ws_context(host, port, text, stats, "ws context")
        elif pick < 0.93:
            ws_context(host, port, text, stats, "ws cancel", then="cancel")
        else:
            ws_context(host, port, text, stats, "ws disconnect", then="drop")


def sample(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("RssAnon:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round((len(xs) - 1) * p)))] if xs else float("nan")


def trend(ts, vs):
    """(first-quarter mean, last-quarter mean, slope per minute)."""
    n = len(vs)
    if n < 4:
        return float("nan"), float("nan"), float("nan")
    q = max(1, n // 4)
    first, last = sum(vs[:q]) / q, sum(vs[-q:]) / q
    mt, mv = sum(ts) / n, sum(vs) / n
    var = sum((t - mt) ** 2 for t in ts)
    slope = sum((t - mt) * (v - mv) for t, v in zip(ts, vs)) / var if var else 0.0
    return first, last, slope * 60


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True, help="host:port of the server (loopback)")
    ap.add_argument("--pid", type=int, required=True, help="the server's pid (sampled in /proc)")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--sample-s", type=float, default=3)
    ap.add_argument(
        "--progress-s",
        type=float,
        default=60,
        help="print a progress line (requests, RssAnon, open files) this often; 0: never",
    )
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    if host not in ("127.0.0.1", "::1", "localhost"):
        sys.exit("the soak drives a loopback server only")
    stats = Stats()
    t_start = time.monotonic()
    deadline = t_start + a.minutes * 60
    samples = []
    stop = threading.Event()

    def sampler():
        next_progress = a.progress_s
        while not stop.is_set():
            s = sample(a.pid)
            if s:
                t = time.monotonic() - t_start
                samples.append((t, *s))
                if a.progress_s > 0 and t >= next_progress:
                    next_progress += a.progress_s
                    # A run cut short still leaves its trend behind.
                    print(
                        f"soak: {t / 60:5.1f} min, requests {sum(stats.requests.values())}, "
                        f"errors {sum(stats.errors.values())}, audio {stats.audio_s:.0f} s, "
                        f"RssAnon {s[0] / 1024:.0f} MB, open files {s[1]}"
                        + "".join(f"; {k}: {v}" for k, v in stats.errors.most_common(3)),
                        flush=True,
                    )
            stop.wait(a.sample_s)

    threads = [threading.Thread(target=sampler, daemon=True)]
    threads += [
        threading.Thread(target=client, args=(host, port, deadline, stats, i), daemon=True)
        for i in range(a.clients)
    ]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    time.sleep(a.sample_s)  # one sample after the last request
    stop.set()
    threads[0].join()
    elapsed = time.monotonic() - t_start

    n = sum(stats.requests.values())
    print(f"soak: {elapsed / 60:.1f} min, {a.clients} clients, server pid {a.pid}")
    print(f"requests: {n} ({', '.join(f'{k}: {v}' for k, v in sorted(stats.requests.items()))})")
    errs = sum(stats.errors.values())
    print(f"errors: {errs}" + (f" ({', '.join(f'{k}: {v}' for k, v in stats.errors.most_common())})" if errs else ""))
    print(f"audio: {stats.audio_s:.1f} s")
    for name, xs in (("ttfp", stats.ttfp), ("total", stats.total)):
        ms = [x * 1e3 for x in xs]
        print(
            f"{name} ms: p50 {pct(ms, 0.5):.0f}, p90 {pct(ms, 0.9):.0f}, "
            f"p99 {pct(ms, 0.99):.0f}, max {max(ms) if ms else float('nan'):.0f} (n={len(ms)})"
        )
    ts = [s[0] for s in samples]
    half = [s for s in samples if s[0] >= elapsed / 2]
    for label, idx, unit in (("RssAnon", 1, "kB"), ("open files", 2, "")):
        u = unit and " " + unit
        first, last, slope = trend(ts, [s[idx] for s in samples])
        print(
            f"{label}: first quarter {first:.0f}{u}, last quarter {last:.0f}{u}, "
            f"slope {slope:+.1f}{u}/min ({len(samples)} samples every {a.sample_s:g} s)"
        )
        # Warm-up (buffers growing to their working size) is in the first
        # half; growth that goes on shows in the second.
        if len(half) >= 4:
            vs = [s[idx] for s in half]
            _, _, slope2 = trend([s[0] for s in half], vs)
            print(
                f"{label}, second half: mean {sum(vs) / len(vs):.0f}{u}, "
                f"range {min(vs):.0f}..{max(vs):.0f}{u}, slope {slope2:+.1f}{u}/min"
            )
    return 0 if n > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
