#!/usr/bin/env python3
"""Score a word-timing aligner against the espeak-ng corpus that
tools/timings_truth.py builds (real speech, exact word starts).

The aligner under test is an external command, run once per utterance as
  CMD --wav NAME.wav --text-file NAME.txt --first-chunk-ms F --chunk-ms C
(it streams the wav in chunks of those sizes, as the server would) and
prints on stdout
  {"words": [{"text", "char_start", "char_end", "start_ms", "end_ms"}]}
with char offsets as 0-based code-point indices into the text.

Matching: each truth word is matched to the aligner word that contains the
truth word's first character (so a split or merged word is matched by the
piece that holds its start); a truth word no aligner word contains is
"missed" and counted, not scored. Per language, per rate and overall: the
number of words, median, p90 and max of |start error| in ms, the median
signed start error (bias: + means late), and the same for |end error| over
the truth words that have an end.

Two anchors, computed here on the same corpus and the same matching, put
any method in perspective:
  uniform-chars         the whole duration (known only offline) spread over
                        the text by character count
  uniform-chars-voiced  the same over the voiced span only (leading and
                        trailing silence skipped: first/last 10 ms frame
                        within 40 dB of the loudest)

Usage:
  python3 benches/timings_accuracy.py [--corpus target/timings-corpus]
      [--aligner "CMD ..." | --anchors-only] [--first-chunk-ms 160]
      [--chunk-ms 320] [--start-ref start|onset] [--langs en,de]
      [--json-out FILE] [--timeout 120]
Default aligner: target/release/examples/align. Self-check without it:
  --aligner "python3 benches/timings_fake_aligner.py" (its row must equal
  uniform-chars' start columns). Stdlib only.
"""

import argparse
import array
import datetime
import glob
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
import wave


def host_line():
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def load_corpus(root, langs):
    utts = []
    for path in sorted(glob.glob(os.path.join(root, "*.json"))):
        if os.path.basename(path) == "manifest.json":
            continue
        name = path[:-5]
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        if langs and meta["lang"] not in langs:
            continue
        with open(name + ".txt", encoding="utf-8") as f:
            text = f.read()
        utts.append({"name": os.path.basename(name), "wav": name + ".wav", "txt": name + ".txt",
                     "text": text, **meta})
    return utts


def read_pcm(path):
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise ValueError(f"{path}: want mono 16-bit")
        sr = w.getframerate()
        pcm = array.array("h")
        pcm.frombytes(w.readframes(w.getnframes()))
    if sys.byteorder != "little":
        pcm.byteswap()
    return pcm, sr


def voiced_span_ms(pcm, sr, floor_db=40.0):
    """(first, last) ms of the 10 ms frames within floor_db of the loudest frame."""
    hop = max(1, sr // 100)
    energies = []
    for i in range(0, len(pcm), hop):
        fr = pcm[i:i + hop]
        energies.append(sum(map(int.__mul__, fr, fr)) / max(1, len(fr)))
    peak = max(energies) if energies else 0
    if peak <= 0:
        return 0.0, len(pcm) * 1000 / sr
    thr = peak * 10 ** (-floor_db / 10)
    loud = [k for k, e in enumerate(energies) if e >= thr]
    return loud[0] * hop * 1000 / sr, min(len(pcm), (loud[-1] + 1) * hop) * 1000 / sr


def anchor_words(utt, t0, t1):
    """Uniform-by-characters prediction over [t0, t1] ms, one word per truth word."""
    L = max(1, len(utt["text"]))
    span = t1 - t0
    return [{"char_start": w["char_start"], "char_end": w["char_end"],
             "start_ms": t0 + span * w["char_start"] / L, "end_ms": t0 + span * w["char_end"] / L}
            for w in utt["words"]]


def run_aligner(cmd, utt, first_chunk_ms, chunk_ms, timeout, prime=None):
    argv = shlex.split(cmd) + ["--wav", utt["wav"], "--text-file", utt["txt"],
                               "--first-chunk-ms", str(first_chunk_ms), "--chunk-ms", str(chunk_ms)]
    if prime is not None:
        argv += ["--prime-wav", prime["wav"], "--prime-text-file", prime["txt"]]
    t = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout} s", time.monotonic() - t
    except OSError as e:
        return None, str(e), time.monotonic() - t
    wall = time.monotonic() - t
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr.decode(errors='replace').strip()[-300:]}", wall
    try:
        words = json.loads(p.stdout)["words"]
        for w in words:
            int(w["char_start"]), int(w["char_end"]), float(w["start_ms"]), float(w.get("end_ms", "nan"))
    except (ValueError, KeyError, TypeError) as e:
        return None, f"bad output ({e}): {p.stdout[:200]!r}", wall
    return words, None, wall


