//! Front-end properties that need no goldens (the filterbank against values
//! librosa 0.11 prints, the window, frame counts, reflect padding, length
//! and sample checks) and the encoder's loading and input checks on a small
//! random checkpoint written here.

use std::path::PathBuf;

use safetensors::tensor::TensorView;
use safetensors::Dtype;

use super::mel::{reflect_pad, slaney_filterbank};
use super::*;
use crate::error::ModelError;

#[test]
fn filterbank_matches_librosa_entries() {
    let b = mel_basis();
    assert_eq!(b.len(), N_MELS * N_BINS);
    // `librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0,
    // fmax=12000)[i, j].view(uint32)`.
    for (i, j, bits) in [
        (0, 1, 1024027692u32),
        (0, 2, 1007445335),
        (1, 2, 1022344963),
        (1, 3, 1012045826),
        (10, 12, 1019655001),
        (64, 100, 0),
        (127, 480, 0),
        (127, 500, 993227360),
    ] {
        let got = b[i * N_BINS + j];
        assert_eq!(
            got.to_bits(),
            bits,
            "[{i}, {j}] = {got}, librosa {}",
            f32::from_bits(bits)
        );
    }
    // librosa: rows 0, 1, 50 and 127 are non-zero exactly on these bins.
    for (row, first, last) in [(0, 1, 2), (1, 2, 3), (50, 60, 62), (127, 485, 511)] {
        let r = &b[row * N_BINS..(row + 1) * N_BINS];
        let nz: Vec<usize> = (0..N_BINS).filter(|&k| r[k] != 0.0).collect();
        assert_eq!(
            (nz[0], *nz.last().unwrap()),
            (first, last),
            "row {row} support"
        );
    }
}

#[test]
fn slaney_triangles_have_unit_area() {
    let b = mel_basis();
    let df = SAMPLE_RATE as f64 / N_FFT as f64;
    for (i, row) in b.chunks_exact(N_BINS).enumerate() {
        assert!(
            row.iter().all(|&w| w >= 0.0),
            "row {i} has a negative weight"
        );
        // The area norm makes each triangle integrate to 1 over Hz; sampled
        // on the 23.4 Hz bin grid the narrow low triangles land within 8%
        // (librosa: 0.926 ..= 1.080), the wide ones (rows 100..) within 0.5%.
        let area: f64 = row.iter().map(|&w| w as f64).sum::<f64>() * df;
        assert!((0.92..=1.08).contains(&area), "row {i}: area {area}");
        if i >= 100 {
            assert!((area - 1.0).abs() < 5e-3, "row {i}: area {area}");
        }
    }
    // The centres rise: each row's peak bin is at or after the previous one's.
    let peak = |r: &[f32]| (0..r.len()).max_by(|&a, &c| r[a].total_cmp(&r[c])).unwrap();
    let peaks: Vec<usize> = b.chunks_exact(N_BINS).map(peak).collect();
    assert!(peaks.windows(2).all(|w| w[0] <= w[1]), "{peaks:?}");
    // Another size is built by the same function (HTK-free Slaney scale).
    let small = slaney_filterbank(16_000.0, 512, 40, 0.0, 8000.0);
    assert_eq!(small.len(), 40 * 257);
}

#[test]
fn hann_window_is_periodic() {
    let w = hann_window();
    assert_eq!(w.len(), N_FFT);
    assert_eq!(w[0], 0.0);
    assert_eq!(w[N_FFT / 2], 1.0);
    for n in 1..N_FFT {
        assert!(
            (w[n] - w[N_FFT - n]).abs() < 1e-6,
            "w[{n}] != w[{}]",
            N_FFT - n
        );
    }
}

#[test]
fn reflect_pad_mirrors_without_repeating_the_edge() {
    let ramp = [0.0, 1.0, 2.0, 3.0, 4.0];
    assert_eq!(
        reflect_pad(&ramp, 2, 3),
        [2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 3.0, 2.0, 1.0]
    );
    assert_eq!(reflect_pad(&ramp, 4, 4).len(), 13);
    assert_eq!(reflect_pad(&ramp, 0, 0), ramp);
}

fn tone(n: usize, hz: f64) -> Vec<f32> {
    (0..n)
        .map(|i| (0.5 * (2.0 * std::f64::consts::PI * hz * i as f64 / 24_000.0).sin()) as f32)
        .collect()
}

#[test]
fn frame_count_is_floor_n_over_hop() {
    for n in [385, 511, 512, 767, 768, 1280, 4000, 76_800] {
        let mel = mel_spectrogram(&tone(n, 440.0)).unwrap();
        assert_eq!(mel.frames, n / 256, "{n} samples");
        assert_eq!(frame_count(n), n / 256);
        assert_eq!(mel.bins, N_MELS);
        assert_eq!(mel.data.len(), mel.frames * N_MELS);
    }
    assert_eq!(frame_count(76_800), 300);
}

