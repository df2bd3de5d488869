"""Base (voice clone) and VoiceDesign fixtures: tiny random checkpoints plus goldens.

Called by make_fixtures.py (`--only tiny-base,tiny-vd`, or `--variant other --out DIR`).
It reuses that module's pieces (vocabulary, weight init, safetensors writers, recorder)
and adds what cloning needs:

  tiny-base/  0.6B-style Base checkpoint: talker + shrunken speaker encoder (BF16), and a
              tiny speech tokenizer whose encoder has the real code shape (32 quantizers,
              16 valid, codebook 2048, hop 1920, 24 kHz)
  tiny-vd/    1.7B-style VoiceDesign checkpoint (no speaker encoder, spk_id {})
  goldens/tiny-base/{ref_a,ref_b}.wav, encoders.safetensors, cases.json, goldens.safetensors
  goldens/tiny-vd/cases.json, goldens.safetensors

Everything is produced by the official qwen-tts 0.1.1 code in fp32 on the BF16-rounded
talker weights, greedy, reference clips at 24 kHz and encoded one item at a time
(clone design spec section 6). See tools/README.md for every tensor.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import wave
from pathlib import Path

import librosa
import numpy as np
import torch
from safetensors.torch import save_file

import make_fixtures as mf
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920

# Base and VoiceDesign list the ten languages without the two dialects.
BASE_LANGUAGE_IDS = {k: v for k, v in mf.REAL_LANGUAGE_IDS.items() if "dialect" not in k}

# Reference clips: deterministic speech-like signals (name, samples, seed, f0 in Hz).
# The lengths are not multiples of 1920, so the last codec frame is partial.
REF_CLIPS = [
    dict(name="ref_a", samples=50_017, seed=101, f0=132.0,
         text="The quick brown fox jumps over the lazy dog, then it rests under a tall green tree."),
    dict(name="ref_b", samples=79_111, seed=202, f0=205.0, text="今天早上我们去公园散步，天气很好。"),
]


# --------------------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------------------


def base_spec(variant: str = "committed") -> dict:
    """tiny-base; `variant="other"` gives a differently sized Base checkpoint (not committed)."""
    other = variant == "other"
    return dict(
        name="tiny-base",
        kind="base",
        seed=4321 if not other else 9876,
        size="0b6",
        talker=dict(hidden_size=24, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, mrope_section=[2, 1, 1], text_hidden_size=4,
                    num_code_groups=16, vocab_size=3072) if not other else
        dict(hidden_size=40, intermediate_size=80, num_hidden_layers=2, num_attention_heads=5,
             num_key_value_heads=1, head_dim=8, mrope_section=[2, 1, 1], text_hidden_size=10,
             num_code_groups=16, vocab_size=3072),
        cp=dict(hidden_size=24, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, vocab_size=2048) if not other else
        dict(hidden_size=40, intermediate_size=64, num_hidden_layers=3, num_attention_heads=5,
             num_key_value_heads=5, head_dim=8, vocab_size=2048),
        speaker_encoder=dict(enc_channels=[64, 64, 64, 64, 192], enc_attention_channels=16,
                             enc_se_channels=16) if not other else
        dict(enc_channels=[48, 48, 48, 48, 144], enc_attention_channels=8, enc_se_channels=8),
        codec_special=dict(mf.REAL_CODEC_SPECIAL),
        languages=dict(BASE_LANGUAGE_IDS),
        speakers={},
        dialect={},
        eos_gain=2.4,  # greedy: 3 cases stop on EOS (after 18, 2, 6 frames), 2 hit the cap
        st=base_codec(other),
        cases=[
            dict(name="icl_stream_a", ref_audio="ref_a", x_vector_only=False, non_streaming_mode=False,
                 language="English", max_new_tokens=24,
                 text="Cloning a voice from a short reference clip, with a long enough sentence to stream."),
            dict(name="icl_nonstream_a", ref_audio="ref_a", x_vector_only=False, non_streaming_mode=True,
                 language="English", max_new_tokens=16, text="Hello world."),
            dict(name="icl_stream_b_auto", ref_audio="ref_b", x_vector_only=False, non_streaming_mode=False,
                 language="auto", max_new_tokens=16, text="你好，世界！"),
            dict(name="xvec_stream_b", ref_audio="ref_b", x_vector_only=True, non_streaming_mode=False,
                 language="Chinese", max_new_tokens=24, text="只用说话人向量。"),
            dict(name="xvec_nonstream_a", ref_audio="ref_a", x_vector_only=True, non_streaming_mode=True,
                 language="english", max_new_tokens=12, text="Only the x-vector, HelloWorld 42."),
        ],
    )


def base8_spec() -> dict:
    """tiny-base8: a Base checkpoint whose codec keeps 8 code groups (encoder_valid_num_quantizers 8
    of 16 encoder levels; decoder and talker 8), unlike the released codec's 16. Small: a
    shrunken speaker encoder, a narrower codec encoder, two cases on ref_a (built by tiny-base)."""
    return dict(
        name="tiny-base8",
        kind="base",
        seed=8642,
        size="0b6",
        talker=dict(hidden_size=24, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, mrope_section=[2, 1, 1], text_hidden_size=4,
                    num_code_groups=8, vocab_size=3072),
        cp=dict(hidden_size=24, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, vocab_size=2048),
        speaker_encoder=dict(enc_channels=[32, 32, 32, 32, 96], enc_attention_channels=8, enc_se_channels=8),
        codec_special=dict(mf.REAL_CODEC_SPECIAL),
        languages=dict(BASE_LANGUAGE_IDS),
        speakers={},
        dialect={},
        eos_gain=2.4,
        st=dict(base_codec(True), enc=dict(base_codec(True)["enc"], num_quantizers=16)),
        clips_from="tiny-base",
        compact=True,  # only what the voice-library tests compare: x-vector, codes, prompt, waveforms
        cases=[
            dict(name="icl_stream_a", ref_audio="ref_a", x_vector_only=False, non_streaming_mode=False,
                 language="English", max_new_tokens=16,
                 text="A voice made from a clip, spoken from the library."),
            dict(name="xvec_nonstream_a", ref_audio="ref_a", x_vector_only=True, non_streaming_mode=True,
                 language="English", max_new_tokens=12, text="Only the x-vector."),
        ],
    )


def base_codec(other: bool) -> dict:
    """The tiny codec with the real code shape: 16 talker groups = 16 valid of 32 encoder levels."""
    return dict(
        sample_rate=SAMPLE_RATE, samples_per_frame=SAMPLES_PER_FRAME,
        # decoder (as tiny-a, 16 quantizers)
        upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2], codebook_size=2048, codebook_dim=4,
        latent_dim=32, decoder_dim=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16,
        # encoder (Mimi): SEANet 8 filters, ratios 8*6*5*4 = 960 -> 25 Hz, downsample x2 -> 12.5 Hz
        enc=dict(num_filters=8 if not other else 4, hidden_size=32 if not other else 24,
                 num_hidden_layers=2 if not other else 1, num_attention_heads=2, num_key_value_heads=2,
                 head_dim=16 if not other else 12, intermediate_size=64 if not other else 48,
                 codebook_dim=4, num_quantizers=32, ratios=[8, 6, 5, 4], upsample_groups=32 if not other else 24),
    )


def vd_spec(variant: str = "committed") -> dict:
    """tiny-vd; `variant="other"` gives 16 code groups and its own codec (tiny-a is not built)."""
    other = variant == "other"
    return dict(
        name="tiny-vd",
        kind="voice_design",
        seed=2468 if not other else 1357,
        size="1b7",
        talker=dict(hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=1, head_dim=8, mrope_section=[2, 1, 1], text_hidden_size=4,
                    num_code_groups=8, vocab_size=3072) if not other else
        dict(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=6,
             num_key_value_heads=2, head_dim=8, mrope_section=[2, 1, 1], text_hidden_size=8,
             num_code_groups=16, vocab_size=3072),
        cp=dict(hidden_size=16, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, head_dim=8, vocab_size=2048) if not other else
        dict(hidden_size=24, intermediate_size=48, num_hidden_layers=1, num_attention_heads=3,
             num_key_value_heads=1, head_dim=8, vocab_size=2048),
        codec_special=dict(mf.REAL_CODEC_SPECIAL),
        languages=dict(BASE_LANGUAGE_IDS),
        speakers={},
        dialect={},
        eos_gain=1.9,  # greedy: the first two cases stop on EOS, the third hits the cap
        # committed: speech_tokenizer/ is byte-for-byte tiny-a's (8 groups, 24 kHz, hop 1920)
        share_codec=None if other else "tiny-a",
        st=base_codec(True) if other else dict(sample_rate=SAMPLE_RATE, samples_per_frame=SAMPLES_PER_FRAME),
        cases=[
            dict(name="vd_en_nonstream", text="Please read this sentence in the designed voice.",
                 instruct="A deep, slow male voice with a calm tone.", language="English",
                 non_streaming_mode=True, max_new_tokens=24),
            dict(name="vd_auto_stream", text="Streaming text input for voice design.",
                 instruct="Young cheerful female voice, speaking fast.", language="auto",
                 non_streaming_mode=False, max_new_tokens=24),
            dict(name="vd_zh_no_instruct", text="没有描述的声音。", instruct="", language="Chinese",
                 non_streaming_mode=True, max_new_tokens=12),
        ],
    )


# --------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------


def main_config(spec: dict) -> dict:
    cfg = mf.main_config(spec)
    cfg["tts_model_type"] = spec["kind"]
    if spec["kind"] == "base":
        se = {"enc_dim": spec["talker"]["hidden_size"], "sample_rate": SAMPLE_RATE, **spec["speaker_encoder"]}
        cfg["speaker_encoder_config"] = dict(sorted(se.items()))
    else:
        del cfg["speaker_encoder_config"]  # absent from the hub VoiceDesign/CustomVoice files
    return cfg


def speech_tokenizer_config(spec: dict) -> dict:
    """tiny-a's layout (make_fixtures.speech_tokenizer_config) with the encoder of `st["enc"]`."""
    st, enc = spec["st"], spec["st"]["enc"]
    cfg = mf.speech_tokenizer_config(dict(spec, st=dict(st, enc_ratios=enc["ratios"])))
    e = cfg["encoder_config"]
    e.update(
        codebook_dim=enc["codebook_dim"], vector_quantization_hidden_dimension=enc["codebook_dim"],
        hidden_size=enc["hidden_size"], intermediate_size=enc["intermediate_size"], head_dim=enc["head_dim"],
        num_attention_heads=enc["num_attention_heads"], num_key_value_heads=enc["num_key_value_heads"],
        num_filters=enc["num_filters"], num_hidden_layers=enc["num_hidden_layers"],
        num_quantizers=enc["num_quantizers"], upsample_groups=enc["upsample_groups"],
    )
    assert math.prod(enc["ratios"]) * 2 == st["samples_per_frame"]
    return cfg