def match(truth_words, pred_words):
    """For each truth word, the predicted word containing its first character (or None)."""
    preds = sorted(pred_words, key=lambda w: (int(w["char_start"]), int(w["char_end"])))
    out = []
    for tw in truth_words:
        c = tw["char_start"]
        hit = None
        for pw in preds:
            a, b = int(pw["char_start"]), int(pw["char_end"])
            if a <= c < max(b, a + 1):
                hit = pw
                break
        out.append(hit)
    return out


def pct(sorted_vals, q):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_vals:
        return None
    k = max(0, math.ceil(q / 100 * len(sorted_vals)) - 1)
    return sorted_vals[k]


def summary(errs):
    a = sorted(abs(e) for e in errs)
    s = sorted(errs)
    return {"n": len(a), "median": pct(a, 50), "p90": pct(a, 90), "max": a[-1] if a else None,
            "bias": pct(s, 50)}


class Tally:
    """Start and end errors per group (all, lang, rate, lang@rate)."""

    def __init__(self):
        self.groups = {}

    def _g(self, key):
        return self.groups.setdefault(key, {"words": 0, "missed": 0, "start": [], "end": []})

    def add(self, utt, truth_words, preds, start_ref):
        keys = ["all", utt["lang"], f"{utt['rate_wpm']}wpm", f"{utt['lang']}@{utt['rate_wpm']}"]
        for tw, pw in zip(truth_words, preds):
            for key in keys:
                g = self._g(key)
                g["words"] += 1
                if pw is None:
                    g["missed"] += 1
                    continue
                g["start"].append(float(pw["start_ms"]) - tw[start_ref])
                if "end_ms" in tw and pw.get("end_ms") is not None and not math.isnan(float(pw["end_ms"])):
                    g["end"].append(float(pw["end_ms"]) - tw["end_ms"])

    def add_failed(self, utt):
        self.add(utt, utt["words"], [None] * len(utt["words"]), "start_ms")

    def result(self, order):
        return {k: {"words": self.groups[k]["words"], "missed": self.groups[k]["missed"],
                    "start_ms": summary(self.groups[k]["start"]), "end_ms": summary(self.groups[k]["end"])}
                for k in order if k in self.groups}


def fmt(v):
    return "-" if v is None else f"{v:.0f}"


