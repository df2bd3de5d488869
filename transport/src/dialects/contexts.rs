//! A vendor connection's contexts, each lifecycle its own native context.
//!
//! A vendor client names its contexts, and may use a name again once a
//! context has ended (Pipecat does, after an interrupting `close_context`).
//! The native session refuses a finished context id, and its late events
//! (audio already in flight, the answer to a cancel) carry the id they were
//! made for. So each lifecycle of a vendor id — from the message that opens
//! it to its one end marker (`isFinal`, `done`, an error) — is a native
//! context of its own, named `<vendor id>#<n>` ([`native_id`]), and a
//! native event reaches the client only while its lifecycle is open here:
//! once the end marker went out, whatever the native session still says
//! about that context is dropped. A reused vendor id opens a new lifecycle,
//! whose audio and end belong to it alone.
//!
//! When the server ends a lifecycle on its own (a refusal, a failure), the
//! client may already have sent more for it (text, a flush, a close). Those
//! are stale, not a new context: the vendor id is remembered as *refused*
//! ([`Contexts::refuse`]) and the dialect drops such messages until the
//! client shows it knows (its own end or cancel of the context, or, on
//! ElevenLabs, a new context-opening message). At most [`REMEMBERED`] ids
//! are kept so.

use std::collections::{HashMap, VecDeque};

use crate::realtime::MAX_CONTEXT_ID;

/// Refused vendor ids remembered (the oldest is forgotten first).
pub const REMEMBERED: usize = 64;

/// One lifecycle: the vendor id it speaks for, and the dialect's state.
pub struct Life<C> {
    pub vendor_id: String,
    pub ctx: C,
}

/// The open lifecycles of one connection, by native id.
pub struct Contexts<C> {
    /// The lifecycle each vendor id's messages go to (absent: the next
    /// message opens one).
    current: HashMap<String, String>,
    /// Lifecycles whose end marker has not gone out, by native id.
    live: HashMap<String, Life<C>>,
    /// Vendor ids the server ended a lifecycle of on its own, newest last.
    refused: VecDeque<String>,
    /// Lifecycles opened so far (numbers the native ids).
    opened: u64,
}

impl<C> Default for Contexts<C> {
    fn default() -> Self {
        Contexts {
            current: HashMap::new(),
            live: HashMap::new(),
            refused: VecDeque::new(),
            opened: 0,
        }
    }
}

/// The native id of lifecycle `n` of `vendor_id`: the vendor id (cut at a
/// character boundary to fit the native limit) and `#n`, unique in the
/// connection and readable in the logs.
pub fn native_id(vendor_id: &str, n: u64) -> String {
    let suffix = format!("#{n}");
    let mut end = vendor_id.len().min(MAX_CONTEXT_ID - suffix.len());
    while !vendor_id.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &vendor_id[..end])
}

