//! `redlock-rslock`: Redlock as implemented by the published `rslock` crate
//! (0.10, async, on redis 1.8), driven through its public API only. Whatever
//! rslock does is the behaviour under test; this module only translates its
//! answers into history outcomes.
//!
//! **What rslock does** (0.10.0 source): one acquisition round sends
//! `SET key <20 random bytes> NX PX ttl` to every node concurrently, counts a
//! node only if it answered `OK`, and measures the round on `Instant` (the
//! host's monotonic clock; our in-process validity-clock skew does not reach
//! it). Validity = TTL − elapsed − drift with drift = ⌊TTL_ms·0.01⌋ + 2 ms. If
//! TTL ≤ elapsed + drift it returns `TtlExceeded` at once, *without* unlocking
//! the nodes it set. With a quorum (N/2+1) it returns a `Lock` carrying its
//! validity; otherwise it sends compare-and-delete to every node and, if it
//! has retries left, sleeps a random 0..delay and tries again, finally
//! `Unavailable`. Per-node errors (refused, timed out, dropped) are swallowed
//! and count as "not locked": rslock cannot tell contention from dead nodes.
//! Its connections use redis-rs' defaults (1 s connect, 500 ms response
//! timeout), which rslock offers no way to change.
//!
//! **Retries**: rslock retries 3 times by default; we call
//! `set_retry(1, 1 ms)`, i.e. exactly one round per `try_acquire` and no sleep
//! (the worker loop owns retries). We never use `acquire`, which loops forever.
//!
//! **Acquire mapping**: `Ok(Lock)` → `Ok(Some(Grant::default()))`;
//! `Unavailable` (no quorum, keys cleaned up best effort) → `Ok(None)`, which
//! the worker records as `lock-busy` even when the cause was unreachable
//! nodes, since rslock does not say. A key left behind by such a round (a
//! lost reply, a failed cleanup) only keeps others out until its TTL, and
//! this client never acts as its holder, so `fail` is true for the mutex.
//! `TtlExceeded` → `Info` (keys may remain set: rslock does not clean them
//! up); `TtlTooLarge`/`Io` → `Fail` (raised before anything is sent); a round
//! cut off by our safety bound (TTL + op timeout) → `Info("timeout")`, as a
//! cancelled round may have set keys.
//!
//! **Release mapping**: rslock's unlock returns `()`, best effort: it sends
//! compare-and-delete to every node and reports nothing. So:
//! - a token we hold no rslock `Lock` for → `Fail("not-held")`: nothing is sent;
//! - any other release → `Info`: rslock does not say whether the deletes
//!   reached a majority, or whether our keys were still there (a pause, a
//!   clock jump on the nodes, may have expired them and let another client in,
//!   whose lock compare-and-delete leaves alone). Even within rslock's own
//!   validity the answer is unknown, since the nodes' clocks may disagree with
//!   ours. `Ok` would claim we freed a lock we may no longer have held, which
//!   the checker would rightly read as a foreign release; `Fail("not-held")`
//!   would claim nothing was deleted. The hold still ends at the release
//!   `invoke`, and after the `info` the worker goes on under a new process id.

use super::{Grant, LockClient, LockParams};
use crate::Outcome;
use checker::history::error::{NOT_HELD, TIMEOUT};
use rslock::{Lock, LockError, LockManager};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

/// Why a release is `info`: rslock's unlock returns nothing.
const UNREPORTED: &str = "unreported: rslock's unlock returns nothing";

pub struct RedlockRslock {
    /// The lock's key, the run's.
    key: String,
    rt: tokio::runtime::Runtime,
    manager: LockManager,
    ttl: Duration,
    /// Upper bound on one rslock call, beyond rslock's own per-node timeouts.
    bound: Duration,
    /// Our token → the rslock lock (with its own random value) it stands for.
    held: HashMap<String, Lock>,
}

impl RedlockRslock {
    pub fn new(params: &LockParams) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .expect("a current-thread tokio runtime can always be built");
        let uris: Vec<String> = params
            .nodes
            .iter()
            .map(|addr| {
                let login = params.login.as_ref().map(|l| {
                    let password = crate::conn::Login::password();
                    crate::conn::Login::userinfo(l.user.as_deref(), password.as_deref())
                });
                let db = params.login.as_ref().map_or(0, |l| l.db);
                format!("redis://{}{addr}/{db}", login.unwrap_or_default())
            })
            .collect();
        let mut manager = LockManager::new(uris);
        // One round per attempt; the delay is never slept with count 1, but
        // rslock draws from 0..delay when it does, so keep it non-empty.
        manager.set_retry(1, Duration::from_millis(1));
        RedlockRslock {
            key: params.keys.lock(),
            rt,
            manager,
            ttl: params.ttl,
            // A round longer than the TTL can never yield a valid lock, and
            // rslock's own timeouts (1 s connect, 500 ms response) end a
            // round well before this on any realistic TTL.
            bound: params.ttl + params.op_timeout,
            held: HashMap::new(),
        }
    }

    /// Runs one rslock call to completion, or `None` if it hit the bound (the
    /// call is then dropped mid-flight, so its effect is unknown).
    fn run<T>(&self, call: impl Future<Output = T>) -> Option<T> {
        self.rt
            .block_on(async { tokio::time::timeout(self.bound, call).await.ok() })
    }
}

