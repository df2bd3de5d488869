//! The progress line of a long job (`speak` to a file, `fidelity`), on
//! stderr and rewritten in place: audio seconds made and the real-time
//! factor so far. Drawn only when stderr is a terminal: on a pipe or in a
//! log file nothing is printed (a line rewritten with `\r` is noise there).
//! Downloads draw their own (bytes; `download.rs`), `gen-checkpoint` its
//! own (MB written).

use std::cell::Cell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Redraws at most this often: enough to look alive, nothing next to a
/// frame's work.
const REDRAW: Duration = Duration::from_millis(250);

pub(crate) struct Progress {
    on: bool,
    label: String,
    start: Instant,
    last: Cell<Option<Instant>>,
    drawn: Cell<bool>,
}

impl Progress {
    /// A progress line labelled `label`, drawn when stderr is a terminal.
    pub(crate) fn stderr(label: impl Into<String>) -> Self {
        Progress::new(std::io::stderr().is_terminal(), label)
    }

    /// `on`: whether to draw at all.
    pub(crate) fn new(on: bool, label: impl Into<String>) -> Self {
        Progress {
            on,
            label: label.into(),
            start: Instant::now(),
            last: Cell::new(None),
            drawn: Cell::new(false),
        }
    }

    /// Seconds since the line was made.
    pub(crate) fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// `audio_s` seconds of audio made so far, with the rtf since the start.
    pub(crate) fn audio(&self, audio_s: f64) {
        if self.on {
            self.show(&audio_text(audio_s, self.elapsed()));
        }
    }

    /// Any text after the label (throttled like the rest).
    pub(crate) fn show(&self, text: &str) {
        if !self.on || self.last.get().is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        self.last.set(Some(Instant::now()));
        eprint!("\r\x1b[K{}: {text}", self.label);
        self.drawn.set(true);
    }

    /// Ends the line (if one was drawn), so what follows starts on its own.
    pub(crate) fn finish(&self) {
        if self.drawn.replace(false) {
            eprint!("\r\x1b[K");
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `12.4 s of audio in 6.1 s (rtf 0.49)`: rtf = seconds spent / seconds
/// made (below 1 is faster than real time); none before any audio.
pub(crate) fn audio_text(audio_s: f64, elapsed_s: f64) -> String {
    if audio_s > 0.0 {
        format!(
            "{audio_s:.1} s of audio in {elapsed_s:.1} s (rtf {:.2})",
            elapsed_s / audio_s
        )
    } else {
        format!("no audio yet, {elapsed_s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_on_long_jobs_says_audio_seconds_and_rtf() {
        assert_eq!(audio_text(12.4, 6.1), "12.4 s of audio in 6.1 s (rtf 0.49)");
        assert_eq!(audio_text(2.0, 3.0), "2.0 s of audio in 3.0 s (rtf 1.50)");
        assert_eq!(audio_text(0.0, 1.25), "no audio yet, 1.2 s");
    }

    #[test]
    fn progress_off_draws_nothing() {
        let p = Progress::new(false, "x");
        p.audio(1.0);
        p.show("y");
        assert!(!p.drawn.get());
    }
}
