//! `etcd` and `etcd-fenced`: the lock the way etcd's own recipe
//! (`clientv3/concurrency.Mutex`) takes it. A lease with the run's TTL; the
//! lock key put under it in a transaction guarded by `create_revision == 0`;
//! the lease kept alive every TTL/3 while held ([`super::renewal`], as the
//! recipe's session keeps it alive); the release deletes the key only if it
//! is still the one this holder created, then revokes the lease.
//!
//! The fence is the key's `create_revision`: the revision of the
//! transaction that created it, which grows with every write to the
//! cluster. `etcd-fenced` hands it to the storage, which refuses a lower
//! one than it has seen; `etcd` hands it to no one, as most users of the
//! recipe do.
//!
//! A request goes to the first member that answers, in order, as a client
//! balancer fails over; one whose answer may have taken effect is not
//! retried on another.

use super::renewal::{Renew, Renewals, Renewing};
use super::{Grant, LockClient, LockParams, Renewal};
use crate::etcd::{self, Failure, Gateway};
use crate::Outcome;
use checker::history::error::NOT_HELD;
use checker::history::Process;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub struct Etcd {
    members: Arc<Members>,
    key: String,
    ttl_s: i64,
    fenced: bool,
    /// The hold: its lease and the key's `create_revision`.
    held: Option<(i64, u64)>,
    renewals: Renewals,
    renewing: Option<Renewing<KeepAlive>>,
}

/// The cluster as a client sees it: its members' client addresses, and a
/// gateway client of its own (the keep-alive thread has another).
struct Members {
    addrs: Vec<String>,
    source: Option<std::net::Ipv4Addr>,
    timeout: std::time::Duration,
}

impl Members {
    fn gateway(&self) -> Gateway {
        Gateway::new(self.source, self.timeout).expect("a current-thread runtime starts")
    }

    /// `path` on the first member that takes it: one that could not be
    /// reached is skipped; an answer, or a failure that may have taken
    /// effect, ends the search.
    fn post(&self, gateway: &Gateway, path: &str, body: &Value) -> Result<Value, Failure> {
        let mut last = Failure::NotSent("no member".into());
        for member in &self.addrs {
            match gateway.post(member, path, body) {
                Err(Failure::NotSent(why)) => last = Failure::NotSent(why),
                answer => return answer,
            }
        }
        Err(last)
    }
}

/// A failure as the history records it: definite when nothing took effect.
fn outcome<T>(failure: Failure) -> Outcome<T> {
    match failure {
        Failure::NotSent(why) => Outcome::Fail(format!("unreachable: {why}")),
        Failure::Unknown(why) => Outcome::Info(format!("timeout: {why}")),
        Failure::Refused { code, message } => {
            Outcome::Fail(format!("refused: {message} (code {code})"))
        }
    }
}

impl Etcd {
    pub fn new(params: &LockParams, fenced: bool) -> Self {
        let members = Arc::new(Members {
            addrs: params.nodes.clone(),
            source: params.source,
            timeout: params.op_timeout,
        });
        Etcd {
            key: params.keys.lock(),
            // Leases are whole seconds: never shorter than the run's TTL.
            ttl_s: params.ttl.as_millis().div_ceil(1000).max(1) as i64,
            fenced,
            held: None,
            renewals: Renewals {
                lease: Arc::new(Mutex::new(Renewal::Unrenewed)),
                clock: params.clock.clone(),
                recorder: params.recorder.clone(),
                who: Process::Named(format!("keepalive-{}", params.worker)),
                ttl: params.ttl,
            },
            renewing: None,
            members,
        }
    }

    fn stop_renewing(&mut self) {
        if let Some(renewing) = self.renewing.take() {
            renewing.stop();
        }
    }

    /// Revokes a lease this client no longer needs, its key with it; a
    /// failure leaves it to expire.
    fn revoke(&self, gateway: &Gateway, lease: i64) {
        let _ = self
            .members
            .post(gateway, etcd::REVOKE, &etcd::revoke(lease));
    }
}

impl LockClient for Etcd {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        self.stop_renewing();
        // The lease cannot have started before its grant was sent: the
        // first keep-alive is due a third of a TTL after this.
        let sent = Instant::now();
        let gateway = self.members.gateway();
        // A held lock is seen with a read, before any write: a try that
        // granted a lease, lost the txn and revoked it cost three raft
        // commits, each fsynced by every member, and four waiting workers'
        // tries saturated the disk that the suite's other runs fsync to.
        // The recipe itself waits for the key's deletion rather than writing.
        match self
            .members
            .post(&gateway, etcd::RANGE, &etcd::count(&self.key))
        {
            Ok(answer) if etcd::counted(&answer) > 0 => return Outcome::Ok(None),
            Ok(_) => {}
            Err(failure) => return outcome(failure),
        }
        let lease = match self
            .members
            .post(&gateway, etcd::GRANT, &etcd::grant(self.ttl_s))
        {
            Ok(answer) => match etcd::granted(&answer) {
                Some((lease, _ttl)) => lease,
                None => return Outcome::Info(format!("unknown: no lease in {answer}")),
            },
            // A lease granted but unanswered holds nothing and expires.
            Err(failure) => return outcome(failure),
        };
        let txn = etcd::acquire(&self.key, token, lease);
        match self.members.post(&gateway, etcd::TXN, &txn) {
            Ok(answer) => match etcd::committed(&answer) {
                (true, revision) => {
                    self.held = Some((lease, revision));
                    let keep_alive = KeepAlive {
                        members: self.members.clone(),
                        gateway: self.members.gateway(),
                        lease,
                    };
                    self.renewing = Some(self.renewals.start(keep_alive, token, sent));
                    Outcome::Ok(Some(Grant {
                        fence: self.fenced.then_some(revision),
                        ..Grant::default()
                    }))
                }
                (false, _) => {
                    self.revoke(&gateway, lease);
                    Outcome::Ok(None)
                }
            },
            Err(failure) => {
                // The key may be ours: revoking the lease deletes it.
                self.revoke(&gateway, lease);
                outcome(failure)
            }
        }
    }

    fn release(&mut self, _token: &str) -> Outcome<()> {
        // Keep-alives stop before the release is sent: one after it would
        // find the lease gone and record a failure that means nothing.
        self.stop_renewing();
        let Some((lease, revision)) = self.held.take() else {
            return Outcome::Fail(NOT_HELD.into());
        };
        let gateway = self.members.gateway();
        let deleted = self
            .members
            .post(&gateway, etcd::TXN, &etcd::release(&self.key, revision));
        self.revoke(&gateway, lease);
        match deleted {
            Ok(answer) if etcd::committed(&answer).0 => Outcome::Ok(()),
            Ok(_) => Outcome::Fail(NOT_HELD.into()),
            Err(failure) => outcome(failure),
        }
    }

    fn renewal(&self) -> Renewal {
        self.renewals.lease()
    }

    fn fences(&self) -> bool {
        self.fenced
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

/// One keep-alive of the hold's lease, on the thread's own gateway client.
struct KeepAlive {
    members: Arc<Members>,
    gateway: Gateway,
    lease: i64,
}

impl Renew for KeepAlive {
    fn renew(&mut self) -> Outcome<()> {
        let body = etcd::keep_alive(self.lease);
        match self.members.post(&self.gateway, etcd::KEEP_ALIVE, &body) {
            Ok(answer) => match etcd::kept_alive(&answer) {
                Some(_) => Outcome::Ok(()),
                // TTL 0: the lease expired (or was revoked), its key gone.
                None => Outcome::Fail(NOT_HELD.into()),
            },
            Err(failure) => outcome(failure),
        }
    }
}
