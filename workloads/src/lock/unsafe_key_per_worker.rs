//! `unsafe-key-per-worker` (negative control): each worker locks a key named
//! after itself (`SET lockstorm:lock:worker-<n> NX PX`), so no two workers
//! ever contend and every one of them holds "the" lock at once, with no
//! fault at all.

use super::single::Single;
use super::{first_node, released, Grant, LockClient, LockParams, COMPARE_AND_DELETE};
use crate::conn::Conn;
use crate::Outcome;
use redis::Script;

pub struct UnsafeKeyPerWorker {
    conn: Conn,
    key: String,
    ttl_ms: u64,
    release: Script,
}

impl UnsafeKeyPerWorker {
    pub fn new(params: &LockParams) -> Self {
        UnsafeKeyPerWorker {
            conn: params.connect(first_node(params), params.op_timeout),
            key: key_of(&params.keys, params.worker),
            ttl_ms: params.ttl.as_millis() as u64,
            release: Script::new(COMPARE_AND_DELETE),
        }
    }
}

/// The key worker `index` locks: its own, and so nobody else's.
fn key_of(keys: &crate::Keys, index: u64) -> String {
    format!("{}:{}", keys.lock(), checker::history::worker_name(index))
}

impl LockClient for UnsafeKeyPerWorker {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        Single::set_nx_px(&mut self.conn, &self.key, token, self.ttl_ms)
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        let (script, key) = (&self.release, &self.key);
        released(self.conn.run(|c| script.key(key).arg(token).invoke(c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::test_nodes::Nodes;
    use std::time::Duration;

    #[test]
    fn each_worker_has_a_key_of_its_own() {
        assert_eq!(
            key_of(&crate::Keys::default(), 3),
            "lockstorm:lock:worker-3"
        );
        assert_ne!(
            key_of(&crate::Keys::default(), 0),
            key_of(&crate::Keys::default(), 1)
        );
    }

    #[test]
    fn two_workers_both_hold_at_once() {
        let nodes = Nodes::start(1);
        let mut params = nodes.params(Duration::from_secs(10));
        let mut a = UnsafeKeyPerWorker::new(&params);
        params.worker = 1;
        let mut b = UnsafeKeyPerWorker::new(&params);
        assert_eq!(a.try_acquire("A"), Outcome::Ok(Some(Grant::default())));
        assert_eq!(b.try_acquire("B"), Outcome::Ok(Some(Grant::default())));
        // Its own key still excludes the same worker's next attempt.
        assert_eq!(a.try_acquire("A2"), Outcome::Ok(None));
        assert_eq!(a.release("A"), Outcome::Ok(()));
        assert_eq!(b.release("B"), Outcome::Ok(()));
    }
}