impl<C> Contexts<C> {
    /// Lifecycles open (their end marker not sent).
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Opens a new lifecycle for `vendor_id` (its messages go to it from
    /// now on; the id is no longer refused); its native id.
    pub fn open(&mut self, vendor_id: &str, ctx: C) -> String {
        self.opened += 1;
        let id = native_id(vendor_id, self.opened);
        self.forgive(vendor_id);
        self.current.insert(vendor_id.to_string(), id.clone());
        let life = Life {
            vendor_id: vendor_id.to_string(),
            ctx,
        };
        self.live.insert(id.clone(), life);
        id
    }

    /// The native id of the lifecycle `vendor_id`'s messages go to.
    pub fn current(&self, vendor_id: &str) -> Option<String> {
        self.current.get(vendor_id).cloned()
    }

    /// The lifecycle `vendor_id`'s messages go to.
    pub fn current_mut(&mut self, vendor_id: &str) -> Option<(String, &mut C)> {
        let id = self.current.get(vendor_id)?;
        let life = self.live.get_mut(id)?;
        Some((id.clone(), &mut life.ctx))
    }

    /// `vendor_id`'s lifecycle goes on to its end without taking more
    /// messages (the client closed it): the next message opens another.
    pub fn detach(&mut self, vendor_id: &str) {
        self.current.remove(vendor_id);
    }

    /// Lifecycles still open that no vendor id's messages go to (closed by
    /// the client, being spoken out): their native ids.
    pub fn detached(&self) -> Vec<String> {
        let current: Vec<&String> = self.current.values().collect();
        let mut ids: Vec<String> = self
            .live
            .keys()
            .filter(|id| !current.contains(id))
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    /// An open lifecycle, by native id (`None`: ended, its events stale).
    pub fn get_mut(&mut self, native: &str) -> Option<&mut Life<C>> {
        self.live.get_mut(native)
    }

    /// Ends a lifecycle: the caller sends its end marker, and nothing of
    /// it is passed on after. `None` when it had already ended.
    pub fn end(&mut self, native: &str) -> Option<Life<C>> {
        let life = self.live.remove(native)?;
        if self.current.get(&life.vendor_id).map(String::as_str) == Some(native) {
            self.current.remove(&life.vendor_id);
        }
        Some(life)
    }

    /// Every open lifecycle ends (the connection closes): their native ids.
    pub fn end_all(&mut self) -> Vec<String> {
        self.current.clear();
        self.live.drain().map(|(id, _)| id).collect()
    }

    /// The server ended `vendor_id`'s lifecycle on its own: what the client
    /// still sends for it is stale until [`forgive`](Self::forgive).
    pub fn refuse(&mut self, vendor_id: &str) {
        if self.is_refused(vendor_id) {
            return;
        }
        if self.refused.len() == REMEMBERED {
            self.refused.pop_front();
        }
        self.refused.push_back(vendor_id.to_string());
    }

    pub fn is_refused(&self, vendor_id: &str) -> bool {
        self.refused.iter().any(|r| r == vendor_id)
    }

    /// The client knows `vendor_id`'s last lifecycle ended: its next
    /// message opens a new one.
    pub fn forgive(&mut self, vendor_id: &str) {
        self.refused.retain(|r| r != vendor_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lifecycle_has_its_own_native_id() {
        let mut c = Contexts::default();
        let a = c.open("t", 1);
        c.detach("t");
        let b = c.open("t", 2);
        assert_ne!(a, b);
        assert_eq!(c.current("t").as_deref(), Some(b.as_str()));
        // The first still runs to its end, then its events are stale.
        assert_eq!(c.get_mut(&a).map(|l| l.ctx), Some(1));
        assert_eq!(c.end(&a).map(|l| l.ctx), Some(1));
        assert!(c.get_mut(&a).is_none() && c.end(&a).is_none());
        // Ending the first did not touch the second.
        assert_eq!(c.current("t").as_deref(), Some(b.as_str()));
        assert_eq!(c.end(&b).map(|l| l.vendor_id), Some("t".to_string()));
        assert!(c.current("t").is_none() && c.len() == 0);
    }

    #[test]
    fn native_ids_fit_the_native_limit() {
        let long = "é".repeat(100); // 200 bytes
        let id = native_id(&long, 12345);
        assert!(id.len() <= MAX_CONTEXT_ID && id.ends_with("#12345"), "{id}");
        assert_eq!(native_id("abc", 7), "abc#7");
        assert_eq!(native_id("", 1), "#1");
    }

    #[test]
    fn refused_ids_are_remembered_until_forgiven_and_bounded() {
        let mut c: Contexts<()> = Contexts::default();
        c.refuse("x");
        c.refuse("x");
        assert!(c.is_refused("x"));
        c.forgive("x");
        assert!(!c.is_refused("x"));
        c.refuse("x");
        c.open("x", ());
        assert!(!c.is_refused("x"), "opening forgives");
        for i in 0..REMEMBERED + 1 {
            c.refuse(&i.to_string());
        }
        assert!(!c.is_refused("0") && c.is_refused(&REMEMBERED.to_string()));
    }
}
