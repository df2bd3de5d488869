#!/usr/bin/env python3
"""Official-path goldens for the audio crate's reference-audio tests
(audio/tests/it/reference_official.rs), written to tests/fixtures/audio/.

The official qwen_tts code loads a reference clip with
librosa.load(path, sr=None, mono=True) and resamples it with
librosa.resample(y, orig_sr=sr, target_sr=24000) (soxr HQ). This records
that path's output, as 32-bit float WAV at 24 kHz:

- official-<fixture>.wav: the committed FLAC, MP3 and OGG tones through
  librosa.load + librosa.resample (M4A is left out: libsndfile cannot read
  it and librosa's audioread fallback would need ffmpeg at load time).
- soxr-hq-<rate>.wav: a deterministic speech-like signal at <rate>
  (defined identically in the Rust test), resampled to 24 kHz.

Run by tools/make_audio_fixtures.sh with the reference venv's python
(librosa 0.11.0 and soxr 1.1.0 come with qwen-tts 0.1.1).
"""
import math
import struct
import sys
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "audio"
RATES = (16_000, 22_050, 44_100, 48_000)
FIXTURES = ("tone440-44100-stereo.flac", "tone440-22050-mono.mp3", "tone440-48000-stereo.ogg")


def speech_like(n: int, rate: int) -> np.ndarray:
    """Partials from 180 Hz to 10.5 kHz plus a little LCG noise, in f64,
    rounded to f32 (audio/tests/it/reference_official.rs computes the same)."""
    seed = 0x2545F491
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        seed = (seed * 1_664_525 + 1_013_904_223) & 0xFFFFFFFF
        noise = (seed >> 8) / float(1 << 24) - 0.5
        t = i / rate
        v = (
            0.3 * math.sin(2 * math.pi * 180.0 * t)
            + 0.2 * math.sin(2 * math.pi * 1_234.5 * t)
            + 0.1 * math.sin(2 * math.pi * 3_300.0 * t)
            + 0.05 * math.sin(2 * math.pi * 7_000.0 * t)
            + 0.1 * noise
        )
        out[i] = v
    return out


def write(name: str, y: np.ndarray) -> None:
    """Mono 32-bit float WAV at 24 kHz, written by hand: libsndfile adds a
    PEAK chunk with a timestamp, which would make the bytes differ per run."""
    data = np.asarray(y, dtype="<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, 24_000, 24_000 * 4, 4, 32)  # IEEE float
    riff = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    riff += b"data" + struct.pack("<I", len(data)) + data
    (OUT / name).write_bytes(b"RIFF" + struct.pack("<I", len(riff)) + riff)
    print(f"{name}: {len(y)} samples")


def main() -> None:
    print(f"librosa {librosa.__version__}, soundfile {sf.__version__}", file=sys.stderr)
    for f in FIXTURES:
        y, sr = librosa.load(OUT / f, sr=None, mono=True)
        write("official-" + f.rsplit(".", 1)[0] + "-" + f.rsplit(".", 1)[1] + ".wav",
              librosa.resample(y, orig_sr=sr, target_sr=24_000))
    for rate in RATES:
        x = speech_like(rate // 2, rate)
        write(f"soxr-hq-{rate}.wav", librosa.resample(x, orig_sr=rate, target_sr=24_000))


if __name__ == "__main__":
    main()
