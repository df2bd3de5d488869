#!/usr/bin/env python3
"""Side-by-side benchmark helper: the official PyTorch arm and the summary.

Driven by benches/side_by_side.sh; two subcommands:

  run        load a hub-layout Qwen3-TTS CustomVoice checkpoint with the official
             `qwen-tts` package, synthesise exactly --frames codec frames, and print
             one JSON line of per-stage times on stdout.
  summarize  read the JSON lines of every pass of every arm (tts-rt's
             `speak --timings` lines and `run`'s lines, tagged by the shell script),
             print the comparison table and write the JSON report.

`summarize` needs only the standard library.

How the official arm is timed (`run`)
-------------------------------------
The official entry point `Qwen3TTSModel.generate_custom_voice` is called unchanged,
with the checkpoint's own generation defaults (sampling, top-k 50, temperature 0.9,
repetition penalty 1.05 for a gen-checkpoint checkpoint), seeded with torch.manual_seed.
Bound methods of the loaded modules are replaced on the instance by wrappers that
accumulate time.perf_counter() intervals and call the original (functools.wraps keeps
the signature, which transformers' generate() inspects):

  talker.forward                 one call per talker step; the call whose
                                 inputs_embeds has more than one row is the prefill
  talker.code_predictor.generate called from inside talker.forward on every decode
                                 step: the 15 code-predictor steps of one frame,
                                 including their own generate() loop and sampling
  talker.generate                the transformers generate() loop around the talker
  model.speech_tokenizer.decode  code2wav (the official 300/25 chunked decode)

  talker ms/step  = (talker.generate wall - prefill forward - code predictor) / decode steps
                    i.e. the talker's own forward plus the generate loop's logits
                    processors and sampling; tts-rt's talker step also includes its
                    sampling.
  loop overhead   = talker.generate wall - every talker.forward wall, reported apart too
  total           = wall time of the generate_custom_voice call (prompt build, prefill,
                    every step, code2wav, conversion to numpy)

Fixed frame count: a forward hook on talker.codec_head sets the codec EOS logit to -inf
(the same effect as tts-rt's --ignore-eos), and max_new_tokens = frames + 1, because the
official loop samples one more codebook-0 token after the last frame it keeps (tts-rt
skips that step). The driver asserts that exactly --frames frames came out.

One warm-up generation (--warmup-frames, default 4) runs before the timed one, so
first-call costs of torch/oneDNN are not counted against the official arm.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import statistics
import sys
import time


def log(msg: str) -> None:
    print(f"side_by_side_ref: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# run: the official arm
# --------------------------------------------------------------------------------------


class StageClock:
    """perf_counter accumulators around the official modules' methods."""

    def __init__(self, wrapper, eos: int):
        import torch

        self.model = wrapper.model
        talker = self.model.talker
        self.talker = talker
        self.reset()
        talker.forward = self._wrap(talker.forward, self._on_talker_forward)
        talker.code_predictor.generate = self._wrap(talker.code_predictor.generate, self._on_cp)
        talker.generate = self._wrap(talker.generate, self._on_talker_generate)
        st = self.model.speech_tokenizer
        st.decode = self._wrap(st.decode, self._on_decode)
        self.prompt_rows = None

        def ban_eos(_mod, _inp, out):
            out[..., eos] = -math.inf
            return out

        self.eos_hook = talker.codec_head.register_forward_hook(ban_eos)
        self._torch = torch

    def reset(self) -> None:
        self.prefill_ms = 0.0
        self.step_fwd_ms: list[float] = []  # decode-step talker.forward walls (CP included)
        self.step_cp_ms: list[float] = []  # code predictor wall inside each of those
        self.talker_generate_ms = 0.0
        self.decode_ms = 0.0
        self.prefill_calls = 0
        self._cp_acc = 0.0

    @staticmethod
    def _wrap(orig, on_done):
        @functools.wraps(orig)
        def timed(*args, **kwargs):
            before = on_done(None, args, kwargs)
            t = time.perf_counter()
            out = orig(*args, **kwargs)
            on_done((time.perf_counter() - t) * 1e3, args, kwargs, before)
            return out

        return timed

    def _on_talker_forward(self, ms, args, kwargs, before=None):
        emb = kwargs.get("inputs_embeds")
        prefill = emb is not None and emb.shape[1] > 1
        if ms is None:
            self._cp_acc = 0.0
            return prefill
        if before:
            self.prefill_ms += ms
            self.prefill_calls += 1
            self.prompt_rows = int(emb.shape[1])
        else:
            self.step_fwd_ms.append(ms)
            self.step_cp_ms.append(self._cp_acc)

    def _on_cp(self, ms, args, kwargs, before=None):
        if ms is not None:
            self._cp_acc += ms

    def _on_talker_generate(self, ms, args, kwargs, before=None):
        if ms is not None:
            self.talker_generate_ms += ms

    def _on_decode(self, ms, args, kwargs, before=None):
        if ms is not None:
            self.decode_ms += ms


