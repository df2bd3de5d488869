//! A context's word and character timings (`timings: true`): the
//! context's text as the client sent it placed in its audio
//! ([`tts_audio::timing::Transcript`]), and the protocol's shapes of what
//! each step settles. Times are from the start of the context's audio.

pub use tts_audio::timing::{Settled, Transcript as CtxTimings};

use crate::protocol::{CharTimings, WordTimingMsg};

/// The protocol's shapes of `s` (milliseconds).
pub fn to_msg(s: &Settled) -> (Vec<WordTimingMsg>, CharTimings) {
    let words = s
        .words
        .iter()
        .map(|w| WordTimingMsg {
            text: w.text.clone(),
            char_start: w.char_start,
            char_end: w.char_end,
            start_ms: ms(w.start),
            end_ms: ms(w.end),
        })
        .collect();
    let chars = CharTimings {
        index: s.chars.first().map_or(0, |c| c.index),
        chars: s.chars.iter().map(|c| c.ch.to_string()).collect(),
        start_ms: s.chars.iter().map(|c| ms(c.start)).collect(),
        end_ms: s.chars.iter().map(|c| ms(c.end)).collect(),
    };
    (words, chars)
}

fn ms(s: f64) -> f64 {
    (s * 10_000.0).round() / 10.0
}
