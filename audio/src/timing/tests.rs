//! The aligner on synthetic speech whose word times are known: tone bursts
//! as long as each word's syllables at a chosen rate, short gaps inside
//! words (stop closures), pauses at punctuation.

use proptest::prelude::*;

use super::*;

const RATE: u32 = 16000;

struct Spoken {
    audio: Vec<f32>,
    /// (char_start, start seconds) of each word.
    starts: Vec<(usize, f64)>,
}

/// Speaks `text` at `syl_per_s` syllables (vowel groups) per second.
fn speak(text: &str, syl_per_s: f64, lead_s: f64) -> Spoken {
    let mut audio = vec![0.0f32; (lead_s * RATE as f64) as usize];
    let mut starts = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut phase = 0.0f32;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
            continue;
        }
        let s = i;
        while i < chars.len() && !chars[i].is_whitespace() {
            i += 1;
        }
        let word: String = chars[s..i].iter().collect();
        let letters: Vec<char> = word.chars().filter(|c| c.is_alphanumeric()).collect();
        let mut groups = 0;
        let mut in_vowel = false;
        for c in &letters {
            let v = "aeiouyAEIOUY".contains(*c);
            groups += usize::from(v && !in_vowel);
            in_vowel = v;
        }
        let syl =
            groups.max(1) as f64 + letters.iter().filter(|c| c.is_numeric()).count() as f64 * 1.5;
        let dur = syl / syl_per_s + letters.len() as f64 * 0.01;
        starts.push((s, audio.len() as f64 / RATE as f64));
        let n = (dur * RATE as f64) as usize;
        let per = n as f64 / syl.round().max(1.0);
        for k in 0..n {
            // Each syllable swells to its vowel and falls (about 16 dB),
            // and long words have a 40 ms closure in the middle.
            let closure = dur > 0.3 && (k as f64 / RATE as f64 - dur / 2.0).abs() < 0.02;
            let x = (k as f64 % per) / per;
            let env = 0.15 + 0.85 * (std::f64::consts::PI * x).sin().powi(2);
            phase += 0.07;
            audio.push(if closure {
                0.0
            } else {
                0.3 * env as f32 * phase.sin()
            });
        }
        let pause = match word.chars().last() {
            Some('.' | '?' | '!') => 0.35,
            Some(',' | ';') => 0.18,
            _ => 0.03,
        };
        audio.extend(std::iter::repeat_n(0.0, (pause * RATE as f64) as usize));
    }
    Spoken { audio, starts }
}

/// Streams `audio` in chunks, checking each settlement against the audio
/// pushed so far; returns the words.
fn run(
    text_pieces: &[&str],
    audio: &[f32],
    chunks: &[usize],
    speed: f64,
) -> (Vec<CharTiming>, Vec<WordTiming>) {
    let mut a = Aligner::new(RATE, speed);
    let mut words = Words::default();
    let mut chars = Vec::new();
    let mut ws = Vec::new();
    let mut pos = 0;
    let mut piece = 0;
    let mut k = 0;
    while pos < audio.len() {
        if piece < text_pieces.len() {
            a.push_text(text_pieces[piece]);
            piece += 1;
        }
        let n = chunks[k % chunks.len()].min(audio.len() - pos);
        k += 1;
        let mut out = Vec::new();
        a.push_audio(&audio[pos..pos + n], &mut out);
        pos += n;
        let pushed = pos as f64 / RATE as f64;
        for t in &out {
            assert!(t.end <= pushed + 1e-9, "{t:?} past {pushed}");
        }
        words.feed(&a, &out, &mut ws);
        chars.extend(out);
    }
    for p in &text_pieces[piece.min(text_pieces.len())..] {
        a.push_text(p);
    }
    let mut out = Vec::new();
    a.finish(&mut out);
    words.feed(&a, &out, &mut ws);
    words.finish(&mut ws);
    chars.extend(out);
    (chars, ws)
}

fn check_chars(text: &str, chars: &[CharTiming], audio_s: f64) {
    let expect: Vec<char> = text.chars().collect();
    assert_eq!(chars.len(), expect.len(), "every character once");
    let mut last = 0.0;
    for (i, t) in chars.iter().enumerate() {
        assert_eq!(t.index, i);
        assert_eq!(t.ch, expect[i]);
        assert!(
            t.start >= last - 1e-12 && t.end >= t.start,
            "{t:?} after {last}"
        );
        assert!(t.end <= audio_s + 1e-9);
        last = t.end;
    }
}

