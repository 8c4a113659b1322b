//! A trap: one named command of one worker (or of whichever worker sends it
//! first) held or dropped once, with the proxy's evidence of what it did.
//! Plain data in ([`Trap`]), plain data out ([`Caught`], [`Sprung`]).

use crate::command::{Class, Role};
use serde::Serialize;
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

/// The latest answer the proxy passed to a worker for a lock or counter
/// request (a grant only, for an acquire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answered {
    pub seq: u64,
    pub worker: usize,
    pub role: Role,
    pub class: Class,
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

    /// Like [`Set::hold`], then waits (at most `hold` more) until `answered`
    /// shows an answer to another worker's `after` request on `role`.
    /// Returns (cut short, whether that answer came).
    pub async fn hold_past(
        &self,
        hold: Duration,
        answered: &mut watch::Receiver<Answered>,
        me: usize,
        after: Class,
    ) -> (bool, bool) {
        if self.hold(hold).await {
            return (true, false);
        }
        answered.borrow_and_update();
        let role = self.trap.role;
        let mut heal = self.heal.clone();
        let theirs = |a: &Answered| a.worker != me && a.role == role && a.class == after;
        tokio::select! {
            seen = tokio::time::timeout(hold, answered.wait_for(theirs)) => (false, matches!(seen, Ok(Ok(_)))),
            _ = heal.wait_for(|h| *h) => (true, false),
        }
    }
}
