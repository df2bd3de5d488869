"""One arm of benches/dialect_frames.sh: speaks N contexts over one socket
of a running `tts-rt serve` and prints one JSON line — frames received,
the server process's CPU time per frame (from /proc/PID/stat, so the
client's own work is not counted) and the time from a context's text to
its first audio (ttfp, p50 and max).

Sockets: `elevenlabs` (multi-stream-input, pcm_24000: base64 JSON
frames) or `native` (/v1/realtime, binary pcm16 frames at 24 kHz, the
control: its path is the same in both builds).

Usage: python dialect_frames.py HOST:PORT PID elevenlabs|native CONTEXTS
"""

import asyncio
import json
import os
import statistics
import sys
import time

import websockets

TEXT = (
    "The quick brown fox jumps over the lazy dog, and then it runs far away "
    "across the green field while the farmer watches from his window."
)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def elevenlabs(addr, contexts, voice):
    url = f"ws://{addr}/v1/text-to-speech/{voice}/multi-stream-input?output_format=pcm_24000"
    frames, ttfp = 0, []
    async with websockets.connect(url, max_size=None) as ws:
        for i in range(contexts):
            cid = f"c{i}"
            await ws.send(json.dumps({"text": " ", "context_id": cid}))
            t0 = time.perf_counter()
            await ws.send(json.dumps({"text": TEXT, "context_id": cid, "flush": True}))
            await ws.send(json.dumps({"context_id": cid, "close_context": True}))
            first = None
            while True:
                m = json.loads(await ws.recv())
                if m.get("contextId") != cid:
                    continue
                if "audio" in m and m["audio"]:
                    frames += 1
                    if first is None:
                        first = time.perf_counter() - t0
                if m.get("isFinal") and "audio" not in m:
                    break
                if "error" in m:
                    raise SystemExit(f"error: {m}")
            ttfp.append(first * 1e3)
    return frames, ttfp


async def native(addr, contexts):
    frames, ttfp = 0, []
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        json.loads(await ws.recv())  # session.created
        await ws.send(json.dumps({"type": "session.update", "session": {"sample_rate": 24000, "format": "pcm16"}}))
        while json.loads(await ws.recv())["type"] != "session.updated":
            pass
        for i in range(contexts):
            cid = f"c{i}"
            t0 = time.perf_counter()
            await ws.send(json.dumps({"type": "context.append", "context_id": cid, "text": TEXT}))
            await ws.send(json.dumps({"type": "context.end", "context_id": cid}))
            first = None
            while True:
                m = await ws.recv()
                if isinstance(m, bytes):
                    frames += 1
                    if first is None:
                        first = time.perf_counter() - t0
                    continue
                e = json.loads(m)
                if e["type"] == "context.done" and e["context_id"] == cid:
                    break
                if e["type"] in ("context.failed", "error"):
                    raise SystemExit(f"error: {e}")
            ttfp.append(first * 1e3)
    return frames, ttfp


async def first_voice(addr):
    async with websockets.connect(f"ws://{addr}/v1/realtime") as ws:
        return json.loads(await ws.recv())["voices"][0]


async def main():
    addr, pid, socket, contexts = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    voice = await first_voice(addr)
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    if socket == "elevenlabs":
        frames, ttfp = await elevenlabs(addr, contexts, voice)
    else:
        frames, ttfp = await native(addr, contexts)
    cpu, wall = cpu_seconds(pid) - c0, time.perf_counter() - t0
    print(json.dumps({
        "socket": socket,
        "frames": frames,
        "server_cpu_s": round(cpu, 3),
        "cpu_us_per_frame": round(cpu / frames * 1e6, 1),
        "wall_s": round(wall, 2),
        "ttfp_ms_p50": round(statistics.median(ttfp), 1),
        "ttfp_ms_max": round(max(ttfp), 1),
    }))


asyncio.run(main())
