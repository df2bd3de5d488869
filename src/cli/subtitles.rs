//! `--timings-out FILE`: the words of what was spoken and when, beside the
//! audio — JSON, SubRip (`.srt`) or WebVTT (`.vtt`), chosen by the file's
//! extension. The timings are the server's (`tts_audio::timing`): the same
//! aligner, the same error (docs/timings-accuracy.md).
//!
//! Subtitle cues are lines of at most [`MAX_CUE_CHARS`] characters and
//! [`MAX_CUE_SECONDS`] seconds, cut after sentence ends and clause marks
//! first, at word boundaries always.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::json;
use tts_audio::timing::{CharTiming, Settled, Transcript, WordTiming};

use tts_transport::protocol::{CharTimings, WordTimingMsg};

use super::outfile::write_atomic;

pub(crate) const MAX_CUE_CHARS: usize = 42;
pub(crate) const MAX_CUE_SECONDS: f64 = 6.0;

/// What the file's extension asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Json,
    Srt,
    Vtt,
}

impl Kind {
    pub(crate) fn of(path: &Path) -> Result<Kind> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        Ok(match ext.as_deref() {
            Some("json") => Kind::Json,
            Some("srt") => Kind::Srt,
            Some("vtt") => Kind::Vtt,
            _ => bail!(
                "--timings-out {}: name the format by the extension: .json (words and \
                 characters), .srt (SubRip) or .vtt (WebVTT)",
                path.display()
            ),
        })
    }
}

/// Every word and character of `text`, timed.
#[derive(Default)]
pub(crate) struct Timed {
    pub words: Vec<WordTiming>,
    pub chars: Vec<CharTiming>,
}

impl Timed {
    pub(crate) fn add(&mut self, s: Settled) {
        self.words.extend(s.words);
        self.chars.extend(s.chars);
    }

    /// A server's `timings` event (milliseconds).
    pub(crate) fn add_message(&mut self, words: &[WordTimingMsg], chars: &CharTimings) {
        self.words.extend(words.iter().map(|w| WordTiming {
            text: w.text.clone(),
            char_start: w.char_start,
            char_end: w.char_end,
            start: w.start_ms / 1000.0,
            end: w.end_ms / 1000.0,
        }));
        for k in 0..chars
            .chars
            .len()
            .min(chars.start_ms.len())
            .min(chars.end_ms.len())
        {
            self.chars.push(CharTiming {
                index: chars.index + k,
                ch: chars.chars[k].chars().next().unwrap_or(' '),
                start: chars.start_ms[k] / 1000.0,
                end: chars.end_ms[k] / 1000.0,
            });
        }
    }
}

/// A run's text, timed as its audio is made.
pub(crate) struct Subtitler {
    transcript: Transcript,
    timed: Timed,
    text: String,
}

impl Subtitler {
    /// `text`: the whole text as given; audio at `rate` Hz.
    pub(crate) fn new(text: &str, rate: u32) -> Self {
        let mut transcript = Transcript::new(rate, 1.0);
        transcript.append(text);
        Subtitler {
            transcript,
            timed: Timed::default(),
            text: text.to_string(),
        }
    }

    /// The next request speaks `piece`.
    pub(crate) fn piece(&mut self, piece: &str) {
        self.transcript.speak(piece);
    }

    pub(crate) fn audio(&mut self, samples: &[f32]) {
        let s = self.transcript.audio(samples);
        self.timed.add(s);
    }

    /// The request is done: its text is all in the audio so far.
    pub(crate) fn piece_done(&mut self) {
        let s = self.transcript.utterance_done();
        self.timed.add(s);
    }

    /// Times what is left and writes `path`.
    pub(crate) fn write(mut self, path: &Path) -> Result<()> {
        let s = self.transcript.finish();
        self.timed.add(s);
        write(
            path,
            &self.text,
            self.transcript.audio_seconds(),
            &self.timed,
        )
    }
}

/// Writes `t` (timings of `text`, `audio_s` seconds of audio) to `path` in
/// the format its extension names (atomically: a failure leaves an
/// existing file as it was).
pub(crate) fn write(path: &Path, text: &str, audio_s: f64, t: &Timed) -> Result<()> {
    let body = match Kind::of(path)? {
        Kind::Json => json_of(text, audio_s, t),
        Kind::Srt => cues_text(&cues(&t.words), Kind::Srt),
        Kind::Vtt => cues_text(&cues(&t.words), Kind::Vtt),
    };
    write_atomic(path, body.as_bytes())
}

fn json_of(text: &str, audio_s: f64, t: &Timed) -> String {
    let words: Vec<_> = t
        .words
        .iter()
        .map(|w| {
            json!({"text": w.text, "start": round(w.start), "end": round(w.end),
                   "char_start": w.char_start, "char_end": w.char_end})
        })
        .collect();
    let v = json!({
        "text": text,
        "audio_seconds": round(audio_s),
        "words": words,
        "characters": {
            "chars": t.chars.iter().map(|c| c.ch.to_string()).collect::<Vec<_>>(),
            "start": t.chars.iter().map(|c| round(c.start)).collect::<Vec<_>>(),
            "end": t.chars.iter().map(|c| round(c.end)).collect::<Vec<_>>(),
        },
    });
    let mut s = serde_json::to_string_pretty(&v).expect("JSON values serialize");
    s.push('\n');
    s
}

