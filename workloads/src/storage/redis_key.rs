//! The counter as a Redis key on the storage node. Fenced, a Lua script
//! refuses stale tokens.

use super::Storage;
use crate::conn::Conn;
use crate::{Keys, Outcome};
use checker::history::error::STALE_FENCE;
use redis::Script;
use std::time::Duration;

/// The fenced script's arguments: fence, mode, expiry, value. The mode
/// (0-based argument [`MODE_ARG`]) is [`WRITE_MODE`] or [`READ_MODE`]; the
/// fault proxy is told this layout to tell a fenced write from a read.
pub const MODE_ARG: usize = 1;
pub const WRITE_MODE: &str = "w";
pub const READ_MODE: &str = "r";

/// Rejects a token lower than the highest seen; otherwise remembers it and
/// reads (ARGV[2] = 'r') or writes ARGV[4] (ARGV[2] = 'w'), atomically.
/// ARGV[3] > 0: both keys live that many ms (a deployment's storage).
const FENCED_OP: &str = r#"
local fence = tonumber(ARGV[1])
local expire = tonumber(ARGV[3])
local highest = tonumber(redis.call('GET', KEYS[2]) or '-1')
if fence < highest then
  return {0, highest}
end
redis.call('SET', KEYS[2], fence)
if expire > 0 then
  redis.call('PEXPIRE', KEYS[2], expire)
end
if ARGV[2] == 'w' then
  if expire > 0 then
    redis.call('SET', KEYS[1], ARGV[4], 'PX', expire)
  else
    redis.call('SET', KEYS[1], ARGV[4])
  end
  return {1, tonumber(ARGV[4])}
end
return {1, tonumber(redis.call('GET', KEYS[1]) or '0')}
"#;

pub struct RedisStorage {
    conn: Conn,
    fenced: Option<Script>,
    counter: String,
    highest_fence: String,
    /// How long the counter's keys live, in ms (0: for ever).
    expire_ms: u64,
}

impl RedisStorage {
    pub fn plain(addr: &str, keys: &Keys, op_timeout: Duration) -> Self {
        RedisStorage {
            conn: Conn::new(addr, op_timeout),
            fenced: None,
            counter: keys.counter(),
            highest_fence: keys.highest_fence(),
            expire_ms: keys.expire_ms.unwrap_or(0),
        }
    }

    /// Logs in on every connection (a deployment's node as the storage).
    pub fn with_login(mut self, login: Option<crate::conn::Login>) -> Self {
        self.conn = self.conn.with_login(login);
        self
    }

    pub fn fenced(addr: &str, keys: &Keys, op_timeout: Duration) -> Self {
        RedisStorage {
            fenced: Some(Script::new(FENCED_OP)),
            ..RedisStorage::plain(addr, keys, op_timeout)
        }
    }

    /// The fenced script: only called when the storage has it.
    fn fenced_op(&mut self, fence: u64, write: Option<i64>) -> Outcome<i64> {
        let script = self.fenced.as_ref().expect("a fenced storage");
        let (counter, highest, expire_ms) = (&self.counter, &self.highest_fence, self.expire_ms);
        let reply = self.conn.run(|c| {
            let mut call = script.key(counter);
            call.key(highest).arg(fence);
            match write {
                Some(v) => call.arg(WRITE_MODE).arg(expire_ms).arg(v),
                None => call.arg(READ_MODE).arg(expire_ms),
            };
            call.invoke::<(i64, i64)>(c)
        });
        match reply {
            Outcome::Ok((1, value)) => Outcome::Ok(value),
            Outcome::Ok((_, _highest)) => Outcome::Fail(STALE_FENCE.into()),
            Outcome::Fail(e) => Outcome::Fail(e),
            Outcome::Info(e) => Outcome::Info(e),
        }
    }
}

impl Storage for RedisStorage {
    fn read(&mut self, fence: Option<u64>) -> Outcome<i64> {
        match (&self.fenced, fence) {
            (Some(_), Some(fence)) => self.fenced_op(fence, None),
            _ => self.conn.run(|c| {
                redis::cmd("GET")
                    .arg(&self.counter)
                    .query::<Option<i64>>(c)
                    .map(|v| v.unwrap_or(0))
            }),
        }
    }

    fn write(&mut self, value: i64, fence: Option<u64>) -> Outcome<()> {
        match (&self.fenced, fence) {
            (Some(_), Some(fence)) => self.fenced_op(fence, Some(value)).map(|_| ()),
            _ => {
                let (counter, expire_ms) = (&self.counter, self.expire_ms);
                // The value last either way: the fault proxy reads a held
                // write's value from the end of the command.
                self.conn.run(|c| match expire_ms {
                    0 => redis::cmd("SET").arg(counter).arg(value).query::<()>(c),
                    ms => redis::cmd("PSETEX")
                        .arg(counter)
                        .arg(ms)
                        .arg(value)
                        .query::<()>(c),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_reads_its_mode_where_the_constants_say() {
        // Lua counts from 1; the constants (and the proxy) from 0.
        let mode = format!("ARGV[{}] == '{WRITE_MODE}'", MODE_ARG + 1);
        assert!(FENCED_OP.contains(&mode), "{mode} not in the script");
    }
}
