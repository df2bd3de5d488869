"""ElevenLabs' own Python SDK, unmodified, against `tts-rt serve` over TLS:
the client is given only the server's https:// base URL, its token as the
API key, and trust in the server's self-signed certificate (made here with
the `openssl` command for 127.0.0.1; nothing else is ever contacted).

- `voices.get_all()` / `voices.search()` / `voices.get()` list the preset
  speakers as premade voices; an unknown voice id is a 404 whose body is
  ElevenLabs' `{"detail": {"status", "message"}}`.
- `text_to_speech.convert()` over HTTPS returns the audio.
- `convert_with_timestamps()` and `stream_with_timestamps()` over HTTPS: every
  character of the text timed once, in order, within the audio.
- `text_to_speech.convert_realtime()`, which always opens a `wss://`
  stream-input socket, turns a text iterator into audio bytes.
"""

from __future__ import annotations

import os
import ssl

import pytest

# Nothing may phone home: no proxies for loopback, no vendor keys in the env.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost,::1"
for k in ("ELEVENLABS_API_KEY", "ELEVEN_API_KEY", "ELEVENLABS_BASE_URL"):
    os.environ.pop(k, None)

elevenlabs = pytest.importorskip("elevenlabs")
httpx = pytest.importorskip("httpx")

from elevenlabs.client import ElevenLabs  # noqa: E402
from elevenlabs.core.api_error import ApiError  # noqa: E402

from conftest import serve  # noqa: E402

TIMEOUT = 120


@pytest.fixture(scope="module")
def tls_server(cert):
    cert_path, key_path = cert
    with serve("tiny-a", "--tls-cert", cert_path, "--tls-key", key_path, cafile=cert_path) as srv:
        yield srv


@pytest.fixture
def client(tls_server, cert, monkeypatch):
    """The SDK pointed at the server. HTTP goes through httpx, given a
    client that trusts the certificate; the realtime socket through
    `websockets`, whose default TLS context reads SSL_CERT_FILE."""
    monkeypatch.setenv("SSL_CERT_FILE", cert[0])
    http = httpx.Client(
        verify=ssl.create_default_context(cafile=cert[0]), timeout=TIMEOUT, trust_env=False
    )
    yield ElevenLabs(api_key=tls_server.token, base_url=tls_server.http, httpx_client=http)
    http.close()


def test_base_url_is_https(tls_server):
    assert tls_server.http.startswith("https://127.0.0.1:")


def test_voices_list_the_presets(client):
    voices = client.voices.get_all().voices
    ids = sorted(v.voice_id for v in voices)
    assert ids == ["dylan", "eric", "ryan", "serena"], ids
    assert all(v.category == "premade" and v.name == v.voice_id for v in voices)

    page = client.voices.search(page_size=2)
    assert len(page.voices) == 2 and page.has_more and page.total_count == 4
    rest = client.voices.search(page_size=2, next_page_token=page.next_page_token)
    assert len(rest.voices) == 2 and not rest.has_more
    assert sorted(v.voice_id for v in page.voices + rest.voices) == ids
    found = client.voices.search(search="ryan")
    assert [v.voice_id for v in found.voices] == ["ryan"]

    ryan = client.voices.get("ryan")
    assert ryan.voice_id == "ryan" and ryan.category == "premade"
    assert client.voices.settings.get_default().stability == 0.5


def test_unknown_voice_is_a_404_in_elevenlabs_shape(client):
    with pytest.raises(ApiError) as e:
        client.voices.get("21m00Tcm4TlvDq8ikWAM")
    assert e.value.status_code == 404
    detail = e.value.body["detail"]
    assert detail["status"] == "voice_not_found"
    assert "21m00Tcm4TlvDq8ikWAM" in detail["message"]


def test_a_wrong_key_is_refused_in_elevenlabs_shape(tls_server, cert):
    http = httpx.Client(verify=ssl.create_default_context(cafile=cert[0]), trust_env=False)
    c = ElevenLabs(api_key="not-the-token", base_url=tls_server.http, httpx_client=http)
    with pytest.raises(ApiError) as e:
        c.voices.get_all()
    http.close()
    assert e.value.status_code == 401
    assert e.value.body["detail"]["status"] == "invalid_api_key"


def test_convert_over_https_returns_audio(client):
    audio = b"".join(
        client.text_to_speech.convert(
            "ryan", text="Hello over HTTPS.", model_id="eleven_flash_v2_5", output_format="pcm_24000"
        )
    )
    assert len(audio) > 2400 and len(audio) % 2 == 0, len(audio)
    mp3 = b"".join(client.text_to_speech.convert("serena", text="And in MP3."))
    assert mp3[:3] == b"ID3" or mp3[0] == 0xFF, mp3[:4]


def test_convert_realtime_over_wss_streams_audio(client):
    def text():
        yield "Hello "
        yield "there, "
        yield "this streams over TLS."

    chunks = list(
        client.text_to_speech.convert_realtime(
            voice_id="ryan", text=text(), model_id="eleven_flash_v2_5", output_format="pcm_16000"
        )
    )
    audio = b"".join(chunks)
    assert chunks and len(audio) > 1600 and len(audio) % 2 == 0, len(audio)


def _chars(alignment) -> str:
    return "".join(alignment.characters)


def test_convert_with_timestamps_over_https(client):
    import base64

    text = "Every character has its time."
    r = client.text_to_speech.convert_with_timestamps(
        "ryan", text=text, model_id="eleven_flash_v2_5", output_format="pcm_16000"
    )
    audio = base64.b64decode(r.audio_base_64)
    audio_s = len(audio) / 2 / 16000
    assert audio_s > 0.05, audio_s
    a = r.alignment
    assert _chars(a) == text
    assert _chars(r.normalized_alignment) == text
    ends = a.character_end_times_seconds
    starts = a.character_start_times_seconds
    assert all(s <= e for s, e in zip(starts, ends))
    assert all(b >= x for x, b in zip(starts, starts[1:])), "monotonic"
    assert ends[-1] <= audio_s + 1e-3


def test_stream_with_timestamps_over_https(client):
    import base64

    text = "Streamed, with times for each character."
    chars, audio = "", b""
    for chunk in client.text_to_speech.stream_with_timestamps(
        "ryan", text=text, model_id="eleven_flash_v2_5", output_format="pcm_16000"
    ):
        audio += base64.b64decode(chunk.audio_base_64 or "")
        if chunk.alignment is not None:
            chars += _chars(chunk.alignment)
    assert chars == text
    assert len(audio) > 0 and len(audio) % 2 == 0