fn start_errors(spoken: &Spoken, words: &[WordTiming]) -> Vec<f64> {
    spoken
        .starts
        .iter()
        .map(|(c, s)| {
            let w = words
                .iter()
                .find(|w| w.char_start == *c)
                .expect("a word at every truth word");
            (w.start - s).abs()
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const TEXT: &str = "Hello there, my friend. This is a test of the timing method, \
    spoken at a steady pace. Numbers like 42 are read too! Does it work?";

#[test]
fn words_start_near_where_they_are_spoken() {
    for rate in [5.0, 6.5] {
        let sp = speak(TEXT, rate, 0.2);
        let (chars, words) = run(&[TEXT], &sp.audio, &[2560, 5120], 1.0);
        check_chars(TEXT, &chars, sp.audio.len() as f64 / RATE as f64);
        let errs = start_errors(&sp, &words);
        let m = median(errs.clone());
        assert!(
            m < 0.12,
            "rate {rate}: median start error {m:.3}s ({errs:?})"
        );
    }
}

#[test]
fn the_first_word_starts_after_the_leading_silence() {
    let sp = speak("Well, yes.", 4.0, 0.5);
    let (_, words) = run(&["Well, yes."], &sp.audio, &[1600], 1.0);
    assert!((words[0].start - 0.5).abs() < 0.02, "{:?}", words[0]);
    assert_eq!(words[0].text, "Well,");
    assert_eq!(words.len(), 2);
}

#[test]
fn utterances_resynchronise() {
    let a_text = "One sentence here.";
    let b_text = " And another one follows it.";
    let sa = speak(a_text, 7.0, 0.1);
    let sb = speak(b_text, 7.0, 0.1);
    let mut al = Aligner::new(RATE, 1.0);
    let mut out = Vec::new();
    al.push_text(a_text);
    al.push_audio(&sa.audio, &mut out);
    al.end_utterance(&mut out);
    assert_eq!(
        out.len(),
        a_text.chars().count(),
        "all of the first utterance"
    );
    al.push_text(b_text);
    al.push_audio(&sb.audio, &mut out);
    al.finish(&mut out);
    let total = (sa.audio.len() + sb.audio.len()) as f64 / RATE as f64;
    check_chars(&format!("{a_text}{b_text}"), &out, total);
    let second = &out[a_text.chars().count() + 1];
    let t0 = sa.audio.len() as f64 / RATE as f64 + 0.1;
    assert!((second.start - t0).abs() < 0.03, "{second:?} vs {t0}");
}

#[test]
fn silence_or_no_audio_still_covers_the_text() {
    let mut a = Aligner::new(RATE, 1.0);
    let mut out = Vec::new();
    a.push_text("Nothing was said.");
    a.push_audio(&[0.0; 8000], &mut out);
    assert!(out.is_empty());
    a.finish(&mut out);
    check_chars("Nothing was said.", &out, 0.5);
    let mut b = Aligner::new(RATE, 1.0);
    let mut out = Vec::new();
    b.push_text("x y");
    b.finish(&mut out);
    check_chars("x y", &out, 0.0);
}

#[test]
fn skipped_text_is_covered_at_once() {
    let sp = speak("Spoken words.", 4.0, 0.1);
    let mut a = Aligner::new(RATE, 1.0);
    let mut out = Vec::new();
    a.push_text("Spoken words.");
    a.push_audio(&sp.audio, &mut out);
    a.skip_text(" dropped", &mut out);
    check_chars(
        "Spoken words. dropped",
        &out,
        sp.audio.len() as f64 / RATE as f64,
    );
}

fn word_list() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        "[a-z]{1,9}",
        "[A-Z][a-z]{0,6}[,.?]?",
        "[0-9]{1,4}",
        "[中文字好]{1,3}[。，]?",
        "\"[a-z]{2,5}\"",
        Just("—".to_string()),
    ];
    prop::collection::vec(word, 1..25).prop_map(|ws| ws.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Monotonic, every character exactly once, never past the audio, for
    /// any text, split anywhere (live text), any chunking, rate and speed.
    #[test]
    fn timings_hold_their_contract(
        text in word_list(),
        cuts in prop::collection::vec(0usize..200, 0..6),
        chunks in prop::collection::vec(1usize..6000, 1..5),
        syl in 2.0f64..9.0,
        speed in 0.5f64..2.0,
        noise in any::<bool>(),
    ) {
        let mut sp = speak(&text, syl, 0.05);
        if noise {
            for (i, s) in sp.audio.iter_mut().enumerate() {
                *s += 0.02 * ((i as f32 * 12.9898).sin() * 43758.547).fract();
            }
        }
        let chars: Vec<char> = text.chars().collect();
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
        at.sort();
        let mut pieces = Vec::new();
        let mut prev = 0;
        for c in at.into_iter().chain([chars.len()]) {
            pieces.push(chars[prev..c].iter().collect::<String>());
            prev = c;
        }
        let refs: Vec<&str> = pieces.iter().map(|s| s.as_str()).collect();
        let (timings, words) = run(&refs, &sp.audio, &chunks, speed);
        check_chars(&text, &timings, sp.audio.len() as f64 / RATE as f64);
        let mut covered = 0;
        let mut last = 0.0;
        for w in &words {
            prop_assert!(w.char_start >= covered && w.char_end > w.char_start);
            prop_assert!(w.start >= last - 1e-12 && w.end >= w.start);
            covered = w.char_end;
            last = w.start;
        }
        let spaces = text.chars().filter(|c| c.is_whitespace()).count();
        let in_words: usize = words.iter().map(|w| w.char_end - w.char_start).sum();
        prop_assert_eq!(in_words + spaces, chars.len());
    }
}
