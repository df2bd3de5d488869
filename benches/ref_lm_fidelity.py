#!/usr/bin/env python3
"""What the official implementation's own reduced precision costs: the
official qwen-tts model in bf16 against the same model in f32, on the same
checkpoint, measured with exactly the metrics of tts-rt's LM fidelity gate
(tests/it/precision.rs): teacher-forced top-1 agreement, mean KL(f32 || low) and
mean f32 top-2 margin for codebook 0 (talker) and the predicted codebooks
(code predictor), and greedy per-frame survival.

Why: on random full-size weights the logits are nearly flat (top-2 margins of
~0.25 nats), so any arithmetic change flips near-ties. Whether tts-rt's int8
is "good enough" is best judged against what the official bf16 path — the
precision the official package runs by default — does to the same model.

Teacher forcing without touching the official code: forward hooks on
`talker.codec_head` and on every `talker.code_predictor.lm_head[j]` record
the raw logits of each row and then overwrite the row so that greedy decoding
picks the teacher's token. The teacher is made on the fly by the f32 model
(argmax of its raw logits; codebook 0 restricted to the 2048 codec ids so
that it never picks EOS or a control id) and replayed into the bf16 model.
Greedy survival runs both models unforced (greedy, EOS banned) and compares
their codes frame by frame. code2wav is skipped (not part of this gate).

Run in the reference venv (benches/requirements-ref.txt):
  python benches/ref_lm_fidelity.py --model DIR [--frames 60] [--threads 2]
Prints one summary line per arm in tests/it/precision.rs's format and a JSON
document (--json FILE).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

TEXTS = [
    # (text, non_streaming_mode): the cases of tests/it/precision.rs's
    # full_size_report (case 0: text in the prefill, case 1: streamed).
    ("The quick brown fox jumps over the lazy dog near the river bank today.", True),
    ("Hello world, this is a test.", False),
]


def log(msg: str) -> None:
    print(f"ref_lm_fidelity: {msg}", file=sys.stderr, flush=True)


class Forcer:
    """Hooks that record raw logits and force the teacher's tokens."""

    def __init__(self, model, frames: int, groups: int, codec_ids: int):
        self.frames, self.groups, self.codec_ids = frames, groups, codec_ids
        self.teacher = None  # [frames][groups] when replaying
        self.mode = "off"  # "make" | "replay" | "ban_eos"
        self.eos = model.config.talker_config.codec_eos_token_id
        self.handles = [model.talker.codec_head.register_forward_hook(self._c0)]
        for j, head in enumerate(model.talker.code_predictor.lm_head):
            self.handles.append(head.register_forward_hook(self._cp(j + 1)))
        self.reset()

    def reset(self):
        self.c0_calls = 0
        self.rows_c0: list = []  # per frame: raw f32 logits of codebook 0
        self.rows_cp: list = []  # per (frame, group>=1): raw f32 logits
        self.made = [[None] * self.groups for _ in range(self.frames)]

    def _force(self, out, tok):
        import torch

        row = out[..., -1, :]
        row.fill_(-math.inf)
        row[..., tok] = 0.0
        return out

    def _c0(self, _mod, _inp, out):
        f = self.c0_calls
        self.c0_calls += 1
        if self.mode == "ban_eos":
            out[..., self.eos] = -math.inf
            return out
        if self.mode == "off" or f >= self.frames:
            # The extra codebook-0 step after the last kept frame: any
            # non-EOS codec id.
            if self.mode != "off":
                out[..., -1, :] = -math.inf
                out[..., -1, 0] = 0.0
            return out
        raw = out[0, -1, :].float().detach().clone()
        self.rows_c0.append(raw)
        if self.mode == "make":
            tok = int(raw[: self.codec_ids].argmax())
            self.made[f][0] = tok
        else:
            tok = self.teacher[f][0]
        return self._force(out, tok)

    def _cp(self, g):
        def hook(_mod, _inp, out):
            f = self.c0_calls - 1
            if self.mode in ("off", "ban_eos") or f >= self.frames:
                return out
            raw = out[0, -1, :].float().detach().clone()
            self.rows_cp.append(raw)
            if self.mode == "make":
                tok = int(raw.argmax())
                self.made[f][g] = tok
            else:
                tok = self.teacher[f][g]
            return self._force(out, tok)

        return hook


