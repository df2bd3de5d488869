//! The speaker encoder's front end: the official `mel_spectrogram` with its
//! fixed parameters (n_fft 1024, hop 256, periodic Hann 1024, 128 Slaney
//! mel bins over 0..12 kHz at 24 kHz, `center=False`).
//!
//! Steps, as the official code runs them in fp32:
//! 1. reflect-pad the signal by `(n_fft - hop) / 2 = 384` on both sides,
//!    PyTorch's reflect (the edge sample is not repeated);
//! 2. STFT frames `f` at `256 f .. 256 f + 1024` of the padded signal,
//!    windowed, one-sided real FFT; `F = floor(n / 256)` frames;
//! 3. `|X| = sqrt(re^2 + im^2 + 1e-9)`;
//! 4. `mel = basis @ |X|` with `basis = librosa.filters.mel(sr=24000,
//!    n_fft=1024, n_mels=128, fmin=0, fmax=12000)` (Slaney scale and
//!    area norm), built here the way librosa builds it;
//! 5. `log(max(mel, 1e-5))`.

use std::sync::OnceLock;

use realfft::RealFftPlanner;
use tts_kernels::{matmul, Mat};

use crate::error::{ModelError, Result};

/// FFT size and window length.
pub const N_FFT: usize = 1024;
/// Samples between frames.
pub const HOP: usize = 256;
/// Mel bins per frame.
pub const N_MELS: usize = 128;
/// One-sided spectrum bins: `N_FFT / 2 + 1`.
pub const N_BINS: usize = N_FFT / 2 + 1;
/// The rate the front end is defined at.
pub const SAMPLE_RATE: u32 = 24_000;
/// Reflect padding on each side: `(N_FFT - HOP) / 2`.
pub const PAD: usize = (N_FFT - HOP) / 2;
/// The shortest signal the front end takes: PyTorch's reflect pad must be
/// shorter than the signal (one frame results).
pub const MEL_MIN_SAMPLES: usize = PAD + 1;

const FMIN: f64 = 0.0;
const FMAX: f64 = 12_000.0;
const MAG_EPS: f64 = 1e-9;
const LOG_FLOOR: f32 = 1e-5;

/// A log-mel spectrogram, frame-major: `data[f * bins + m]` (the `[F, 128]`
/// layout the official encoder is fed).
#[derive(Clone, Debug, PartialEq)]
pub struct Mel {
    pub frames: usize,
    pub bins: usize,
    pub data: Vec<f32>,
}

impl Mel {
    /// Mel frame `f` (`bins` values).
    pub fn frame(&self, f: usize) -> &[f32] {
        &self.data[f * self.bins..(f + 1) * self.bins]
    }
}

/// Frames the front end makes of `n` samples: `floor(n / 256)`
/// (`(n + 2 * 384 - 1024) / 256 + 1`), for `n >= MEL_MIN_SAMPLES`.
pub fn frame_count(n: usize) -> usize {
    n / HOP
}

/// The official log-mel of 24 kHz mono `samples` (module docs). Refuses
/// fewer than [`MEL_MIN_SAMPLES`] samples and non-finite samples. Like the
/// official code it does not clip or normalise samples outside [-1, 1].
pub fn mel_spectrogram(samples: &[f32]) -> Result<Mel> {
    check_samples(samples, MEL_MIN_SAMPLES)?;
    let padded = reflect_pad(samples, PAD, PAD);
    let frames = frame_count(samples.len());
    let window = hann_window();
    let mut planner = RealFftPlanner::<f64>::new();
    let fft = planner.plan_fft_forward(N_FFT);
    let mut input = fft.make_input_vec();
    let mut spectrum = fft.make_output_vec();
    let mut scratch = fft.make_scratch_vec();
    let mut mags = vec![0f32; frames * N_BINS];
    for (f, mag) in mags.chunks_exact_mut(N_BINS).enumerate() {
        let seg = &padded[f * HOP..f * HOP + N_FFT];
        for ((i, &s), &w) in input.iter_mut().zip(seg).zip(window) {
            // The official windowing is an f32 product.
            *i = (s * w) as f64;
        }
        fft.process_with_scratch(&mut input, &mut spectrum, &mut scratch)
            .expect("buffers made by the plan");
        for (m, c) in mag.iter_mut().zip(&spectrum) {
            *m = (c.re * c.re + c.im * c.im + MAG_EPS).sqrt() as f32;
        }
    }
    let mut data = vec![0f32; frames * N_MELS];
    let basis = Mat::F32 {
        data: mel_basis(),
        rows: N_MELS,
        cols: N_BINS,
    };
    matmul(&mags, frames, &basis, None, &mut data);
    data.iter_mut().for_each(|v| *v = v.max(LOG_FLOOR).ln());
    Ok(Mel {
        frames,
        bins: N_MELS,
        data,
    })
}

