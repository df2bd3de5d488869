#!/usr/bin/env python3
"""Overload: N clients at once against one `tts-rt serve` (stdlib only).

Every client POSTs /v1/audio/speech (raw PCM, streamed as it is made) at
the same instant and times what it gets back, client side (t_req = send):
- refused (429 or 503): how long the refusal took to arrive;
- admitted: METRICS.md's figures on its chunks — ttfp, rtf, and
  continuity at the prebuffer (underruns of a player that starts at
  t_0 + P and plays in real time).

Prints one JSON object: per-client records and the summary (admitted,
refused, admitted streams continuous at P, refusal ms p50/max, and frames
per second of the run's wall time, in all and of the continuous streams
alone: what listeners heard without a gap).

usage: overload.py ADDR [--clients 20] [--prebuffer-ms 200] [--text T]
"""

import argparse
import http.client
import json
import math
import threading
import time

SR = 24000
SAMPLES_PER_FRAME = 1920


def nearest_rank(v, f):
    if not v:
        return None
    s = sorted(v)
    return s[max(0, math.ceil(len(s) * f) - 1)]


def underruns(chunks, prebuffer_ms):
    """chunks: [(t_ms, samples)] after t_req. Player starts at t_0 + P."""
    if not chunks:
        return None
    play = chunks[0][0] + prebuffer_ms  # wall time the player has reached
    have = 0.0  # audio ms received up to the chunk being looked at
    events = 0
    stall = 0.0
    for t, n in chunks:
        # The player runs out at play + (have - played) ... simulate: the
        # audio received before this chunk ends at `play_end`.
        play_end = play + have
        if t > play_end and have > 0:
            events += 1
            stall += t - play_end
            play += t - play_end
        have += n * 1000.0 / SR
    return events, stall


def client(addr, body, out, barrier):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    rec = {"status": None}
    barrier.wait()
    t_req = time.monotonic()
    try:
        conn.request("POST", "/v1/audio/speech", body=body,
                     headers={"content-type": "application/json"})
        r = conn.getresponse()
        t_status = (time.monotonic() - t_req) * 1e3
        rec["status"] = r.status
        rec["status_ms"] = t_status
        if r.status != 200:
            rec["body"] = r.read(2000).decode("utf-8", "replace")
            rec["retry_after"] = r.getheader("retry-after")
            out.append(rec)
            return
        chunks = []
        pending = b""
        while True:
            b = r.read1(65536)
            if not b:
                break
            now = (time.monotonic() - t_req) * 1e3
            pending += b
            n = len(pending) // 2
            pending = pending[n * 2:]
            if n:
                chunks.append((now, n))
        samples = sum(n for _, n in chunks)
        audio_s = samples / SR
        rec["samples"] = samples
        rec["frames"] = samples / SAMPLES_PER_FRAME
        rec["ttfp_ms"] = chunks[0][0] if chunks else None
        rec["rtf"] = (chunks[-1][0] / 1e3 / audio_s) if audio_s > 0 else None
        rec["chunks"] = chunks
    except Exception as e:  # a broken stream is a result, not a crash
        rec["error"] = repr(e)
    finally:
        conn.close()
    out.append(rec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--prebuffer-ms", type=float, default=200.0)
    ap.add_argument("--voice", default="alloy")
    ap.add_argument("--text", default=(
        "Thank you for calling. Your appointment is confirmed for Tuesday at "
        "three in the afternoon, and a reminder will reach you the day before. "
        "If anything changes, call us back or reply to the message you receive."))
    a = ap.parse_args()
    body = json.dumps({"model": "tts-1", "input": a.text, "voice": a.voice,
                       "response_format": "pcm"})
    out = []
    barrier = threading.Barrier(a.clients + 1)
    threads = [threading.Thread(target=client, args=(a.addr, body, out, barrier))
               for _ in range(a.clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    wall_s = time.monotonic() - t0
    admitted = [r for r in out if r["status"] == 200]
    refused = [r for r in out if r["status"] in (429, 503)]
    other = [r for r in out if r not in admitted and r not in refused]
    cont = []
    for r in admitted:
        u = underruns(r.get("chunks", []), a.prebuffer_ms)
        r["underruns"], r["stall_ms"] = (u if u else (None, None))
        r["continuous"] = u is not None and u[0] == 0 and "error" not in r
        cont.append(r["continuous"])
        r.pop("chunks", None)
    frames = sum(r.get("frames", 0) for r in admitted)
    # Frames a listener heard without a gap: those of the continuous streams.
    frames_continuous = sum(r.get("frames", 0) for r in admitted if r["continuous"])
    refusal_ms = [r["status_ms"] for r in refused]
    print(json.dumps({
        "clients": a.clients,
        "prebuffer_ms": a.prebuffer_ms,
        "admitted": len(admitted),
        "refused": len(refused),
        "other": len(other),
        "admitted_continuous": sum(cont),
        "refusal_ms_p50": nearest_rank(refusal_ms, 0.5),
        "refusal_ms_max": max(refusal_ms) if refusal_ms else None,
        "frames_total": frames,
        "wall_s": wall_s,
        "frames_per_s": frames / wall_s if wall_s > 0 else None,
        "continuous_frames_per_s": frames_continuous / wall_s if wall_s > 0 else None,
        "rtf_admitted": sorted(r["rtf"] for r in admitted if r.get("rtf")),
        "records": out,
    }))


if __name__ == "__main__":
    main()