# --------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------


def build_model_weights(spec: dict, cfg: Qwen3TTSConfig) -> dict[str, torch.Tensor]:
    """Talker (+ speaker encoder for Base), every tensor randomised, rounded to BF16."""
    torch.manual_seed(spec["seed"])
    model = Qwen3TTSForConditionalGeneration(cfg)
    init = mf.Init(spec["seed"])
    mf.init_module_tree(model, init)
    eos = cfg.talker_config.codec_eos_token_id
    with torch.no_grad():
        model.talker.codec_head.weight[eos] *= spec["eos_gain"]
    mf.check_all_initialised(model, init)
    sd = model.state_dict()
    prefixes = ("talker.", "speaker_encoder.") if spec["kind"] == "base" else ("talker.",)
    assert all(k.startswith(prefixes) for k in sd), [k for k in sd if not k.startswith(prefixes)][:5]
    assert any(k.startswith("speaker_encoder.") for k in sd) == (spec["kind"] == "base")
    return {k: mf.round_bf16(v).contiguous() for k, v in sd.items()}


@torch.no_grad()
def build_codec_weights(spec: dict, cfg: Qwen3TTSTokenizerV2Config) -> dict[str, torch.Tensor]:
    """make_fixtures' codec init, then the encoder quantizer is scaled so its codes vary.

    The projections `input_proj` are rescaled so the projected latents have unit RMS on
    noise, like the N(0,1) codebooks; acoustic level l is scaled by 0.8**l (real RVQ
    codebooks shrink with depth), so every one of the 16 kept levels uses many codes.
    """
    sd = mf.build_speech_tokenizer_weights(spec, cfg)
    model = Qwen3TTSTokenizerV2Model(cfg).eval()
    model.load_state_dict(sd)
    enc = model.encoder
    g = torch.Generator().manual_seed(spec["seed"] + 4)
    x = (torch.randn(1, 1, 4 * 24000, generator=g) * 0.2).clamp(-1, 1)
    z = enc.downsample(enc.encoder_transformer(enc.encoder(x).transpose(1, 2))[0].transpose(1, 2))
    q = enc.quantizer
    for part in (q.semantic_residual_vector_quantizer, q.acoustic_residual_vector_quantizer):
        u = part.input_proj(z)
        part.input_proj.weight.mul_(1.0 / float(u.pow(2).mean().sqrt()))
    for i, layer in enumerate(q.acoustic_residual_vector_quantizer.layers):
        layer.codebook.embed_sum.mul_(0.8 ** i)
    return {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}


