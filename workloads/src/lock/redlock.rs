//! `redlock`: the Redlock algorithm on independent nodes. Acquire = `SET NX PX`
//! on every node with a per-node timeout much smaller than the TTL; the lock
//! is held only with a majority, and only while the validity
//! TTL − elapsed − drift is positive. Otherwise unlock everywhere.
//! Release = compare-and-delete on every node.
//!
//! Elapsed time is measured on the worker's lock clock, which the clock
//! nemesis can skew: a client whose clock runs slow believes in a lease that
//! has already expired on the nodes.

use super::single::Single;
use super::{Grant, LockClient, LockParams, COMPARE_AND_DELETE};
use crate::clock::LockClock;
use crate::conn::Conn;
use crate::strike::Hook;
use crate::Outcome;
use checker::history::error::NOT_HELD;
use checker::Point;
use redis::Script;
use std::sync::Arc;
use std::time::Duration;

/// Votes needed out of `n` nodes.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Clock drift allowance: TTL·1% + 2 ms.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Why an acquisition round does not hold the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    NoQuorum { votes: usize, needed: usize },
    Expired { elapsed: Duration },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoQuorum { votes, needed } => write!(f, "no-quorum: {votes}/{needed}"),
            Refusal::Expired { elapsed } => write!(f, "validity-expired: after {elapsed:?}"),
        }
    }
}

/// Pure: is a round with `votes` of `n` nodes, taking `elapsed`, a lock, and
/// for how long is it valid?
pub fn decide(
    votes: usize,
    n: usize,
    ttl: Duration,
    elapsed: Duration,
) -> Result<Duration, Refusal> {
    let needed = quorum(n);
    if votes < needed {
        return Err(Refusal::NoQuorum { votes, needed });
    }
    ttl.checked_sub(elapsed + drift(ttl))
        .filter(|v| !v.is_zero())
        .ok_or(Refusal::Expired { elapsed })
}

pub struct Redlock {
    /// The lock's key, the run's.
    key: String,
    nodes: Vec<Conn>,
    ttl: Duration,
    clock: Arc<LockClock>,
    release: Script,
    strike: Hook,
}

impl Redlock {
    pub fn new(params: &LockParams) -> Self {
        // Per-node timeout: small against the TTL, so one dead node cannot
        // eat the validity of the whole round.
        let per_node = (params.ttl / 50).clamp(Duration::from_millis(5), params.op_timeout);
        Redlock {
            key: params.keys.lock(),
            nodes: params
                .nodes
                .iter()
                .map(|a| params.connect(a, per_node))
                .collect(),
            ttl: params.ttl,
            clock: params.clock.clone(),
            release: Script::new(COMPARE_AND_DELETE),
            strike: params.strike.clone(),
        }
    }

    /// Compare-and-delete on every node: (deleted, unanswered). A release
    /// marks `releasing` after the first node, mid-round.
    fn unlock_all(&mut self, token: &str, releasing: bool) -> (usize, usize) {
        let (mut deleted, mut unanswered) = (0, 0);
        for (i, conn) in self.nodes.iter_mut().enumerate() {
            if releasing && i == 1 {
                self.strike.at(Point::Releasing);
            }
            let script = &self.release;
            match conn.run(|c| script.key(&self.key).arg(token).invoke::<i64>(c)) {
                Outcome::Ok(1) => deleted += 1,
                Outcome::Ok(_) => {}
                Outcome::Fail(_) | Outcome::Info(_) => unanswered += 1,
            }
        }
        (deleted, unanswered)
    }
}

impl LockClient for Redlock {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        let start = self.clock.now_ns();
        let ttl_ms = self.ttl.as_millis() as u64;
        let (mut granted, mut unanswered) = (Vec::new(), 0);
        for (i, conn) in self.nodes.iter_mut().enumerate() {
            // Mid-round, the first node's vote in hand: a pause here ages
            // the whole round, which the validity check must then refuse.
            if i == 1 && granted == [0] {
                self.strike.at(Point::Acquiring);
            }
            match Single::set_nx_px(conn, &self.key, token, ttl_ms) {
                Outcome::Ok(Some(_)) => granted.push(i),
                Outcome::Ok(None) => {}
                Outcome::Fail(_) | Outcome::Info(_) => unanswered += 1,
            }
        }
        let elapsed = Duration::from_nanos(self.clock.now_ns().saturating_sub(start).max(0) as u64);
        match decide(granted.len(), self.nodes.len(), self.ttl, elapsed) {
            Ok(_validity) => Outcome::Ok(Some(Grant {
                nodes: granted,
                ..Grant::default()
            })),
            Err(refusal) => {
                self.unlock_all(token, false);
                match refusal {
                    // Every node answered and others hold the key: contention.
                    Refusal::NoQuorum { .. } if unanswered == 0 => Outcome::Ok(None),
                    _ => Outcome::Fail(format!("{refusal}, {unanswered} unanswered")),
                }
            }
        }
    }

    /// Released only if our key went from a majority: deleting a leftover
    /// minority frees nothing (the lock was no longer ours).
    fn release(&mut self, token: &str) -> Outcome<()> {
        let needed = quorum(self.nodes.len());
        match self.unlock_all(token, true) {
            (deleted, _) if deleted >= needed => Outcome::Ok(()),
            (deleted, unanswered) if deleted + unanswered >= needed => Outcome::Info(format!(
                "partial-release: deleted on {deleted}, {unanswered} did not answer"
            )),
            _ => Outcome::Fail(NOT_HELD.into()),
        }
    }

    fn marks(&self) -> &'static [Point] {
        &[Point::Acquiring, Point::Releasing]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_millis(1000);

    #[test]
    fn a_majority_is_needed() {
        assert_eq!([1, 2, 3, 4, 5, 6].map(quorum), [1, 2, 2, 3, 3, 4]);
        assert_eq!(
            decide(2, 5, TTL, Duration::ZERO),
            Err(Refusal::NoQuorum {
                votes: 2,
                needed: 3
            })
        );
        assert!(decide(3, 5, TTL, Duration::ZERO).is_ok());
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        assert_eq!(drift(TTL), Duration::from_millis(12));
        let v = decide(5, 5, TTL, Duration::from_millis(100)).unwrap();
        assert_eq!(v, Duration::from_millis(888));
        // A round that took the whole lease minus the drift holds nothing.
        let elapsed = Duration::from_millis(988);
        assert_eq!(
            decide(5, 5, TTL, elapsed),
            Err(Refusal::Expired { elapsed })
        );
        assert!(decide(5, 5, TTL, Duration::from_millis(987)).is_ok());
    }
}
