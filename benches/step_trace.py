#!/usr/bin/env python3
"""Where an engine run's time went, from its per-step trace lines.

Run the engine with step tracing on, e.g.

    RUST_LOG=tts_actors=trace tts-rt bench --model Q06B_DIR --precision fast \
        --warmup 1 --greedy --lengths ten --concurrency 3 --repeats 2 \
        --frames 30 --json >run.json 2>run.log
    benches/step_trace.py run.log

and this prints, per stage and batch size, the steps' count and median
duration; and for the LM stages' steps of the largest batch, the median of
those that ran alone (no code2wav step overlapping them by more than 5%)
against those that overlapped one: what running the vocoder beside the LMs
costs them on the shared cores. Steps of code2wav shorter than 1 ms (a frame
taken into a pending chunk, no decode) are not counted as overlapping.

It also prints the medians of those lone steps by fifth of the run, in the
order they ran: over a long utterance the talker's step grows with its KV
history (docs/performance.md, "Attention over a long context"). Run one
round (`--warmup 0 --repeats 1`) for the fifths to be the utterance's.
"""
import re
import statistics
import sys

LINE = re.compile(r"step stage=(\w+) inputs=(\d+) .*start_us=(\d+) us=(\d+)")


def main(path):
    steps = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if m:
                steps.append((m[1], int(m[2]), int(m[3]), int(m[4])))
    if not steps:
        sys.exit(f"{path}: no step lines (run with RUST_LOG=tts_actors=trace)")
    t0 = min(s[2] for s in steps)
    t1 = max(s[2] + s[3] for s in steps)
    print(f"{len(steps)} steps over {(t1 - t0) / 1e3:.0f} ms")
    for stage in ("talker", "code_predictor", "code2wav"):
        by = {}
        for s in steps:
            # code2wav: only the steps that decoded (>= 1 ms).
            if s[0] == stage and (stage != "code2wav" or s[3] >= 1000):
                by.setdefault(s[1], []).append(s[3] / 1e3)
        cells = ", ".join(
            f"batch {b}: {len(v)} steps, median {statistics.median(v):.1f} ms"
            for b, v in sorted(by.items())
        )
        what = "decoding steps" if stage == "code2wav" else "steps"
        print(f"{stage} ({what}): {cells}")
    vocoder = [(s[2], s[2] + s[3]) for s in steps if s[0] == "code2wav" and s[3] >= 1000]

    def overlap(a, b):
        return sum(max(0, min(b, y) - max(a, x)) for x, y in vocoder)

    for stage in ("talker", "code_predictor"):
        mine = [s for s in steps if s[0] == stage]
        if not mine:
            continue
        top = max(s[1] for s in mine)
        alone, beside = [], []
        for s in mine:
            if s[1] != top or s[3] == 0:
                continue
            (beside if overlap(s[2], s[2] + s[3]) > 0.05 * s[3] else alone).append(s[3] / 1e3)

        def med(v):
            return f"{statistics.median(v):.1f} ms (n={len(v)})" if v else "none"

        print(f"{stage} batch {top}: alone {med(alone)}, beside a code2wav step {med(beside)}")
        if len(alone) >= 5:
            n = len(alone)
            fifths = [alone[i * n // 5 : (i + 1) * n // 5] for i in range(5)]
            cells = " / ".join(f"{statistics.median(v):.1f}" for v in fifths)
            print(f"{stage} batch {top} alone by fifth of the run: {cells} ms")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: step_trace.py TRACE_LOG")
    main(sys.argv[1])
