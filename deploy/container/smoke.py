"""Speech out of a running tts-rt over HTTP and the realtime WebSocket, and
its drain on SIGTERM: the container test's client (deploy/container/ci.sh).

    python smoke.py speak API_URL
    python smoke.py drain API_URL PROBE_URL -- STOP COMMAND...

`speak`: POST /v1/audio/speech for a WAV (decoded with the standard
library's `wave`: 24 kHz mono 16-bit, not empty, not silent), then one
realtime context (docs/protocol.md: contiguous `seq`, one terminal frame,
`context.done`).
`drain`: opens a realtime context and leaves it waiting for the rest of its
text, runs STOP COMMAND (which sends SIGTERM), waits for /ready on
PROBE_URL to say 503 "draining", then sends the rest: the context must
still be spoken to its end, the socket closed 1001 after it, and STOP
COMMAND must finish within the drain. Loopback only. One line per check on
stdout; any failure raises (exit 1).

Needs `websockets` (the client-interop venv has it).
"""

from __future__ import annotations

import array
import io
import json
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import wave
from urllib.parse import urlparse

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

HEADER = struct.Struct("<BBHIII")  # version, flags, header length, stream id, seq, rate
FLAG_TERMINAL = 0b01
TIMEOUT_S = 30
# Random-weight fixtures never choose to stop: every request is capped at
# 2 s of audio so the test's time does not depend on the checkpoint.
MAX_FRAMES = 25
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, whatever the environment says


def loopback(url: str) -> str:
    host = urlparse(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"smoke: {url} is not loopback; this test sends traffic to loopback only")
    return url.rstrip("/")


def http_wav(api: str, text: str) -> None:
    body = {"model": "tts-1", "input": text, "response_format": "wav", "seed": 1, "max_frames": MAX_FRAMES}
    req = urllib.request.Request(
        f"{api}/v1/audio/speech", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    t0 = time.monotonic()
    with OPENER.open(req, timeout=TIMEOUT_S) as r:
        assert r.status == 200, r.status
        data = r.read()
    ms = (time.monotonic() - t0) * 1000
    with wave.open(io.BytesIO(data)) as w:
        rate, channels, width, n = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
        pcm = w.readframes(n)
    assert (rate, channels, width) == (24000, 1, 2), f"WAV is {rate} Hz, {channels} ch, {width * 8} bit"
    assert n > 0, "the WAV has no samples"
    samples = array.array("h", pcm)
    peak = max(abs(s) for s in samples)
    assert peak > 0, "the WAV is silent"
    print(f"http: POST /v1/audio/speech -> WAV {n / rate:.2f} s at {rate} Hz mono pcm16, peak {peak}, {ms:.0f} ms")


class Realtime:
    def __init__(self, api: str):
        ws_url = "ws" + api[len("http") :] + "/v1/realtime"
        self.ws = connect(ws_url, proxy=None, open_timeout=10, max_size=4 << 20, legacy=True)
        created = self.json()
        assert created["type"] == "session.created", created
        self.send({"type": "session.update", "session": {"max_frames": MAX_FRAMES}})
        updated = self.json()
        assert updated["type"] == "session.updated", updated

    def send(self, obj: dict) -> None:
        self.ws.send(json.dumps(obj))

    def json(self) -> dict:
        m = self.ws.recv(timeout=TIMEOUT_S)
        assert isinstance(m, str), "audio before session.created"
        return json.loads(m)

    def collect(self, context_id: str) -> tuple[int, float, dict]:
        """Reads `context_id` to its end: (frames, seconds of audio, end message)."""
        started, frames, samples = None, 0, 0
        while True:
            m = self.ws.recv(timeout=TIMEOUT_S)
            if isinstance(m, bytes):
                _, flags, hlen, stream_id, seq, rate = HEADER.unpack_from(m, 0)
                assert started is not None, "audio before context.started"
                assert stream_id == started["stream_id"], (stream_id, started)
                assert seq == frames, f"seq {seq} after {frames} frames"
                frames += 1
                samples += (len(m) - hlen) // 2
                terminal = bool(flags & FLAG_TERMINAL)
                continue
            msg = json.loads(m)
            if msg["type"] == "context.started" and msg["context_id"] == context_id:
                started = msg
            elif msg["type"] in ("context.done", "context.cancelled", "context.failed"):
                assert msg["context_id"] == context_id, msg
                if msg["type"] == "context.done":
                    assert frames > 0 and terminal, f"context.done after {frames} frames, terminal={frames and terminal}"
                return frames, samples / started["sample_rate"] if started else 0.0, msg


def ws_context(api: str, text: str) -> None:
    rt = Realtime(api)
    t0 = time.monotonic()
    words = text.split(" ")
    for i, w in enumerate(words):  # as an LLM would send it, a word at a time
        rt.send({"type": "context.append", "context_id": "c1", "text": w + (" " if i + 1 < len(words) else "")})
    rt.send({"type": "context.end", "context_id": "c1"})
    frames, secs, end = rt.collect("c1")
    assert end["type"] == "context.done", end
    ms = (time.monotonic() - t0) * 1000
    rt.ws.close()
    print(f"websocket: /v1/realtime context -> {frames} frames, {secs:.2f} s of audio, context.done, {ms:.0f} ms")


def ready_status(probe: str) -> tuple[int, str]:
    try:
        with OPENER.open(f"{probe}/ready", timeout=5) as r:
            return r.status, json.loads(r.read()).get("status", "")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}").get("status", "")


