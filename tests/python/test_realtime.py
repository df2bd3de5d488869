"""The realtime WebSocket protocol (docs/protocol.md) spoken by an independent
client: the Python `websockets` package, parsing the binary audio header by
hand from the spec, against a real `tts-rt serve` (conftest.py).

The key check: a greedy context's audio, streamed over the WebSocket from
incremental text appends, equals what HTTP `POST /v1/audio/speech` returns
for the same text and voice (sample for sample at the model's rate, within
one quantisation step when resampled or sent as f32).
"""

from __future__ import annotations

import base64
import json
import math
import struct
import urllib.error
import urllib.request
from array import array
from dataclasses import dataclass, field

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

NATIVE_RATE = 24000
HEADER = struct.Struct("<BBHIII")  # version, flags, header length, stream id, seq, rate
assert HEADER.size == 16
FLAG_TERMINAL = 0b01
FLAG_F32 = 0b10
RECV_TIMEOUT_S = 60


# --- client helpers ---------------------------------------------------------


def open_ws(server, headers=None, query: str = "") -> ClientConnection:
    if headers is None:
        headers = {"Authorization": f"Bearer {server.token}"}
    return connect(
        server.ws + query,
        additional_headers=headers,
        proxy=None,  # loopback only, whatever the environment says
        open_timeout=10,
        max_size=4 << 20,
        legacy=True,
    )


@dataclass
class Frame:
    version: int
    flags: int
    header_len: int
    stream_id: int
    seq: int
    sample_rate: int
    payload: bytes

    @property
    def terminal(self) -> bool:
        return bool(self.flags & FLAG_TERMINAL)

    @property
    def is_f32(self) -> bool:
        return bool(self.flags & FLAG_F32)


def parse_frame(data: bytes) -> Frame:
    assert len(data) >= HEADER.size, f"binary message of {len(data)} bytes has no header"
    version, flags, hlen, stream_id, seq, rate = HEADER.unpack_from(data, 0)
    return Frame(version, flags, hlen, stream_id, seq, rate, bytes(data[hlen:]))


def pcm16(data: bytes) -> list[int]:
    a = array("h")
    a.frombytes(data)
    return a.tolist()  # the machine is little-endian, as the wire is


def f32s(data: bytes) -> list[float]:
    a = array("f")
    a.frombytes(data)
    return a.tolist()


class Rt:
    """A thin realtime-protocol client over one WebSocket connection."""

    def __init__(self, ws: ClientConnection):
        self.ws = ws
        self.created = self.msg()
        assert self.created["type"] == "session.created", self.created

    def send(self, obj) -> None:
        self.ws.send(json.dumps(obj))

    def recv(self):
        """The next message: a dict (JSON) or a Frame (binary audio)."""
        m = self.ws.recv(timeout=RECV_TIMEOUT_S)
        if isinstance(m, bytes):
            return parse_frame(m)
        return json.loads(m)

    def msg(self) -> dict:
        m = self.recv()
        assert isinstance(m, dict), f"expected a JSON message, got audio {m}"
        return m

    def update(self, **session) -> dict:
        self.send({"type": "session.update", "session": session})
        m = self.msg()
        assert m["type"] == "session.updated", m
        return m["session"]

    def expect_error(self, code: str) -> dict:
        m = self.msg()
        assert m["type"] == "error" and m["code"] == code, m
        assert m["message"], m
        return m

    def sync(self, ping_id: str) -> list:
        """Everything that arrives before the pong for `ping_id`."""
        self.send({"type": "ping", "id": ping_id})
        seen = []
        while True:
            m = self.recv()
            if isinstance(m, dict) and m["type"] == "pong" and m.get("id") == ping_id:
                return seen
            seen.append(m)


@dataclass
class Ctx:
    started: dict | None = None
    frames: list = field(default_factory=list)
    end: dict | None = None
    others: list = field(default_factory=list)


