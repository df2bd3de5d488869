#!/usr/bin/env python3
"""Build the tiny Qwen3-TTS 12Hz golden fixtures used by the tts-rt tests.

What this writes (under --out, default tests/fixtures):

  tiny-a/   0.6B-style CustomVoice checkpoint in the exact hub layout, random weights
  tiny-b/   1.7B-style CustomVoice checkpoint: sharded talker, small_to_mtp_projection,
            4 code groups, 1024-entry codebooks, 960 samples/frame at 12 kHz
  tiny-base/, tiny-vd/ and their goldens (Base voice clone, VoiceDesign): built by
            tools/clone_fixtures.py, which this script calls after tiny-a/tiny-b
  goldens/<fixture>/cases.json          tokenizer ids + per-case metadata
  goldens/<fixture>/goldens.safetensors reference tensors produced by the official
                                         qwen-tts==0.1.1 package (see tools/README.md)

The numerical definition of "correct" is the official package: every golden is
produced by loading the written checkpoint directory back with
`qwen_tts.Qwen3TTSModel.from_pretrained(dir, dtype=torch.float32)` and calling
`generate_custom_voice(...)` end to end, with forward hooks recording the
intermediate tensors. The only thing we override is the text tokenizer's
pre-tokenizer regex (see `standard_tokenizer`), because the official local-dir
load swaps in the "fixed Mistral" regex while a load by hub id keeps the standard
Qwen2 one.

Deterministic: fixed seeds, single-threaded torch, pinned package versions.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import importlib.metadata
import json
import math
import os
import shutil
import subprocess
import sys
import time
import unicodedata
import warnings
import zipfile
from pathlib import Path

import numpy as np
import regex
import torch
from safetensors.torch import save_file

warnings.filterwarnings("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import transformers  # noqa: E402

transformers.logging.set_verbosity_error()

from tokenizers import Regex, pre_tokenizers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from qwen_tts import Qwen3TTSModel  # noqa: E402
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration  # noqa: E402
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    Qwen3TTSTokenizerV2Config,
)
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    EuclideanCodebook,
    Qwen3TTSTokenizerV2ConvNeXtBlock,
    Qwen3TTSTokenizerV2DecoderLayerScale,
    Qwen3TTSTokenizerV2Model,
    SnakeBeta,
)

# --------------------------------------------------------------------------------------
# Pinned inputs
# --------------------------------------------------------------------------------------

# The Qwen BPE ranks (151643 regular tokens) ship inside the dashscope wheel.
DASHSCOPE_VERSION = "2.0.2"
QWEN_TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
NUM_REGULAR_TOKENS = 151643
# Byte sizes of the real hub files; our reconstruction reproduces both exactly.
REAL_VOCAB_JSON_BYTES = 2_776_833
REAL_MERGES_TXT_BYTES = 1_671_839

# Standard Qwen2 pre-tokenizer regex (what a load by hub id uses).
STANDARD_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# What transformers 4.57.3 `_patch_mistral_regex` installs for a local dir (reference only).
MISTRAL_FIXED_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Added tokens (Qwen3 base list + the Qwen3-Omni audio/TTS tokens). 151669/151670/151675
# are not read by qwen-tts; their names follow the Qwen3-Omni tokenizer.
ADDED_TOKENS = [
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
    (151669, "<|audio_start|>", True),
    (151670, "<|audio_end|>", True),
    (151671, "<tts_pad>", True),
    (151672, "<tts_text_bos>", True),
    (151673, "<tts_text_eod>", True),
    (151674, "<tts_text_bos_single>", True),
    (151675, "<|audio_pad|>", True),
]

# generation_config.json of the real checkpoints: json.dumps(indent=2), 245 bytes.
GENERATION_CONFIG = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_p": 1.0,
    "subtalker_top_k": 50,
    "max_new_tokens": 8192,
}

# Real codec ids (talker vocab 3072 = 2048 codes + 1024 control/speaker ids).
REAL_LANGUAGE_IDS = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
    "beijing_dialect": 2074,
    "sichuan_dialect": 2062,
}
REAL_SPEAKER_IDS = {
    "serena": 3066,
    "vivian": 3065,
    "uncle_fu": 3010,
    "ryan": 3061,
    "aiden": 2861,
    "ono_anna": 2873,
    "sohee": 2864,
    "eric": 2875,
    "dylan": 2878,
}
REAL_DIALECT = {"eric": "sichuan_dialect", "dylan": "beijing_dialect"}
REAL_CODEC_SPECIAL = {
    "codec_pad_id": 2148,
    "codec_bos_id": 2149,
    "codec_eos_token_id": 2150,
    "codec_think_id": 2154,
    "codec_nothink_id": 2155,
    "codec_think_bos_id": 2156,
    "codec_think_eos_id": 2157,
}

TOKENIZER_TEXTS = [
    "Hello, world! This is a test.",
    "你好，世界！今天天气很好。",
    "こんにちは、世界。カタカナとひらがな。",
    "HelloWorld camelCaseIdentifier XMLHttpRequest",
    "12345 and 3.14159, 1,000,000",
    "Punctuation!!! ... ??? -- (parens) [brackets] {braces} @#$%^&*",
    "Emoji: 😀👍🏽🇨🇳 ❤️",
    "line one\nline two\r\n\n\ttabbed\n",
    "   leading spaces and trailing   ",
    "don't I'll we've they're she's IT'S DON'T",
    "हिन्दी में नमस्ते, क्षत्रिय",
    "before <|im_end|> after <tts_pad>",
    "Mixed 中文 and English, 1984年。",
]


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(msg, flush=True)


def write_json(path: Path, obj, *, indent=2, newline=True, ensure_ascii=False, sort_keys=False) -> None:
    text = json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)
    if newline:
        text += "\n"
    path.write_text(text, encoding="utf-8")


def round_bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# Text vocabulary: qwen.tiktoken -> vocab.json + merges.txt
# --------------------------------------------------------------------------------------


def fetch_qwen_tiktoken(cache: Path) -> Path:
    """Return the path of qwen.tiktoken, downloading the pinned dashscope wheel if needed."""
    override = os.environ.get("TTS_RT_QWEN_TIKTOKEN")
    target = Path(override) if override else cache / "qwen.tiktoken"
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        wheels = sorted(cache.glob(f"dashscope-{DASHSCOPE_VERSION}-*.whl"))
        if not wheels:
            log(f"downloading dashscope=={DASHSCOPE_VERSION} wheel (for qwen.tiktoken)")
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 f"dashscope=={DASHSCOPE_VERSION}", "-d", str(cache)],
                check=True,
            )
            wheels = sorted(cache.glob(f"dashscope-{DASHSCOPE_VERSION}-*.whl"))
        with zipfile.ZipFile(wheels[0]) as z:
            target.write_bytes(z.read("dashscope/resources/qwen.tiktoken"))
    digest = sha256_file(target)
    if digest != QWEN_TIKTOKEN_SHA256:
        raise SystemExit(f"qwen.tiktoken sha256 mismatch: {digest} (expected {QWEN_TIKTOKEN_SHA256})")
    return target


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2 byte -> printable unicode char mapping used by byte-level BPE vocab files."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class RankBPE:
    """Plain tiktoken-style BPE over byte ranks; the independent reference for verification."""

    def __init__(self, ranks: dict[bytes, int]):
        self.ranks = ranks
        self.cache: dict[bytes, list[int]] = {}

    def merge(self, piece: bytes, max_rank: int | None = None) -> list[bytes]:
        parts = [bytes([b]) for b in piece]
        while len(parts) > 1:
            best, best_i = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get(parts[i] + parts[i + 1])
                if r is not None and (max_rank is None or r < max_rank) and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            parts = parts[:best_i] + [parts[best_i] + parts[best_i + 1]] + parts[best_i + 2:]
        return parts

    def encode(self, text: str, pattern: str) -> list[int]:
        """Added tokens are matched on the raw text first (all have normalized=false), the
        pieces between them go through NFC + regex + BPE; mirrors the HF added-token split."""
        specials = sorted((c for _, c, _ in ADDED_TOKENS), key=len, reverse=True)
        ids_of = {c: i for i, c, _ in ADDED_TOKENS}
        out: list[int] = []
        pos = 0
        for m in regex.finditer("|".join(regex.escape(c) for c in specials), text):
            out.extend(self.encode_ordinary(text[pos:m.start()], pattern))
            out.append(ids_of[m.group()])
            pos = m.end()
        out.extend(self.encode_ordinary(text[pos:], pattern))
        return out

    def encode_ordinary(self, text: str, pattern: str) -> list[int]:
        out: list[int] = []
        for m in regex.finditer(pattern, unicodedata.normalize("NFC", text)):
            piece = m.group().encode("utf-8")
            ids = self.cache.get(piece)
            if ids is None:
                ids = [self.ranks[p] for p in self.merge(piece)]
                self.cache[piece] = ids
            out.extend(ids)
        return out


def build_vocab_and_merges(tiktoken_path: Path) -> tuple[bytes, bytes, dict[bytes, int]]:
    ranks: dict[bytes, int] = {}
    for line in tiktoken_path.read_bytes().splitlines():
        if not line:
            continue
        tok, rank = line.split()
        ranks[base64.b64decode(tok)] = int(rank)
    assert len(ranks) == NUM_REGULAR_TOKENS and sorted(ranks.values()) == list(range(NUM_REGULAR_TOKENS))
    b2u = bytes_to_unicode()

    def to_str(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    bpe = RankBPE(ranks)
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        # The merge that creates `tok` is the last step of BPE over its own bytes when
        # only lower-ranked merges are allowed: that leaves exactly two parts.
        parts = bpe.merge(tok, max_rank=rank)
        if len(parts) != 2:
            raise SystemExit(f"token rank {rank} is not reachable by a single merge: {parts}")
        merges.append(f"{to_str(parts[0])} {to_str(parts[1])}\n")
    vocab = {to_str(tok): rank for tok, rank in ranks.items()}
    vocab_bytes = json.dumps(vocab, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    merges_bytes = "".join(merges).encode("utf-8")
    assert len(vocab_bytes) == REAL_VOCAB_JSON_BYTES, len(vocab_bytes)
    assert len(merges_bytes) == REAL_MERGES_TXT_BYTES, len(merges_bytes)
    return vocab_bytes, merges_bytes, ranks


def tokenizer_config() -> dict:
    decoder = {}
    for idx, content, special in ADDED_TOKENS:
        decoder[str(idx)] = {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
    additional = [c for i, c, s in ADDED_TOKENS if s and c != "<|endoftext|>"]
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": additional,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "extra_special_tokens": {},
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "processor_class": "Qwen3TTSProcessor",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def pre_tokenizer_pattern(tok) -> str | None:
    state = json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]
    seq = state.get("pretokenizers", [state])
    for p in seq:
        if p.get("type") == "Split":
            return p["pattern"].get("Regex")
    return None


def set_pre_tokenizer(tok, pattern: str) -> None:
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )


def standard_tokenizer(model_dir: Path):
    """The Qwen2 fast tokenizer from vocab.json/merges.txt with the STANDARD regex, verified."""
    tok = AutoTokenizer.from_pretrained(str(model_dir))  # no fix_mistral_regex: never patched
    if pre_tokenizer_pattern(tok) != STANDARD_QWEN2_REGEX:
        set_pre_tokenizer(tok, STANDARD_QWEN2_REGEX)
    assert pre_tokenizer_pattern(tok) == STANDARD_QWEN2_REGEX
    pieces = [p for p, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str("HelloWorld")]
    assert pieces == ["HelloWorld"], pieces  # the standard regex keeps it one pre-token
    return tok


def verify_tokenizer(tok, ranks: dict[bytes, int], corpus: list[str]) -> int:
    """Compare HF tokenization with an independent rank-BPE over the same regex."""
    bpe = RankBPE(ranks)
    n = 0
    for text in corpus:
        want = bpe.encode(text, STANDARD_QWEN2_REGEX)
        got = tok(text, add_special_tokens=False)["input_ids"]
        if want != got:
            raise SystemExit(f"tokenizer mismatch on {text[:80]!r}:\n  hf  {got[:40]}\n  bpe {want[:40]}")
        n += len(got)
    return n


def verification_corpus(seed: int) -> list[str]:
    """Varied text: package sources (code + Chinese comments), docs, and random multi-script strings."""
    texts = list(TOKENIZER_TEXTS)
    roots = [Path(__import__("qwen_tts").__file__).parent, Path(transformers.__file__).parent / "models" / "qwen2"]
    for root in roots:
        for p in sorted(root.rglob("*.py")):
            t = p.read_text(encoding="utf-8", errors="ignore")
            texts.extend(t[i:i + 4000] for i in range(0, len(t), 4000))
    rng = np.random.default_rng(seed)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
              (0xE00, 0xE7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1F6FF)]
    for _ in range(400):
        chars = []
        for _ in range(int(rng.integers(1, 60))):
            lo, hi = ranges[int(rng.integers(len(ranges)))]
            c = chr(int(rng.integers(lo, hi + 1)))
            chars.append(c if rng.random() > 0.15 else " \n\t'"[int(rng.integers(4))])
        texts.append("".join(chars))
    return texts


# --------------------------------------------------------------------------------------
# Fixture configurations
# --------------------------------------------------------------------------------------


def shifted(d: dict, delta: int) -> dict:
    return {k: v + delta for k, v in d.items()}


def fixture_specs() -> list[dict]:
    a_speakers = ["ryan", "serena", "eric", "dylan"]
    b_speakers = ["aiden", "vivian", "dylan"]
    # tiny-b: codec vocab 2048 = 1024 codes + 1024 control ids; every real control id
    # moves down by 1024 so `suppress_tokens = range(vocab-1024, vocab)` still covers them.
    b_shift = -1024
    return [
        dict(
            name="tiny-a",
            seed=1234,
            size="0b6",
            talker=dict(hidden_size=32, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, mrope_section=[4, 2, 2], text_hidden_size=12,
                        num_code_groups=8, vocab_size=3072),
            cp=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, vocab_size=2048),
            codec_special=dict(REAL_CODEC_SPECIAL),
            languages=dict(REAL_LANGUAGE_IDS),
            speakers={s: REAL_SPEAKER_IDS[s] for s in a_speakers},
            dialect={s: REAL_DIALECT.get(s, False) for s in a_speakers},
            eos_gain=1.6,
            shards=1,
            st=dict(sample_rate=24000, samples_per_frame=1920, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2],
                    codebook_size=2048, codebook_dim=8, latent_dim=64, decoder_dim=64, hidden_size=32,
                    intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                    head_dim=16, enc_ratios=[8, 6, 5, 4]),
            cases=[
                dict(name="en_ryan", text="Hello world.", speaker="ryan", language="English",
                     instruct=None, non_streaming_mode=True, max_new_tokens=24),
                dict(name="zh_eric_dialect", text="你好，世界！今天天气很好。", speaker="eric", language="Chinese",
                     instruct=None, non_streaming_mode=True, max_new_tokens=12),
                dict(name="auto_serena_streaming", text="Streaming text mode, HelloWorld 123.", speaker="serena",
                     language="Auto", instruct=None, non_streaming_mode=False, max_new_tokens=24),
                dict(name="auto_dylan_dialect", text="北京话，一二三。", speaker="Dylan", language="auto",
                     instruct=None, non_streaming_mode=True, max_new_tokens=8),
                dict(name="en_serena_instruct_ignored", text="Instruct is dropped for 0b6.", speaker="serena",
                     language="english", instruct="Speak very fast.", non_streaming_mode=True, max_new_tokens=8),
            ],
        ),
        dict(
            name="tiny-b",
            seed=5678,
            size="1b7",
            talker=dict(hidden_size=48, intermediate_size=112, num_hidden_layers=2, num_attention_heads=8,
                        num_key_value_heads=2, head_dim=8, mrope_section=[2, 1, 1], text_hidden_size=8,
                        num_code_groups=4, vocab_size=2048),
            cp=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=1, head_dim=16, vocab_size=1024),
            codec_special=shifted(REAL_CODEC_SPECIAL, b_shift),
            languages=shifted(REAL_LANGUAGE_IDS, b_shift),
            speakers={s: REAL_SPEAKER_IDS[s] + b_shift for s in b_speakers},
            dialect={s: REAL_DIALECT.get(s, False) for s in b_speakers},
            eos_gain=1.4,
            shards=2,
            st=dict(sample_rate=12000, samples_per_frame=960, upsample_rates=[6, 5, 4, 2], upsampling_ratios=[2, 2],
                    codebook_size=1024, codebook_dim=12, latent_dim=48, decoder_dim=64, hidden_size=24,
                    intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=8, enc_ratios=[8, 6, 5, 2]),
            cases=[
                dict(name="instruct_en_aiden", text="Please read this sentence calmly.", speaker="aiden",
                     language="English", instruct="Speak slowly, in a calm and warm voice.",
                     non_streaming_mode=True, max_new_tokens=40),
                dict(name="zh_dylan_no_instruct", text="今天是星期五，我们去公园吧。", speaker="dylan",
                     language="Chinese", instruct=None, non_streaming_mode=True, max_new_tokens=20),
                dict(name="instruct_streaming_vivian", text="Streaming prompt with an instruction.",
                     speaker="vivian", language="Auto", instruct="Cheerful, high pitch.",
                     non_streaming_mode=False, max_new_tokens=40),
            ],
        ),
    ]


def main_config(spec: dict) -> dict:
    t, cp = spec["talker"], spec["cp"]
    talker_config = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "code_predictor_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "head_dim": cp["head_dim"],
            "hidden_act": "silu",
            "hidden_size": cp["hidden_size"],
            "initializer_range": 0.02,
            "intermediate_size": cp["intermediate_size"],
            "layer_types": ["full_attention"] * cp["num_hidden_layers"],
            "max_position_embeddings": 65536,
            "max_window_layers": 28,
            "model_type": "qwen3_tts_talker_code_predictor",
            "num_attention_heads": cp["num_attention_heads"],
            "num_code_groups": t["num_code_groups"],
            "num_hidden_layers": cp["num_hidden_layers"],
            "num_key_value_heads": cp["num_key_value_heads"],
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 1000000,
            "sliding_window": None,
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": cp["vocab_size"],
        },
        **spec["codec_special"],
        "codec_language_id": spec["languages"],
        "head_dim": t["head_dim"],
        "hidden_act": "silu",
        "hidden_size": t["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": t["intermediate_size"],
        "max_position_embeddings": 32768,
        "model_type": "qwen3_tts_talker",
        "num_attention_heads": t["num_attention_heads"],
        "num_code_groups": t["num_code_groups"],
        "num_hidden_layers": t["num_hidden_layers"],
        "num_key_value_heads": t["num_key_value_heads"],
        "position_id_per_seconds": 13,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"interleaved": True, "mrope_section": t["mrope_section"], "rope_type": "default"},
        "rope_theta": 1000000,
        "sliding_window": None,
        "spk_id": spec["speakers"],
        "spk_is_dialect": spec["dialect"],
        "text_hidden_size": t["text_hidden_size"],
        "text_vocab_size": 151936,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": t["vocab_size"],
    }
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "assistant_token_id": 77091,
        "dtype": "bfloat16",
        "im_end_token_id": 151645,
        "im_start_token_id": 151644,
        "model_type": "qwen3_tts",
        "speaker_encoder_config": {"enc_dim": t["hidden_size"], "sample_rate": 24000},
        "talker_config": talker_config,
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "transformers_version": transformers.__version__,
        "tts_bos_token_id": 151672,
        "tts_eos_token_id": 151673,
        "tts_model_size": spec["size"],
        "tts_model_type": "custom_voice",
        "tts_pad_token_id": 151671,
    }


def speech_tokenizer_config(spec: dict) -> dict:
    st, g = spec["st"], spec["talker"]["num_code_groups"]
    assert math.prod(st["upsample_rates"] + st["upsampling_ratios"]) == st["samples_per_frame"]
    encoder_config = {
        "audio_channels": 1,
        "codebook_dim": 2,
        "codebook_size": st["codebook_size"],
        "compress": 2,
        "dilation_growth_rate": 2,
        "frame_rate": 12.5,
        "head_dim": 8,
        "hidden_act": "gelu",
        "hidden_size": 16,
        "intermediate_size": 32,
        "kernel_size": 7,
        "last_kernel_size": 3,
        "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000,
        "model_type": "mimi",
        "norm_eps": 1e-05,
        "num_attention_heads": 2,
        "num_filters": 2,
        "num_hidden_layers": 1,
        "num_key_value_heads": 4,
        "num_quantizers": g,
        "num_residual_layers": 1,
        "num_semantic_quantizers": 1,
        "pad_mode": "constant",
        "residual_kernel_size": 3,
        "rope_theta": 10000.0,
        "sampling_rate": st["sample_rate"],
        "sliding_window": 250,
        "trim_right_ratio": 1.0,
        "upsample_groups": 16,
        "upsampling_ratios": st["enc_ratios"],
        "use_cache": False,
        "use_causal_conv": True,
        "use_conv_shortcut": False,
        "use_streaming": False,
        "vector_quantization_hidden_dimension": 2,
    }
    decoder_config = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "codebook_dim": st["codebook_dim"],
        "codebook_size": st["codebook_size"],
        "decoder_dim": st["decoder_dim"],
        "head_dim": st["head_dim"],
        "hidden_act": "silu",
        "hidden_size": st["hidden_size"],
        "intermediate_size": st["intermediate_size"],
        "latent_dim": st["latent_dim"],
        "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000,
        "num_attention_heads": st["num_attention_heads"],
        "num_hidden_layers": st["num_hidden_layers"],
        "num_key_value_heads": st["num_key_value_heads"],
        "num_quantizers": g,
        "num_semantic_quantizers": 1,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000,
        "sliding_window": 72,
        "upsample_rates": st["upsample_rates"],
        "upsampling_ratios": st["upsampling_ratios"],
        "vector_quantization_hidden_dimension": st["codebook_dim"],
    }
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "decode_upsample_rate": st["samples_per_frame"],
        "decoder_config": decoder_config,
        "dtype": "float32",
        "encode_downsample_rate": st["samples_per_frame"],
        "encoder_config": encoder_config,
        "encoder_valid_num_quantizers": g,
        "input_sample_rate": st["sample_rate"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "output_sample_rate": st["sample_rate"],
        "transformers_version": transformers.__version__,
    }


# --------------------------------------------------------------------------------------
# Random weights. Every tensor is set explicitly (default init makes the codec constant).
# --------------------------------------------------------------------------------------


class Init:
    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)
        self.done: set[int] = set()

    def normal(self, p: torch.Tensor, std: float, mean: float = 0.0) -> None:
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=self.g) * std + mean)
        self.done.add(id(p))

    def uniform(self, p: torch.Tensor, lo: float, hi: float) -> None:
        with torch.no_grad():
            p.copy_(torch.rand(p.shape, generator=self.g) * (hi - lo) + lo)
        self.done.add(id(p))


def init_module_tree(root: torch.nn.Module, init: Init, *, emb_std: float = 1.0, res_gain: float = 1.0) -> None:
    nn = torch.nn
    for name, m in root.named_modules():
        cls = type(m).__name__
        if isinstance(m, nn.Linear):
            init.normal(m.weight, 1.0 / math.sqrt(m.in_features))
            if m.bias is not None:
                init.normal(m.bias, 0.05)
        elif isinstance(m, nn.Embedding):
            init.normal(m.weight, emb_std)
        elif isinstance(m, nn.ConvTranspose1d):
            cin, _, k = m.weight.shape
            init.normal(m.weight, 1.0 / math.sqrt(cin * k / m.stride[0]))
            if m.bias is not None:
                init.normal(m.bias, 0.05)
        elif isinstance(m, nn.Conv1d):
            _, cin_g, k = m.weight.shape
            gain = res_gain if (".conv1.conv" in name + "." or ".conv2.conv" in name + ".") else 1.0
            init.normal(m.weight, gain / math.sqrt(cin_g * k))
            if m.bias is not None:
                init.normal(m.bias, 0.05)
        elif isinstance(m, nn.LayerNorm):
            init.uniform(m.weight, 0.8, 1.2)
            init.normal(m.bias, 0.05)
        elif cls.endswith("RMSNorm"):
            init.uniform(m.weight, 0.8, 1.2)
        elif isinstance(m, SnakeBeta):
            init.uniform(m.alpha, -0.5, 0.5)  # log-scale frequency
            init.uniform(m.beta, -0.2, 0.6)  # log-scale: magnitude 1/exp(beta)
        elif isinstance(m, Qwen3TTSTokenizerV2DecoderLayerScale) or cls == "MimiLayerScale":
            init.uniform(m.scale, 0.1, 1.0)
        elif isinstance(m, Qwen3TTSTokenizerV2ConvNeXtBlock):
            init.uniform(m.gamma, 0.1, 0.5)
        elif isinstance(m, EuclideanCodebook):
            init.normal(m.embedding_sum, 1.0)
            init.uniform(m.cluster_usage, 0.5, 2.0)
        elif cls == "MimiEuclideanCodebook":
            init.normal(m.embed_sum, 1.0)
            init.uniform(m.cluster_usage, 0.5, 2.0)
            init.done.add(id(m.initialized))  # stays 1.0 (a flag, not a weight)


def check_all_initialised(root: torch.nn.Module, init: Init) -> None:
    missing = [k for k, v in root.state_dict(keep_vars=True).items() if id(v) not in init.done]
    if missing:
        raise SystemExit(f"tensors left at default init: {missing[:20]} (+{max(0, len(missing) - 20)})")


def build_talker_weights(spec: dict, cfg: Qwen3TTSConfig) -> dict[str, torch.Tensor]:
    torch.manual_seed(spec["seed"])
    model = Qwen3TTSForConditionalGeneration(cfg)
    init = Init(spec["seed"])
    init_module_tree(model, init)
    # Codec head: logits ~ N(0,1) per id; the EOS row gets a larger norm so that greedy
    # decoding sometimes (not always) stops before max_new_tokens.
    eos = cfg.talker_config.codec_eos_token_id
    with torch.no_grad():
        model.talker.codec_head.weight[eos] *= spec["eos_gain"]
    check_all_initialised(model, init)
    sd = model.state_dict()
    assert all(k.startswith("talker.") for k in sd), [k for k in sd if not k.startswith("talker.")]
    return {k: round_bf16(v).contiguous() for k, v in sd.items()}


def build_speech_tokenizer_weights(spec: dict, cfg: Qwen3TTSTokenizerV2Config) -> dict[str, torch.Tensor]:
    torch.manual_seed(spec["seed"] + 1)
    model = Qwen3TTSTokenizerV2Model(cfg).eval()
    init = Init(spec["seed"] + 1)
    init_module_tree(model, init, res_gain=0.5)
    check_all_initialised(model, init)
    calibrate_decoder_output(model, spec)
    return {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}


@torch.no_grad()
def calibrate_decoder_output(model: Qwen3TTSTokenizerV2Model, spec: dict) -> None:
    """Rescale the final conv so the pre-clamp waveform has mean 0 and RMS 0.25."""
    dec = model.decoder
    g = torch.Generator().manual_seed(spec["seed"] + 2)
    codes = torch.randint(0, spec["st"]["codebook_size"], (1, spec["talker"]["num_code_groups"], 64), generator=g)
    captured = {}
    hook = dec.decoder[-1].register_forward_hook(lambda m, i, o: captured.setdefault("y", o.detach().clone()))
    dec(codes)
    hook.remove()
    y = captured["y"]
    mean, std = y.mean().item(), y.std().item()
    conv = dec.decoder[-1].conv
    s = 0.25 / std
    conv.weight.mul_(s)
    conv.bias.copy_((conv.bias - mean) * s)


def save_safetensors_sharded(sd: dict[str, torch.Tensor], out_dir: Path, shards: int) -> None:
    meta = {"format": "pt"}
    if shards == 1:
        save_file(sd, str(out_dir / "model.safetensors"), metadata=meta)
        return
    keys = sorted(sd)
    per = math.ceil(len(keys) / shards)
    weight_map = {}
    total = 0
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: sd[k] for k in keys[i * per:(i + 1) * per]}
        save_file(part, str(out_dir / fname), metadata=meta)
        for k, v in part.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    write_json(out_dir / "model.safetensors.index.json",
               {"metadata": {"total_size": total}, "weight_map": weight_map}, sort_keys=True)


def write_checkpoint(spec: dict, out: Path, vocab_bytes: bytes, merges_bytes: bytes) -> None:
    d = out / spec["name"]
    if d.exists():
        shutil.rmtree(d)
    (d / "speech_tokenizer").mkdir(parents=True)

    cfg_dict = main_config(spec)
    write_json(d / "config.json", cfg_dict)
    (d / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2), encoding="utf-8")
    assert (d / "generation_config.json").stat().st_size == 245
    (d / "vocab.json").write_bytes(vocab_bytes)
    (d / "merges.txt").write_bytes(merges_bytes)
    write_json(d / "tokenizer_config.json", tokenizer_config())
    # 127 bytes, like the real file.
    (d / "preprocessor_config.json").write_text(
        json.dumps({"padding_side": "left", "padding_value": 0.0, "processor_class": "Qwen3TTSProcessor",
                    "return_attention_mask": True}, indent=2), encoding="utf-8")

    talker_sd = build_talker_weights(spec, Qwen3TTSConfig(**copy.deepcopy(cfg_dict)))
    save_safetensors_sharded(talker_sd, d, spec["shards"])

    st_dict = speech_tokenizer_config(spec)
    write_json(d / "speech_tokenizer" / "config.json", st_dict)
    write_json(d / "speech_tokenizer" / "preprocessor_config.json", {
        "chunk_length_s": None,
        "feature_extractor_type": "EncodecFeatureExtractor",
        "feature_size": 1,
        "overlap": None,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": True,
        "sampling_rate": spec["st"]["sample_rate"],
    })
    st_sd = build_speech_tokenizer_weights(spec, Qwen3TTSTokenizerV2Config(**copy.deepcopy(st_dict)))
    save_file(st_sd, str(d / "speech_tokenizer" / "model.safetensors"), metadata={"format": "pt"})


# --------------------------------------------------------------------------------------
# Goldens through the official wrapper
# --------------------------------------------------------------------------------------


class Recorder:
    """Forward hooks on the official modules; captures exactly what generate() computes."""

    def __init__(self, wrapper: Qwen3TTSModel):
        self.model = wrapper.model
        talker = self.model.talker
        self.handles = [talker.codec_head.register_forward_hook(self._talker_logits)]
        for i, head in enumerate(talker.code_predictor.lm_head):
            self.handles.append(head.register_forward_hook(self._cp_logits(i)))
        self._orig_talker_generate = talker.generate
        self._orig_generate = self.model.generate
        talker.generate = self._talker_generate
        self.model.generate = self._generate
        self.reset()

    def reset(self):
        self.talker_logits, self.cp_logits = [], []
        self.prefill = self.trailing = None
        self.input_ids = self.instruct_ids = None
        self.codes = None
        self.sequence = None

    def _talker_logits(self, mod, inp, out):
        self.talker_logits.append(out[0, -1].detach().float().clone())

    def _cp_logits(self, i):
        def hook(mod, inp, out):
            self.cp_logits.append((i, out[0, -1].detach().float().clone()))
        return hook

    def _talker_generate(self, *args, **kwargs):
        self.prefill = kwargs["inputs_embeds"][0].detach().float().clone()
        self.trailing = kwargs["trailing_text_hidden"][0].detach().float().clone()
        result = self._orig_talker_generate(*args, **kwargs)
        self.sequence = result.sequences[0].tolist()  # every sampled codebook-0 token, EOS included
        return result

    def _generate(self, *args, **kwargs):
        self.input_ids = [t[0].tolist() for t in kwargs["input_ids"]]
        ins = kwargs.get("instruct_ids")
        self.instruct_ids = [None if t is None else t[0].tolist() for t in ins] if ins is not None else None
        codes, hiddens = self._orig_generate(*args, **kwargs)
        self.codes = codes[0].detach().clone()
        return codes, hiddens


def run_cases(spec: dict, wrapper: Qwen3TTSModel, tok) -> tuple[list[dict], dict[str, torch.Tensor]]:
    rec = Recorder(wrapper)
    g = spec["talker"]["num_code_groups"]
    eos = wrapper.model.config.talker_config.codec_eos_token_id
    cases, tensors = [], {}
    for case in spec["cases"]:
        rec.reset()
        wavs, sr = wrapper.generate_custom_voice(
            text=case["text"],
            speaker=case["speaker"],
            language=case["language"],
            instruct=case["instruct"],
            non_streaming_mode=case["non_streaming_mode"],
            max_new_tokens=case["max_new_tokens"],
            do_sample=False,
            subtalker_dosample=False,
        )
        assert sr == spec["st"]["sample_rate"]
        wav = torch.from_numpy(np.asarray(wavs[0], dtype=np.float32))
        codes = rec.codes.to(torch.int64)
        frames = codes.shape[0]
        steps = len(rec.talker_logits)
        talker_logits = torch.stack(rec.talker_logits)
        # Consistency with the official loop: `steps` talker forwards; the last sampled token
        # (EOS, or the one cut off by max_new_tokens) never reaches the code predictor, so
        # frames == steps - 1 either way; one code-predictor run of G-1 heads per frame.
        hit_eos = rec.sequence[-1] == eos
        assert steps == frames + 1 == len(rec.sequence), (steps, frames, len(rec.sequence))
        assert rec.sequence[:-1] == codes[:, 0].tolist()
        assert eos not in rec.sequence[:-1]
        assert hit_eos == (steps < case["max_new_tokens"]) or steps == case["max_new_tokens"]
        assert len(rec.cp_logits) == frames * (g - 1), (len(rec.cp_logits), frames)
        assert [i for i, _ in rec.cp_logits] == list(range(g - 1)) * frames
        cp = torch.stack([t for _, t in rec.cp_logits]).reshape(frames, g - 1, -1) if frames else \
            torch.zeros(0, g - 1, spec["cp"]["vocab_size"])
        assert len(rec.input_ids) == 1
        want_ids = tok(f"<|im_start|>assistant\n{case['text']}<|im_end|>\n<|im_start|>assistant\n",
                       add_special_tokens=False)["input_ids"]
        assert rec.input_ids[0] == want_ids
        instruct_ids = rec.instruct_ids[0] if rec.instruct_ids else None
        n = case["name"]
        tensors[f"{n}.prefill_embeds"] = rec.prefill
        tensors[f"{n}.trailing"] = rec.trailing
        tensors[f"{n}.talker_logits"] = talker_logits
        tensors[f"{n}.cp_logits"] = cp
        tensors[f"{n}.codes"] = codes
        tensors[f"{n}.wav"] = wav
        assert wav.numel() == frames * spec["st"]["samples_per_frame"]
        cases.append(dict(
            name=n, text=case["text"], speaker=case["speaker"], language=case["language"],
            instruct=case["instruct"], non_streaming_mode=case["non_streaming_mode"],
            max_new_tokens=case["max_new_tokens"], input_ids=rec.input_ids[0], instruct_ids=instruct_ids,
            num_frames=frames, hit_eos=hit_eos, samples=int(wav.numel()),
        ))
    return cases, tensors


@torch.no_grad()
def decoder_goldens(spec: dict, wrapper: Qwen3TTSModel) -> dict[str, torch.Tensor]:
    st = wrapper.model.speech_tokenizer
    g = spec["talker"]["num_code_groups"]
    gen = torch.Generator().manual_seed(spec["seed"] + 3)
    out = {}
    long_codes = torch.randint(0, spec["st"]["codebook_size"], (350, g), generator=gen, dtype=torch.int64)
    short_codes = torch.randint(0, spec["st"]["codebook_size"], (37, g), generator=gen, dtype=torch.int64)
    wavs, _ = st.decode([{"audio_codes": long_codes}])  # official path: chunked_decode(300, 25)
    out["decode_long.codes"] = long_codes
    out["decode_long.wav_chunked"] = torch.from_numpy(np.asarray(wavs[0], dtype=np.float32))
    out["decode_long.wav_full"] = st.model.decoder(long_codes.T.unsqueeze(0)).reshape(-1).float()
    wavs, _ = st.decode([{"audio_codes": short_codes}])
    out["decode_short.codes"] = short_codes
    out["decode_short.wav"] = torch.from_numpy(np.asarray(wavs[0], dtype=np.float32))
    spf = spec["st"]["samples_per_frame"]
    assert out["decode_long.wav_chunked"].numel() == 350 * spf == out["decode_long.wav_full"].numel()
    assert out["decode_short.wav"].numel() == 37 * spf
    return out


def load_wrapper(model_dir: Path, tok) -> tuple[Qwen3TTSModel, str]:
    wrapper = Qwen3TTSModel.from_pretrained(str(model_dir), dtype=torch.float32)
    wrapper.model.eval()
    official_pattern = pre_tokenizer_pattern(wrapper.processor.tokenizer)
    regex_kind = {STANDARD_QWEN2_REGEX: "standard", MISTRAL_FIXED_REGEX: "mistral_fixed"}.get(official_pattern, "other")
    wrapper.processor.tokenizer = tok  # standard Qwen2 regex, as a load by hub id would give
    # The loaded talker must hold exactly the bf16 values written to disk, in fp32.
    p = next(wrapper.model.talker.parameters())
    assert p.dtype == torch.float32
    return wrapper, regex_kind


def tokenizer_cases(tok, mistral_tok) -> list[dict]:
    out = []
    for text in TOKENIZER_TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        m_ids = mistral_tok(text, add_special_tokens=False)["input_ids"]
        entry = {"text": text, "ids": ids}
        if m_ids != ids:
            entry["ids_mistral_regex"] = m_ids  # what the official local-dir load would produce
        out.append(entry)
    return out


def rms(x: torch.Tensor) -> float:
    return float(x.double().pow(2).mean().sqrt()) if x.numel() else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "fixtures")
    ap.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / ".cache")
    ap.add_argument("--only", default=None,
                    help="comma-separated fixtures to build (tiny-a, tiny-b, tiny-base, tiny-vd, tiny-base8); default all")
    ap.add_argument("--variant", choices=["committed", "other"], default="committed",
                    help="'other': build differently sized tiny-base/tiny-vd (+ goldens) into --out, "
                         "for pointing the runtime at another checkpoint; never into tests/fixtures")
    ap.add_argument("--skip-verify", action="store_true", help="skip the tokenizer corpus cross-check")
    ap.add_argument("--allow-version-drift", action="store_true", help="run with unpinned package versions")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    if args.variant == "other":
        if args.out.resolve() == (Path(__file__).resolve().parent.parent / "tests" / "fixtures").resolve():
            raise SystemExit("--variant other writes a temporary checkpoint: pass --out DIR outside tests/fixtures")
        only = (only or {"tiny-base", "tiny-vd"}) & {"tiny-base", "tiny-vd"}

    torch.set_num_threads(1)
    torch.manual_seed(0)
    t0 = time.time()
    versions = {
        "qwen_tts": importlib.metadata.version("qwen-tts"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    log(f"versions: {versions}")
    pinned = {"qwen_tts": "0.1.1", "transformers": "4.57.3", "torch": "2.15.0"}
    drift = {k: versions[k] for k, v in pinned.items() if not versions[k].startswith(v)}
    if drift and not args.allow_version_drift:
        raise SystemExit(f"reference versions differ from tools/requirements.txt: {drift} "
                         "(use tools/make_fixtures.sh, or pass --allow-version-drift)")

    tiktoken_path = fetch_qwen_tiktoken(args.cache)
    vocab_bytes, merges_bytes, ranks = build_vocab_and_merges(tiktoken_path)
    log(f"vocab.json {len(vocab_bytes)} B, merges.txt {len(merges_bytes)} B (sizes match the hub files)")

    args.out.mkdir(parents=True, exist_ok=True)
    summary = []
    verified = False
    for spec in fixture_specs():
        if only is not None and spec["name"] not in only:
            continue
        t1 = time.time()
        write_checkpoint(spec, args.out, vocab_bytes, merges_bytes)
        model_dir = args.out / spec["name"]
        tok = standard_tokenizer(model_dir)
        mistral_tok = copy.deepcopy(tok)
        set_pre_tokenizer(mistral_tok, MISTRAL_FIXED_REGEX)
        if not verified and not args.skip_verify:
            n = verify_tokenizer(tok, ranks, verification_corpus(seed=7))
            log(f"tokenizer verified against rank-BPE on {n} tokens")
            verified = True

        wrapper, regex_kind = load_wrapper(model_dir, tok)
        cases, tensors = run_cases(spec, wrapper, tok)
        tensors.update(decoder_goldens(spec, wrapper))

        gdir = args.out / "goldens" / spec["name"]
        gdir.mkdir(parents=True, exist_ok=True)
        doc = {
            "fixture": spec["name"],
            "versions": versions,
            "official_local_dir_regex": regex_kind,
            "sample_rate": spec["st"]["sample_rate"],
            "samples_per_frame": spec["st"]["samples_per_frame"],
            "tokenizer": tokenizer_cases(tok, mistral_tok),
            "cases": cases,
        }
        write_json(gdir / "cases.json", doc)
        save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(gdir / "goldens.safetensors"),
                  metadata={"format": "pt"})
        for c in cases:
            w = tensors[f"{c['name']}.wav"]
            summary.append((spec["name"], c["name"], c["num_frames"], c["hit_eos"], rms(w),
                            float(w.abs().max()) if w.numel() else 0.0))
        for k in ("decode_long.wav_chunked", "decode_long.wav_full", "decode_short.wav"):
            w = tensors[k]
            summary.append((spec["name"], k, w.numel() // spec["st"]["samples_per_frame"], None, rms(w),
                            float(w.abs().max())))
        d = tensors["decode_long.wav_chunked"] - tensors["decode_long.wav_full"]
        spf = spec["st"]["samples_per_frame"]
        log(f"{spec['name']}: chunked vs full max|diff| first 300 frames "
            f"{float(d[:300 * spf].abs().max()):.3g}, after {float(d[300 * spf:].abs().max()):.3g}; "
            f"official processor regex on local load: {regex_kind}; {time.time() - t1:.1f}s")
        del wrapper

    # Base (voice clone) and VoiceDesign fixtures: tools/clone_fixtures.py.
    sys.modules.setdefault("make_fixtures", sys.modules[__name__])
    import clone_fixtures

    specs = [clone_fixtures.base_spec(args.variant), clone_fixtures.vd_spec(args.variant)]
    if args.variant == "committed":
        specs.append(clone_fixtures.base8_spec())
    for spec in specs:
        if only is not None and spec["name"] not in only:
            continue
        t1 = time.time()
        summary.extend(clone_fixtures.build(spec, args.out, vocab_bytes, merges_bytes, versions))
        log(f"{spec['name']} ({args.variant}): {time.time() - t1:.1f}s")

    log("\nfixture  case                          frames  eos    rms     max|wav|")
    for fx, name, frames, eos, r, m in summary:
        log(f"{fx:8s} {name:29s} {frames:6d}  {str(eos):5s}  {r:.4f}  {m:.4f}")
    log(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
