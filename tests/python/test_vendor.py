"""The vendor-compatible sockets driven by the vendors' real clients, with
only the base URL changed (always the loopback server; nothing else is ever
contacted):

- Pipecat's ElevenLabsTTSService (multi-stream-input) and CartesiaTTSService
  (/tts/websocket) in a pipeline fed an LLM-like token stream, including an
  interruption mid-utterance (ElevenLabs: close_context; Cartesia: cancel)
  followed by a turn that must still speak.
- Cartesia's own SDK (AsyncCartesia with websocket_base_url): a context with
  continuations, and cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import urllib.request

import pytest

# Nothing may phone home: no proxies for loopback, no vendor keys in the env.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost,::1"
for k in ("ELEVENLABS_API_KEY", "CARTESIA_API_KEY", "CARTESIA_BASE_URL", "ELEVEN_API_KEY"):
    os.environ.pop(k, None)

pipecat = pytest.importorskip("pipecat")

from pipecat.frames.frames import (  # noqa: E402
    EndFrame,
    ErrorFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.services.cartesia.tts import CartesiaTTSService  # noqa: E402
from pipecat.services.elevenlabs.tts import ElevenLabsTTSService  # noqa: E402

RATE = 16000
TIMEOUT = 120
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def cancelled_contexts(server) -> int:
    """The server's count of cancelled WebSocket contexts (/metrics)."""
    req = urllib.request.Request(
        f"{server.http}/metrics", headers={"Authorization": f"Bearer {server.token}"}
    )
    with _DIRECT.open(req, timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'^tts_contexts_total\{outcome="cancelled"\} (\d+)', text, re.M)
    return int(m.group(1)) if m else 0


class Collect(FrameProcessor):
    """Records the TTS output of the pipeline."""

    def __init__(self):
        super().__init__()
        self.audio: list[bytes] = []
        self.errors: list[str] = []
        self.stopped = asyncio.Event()
        self.first_audio = asyncio.Event()

    async def process_frame(self, frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.audio.append(frame.audio)
            self.first_audio.set()
        elif isinstance(frame, TTSStoppedFrame):
            self.stopped.set()
        elif isinstance(frame, ErrorFrame):
            self.errors.append(frame.error)
        await self.push_frame(frame, direction)

    def reset(self):
        self.audio.clear()
        self.stopped.clear()
        self.first_audio.clear()


def tokens(text: str) -> list:
    """An LLM turn: start, one frame per word, end."""
    words = text.split(" ")
    return (
        [LLMFullResponseStartFrame()]
        + [LLMTextFrame(w + (" " if i < len(words) - 1 else "")) for i, w in enumerate(words)]
        + [LLMFullResponseEndFrame()]
    )


@contextlib.asynccontextmanager
async def running(task: PipelineWorker):
    """Runs a Pipecat pipeline worker for the body; then ends it with an
    EndFrame (the body finished) or cancels it (the body failed)."""
    run = asyncio.create_task(WorkerRunner(handle_sigint=False).run(task))
    try:
        yield
        await task.queue_frame(EndFrame())
        await asyncio.wait_for(run, TIMEOUT)
    finally:
        if not run.done():
            await task.cancel()
            await asyncio.wait_for(run, TIMEOUT)


async def drive(tts, server) -> None:
    """One spoken turn, an interrupted turn (the server must cancel it),
    and a turn after it."""
    cancelled = cancelled_contexts(server)
    out = Collect()
    task = PipelineWorker(
        Pipeline([tts, out]),
        params=PipelineParams(audio_out_sample_rate=RATE),
        enable_rtvi=False,
    )
    async with running(task):
        await task.queue_frames(tokens("Hello there, how are you today?"))
        await asyncio.wait_for(out.stopped.wait(), TIMEOUT)
        first = b"".join(out.audio)
        assert len(first) > RATE // 10 * 2, len(first)  # > 0.1 s of PCM16
        assert len(first) % 2 == 0
        assert not out.errors, out.errors

        # Interrupted: a long turn, cut once its first audio arrived.
        out.reset()
        # (no end of turn: the aggregator releases each sentence when the
        # next word arrives, so the first ones reach the server)
        await task.queue_frames(
            tokens("This is a long answer. It goes on and on, sentence after sentence. And then some more")[:-1]
        )
        await asyncio.wait_for(out.first_audio.wait(), TIMEOUT)
        await task.queue_frame(InterruptionFrame())
        await asyncio.sleep(0.5)

        # The next turn still speaks.
        out.reset()
        await task.queue_frames(tokens("Okay, next."))
        await asyncio.wait_for(out.stopped.wait(), TIMEOUT)
        assert b"".join(out.audio), "no audio after the interruption"
        assert not out.errors, out.errors
        assert cancelled_contexts(server) > cancelled, "the interrupted context was not cancelled"


def pipecat_elevenlabs(server, rate: int = RATE) -> ElevenLabsTTSService:
    """Pipecat's ElevenLabs service with only its base URL pointed at
    tts-rt (multi-stream-input; output `pcm_<rate>`)."""
    return ElevenLabsTTSService(
        api_key=server.token,
        voice_id="ryan",
        model="eleven_flash_v2_5",
        url=f"ws://{server.addr}",
        sample_rate=rate,
    )


def test_pipecat_elevenlabs_multi_stream(server):
    asyncio.run(drive(pipecat_elevenlabs(server), server))


def test_pipecat_cartesia(server):
    tts = CartesiaTTSService(
        api_key=server.token,
        voice_id="serena",
        model="sonic-2",
        url=f"ws://{server.addr}/tts/websocket",
        sample_rate=RATE,
    )
    asyncio.run(drive(tts, server))


def test_cartesia_sdk_contexts_and_cancel(server):
    cartesia = pytest.importorskip("cartesia")

    async def main():
        client = cartesia.AsyncCartesia(
            api_key=server.token,
            base_url=f"http://{server.addr}",
            websocket_base_url=f"ws://{server.addr}",
        )
        fmt = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 22050}
        async with client.tts.websocket_connect() as conn:
            ctx = conn.context(
                model_id="sonic-2",
                voice={"mode": "id", "id": "ryan"},
                output_format=fmt,
            )
            await ctx.push("Hello from the ")
            await ctx.push("Cartesia SDK.")
            await ctx.no_more_inputs()
            audio = b""
            kinds = []
            async for ev in ctx.receive():
                kinds.append(ev.type)
                if ev.type == "chunk" and ev.audio:
                    audio += ev.audio
            assert kinds[-1] == "done", kinds
            assert len(audio) > 22050 // 10 * 4 and len(audio) % 4 == 0, len(audio)

            # Cancel: the SDK drops the context; the socket goes on.
            ctx2 = conn.context(model_id="sonic-2", voice={"mode": "id", "id": "ryan"}, output_format=fmt)
            await ctx2.push("A sentence that will be cancelled before it ends, long enough to matter.")
            await ctx2.cancel()
            ctx3 = conn.context(model_id="sonic-2", voice={"mode": "id", "id": "ryan"}, output_format=fmt)
            await ctx3.push("After the cancel.")
            await ctx3.no_more_inputs()
            audio = b""
            async for ev in ctx3.receive():
                if ev.type == "chunk" and ev.audio:
                    audio += ev.audio
            assert audio
        await client.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))