def collect(rt: Rt, context_id: str, ack: bool = False) -> Ctx:
    """Reads a context to its end (done, cancelled or failed), checking every
    binary frame's header against context.started as it goes."""
    c = Ctx()
    while c.end is None:
        m = rt.recv()
        if isinstance(m, Frame):
            assert c.started is not None, "audio before context.started"
            assert m.version == 1 and m.header_len == 16, m
            assert m.flags & ~(FLAG_TERMINAL | FLAG_F32) == 0, f"unknown flags {m.flags:#x}"
            assert m.stream_id == c.started["stream_id"], (m, c.started)
            assert m.seq == len(c.frames), f"seq {m.seq} after {len(c.frames)} frames"
            assert m.sample_rate == c.started["sample_rate"], (m, c.started)
            assert m.is_f32 == (c.started["format"] == "f32"), (m, c.started)
            assert not (c.frames and c.frames[-1].terminal), "audio after the terminal frame"
            c.frames.append(m)
            if ack:
                rt.send({"type": "audio.ack", "context_id": context_id, "seq": m.seq})
        elif m["type"] == "context.started" and m["context_id"] == context_id:
            assert c.started is None, "two context.started"
            c.started = m
        elif m["type"] in ("context.done", "context.cancelled", "context.failed") and m["context_id"] == context_id:
            c.end = m
        else:
            c.others.append(m)
    return c


def http_pcm(server, text: str, voice: str, **extra):
    """POST /v1/audio/speech with response_format=pcm over plain urllib."""
    body = {"model": "tts-1", "input": text, "voice": voice, "response_format": "pcm", **extra}
    req = urllib.request.Request(
        f"{server.http}/v1/audio/speech",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=RECV_TIMEOUT_S) as r:
        assert r.status == 200
        return r.read(), r.headers  # case-insensitive


@pytest.fixture
def rt(server):
    ws = open_ws(server)
    try:
        yield Rt(ws)
    finally:
        ws.close()


# --- tests -------------------------------------------------------------------


def test_session_created_describes_the_server(rt):
    c = rt.created
    assert c["protocol_version"] == 1
    assert c["model"] == "tiny-a"
    assert c["voices"] == ["dylan", "eric", "ryan", "serena"]
    assert "alloy" in c["openai_voices"]
    assert "english" in c["languages"] and "auto" in c["languages"]
    limits = c["limits"]
    for k in ("max_text_message_bytes", "max_binary_message_bytes", "max_contexts", "max_pending_chars"):
        assert isinstance(limits[k], int) and limits[k] > 0, limits
    assert limits["max_frames"] == 40  # the server's --max-frames
    s = c["session"]
    assert s["sample_rate"] == s["native_sample_rate"] == NATIVE_RATE
    assert (s["format"], s["audio_transport"], s["greedy"]) == ("pcm16", "binary", False)
    assert s["voice"] == "dylan"  # the checkpoint's first speaker


def test_greedy_incremental_context_equals_http_pcm(server, rt):
    s = rt.update(voice="alloy", greedy=True, max_frames=12, audio_acks=True, chunking={"mode": "manual"})
    # The OpenAI voice resolves to a checkpoint speaker (by gender, never a
    # dialect speaker); the rate is real.
    assert s["voice"] == "serena"
    assert (s["sample_rate"], s["native_sample_rate"], s["format"]) == (NATIVE_RATE, NATIVE_RATE, "pcm16")
    assert (s["greedy"], s["max_frames"], s["audio_acks"]) == (True, 12, True)
    assert s["chunking"]["mode"] == "manual"

    # Text arrives as an LLM would stream it: a token at a time. The flush
    # cuts the first segment; the end of input sends the rest.
    for tok in ["Hel", "lo", ",", " wor", "ld", "."]:
        rt.send({"type": "context.append", "context_id": "c1", "text": tok})
    rt.send({"type": "context.flush", "context_id": "c1"})
    for tok in [" How", " are", " y", "ou", "?"]:
        rt.send({"type": "context.append", "context_id": "c1", "text": tok})
    rt.send({"type": "context.end", "context_id": "c1"})
    ctx = collect(rt, "c1", ack=True)

    assert ctx.others == []
    assert ctx.started["sample_rate"] == NATIVE_RATE and ctx.started["format"] == "pcm16"
    assert ctx.end["type"] == "context.done", ctx.end
    assert ctx.end["stream_id"] == ctx.started["stream_id"]
    assert ctx.frames and ctx.frames[-1].terminal, "the last frame is terminal"
    assert all(not f.terminal for f in ctx.frames[:-1])
    audio = b"".join(f.payload for f in ctx.frames)

    m = ctx.end["metrics"]
    assert m["segments"] == 2, m
    assert m["output_samples"] == len(audio) // 2, m
    assert m["output_sample_rate"] == NATIVE_RATE
    assert m["samples"] == m["output_samples"], "native rate: output = model samples"
    assert m["complete"] is True and m["finite"] is True, m
    assert m["samples"] == m["frames"] * m["samples_per_frame"], m
    assert m["chunks"] >= 2
    for k in ("ttfp_ms", "e2el_ms", "rtf", "required_prebuffer_ms", "text_wait_ms", "talker_ms", "code2wav_ms"):
        assert isinstance(m[k], (int, float)) and m[k] >= 0, (k, m)
    assert isinstance(m["underruns"], int) and isinstance(m["continuity_ok"], bool)
    assert m["e2el_ms"] >= m["ttfp_ms"]

    # The same audio as two HTTP requests, one per segment, sample for sample.
    a, headers = http_pcm(server, "Hello, world.", "alloy", greedy=True, max_frames=12)
    b, _ = http_pcm(server, "How are you?", "alloy", greedy=True, max_frames=12)
    assert headers["Content-Type"] == "audio/pcm"
    assert headers["X-Sample-Rate"] == str(NATIVE_RATE)
    assert len(a) > 0 and len(b) > 0
    assert len(audio) == len(a) + len(b), (len(audio), len(a), len(b))
    assert audio == a + b, "WebSocket audio differs from HTTP /v1/audio/speech"

    # Acknowledging after the end is harmless; more text is out of order.
    rt.send({"type": "audio.ack", "context_id": "c1", "seq": len(ctx.frames) - 1})
    rt.send({"type": "context.append", "context_id": "c1", "text": "more"})
    err = rt.expect_error("out_of_order")
    assert err.get("context_id") == "c1"
    assert rt.sync("after") == []


