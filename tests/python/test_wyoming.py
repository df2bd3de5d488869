"""Home Assistant's Wyoming protocol (`tts-rt serve --wyoming-port`), driven
by the real `wyoming` package's client (`wyoming.client.AsyncTcpClient`) as
Home Assistant's Wyoming integration uses it: `Describe` → `Info`, a
one-shot `Synthesize`, and a streamed `SynthesizeStart` / `SynthesizeChunk`
/ `Synthesize` (the whole text, for servers without streaming) /
`SynthesizeStop`. All traffic on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from conftest import serve

TIMEOUT = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def wyoming_port():
    port = free_port()
    with serve("tiny-a", "--wyoming-port", str(port)):
        yield port


async def read_audio(client: AsyncTcpClient) -> tuple[bytes, int]:
    """audio-start, audio-chunks, audio-stop: the PCM and its rate."""
    event = await client.read_event()
    assert event is not None and AudioStart.is_type(event.type), event
    start = AudioStart.from_event(event)
    assert (start.width, start.channels) == (2, 1)
    pcm = b""
    while True:
        event = await client.read_event()
        assert event is not None, "closed inside the audio"
        if AudioStop.is_type(event.type):
            return pcm, start.rate
        assert AudioChunk.is_type(event.type), event
        chunk = AudioChunk.from_event(event)
        assert (chunk.rate, chunk.width, chunk.channels) == (start.rate, 2, 1)
        pcm += chunk.audio


def plausible(pcm: bytes, rate: int) -> None:
    assert len(pcm) % 2 == 0
    seconds = len(pcm) / 2 / rate
    # Some audio, within the server's 40-frame cap (80 ms frames).
    assert 0.05 < seconds <= 3.3, seconds


def run(coro):
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def test_describe_lists_the_voices(wyoming_port):
    async def main():
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            await client.write_event(Describe().event())
            event = await client.read_event()
            assert event is not None and Info.is_type(event.type), event
            info = Info.from_event(event)
            assert len(info.tts) == 1
            tts = info.tts[0]
            assert tts.name == "tts-rt" and tts.installed
            assert tts.supports_synthesize_streaming
            names = [v.name for v in tts.voices]
            assert names == ["dylan", "eric", "ryan", "serena"]
            assert "en" in tts.voices[0].languages

    run(main())


def test_one_shot_synthesize(wyoming_port):
    async def main():
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            await client.write_event(
                Synthesize(text="Hello world.", voice=SynthesizeVoice(name="ryan")).event()
            )
            pcm, rate = await read_audio(client)
            assert rate == 24000
            plausible(pcm, rate)

    run(main())


def test_streamed_synthesize(wyoming_port):
    async def main():
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="serena")).event())
            for text in ["Hello ", "there, ", "world."]:
                await client.write_event(SynthesizeChunk(text=text).event())
            # What Home Assistant sends for servers without streaming.
            await client.write_event(Synthesize(text="Hello there, world.").event())
            await client.write_event(SynthesizeStop().event())
            pcm, rate = await read_audio(client)
            plausible(pcm, rate)
            event = await client.read_event()
            assert event is not None and SynthesizeStopped.is_type(event.type), event

    run(main())


def test_unknown_voice_is_an_error_naming_the_voices(wyoming_port):
    async def main():
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            await client.write_event(
                Synthesize(text="Hi.", voice=SynthesizeVoice(name="nobody")).event()
            )
            event = await client.read_event()
            assert event is not None and Error.is_type(event.type), event
            error = Error.from_event(event)
            assert "nobody" in error.text and "ryan" in error.text, error
            assert error.code == "invalid_voice"

    run(main())
