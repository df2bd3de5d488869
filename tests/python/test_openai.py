"""The OpenAI-compatible endpoints driven by the official `openai` Python
package, unmodified, against a real `tts-rt serve` (conftest.py): what an
application (or a framework built on the SDK) would do by pointing
`base_url` at tts-rt.

Greedy decoding and a frame cap go in `extra_body` (tts-rt's extensions), so
every request for the same text is the same audio and the formats can be
compared byte for byte.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import wave

import openai
import pytest
from openai import OpenAI

NATIVE_RATE = 24000
TEXT = "The quick brown fox."
GREEDY = {"greedy": True, "max_frames": 12}


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    c = OpenAI(base_url=f"{server.http}/v1", api_key=server.token, max_retries=0, timeout=60)
    yield c
    c.close()


@pytest.fixture(scope="module")
def pcm(client) -> bytes:
    """The reference: non-streaming pcm for TEXT."""
    audio = client.audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm", extra_body=GREEDY
    ).content
    assert len(audio) > 0 and len(audio) % 2 == 0
    return audio


def test_models_list(client):
    models = client.models.list()
    ids = [m.id for m in models]
    # The checkpoint directory's name, then OpenAI's names as its aliases.
    assert ids == ["tiny-a", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
    assert all(m.object == "model" and m.owned_by == "tts-rt" for m in models.data)
    for id in ids:
        assert client.models.retrieve(id).id == id
    with pytest.raises(openai.NotFoundError, match="serves 'tiny-a'"):
        client.models.retrieve("tts-9000")


def test_wav_is_a_valid_file_stating_its_rate(client, pcm):
    resp = client.audio.speech.with_raw_response.create(
        model="gpt-4o-mini-tts", voice="alloy", input=TEXT, response_format="wav", extra_body=GREEDY
    )
    assert resp.headers["content-type"] == "audio/wav"
    assert resp.headers["x-sample-rate"] == str(NATIVE_RATE)
    data = resp.content
    # The header by hand (RIFF/WAVE, PCM, mono, 16-bit, the rate) ...
    riff, _, wave_, fmt, fmt_len, tag, channels, rate, byte_rate, align, bits, data_id, _ = struct.unpack_from(
        "<4sI4s4sIHHIIHH4sI", data, 0
    )
    assert (riff, wave_, fmt, fmt_len, data_id) == (b"RIFF", b"WAVE", b"fmt ", 16, b"data")
    assert (tag, channels, rate, bits, align, byte_rate) == (1, 1, NATIVE_RATE, 16, 2, 2 * NATIVE_RATE)
    # ... and the samples after it are exactly the pcm response.
    assert data[44:] == pcm
    # A complete file: the standard library's reader sees the true length.
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, NATIVE_RATE)
        assert w.getnframes() == len(pcm) // 2
        assert w.readframes(1 << 30) == pcm


def test_default_format_is_mp3(client):
    # OpenAI's documented default: no response_format → MP3 (frame sync).
    data = client.audio.speech.create(model="tts-1", voice="nova", input="Hi.", extra_body={"max_frames": 3}).content
    assert data[0] == 0xFF and data[1] & 0xE0 == 0xE0 and len(data) > 100


def test_streaming_pcm_equals_non_streaming(client, pcm):
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm", extra_body=GREEDY
    ) as resp:
        assert resp.headers["content-type"] == "audio/pcm"
        assert resp.headers["x-sample-rate"] == str(NATIVE_RATE)
        assert resp.headers.get("x-audio-encoding", "").startswith("pcm_s16le")
        chunks = [c for c in resp.iter_bytes() if c]
    assert b"".join(chunks) == pcm


def test_sse_events_carry_the_same_audio(client, pcm):
    # stream_format is a parameter of this SDK version; extra_body carries
    # it just as well for versions without it.
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="alloy", input=TEXT, response_format="pcm",
        stream_format="sse", extra_body=GREEDY,
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = list(resp.iter_lines())
    events = [json.loads(line[len("data:"):]) for line in lines if line.startswith("data:")]
    assert all(line == "" or line.startswith("data:") for line in lines), lines[:5]
    assert events, "no SSE events"
    deltas, done = events[:-1], events[-1]
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas), [e["type"] for e in events]
    assert done["type"] == "speech.audio.done", done
    assert done["sample_rate"] == NATIVE_RATE
    u = done["usage"]
    assert u["input_tokens"] > 0 and u["output_tokens"] > 0
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert audio == pcm

    # The same through extra_body (an SDK without the parameter), non-streaming.
    raw = client.audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm",
        extra_body={**GREEDY, "stream_format": "sse"},
    ).content.decode()
    events2 = [json.loads(b[len("data: "):]) for b in raw.split("\n\n") if b.strip()]
    assert events2[-1]["type"] == "speech.audio.done"
    assert b"".join(base64.b64decode(e["audio"]) for e in events2[:-1]) == pcm


def test_extensions_resample_and_voice_objects(client, pcm):
    # tts-rt's sample_rate extension: the rate is stated in the header.
    resp = client.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm",
        extra_body={**GREEDY, "sample_rate": 16000},
    )
    assert resp.headers["x-sample-rate"] == "16000"
    assert len(resp.content) // 2 == -(-(len(pcm) // 2) * 16000 // NATIVE_RATE)
    # A voice given as the SDK's custom-voice object ({"id": ...}).
    same = client.audio.speech.create(
        model="tts-1", voice={"id": "alloy"}, input=TEXT, response_format="pcm", extra_body=GREEDY
    ).content
    assert same == pcm
    # A checkpoint speaker name works as a voice too (alloy maps to serena:
    # by gender, never to a dialect speaker).
    serena = client.audio.speech.create(
        model="tts-1", voice="serena", input=TEXT, response_format="pcm", extra_body=GREEDY
    ).content
    assert serena == pcm


def test_async_client_streams_the_same_audio(server, pcm):
    import asyncio

    async def run() -> bytes:
        async with openai.AsyncOpenAI(base_url=f"{server.http}/v1", api_key=server.token, max_retries=0) as c:
            async with c.audio.speech.with_streaming_response.create(
                model="tts-1", voice="alloy", input=TEXT, response_format="pcm", extra_body=GREEDY
            ) as resp:
                return b"".join([chunk async for chunk in resp.iter_bytes()])

    assert asyncio.run(run()) == pcm


def test_errors_are_openai_shaped_and_name_the_problem(server, client):
    def bad(**kw) -> openai.APIStatusError:
        args = {"model": "tts-1", "voice": "alloy", "input": "Hi.", **kw}
        with pytest.raises(openai.APIStatusError) as e:
            client.audio.speech.create(**args)
        return e.value

    e = bad(voice="nobody")
    assert isinstance(e, openai.BadRequestError) and e.status_code == 400
    assert "nobody" in e.message and "alloy" in e.message
    assert e.body["param"] == "voice" and e.body["type"] == "invalid_request_error"

    e = bad(response_format="ogg")
    assert isinstance(e, openai.BadRequestError) and e.body["param"] == "response_format"
    assert "mp3" in e.message and "wav" in e.message and "opus" in e.message and "aac" in e.message

    e = bad(speed=4.5)
    assert isinstance(e, openai.BadRequestError) and e.body["param"] == "speed"
    assert "0.25 to 4.0" in e.message

    e = bad(input="")
    assert isinstance(e, openai.BadRequestError) and e.body["param"] == "input"

    e = bad(input="x" * 4097)
    assert isinstance(e, openai.BadRequestError) and "4096" in e.message

    e = bad(extra_body={"max_frames": 10_000})
    assert isinstance(e, openai.BadRequestError) and e.body["param"] == "max_frames"

    # speed 1.0 (OpenAI's default) is fine.
    assert client.audio.speech.create(
        model="tts-1", voice="alloy", input="Hi.", speed=1.0, response_format="pcm", extra_body={"max_frames": 2}
    ).content

    wrong = OpenAI(base_url=f"{server.http}/v1", api_key="wrong-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as a:
        wrong.models.list()
    assert a.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        wrong.audio.speech.create(model="tts-1", voice="alloy", input="Hi.")
    wrong.close()


def test_unknown_fields_and_unfollowable_instructions_are_refused(client):
    """A misspelt field is an error (as OpenAI answers one), not ignored;
    instructions on tiny-a (a 0.6B CustomVoice checkpoint) are refused
    saying which checkpoints follow them, unless a gpt-4o-mini-tts client
    sent them (by default): then they are left out and named."""
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(
            model="tts-1", voice="alloy", input="Hi.", extra_body={"langauge": "en"}
        )
    assert e.value.status_code == 400
    assert e.value.body["type"] == "invalid_request_error"
    assert e.value.body["param"] == "langauge"
    assert e.value.body["code"] == "unknown_parameter"
    assert "Did you mean 'language'?" in e.value.message
    assert e.value.body["request_id"] == e.value.response.headers["x-request-id"]

    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(
            model="tts-1", voice="alloy", input="Hi.", instructions="Whisper."
        )
    assert e.value.body["param"] == "instructions"
    assert "1.7B CustomVoice" in e.value.message

    # A gpt-4o-mini-tts app sends a style with every request: spoken without
    # it, and the response says what was left out.
    resp = client.audio.speech.with_raw_response.create(
        model="gpt-4o-mini-tts", voice="alloy", input="Hi.", instructions="Whisper.",
        response_format="pcm", extra_body={"max_frames": 3},
    )
    assert resp.headers["x-tts-ignored"] == "instructions"
    assert len(resp.content) > 0