def drain(api: str, probe: str, stop: list[str]) -> None:
    rt = Realtime(api)
    # An open context waiting for the rest of its sentence (no boundary,
    # no flush): work in flight when SIGTERM comes.
    rt.send({"type": "context.append", "context_id": "d", "text": "This sentence began before the stop"})
    rt.send({"type": "ping", "id": "p"})
    while (m := rt.json())["type"] != "pong":
        pass
    t0 = time.monotonic()
    stopper = subprocess.Popen(stop, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = t0 + 10
    while True:
        code, status = ready_status(probe)
        if (code, status) == (503, "draining"):
            break
        assert time.monotonic() < deadline, f"/ready still {code} {status!r} 10 s after the stop"
        time.sleep(0.05)
    print(f"drain: /ready 503 draining {1000 * (time.monotonic() - t0):.0f} ms after the stop command")
    rt.send({"type": "context.append", "context_id": "d", "text": " and ends during the drain."})
    rt.send({"type": "context.end", "context_id": "d"})
    frames, secs, end = rt.collect("d")
    assert end["type"] == "context.done", f"the in-flight context ended {end} during the drain"
    try:
        extra = rt.ws.recv(timeout=TIMEOUT_S)
        raise AssertionError(f"expected the close after context.done, got {extra!r}")
    except ConnectionClosed as e:
        code = e.rcvd.code if e.rcvd else None
        assert code == 1001, f"closed with {code}, expected 1001 (going away)"
    print(f"drain: the in-flight context finished ({frames} frames, {secs:.2f} s, context.done), then close 1001")
    try:
        _, err = stopper.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        stopper.kill()
        raise AssertionError(f"{' '.join(stop)} did not return within 30 s")
    assert stopper.returncode == 0, f"{' '.join(stop)} exited {stopper.returncode}: {err.strip()}"
    print(f"drain: stopped {1000 * (time.monotonic() - t0):.0f} ms after SIGTERM")


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "speak":
        api = loopback(argv[1])
        http_wav(api, "Hello from a container.")
        ws_context(api, "And hello again, over the realtime socket.")
    elif len(argv) >= 5 and argv[0] == "drain" and argv[3] == "--":
        drain(loopback(argv[1]), loopback(argv[2]), argv[4:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
