//! `single`: one node, `SET key token NX PX ttl`, compare-and-delete release.

use super::{first_node, released, Grant, LockClient, LockParams, COMPARE_AND_DELETE};
use crate::conn::Conn;
use crate::Outcome;
use redis::Script;

pub struct Single {
    /// The lock's key, the run's.
    key: String,
    conn: Conn,
    ttl_ms: u64,
    release: Script,
}

impl Single {
    pub fn new(params: &LockParams) -> Self {
        Single {
            key: params.keys.lock(),
            conn: params.connect(first_node(params), params.op_timeout),
            ttl_ms: params.ttl.as_millis() as u64,
            release: Script::new(COMPARE_AND_DELETE),
        }
    }

    /// `SET NX PX`, shared with the configs whose flaw lies elsewhere (the
    /// release, the key, what happens while held).
    pub(super) fn set_nx_px(
        conn: &mut Conn,
        key: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Outcome<Option<Grant>> {
        conn.run(|c| Self::set_nx_px_cmd(key, token, ttl_ms).query::<Option<String>>(c))
            .map(|set| set.map(|_| Grant::default()))
    }

    /// `SET key token NX PX ttl_ms`: set only if absent, expiring.
    pub(super) fn set_nx_px_cmd(key: &str, token: &str, ttl_ms: u64) -> redis::Cmd {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
        cmd
    }
}

impl LockClient for Single {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        Self::set_nx_px(&mut self.conn, &self.key, token, self.ttl_ms)
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        let script = &self.release;
        released(
            self.conn
                .run(|c| script.key(&self.key).arg(token).invoke(c)),
        )
    }
}
