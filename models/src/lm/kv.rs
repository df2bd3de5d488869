//! One sequence's key/value history ([`KvCache`]) and a copy of its first
//! positions ([`KvPrefix`]), in the stage's [`KvFormat`].
//!
//! Each layer's keys (and values) are `[kv_heads, cap, head_dim]`: a head's
//! positions are contiguous, so attention reads each head's history as one
//! forward stream. Position-major rows (`[len, kv_heads, head_dim]`, what
//! the k/v projections write) put a head's rows `kv_heads * head_dim`
//! elements apart, one 512-byte piece per 4 KB page at the 0.6B's shapes,
//! which the hardware prefetchers do not follow (docs/performance.md,
//! "Attention over a long context"). Growing past `cap` re-lays the history
//! out at twice the room.

use tts_kernels::{f32_to_bf16, AttnSegment, KvData, KvLayout, KvRows};

use super::scratch::Scratch;
use crate::quant::KvFormat;

/// A layer's keys or values in the cache's format.
#[derive(Clone, Debug)]
pub(super) enum KvBuf {
    F32(Vec<f32>),
    /// bf16 bits, rounded to nearest even as they are written.
    Bf16(Vec<u16>),
}

impl KvBuf {
    fn empty(format: KvFormat) -> Self {
        match format {
            KvFormat::F32 => KvBuf::F32(Vec::new()),
            KvFormat::Bf16 => KvBuf::Bf16(Vec::new()),
        }
    }

    fn format(&self) -> KvFormat {
        match self {
            KvBuf::F32(_) => KvFormat::F32,
            KvBuf::Bf16(_) => KvFormat::Bf16,
        }
    }

    fn data(&self) -> KvData<'_> {
        match self {
            KvBuf::F32(b) => KvData::F32(b),
            KvBuf::Bf16(b) => KvData::Bf16(b),
        }
    }

    /// Bytes held (capacity).
    fn bytes(&self) -> usize {
        match self {
            KvBuf::F32(b) => b.capacity() * 4,
            KvBuf::Bf16(b) => b.capacity() * 2,
        }
    }

    /// Bytes in use (length).
    fn len_bytes(&self) -> usize {
        match self {
            KvBuf::F32(b) => b.len() * 4,
            KvBuf::Bf16(b) => b.len() * 2,
        }
    }

    /// `src` (f32) at element `at`, rounded to the buffer's format.
    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            KvBuf::F32(b) => b[at..][..src.len()].copy_from_slice(src),
            KvBuf::Bf16(b) => b[at..][..src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &x)| *d = f32_to_bf16(x)),
        }
    }

    /// The buffer's `heads` runs of `len` positions (of `from` a head) in
    /// runs of `to` positions a head (the rest zero).
    fn relaid(&self, runs: Runs) -> KvBuf {
        fn relay<T: Copy + Default>(b: &[T], r: Runs) -> Vec<T> {
            let mut nb = vec![T::default(); r.heads * r.to * r.hd];
            r.copy(&mut nb, b);
            nb
        }
        match self {
            KvBuf::F32(b) => KvBuf::F32(relay(b, runs)),
            KvBuf::Bf16(b) => KvBuf::Bf16(relay(b, runs)),
        }
    }

    /// Copies `src`'s runs into this buffer's (the caller checked that the
    /// formats match).
    fn load(&mut self, src: &KvBuf, runs: Runs) {
        match (self, src) {
            (KvBuf::F32(d), KvBuf::F32(s)) => runs.copy(d, s),
            (KvBuf::Bf16(d), KvBuf::Bf16(s)) => runs.copy(d, s),
            _ => unreachable!("KV formats differ: load_prefix checks them"),
        }
    }
}

/// Each of `heads` runs of `len` positions of `hd` elements, `from`
/// positions a head apart in the source and `to` in the destination.
#[derive(Clone, Copy)]
struct Runs {
    heads: usize,
    hd: usize,
    len: usize,
    from: usize,
    to: usize,
}

impl Runs {
    fn copy<T: Copy>(self, d: &mut [T], s: &[T]) {
        let Runs {
            heads,
            hd,
            len,
            from,
            to,
        } = self;
        for h in 0..heads {
            d[h * to * hd..][..len * hd].copy_from_slice(&s[h * from * hd..][..len * hd]);
        }
    }
}

/// Key/value history of one sequence for every layer, plus the working
/// buffers of [`super::Qwen3Lm::forward`] for that sequence.
///
/// The buffers live here because the cache is already the per-sequence state
/// every forward takes: after the first step at a given row count a decode
/// step allocates nothing (the code predictor runs 15 one-row steps per
/// frame, where a dozen allocations per call were a measurable share).
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    pub(super) k: Vec<KvBuf>,
    pub(super) v: Vec<KvBuf>,
    pub(super) len: usize,
    /// Positions each head's run holds.
    pub(super) cap: usize,
    /// KV heads and their width, as the model that bound the cache has them.
    pub(super) heads: usize,
    pub(super) head_dim: usize,
    pub(super) format: KvFormat,
    pub(super) scratch: Scratch,
}

impl KvCache {
    /// An empty cache of `layers` layers of `heads` KV heads of `head_dim`.
    pub(super) fn new(layers: usize, heads: usize, head_dim: usize, format: KvFormat) -> Self {
        KvCache {
            k: (0..layers).map(|_| KvBuf::empty(format)).collect(),
            v: (0..layers).map(|_| KvBuf::empty(format)).collect(),
            len: 0,
            cap: 0,
            heads,
            head_dim,
            format,
            scratch: Scratch::default(),
        }
    }