def print_table(name, res, groups, out):
    print(f"\n{name}", file=out)
    print(f"  {'':<8} {'':>6} {'':>5} | {'|start error| ms':<26} | {'|end error| ms':<24}", file=out)
    print(f"  {'group':<8} {'words':>6} {'miss':>5} | {'med':>5} {'p90':>5} {'max':>6} {'bias':>6} | "
          f"{'n':>5} {'med':>5} {'p90':>5} {'max':>6}", file=out)
    for g in groups:
        if g not in res:
            continue
        r = res[g]
        s, e = r["start_ms"], r["end_ms"]
        print(f"  {g:<8} {r['words']:>6} {r['missed']:>5} | {fmt(s['median']):>5} {fmt(s['p90']):>5} "
              f"{fmt(s['max']):>6} {fmt(s['bias']):>6} | {e['n']:>5} {fmt(e['median']):>5} "
              f"{fmt(e['p90']):>5} {fmt(e['max']):>6}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="target/timings-corpus")
    ap.add_argument("--aligner", default="target/release/examples/align",
                    help="command line of the aligner under test")
    ap.add_argument("--anchors-only", action="store_true", help="score only the two anchors")
    ap.add_argument("--first-chunk-ms", type=int, default=160)
    ap.add_argument("--chunk-ms", type=int, default=320)
    ap.add_argument("--start-ref", choices=["start", "onset"], default="start",
                    help="truth start: espeak's word event (start) or the word's first "
                         "non-silent sample after it (onset)")
    ap.add_argument("--langs", default="", help="comma list (default: all in the corpus)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per utterance")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--max-median-ms", type=float, default=0.0,
                    help="exit 1 if the aligner's overall median start error is above this")
    ap.add_argument("--max-p90-ms", type=float, default=0.0,
                    help="exit 1 if the aligner's overall p90 start error is above this")
    ap.add_argument("--warm", action="store_true",
                    help="prime the aligner with the previous utterance of the same language and rate "
                         "(--prime-wav/--prime-text-file): a context's later segments, not its first")
    args = ap.parse_args()
    start_ref = "start_ms" if args.start_ref == "start" else "onset_ms"

    utts = load_corpus(args.corpus, [x for x in args.langs.split(",") if x])
    if not utts:
        sys.exit(f"no corpus in {args.corpus}: build it with python3 tools/timings_truth.py --out {args.corpus}")
    manifest = {}
    mpath = os.path.join(args.corpus, "manifest.json")
    if os.path.exists(mpath):
        with open(mpath, encoding="utf-8") as f:
            manifest = json.load(f)
    present = {u["lang"] for u in utts}
    langs = [l for l in manifest.get("languages", []) if l in present]
    langs += sorted(present - set(langs))
    rates = sorted({u["rate_wpm"] for u in utts})
    groups = ["all"] + langs + [f"{r}wpm" for r in rates]
    all_groups = groups + [f"{l}@{r}" for l in langs for r in rates]
    n_words = sum(len(u["words"]) for u in utts)
    n_ends = sum(1 for u in utts for w in u["words"] if "end_ms" in w)
    audio_s = sum(u["duration_ms"] for u in utts) / 1000

    out = sys.stdout
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"host: {host_line()}", file=out)
    print(f"command: {shlex.join([sys.executable] + sys.argv)}", file=out)
    print(f"date: {date}", file=out)
    print(f"corpus: {args.corpus}: {len(utts)} utterances, {n_words} timed words ({n_ends} with ends), "
          f"{audio_s / 60:.1f} min, languages {','.join(langs)}, rates {','.join(map(str, rates))} wpm, "
          f"espeak-ng {manifest.get('espeak_ng', '?')}; truth start = {start_ref}", file=out)

    methods = {"uniform-chars": Tally(), "uniform-chars-voiced": Tally()}
    for u in utts:
        pcm, sr = read_pcm(u["wav"])
        dur = len(pcm) * 1000 / sr
        v0, v1 = voiced_span_ms(pcm, sr)
        for name, (t0, t1) in (("uniform-chars", (0.0, dur)), ("uniform-chars-voiced", (v0, v1))):
            preds = anchor_words(u, t0, t1)
            methods[name].add(u, u["words"], match(u["words"], preds), start_ref)

    run_info = None
    if not args.anchors_only:
        first = shlex.split(args.aligner)[0] if args.aligner.strip() else ""
        if not first or (os.sep in first and not os.path.exists(first)):
            sys.exit(f"aligner {first!r} not found: build it (cargo build --release -p tts-audio --example align), "
                     "pass --aligner \"CMD ...\", or --anchors-only")
        tally, failures, walls, mismatches = Tally(), [], 0.0, 0
        for i, u in enumerate(utts, 1):
            prime = None
            if args.warm:
                # The previous utterance of the same language and rate
                # (cyclically): the aligner has heard the voice before, as
                # a server context has after its first segment.
                same = [x for x in utts if x["lang"] == u["lang"] and x["rate_wpm"] == u["rate_wpm"]]
                prime = same[same.index(u) - 1] if len(same) > 1 else None
            words, err, wall = run_aligner(args.aligner, u, args.first_chunk_ms, args.chunk_ms, args.timeout, prime)
            walls += wall
            if words is None:
                failures.append({"utterance": u["name"], "error": err})
                tally.add_failed(u)
                continue
            for w in words:
                a, b = int(w["char_start"]), int(w["char_end"])
                if "text" in w and u["text"][a:b] != w["text"]:
                    mismatches += 1
            tally.add(u, u["words"], match(u["words"], words), start_ref)
            if i % 60 == 0:
                print(f"  ... {i}/{len(utts)} utterances", file=sys.stderr, flush=True)
        label = f"aligner: {args.aligner} (chunks {args.first_chunk_ms}/{args.chunk_ms} ms)"
        methods[label] = tally
        run_info = {"command": args.aligner, "first_chunk_ms": args.first_chunk_ms,
                    "chunk_ms": args.chunk_ms, "failed_utterances": failures,
                    "text_mismatches": mismatches, "wall_s": round(walls, 2),
                    "real_time_factor": round(walls / audio_s, 4) if audio_s else None}
        print(f"aligner run: {len(utts) - len(failures)}/{len(utts)} utterances ok, "
              f"{len(failures)} failed, {mismatches} words whose text is not text[char_start:char_end], "
              f"{walls:.1f} s wall for {audio_s:.0f} s of audio (incl. process start)", file=out)
        for f in failures[:5]:
            print(f"  failed {f['utterance']}: {f['error']}", file=out)

    results = {name: t.result(all_groups) for name, t in methods.items()}
    for name in methods:
        print_table(name, results[name], groups, out)

    status = 0
    if run_info is not None and "timings_fake_aligner" in args.aligner:
        # The fake is uniform-chars by construction: same starts, same table.
        fake = results[label]
        ref = results["uniform-chars"]
        same = all(fake[g]["missed"] == 0 and fake[g]["start_ms"]["n"] == ref[g]["start_ms"]["n"]
                   and all(abs(fake[g]["start_ms"][k] - ref[g]["start_ms"][k]) < 0.01
                           for k in ("median", "p90", "max", "bias"))
                   for g in fake)  # the fake rounds its times to 1 us
        print(f"\nself-check (fake aligner's starts equal uniform-chars' in every group): "
              f"{'ok' if same else 'FAILED'}", file=out)
        status = 0 if same else 1
    if run_info is not None and (args.max_median_ms or args.max_p90_ms):
        # A regression bound on the aligner's whole-corpus start error.
        s = results[label]["all"]["start_ms"]
        missed = results[label]["all"]["missed"]
        ok = missed == 0
        ok &= not args.max_median_ms or s["median"] <= args.max_median_ms
        ok &= not args.max_p90_ms or s["p90"] <= args.max_p90_ms
        print(f"\nbound (median <= {args.max_median_ms or '-'} ms, p90 <= {args.max_p90_ms or '-'} ms, "
              f"no word missed): {'ok' if ok else 'EXCEEDED'} "
              f"(median {fmt(s['median'])}, p90 {fmt(s['p90'])}, missed {missed})", file=out)
        if not ok:
            status = 1

    if args.json_out:
        doc = {"host": host_line(), "command": shlex.join([sys.executable] + sys.argv), "date": date,
               "corpus": {"path": args.corpus, "utterances": len(utts), "words": n_words, "ends": n_ends,
                          "audio_s": round(audio_s, 1), "languages": langs, "rates_wpm": rates,
                          "espeak_ng": manifest.get("espeak_ng")},
               "truth_start": start_ref, "aligner": run_info, "methods": results}
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"\njson: {args.json_out}", file=out)
    return status


if __name__ == "__main__":
    sys.exit(main())