def test_resampled_session_rate_is_echoed_and_matches_http(server, rt):
    s = rt.update(voice="ash", sample_rate=16000, greedy=True, max_frames=10)
    assert (s["sample_rate"], s["native_sample_rate"], s["voice"]) == (16000, NATIVE_RATE, "ryan")
    rt.send({"type": "context.append", "context_id": "r", "text": "Good morning."})
    rt.send({"type": "context.end", "context_id": "r"})
    ctx = collect(rt, "r")
    assert ctx.started["sample_rate"] == 16000
    assert all(f.sample_rate == 16000 for f in ctx.frames)
    assert ctx.end["type"] == "context.done", ctx.end
    got = pcm16(b"".join(f.payload for f in ctx.frames))
    m = ctx.end["metrics"]
    assert m["output_sample_rate"] == 16000 and m["output_samples"] == len(got), m
    assert m["output_samples"] == -(-m["samples"] * 16000 // NATIVE_RATE), "resampled length"

    want, headers = http_pcm(server, "Good morning.", "ash", greedy=True, max_frames=10, sample_rate=16000)
    assert headers["X-Sample-Rate"] == "16000"
    want = pcm16(want)
    assert len(got) == len(want)
    worst = max(abs(x - y) for x, y in zip(got, want))
    assert worst <= 1, f"resampled WebSocket audio differs from HTTP by {worst} LSB"


def test_a_declared_prebuffer_is_echoed_and_measured_at(server, rt):
    """A player that holds 900 ms says so; its contexts' continuity is
    counted at it, and the audio is what HTTP gives."""
    assert rt.update()["prebuffer_ms"] == 200, "the server's by default"
    rt.send({"type": "session.update", "session": {"prebuffer_ms": 20_000}})
    assert "prebuffer_ms" in rt.expect_error("invalid_setting")["message"]
    s = rt.update(voice="ash", prebuffer_ms=900, greedy=True, max_frames=10)
    assert s["prebuffer_ms"] == 900
    rt.send({"type": "context.append", "context_id": "pb", "text": "Good morning."})
    rt.send({"type": "context.end", "context_id": "pb"})
    ctx = collect(rt, "pb")
    assert ctx.end["type"] == "context.done", ctx.end
    m = ctx.end["metrics"]
    assert m["prebuffer_ms"] == 900, m
    assert isinstance(m["continuity_ok_at_prebuffer"], bool), m
    want, _ = http_pcm(server, "Good morning.", "ash", greedy=True, max_frames=10)
    assert b"".join(f.payload for f in ctx.frames) == want


def test_base64_f32_audio_matches_http_pcm_within_quantisation(server, rt):
    rt.update(voice="serena", format="f32", audio_transport="base64", greedy=True, max_frames=8)
    rt.send({"type": "context.append", "context_id": "b", "text": "Base sixty four."})
    rt.send({"type": "context.end", "context_id": "b"})
    seqs, samples, end, started, last_terminal = [], [], None, None, False
    while end is None:
        m = rt.recv()
        assert isinstance(m, dict), "binary audio although audio_transport is base64"
        if m["type"] == "context.started":
            started = m
        elif m["type"] == "audio":
            assert started and m["stream_id"] == started["stream_id"]
            assert (m["context_id"], m["format"], m["sample_rate"]) == ("b", "f32", NATIVE_RATE)
            seqs.append(m["seq"])
            samples += f32s(base64.b64decode(m["audio"]))
            last_terminal = m["terminal"]
        elif m["type"] == "context.done":
            end = m
        else:
            pytest.fail(f"unexpected {m}")
    assert seqs and seqs == list(range(len(seqs))) and last_terminal
    assert end["metrics"]["output_samples"] == len(samples)

    want, _ = http_pcm(server, "Base sixty four.", "serena", greedy=True, max_frames=8)
    want = pcm16(want)
    assert len(want) == len(samples)
    # pcm16 is the f32 rounded to the nearest step (scale 32767, clamped).
    worst = max(abs(round(max(-1.0, min(1.0, x)) * 32767) - y) for x, y in zip(samples, want))
    assert worst <= 1, f"f32 and pcm16 audio differ by {worst} LSB"


def test_cancel_is_acknowledged_and_no_audio_follows(rt):
    # A long context (many sentences: several segments of up to 40 frames),
    # usually still speaking at the cancel. Its input never ends, so it is
    # open at the cancel however slowly this client reads (a loaded machine
    # can let the server finish every segment before the first frame is read).
    # No deadline cuts (max_delay_ms): a context's last sentence, with no
    # whitespace after its period, stays pending until the cancel.
    rt.update(seed=7, audio_acks=True, chunking={"mode": "sentence", "max_delay_ms": 60_000})
    text = " ".join(f"Sentence number {i} is here to keep the engine busy." for i in range(8))
    rt.send({"type": "context.append", "context_id": "long", "text": text})
    # A second context queued behind it: cancelled before it ever starts.
    rt.send({"type": "context.append", "context_id": "queued", "text": "Never spoken."})
    started = None
    while True:
        m = rt.recv()
        if isinstance(m, Frame):
            assert started and m.stream_id == started["stream_id"]
            break
        assert m["type"] == "context.started" and m["context_id"] == "long", m
        started = m
    rt.send({"type": "context.cancel", "context_id": "long"})
    rt.send({"type": "context.cancel", "context_id": "queued"})
    cancelled = {}
    while len(cancelled) < 2:
        m = rt.recv()
        if isinstance(m, Frame):
            assert not cancelled, "audio after a context.cancelled"
            assert m.stream_id == started["stream_id"] and not m.terminal
            continue
        assert m["type"] == "context.cancelled", m
        cancelled[m["context_id"]] = m
    long, queued = cancelled["long"], cancelled["queued"]
    for c in (long, queued):
        assert c["reason"] == "client"
        assert c["late_audio_samples"] == 0
        assert c["cancel_ack_ms"] >= 0
        assert c["interruption_ms"] is None
    assert long["stream_id"] == started["stream_id"]
    assert long["metrics"]["chunks"] > 0 and long["metrics"]["complete"] is None
    assert queued["stream_id"] is None and queued["metrics"]["ttfp_ms"] is None
    # Nothing at all arrives after the cancel acks (no late audio).
    assert rt.sync("after-cancel") == []
    # Cancelling again is out of order; the session goes on with a new context.
    rt.send({"type": "context.cancel", "context_id": "long"})
    rt.expect_error("out_of_order")
    rt.update(max_frames=4)
    rt.send({"type": "context.append", "context_id": "next", "text": "Next."})
    rt.send({"type": "context.end", "context_id": "next"})
    n = collect(rt, "next")
    assert n.end["type"] == "context.done" and n.frames
    assert n.started["stream_id"] != started["stream_id"]


def input_frame(samples: list[float], rate: int) -> bytes:
    """Client microphone audio: the same 16-byte header (stream id 0), pcm16."""
    pcm = array("h", [max(-32767, min(32767, round(x * 32767))) for x in samples]).tobytes()
    return HEADER.pack(1, 0, 16, 0, 0, rate) + pcm


def test_barge_in_cancels_the_speaking_context_with_no_late_audio(rt):
    rt.update(seed=5, audio_acks=True, chunking={"mode": "sentence"}, vad={"min_speech_ms": 60})
    text = " ".join(f"Here is a long answer, part {i}, that the user will interrupt." for i in range(8))
    # No context.end: the agent's context is open at the speech onset
    # however slowly this client reads (as in test_cancel_...).
    rt.send({"type": "context.append", "context_id": "agent", "text": text})
    while not isinstance(rt.recv(), Frame):
        pass
    # The user talks: 100 ms of room noise (as base64 JSON), then a loud
    # tone (as binary frames with the audio header), in 20 ms pieces.
    rate = 16000
    quiet = array("h", [16] * 320).tobytes()
    for _ in range(5):
        rt.send({"type": "input_audio.append", "audio": base64.b64encode(quiet).decode(), "sample_rate": rate})
    tone = [0.3 * math.sin(i * 0.2) for i in range(rate * 200 // 1000)]
    for i in range(0, len(tone), 320):
        rt.ws.send(input_frame(tone[i : i + 320], rate))
    seen = rt.sync("end")
    speech = [m for m in seen if isinstance(m, dict) and m["type"] == "speech.started"]
    cancels = [i for i, m in enumerate(seen) if isinstance(m, dict) and m["type"] == "context.cancelled"]
    assert len(speech) == 1 and len(cancels) == 1, seen
    assert (speech[0]["audio_start_ms"], speech[0]["detection_ms"]) == (100.0, 60.0), speech
    c = seen[cancels[0]]
    assert (c["context_id"], c["reason"], c["late_audio_samples"]) == ("agent", "barge_in", 0), c
    assert isinstance(c["interruption_ms"], (int, float)) and 0 <= c["interruption_ms"] < 60_000
    assert seen.index(speech[0]) < cancels[0], "speech.started comes first"
    assert not any(isinstance(m, Frame) for m in seen[cancels[0] :]), "audio after context.cancelled"
    # Malformed input audio is refused by name; the session goes on.
    rt.ws.send(HEADER.pack(1, 0, 16, 0, 0, 100) + bytes(4))
    e = rt.expect_error("invalid_audio")
    assert "sample rate" in e["message"], e


def test_malformed_messages_get_named_errors_and_the_connection_survives(rt):
    rt.ws.send("this is not json")
    e = rt.expect_error("malformed_json")
    assert "JSON" in e["message"]

    rt.ws.send("[1, 2]")
    rt.expect_error("invalid_message")

    rt.send({"text": "no type"})
    e = rt.expect_error("invalid_message")
    assert "type" in e["message"]

    rt.send({"type": "context.bogus", "context_id": "x"})
    e = rt.expect_error("unknown_type")
    assert "context.bogus" in e["message"]
    assert "context.append" in e["valid"] and "session.update" in e["valid"]

    rt.send({"type": "context.append", "context_id": "x"})
    e = rt.expect_error("invalid_message")
    assert "text" in e["message"], e  # the missing field is named

    rt.send({"type": "context.append", "context_id": "x", "text": "hi", "txet": "typo"})
    e = rt.expect_error("invalid_message")
    assert "txet" in e["message"], e  # the unknown field is named

    rt.send({"type": "context.append", "context_id": 5, "text": "hi"})
    rt.expect_error("invalid_message")

    rt.send({"type": "ping", "v": 2})
    rt.expect_error("unsupported_version")

    rt.send({"type": "session.update", "session": {"sample_rate": 100}})
    e = rt.expect_error("invalid_setting")
    assert "sample_rate" in e["message"], e

    rt.send({"type": "session.update", "session": {"voice": "nobody"}})
    e = rt.expect_error("invalid_voice")
    assert "nobody" in e["message"] and "alloy" in e["valid"] and "dylan" in e["valid"], e

    rt.send({"type": "session.update", "session": {"language": "klingon"}})
    e = rt.expect_error("invalid_language")
    assert "english" in e["valid"]

    rt.send({"type": "session.update", "session": {"max_frames": 10_000}})
    e = rt.expect_error("invalid_setting")
    assert "max_frames" in e["message"]

    rt.send({"type": "context.flush", "context_id": "ghost"})
    e = rt.expect_error("unknown_context")
    assert "ghost" in e["message"] or e.get("context_id") == "ghost", e

    rt.ws.send(b"\x07short")  # a binary message shorter than the header
    e = rt.expect_error("invalid_audio")
    assert "header" in e["message"]
    rt.ws.send(bytes([9, 0, 16, 0]) + bytes(12))  # unknown header version
    e = rt.expect_error("invalid_audio")
    assert "version" in e["message"]

    rt.ws.send(json.dumps({"type": "context.append", "context_id": "big", "text": "a" * (300 * 1024)}))
    rt.expect_error("message_too_large")

    # None of that changed the session or closed the connection: the
    # settings are the defaults, and a context still synthesizes.
    assert rt.sync("still-here") == []
    s = rt.update(max_frames=3)
    assert s["sample_rate"] == NATIVE_RATE and s["voice"] == "dylan"
    rt.send({"type": "context.append", "context_id": "ok", "text": "Still alive."})
    rt.send({"type": "context.end", "context_id": "ok"})
    c = collect(rt, "ok")
    assert c.end["type"] == "context.done" and c.frames and c.others == []


def test_a_bad_or_missing_token_is_refused(server):
    for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {server.token}"}):
        with pytest.raises(InvalidStatus) as e:
            open_ws(server, headers=headers)
        assert e.value.response.status_code == 401, headers
    with pytest.raises(InvalidStatus) as e:
        open_ws(server, headers={}, query="?token=wrong")
    assert e.value.response.status_code == 401

    # Browsers cannot set headers on a WebSocket: ?token= works instead.
    ws = open_ws(server, headers={}, query=f"?token={server.token}")
    try:
        rt = Rt(ws)
        assert rt.sync("q") == []
    finally:
        ws.close()

    # HTTP routes refuse the same way, in OpenAI's error shape.
    req = urllib.request.Request(f"{server.http}/v1/models", headers={"Authorization": "Bearer wrong-token"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as e:
        opener.open(req, timeout=10)
    assert e.value.code == 401
    body = json.loads(e.value.read())
    assert body["error"]["message"] and "type" in body["error"], body


def test_live_text_token_by_token_equals_one_streamed_segment(rt):
    """`chunking.mode: live`: a context whose text arrives a token at a time,
    with gaps longer than the audio made so far, is one utterance with the
    audio of the whole text sent as one streaming-text-mode segment."""
    import random
    import time

    # Live text is refused with the prefill text mode, naming why.
    rt.send({"type": "session.update", "session": {"chunking": {"mode": "live"}, "text_mode": "prefill"}})
    err = rt.expect_error("invalid_setting")
    assert "text_mode streaming" in err["message"], err

    rt.update(voice="ryan", greedy=True, max_frames=30, text_mode="streaming", chunking={"mode": "manual"})
    text = "Hello there, this answer streams in one token at a time."
    rt.send({"type": "context.append", "context_id": "whole", "text": text})
    rt.send({"type": "context.end", "context_id": "whole"})
    whole = collect(rt, "whole")
    assert whole.end["type"] == "context.done", whole.end
    assert "pauses" not in whole.end["metrics"], "segmented contexts do not report pauses"

    s = rt.update(chunking={"mode": "live"})
    assert s["chunking"]["mode"] == "live"
    assert s["chunking"]["live_max_tokens"] == 200 and s["chunking"]["live_max_audio_s"] == 60
    rng = random.Random(14)
    words = text.split(" ")
    tokens = [words[0]] + [" " + w for w in words[1:]]
    for i, tok in enumerate(tokens):
        # Mostly an LLM's pace, twice a gap far longer than the audio buffered.
        time.sleep(0.6 if i in (3, 7) else rng.choice([0.0, 0.01, 0.03]))
        rt.send({"type": "context.append", "context_id": "live", "text": tok})
    rt.send({"type": "context.end", "context_id": "live"})
    live = collect(rt, "live")
    assert live.end["type"] == "context.done", live.end
    m = live.end["metrics"]
    assert m["segments"] == 1 and m["utterances"] == 1, m
    assert isinstance(m["pauses"], list), m
    for p in m["pauses"]:
        assert isinstance(p["frame"], int) and p["ms"] >= 0, p
    assert m["ttfp_from_text_ms"] >= m["ttfp_ms"], m
    audio = b"".join(f.payload for f in live.frames)
    assert audio == b"".join(f.payload for f in whole.frames), "live audio differs from the whole text's"
