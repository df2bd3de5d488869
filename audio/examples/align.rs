//! Word timings of a WAV file and its text, streamed through the aligner
//! in chunks as the server streams audio: the harness of
//! `benches/timings_accuracy.sh` runs this per utterance.
//!
//! ```text
//! cargo run --release -p tts-audio --example align -- \
//!     --wav speech.wav --text-file speech.txt [--first-chunk-ms 160] [--chunk-ms 320] [--speed 1.0] \
//!     [--prime-wav earlier.wav --prime-text-file earlier.txt]
//! ```
//!
//! With a prime, the aligner first hears another utterance of the same
//! voice (as a server context's later segments follow its first); the
//! output is the second utterance's, its times from its own start.
//!
//! Prints `{"words": [{"text", "char_start", "char_end", "start_ms", "end_ms"}]}`.

use std::process::ExitCode;

use tts_audio::timing::{Aligner, Words};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("align: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let mut wav = None;
    let mut text_file = None;
    let mut first_ms = 160.0;
    let mut chunk_ms = 320.0;
    let mut speed = 1.0;
    let mut prime_wav = None;
    let mut prime_text = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--wav" => wav = Some(value("--wav")?),
            "--text-file" => text_file = Some(value("--text-file")?),
            "--first-chunk-ms" => first_ms = number(&value("--first-chunk-ms")?)?,
            "--chunk-ms" => chunk_ms = number(&value("--chunk-ms")?)?,
            "--speed" => speed = number(&value("--speed")?)?,
            "--prime-wav" => prime_wav = Some(value("--prime-wav")?),
            "--prime-text-file" => prime_text = Some(value("--prime-text-file")?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let wav = wav.ok_or("--wav is required")?;
    let text_file = text_file.ok_or("--text-file is required")?;
    let text = std::fs::read_to_string(&text_file).map_err(|e| format!("{text_file}: {e}"))?;
    let (samples, rate) = read_wav(&wav)?;
    let n = |ms: f64| ((ms / 1000.0 * rate as f64) as usize).max(1);

    let mut aligner = Aligner::new(rate, speed);
    let (mut t0, mut c0) = (0.0, 0);
    if let (Some(w), Some(t)) = (&prime_wav, &prime_text) {
        let (p, prate) = read_wav(w)?;
        if prate != rate {
            return Err(format!("{w} is at {prate} Hz, {wav} at {rate} Hz"));
        }
        let ptext = std::fs::read_to_string(t).map_err(|e| format!("{t}: {e}"))?;
        let mut sink = Vec::new();
        aligner.push_text(&ptext);
        aligner.push_audio(&p, &mut sink);
        aligner.end_utterance(&mut sink);
        t0 = aligner.audio_seconds();
        c0 = aligner.len();
    }
    let mut words = Words::default();
    let mut out_words = Vec::new();
    aligner.push_text(&text);
    let mut pos = 0;
    let mut first = true;
    while pos < samples.len() {
        let len = if first { n(first_ms) } else { n(chunk_ms) }.min(samples.len() - pos);
        first = false;
        let mut settled = Vec::new();
        aligner.push_audio(&samples[pos..pos + len], &mut settled);
        words.feed(&aligner, &settled, &mut out_words);
        pos += len;
    }
    let mut settled = Vec::new();
    aligner.finish(&mut settled);
    words.feed(&aligner, &settled, &mut out_words);
    words.finish(&mut out_words);

    let items: Vec<String> = out_words
        .iter()
        .map(|w| {
            format!(
                "{{\"text\": {}, \"char_start\": {}, \"char_end\": {}, \"start_ms\": {:.1}, \"end_ms\": {:.1}}}",
                json_string(&w.text),
                w.char_start - c0,
                w.char_end - c0,
                (w.start - t0) * 1000.0,
                (w.end - t0) * 1000.0
            )
        })
        .collect();
    println!("{{\"words\": [{}]}}", items.join(", "));
    Ok(())
}

/// A WAV file's first channel as samples in -1..1, and its rate.
fn read_wav(wav: &str) -> Result<(Vec<f32>, u32), String> {
    let mut reader = hound::WavReader::open(wav).map_err(|e| format!("{wav}: {e}"))?;
    let spec = reader.spec();
    let samples: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Int => {
            let scale = (1i64 << (spec.bits_per_sample - 1)) as f32;
            reader
                .samples::<i32>()
                .step_by(spec.channels as usize)
                .map(|s| s.map(|v| v as f32 / scale))
                .collect::<Result<_, _>>()
        }
        hound::SampleFormat::Float => reader
            .samples::<f32>()
            .step_by(spec.channels as usize)
            .collect::<Result<_, _>>(),
    }
    .map_err(|e| format!("{wav}: {e}"))?;
    Ok((samples, spec.sample_rate))
}

fn number(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or(format!("{s:?} is not a positive number"))
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