def write_checkpoint(spec: dict, out: Path, vocab_bytes: bytes, merges_bytes: bytes) -> Path:
    d = out / spec["name"]
    if d.exists():
        shutil.rmtree(d)
    (d / "speech_tokenizer").mkdir(parents=True)
    cfg_dict = main_config(spec)
    mf.write_json(d / "config.json", cfg_dict)
    (d / "generation_config.json").write_text(json.dumps(mf.GENERATION_CONFIG, indent=2), encoding="utf-8")
    (d / "vocab.json").write_bytes(vocab_bytes)
    (d / "merges.txt").write_bytes(merges_bytes)
    mf.write_json(d / "tokenizer_config.json", mf.tokenizer_config())
    (d / "preprocessor_config.json").write_text(
        json.dumps({"padding_side": "left", "padding_value": 0.0, "processor_class": "Qwen3TTSProcessor",
                    "return_attention_mask": True}, indent=2), encoding="utf-8")
    sd = build_model_weights(spec, Qwen3TTSConfig(**copy.deepcopy(cfg_dict)))
    mf.save_safetensors_sharded(sd, d, 1)

    shared = spec.get("share_codec")
    if shared:
        src = out / shared / "speech_tokenizer"
        if not src.is_dir():
            raise SystemExit(f"{spec['name']} shares {src}, which is missing (build {shared} first)")
        for f in ("config.json", "model.safetensors", "preprocessor_config.json"):
            shutil.copyfile(src / f, d / "speech_tokenizer" / f)
        return d
    st_dict = speech_tokenizer_config(spec)
    mf.write_json(d / "speech_tokenizer" / "config.json", st_dict)
    mf.write_json(d / "speech_tokenizer" / "preprocessor_config.json", {
        "chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
        "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
        "sampling_rate": spec["st"]["sample_rate"],
    })
    st_sd = build_codec_weights(spec, Qwen3TTSTokenizerV2Config(**copy.deepcopy(st_dict)))
    save_file(st_sd, str(d / "speech_tokenizer" / "model.safetensors"), metadata={"format": "pt"})
    return d


