//! A trap: one named command of one worker (or of whichever worker sends it
//! first) held or dropped once, with the proxy's evidence of what it did.
//! Plain data in ([`Trap`]), plain data out ([`Caught`], [`Sprung`]).

use crate::command::{Class, Role};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// What to do to the matching command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Act {
    /// Hold the request this long before it goes on (the command arrives late).
    HoldRequest(Duration),
    /// Hold the request at least `hold`, then until another worker's
    /// `after` request (on the same role) has been answered — a grant, for
    /// an acquire — and let it go right behind it: the write that reaches
    /// the storage after the next holder's, the release that reaches the
    /// node after the key changed hands. Waits at most `hold` more for it.
    HoldPast { hold: Duration, after: Class },
    /// Forward the request; hold its reply this long. With `granted_only`,
    /// only a reply that grants the lock is held.
    HoldReply { hold: Duration, granted_only: bool },
    /// Forward the request; drop its reply and reset the client's connection.
    /// An acquire's reply is dropped only when it grants the lock.
    DropReply,
}

/// Which command to catch, and what to do to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trap {
    /// Worker indices it may catch (`None`: any worker).
    pub workers: Option<Vec<usize>>,
    pub role: Role,
    pub class: Class,
    pub act: Act,
}

/// The command a trap caught, the moment it did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Caught {
    pub worker: usize,
    /// The upstream's name (`n1`, `storage`, …).
    pub node: String,
    pub class: Class,
    /// The request's words, cut short.
    pub command: String,
    #[serde(skip)]
    pub at: Instant,
}

/// What the trap did, once it is done.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sprung {
    #[serde(flatten)]
    pub caught: Caught,
    /// How long the command (or its reply) was held; 0 for a dropped reply.
    pub held_ms: u64,
    /// Bytes held back (or dropped).
    pub bytes: usize,
    /// Client connections reset.
    pub reset: u32,
    /// The hold ended early because the fault was healed (the run ended).
    pub cut_short: bool,
    /// For a hold past another's request: whether that request was answered
    /// before this one went on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behind_another: Option<bool>,
    /// When a held request went on to the node.
    #[serde(skip)]
    pub delivered: Option<Instant>,
    /// The node's reply to a held request, cut short (`None`: the link
    /// ended before it came).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// Whether that reply says the node did what was asked (a write's `OK`,
    /// the fenced script's `{1, …}`; not an error, a null or a refusal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted: Option<bool>,
}

impl Default for Caught {
    fn default() -> Self {
        Caught {
            worker: 0,
            node: String::new(),
            class: Class::Other,
            command: String::new(),
            at: Instant::now(),
        }
    }
}

/// How many answers to lock and counter requests (grants only, for an
/// acquire) the proxy has passed to each worker, by role and class. A tally
/// rather than the latest answer, so that a watcher that wakes late still
/// sees every answer it slept through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answered(HashMap<(usize, Role, Class), u64>);

impl Answered {
    pub fn count(&mut self, worker: usize, role: Role, class: Class) {
        *self.0.entry((worker, role, class)).or_default() += 1;
    }

    /// Answers to `class` on `role` passed to workers other than `me`.
    pub fn others(&self, me: usize, role: Role, class: Class) -> u64 {
        self.0
            .iter()
            .filter(|((w, r, c), _)| *w != me && *r == role && *c == class)
            .map(|(_, n)| n)
            .sum()
    }
}

/// A trap set in the fabric, shared by every connection that may match it.
#[derive(Debug)]
pub(crate) struct Set {
    pub trap: Trap,
    taken: AtomicBool,
    caught: Mutex<Option<oneshot::Sender<Caught>>>,
    done: Mutex<Option<oneshot::Sender<Sprung>>>,
    /// Turns true when the fault is healed: a hold in progress ends now.
    pub heal: watch::Receiver<bool>,
}

/// The nemesis's side of a set trap.
#[derive(Debug)]
pub struct Armed {
    pub caught: oneshot::Receiver<Caught>,
    pub done: oneshot::Receiver<Sprung>,
    heal: watch::Sender<bool>,
}

impl Armed {
    /// Ends the trap: untaken, it never catches; holding, the command goes
    /// on now.
    pub fn heal(&self) {
        let _ = self.heal.send(true);
    }
}

pub(crate) fn new(trap: Trap) -> (Set, Armed) {
    let (caught_tx, caught) = oneshot::channel();
    let (done_tx, done) = oneshot::channel();
    let (heal, heal_rx) = watch::channel(false);
    let set = Set {
        trap,
        taken: AtomicBool::new(false),
        caught: Mutex::new(Some(caught_tx)),
        done: Mutex::new(Some(done_tx)),
        heal: heal_rx,
    };
    (set, Armed { caught, done, heal })
}

