//! A bounded in-memory cache for state derived from a voice.
//!
//! The model layer keeps what it computes from a voice once and reuses on
//! every request here: the ICL codec rows (`[T_r+1, H]`), the KV prefix the
//! reference contributes (per language and text mode), the decoder state
//! primed with the reference codes. Those depend on the voice, on the exact
//! weights (a `u64` model fingerprint), and on what kind of state it is (`K`,
//! defined by the caller), so that triple is the key.
//!
//! The cache holds at most `budget` bytes as reported by [`CacheWeight`],
//! evicting the least recently used entries first. Values are `Arc`s: an
//! evicted or invalidated entry stays alive for the requests still using it.
//! Registered with [`crate::VoiceStore::watch`], it drops a voice's entries
//! when the voice is replaced or removed; a computation that was running
//! across such a change is not stored (its result describes the old voice).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use crate::store::VoiceWatcher;

/// How many bytes a cached value occupies (its heap buffers, roughly).
pub trait CacheWeight {
    fn weight_bytes(&self) -> usize;
}

impl<T> CacheWeight for Vec<T> {
    fn weight_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<T>()
    }
}

/// The key of one cached value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DerivedKey<K> {
    /// The voice key ([`crate::VoiceName::key`], lower-case).
    pub voice: String,
    /// Fingerprint of the weights the value was computed with.
    pub model: u64,
    /// What the value is (codec rows, a KV prefix for a language, ...).
    pub kind: K,
}

/// Hit, miss and eviction counts since creation (for metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub inserts: u64,
    pub evictions: u64,
    pub invalidations: u64,
}

struct Entry<V> {
    value: Arc<V>,
    bytes: usize,
    tick: u64,
}

struct Inner<K, V> {
    map: HashMap<DerivedKey<K>, Entry<V>>,
    /// Recency order: the smallest tick is the least recently used.
    order: BTreeMap<u64, DerivedKey<K>>,
    tick: u64,
    bytes: usize,
    /// Bumped when a voice changes; a computation started under an older
    /// epoch is not stored.
    epochs: HashMap<String, u64>,
    stats: CacheStats,
}

/// A byte-bounded LRU of per-voice derived state; `Send + Sync` when `K`
/// and `V` are.
pub struct DerivedCache<K, V> {
    budget: usize,
    inner: Mutex<Inner<K, V>>,
}

