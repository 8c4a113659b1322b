//! `cluster`: `SET NX PX` on the Redis Cluster master that serves the lock
//! key's slot, compare-and-delete release. The master is found from
//! `CLUSTER SLOTS` on any node, and a `MOVED` reply (the node no longer
//! serves the slot: it did not run the command) is followed once. After a
//! failover the replica that took over serves the slot, with whatever of
//! the key reached it: replication is asynchronous, so a key the old master
//! granted and never sent is gone.
//!
//! `cluster-fenced` takes a fencing token with the key, in `fenced`'s one
//! script: its counter must be in the lock key's slot (a script touches one
//! slot; another is refused, `CROSSSLOT`), which the run's hash-tagged keys
//! give. The counter is then as durable as the key, no more.
//!
//! Routing is ours, over [`Conn`], rather than the `redis` crate's cluster
//! client: that client retries a request whose reply was lost (an acquire
//! that may have taken effect would be recorded as refused) and cannot
//! leave from the worker's own address.

use super::{released, Grant, LockClient, LockParams, COMPARE_AND_DELETE};
use crate::conn::Conn;
use crate::Outcome;
use redis::{ConnectionLike, RedisResult, Script, Value};

pub struct Cluster {
    key: String,
    /// Every node of the cluster: where the slots' masters are asked.
    seeds: Vec<String>,
    /// The slot's master as last found, and its address.
    master: Option<(String, Conn)>,
    params: LockParams,
    ttl_ms: u64,
    release: Script,
    /// `cluster-fenced`: the fence counter's key, the script that takes
    /// the lock with a token, and how long the counter lives (0: for ever).
    fence: Option<(String, Script, u64)>,
}

impl Cluster {
    pub fn new(params: &LockParams, fenced: bool) -> Self {
        let fence = fenced.then(|| {
            let expire_ms = params.keys.expire_ms.unwrap_or(0);
            (
                params.keys.fence(),
                Script::new(super::fenced::ACQUIRE),
                expire_ms,
            )
        });
        Cluster {
            fence,
            key: params.keys.lock(),
            seeds: params.nodes.clone(),
            master: None,
            params: params.clone(),
            ttl_ms: params.ttl.as_millis() as u64,
            release: Script::new(COMPARE_AND_DELETE),
        }
    }

    /// The slot's master, asking the seeds in turn when none is known.
    fn master(&mut self) -> Result<&mut Conn, String> {
        if self.master.is_none() {
            let mut last = String::from("no node given");
            for seed in &self.seeds {
                let mut conn = self.params.connect(seed, self.params.op_timeout);
                match conn.run(|c| slot_master(c, &self.key)) {
                    Outcome::Ok(Some(addr)) => {
                        let conn = self.params.connect(&addr, self.params.op_timeout);
                        self.master = Some((addr, conn));
                        break;
                    }
                    Outcome::Ok(None) => last = format!("{seed}: no master serves the slot"),
                    Outcome::Fail(e) | Outcome::Info(e) => last = format!("{seed}: {e}"),
                }
            }
            if self.master.is_none() {
                return Err(format!("no master of the lock's slot found: {last}"));
            }
        }
        Ok(&mut self.master.as_mut().expect("just found").1)
    }

    /// Runs `request` on the slot's master, following one `MOVED`. A
    /// failure forgets the master, so the next attempt asks again (it may
    /// have been failed over).
    fn on_master<T>(
        &mut self,
        request: impl Fn(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Outcome<T> {
        for _ in 0..2 {
            let conn = match self.master() {
                Ok(conn) => conn,
                Err(e) => return Outcome::Fail(e),
            };
            let sent = conn.run(|c| match request(c) {
                Err(e) if e.code() == Some("MOVED") => {
                    Ok(Err(e.redirect_node().map(|(a, _)| a.to_string())))
                }
                other => other.map(Ok),
            });
            match sent {
                Outcome::Ok(Ok(v)) => return Outcome::Ok(v),
                Outcome::Ok(Err(Some(addr))) => {
                    let conn = self.params.connect(&addr, self.params.op_timeout);
                    self.master = Some((addr, conn));
                }
                Outcome::Ok(Err(None)) => self.master = None,
                Outcome::Fail(e) => {
                    self.master = None;
                    return Outcome::Fail(e);
                }
                Outcome::Info(e) => {
                    self.master = None;
                    return Outcome::Info(e);
                }
            }
        }
        Outcome::Fail("moved twice: the cluster is changing its slots' masters".into())
    }
}

/// The address of the master serving `key`'s slot, from `CLUSTER SLOTS`
/// (its reply: `[start, end, [ip, port, id], replicas…]` per range).
fn slot_master(c: &mut dyn ConnectionLike, key: &str) -> RedisResult<Option<String>> {
    let slot: i64 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(c)?;
    let ranges: Vec<Vec<Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(c)?;
    for range in ranges {
        let (Some(start), Some(end), Some(master)) = (range.first(), range.get(1), range.get(2))
        else {
            continue;
        };
        let start: i64 = redis::from_redis_value_ref(start)?;
        let end: i64 = redis::from_redis_value_ref(end)?;
        if (start..=end).contains(&slot) {
            let (ip, port): (String, u16) = match master {
                Value::Array(at) if at.len() >= 2 => (
                    redis::from_redis_value_ref(&at[0])?,
                    redis::from_redis_value_ref(&at[1])?,
                ),
                _ => continue,
            };
            return Ok(Some(format!("{ip}:{port}")));
        }
    }
    Ok(None)
}

impl LockClient for Cluster {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        let (key, ttl_ms) = (self.key.clone(), self.ttl_ms);
        if let Some((fence_key, script, expire_ms)) = self.fence.clone() {
            let mut acquire = script.prepare_invoke();
            acquire
                .key(&key)
                .key(&fence_key)
                .arg(token)
                .arg(ttl_ms)
                .arg(expire_ms);
            return self
                .on_master(|c| acquire.invoke::<Option<u64>>(c))
                .map(|fence| {
                    fence.map(|f| Grant {
                        fence: Some(f),
                        ..Grant::default()
                    })
                });
        }
        let set = super::single::Single::set_nx_px_cmd(&key, token, ttl_ms);
        self.on_master(|c| set.query::<Option<String>>(c))
            .map(|set| set.map(|_| Grant::default()))
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        let (script, key) = (self.release.clone(), self.key.clone());
        released(self.on_master(|c| script.key(&key).arg(token).invoke(c)))
    }
}
