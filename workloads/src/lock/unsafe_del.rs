//! `unsafe-del` (negative control): acquires like `single` but releases with a
//! plain `DEL`, so a holder whose lease expired deletes the next holder's lock.

use super::single::Single;
use super::{first_node, released, Grant, LockClient, LockParams};
use crate::conn::Conn;
use crate::Outcome;

pub struct UnsafeDel {
    /// The lock's key, the run's.
    key: String,
    conn: Conn,
    ttl_ms: u64,
}

impl UnsafeDel {
    pub fn new(params: &LockParams) -> Self {
        UnsafeDel {
            key: params.keys.lock(),
            conn: params.connect(first_node(params), params.op_timeout),
            ttl_ms: params.ttl.as_millis() as u64,
        }
    }
}

impl LockClient for UnsafeDel {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        Single::set_nx_px(&mut self.conn, &self.key, token, self.ttl_ms)
    }

    fn release(&mut self, _token: &str) -> Outcome<()> {
        released(self.conn.run(|c| redis::cmd("DEL").arg(&self.key).query(c)))
    }
}
