"""Stored voices on a Base checkpoint, from the outside: a clip uploaded with
`POST /v1/audio/voices` (multipart/form-data as vllm-omni's clients send it,
built here with the standard library), then spoken by the official `openai` client with `voice="<name>"`
and nothing else special, and over the realtime WebSocket; then the server
restarts on the same voices directory and speaks the voice again.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
import uuid
import wave

from openai import OpenAI

from conftest import ROOT
from test_realtime import Rt, collect, open_ws

REF = ROOT / "tests" / "fixtures" / "goldens" / "tiny-base" / "ref_a.wav"
REF_TEXT = json.loads((REF.parent / "cases.json").read_text())["ref_clips"][0]["text"]
GREEDY = {"greedy": True, "max_frames": 8}


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request(server, method: str, path: str, body: bytes | None = None, content_type: str | None = None):
    """(status, JSON body) of one request with the server's token."""
    headers = {"Authorization": f"Bearer {server.token}"}
    if content_type:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(f"{server.http}{path}", data=body, headers=headers, method=method)
    try:
        with _DIRECT.open(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def upload(server, name: str, **fields):
    """POST /v1/audio/voices as a form: the text fields, then the clip."""
    boundary = uuid.uuid4().hex
    parts = []
    for k, v in {"name": name, "consent": "yes", **fields}.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="audio_sample"; filename="ref_a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n".encode()
    )
    parts.append(REF.read_bytes())
    parts.append(f"\r\n--{boundary}--\r\n".encode())
    return request(
        server, "POST", "/v1/audio/voices", b"".join(parts), f"multipart/form-data; boundary={boundary}"
    )


def speak_openai(server, voice: str) -> bytes:
    client = OpenAI(base_url=f"{server.http}/v1", api_key=server.token, max_retries=0, timeout=60)
    try:
        audio = client.audio.speech.create(
            model="tts-1", voice=voice, input="Hello there.", response_format="wav", extra_body=GREEDY
        ).content
    finally:
        client.close()
    # A complete WAV: its header states the exact length.
    assert audio[:4] == b"RIFF" and len(audio) > 44 + 100, len(audio)
    with wave.open(io.BytesIO(audio)) as w:
        assert w.getframerate() == 24000 and w.getnchannels() == 1
        assert w.getnframes() == (len(audio) - 44) // 2
    return audio


def speak_realtime(server, voice: str) -> int:
    ws = open_ws(server)
    try:
        rt = Rt(ws)
        assert voice in rt.created["voices"], rt.created["voices"]
        s = rt.update(voice=voice, **GREEDY)
        assert s["voice"] == voice
        rt.send({"type": "context.append", "context_id": "v", "text": "Hello there."})
        rt.send({"type": "context.end", "context_id": "v"})
        c = collect(rt, "v")
        assert c.end["type"] == "context.done", c.end
        return sum(len(f.payload) for f in c.frames)
    finally:
        ws.close()


def test_an_uploaded_voice_speaks_over_openai_and_realtime_and_survives_a_restart(serve_base):
    with serve_base() as server:
        status, made = upload(server, "alice", ref_text=REF_TEXT)
        assert status == 201, made
        assert made["mode"] == "icl" and made["name"] == "alice"
        status, dup = upload(server, "alice", ref_text=REF_TEXT)
        assert status == 409 and "already exists" in dup["error"]["message"], dup
        status, bad = upload(server, "../evil")
        assert status == 400 and bad["error"]["param"] == "name", bad

        status, listed = request(server, "GET", "/v1/audio/voices")
        assert status == 200
        assert [v["name"] for v in listed["uploaded_voices"]] == ["alice"]

        first = speak_openai(server, "alice")
        assert speak_openai(server, "alice") == first, "greedy: the same audio twice"
        assert speak_realtime(server, "alice") > 0

    with serve_base() as server:
        assert speak_openai(server, "alice") == first, "the same voice after a restart"
        assert speak_realtime(server, "alice") > 0