def agreement(want, got):
    import torch

    rows = len(want)
    w = torch.stack(want).double()
    q = torch.stack(got).double()
    top1 = (w.argmax(-1) == q.argmax(-1)).sum().item()
    lp = torch.log_softmax(w, -1)
    lq = torch.log_softmax(q, -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    s = w.sort(-1, descending=True).values
    margin = (s[:, 0] - s[:, 1]).sum().item()
    return {"rows": rows, "top1_equal": top1, "kl_sum": kl.sum().item(), "margin_sum": margin}


def merge(a, b):
    return {k: a.get(k, 0) + b[k] for k in b}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--speaker", default=None)
    ap.add_argument("--low", default="bf16", choices=["bf16", "f16"])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    from qwen_tts import Qwen3TTSModel

    low_dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[a.low]
    models = {}
    for name, dt in (("f32", torch.float32), (a.low, low_dtype)):
        t = time.perf_counter()
        w = Qwen3TTSModel.from_pretrained(a.model, dtype=dt)
        w.model.eval()
        # code2wav is not part of this gate: skip it.
        w.model.speech_tokenizer.decode = lambda codes, **k: ([np.zeros(1, dtype=np.float32)], 24000)
        models[name] = w
        log(f"loaded {name} in {time.perf_counter() - t:.1f} s")
    cfg = models["f32"].model.config.talker_config
    groups = cfg.num_code_groups
    codec_ids = cfg.vocab_size - 1024
    speaker = a.speaker or sorted(models["f32"].get_supported_speakers() or ["ryan"])[0]
    forcers = {k: Forcer(w.model, a.frames, groups, codec_ids) for k, w in models.items()}

    def run(name, text, non_streaming, mode, teacher=None):
        fc = forcers[name]
        fc.reset()
        fc.mode, fc.teacher = mode, teacher
        captured = {}
        orig = models[name].model.generate

        def grab(*args, **kw):
            out = orig(*args, **kw)
            captured["codes"] = [c.tolist() for c in out[0][0]]
            return out

        models[name].model.generate = grab
        try:
            with torch.no_grad():
                models[name].generate_custom_voice(
                    text=text, speaker=speaker, language="auto", non_streaming_mode=non_streaming,
                    max_new_tokens=a.frames + 1, do_sample=False, subtalker_dosample=False,
                )
        finally:
            models[name].model.generate = orig
            fc.mode = "off"
        return fc, captured.get("codes")

    c0 = {}
    cp = {}
    surv = {"survived": 0, "diverged": 0, "prefix": []}
    low = a.low
    for i, (text, ns) in enumerate(TEXTS):
        t = time.perf_counter()
        fc, _ = run("f32", text, ns, "make")
        teacher = [row[:] for row in fc.made]
        want_c0, want_cp = list(fc.rows_c0), list(fc.rows_cp)
        assert len(want_c0) == a.frames and len(want_cp) == a.frames * (groups - 1), (len(want_c0), len(want_cp))
        fl, _ = run(low, text, ns, "replay", teacher)
        assert len(fl.rows_c0) == a.frames and len(fl.rows_cp) == len(want_cp)
        c0 = merge(c0, agreement(want_c0, fl.rows_c0))
        cp = merge(cp, agreement(want_cp, fl.rows_cp))
        # Greedy, unforced (EOS banned), each precision on its own path.
        _, gf = run("f32", text, ns, "ban_eos")
        _, gl = run(low, text, ns, "ban_eos")
        prefix = 0
        for x, y in zip(gf, gl):
            if x != y:
                break
            prefix += 1
        surv["survived"] += prefix
        surv["diverged"] += int(gf != gl)
        surv["prefix"].append([f"case{i}", prefix, len(gf)])
        log(f"case{i}: {time.perf_counter() - t:.1f} s")

    def fmt(x):
        return (x["top1_equal"] / x["rows"], x["kl_sum"] / x["rows"], x["margin_sum"] / x["rows"], x["rows"])

    a0, ap_ = fmt(c0), fmt(cp)
    survival = surv["survived"] / max(surv["survived"] + surv["diverged"], 1)
    print(
        f"{a.model} official {low} vs official f32 ({a.frames} frames/case): codebook0 top1 {a0[0]:.4f} meanKL {a0[1]:.2e} "
        f"(f32 margin {a0[2]:.3f}, {a0[3]} rows); predicted top1 {ap_[0]:.4f} meanKL {ap_[1]:.2e} (margin {ap_[2]:.3f}, "
        f"{ap_[3]} rows); greedy: per-frame survival {survival:.4f} ({surv['survived']} frames matched, "
        f"{surv['diverged']} divergences), matching frame prefix per case {surv['prefix']}"
    )
    doc = {
        "model": a.model, "frames": a.frames, "low": low, "speaker": speaker, "threads": a.threads,
        "codebook0": c0, "predicted": cp, "greedy": surv,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
