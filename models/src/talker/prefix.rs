//! Talker KV prefixes shared between requests whose prompts begin with the
//! same rows.
//!
//! A prompt's leading rows do not depend on the text being spoken: the role
//! rows, the codec prefix (think, language, the speaker's row or a clone's
//! x-vector), a VoiceDesign or instruct description and, for an in-context
//! clone, the rows of the reference transcript ([`super::Prompt::shared_rows`]).
//! A stored voice's requests therefore all start with the same rows, and the
//! keys and values the talker computes for them are the same every time
//! (causal attention: position `i` sees rows `0..=i` only). The cache keeps
//! them, keyed by the rows themselves and compared in full on a hit, so a
//! request prefills only the rows after the prefix and the result is the
//! same as prefilling every row (`forward` treats rows independently; the
//! `prefix` tests check it bit for bit).
//!
//! Bounded by bytes (keys, values and the rows kept to compare), least
//! recently used out first.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use crate::lm::KvPrefix;

/// Bytes of prefixes kept by default. One prefix costs its rows times the
/// talker's KV bytes per position (≈ 115 KB per row for 0.6B, 229 KB for
/// 1.7B): a 9-row preset-speaker prefix ≈ 1–2 MB, an in-context clone with
/// a 20-token transcript ≈ 3–7 MB. 256 MiB holds several dozen voices.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 256 << 20;

/// The fewest shared rows worth caching: below this the copy saves little
/// and the entries crowd out the ones that matter.
pub const MIN_PREFIX_ROWS: usize = 4;

/// One cached prefix: the input rows it was computed from and their KV.
pub struct PrefixEntry {
    hash: u64,
    rows: Box<[f32]>,
    kv: KvPrefix,
}

impl PrefixEntry {
    pub fn kv(&self) -> &KvPrefix {
        &self.kv
    }
    fn bytes(&self) -> usize {
        self.rows.len() * 4 + self.kv.bytes()
    }
}

/// What the cache did since it was made (for reports and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub inserts: u64,
    pub evictions: u64,
    /// Entries and bytes held now.
    pub entries: usize,
    pub bytes: usize,
}

struct Inner {
    /// Most recently used first.
    entries: VecDeque<Arc<PrefixEntry>>,
    bytes: usize,
    stats: PrefixCacheStats,
}

/// Shared KV prefixes of the talker, at most `budget` bytes of them.
pub struct PrefixCache {
    budget: usize,
    inner: Mutex<Inner>,
}

impl Default for PrefixCache {
    fn default() -> Self {
        PrefixCache::new(DEFAULT_PREFIX_CACHE_BYTES)
    }
}

fn hash_rows(rows: &[f32]) -> u64 {
    let mut h = DefaultHasher::new();
    rows.len().hash(&mut h);
    for x in rows {
        x.to_bits().hash(&mut h);
    }
    h.finish()
}

fn same_rows(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

impl PrefixCache {
    /// A cache of at most `budget` bytes; 0 disables it (every lookup
    /// misses and nothing is kept).
    pub fn new(budget: usize) -> Self {
        PrefixCache {
            budget,
            inner: Mutex::new(Inner {
                entries: VecDeque::new(),
                bytes: 0,
                stats: PrefixCacheStats::default(),
            }),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.budget > 0
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The prefix computed from exactly `rows` (`[n, hidden]`), if kept.
    pub fn get(&self, rows: &[f32]) -> Option<Arc<PrefixEntry>> {
        if !self.is_enabled() {
            return None;
        }
        let hash = hash_rows(rows);
        let mut g = self.lock();
        let found = g
            .entries
            .iter()
            .position(|e| e.hash == hash && same_rows(&e.rows, rows));
        match found {
            Some(i) => {
                let e = g.entries.remove(i).expect("index from position");
                g.entries.push_front(e.clone());
                g.stats.hits += 1;
                Some(e)
            }
            None => {
                g.stats.misses += 1;
                None
            }
        }
    }

    /// Keeps `kv`, computed from `rows`, evicting the least recently used
    /// entries past the budget. A prefix larger than the whole budget is
    /// not kept.
    pub fn insert(&self, rows: &[f32], kv: KvPrefix) {
        if !self.is_enabled() {
            return;
        }
        let entry = PrefixEntry {
            hash: hash_rows(rows),
            rows: rows.into(),
            kv,
        };
        let size = entry.bytes();
        if size > self.budget {
            return;
        }
        let mut g = self.lock();
        if let Some(i) = g
            .entries
            .iter()
            .position(|e| e.hash == entry.hash && same_rows(&e.rows, &entry.rows))
        {
            // Two first requests of one prefix both computed it.
            let old = g.entries.remove(i).expect("index from position");
            g.bytes -= old.bytes();
        }
        g.bytes += size;
        g.entries.push_front(Arc::new(entry));
        g.stats.inserts += 1;
        while g.bytes > self.budget {
            let Some(old) = g.entries.pop_back() else {
                break;
            };
            g.bytes -= old.bytes();
            g.stats.evictions += 1;
        }
    }

    /// Drops every entry (counters are kept).
    pub fn clear(&self) {
        let mut g = self.lock();
        g.entries.clear();
        g.bytes = 0;
    }

    pub fn stats(&self) -> PrefixCacheStats {
        let g = self.lock();
        PrefixCacheStats {
            entries: g.entries.len(),
            bytes: g.bytes,
            ..g.stats
        }
    }
}
