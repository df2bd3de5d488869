//! Long text → several requests, cut between sentences.
//!
//! One request per utterance works for a paragraph; a whole page in one
//! prompt runs into the talker's text limit (8192 tokens) or its positions,
//! and the models are trained on utterances, not chapters. So text longer
//! than [`MAX_PIECE_CHARS`] is cut with the server's segmenter
//! (`tts_transport::segment`, sentence mode: the same boundaries a realtime
//! session cuts at), and consecutive sentences are packed back together up
//! to that length. Shorter text stays one request, exactly as before.

// The segmenter keeps the realtime session's clock (tokio's, which its tests
// can pause); off a runtime it reads the system clock.
use tokio::time::Instant;

use tts_transport::protocol::{Chunking, ChunkingMode};
use tts_transport::segment::Segmenter;

/// Longest piece in characters: the server's default segment limit
/// (`Chunking::default().max_chars`, ~20 s of speech).
pub(super) const MAX_PIECE_CHARS: usize = 300;

/// `text` as the pieces to synthesize, in order (one piece when it is short).
pub(super) fn pieces(text: &str) -> Vec<String> {
    if text.chars().count() <= MAX_PIECE_CHARS {
        return vec![text.to_string()];
    }
    let mut seg = Segmenter::new(Chunking {
        mode: ChunkingMode::Sentence,
        max_chars: MAX_PIECE_CHARS,
        ..Chunking::default()
    });
    let mut sentences = Vec::new();
    seg.push(text, Instant::now(), &mut sentences);
    seg.flush(&mut sentences);
    let mut out: Vec<String> = Vec::new();
    for s in sentences {
        match out.last_mut() {
            Some(last) if last.chars().count() + 1 + s.chars().count() <= MAX_PIECE_CHARS => {
                // CJK text has no space after its full stops.
                if !last.ends_with(['。', '！', '？']) {
                    last.push(' ');
                }
                last.push_str(&s);
            }
            _ => out.push(s),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_piece_unchanged() {
        let t = "Hello. How are you? Fine, thanks.";
        assert_eq!(pieces(t), [t]);
    }

    #[test]
    fn long_text_is_cut_between_sentences_and_packed() {
        let sentence = "This sentence is about fifty characters long, ok. ";
        let text = sentence.repeat(20);
        let p = pieces(text.trim());
        assert!(p.len() >= 4, "{p:?}");
        for piece in &p {
            assert!(piece.chars().count() <= MAX_PIECE_CHARS, "{piece}");
            assert!(piece.ends_with("ok."), "cut mid-sentence: {piece}");
        }
        // Nothing lost or reordered.
        assert_eq!(p.join(" "), text.trim());
    }

    #[test]
    fn a_sentence_longer_than_a_piece_is_cut_at_a_space() {
        let text = "word ".repeat(200);
        let p = pieces(text.trim());
        assert!(p.len() >= 3, "{p:?}");
        assert!(p.iter().all(|s| s.chars().count() <= MAX_PIECE_CHARS));
        assert_eq!(p.join(" "), text.trim());
    }

    #[test]
    fn cjk_sentences_are_joined_without_spaces() {
        let text = "今天天气很好。".repeat(60);
        let p = pieces(&text);
        assert!(p.len() >= 2);
        assert_eq!(p.concat(), text);
    }
}
