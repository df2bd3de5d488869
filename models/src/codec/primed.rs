//! Decoder states primed with an ICL clone's reference codes, kept per
//! reference so a stored voice's requests start decoding where its
//! reference ends instead of decoding the reference again every time.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::{Code2Wav, DecoderState};
use crate::error::Result;

/// Primed decoder states, most recently used first, at most `capacity` of
/// them (a few hundred KB each at the official size). Keyed by the
/// reference codes themselves, compared in full: two voices share an entry
/// only when their codes are identical, which makes the primed state the
/// same too.
pub struct PrimedDecoders {
    capacity: usize,
    entries: Mutex<VecDeque<Primed>>,
}

/// One entry: the reference codes and the state after decoding them.
type Primed = (Arc<[u32]>, Arc<DecoderState>);

/// Primed states kept by default: enough for a server's working set of
/// voices; each is rebuilt on a miss by decoding its reference once.
pub const DEFAULT_PRIMED_DECODERS: usize = 32;

impl PrimedDecoders {
    pub fn new(capacity: usize) -> Self {
        PrimedDecoders {
            capacity,
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// A decoder state that has decoded `codes` (`[n_frames, Q]`), from the
    /// cache or primed now (on the kernel pool; the lock is not held while
    /// priming, so two first requests of one voice may both prime it).
    pub fn get_or_prime(
        &self,
        c2w: &Code2Wav,
        codes: &[u32],
        n_frames: usize,
    ) -> Result<DecoderState> {
        if let Some(state) = self.lookup(codes) {
            return Ok((*state).clone());
        }
        let state = tts_kernels::on_pool(|| c2w.primed_state(codes, n_frames))?;
        if self.capacity > 0 {
            let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            e.retain(|(k, _)| &k[..] != codes);
            e.push_front((codes.into(), Arc::new(state.clone())));
            e.truncate(self.capacity);
        }
        Ok(state)
    }

    fn lookup(&self, codes: &[u32]) -> Option<Arc<DecoderState>> {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let i = e.iter().position(|(k, _)| &k[..] == codes)?;
        let hit = e.remove(i)?;
        let state = hit.1.clone();
        e.push_front(hit);
        Some(state)
    }

    /// True when a state primed with exactly `codes` is held.
    pub fn contains(&self, codes: &[u32]) -> bool {
        let e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.iter().any(|(k, _)| &k[..] == codes)
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for PrimedDecoders {
    fn default() -> Self {
        Self::new(DEFAULT_PRIMED_DECODERS)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn codes(frames: usize, q: usize, seed: usize) -> Vec<u32> {
        (0..frames * q)
            .map(|i| ((i * 131 + seed * 17) % 2048) as u32)
            .collect()
    }

    /// Decoding after a primed state is the tail of a whole-utterance
    /// decode of reference + generated codes; a second request hits the
    /// cache and gets the same state.
    #[test]
    fn a_primed_decoder_continues_the_reference() {
        let dir =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a/speech_tokenizer");
        let c2w = Code2Wav::load(&dir).unwrap();
        let q = c2w.num_quantizers();
        let spf = c2w.samples_per_frame();
        let (r, g) = (7, 5);
        let (reference, generated) = (codes(r, q, 1), codes(g, q, 2));
        let whole = c2w
            .decode(&[&reference[..], &generated[..]].concat(), r + g)
            .unwrap();
        let cache = PrimedDecoders::new(2);
        for _ in 0..2 {
            let mut state = cache.get_or_prime(&c2w, &reference, r).unwrap();
            let mut out = Vec::new();
            c2w.decode_step(&mut state, &generated, g, &mut out)
                .unwrap();
            assert_eq!(out.len(), g * spf);
            let tail = &whole[r * spf..];
            let err = out
                .iter()
                .zip(tail)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(err < 1e-5, "max |diff| {err}");
        }
        assert_eq!(cache.len(), 1);
        // Bounded: two more references evict the first.
        cache.get_or_prime(&c2w, &codes(3, q, 3), 3).unwrap();
        cache.get_or_prime(&c2w, &codes(3, q, 4), 3).unwrap();
        assert_eq!(cache.len(), 2);
        assert!(cache.lookup(&reference).is_none());
    }
}
