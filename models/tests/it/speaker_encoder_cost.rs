//! Cost of `SpeakerEncoder::embed` at the official size (E = 1024, random
//! bf16 weights written to a temp checkpoint) on 3, 10 and 20 s of audio.
//! Ignored: a timing, not a check. Run it alone on a quiet machine:
//! `cargo test -p tts-models --test it speaker_encoder_cost -- --ignored --nocapture`
//! (the design's reference point: official torch fp32, 2 threads, warm,
//! 48 / 94 / 193 ms).

use std::time::Instant;

use safetensors::tensor::TensorView;
use safetensors::Dtype;
use tts_models::checkpoint::TensorStore;
use tts_models::config::SpeakerEncoderConfig;
use tts_models::speaker_encoder::SpeakerEncoder;

/// The official module's tensors for `cfg` (names and shapes).
fn tensors(cfg: &SpeakerEncoderConfig) -> Vec<(String, Vec<usize>)> {
    let mut t = Vec::new();
    let mut conv = |name: String, cout: usize, cin: usize, k: usize| {
        t.push((format!("{name}.weight"), vec![cout, cin, k]));
        t.push((format!("{name}.bias"), vec![cout]));
    };
    let p = "speaker_encoder";
    let c0 = cfg.enc_channels[0];
    conv(
        format!("{p}.blocks.0.conv"),
        c0,
        128,
        cfg.enc_kernel_sizes[0],
    );
    let scale = cfg.enc_res2net_scale;
    for (i, (c, k, _)) in cfg.res2net_blocks().enumerate() {
        let b = format!("{p}.blocks.{}", i + 1);
        conv(format!("{b}.tdnn1.conv"), c, c, 1);
        for j in 0..scale - 1 {
            let part = c / scale;
            conv(format!("{b}.res2net_block.blocks.{j}.conv"), part, part, k);
        }
        conv(format!("{b}.tdnn2.conv"), c, c, 1);
        conv(format!("{b}.se_block.conv1"), cfg.enc_se_channels, c, 1);
        conv(format!("{b}.se_block.conv2"), c, cfg.enc_se_channels, 1);
    }
    let (m, att) = (cfg.mfa_channels(), cfg.enc_attention_channels);
    conv(format!("{p}.mfa.conv"), m, m, 1);
    conv(format!("{p}.asp.tdnn.conv"), att, 3 * m, 1);
    conv(format!("{p}.asp.conv"), m, att, 1);
    conv(format!("{p}.fc"), cfg.enc_dim, 2 * m, 1);
    t
}

#[test]
#[ignore = "timing; run alone with --ignored --nocapture"]
fn embed_cost_at_the_official_size() {
    let cfg = SpeakerEncoderConfig::default();
    let shapes = tensors(&cfg);
    let mut x = 0x9e37_79b9_u64;
    let bytes: Vec<Vec<u8>> = shapes
        .iter()
        .map(|(_, s)| {
            let fan_in = s.iter().skip(1).product::<usize>().max(1) as f32;
            (0..s.iter().product::<usize>())
                .flat_map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let u = (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                    tts_kernels::f32_to_bf16(u * (3.0 / fan_in).sqrt()).to_le_bytes()
                })
                .collect()
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = shapes
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
        "tts-rt-spkenc-cost-{}.safetensors",
        std::process::id()
    ));
    std::fs::write(&path, safetensors::serialize(views, &None).unwrap()).unwrap();
    let store = TensorStore::open_files(std::slice::from_ref(&path)).unwrap();
    let enc = SpeakerEncoder::load(&store, &cfg).unwrap();
    std::fs::remove_file(&path).ok();
    let audio = |secs: usize| -> Vec<f32> {
        (0..secs * 24_000)
            .map(|i| 0.3 * (i as f32 * 0.0577).sin() + 0.05 * (i as f32 * 1.3).sin())
            .collect()
    };
    enc.embed(&audio(1)).unwrap(); // warm-up
    for secs in [3, 10, 20] {
        let a = audio(secs);
        let t = Instant::now();
        let v = enc.embed(&a).unwrap();
        println!(
            "embed {secs:>2} s: {:>7.1} ms ({} frames, x-vector [{}])",
            t.elapsed().as_secs_f64() * 1e3,
            a.len() / 256,
            v.len()
        );
    }
}