impl<K: Clone + Eq + Hash, V: CacheWeight> DerivedCache<K, V> {
    /// An empty cache holding at most `budget_bytes` (0 caches nothing).
    pub fn new(budget_bytes: usize) -> Self {
        DerivedCache {
            budget: budget_bytes,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: BTreeMap::new(),
                tick: 0,
                bytes: 0,
                epochs: HashMap::new(),
                stats: CacheStats::default(),
            }),
        }
    }

    /// The value for (`voice`, `model`, `kind`), marking it recently used.
    pub fn get(&self, voice: &str, model: u64, kind: &K) -> Option<Arc<V>> {
        let key = DerivedKey {
            voice: voice.to_ascii_lowercase(),
            model,
            kind: kind.clone(),
        };
        let mut g = self.lock();
        let inner = &mut *g;
        inner.tick += 1;
        let tick = inner.tick;
        match inner.map.get_mut(&key) {
            Some(e) => {
                inner.order.remove(&e.tick);
                e.tick = tick;
                inner.order.insert(tick, key);
                inner.stats.hits += 1;
                Some(Arc::clone(&e.value))
            }
            None => {
                inner.stats.misses += 1;
                None
            }
        }
    }

    /// Stores `value`, evicting least recently used entries to fit; a value
    /// larger than the whole budget is returned but not kept.
    pub fn insert(&self, voice: &str, model: u64, kind: K, value: V) -> Arc<V> {
        let value = Arc::new(value);
        let mut g = self.lock();
        let key = DerivedKey {
            voice: voice.to_ascii_lowercase(),
            model,
            kind,
        };
        self.put(&mut g, key, Arc::clone(&value));
        value
    }

    /// The cached value, or `compute()`'s result, stored unless the voice
    /// changed while it ran. `compute` runs without the cache locked, so two
    /// callers may compute the same value; the later result wins.
    pub fn get_or_try_insert_with<E>(
        &self,
        voice: &str,
        model: u64,
        kind: &K,
        compute: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        if let Some(v) = self.get(voice, model, kind) {
            return Ok(v);
        }
        let voice = voice.to_ascii_lowercase();
        let epoch = self.lock().epochs.get(&voice).copied().unwrap_or(0);
        let value = Arc::new(compute()?);
        let mut g = self.lock();
        if g.epochs.get(&voice).copied().unwrap_or(0) == epoch {
            let key = DerivedKey {
                voice,
                model,
                kind: kind.clone(),
            };
            self.put(&mut g, key, Arc::clone(&value));
        }
        Ok(value)
    }

    /// Drops every entry of `voice` (it was replaced or removed).
    pub fn invalidate_voice(&self, voice: &str) {
        let voice = voice.to_ascii_lowercase();
        let mut g = self.lock();
        let inner = &mut *g;
        *inner.epochs.entry(voice.clone()).or_insert(0) += 1;
        let doomed: Vec<DerivedKey<K>> = inner
            .map
            .keys()
            .filter(|k| k.voice == voice)
            .cloned()
            .collect();
        for key in doomed {
            if let Some(e) = inner.map.remove(&key) {
                inner.order.remove(&e.tick);
                inner.bytes -= e.bytes;
                inner.stats.invalidations += 1;
            }
        }
    }

    /// Drops everything.
    pub fn clear(&self) {
        let mut g = self.lock();
        g.map.clear();
        g.order.clear();
        g.bytes = 0;
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held (sum of the entries' [`CacheWeight`]).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The byte bound.
    pub fn budget(&self) -> usize {
        self.budget
    }

    pub fn stats(&self) -> CacheStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn put(&self, inner: &mut Inner<K, V>, key: DerivedKey<K>, value: Arc<V>) {
        let bytes = value.weight_bytes();
        if let Some(old) = inner.map.remove(&key) {
            inner.order.remove(&old.tick);
            inner.bytes -= old.bytes;
        }
        if bytes > self.budget {
            return;
        }
        while inner.bytes + bytes > self.budget {
            let Some((_, lru)) = inner.order.pop_first() else {
                break;
            };
            if let Some(e) = inner.map.remove(&lru) {
                inner.bytes -= e.bytes;
                inner.stats.evictions += 1;
            }
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.order.insert(tick, key.clone());
        inner.map.insert(key, Entry { value, bytes, tick });
        inner.bytes += bytes;
        inner.stats.inserts += 1;
    }
}

impl<K, V> VoiceWatcher for DerivedCache<K, V>
where
    K: Clone + Eq + Hash + Send + Sync,
    V: CacheWeight + Send + Sync,
{
    fn voice_changed(&self, key: &str) {
        self.invalidate_voice(key);
    }
}

impl<K, V> std::fmt::Debug for DerivedCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("DerivedCache")
            .field("budget", &self.budget)
            .field("bytes", &g.bytes)
            .field("entries", &g.map.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(n: usize) -> Vec<u8> {
        vec![0; n]
    }

    #[test]
    fn evicts_least_recently_used_within_the_budget() {
        let c: DerivedCache<&'static str, Vec<u8>> = DerivedCache::new(300);
        c.insert("a", 1, "rows", buf(100));
        c.insert("b", 1, "rows", buf(100));
        c.insert("c", 1, "rows", buf(100));
        assert_eq!((c.len(), c.bytes()), (3, 300));
        // Touch "a" so "b" is now the least recently used.
        assert!(c.get("a", 1, &"rows").is_some());
        c.insert("d", 1, "rows", buf(100));
        assert!(c.get("b", 1, &"rows").is_none());
        for v in ["a", "c", "d"] {
            assert!(c.get(v, 1, &"rows").is_some(), "{v}");
        }
        assert!(c.bytes() <= c.budget());
        assert_eq!(c.stats().evictions, 1);
        // Larger than the whole budget: handed back, not kept.
        let big = c.insert("e", 1, "rows", buf(301));
        assert_eq!(big.len(), 301);
        assert!(c.get("e", 1, &"rows").is_none());
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn keys_separate_model_and_kind_and_fold_case() {
        let c: DerivedCache<u8, Vec<u8>> = DerivedCache::new(1000);
        c.insert("Alice", 7, 0, buf(1));
        assert!(c.get("alice", 7, &0).is_some());
        assert!(c.get("alice", 8, &0).is_none());
        assert!(c.get("alice", 7, &1).is_none());
    }

    #[test]
    fn invalidation_drops_a_voice_and_blocks_a_stale_computation() {
        let c: DerivedCache<u8, Vec<u8>> = DerivedCache::new(1000);
        c.insert("a", 1, 0, buf(10));
        c.insert("a", 2, 1, buf(10));
        c.insert("b", 1, 0, buf(10));
        c.invalidate_voice("A");
        assert_eq!((c.len(), c.bytes()), (1, 10));
        // The voice changes while its state is being computed: not stored.
        let v = c
            .get_or_try_insert_with("b", 9, &0, || {
                c.invalidate_voice("b");
                Ok::<_, ()>(buf(5))
            })
            .unwrap();
        assert_eq!(v.len(), 5);
        assert!(c.get("b", 9, &0).is_none());
        // Unchanged voice: computed once, then served from the cache.
        let mut runs = 0;
        for _ in 0..3 {
            c.get_or_try_insert_with("b", 9, &0, || {
                runs += 1;
                Ok::<_, ()>(buf(5))
            })
            .unwrap();
        }
        assert_eq!(runs, 1);
        assert_eq!(
            c.get_or_try_insert_with("z", 1, &0, || Err::<Vec<u8>, _>("no")),
            Err("no")
        );
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<DerivedCache<String, Vec<f32>>>();
    }
}
