//! Audio with its characters' timings, as ElevenLabs' `with-timestamps`
//! routes answer: `{"audio_base64", "alignment", "normalized_alignment"}`,
//! each alignment `{"characters", "character_start_times_seconds",
//! "character_end_times_seconds"}` in seconds from the start of the
//! request's audio. One object for the whole request
//! ([`Timestamps::Whole`]), or one per line as the audio is made
//! ([`Timestamps::Lines`]: each line's characters are those its audio
//! completes). The text is not normalized: both alignments are the same.
//!
//! The timings are read from the audio before `speed` stretches it, and
//! scaled by it (the stretch maps time linearly).

use tts_audio::timing::{CharTiming, Transcript};

use crate::protocol;

use super::format::Timestamps;

pub(super) struct Stamped {
    mode: Timestamps,
    transcript: Transcript,
    speed: f64,
    /// Characters timed and not yet sent.
    chars: Vec<CharTiming>,
    /// Encoded audio not yet sent (all of it, for `Whole`).
    audio: Vec<u8>,
}

impl Stamped {
    pub(super) fn new(mode: Timestamps, text: &str, rate: u32, speed: f32) -> Self {
        let mut transcript = Transcript::new(rate, 1.0);
        transcript.append(text);
        transcript.speak(text);
        Stamped {
            mode,
            transcript,
            speed: f64::from(speed).max(0.01),
            chars: Vec::new(),
            audio: Vec::new(),
        }
    }

    /// The next chunk: `samples` (before the speed change) encoded as
    /// `bytes`; what to send now (nothing for `Whole`, or while the codec
    /// holds its audio).
    pub(super) fn chunk(&mut self, samples: &[f32], bytes: Vec<u8>) -> Vec<u8> {
        let s = self.transcript.audio(samples);
        self.chars.extend(s.chars);
        self.audio.extend(bytes);
        match self.mode {
            Timestamps::Whole => Vec::new(),
            Timestamps::Lines if self.audio.is_empty() => Vec::new(),
            Timestamps::Lines => self.line(),
        }
    }

    /// The request is done; `bytes`: the encoder's last. The last line,
    /// or the whole answer.
    pub(super) fn finish(&mut self, bytes: Vec<u8>) -> Vec<u8> {
        self.audio.extend(bytes);
        let s = self.transcript.utterance_done();
        self.chars.extend(s.chars);
        let s = self.transcript.finish();
        self.chars.extend(s.chars);
        if self.audio.is_empty() && self.chars.is_empty() {
            return Vec::new();
        }
        match self.mode {
            Timestamps::Whole => {
                let mut v = self.object().to_string().into_bytes();
                v.push(b'\n');
                v
            }
            Timestamps::Lines => self.line(),
        }
    }

    fn line(&mut self) -> Vec<u8> {
        let mut v = self.object().to_string().into_bytes();
        v.push(b'\n');
        self.audio.clear();
        self.chars.clear();
        v
    }

    fn object(&self) -> serde_json::Value {
        let alignment = (!self.chars.is_empty()).then(|| {
            let secs = |t: f64| (t / self.speed * 1000.0).round() / 1000.0;
            serde_json::json!({
                "characters": self.chars.iter().map(|c| c.ch.to_string()).collect::<Vec<_>>(),
                "character_start_times_seconds": self.chars.iter().map(|c| secs(c.start)).collect::<Vec<_>>(),
                "character_end_times_seconds": self.chars.iter().map(|c| secs(c.end)).collect::<Vec<_>>(),
            })
        });
        serde_json::json!({
            "audio_base64": protocol::base64_encode(&self.audio),
            "alignment": alignment,
            "normalized_alignment": alignment,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(n: usize) -> Vec<f32> {
        (0..n).map(|i| 0.3 * (i as f32 * 0.05).sin()).collect()
    }

    fn chars_of(v: &serde_json::Value) -> String {
        v["alignment"]["characters"]
            .as_array()
            .map(|a| a.iter().map(|c| c.as_str().unwrap()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn lines_carry_their_characters_and_cover_the_text_once() {
        let text = "Two words.";
        let mut s = Stamped::new(Timestamps::Lines, text, 16000, 1.0);
        let mut lines = Vec::new();
        for _ in 0..4 {
            let out = s.chunk(&tone(4000), vec![1, 2, 3]);
            lines.push(out);
        }
        lines.push(s.finish(vec![9]));
        let mut chars = String::new();
        for l in lines.iter().filter(|l| !l.is_empty()) {
            assert_eq!(l.last(), Some(&b'\n'));
            let v: serde_json::Value = serde_json::from_slice(l).unwrap();
            assert_eq!(v["alignment"], v["normalized_alignment"]);
            chars.push_str(&chars_of(&v));
        }
        assert_eq!(chars, text);
    }

    #[test]
    fn whole_is_one_object_with_every_character_scaled_by_speed() {
        let text = "Say it fast.";
        let mut s = Stamped::new(Timestamps::Whole, text, 16000, 2.0);
        assert!(s.chunk(&tone(16000), vec![1]).is_empty());
        let v: serde_json::Value = serde_json::from_slice(&s.finish(vec![2])).unwrap();
        assert_eq!(chars_of(&v), text);
        let ends = v["alignment"]["character_end_times_seconds"]
            .as_array()
            .unwrap();
        let last = ends.last().unwrap().as_f64().unwrap();
        assert!(
            last <= 0.5 + 1e-3,
            "1 s of audio at speed 2 is 0.5 s: {last}"
        );
        assert_eq!(v["audio_base64"], protocol::base64_encode(&[1, 2]));
    }
}
