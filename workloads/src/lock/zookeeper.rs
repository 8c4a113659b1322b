//! `zookeeper` and `zookeeper-fenced`: the lock the way ZooKeeper's own
//! recipe (and Curator's `InterProcessMutex`) takes it. Each contender
//! creates an ephemeral sequential node under the lock's path, and the
//! lowest sequence holds; the node lives as long as its session, whose
//! timeout (the run's TTL) is the lease, kept alive by the client's pings
//! ([`crate::zookeeper`]). Where the recipe watches its predecessor, a
//! waiting worker lists the children again on its next try: the same
//! grants, later by at most a retry interval. The release deletes the node.
//!
//! The fence is the node's creation zxid (`czxid`): the lowest sequence is
//! the earliest created, so each holder's is higher than every earlier
//! holder's. `zookeeper-fenced` hands it to the storage, which refuses a
//! lower one than it has seen; `zookeeper` hands it to no one.
//!
//! A request whose effect is unknown (its connection broke before the
//! answer) ends the session, so no node of ours it may have left behind
//! can hold or block the lock after it.

use super::{Grant, LockClient, LockParams};
use crate::zookeeper::{Client, Failure, EPHEMERAL_SEQUENTIAL, NODE_EXISTS, NO_NODE, PERSISTENT};
use crate::Outcome;
use checker::history::error::NOT_HELD;
use std::net::Ipv4Addr;
use std::time::Duration;

pub struct ZooKeeper {
    members: Vec<String>,
    source: Option<Ipv4Addr>,
    ttl: Duration,
    op_timeout: Duration,
    /// The lock's path: its contenders' nodes are its children.
    dir: String,
    fenced: bool,
    session: Option<Client>,
    /// Our contender node (its full path) and its creation zxid.
    mine: Option<(String, i64)>,
}

impl ZooKeeper {
    pub fn new(params: &LockParams, fenced: bool) -> Self {
        ZooKeeper {
            members: params.nodes.clone(),
            source: params.source,
            ttl: params.ttl,
            op_timeout: params.op_timeout,
            dir: format!("/{}", params.keys.lock().replace('/', "_")),
            fenced,
            session: None,
            mine: None,
        }
    }

    /// The live session, opened (with the lock's path made) if there is
    /// none or the last one expired: its nodes went with it.
    fn session(&mut self) -> Result<&Client, Failure> {
        if self.session.as_ref().is_some_and(|s| !s.alive()) {
            self.session = None;
        }
        if self.session.is_none() {
            self.mine = None;
            let client = Client::connect(&self.members, self.source, self.ttl, self.op_timeout)?;
            match client.create(&self.dir, b"", PERSISTENT) {
                Ok(_) | Err(Failure::Refused(NODE_EXISTS)) => {}
                Err(failure) => return Err(failure),
            }
            self.session = Some(client);
        }
        Ok(self.session.as_ref().expect("opened above"))
    }

    /// Ends the session: whatever nodes it has go with it.
    fn end_session(&mut self) {
        self.session = None;
        self.mine = None;
    }

    fn try_acquire_in_session(&mut self, token: &str) -> Result<Option<Grant>, Failure> {
        let dir = self.dir.clone();
        if self.mine.is_none() {
            let client = self.session()?;
            let (path, stat) = client.create(
                &format!("{dir}/lock-"),
                token.as_bytes(),
                EPHEMERAL_SEQUENTIAL,
            )?;
            self.mine = Some((path, stat.czxid));
        }
        let children = self.session()?.children(&dir)?;
        let Some((path, czxid)) = self.mine.clone() else {
            return Ok(None);
        };
        let name = path.rsplit('/').next().unwrap_or_default();
        if !children.iter().any(|c| c == name) {
            // Gone without an expiry we saw: contend again.
            self.mine = None;
            return Ok(None);
        }
        let lowest = children.iter().min_by_key(|c| sequence(c));
        Ok((lowest.map(String::as_str) == Some(name)).then(|| Grant {
            fence: self.fenced.then_some(czxid as u64),
            ..Grant::default()
        }))
    }
}

/// A sequential node's sequence: its last ten digits.
fn sequence(name: &str) -> u64 {
    let digits = &name[name.len().saturating_sub(10)..];
    digits.parse().unwrap_or(u64::MAX)
}

/// A failure as the history records it: definite when nothing took effect.
fn outcome<T>(failure: Failure) -> Outcome<T> {
    match failure {
        Failure::NotSent(why) => Outcome::Fail(format!("unreachable: {why}")),
        Failure::Unknown(why) => Outcome::Info(format!("timeout: {why}")),
        Failure::Expired => Outcome::Fail(format!("{NOT_HELD}: the session expired")),
        Failure::Refused(code) => Outcome::Fail(format!("refused: ZooKeeper error {code}")),
    }
}

impl LockClient for ZooKeeper {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        match self.try_acquire_in_session(token) {
            Ok(grant) => Outcome::Ok(grant),
            Err(failure) => {
                if matches!(failure, Failure::Unknown(_) | Failure::Expired) {
                    self.end_session();
                }
                outcome(failure)
            }
        }
    }

    fn release(&mut self, _token: &str) -> Outcome<()> {
        let Some((path, _)) = self.mine.take() else {
            return Outcome::Fail(NOT_HELD.into());
        };
        let Some(session) = self.session.as_ref() else {
            return Outcome::Fail(NOT_HELD.into());
        };
        match session.delete(&path) {
            Ok(()) => Outcome::Ok(()),
            Err(Failure::Refused(NO_NODE)) => Outcome::Fail(NOT_HELD.into()),
            Err(failure) => {
                // Our node may still be there, at the head of the queue:
                // ending the session removes it.
                self.end_session();
                outcome(failure)
            }
        }
    }

    /// The client's own view, as Curator's connection state gives it: held
    /// while the session has not been seen to expire.
    fn own_view(&mut self) -> Option<Outcome<bool>> {
        let alive = self.session.as_ref().is_some_and(Client::alive);
        Some(Outcome::Ok(alive && self.mine.is_some()))
    }

    fn fences(&self) -> bool {
        self.fenced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_sequence_is_read_from_the_name_s_last_ten_digits() {
        assert_eq!(sequence("lock-0000000042"), 42);
        assert!(sequence("lock-0000000009") < sequence("lock-0000000010"));
        assert_eq!(sequence("lock-"), u64::MAX, "no sequence sorts last");
    }
}
