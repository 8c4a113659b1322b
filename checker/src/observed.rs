//! The lock key as the observer saw it (`history::key` events, process
//! `"observer"`): which token held the key on which node, and how each
//! token's key went. `mutex.rs` asks it two things, and only when the
//! history has such events (a lock-only or Jepsen history has none, and is
//! checked exactly as before):
//!
//! - **Did a token still own the lock when its holder sent an op?** A token
//!   *no longer owns* the lock from the observer event that showed its key
//!   gone (expired, deleted, or overwritten by another token's `key-set`)
//!   on a majority of the nodes the observer has reported on so far: one
//!   node for `single`, three of five for Redlock. The observer stamps an
//!   event after the node acted, so a gone key stamped before an op's
//!   invoke was certainly gone when the op was sent.
//! - **How did a holder's key go?** Its first loss the observer saw:
//!   expired or deleted ([`LEASE_EXPIRED`]), or overwritten with no expiry
//!   or delete seen first, or never seen to go at all though someone else
//!   was granted ([`KEY_LOST`]: a restart or a failover dropped it).
//!
//! Adapters' libraries store their own token in the key; an acquire `ok`'s
//! `value.client_token` says which, and the holder's questions are asked
//! with it.

use crate::history::{key, Event};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;

/// How many tokens are remembered beyond the pinned ones: a token is asked
/// about while its hold is open and, for an overlap's label, at the end
/// (`mutex.rs` pins those); older ones are forgotten, so memory follows the
/// concurrency, not the history's length.
const KEPT: usize = 4096;

/// The label of an overlap whose first holder's key was seen to expire, or
/// be deleted, while its holder still believed it held the lock.
pub const LEASE_EXPIRED: &str = "lease expired under a live holder";
/// The label of an overlap whose first holder's key was never seen to
/// expire or be deleted: the node lost it (a restart, a failover).
pub const KEY_LOST: &str = "key lost";

/// How a token's key went from one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gone {
    Expired,
    Deleted,
    /// Another token's `key-set` with no expiry or delete of this one seen
    /// first.
    Overwritten,
}

/// One node's key seen going: where, when (the observer event), how.
#[derive(Clone, Debug)]
struct Went {
    node: String,
    time: u64,
    index: u64,
    how: Gone,
    /// Who sent the command that made it go, when the observer could tell.
    by: Option<String>,
}

/// What the observer saw of one token.
#[derive(Default)]
struct Life {
    /// Nodes whose key it was seen to hold.
    set_on: Vec<String>,
    /// Who set it (`by` of its `key-set`s): its holder.
    set_by: Option<String>,
    /// Where it was seen to go from (and not seen set on again since), in
    /// the order seen.
    gone_on: Vec<Went>,
    /// How it first went (since it was last gone from no node).
    first: Option<Gone>,
    /// `(time, index)` of the event after which it no longer owned the lock,
    /// while that holds.
    unowned: Option<(u64, u64)>,
    /// Its key was reported gone before its grant, with no set of it
    /// reported since: the winning attempt's set (a library that retries
    /// with one value) may yet be reported, late.
    gone_before_grant: bool,
}

#[derive(Default)]
pub struct Keys {
    /// Node → the token its key holds, as last seen.
    holding: FxHashMap<String, String>,
    /// Every node the observer has reported on.
    nodes: Vec<String>,
    tokens: FxHashMap<String, Life>,
    /// The tokens in the order first seen, the oldest forgotten first.
    order: VecDeque<String>,
    /// Tokens never forgotten (see [`Keys::pin`]).
    pinned: FxHashSet<String>,
}

impl Keys {
    /// Takes an observer event (anything else is ignored).
    pub fn on_event(&mut self, e: &Event) {
        if !e.process.is_observer() {
            return;
        }
        let node = e.node.clone().unwrap_or_default();
        if !self.nodes.contains(&node) {
            self.nodes.push(node.clone());
        }
        match e.f.as_str() {
            key::SET => {
                let Some(token) = e.token.clone() else { return };
                let before = self.holding.insert(node.clone(), token.clone());
                if let Some(other) = before.filter(|t| *t != token) {
                    self.gone(&other, &node, Gone::Overwritten, e);
                }
                let majority = self.majority();
                let life = self.life(&token);
                if let Some(by) = e.value.get(key::BY).and_then(|b| b.as_str()) {
                    life.set_by = Some(by.to_string());
                }
                if !life.set_on.contains(&node) {
                    life.set_on.push(node.clone());
                }
                // Set again (a Redlock retry with the same token, after its
                // failed attempt's unlock deleted it): it holds this node
                // again, and what its failed attempt did tells nothing.
                life.gone_on.retain(|w| w.node != node);
                if life.gone_on.len() < majority {
                    life.unowned = None;
                    life.gone_before_grant = false;
                }
                if life.gone_on.is_empty() {
                    life.first = None;
                }
            }
            key::EXPIRED | key::DELETED => {
                let held = self.holding.get(&node);
                let Some(token) = e.token.clone().or_else(|| held.cloned()) else {
                    return;
                };
                if held == Some(&token) {
                    self.holding.remove(&node);
                }
                let how = match e.f == key::EXPIRED {
                    true => Gone::Expired,
                    false => Gone::Deleted,
                };
                self.gone(&token, &node, how, e);
            }
            _ => {}
        }
    }