    /// Positions already in the cache (the next input's position).
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The format the keys and values are kept in.
    pub fn format(&self) -> KvFormat {
        self.format
    }
    /// Forgets the sequence but keeps the allocation.
    pub fn clear(&mut self) {
        self.len = 0;
    }
    /// Makes room for `positions` positions in total without reallocating
    /// (a no-op before the cache is bound to a model by its first forward or
    /// [`super::Qwen3Lm::new_cache`]).
    pub(super) fn reserve_positions(&mut self, positions: usize) {
        if positions > self.cap {
            self.relayout(positions);
        }
    }
    /// Room for `positions`, doubling: appends stay amortised O(1).
    pub(super) fn grow_for(&mut self, positions: usize) {
        if positions > self.cap {
            self.relayout(positions.max(2 * self.cap));
        }
    }
    /// Moves every layer's history into buffers of `cap` positions a head.
    fn relayout(&mut self, cap: usize) {
        let (heads, hd, len, old) = (self.heads, self.head_dim, self.len, self.cap);
        for b in self.k.iter_mut().chain(self.v.iter_mut()) {
            *b = b.relaid(Runs {
                heads,
                hd,
                len,
                from: old,
                to: cap,
            });
        }
        self.cap = cap;
    }
    /// Appends `n` positions of layer `li`, `k` and `v` position-major
    /// (`[n, kv_heads, head_dim]`), at positions `len..len + n` (room made
    /// by the caller; `len` advances once all layers are in), rounded to
    /// the cache's format.
    pub(super) fn append(&mut self, li: usize, n: usize, k: &[f32], v: &[f32]) {
        let (heads, hd, cap, len) = (self.heads, self.head_dim, self.cap, self.len);
        for (dst, src) in [(&mut self.k[li], k), (&mut self.v[li], v)] {
            for i in 0..n {
                for h in 0..heads {
                    dst.write((h * cap + len + i) * hd, &src[(i * heads + h) * hd..][..hd]);
                }
            }
        }
    }
    /// Layer `li`'s attention for `n_q` new positions, appended after the
    /// `len` already there: queries at `len..`, keys `0..len + n_q`.
    pub(super) fn segment(&self, li: usize, n_q: usize) -> AttnSegment<'_> {
        AttnSegment {
            n_q,
            q_pos0: self.len,
            kv: KvRows {
                k: self.k[li].data(),
                v: self.v[li].data(),
                n: self.len + n_q,
                pos0: 0,
                layout: KvLayout::Heads { capacity: self.cap },
            },
        }
    }
    /// Bytes held (capacity, including the forward's working buffers), for
    /// memory accounting.
    pub fn bytes(&self) -> usize {
        self.k
            .iter()
            .chain(&self.v)
            .map(KvBuf::bytes)
            .sum::<usize>()
            + self.scratch.bytes()
    }
}

/// The keys and values of a sequence's first positions, every layer
/// (`[kv_heads, len, head_dim]` each, in the cache's format), copied out of
/// a [`KvCache`] ([`KvCache::prefix`]) so another sequence with the same
/// leading input rows can start from them ([`KvCache::load_prefix`])
/// instead of computing them again. Causal attention makes position `i`'s
/// keys and values depend on rows `0..=i` only, so they are the same
/// whatever follows.
#[derive(Clone, Debug)]
pub struct KvPrefix {
    k: Vec<KvBuf>,
    v: Vec<KvBuf>,
    len: usize,
    heads: usize,
    head_dim: usize,
}

impl KvPrefix {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(KvBuf::len_bytes).sum()
    }
    /// The format the keys and values are kept in.
    pub fn format(&self) -> Option<KvFormat> {
        self.k.first().map(KvBuf::format)
    }
}

impl KvCache {
    /// The first `positions` positions (at most [`Self::len`]) as a
    /// [`KvPrefix`].
    pub fn prefix(&self, positions: usize) -> KvPrefix {
        let len = positions.min(self.len);
        let (heads, hd, cap) = (self.heads, self.head_dim, self.cap);
        let runs = Runs {
            heads,
            hd,
            len,
            from: cap,
            to: len,
        };
        let cut = |b: &KvBuf| b.relaid(runs);
        KvPrefix {
            k: self.k.iter().map(cut).collect(),
            v: self.v.iter().map(cut).collect(),
            len,
            heads,
            head_dim: hd,
        }
    }

    /// Starts an empty cache from `prefix`: the next forward runs at
    /// position `prefix.len()`. Returns false (and leaves the cache as it
    /// was) if the cache is not empty or the prefix was made by an LM with
    /// another shape or KV format.
    pub fn load_prefix(&mut self, prefix: &KvPrefix) -> bool {
        if self.len != 0
            || self.k.len() != prefix.k.len()
            || (self.heads, self.head_dim) != (prefix.heads, prefix.head_dim)
            || prefix.format().is_some_and(|f| f != self.format)
        {
            return false;
        }
        self.reserve_positions(prefix.len);
        let len = prefix.len;
        let runs = Runs {
            heads: self.heads,
            hd: self.head_dim,
            len,
            from: len,
            to: self.cap,
        };
        for (dst, src) in self
            .k
            .iter_mut()
            .zip(&prefix.k)
            .chain(self.v.iter_mut().zip(&prefix.v))
        {
            dst.load(src, runs);
        }
        self.len = len;
        true
    }
}