impl Set {
    /// Whether a command of `worker` on a `role` upstream is this trap's.
    pub fn matches(&self, worker: usize, role: Role, class: Class) -> bool {
        !self.taken.load(Ordering::Relaxed)
            && !*self.heal.borrow()
            && self.trap.role == role
            && self.trap.class == class
            && self
                .trap
                .workers
                .as_ref()
                .is_none_or(|w| w.contains(&worker))
    }

    /// Takes the trap for this command; false if another took it first.
    pub fn take(&self, caught: Caught) -> bool {
        if self.taken.swap(true, Ordering::SeqCst) {
            return false;
        }
        if let Some(tx) = self.caught.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(caught);
        }
        true
    }

    pub fn done(&self, sprung: Sprung) {
        if let Some(tx) = self.done.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(sprung);
        }
    }

    pub fn is_over(&self) -> bool {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
            || *self.heal.borrow()
    }

    /// Sleeps for `hold`, or less if the trap is healed; returns whether the
    /// hold was cut short.
    pub async fn hold(&self, hold: Duration) -> bool {
        let mut heal = self.heal.clone();
        tokio::select! {
            _ = tokio::time::sleep(hold) => false,
            _ = heal.wait_for(|h| *h) => true,
        }
    }

    /// Like [`Set::hold`], then waits (at most `hold` more) for the next
    /// answer to another worker's `after` request on the trap's role, so the
    /// request goes on right behind it: the write lands just before a reader
    /// can see it, the release while the key is freshly another's. Returns
    /// (cut short, whether any such answer came since the catch — during the
    /// hold counts: the storage had already moved on).
    pub async fn hold_past(
        &self,
        hold: Duration,
        answered: &mut watch::Receiver<Answered>,
        me: usize,
        after: Class,
    ) -> (bool, bool) {
        let role = self.trap.role;
        let caught = answered.borrow_and_update().others(me, role, after);
        let cut_short = self.hold(hold).await;
        let held = answered.borrow_and_update().others(me, role, after);
        if cut_short {
            return (true, held > caught);
        }
        let mut heal = self.heal.clone();
        let fresh = |a: &Answered| a.others(me, role, after) > held;
        tokio::select! {
            seen = tokio::time::timeout(hold, answered.wait_for(fresh)) => {
                (false, held > caught || matches!(seen, Ok(Ok(_))))
            }
            _ = heal.wait_for(|h| *h) => (true, held > caught),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_trap() -> (Set, Armed) {
        new(Trap {
            workers: None,
            role: Role::Storage,
            class: Class::Write,
            act: Act::HoldPast {
                hold: Duration::from_millis(20),
                after: Class::Write,
            },
        })
    }

    /// Holds worker 0's write while `answer` happens, polled only once the
    /// hold has taken its snapshot.
    async fn held_while(answer: impl FnOnce(&mut Answered)) -> (bool, bool) {
        let (set, _armed) = write_trap();
        let (tx, mut rx) = watch::channel(Answered::default());
        let hold = set.hold_past(Duration::from_millis(20), &mut rx, 0, Class::Write);
        let during = async { tx.send_modify(answer) };
        tokio::join!(hold, during).0
    }

    #[tokio::test]
    async fn another_write_answered_during_the_hold_puts_the_held_one_behind() {
        let behind = held_while(|a| a.count(1, Role::Storage, Class::Write)).await;
        assert_eq!(behind, (false, true));
    }

    #[tokio::test]
    async fn its_own_or_other_answers_do_not() {
        let own = held_while(|a| a.count(0, Role::Storage, Class::Write)).await;
        assert_eq!(own, (false, false));
        let read = held_while(|a| a.count(1, Role::Storage, Class::Read)).await;
        assert_eq!(read, (false, false));
        let lock = held_while(|a| a.count(1, Role::Lock, Class::Write)).await;
        assert_eq!(lock, (false, false));
    }

    #[test]
    fn the_tally_keeps_answers_a_late_watcher_slept_through() {
        let mut a = Answered::default();
        a.count(1, Role::Storage, Class::Write);
        a.count(2, Role::Storage, Class::Write);
        a.count(2, Role::Lock, Class::Acquire);
        assert_eq!(a.others(0, Role::Storage, Class::Write), 2);
        assert_eq!(a.others(1, Role::Storage, Class::Write), 1);
        assert_eq!(a.others(2, Role::Lock, Class::Acquire), 0);
    }
}