    /// `token`'s life, new if unknown (forgetting the oldest unpinned one
    /// when more than [`KEPT`] are known).
    fn life(&mut self, token: &str) -> &mut Life {
        if !self.tokens.contains_key(token) {
            self.forget_oldest();
            self.order.push_back(token.to_string());
        }
        self.tokens.entry(token.to_string()).or_default()
    }

    fn forget_oldest(&mut self) {
        for _ in 0..self.order.len() {
            if self.tokens.len() < KEPT {
                return;
            }
            let Some(old) = self.order.pop_front() else {
                return;
            };
            let held = self.holding.values().any(|t| *t == old);
            match held || self.pinned.contains(&old) {
                true => self.order.push_back(old),
                false => _ = self.tokens.remove(&old),
            }
        }
    }

    /// The lock was granted to `token`: what its failed attempts did before
    /// (a Redlock round that falls short unlocks the nodes it got, and the
    /// next round reuses the token) tells nothing of this hold. The winning
    /// round's sets may be reported after the grant (the observer stamps
    /// what it reads, late), so the slate is cleared rather than read from
    /// them: the key counts as gone only once seen going after the grant.
    ///
    /// Forgotten: what went before `since` (when the winning attempt was
    /// sent, where the client says), and the holder's own deletes (its
    /// failed rounds' unlocks, whose report can come late). A plain `DEL`
    /// of another client that lands between the winning `SET` and the
    /// grant's record stays: that is this hold's loss.
    pub fn granted(&mut self, token: &str, since: u64) {
        let majority = self.majority();
        if let Some(life) = self.tokens.get_mut(token) {
            let holder = life.set_by.clone();
            let own = |w: &Went| w.how == Gone::Deleted && w.by.is_some() && w.by == holder;
            life.gone_on.retain(|w| w.time >= since && !own(w));
            life.first = life.gone_on.first().map(|w| w.how);
            life.unowned = life.gone_on.get(majority - 1).map(|w| (w.time, w.index));
            life.gone_before_grant = life.unowned.is_some();
        }
    }

    /// Keeps `token` until [`Keys::unpin`]: its holder may still be asked
    /// about, or an overlap's label needs it at the end.
    pub fn pin(&mut self, token: &str) {
        self.pinned.insert(token.to_string());
    }

    pub fn unpin(&mut self, token: &str) {
        self.pinned.remove(token);
    }

