"""A phone bot's audio path, as a telephony bridge runs it: Pipecat's
WebSocket server transport with its Twilio Media Streams serializer (what a
Twilio `<Stream>` connects to), tts-rt behind Pipecat's ElevenLabs service at
8 kHz, and a stand-in for Twilio's side of the media stream that connects,
announces the stream (`connected`, `start`), receives the `media` messages
(base64 8 kHz mu-law) and, on a barge-in, the `clear` that flushes the
caller's buffer. Everything is on loopback; no Twilio account or API is
contacted (auto hang-up off).

What this shows: the bridge's own path works unchanged against tts-rt, the
call hears decodable speech of a plausible length, and an interruption both
clears the caller's side (media stops; the next turn speaks). What it does
not: a real phone call (PSTN, Twilio's jitter buffer).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket

import numpy as np
import pytest

os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost,::1"
for k in ("ELEVENLABS_API_KEY", "ELEVEN_API_KEY", "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN"):
    os.environ.pop(k, None)

pytest.importorskip("pipecat")
websockets = pytest.importorskip("websockets")

from pipecat.frames.frames import InterruptionFrame, TTSSpeakFrame  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.serializers.twilio import TwilioFrameSerializer  # noqa: E402
from pipecat.transports.websocket.server import (  # noqa: E402
    SingleClientWebsocketServerParams,
    SingleClientWebsocketServerTransport,
)
from test_vendor import pipecat_elevenlabs, running  # noqa: E402

RATE = 8000  # Twilio's media streams: 8 kHz mono mu-law
TIMEOUT = 120
STREAM_SID = "MZ00000000000000000000000000000000"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ulaw_to_linear(data: bytes) -> np.ndarray:
    """G.711 mu-law bytes to 16-bit linear samples (the standard expansion)."""
    u = ~np.frombuffer(data, dtype=np.uint8).astype(np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, 0x84 - t, t - 0x84).astype(np.int16)


class Caller:
    """Twilio's side of one media stream."""

    def __init__(self, port: int):
        self.port = port
        self.media = bytearray()
        self.clears = 0
        self.events: list[str] = []
        self.got_media = asyncio.Event()
        self.ws = None

    async def connect(self):
        # The server transport starts listening when the pipeline starts.
        for _ in range(200):
            try:
                self.ws = await websockets.connect(f"ws://127.0.0.1:{self.port}")
                break
            except OSError:
                await asyncio.sleep(0.05)
        assert self.ws is not None, "the bridge never listened"
        await self.ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await self.ws.send(
            json.dumps(
                {
                    "event": "start",
                    "sequenceNumber": "1",
                    "start": {
                        "streamSid": STREAM_SID,
                        "accountSid": "AC0",
                        "callSid": "CA0",
                        "tracks": ["inbound"],
                        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": RATE, "channels": 1},
                    },
                    "streamSid": STREAM_SID,
                }
            )
        )

    async def listen(self):
        try:
            async for raw in self.ws:
                m = json.loads(raw)
                self.events.append(m.get("event"))
                assert m.get("streamSid") == STREAM_SID, m
                if m["event"] == "media":
                    self.media += base64.b64decode(m["media"]["payload"])
                    self.got_media.set()
                elif m["event"] == "clear":
                    self.clears += 1
        except websockets.ConnectionClosed:
            pass

    def seconds(self) -> float:
        return len(self.media) / RATE


async def call(server) -> None:
    port = free_port()
    transport = SingleClientWebsocketServerTransport(
        params=SingleClientWebsocketServerParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            add_wav_header=False,
            serializer=TwilioFrameSerializer(
                STREAM_SID,
                params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
            ),
        ),
        host="127.0.0.1",
        port=port,
    )
    tts = pipecat_elevenlabs(server, RATE)
    task = PipelineWorker(
        Pipeline([transport.input(), tts, transport.output()]),
        params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
        enable_rtvi=False,
    )
    caller = Caller(port)
    listen = None
    try:
        async with running(task):
            await caller.connect()
            listen = asyncio.create_task(caller.listen())
            await converse(task, caller)
    finally:
        if caller.ws is not None:
            await caller.ws.close()
        if listen is not None:
            await asyncio.wait_for(listen, TIMEOUT)


async def converse(task: PipelineWorker, caller: Caller) -> None:
    """A greeting heard whole, a barge-in, and a turn after it."""
    # A greeting: the caller hears it whole.
    await task.queue_frame(TTSSpeakFrame("Hello, thanks for calling. How can I help?"))
    await asyncio.wait_for(caller.got_media.wait(), TIMEOUT)
    # The transport paces media in real time; wait for the stream to go quiet.
    heard = -1.0
    while caller.seconds() != heard:
        heard = caller.seconds()
        await asyncio.sleep(1.0)
    assert heard > 0.3, f"{heard:.2f} s of audio reached the caller"
    pcm = ulaw_to_linear(bytes(caller.media))
    assert np.abs(pcm.astype(np.int32)).max() > 100, "the call heard only silence"

    # Barge-in: a long answer, cut after its first audio. tts-rt may
    # have finished synthesising it by then (the bridge paces playout in
    # real time); what the caller hears must stop at the `clear`.
    caller.got_media.clear()
    start = caller.seconds()
    await task.queue_frame(
        TTSSpeakFrame(
            "Let me read you the whole list of our opening hours, "
            "day by day, starting with Monday and going through Sunday."
        )
    )
    await asyncio.wait_for(caller.got_media.wait(), TIMEOUT)
    await task.queue_frame(InterruptionFrame())
    for _ in range(100):
        if caller.clears:
            break
        await asyncio.sleep(0.1)
    assert caller.clears >= 1, f"no clear reached the caller: {caller.events[-5:]}"
    await asyncio.sleep(0.5)
    after_clear = caller.seconds()
    await asyncio.sleep(1.5)
    assert caller.seconds() == after_clear, "audio kept coming after the clear"
    assert after_clear - start < 2.0, f"{after_clear - start:.2f} s of the cut answer played"

    # The next turn still speaks.
    caller.got_media.clear()
    await task.queue_frame(TTSSpeakFrame("Sure."))
    await asyncio.wait_for(caller.got_media.wait(), TIMEOUT)


def test_pipecat_twilio_bridge_speaks_and_clears_on_barge_in(server):
    asyncio.run(call(server))
