//! `fenced`: `single` plus a fencing token. One script sets the key and
//! increments the fence counter, so a grant and its token are atomic.

use super::{first_node, released, Grant, LockClient, LockParams, COMPARE_AND_DELETE};
use crate::conn::Conn;
use crate::Outcome;
use redis::Script;

/// The fence counter lives as long as the run's keys may (ARGV[3] ms; 0:
/// for ever, on nodes lockstorm started).
pub(super) const ACQUIRE: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[2])
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
  return fence
end
return false
"#;

pub struct Fenced {
    /// The lock's key, the run's.
    key: String,
    fence_key: String,
    /// How long the fence counter lives (0: for ever).
    expire_ms: u64,
    conn: Conn,
    ttl_ms: u64,
    acquire: Script,
    release: Script,
}

impl Fenced {
    pub fn new(params: &LockParams) -> Self {
        Fenced {
            key: params.keys.lock(),
            fence_key: params.keys.fence(),
            expire_ms: params.keys.expire_ms.unwrap_or(0),
            conn: params.connect(first_node(params), params.op_timeout),
            ttl_ms: params.ttl.as_millis() as u64,
            acquire: Script::new(ACQUIRE),
            release: Script::new(COMPARE_AND_DELETE),
        }
    }
}

impl LockClient for Fenced {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        let (script, ttl_ms) = (&self.acquire, self.ttl_ms);
        self.conn
            .run(|c| {
                script
                    .key(&self.key)
                    .key(&self.fence_key)
                    .arg(token)
                    .arg(ttl_ms)
                    .arg(self.expire_ms)
                    .invoke::<Option<u64>>(c)
            })
            .map(|fence| {
                fence.map(|f| Grant {
                    fence: Some(f),
                    ..Grant::default()
                })
            })
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        let script = &self.release;
        released(
            self.conn
                .run(|c| script.key(&self.key).arg(token).invoke(c)),
        )
    }
}