#[test]
fn a_tone_peaks_in_its_mel_band_and_silence_hits_the_floor() {
    // 3 kHz: the band whose triangle weighs bin 128 (3000 Hz) most.
    let mel = mel_spectrogram(&tone(4096, 3000.0)).unwrap();
    let b = mel_basis();
    let want = (0..N_MELS)
        .max_by(|&x, &y| b[x * N_BINS + 128].total_cmp(&b[y * N_BINS + 128]))
        .unwrap();
    for f in 0..mel.frames {
        let frame = mel.frame(f);
        let got = (0..N_MELS)
            .max_by(|&x, &y| frame[x].total_cmp(&frame[y]))
            .unwrap();
        assert!(
            got.abs_diff(want) <= 1,
            "frame {f}: band {got}, want {want}"
        );
    }
    // Silence: |X| = sqrt(1e-9) per bin; the log floor 1e-5 binds only
    // where the band's weights sum below 1e-5 / sqrt(1e-9), i.e. nowhere,
    // so each band is log(sqrt(1e-9) * sum of its weights).
    let mel = mel_spectrogram(&vec![0.0; 1024]).unwrap();
    for m in 0..N_MELS {
        let s: f32 = b[m * N_BINS..(m + 1) * N_BINS].iter().sum();
        let want = (1e-9f64.sqrt() as f32 * s).max(1e-5).ln();
        assert!((mel.frame(0)[m] - want).abs() < 1e-4, "band {m}");
    }
}

#[test]
fn short_or_non_finite_input_is_a_typed_error() {
    match mel_spectrogram(&[0.0; 384]) {
        Err(ModelError::ReferenceTooShort { samples, min }) => {
            assert_eq!((samples, min), (384, MEL_MIN_SAMPLES));
        }
        other => panic!("expected ReferenceTooShort, got {other:?}"),
    }
    let mut x = tone(2000, 100.0);
    x[1234] = f32::NAN;
    match mel_spectrogram(&x) {
        Err(ModelError::NonFiniteAudio { index, .. }) => assert_eq!(index, 1234),
        other => panic!("expected NonFiniteAudio, got {other:?}"),
    }
}

/// A small config exercising every part: 2 SE-Res2Net blocks (scale 4),
/// an MFA kernel of 3, and a block with kernel 5, dilation 3 (pad 6).
fn small_config() -> SpeakerEncoderConfig {
    SpeakerEncoderConfig {
        mel_dim: 128,
        enc_dim: 6,
        enc_channels: vec![8, 8, 8, 16],
        enc_kernel_sizes: vec![5, 3, 5, 3],
        enc_dilations: vec![1, 2, 3, 1],
        enc_attention_channels: 4,
        enc_res2net_scale: 4,
        enc_se_channels: 3,
        sample_rate: 24_000,
    }
}

/// Every tensor the official module has for `cfg`: name and shape.
fn official_tensors(cfg: &SpeakerEncoderConfig) -> Vec<(String, Vec<usize>)> {
    let mut t = Vec::new();
    let mut conv = |name: String, cout: usize, cin: usize, k: usize| {
        t.push((format!("{name}.weight"), vec![cout, cin, k]));
        t.push((format!("{name}.bias"), vec![cout]));
    };
    let ch = &cfg.enc_channels;
    let p = "speaker_encoder";
    conv(
        format!("{p}.blocks.0.conv"),
        ch[0],
        128,
        cfg.enc_kernel_sizes[0],
    );
    for (i, (c, k, _)) in cfg.res2net_blocks().enumerate() {
        let b = format!("{p}.blocks.{}", i + 1);
        let part = c / cfg.enc_res2net_scale;
        conv(format!("{b}.tdnn1.conv"), c, c, 1);
        for j in 0..cfg.enc_res2net_scale - 1 {
            conv(format!("{b}.res2net_block.blocks.{j}.conv"), part, part, k);
        }
        conv(format!("{b}.tdnn2.conv"), c, c, 1);
        conv(format!("{b}.se_block.conv1"), cfg.enc_se_channels, c, 1);
        conv(format!("{b}.se_block.conv2"), c, cfg.enc_se_channels, 1);
    }
    let m = cfg.mfa_channels();
    conv(
        format!("{p}.mfa.conv"),
        m,
        m,
        *cfg.enc_kernel_sizes.last().unwrap(),
    );
    conv(
        format!("{p}.asp.tdnn.conv"),
        cfg.enc_attention_channels,
        3 * m,
        1,
    );
    conv(format!("{p}.asp.conv"), m, cfg.enc_attention_channels, 1);
    conv(format!("{p}.fc"), cfg.enc_dim, 2 * m, 1);
    t
}