/// Refuses a signal shorter than `min` samples or holding a non-finite one.
pub(super) fn check_samples(samples: &[f32], min: usize) -> Result<()> {
    if samples.len() < min {
        return Err(ModelError::ReferenceTooShort {
            samples: samples.len(),
            min,
        });
    }
    if let Some((index, &value)) = samples.iter().enumerate().find(|(_, s)| !s.is_finite()) {
        return Err(ModelError::NonFiniteAudio { index, value });
    }
    Ok(())
}

/// PyTorch `reflect` padding of one row: `x[-i] = x[i]`, `x[n-1+i] =
/// x[n-1-i]` (the edge is not repeated). Needs `left, right < x.len()`.
pub(crate) fn reflect_pad(x: &[f32], left: usize, right: usize) -> Vec<f32> {
    let n = x.len();
    debug_assert!(left < n.max(1) && right < n.max(1), "reflect pad too wide");
    let mut out = Vec::with_capacity(left + n + right);
    out.extend((1..=left).rev().map(|i| x[i]));
    out.extend_from_slice(x);
    out.extend((1..=right).map(|i| x[n - 1 - i]));
    out
}

/// `torch.hann_window(1024)` (periodic): `0.5 - 0.5 cos(2 pi n / 1024)`,
/// in f32 the way PyTorch evaluates it (`n * step`, `cos`, `* -0.5 + 0.5`).
pub fn hann_window() -> &'static [f32] {
    static W: OnceLock<Vec<f32>> = OnceLock::new();
    W.get_or_init(|| {
        let step = (2.0 * std::f64::consts::PI / N_FFT as f64) as f32;
        (0..N_FFT)
            .map(|n| (n as f32 * step).cos() * -0.5 + 0.5)
            .collect()
    })
}

/// The Slaney mel filterbank `[128, 513]`, row-major (built once).
pub fn mel_basis() -> &'static [f32] {
    static B: OnceLock<Vec<f32>> = OnceLock::new();
    B.get_or_init(|| slaney_filterbank(SAMPLE_RATE as f64, N_FFT, N_MELS, FMIN, FMAX))
}

/// `librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False,
/// norm="slaney")`, step for step: triangles between consecutive Slaney-mel
/// centre frequencies in f64, stored as f32, then each row scaled by
/// `2 / (f[i+2] - f[i])` in f64 and stored as f32 again (librosa's float32
/// `weights *= enorm`).
pub(crate) fn slaney_filterbank(
    sr: f64,
    n_fft: usize,
    n_mels: usize,
    fmin: f64,
    fmax: f64,
) -> Vec<f32> {
    let n_bins = n_fft / 2 + 1;
    // np.fft.rfftfreq(n_fft, 1 / sr)
    let val = 1.0 / (n_fft as f64 * (1.0 / sr));
    let fftfreqs: Vec<f64> = (0..n_bins).map(|i| i as f64 * val).collect();
    // mel_frequencies(n_mels + 2): np.linspace over the mel scale, back to Hz.
    let (lo, hi) = (hz_to_mel(fmin), hz_to_mel(fmax));
    let n = n_mels + 2;
    let step = (hi - lo) / (n - 1) as f64;
    let mel_f: Vec<f64> = (0..n)
        .map(|i| {
            let m = if i == n - 1 { hi } else { i as f64 * step + lo };
            mel_to_hz(m)
        })
        .collect();
    let mut weights = vec![0f32; n_mels * n_bins];
    for (i, row) in weights.chunks_exact_mut(n_bins).enumerate() {
        let (d0, d1) = (mel_f[i + 1] - mel_f[i], mel_f[i + 2] - mel_f[i + 1]);
        let enorm = 2.0 / (mel_f[i + 2] - mel_f[i]);
        for (w, &f) in row.iter_mut().zip(&fftfreqs) {
            let lower = -(mel_f[i] - f) / d0;
            let upper = (mel_f[i + 2] - f) / d1;
            let tri = 0f64.max(lower.min(upper)) as f32;
            *w = (tri as f64 * enorm) as f32;
        }
    }
    weights
}

// The Slaney mel scale (librosa, htk=False): linear below 1 kHz, log above.
const F_SP: f64 = 200.0 / 3.0;
const MIN_LOG_HZ: f64 = 1000.0;
const MIN_LOG_MEL: f64 = MIN_LOG_HZ / F_SP;

fn logstep() -> f64 {
    6.4f64.ln() / 27.0
}

pub(crate) fn hz_to_mel(f: f64) -> f64 {
    if f >= MIN_LOG_HZ {
        MIN_LOG_MEL + (f / MIN_LOG_HZ).ln() / logstep()
    } else {
        f / F_SP
    }
}

pub(crate) fn mel_to_hz(m: f64) -> f64 {
    if m >= MIN_LOG_MEL {
        MIN_LOG_HZ * (logstep() * (m - MIN_LOG_MEL)).exp()
    } else {
        F_SP * m
    }
}