def cmd_run(a: argparse.Namespace) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    warnings.filterwarnings("ignore")
    import importlib.metadata

    import numpy as np
    import torch

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import transformers

    transformers.logging.set_verbosity_error()
    from qwen_tts import Qwen3TTSModel

    dtype = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}[a.dtype]
    t = time.perf_counter()
    wrapper = Qwen3TTSModel.from_pretrained(a.model, dtype=dtype)
    wrapper.model.eval()
    load_ms = (time.perf_counter() - t) * 1e3
    tcfg = wrapper.model.config.talker_config
    eos = tcfg.codec_eos_token_id
    talker_dtype = str(next(wrapper.model.talker.parameters()).dtype).replace("torch.", "")
    c2w_dtype = str(next(wrapper.model.speech_tokenizer.model.parameters()).dtype).replace("torch.", "")
    clock = StageClock(wrapper, eos)

    def synth(frames: int, seed: int):
        torch.manual_seed(seed)
        clock.reset()
        c0, t0 = time.process_time(), time.perf_counter()
        wavs, sr = wrapper.generate_custom_voice(
            text=a.text, speaker=a.speaker, language=a.language, max_new_tokens=frames + 1,
        )
        total = (time.perf_counter() - t0) * 1e3
        return wavs, sr, total, (time.process_time() - c0) * 1e3

    if a.warmup_frames > 0:
        synth(a.warmup_frames, a.seed + 1000)
    wavs, sr, total_ms, cpu_ms = synth(a.frames, a.seed)
    wav = np.asarray(wavs[0])
    spf = int(wrapper.model.speech_tokenizer.get_decode_upsample_rate())
    frames = len(clock.step_cp_ms)
    if frames != a.frames or wav.size != a.frames * spf:
        raise SystemExit(f"expected {a.frames} frames / {a.frames * spf} samples, "
                         f"got {frames} code-predictor runs / {wav.size} samples")
    steps = len(clock.step_fwd_ms)  # decode steps: frames (the last one's token is dropped)
    cp_ms = sum(clock.step_cp_ms)
    fwd_ms = sum(clock.step_fwd_ms)
    talker_ms = clock.talker_generate_ms - clock.prefill_ms - cp_ms
    overhead_ms = clock.talker_generate_ms - clock.prefill_ms - fwd_ms
    frame_ms = 1000.0 * spf / sr
    line = {
        "arm_kind": "official",
        "frames": frames,
        "frame_ms": frame_ms,
        "prompt_rows": clock.prompt_rows,
        "prefill_ms": clock.prefill_ms,
        "talker_steps": steps,
        "talker_ms_per_frame": talker_ms / steps,
        "loop_overhead_ms_per_step": overhead_ms / steps,
        "code_predictor_ms_per_frame": cp_ms / frames,
        "code2wav_ms_per_frame": clock.decode_ms / frames,
        "total_ms": total_ms,
        "cpu_cores_busy": cpu_ms / total_ms,
        "prompt_and_rest_ms": total_ms - clock.talker_generate_ms - clock.decode_ms,
        "decode": "chunked-300/25 (official Qwen3TTSTokenizer.decode)",
        "finite": bool(np.isfinite(wav).all()),
        "precision": f"{a.dtype} (talker {talker_dtype}, code2wav {c2w_dtype})",
        "load_ms": load_ms,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "warmup_frames": a.warmup_frames,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "qwen_tts": importlib.metadata.version("qwen-tts"),
            "python": platform.python_version(),
        },
        "mkldnn": torch.backends.mkldnn.is_available(),
    }
    print(json.dumps(line), flush=True)