    /// How many tokens are remembered or pinned (for tests of memory).
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.tokens.len() + self.pinned.len()
    }

    fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    fn gone(&mut self, token: &str, node: &str, how: Gone, e: &Event) {
        let majority = self.majority();
        let life = self.life(token);
        if life.gone_on.iter().any(|w| w.node == node) {
            return;
        }
        life.gone_on.push(Went {
            node: node.to_string(),
            time: e.time,
            index: e.index,
            how,
            by: e
                .value
                .get(key::BY)
                .and_then(|b| b.as_str())
                .map(String::from),
        });
        life.first.get_or_insert(how);
        if life.unowned.is_none() && life.gone_on.len() >= majority {
            life.unowned = Some((e.time, e.index));
        }
    }

    /// The `index` of the observer event after which `token` no longer
    /// owned the lock, if that event came before `time`.
    pub fn unowned_before(&self, token: &str, time: u64) -> Option<u64> {
        let (at, index) = self.tokens.get(token)?.unowned?;
        (at < time).then_some(index)
    }

    /// Whether the observer has reported on any node: a history with its
    /// events, whose later reports a judgement may wait for.
    pub fn watched(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// Who set `token`'s key (its holder's name, as the observer gives it).
    pub fn holder(&self, token: &str) -> Option<&str> {
        self.tokens.get(token)?.set_by.as_deref()
    }

    /// Whether `token`'s key was seen deleted by `by` at or after `since`.
    pub fn deleted_by(&self, token: &str, by: &str, since: u64) -> bool {
        self.tokens.get(token).is_some_and(|l| {
            l.gone_on
                .iter()
                .any(|w| w.how == Gone::Deleted && w.time >= since && w.by.as_deref() == Some(by))
        })
    }

    /// Whether `token`'s loss was reported before its grant and not yet
    /// undone: an op judged unowned for it waits for the winning set's
    /// report (see `Mutex`), which would undo it.
    pub fn gone_before_grant(&self, token: &str) -> bool {
        self.tokens.get(token).is_some_and(|l| l.gone_before_grant)
    }

    /// Whether `token`'s key has been seen to go: its label no longer
    /// changes (its holder, granted, sets it nowhere again).
    pub fn settled(&self, token: &str) -> bool {
        self.tokens.get(token).is_some_and(|l| l.first.is_some())
    }

    /// How `token`'s key went, as an overlap's label: `None` if the observer
    /// never saw the key hold it.
    pub fn label(&self, token: &str) -> Option<&'static str> {
        let life = self.tokens.get(token)?;
        if life.set_on.is_empty() && life.gone_on.is_empty() {
            return None;
        }
        Some(match life.first {
            Some(Gone::Expired | Gone::Deleted) => LEASE_EXPIRED,
            Some(Gone::Overwritten) | None => KEY_LOST,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;

    fn keys(h: &Hist) -> Keys {
        let mut keys = Keys::default();
        h.build().in_time_order().for_each(|e| keys.on_event(e));
        keys
    }

    #[test]
    fn a_token_owns_the_lock_until_its_key_is_seen_gone() {
        let mut h = Hist::new();
        h.key(key::SET, "n1", "a"); // 0, t=0
        h.key(key::EXPIRED, "n1", "a"); // 1, t=10
        h.key(key::SET, "n1", "b"); // 2
        h.key(key::DELETED, "n1", "b")
            .value(serde_json::json!({"by": "worker-0"})); // 3
        let k = keys(&h);
        assert_eq!(k.unowned_before("a", 10), None, "gone at 10, not before");
        assert_eq!(k.unowned_before("a", 11), Some(1));
        assert_eq!(k.unowned_before("b", 100), Some(3));
        assert_eq!(k.unowned_before("c", 100), None, "never seen");
        assert_eq!(k.label("a"), Some(LEASE_EXPIRED));
        assert_eq!(k.label("b"), Some(LEASE_EXPIRED));
        assert_eq!(k.label("c"), None);
    }

    #[test]
    fn a_key_overwritten_or_never_seen_to_go_was_lost() {
        let mut h = Hist::new();
        h.key(key::SET, "n1", "a"); // the node restarts empty here
        h.key(key::SET, "n1", "b"); // 1: a's key is gone, unseen
        h.key(key::SET, "n2", "c");
        let k = keys(&h);
        assert_eq!(k.label("a"), Some(KEY_LOST));
        assert_eq!(k.unowned_before("a", 100), Some(1));
        assert_eq!(k.label("b"), Some(KEY_LOST), "never seen to go");
        assert_eq!(k.unowned_before("b", 100), None);
    }

    #[test]
    fn on_five_nodes_a_token_owns_the_lock_until_gone_from_three() {
        let mut h = Hist::new();
        for n in ["n1", "n2", "n3", "n4", "n5"] {
            h.key(key::SET, n, "a");
        }
        h.key(key::EXPIRED, "n1", "a"); // 5
        h.key(key::EXPIRED, "n2", "a"); // 6
        h.key(key::EXPIRED, "n2", "a"); // 7: seen twice, counted once
        assert_eq!(keys(&h).unowned_before("a", 1000), None);
        h.key(key::DELETED, "n4", "a"); // 8
        assert_eq!(keys(&h).unowned_before("a", 1000), Some(8));
    }

    #[test]
    fn old_tokens_are_forgotten_but_pinned_ones_are_kept() {
        let mut h = Hist::new();
        for t in ["pinned", "old"] {
            h.key(key::SET, "n1", t);
            h.key(key::EXPIRED, "n1", t);
        }
        for i in 0..KEPT {
            let t = format!("t{i}");
            h.key(key::SET, "n1", &t);
            h.key(key::DELETED, "n1", &t);
        }
        let mut k = Keys::default();
        k.pin("pinned");
        h.build().in_time_order().for_each(|e| k.on_event(e));
        assert_eq!(k.label("pinned"), Some(LEASE_EXPIRED));
        assert_eq!(k.label("old"), None, "forgotten");
        assert!(k.tokens.len() <= KEPT + 1, "{}", k.tokens.len());
        k.unpin("pinned");
        assert!(k.pinned.is_empty());
    }

    #[test]
    fn a_token_set_again_owns_the_nodes_it_was_deleted_from() {
        let mut h = Hist::new();
        // A Redlock attempt that won two nodes, then unlocked them.
        for n in ["n1", "n2"] {
            h.key(key::SET, n, "a");
            h.key(key::DELETED, n, "a");
        }
        h.key(key::SET, "n3", "b"); // someone else's key on n3 for a while
        h.key(key::DELETED, "n3", "b");
        for n in ["n1", "n2", "n3", "n4"] {
            h.key(key::SET, n, "a"); // the retry wins four of five
        }
        h.key(key::EXPIRED, "n3", "a");
        let k = keys(&h);
        assert_eq!(k.unowned_before("a", 1000), None, "still on n1, n2, n4");
        assert_eq!(k.label("a"), Some(LEASE_EXPIRED), "its n3 key expired");
    }
}
