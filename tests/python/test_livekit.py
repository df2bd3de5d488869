"""LiveKit Agents' ElevenLabs and Cartesia TTS plugins driven standalone
(no LiveKit room or server: a TTS plugin needs only an aiohttp session)
against the loopback server, with only the base URL changed:

- `stream()`: the plugins' WebSocket paths (ElevenLabs multi-stream-input,
  Cartesia /tts/websocket), text pushed word by word as an LLM would;
- `synthesize()`: their one-shot HTTP calls (ElevenLabs
  /v1/text-to-speech/{voice}/stream, Cartesia /tts/bytes).

Nothing else is contacted: the plugins' base URLs are the test server's.
"""

from __future__ import annotations

import asyncio
import os

import pytest

os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost,::1"
for k in ("ELEVEN_API_KEY", "ELEVENLABS_API_KEY", "CARTESIA_API_KEY", "LIVEKIT_URL"):
    os.environ.pop(k, None)

pytest.importorskip("livekit.agents")
elevenlabs = pytest.importorskip("livekit.plugins.elevenlabs")
cartesia = pytest.importorskip("livekit.plugins.cartesia")
import aiohttp  # noqa: E402

TIMEOUT = 120
RATE = 24000


async def frames(stream) -> tuple[int, set]:
    """Samples and sample rates of every audio frame a plugin stream yields."""
    samples, rates = 0, set()
    async with stream as s:
        async for ev in s:
            samples += ev.frame.samples_per_channel
            rates.add(ev.frame.sample_rate)
    return samples, rates


def plugins(server, http):
    return {
        "elevenlabs": elevenlabs.TTS(
            api_key=server.token,
            voice_id="ryan",
            base_url=f"{server.http}/v1",
            encoding=f"pcm_{RATE}",
            http_session=http,
        ),
        "cartesia": cartesia.TTS(
            api_key=server.token,
            voice="serena",
            base_url=server.http,
            sample_rate=RATE,
            http_session=http,
        ),
    }


@pytest.mark.parametrize("vendor", ["elevenlabs", "cartesia"])
@pytest.mark.parametrize("mode", ["stream", "synthesize"])
def test_livekit_plugin(server, vendor, mode):
    async def main():
        async with aiohttp.ClientSession() as http:
            tts = plugins(server, http)[vendor]
            try:
                if mode == "stream":
                    s = tts.stream()
                    for w in "Hello there, this is a streamed turn.".split(" "):
                        s.push_text(w + " ")
                    s.flush()
                    s.end_input()
                else:
                    s = tts.synthesize("Hello from the plugin.")
                samples, rates = await frames(s)
            finally:
                await tts.aclose()
        assert rates == {RATE}, rates
        assert samples > RATE // 10, samples  # > 0.1 s of audio

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))
