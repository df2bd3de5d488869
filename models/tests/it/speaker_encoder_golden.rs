//! The speaker encoder against the official qwen-tts 0.1.1 on the tiny-base
//! fixture (`tests/fixtures/goldens/tiny-base/encoders.safetensors`, fp32 on
//! the BF16-rounded weights): the log-mel front end and the x-vector of both
//! reference clips, each within rel-L2 1e-4 (`||got - want|| / ||want||`).

use std::path::{Path, PathBuf};

use tts_models::checkpoint::TensorStore;
use tts_models::config::TtsConfig;
use tts_models::speaker_encoder::{mel_spectrogram, SpeakerEncoder, PREFIX};

const TOL: f64 = 1e-4;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// An F32 golden tensor, flattened (the file also holds I64 codes, which
/// the checkpoint reader refuses, so it is read with safetensors directly).
fn golden(st: &safetensors::SafeTensors<'_>, name: &str) -> Vec<f32> {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("golden `{name}`: {e}"));
    assert_eq!(t.dtype(), safetensors::Dtype::F32, "{name}");
    t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (num / den).sqrt()
}

#[test]
fn tiny_base_mel_and_xvector_match_the_official_encoder() {
    let dir = fixtures().join("tiny-base");
    let cfg = TtsConfig::load(&dir.join("config.json")).unwrap();
    let spk_cfg = cfg.speaker_encoder.as_ref().expect("a Base config");
    let store = TensorStore::open_dir(&dir, "model").unwrap();
    let enc = SpeakerEncoder::load(&store, spk_cfg).unwrap();
    assert_eq!(enc.dim(), cfg.talker.lm.hidden_size);
    // Every `speaker_encoder.*` tensor was taken (the rest is the talker's).
    let others: Vec<String> = store
        .shapes()
        .keys()
        .filter(|k| !k.starts_with(&format!("{PREFIX}.")))
        .map(|k| k.to_string())
        .collect();
    others.iter().for_each(|k| store.ignore_prefix(k));
    store.finish().expect("all speaker encoder tensors used");

    let bytes = std::fs::read(fixtures().join("goldens/tiny-base/encoders.safetensors")).unwrap();
    let goldens = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for clip in ["ref_a", "ref_b"] {
        let samples = golden(&goldens, &format!("{clip}.samples"));
        let want_mel = golden(&goldens, &format!("{clip}.mel"));
        let want_x = golden(&goldens, &format!("{clip}.xvector"));

        let mel = mel_spectrogram(&samples).unwrap();
        assert_eq!(mel.frames, samples.len() / 256, "{clip}: frames");
        assert_eq!(mel.frames * mel.bins, want_mel.len(), "{clip}: mel shape");
        let e = rel_l2(&mel.data, &want_mel);
        assert!(e <= TOL, "{clip}: mel rel-L2 {e:e}");

        let x = enc.embed(&samples).unwrap();
        let e = rel_l2(&x, &want_x);
        assert!(e <= TOL, "{clip}: x-vector rel-L2 {e:e}");
        println!(
            "{clip}: mel rel-L2 {:e}, x-vector rel-L2 {e:e}",
            rel_l2(&mel.data, &want_mel)
        );
    }
}
