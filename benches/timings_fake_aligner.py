#!/usr/bin/env python3
"""The timings scorer's self-check: a stand-in aligner with the real one's
command line and output, that knows nothing of speech.

It reads the wav in chunks as the server would stream it (first chunk
--first-chunk-ms, then --chunk-ms each), and when the stream ends spreads
the whole duration over the text by character count: each word starts at
duration * char_start / len(text) and ends at duration * char_end /
len(text). Words: whitespace-separated tokens with leading and trailing
punctuation stripped, each CJK ideograph a word of its own.

Its starts equal benches/timings_accuracy.py's `uniform-chars` anchor on
every word whose first character it finds (all of the corpus's words), so
the scorer's row for it must equal that anchor's: that is the self-check.

Usage: python3 benches/timings_fake_aligner.py --wav NAME.wav --text-file NAME.txt
           [--first-chunk-ms 160] [--chunk-ms 320]
Prints {"words": [{"text", "char_start", "char_end", "start_ms", "end_ms"}]}.
Stdlib only.
"""

import argparse
import json
import unicodedata
import wave


def is_cjk(ch):
    return unicodedata.category(ch) == "Lo" and (
        "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\U00020000" <= ch <= "\U0003134f")


def tokens(text):
    """[(char_start, char_end)]: whitespace tokens stripped of punctuation; CJK split per character."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        j = i
        while j < n and not text[j].isspace():
            j += 1
        a, b = i, j
        while a < b and unicodedata.category(text[a])[0] not in "LNM":
            a += 1
        while b > a and unicodedata.category(text[b - 1])[0] not in "LNM":
            b -= 1
        k = a
        while k < b:  # split runs of CJK ideographs (and their punctuation) into characters
            if is_cjk(text[k]):
                out.append((k, k + 1))
                k += 1
                continue
            m = k
            while m < b and not is_cjk(text[m]):
                m += 1
            s, e = k, m
            while s < e and unicodedata.category(text[s])[0] not in "LNM":
                s += 1
            while e > s and unicodedata.category(text[e - 1])[0] not in "LNM":
                e -= 1
            if s < e:
                out.append((s, e))
            k = m
        i = j
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wav", required=True)
    ap.add_argument("--text-file", required=True)
    ap.add_argument("--first-chunk-ms", type=float, default=160)
    ap.add_argument("--chunk-ms", type=float, default=320)
    args = ap.parse_args()
    with open(args.text_file, encoding="utf-8") as f:
        text = f.read()
    with wave.open(args.wav, "rb") as w:
        sr = w.getframerate()
        n = 0
        want = max(1, round(sr * args.first_chunk_ms / 1000))
        while True:
            got = len(w.readframes(want)) // (w.getsampwidth() * w.getnchannels())
            n += got
            if got < want:
                break
            want = max(1, round(sr * args.chunk_ms / 1000))
    dur = n * 1000 / sr
    L = max(1, len(text))
    words = [{"text": text[a:b], "char_start": a, "char_end": b,
              "start_ms": round(dur * a / L, 3), "end_ms": round(dur * b / L, 3)}
             for a, b in tokens(text)]
    print(json.dumps({"words": words}, ensure_ascii=False))


if __name__ == "__main__":
    main()
