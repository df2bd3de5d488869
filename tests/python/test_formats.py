"""Every `response_format` of `POST /v1/audio/speech`, decoded by tools
that share no code with tts-rt (Python's `wave`, sox's `soxi`, ffmpeg), and
compared with the `pcm` response of the same greedy request.

Thresholds are the SNRs each codec reaches on this fixture's audio (the tiny
random checkpoint speaks noise-like audio, which is the hardest case for a
perceptual codec; docs/architecture.md has the figures on speech-like
signals from audio/tests/it/encode_formats.rs). Delays: MP3 carries no
gapless tag and ADTS AAC no delay field, so their encoder+decoder delay is
found by correlation; Ogg Opus states its pre-skip and end granule, which
ffmpeg applies.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import struct
import subprocess
import wave

import numpy as np
import pytest
from openai import OpenAI

NATIVE_RATE = 24000
TEXT = "The quick brown fox."
GREEDY = {"greedy": True, "max_frames": 12}

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    c = OpenAI(base_url=f"{server.http}/v1", api_key=server.token, max_retries=0, timeout=60)
    yield c
    c.close()


def speech(client, fmt: str | None, **extra) -> tuple[bytes, dict]:
    args = {"model": "tts-1", "voice": "alloy", "input": TEXT, "extra_body": {**GREEDY, **extra}}
    if fmt is not None:
        args["response_format"] = fmt
    resp = client.audio.speech.with_raw_response.create(**args)
    return resp.content, resp.headers


def samples(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768.0


@pytest.fixture(scope="module")
def pcm(client) -> bytes:
    return speech(client, "pcm")[0]


@pytest.fixture(scope="module")
def pcm8k(client) -> bytes:
    return speech(client, "pcm", sample_rate=8000)[0]


def ffmpeg_decode(data: bytes, rate: int, input_args: list[str] = ()) -> np.ndarray:
    out = subprocess.run(
        ["ffmpeg", "-v", "error", *input_args, "-i", "pipe:0", "-f", "s16le", "-ac", "1", "-ar", str(rate), "pipe:1"],
        input=data, capture_output=True, check=True, timeout=60,
    )
    return samples(out.stdout)


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    n = min(len(ref), len(got))
    err = np.sum((ref[:n] - got[:n]) ** 2)
    return 10 * np.log10(np.sum(ref[:n] ** 2) / max(err, 1e-30))


def best_lag(ref: np.ndarray, got: np.ndarray, max_lag: int) -> int:
    n = min(len(ref), len(got) - max_lag)
    return int(np.argmax([np.dot(ref[:n], got[lag:lag + n]) for lag in range(max_lag + 1)]))


def test_saved_wav_reports_its_true_duration(client, pcm, tmp_path):
    data, headers = speech(client, "wav")
    assert headers["content-type"] == "audio/wav"
    assert int(headers["content-length"]) == len(data) == 44 + len(pcm)
    riff, data_len = struct.unpack_from("<I", data, 4)[0], struct.unpack_from("<I", data, 40)[0]
    assert (riff, data_len) == (36 + len(pcm), len(pcm))
    with wave.open(io.BytesIO(data)) as w:
        assert w.getnframes() == len(pcm) // 2
        assert w.readframes(w.getnframes()) == pcm
    if shutil.which("soxi"):
        f = tmp_path / "saved.wav"
        f.write_bytes(data)
        assert subprocess.run(["soxi", "-s", str(f)], capture_output=True, text=True, check=True).stdout.strip() == str(len(pcm) // 2)
        d = float(subprocess.run(["soxi", "-D", str(f)], capture_output=True, text=True, check=True).stdout)
        assert abs(d - len(pcm) / 2 / NATIVE_RATE) < 1e-3


def test_streamed_wav_states_unknown_sizes_and_decodes_to_the_pcm(client, pcm):
    # "stream": true — bytes as they are encoded; the length is unknown when
    # the header leaves, so both sizes are 0xFFFFFFFF (read to the end).
    data, headers = speech(client, "wav", stream=True)
    assert "content-length" not in headers
    assert struct.unpack_from("<I", data, 40)[0] == 0xFFFFFFFF
    assert data[44:] == pcm


def test_default_format_is_mp3_as_openai_documents(client):
    data, headers = speech(client, None)
    assert headers["content-type"] == "audio/mpeg"
    # An MPEG audio frame sync (no ID3 tag): 11 set bits.
    assert data[0] == 0xFF and data[1] & 0xE0 == 0xE0, data[:4]


@pytest.mark.parametrize("fmt", ["wav", None, "pcm"])
def test_sse_deltas_are_raw_pcm_with_no_riff_header(client, pcm, fmt):
    args = {"model": "tts-1", "voice": "alloy", "input": TEXT, "stream_format": "sse", "extra_body": GREEDY}
    if fmt is not None:
        args["response_format"] = fmt
    with client.audio.speech.with_streaming_response.create(**args) as resp:
        lines = list(resp.iter_lines())
    events = [json.loads(line[len("data:"):]) for line in lines if line.startswith("data:")]
    deltas = [base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"]
    assert deltas and not deltas[0].startswith(b"RIFF")
    if fmt != None:  # noqa: E711 — the default (mp3) deltas are MP3 frames
        assert b"".join(deltas) == pcm
    else:
        assert deltas[0][0] == 0xFF


@needs_ffmpeg
@pytest.mark.parametrize(
    "fmt,min_snr",
    [("flac", 90.0), ("mp3", 3.0), ("opus", 8.0), ("aac", 6.0)],
)
def test_compressed_formats_decode_with_ffmpeg_to_the_pcm(client, pcm, fmt, min_snr):
    data, headers = speech(client, fmt)
    ref = samples(pcm)
    got = ffmpeg_decode(data, NATIVE_RATE)
    if fmt == "mp3":
        got = got[best_lag(ref, got, 3000):]
    elif fmt == "aac":
        assert headers["content-type"] == "audio/aac"
        # FDK's 2048-sample delay first, then every input sample, then
        # less than one 1024-sample frame of the end's silence.
        lag = best_lag(ref, got, 4096)
        assert lag + len(ref) <= len(got) < lag + len(ref) + 1024, (lag, len(got), len(ref))
        got = got[lag:]
    else:
        # FLAC and Ogg Opus state their length: exactly the input's.
        assert len(got) == len(ref), (len(got), len(ref))
    snr = snr_db(ref, got)
    print(f"{fmt}: {len(data)} bytes, SNR {snr:.1f} dB")
    assert snr >= min_snr, f"{fmt} SNR {snr:.1f} dB"


@needs_ffmpeg
@pytest.mark.parametrize("fmt,ff", [("mulaw", "mulaw"), ("alaw", "alaw")])
def test_g711_is_8_khz_and_decodes_with_ffmpeg_to_the_8_khz_pcm(client, pcm8k, fmt, ff):
    data, headers = speech(client, fmt)
    assert headers["x-sample-rate"] == "8000"
    ref = samples(pcm8k)
    assert len(data) == len(ref), "one byte per 8 kHz sample"
    got = ffmpeg_decode(data, 8000, ["-f", ff, "-ar", "8000", "-ac", "1"])
    snr = snr_db(ref, got)
    print(f"{fmt}: SNR {snr:.1f} dB")
    assert snr >= 25.0, f"{fmt} SNR {snr:.1f} dB"


def spectral_centroid(x: np.ndarray, rate: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    freqs = np.fft.rfftfreq(len(x), 1 / rate)
    return float(np.sum(freqs * spec) / np.sum(spec))


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_speed_changes_duration_within_2_percent_and_keeps_the_spectrum(client, pcm, speed):
    # OpenAI's `speed`, streamed: the SDK sends it as a request field.
    resp = client.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm", speed=speed, extra_body=GREEDY
    )
    got, base = samples(resp.content), samples(pcm)
    ratio = len(got) / len(base)
    assert abs(ratio * speed - 1) < 0.02, f"speed {speed}: {len(got)} samples from {len(base)}"
    # Pitch kept: a resampling speed change would move the spectral centroid
    # by the speed factor (x2 or x0.5); a time stretch leaves it in place.
    c0, c1 = spectral_centroid(base, NATIVE_RATE), spectral_centroid(got, NATIVE_RATE)
    assert abs(c1 / c0 - 1) < 0.1, f"speed {speed}: centroid {c0:.0f} -> {c1:.0f} Hz"
    # A compressed format takes it too, and decodes.
    data = client.audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="mp3", speed=speed, extra_body=GREEDY
    ).content
    if shutil.which("ffmpeg"):
        dec = ffmpeg_decode(data, NATIVE_RATE)
        # MP3 frames are 1152 samples: the decode may carry up to two more.
        assert abs(len(dec) - len(got)) <= 2 * 1152, (len(dec), len(got))


@needs_ffmpeg
@pytest.mark.parametrize("model", ["tts-1", ""])
def test_open_webui_request_shape_gets_mp3(server, model):
    """What Open WebUI's backend posts for its "OpenAI" TTS engine
    (backend/open_webui/routers/audio.py): the page's `{input, voice}` plus
    the configured model (empty when the admin left it blank), a bearer key,
    no response_format; it saves the whole body as an .mp3 file."""
    import urllib.request

    body = json.dumps({"input": TEXT, "voice": "alloy", "model": model}).encode()
    req = urllib.request.Request(
        f"{server.http}/v1/audio/speech",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {server.token}"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.headers["content-type"] == "audio/mpeg"
        data = r.read()
    assert len(ffmpeg_decode(data, 24000)) > 0