fn round(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

/// One subtitle: its text and its time.
#[derive(Debug, PartialEq)]
pub(crate) struct Cue {
    pub text: String,
    pub start: f64,
    pub end: f64,
}

/// Words grouped into cues (see the module docs).
pub(crate) fn cues(words: &[WordTiming]) -> Vec<Cue> {
    let mut out: Vec<Cue> = Vec::new();
    let mut cur: Option<Cue> = None;
    for w in words {
        if let Some(c) = &cur {
            let len = c.text.chars().count() + 1 + w.text.chars().count();
            if len > MAX_CUE_CHARS || w.end - c.start > MAX_CUE_SECONDS {
                out.push(cur.take().expect("open cue"));
            }
        }
        match &mut cur {
            Some(c) => {
                c.text.push(' ');
                c.text.push_str(&w.text);
                c.end = w.end;
            }
            None => {
                cur = Some(Cue {
                    text: w.text.clone(),
                    start: w.start,
                    end: w.end,
                })
            }
        }
        let ends_sentence = w.text.ends_with(['.', '!', '?', '。', '！', '？', '…']);
        let ends_clause = w.text.ends_with([',', ';', ':', '，', '；', '：']);
        let long_enough = cur
            .as_ref()
            .is_some_and(|c| c.text.chars().count() >= MAX_CUE_CHARS / 2);
        if ends_sentence || (ends_clause && long_enough) {
            out.push(cur.take().expect("open cue"));
        }
    }
    out.extend(cur);
    out
}

fn stamp(s: f64, kind: Kind) -> String {
    let ms = (s.max(0.0) * 1000.0).round() as u64;
    let (h, m, sec, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let sep = if kind == Kind::Srt { ',' } else { '.' };
    format!("{h:02}:{m:02}:{sec:02}{sep}{ms:03}")
}

fn cues_text(cues: &[Cue], kind: Kind) -> String {
    let mut s = String::new();
    if kind == Kind::Vtt {
        s.push_str("WEBVTT\n\n");
    }
    for (i, c) in cues.iter().enumerate() {
        if kind == Kind::Srt {
            s.push_str(&format!("{}\n", i + 1));
        }
        // A cue shown for no time at all is still shown a moment.
        let end = c.end.max(c.start + 0.001);
        s.push_str(&format!(
            "{} --> {}\n",
            stamp(c.start, kind),
            stamp(end, kind)
        ));
        s.push_str(&c.text.replace("-->", "->"));
        s.push_str("\n\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(text: &str, start: f64, end: f64) -> WordTiming {
        WordTiming {
            text: text.into(),
            char_start: 0,
            char_end: text.chars().count(),
            start,
            end,
        }
    }

    #[test]
    fn cues_cut_at_sentences_and_length() {
        let words = vec![
            w("Hello", 0.1, 0.4),
            w("there.", 0.45, 0.8),
            w("This", 1.2, 1.4),
            w("line", 1.4, 1.6),
            w("is", 1.6, 1.7),
            w("much", 1.7, 1.9),
            w("longer", 1.9, 2.2),
            w("than", 2.2, 2.4),
            w("forty-two", 2.4, 2.9),
            w("characters", 2.9, 3.4),
        ];
        let c = cues(&words);
        assert_eq!(c[0].text, "Hello there.");
        assert_eq!((c[0].start, c[0].end), (0.1, 0.8));
        assert!(c.iter().all(|c| c.text.chars().count() <= MAX_CUE_CHARS));
        let all: Vec<&str> = c.iter().flat_map(|c| c.text.split(' ')).collect();
        assert_eq!(all.len(), words.len(), "every word once");
    }

    #[test]
    fn srt_and_vtt_stamps() {
        let c = vec![Cue {
            text: "Hi.".into(),
            start: 3661.5,
            end: 3662.25,
        }];
        assert_eq!(
            cues_text(&c, Kind::Srt),
            "1\n01:01:01,500 --> 01:01:02,250\nHi.\n\n"
        );
        assert_eq!(
            cues_text(&c, Kind::Vtt),
            "WEBVTT\n\n01:01:01.500 --> 01:01:02.250\nHi.\n\n"
        );
    }

    #[test]
    fn the_extension_names_the_format() {
        assert_eq!(Kind::of(Path::new("a.SRT")).unwrap(), Kind::Srt);
        assert_eq!(Kind::of(Path::new("a.vtt")).unwrap(), Kind::Vtt);
        assert_eq!(Kind::of(Path::new("a.json")).unwrap(), Kind::Json);
        let e = Kind::of(Path::new("a.txt")).unwrap_err().to_string();
        assert!(e.contains(".srt") && e.contains("a.txt"), "{e}");
    }
}
