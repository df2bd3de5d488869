//! A deterministic speech-like clip, for benchmarks and tools that need a
//! reference voice without a recording (`tts-rt bench`, `tts-rt fidelity`).

/// `seconds` of a deterministic speech-like signal at 24 kHz: a gliding
/// voiced tone (harmonics of a 100–180 Hz pitch with a formant-like
/// envelope), syllables at about 4 Hz, and a little noise.
pub fn synthetic_speech(seconds: f64) -> Vec<f32> {
    let n = (seconds * 24_000.0).round() as usize;
    let mut state: u32 = 0x1234_5678;
    let mut phase = 0.0f64;
    (0..n)
        .map(|i| {
            let t = i as f64 / 24_000.0;
            let f0 = 140.0 + 40.0 * (std::f64::consts::TAU * 0.3 * t).sin();
            phase += std::f64::consts::TAU * f0 / 24_000.0;
            let voiced: f64 = (1..=12)
                .map(|h| {
                    let hf = h as f64 * f0;
                    let formant = (-((hf - 700.0) / 500.0).powi(2)).exp()
                        + 0.5 * (-((hf - 1800.0) / 600.0).powi(2)).exp();
                    formant * (h as f64 * phase).sin()
                })
                .sum();
            let syllable = (std::f64::consts::TAU * 4.0 * t).sin().max(0.0).powf(0.7);
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (state >> 8) as f64 / (1u32 << 24) as f64 - 0.5;
            (0.12 * syllable * voiced + 0.01 * noise) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_speech_is_deterministic_bounded_and_not_silent() {
        let a = synthetic_speech(1.0);
        assert_eq!(a.len(), 24_000);
        assert_eq!(a, synthetic_speech(1.0));
        let peak = a.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(peak > 0.1 && peak < 1.0, "peak {peak}");
    }
}
