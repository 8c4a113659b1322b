//! `unsafe-setnx` (negative control): `SETNX` then `PEXPIRE` as two commands.
//! A holder that dies between them leaves a lock that never expires.

use super::{first_node, released, Grant, LockClient, LockParams, COMPARE_AND_DELETE};
use crate::conn::Conn;
use crate::strike::Hook;
use crate::Outcome;
use checker::Point;
use redis::Script;

pub struct UnsafeSetnx {
    /// The lock's key, the run's.
    key: String,
    conn: Conn,
    ttl_ms: u64,
    release: Script,
    strike: Hook,
}

impl UnsafeSetnx {
    pub fn new(params: &LockParams) -> Self {
        UnsafeSetnx {
            key: params.keys.lock(),
            conn: params.connect(first_node(params), params.op_timeout),
            ttl_ms: params.ttl.as_millis() as u64,
            release: Script::new(COMPARE_AND_DELETE),
            strike: params.strike.clone(),
        }
    }
}

impl LockClient for UnsafeSetnx {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        let set = self.conn.run(|c| {
            redis::cmd("SETNX")
                .arg(&self.key)
                .arg(token)
                .query::<i64>(c)
        });
        match set {
            Outcome::Ok(1) => {}
            Outcome::Ok(_) => return Outcome::Ok(None),
            Outcome::Fail(e) => return Outcome::Fail(e),
            Outcome::Info(e) => return Outcome::Info(e),
        }
        // The gap this control exists for: a holder that stops here holds
        // a key that never expires.
        self.strike.at(Point::Acquiring);
        // The key is ours but has no expiry yet; if this step is lost the
        // acquisition is still real, so a lost reply is `info`, not `fail`.
        let ttl_ms = self.ttl_ms;
        match self.conn.run(|c| {
            redis::cmd("PEXPIRE")
                .arg(&self.key)
                .arg(ttl_ms)
                .query::<i64>(c)
        }) {
            Outcome::Ok(_) => Outcome::Ok(Some(Grant::default())),
            Outcome::Fail(e) | Outcome::Info(e) => Outcome::Info(format!("expire: {e}")),
        }
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        let script = &self.release;
        released(
            self.conn
                .run(|c| script.key(&self.key).arg(token).invoke(c)),
        )
    }

    fn marks(&self) -> &'static [Point] {
        &[Point::Acquiring]
    }
}