impl LockClient for RedlockRslock {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        let attempt = self.run(self.manager.lock(self.key.as_bytes(), self.ttl));
        match attempt {
            None => Outcome::Info(TIMEOUT.into()),
            Some(Ok(lock)) => {
                self.held.insert(token.to_string(), lock);
                Outcome::Ok(Some(Grant::default()))
            }
            Some(Err(LockError::Unavailable)) => Outcome::Ok(None),
            Some(Err(LockError::TtlExceeded)) => {
                Outcome::Info("rslock: TTL exceeded during acquisition; keys may remain set".into())
            }
            Some(Err(e @ (LockError::TtlTooLarge | LockError::Io(_)))) => {
                Outcome::Fail(format!("rslock: {e}"))
            }
            // Not produced by rslock 0.10's `lock`; unknown, to be safe.
            Some(Err(e)) => Outcome::Info(format!("rslock: {e}")),
        }
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        let Some(lock) = self.held.remove(token) else {
            return Outcome::Fail(NOT_HELD.into());
        };
        match self.run(lock.release()) {
            None => Outcome::Info(TIMEOUT.into()),
            Some(()) => Outcome::Info(UNREPORTED.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::test_nodes::Nodes;
    use std::thread::sleep;

    fn params(nodes: &Nodes, ttl: Duration) -> LockParams {
        nodes.params(ttl)
    }

    #[test]
    fn mutual_exclusion_then_handover() {
        let nodes = Nodes::start(5);
        let p = params(&nodes, Duration::from_secs(10));
        let mut a = RedlockRslock::new(&p);
        let mut b = RedlockRslock::new(&p);

        assert_eq!(a.try_acquire("A"), Outcome::Ok(Some(Grant::default())));
        assert_eq!(b.try_acquire("B"), Outcome::Ok(None));
        // B never held: nothing to release.
        assert_eq!(b.release("B"), Outcome::Fail(NOT_HELD.into()));
        assert_eq!(a.release("A"), Outcome::Info(UNREPORTED.into()));
        // Released twice: the second is not held.
        assert_eq!(a.release("A"), Outcome::Fail(NOT_HELD.into()));
        // A's unlock did reach the nodes, even though rslock does not say so.
        assert_eq!(b.try_acquire("B"), Outcome::Ok(Some(Grant::default())));
        assert_eq!(b.release("B"), Outcome::Info(UNREPORTED.into()));
    }

    #[test]
    fn a_release_after_validity_ran_out_is_unknown() {
        let nodes = Nodes::start(5);
        let p = params(&nodes, Duration::from_millis(300));
        let mut a = RedlockRslock::new(&p);
        let mut b = RedlockRslock::new(&p);
        assert_eq!(a.try_acquire("A"), Outcome::Ok(Some(Grant::default())));
        sleep(Duration::from_millis(400));
        assert_eq!(b.try_acquire("B"), Outcome::Ok(Some(Grant::default())));
        assert!(matches!(a.release("A"), Outcome::Info(_)));
        // A's compare-and-delete left B's lock alone.
        let mut c = RedlockRslock::new(&p);
        assert_eq!(c.try_acquire("C"), Outcome::Ok(None));
        assert!(matches!(b.release("B"), Outcome::Info(_)));
    }

    #[test]
    fn no_grant_without_a_majority() {
        let mut nodes = Nodes::start(5);
        let p = params(&nodes, Duration::from_secs(10));
        let mut a = RedlockRslock::new(&p);
        // Connect to every node first, so the kill also breaks live connections.
        assert_eq!(a.try_acquire("warm"), Outcome::Ok(Some(Grant::default())));
        assert!(matches!(a.release("warm"), Outcome::Info(_)));
        for i in [0, 2, 4] {
            nodes.kill(i);
        }
        // rslock counts the dead nodes as refusals: `Unavailable`, no grant.
        for token in ["A1", "A2"] {
            assert_eq!(a.try_acquire(token), Outcome::Ok(None), "{token} on 2 of 5");
        }
        let mut fresh = RedlockRslock::new(&p);
        assert_eq!(fresh.try_acquire("B"), Outcome::Ok(None), "B on 2 of 5");
        assert_eq!(fresh.release("B"), Outcome::Fail(NOT_HELD.into()));
    }
}