# --------------------------------------------------------------------------------------
# Reference clips
# --------------------------------------------------------------------------------------

# Vowel formants (F1, F2, F3 in Hz) the synthetic "syllables" move between.
VOWELS = [(730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (570, 840, 2410),
          (660, 1720, 2410), (440, 1020, 2240), (490, 1350, 1690)]


def synth_clip(n: int, seed: int, f0: float) -> np.ndarray:
    """Harmonic source with intonation and vibrato, formant envelopes that glide per
    syllable, syllable/pause amplitude shape, breath and fricative noise; int16 samples."""
    rng = np.random.default_rng(seed)
    sr = SAMPLE_RATE
    t = np.arange(n) / sr
    # syllables of 120..320 ms, some followed by short pauses
    bounds, pos = [0], 0
    while pos < n:
        pos += int(rng.integers(int(0.12 * sr), int(0.32 * sr)))
        bounds.append(min(pos, n))
    nsyl = len(bounds) - 1
    vowels = rng.integers(0, len(VOWELS), nsyl + 1)
    voiced = rng.random(nsyl) > 0.15
    env = np.zeros(n)
    formants = np.zeros((n, 3))
    for i in range(nsyl):
        a, b = bounds[i], bounds[i + 1]
        m = b - a
        x = np.linspace(0, 1, m, endpoint=False)
        env[a:b] = np.sin(np.pi * x) ** 0.6 * (rng.uniform(0.5, 1.0) if voiced[i] else 0.0)
        f_from, f_to = np.array(VOWELS[vowels[i]]), np.array(VOWELS[vowels[i + 1]])
        formants[a:b] = f_from + (f_to - f_from) * x[:, None] ** 2
    # f0: declination + random slow intonation + 5.5 Hz vibrato
    slow = np.interp(t, np.linspace(0, t[-1], 8), rng.uniform(-0.12, 0.12, 8))
    f0_t = f0 * (1.0 + slow - 0.08 * t / t[-1] + 0.02 * np.sin(2 * np.pi * 5.5 * t))
    phase = 2 * np.pi * np.cumsum(f0_t) / sr
    y = np.zeros(n)
    bw = np.array([90.0, 110.0, 170.0])
    gains = np.array([1.0, 0.6, 0.3])
    for k in range(1, int(11_000 / (f0 * 0.8)) + 1):
        fk = k * f0_t
        amp = np.zeros(n)
        for j in range(3):
            amp += gains[j] * np.exp(-0.5 * ((fk - formants[:, j]) / bw[j]) ** 2)
        amp = (amp + 0.02) / np.sqrt(k)
        amp[fk > 11_500] = 0.0
        y += amp * np.sin(k * phase + 0.37 * k * k)
    y *= env
    # breath (always) and fricative bursts (unvoiced syllables): one-pole filtered noise
    noise = rng.standard_normal(n)
    hp = np.concatenate([[0.0], np.diff(noise)])
    fric = np.zeros(n)
    for i in range(nsyl):
        if not voiced[i]:
            a, b = bounds[i], bounds[i + 1]
            fric[a:b] = np.sin(np.pi * np.linspace(0, 1, b - a, endpoint=False)) * 0.35
    y = y / np.abs(y).max() * 0.55 + hp * fric * 0.25 + noise * 0.004
    y = y / np.abs(y).max() * 0.7
    return np.round(y * 32767).astype(np.int16)


def write_wav(path: Path, pcm: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.astype("<i2").tobytes())


# --------------------------------------------------------------------------------------
# Goldens
# --------------------------------------------------------------------------------------


class CloneRecorder(mf.Recorder):
    """make_fixtures.Recorder plus the ref ids and the decode before the ICL cut."""

    def __init__(self, wrapper):
        super().__init__(wrapper)
        st = wrapper.model.speech_tokenizer
        self._orig_decode = st.decode
        st.decode = self._decode

    def reset(self):
        super().reset()
        self.ref_ids = None
        self.decoded = None

    def _generate(self, *args, **kwargs):
        refs = kwargs.get("ref_ids")
        self.ref_ids = [None if r is None else r[0].tolist() for r in refs] if refs is not None else None
        return super()._generate(*args, **kwargs)

    def _decode(self, encoded):
        wavs, sr = self._orig_decode(encoded)
        self.decoded = [np.asarray(w, dtype=np.float32).copy() for w in wavs]
        return wavs, sr


@torch.no_grad()
def requantize(quantizer, z: torch.Tensor, valid: int = 16) -> torch.Tensor:
    """The documented quantizer (clone spec section 3.2) applied to a captured `downsample`
    output [C, T]: proves the hook caught the quantizer input and the README formula holds."""
    codes = []
    for part, levels in ((quantizer.semantic_residual_vector_quantizer, 1),
                         (quantizer.acoustic_residual_vector_quantizer, valid - 1)):
        r = (part.input_proj.weight[:, :, 0] @ z).T
        for layer in part.layers[:levels]:
            cb = layer.codebook
            e = cb.embed_sum / cb.cluster_usage.clamp(min=1e-5)[:, None]
            idx = torch.cdist(r, e).argmin(1)
            codes.append(idx)
            r = r - e[idx]
    return torch.stack(codes, 1)


@torch.no_grad()
def encoder_goldens(wrapper, clips: dict[str, dict]) -> dict[str, torch.Tensor]:
    """Per clip: the float samples, mel, x-vector, ref codes and the codec-encoder stages."""
    model = wrapper.model
    enc = model.speech_tokenizer.model.encoder
    cap: dict[str, torch.Tensor] = {}
    hooks = [
        model.speaker_encoder.register_forward_pre_hook(lambda m, a: cap.__setitem__("mel", a[0][0].float().clone())),
        enc.encoder.register_forward_hook(lambda m, i, o: cap.__setitem__("seanet", o[0].float().clone())),
        enc.encoder_transformer.register_forward_hook(
            lambda m, i, o: cap.__setitem__("transformer", o[0][0].transpose(0, 1).float().clone())),
        enc.downsample.register_forward_hook(lambda m, i, o: cap.__setitem__("downsample", o[0].float().clone())),
    ]
    valid = model.speech_tokenizer.model.encoder_valid_num_quantizers
    out = {}
    for name, clip in clips.items():
        cap.clear()
        items = wrapper.create_voice_clone_prompt(ref_audio=str(clip["path"]), ref_text=clip["text"],
                                                  x_vector_only_mode=False)
        assert len(items) == 1
        samples = torch.from_numpy(clip["pcm"].astype(np.float32) / 32768.0)
        n = samples.numel()
        ref_code = items[0].ref_code.to(torch.int64)
        frames = -(-n // SAMPLES_PER_FRAME)
        assert ref_code.shape == (frames, valid), ref_code.shape
        assert cap["mel"].shape == (n // 256, 128), cap["mel"].shape
        assert cap["seanet"].shape[1] == -(-n // 960) and cap["downsample"].shape[1] == frames
        # The clip the official loader read is exactly int16 / 32768.
        y, sr = librosa.load(str(clip["path"]), sr=None, mono=True)
        assert sr == SAMPLE_RATE and np.array_equal(y, samples.numpy())
        out[f"{name}.samples"] = samples
        out[f"{name}.mel"] = cap["mel"]
        out[f"{name}.xvector"] = items[0].ref_spk_embedding.float().clone()
        out[f"{name}.ref_codes"] = ref_code
        for k in ("seanet", "transformer", "downsample"):
            out[f"{name}.{k}"] = cap[k]
        assert torch.equal(requantize(enc.quantizer, cap["downsample"], valid), ref_code), "quantizer input mismatch"
        clip["frames"] = frames
        clip["xvector"] = out[f"{name}.xvector"]
    for h in hooks:
        h.remove()
    return out


def run_clone_cases(spec: dict, wrapper, tok, clips: dict[str, dict]) -> tuple[list[dict], dict]:
    rec = CloneRecorder(wrapper)
    eos = wrapper.model.config.talker_config.codec_eos_token_id
    cases, tensors = [], {}
    for case in spec["cases"]:
        rec.reset()
        clip = clips[case["ref_audio"]]
        ref_text = None if case["x_vector_only"] else clip["text"]
        wavs, sr = wrapper.generate_voice_clone(
            text=case["text"], language=case["language"], ref_audio=str(clip["path"]), ref_text=ref_text,
            x_vector_only_mode=case["x_vector_only"], non_streaming_mode=case["non_streaming_mode"],
            max_new_tokens=case["max_new_tokens"], do_sample=False, subtalker_dosample=False,
        )
        assert sr == SAMPLE_RATE
        entry, t = common_case_tensors(spec, rec, tok, case, eos, wavs[0])
        want_ref = None
        if ref_text is not None:
            want_ref = tok(f"<|im_start|>assistant\n{ref_text}<|im_end|>\n", add_special_tokens=False)["input_ids"]
        assert rec.ref_ids == [want_ref], (rec.ref_ids, want_ref)
        n = case["name"]
        frames = entry["num_frames"]
        # The speaker slot of the prefill is P(tts_pad) + x-vector, in both modes.
        slot = 7 if case["language"].lower() != "auto" else 6
        pad = wrapper.model.talker.text_projection(wrapper.model.talker.get_text_embeddings()(
            torch.tensor([[wrapper.model.config.tts_pad_token_id]])))[0, 0]
        assert torch.allclose(t[f"{n}.prefill_embeds"][slot], pad + clip["xvector"], atol=1e-5)
        uncut = torch.from_numpy(rec.decoded[0])
        if case["x_vector_only"]:
            assert torch.equal(uncut, t[f"{n}.wav"])
            ref_frames, cut = 0, 0
        else:
            ref_frames = clip["frames"]
            assert uncut.numel() == (ref_frames + frames) * SAMPLES_PER_FRAME
            cut = int(ref_frames / max(ref_frames + frames, 1) * uncut.numel())
            assert cut == int((ref_frames / (ref_frames + frames)) * uncut.numel())  # f64, as documented
            assert torch.equal(uncut[cut:], t[f"{n}.wav"])
            t[f"{n}.wav_uncut"] = uncut
        tensors.update(t)
        entry.update(ref_audio=case["ref_audio"], ref_text=ref_text, x_vector_only=case["x_vector_only"],
                     ref_ids=want_ref, ref_frames=ref_frames, cut=cut,
                     samples_uncut=int(uncut.numel()))
        cases.append(entry)
    return cases, tensors


def common_case_tensors(spec, rec, tok, case, eos, wav) -> tuple[dict, dict]:
    """Checks and tensors shared by clone and design cases (make_fixtures.run_cases' schema)."""
    g = spec["talker"]["num_code_groups"]
    wav = torch.from_numpy(np.asarray(wav, dtype=np.float32).copy())
    codes = rec.codes.to(torch.int64)
    frames, steps = codes.shape[0], len(rec.talker_logits)
    hit_eos = rec.sequence[-1] == eos
    assert steps == frames + 1 == len(rec.sequence), (steps, frames, len(rec.sequence))
    assert rec.sequence[:-1] == codes[:, 0].tolist() and eos not in rec.sequence[:-1]
    assert hit_eos == (steps < case["max_new_tokens"]) or steps == case["max_new_tokens"]
    assert len(rec.cp_logits) == frames * (g - 1)
    want_ids = tok(f"<|im_start|>assistant\n{case['text']}<|im_end|>\n<|im_start|>assistant\n",
                   add_special_tokens=False)["input_ids"]
    assert rec.input_ids == [want_ids]
    n = case["name"]
    t = {
        f"{n}.prefill_embeds": rec.prefill,
        f"{n}.trailing": rec.trailing,
        f"{n}.talker_logits": torch.stack(rec.talker_logits),
        f"{n}.codes": codes,
        f"{n}.wav": wav,
    }
    if frames:
        # Only the first frame's code-predictor logits: all frames would dominate the file.
        t[f"{n}.cp_logits_first"] = torch.stack([x for _, x in rec.cp_logits[: g - 1]])
    entry = dict(name=n, text=case["text"], language=case["language"], non_streaming_mode=case["non_streaming_mode"],
                 max_new_tokens=case["max_new_tokens"], input_ids=want_ids, num_frames=frames, hit_eos=hit_eos,
                 samples=int(wav.numel()))
    return entry, t


def run_design_cases(spec: dict, wrapper, tok) -> tuple[list[dict], dict]:
    rec = mf.Recorder(wrapper)
    eos = wrapper.model.config.talker_config.codec_eos_token_id
    cases, tensors = [], {}
    for case in spec["cases"]:
        rec.reset()
        wavs, sr = wrapper.generate_voice_design(
            text=case["text"], instruct=case["instruct"], language=case["language"],
            non_streaming_mode=case["non_streaming_mode"], max_new_tokens=case["max_new_tokens"],
            do_sample=False, subtalker_dosample=False,
        )
        assert sr == SAMPLE_RATE
        entry, t = common_case_tensors(spec, rec, tok, case, eos, wavs[0])
        assert t[f"{case['name']}.wav"].numel() == entry["num_frames"] * SAMPLES_PER_FRAME
        want = None
        if case["instruct"]:
            want = tok(f"<|im_start|>user\n{case['instruct']}<|im_end|>\n", add_special_tokens=False)["input_ids"]
        assert rec.instruct_ids == [want], (rec.instruct_ids, want)
        entry.update(instruct=case["instruct"], instruct_ids=want)
        tensors.update(t)
        cases.append(entry)
    return cases, tensors


def save_goldens(gdir: Path, doc: dict, tensors: dict, fname: str = "goldens.safetensors") -> None:
    gdir.mkdir(parents=True, exist_ok=True)
    if doc is not None:
        mf.write_json(gdir / "cases.json", doc)
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(gdir / fname), metadata={"format": "pt"})


def build(spec: dict, out: Path, vocab_bytes: bytes, merges_bytes: bytes, versions: dict,
          tokenizer_cases=None) -> list[tuple]:
    """Write the checkpoint and its goldens; return summary rows (fixture, case, frames, eos, rms, max)."""
    model_dir = write_checkpoint(spec, out, vocab_bytes, merges_bytes)
    tok = mf.standard_tokenizer(model_dir)
    wrapper, regex_kind = mf.load_wrapper(model_dir, tok)
    assert wrapper.model.tts_model_type == spec["kind"]
    gdir = out / "goldens" / spec["name"]
    gdir.mkdir(parents=True, exist_ok=True)
    doc = {
        "fixture": spec["name"],
        "versions": versions,
        "official_local_dir_regex": regex_kind,
        "sample_rate": SAMPLE_RATE,
        "samples_per_frame": SAMPLES_PER_FRAME,
    }
    if spec["kind"] == "base":
        clips = {}
        used = {c["ref_audio"] for c in spec["cases"]}
        for c in REF_CLIPS:
            if c["name"] not in used:
                continue
            pcm = synth_clip(c["samples"], c["seed"], c["f0"])
            if spec.get("clips_from"):
                # The same clip as another fixture's, read from there (not committed twice).
                path = out / "goldens" / spec["clips_from"] / f"{c['name']}.wav"
                if not path.is_file():
                    raise SystemExit(f"{spec['name']} reads {path}, which is missing (build {spec['clips_from']} first)")
                with wave.open(str(path), "rb") as w:
                    assert np.array_equal(np.frombuffer(w.readframes(w.getnframes()), "<i2"), pcm), path
                file = f"../{spec['clips_from']}/{c['name']}.wav"
            else:
                path = gdir / f"{c['name']}.wav"
                write_wav(path, pcm)
                file = f"{c['name']}.wav"
            clips[c["name"]] = dict(c, path=path, pcm=pcm, file=file)
        enc = encoder_goldens(wrapper, clips)
        cases, tensors = run_clone_cases(spec, wrapper, tok, clips)
        if spec.get("compact"):
            # x-vector and codes with the cases; no encoder stages, logits only as a prompt check.
            tensors = {k: v for k, v in tensors.items() if not k.endswith(("talker_logits", "cp_logits_first", "wav_uncut"))}
            tensors.update({k: v for k, v in enc.items() if k.endswith((".xvector", ".ref_codes"))})
        else:
            save_goldens(gdir, None, enc, "encoders.safetensors")
        doc["ref_clips"] = [dict(name=k, file=v["file"], samples=int(v["pcm"].size), text=v["text"],
                                 ref_frames=v["frames"]) for k, v in clips.items()]
    else:
        cases, tensors = run_design_cases(spec, wrapper, tok)
    doc["cases"] = cases
    save_goldens(gdir, doc, tensors)
    rows = []
    for c in cases:
        w = tensors[f"{c['name']}.wav"]
        rows.append((spec["name"], c["name"], c["num_frames"], c["hit_eos"], mf.rms(w),
                     float(w.abs().max()) if w.numel() else 0.0))
    return rows