/// Writes `tensors` (random bf16 values, N(0, ~1/fan_in)-ish) to a temp
/// safetensors file and opens it.
fn random_store(tag: &str, tensors: &[(String, Vec<usize>)]) -> (TensorStore, PathBuf) {
    let mut x = 0x5eed_u64 ^ tag.len() as u64;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, shape)| {
            let fan_in: usize = shape.iter().skip(1).product::<usize>().max(1);
            let scale = (3.0 / fan_in as f32).sqrt();
            (0..shape.iter().product::<usize>())
                .flat_map(|_| tts_kernels::f32_to_bf16(next() * scale).to_le_bytes())
                .collect()
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s), b)| {
            (
                n.clone(),
                TensorView::new(Dtype::BF16, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let path = std::env::temp_dir().join(format!(
        "tts-rt-spkenc-{}-{tag}.safetensors",
        std::process::id()
    ));
    std::fs::write(&path, safetensors::serialize(views, &None).unwrap()).unwrap();
    let store = TensorStore::open_files(std::slice::from_ref(&path)).unwrap();
    (store, path)
}

#[test]
fn loads_every_tensor_and_embeds_to_enc_dim() {
    let cfg = small_config();
    let (store, path) = random_store("ok", &official_tensors(&cfg));
    let enc = SpeakerEncoder::load(&store, &cfg).unwrap();
    // Every tensor was taken, and the store is still the caller's.
    store.finish().unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(enc.dim(), 6);
    // Largest pad: kernel 5, dilation 3 -> 6 frames, so 7 frames.
    assert_eq!(enc.min_samples(), 7 * HOP);
    let x = enc.embed(&tone(7 * HOP, 220.0)).unwrap();
    assert_eq!(x.len(), 6);
    assert!(x.iter().all(|v| v.is_finite()), "{x:?}");
    // Deterministic, and input-dependent.
    let a = enc.embed(&tone(24_000, 220.0)).unwrap();
    assert_eq!(a, enc.embed(&tone(24_000, 220.0)).unwrap());
    assert_ne!(a, enc.embed(&tone(24_000, 1500.0)).unwrap());
    match enc.embed(&tone(7 * HOP - 1, 220.0)) {
        Err(e @ ModelError::ReferenceTooShort { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&format!("{}", 7 * HOP - 1)), "{msg}");
            assert!(msg.contains(&format!("{}", 7 * HOP)), "{msg}");
        }
        other => panic!("expected ReferenceTooShort, got {other:?}"),
    }
}

#[test]
fn official_config_needs_min_samples() {
    let cfg = SpeakerEncoderConfig::default();
    assert_eq!(cfg.min_frames() * HOP, MIN_SAMPLES);
    assert_eq!(MIN_SAMPLES, 1280);
}

#[test]
fn missing_or_misshapen_tensors_are_named() {
    let cfg = small_config();
    let mut tensors = official_tensors(&cfg);
    let gone = "speaker_encoder.blocks.2.res2net_block.blocks.1.conv.weight";
    tensors.retain(|(n, _)| n != gone);
    let (store, path) = random_store("missing", &tensors);
    match SpeakerEncoder::load(&store, &cfg) {
        Err(ModelError::MissingTensor { tensor, expected }) => {
            assert_eq!((tensor.as_str(), expected), (gone, vec![2, 2, 5]));
        }
        other => panic!("expected MissingTensor, got {:?}", other.err()),
    }
    std::fs::remove_file(&path).ok();
    let mut tensors = official_tensors(&cfg);
    for (n, s) in &mut tensors {
        if n == "speaker_encoder.fc.weight" {
            *s = vec![7, 32, 1];
        }
    }
    let (store, path) = random_store("shape", &tensors);
    match SpeakerEncoder::load(&store, &cfg) {
        Err(ModelError::ShapeMismatch {
            tensor,
            expected,
            actual,
        }) => {
            assert_eq!(tensor, "speaker_encoder.fc.weight");
            assert_eq!((expected, actual), (vec![6, 32, 1], vec![7, 32, 1]));
        }
        other => panic!("expected ShapeMismatch, got {:?}", other.err()),
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn official_sizes_have_the_hub_tensor_set() {
    // Design §1.3: 76 tensors; 8,854,336 parameters at E = 1024 and
    // 12,001,088 at E = 2048 (all but `fc` size-independent).
    for (enc_dim, params) in [(1024, 8_854_336usize), (2048, 12_001_088)] {
        let cfg = SpeakerEncoderConfig {
            enc_dim,
            ..SpeakerEncoderConfig::default()
        };
        let t = official_tensors(&cfg);
        assert_eq!(t.len(), 76);
        let n: usize = t.iter().map(|(_, s)| s.iter().product::<usize>()).sum();
        assert_eq!(n, params, "E = {enc_dim}");
    }
}