# --------------------------------------------------------------------------------------
# summarize
# --------------------------------------------------------------------------------------

STAGES = [
    # key, label, unit
    ("talker_ms_per_frame", "talker (ms/step)"),
    ("code_predictor_ms_per_frame", "code predictor (ms/frame)"),
    ("code2wav_ms_per_frame", "code2wav (ms/frame)"),
    ("prefill_ms", "prefill (ms, whole prompt)"),
    ("total_ms_per_frame", "total (ms/frame, wall)"),
    ("rtf", "rtf (total / audio)"),
    ("cpu_cores_busy", "cores busy (cpu time / wall)"),
]


def spread(v: list[float]) -> dict:
    s = sorted(v)
    return {"n": len(s), "median": statistics.median(s), "min": s[0], "max": s[-1], "values": v}


def fmt(st: dict | None) -> str:
    if st is None:
        return "missing"
    d = 2 if st["max"] < 10 else 1
    return f"{st['median']:.{d}f} ({st['min']:.{d}f}..{st['max']:.{d}f})"


def cmd_summarize(a: argparse.Namespace) -> None:
    meta = json.load(open(a.meta))
    rows = [json.loads(line) for line in open(a.runs) if line.strip()]
    arms: dict[str, list[dict]] = {}
    for r in rows:
        arms.setdefault(r["arm"], []).append(r)
    order = meta["arms"]
    for r in rows:
        r["total_ms_per_frame"] = r["total_ms"] / r["frames"]
        r["rtf"] = r["total_ms_per_frame"] / r["frame_ms"]
    stats: dict[str, dict] = {}
    for arm in order:
        rs = arms.get(arm, [])
        stats[arm] = {}
        for key, _ in STAGES:
            v = [r[key] for r in rs if r.get(key) is not None]
            stats[arm][key] = spread(v) if v else None

    official = [x for x in order if x.startswith("official:")]
    ours = [x for x in order if x.startswith("tts-rt:")]

    def ratio(o: str, t: str, key: str):
        so, sr = stats[o].get(key), stats[t].get(key)
        if not so or not sr:
            return None
        # Ranked only when the two min..max ranges do not overlap.
        ranked = so["min"] > sr["max"] or sr["min"] > so["max"]
        return {"official": o, "tts_rt": t, "ratio": so["median"] / sr["median"],
                "ratio_min": so["min"] / sr["max"], "ratio_max": so["max"] / sr["min"],
                "ranking": ranked}

    ratios = [dict(stage=key, **r) for o in official for t in ours for key, _ in STAGES
              if key not in ("rtf", "cpu_cores_busy") and (r := ratio(o, t, key)) is not None]

    # Headline: official bf16 (else the first official arm) vs the fastest tts-rt arm.
    head = None
    if official and ours:
        o = "official:bf16" if "official:bf16" in official else official[0]
        best = min(ours, key=lambda t: stats[t]["total_ms_per_frame"]["median"]
                   if stats[t]["total_ms_per_frame"] else math.inf)
        r = ratio(o, best, "total_ms_per_frame")
        if r:
            head = dict(r, target=meta["target_ratio"], met=r["ratio"] >= meta["target_ratio"]
                        and r["ratio_min"] >= meta["target_ratio"])

    w = 30
    out = []
    out.append("Side by side: tts-rt vs the official qwen-tts (PyTorch), same checkpoint, "
               f"same text, {meta['frames']} frames, {meta['passes']} interleaved passes (arm order rotated)")
    out.append("median (min..max) over passes; n per arm below")
    out.append(f"{'stage':<{w}}" + "".join(f"{arm:>26}" for arm in order))
    for key, label in STAGES:
        out.append(f"{label:<{w}}" + "".join(f"{fmt(stats[arm][key]):>26}" for arm in order))
    out.append(f"{'n (passes)':<{w}}" + "".join(f"{len(arms.get(arm, [])):>26}" for arm in order))
    lo = [statistics.median([r["loop_overhead_ms_per_step"] for r in arms.get(x, [])])
          for x in official if arms.get(x)]
    if lo:
        out.append("official talker includes the transformers generate loop: "
                   + ", ".join(f"{x} {v:.1f} ms/step" for x, v in zip(official, lo)))
    out.append("")
    out.append("ratio official / tts-rt (median; range = worst..best pairing of min/max)")
    for r in ratios:
        if r["stage"] not in ("total_ms_per_frame", "talker_ms_per_frame",
                              "code_predictor_ms_per_frame", "code2wav_ms_per_frame"):
            continue
        tag = "" if r["ranking"] else "   NOT A RANKING (ranges overlap)"
        out.append(f"  {r['official']:>14} / {r['tts_rt']:<16} {r['stage']:<30} "
                   f"{r['ratio']:5.2f}x ({r['ratio_min']:.2f}..{r['ratio_max']:.2f}){tag}")
    if head:
        out.append("")
        out.append(f"headline: {head['official']} / {head['tts_rt']} total per frame = "
                   f"{head['ratio']:.2f}x ({head['ratio_min']:.2f}..{head['ratio_max']:.2f}); "
                   f"target >= {head['target']:.0f}x: {'MET' if head['met'] else 'NOT MET'}"
                   + ("" if head["ranking"] else "  NOT A RANKING")
                   + ("  (fewer than 3 passes: not a result)" if meta["passes"] < 3 else "")
                   + ("  (BUSY machine: not conclusive)" if meta["provenance"]["busy"] else ""))
    out.append("")
    p = meta["provenance"]
    out.append(f"cpu {p['cpu']}; cpu flags {p['cpu_flags']}; cores {p['cores']}")
    out.append(f"load average before {p['load_before']} after {p['load_after']}"
               + ("   BUSY: 1-min load above 1.0 — contended, treat absolute times as upper bounds"
                  if p["busy"] else ""))
    out.append("cores busy = CPU time / wall (tts-rt: whole process; official: the timed generation); "
               f"well below {meta['threads']} means the arm was preempted by other load")
    out.append(f"git {p['git_commit']}{' (dirty tree)' if p['git_dirty'] else ''}; "
               f"threads {meta['threads']} (tts-rt RAYON_NUM_THREADS, torch set_num_threads)")
    for arm in order:
        rs = arms.get(arm, [])
        if not rs:
            out.append(f"{arm}: NO SUCCESSFUL RUNS")
            continue
        r = rs[0]
        desc = f"{arm}: precision {r['precision']}; isa {r['isa']}; threads {r['threads']}; " \
               f"prompt rows {r['prompt_rows']}; decode {r['decode']}"
        if r.get("versions"):
            desc += "; " + ", ".join(f"{k} {v}" for k, v in r["versions"].items())
            desc += f"; warm-up {r['warmup_frames']} frames untimed"
        out.append(desc)
    out.append(f"tts-rt binary: {p['built_from']}")
    rows_seen = {r["prompt_rows"] for r in rows}
    if len(rows_seen) > 1:
        out.append(f"WARNING: the arms saw different prompt lengths {sorted(rows_seen)}")
    out.append(f"model {meta['model']} ({meta['model_note']})")
    out.append(f"text {meta['text']!r}; speaker {meta['speaker']}; language {meta['language']}")
    out.append(f"rerun: {meta['rerun']}")
    print("\n".join(out))

    report = {"meta": meta, "stats": stats, "ratios": ratios, "headline": head, "runs": rows,
              "table": out}
    with open(a.json, "w") as f:
        json.dump(report, f, indent=1)
    print(f"json: {a.json}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time the official implementation once (one JSON line on stdout)")
    r.add_argument("--model", required=True)
    r.add_argument("--frames", type=int, required=True)
    r.add_argument("--dtype", choices=["bf16", "f32", "f16"], default="bf16")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--text", required=True)
    r.add_argument("--speaker", required=True)
    r.add_argument("--language", default="English")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--warmup-frames", type=int, default=4)
    s = sub.add_parser("summarize", help="table + JSON from the collected runs")
    s.add_argument("--runs", required=True, help="JSON lines, each with an 'arm' key")
    s.add_argument("--meta", required=True)
    s.add_argument("--json", required=True, help="report path")
    a = ap.parse_args()
    if a.cmd == "run":
        if a.frames < 1:
            raise SystemExit("--frames must be at least 1")
        cmd_run(a)
    else:
        cmd_summarize(a)


if __name__ == "__main__":
    main()
