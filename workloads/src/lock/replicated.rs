//! `replicated`: `SET NX PX` on the primary that Sentinel names, optionally
//! followed by `WAIT` for replicas. Replication is asynchronous, so a primary
//! that dies before the key reaches a replica takes the lock with it.

use super::single::Single;
use super::{released, Grant, LockClient, LockParams, COMPARE_AND_DELETE};
use crate::conn::Conn;
use crate::Outcome;
use redis::Script;
use std::time::Duration;

pub struct Replicated {
    /// The lock's key, the run's.
    key: String,
    sentinels: Vec<Conn>,
    /// The name the Sentinels watch the primary under.
    master: String,
    primary: Option<Conn>,
    /// How to log in to the primary (a deployment's).
    login: Option<crate::conn::Login>,
    source: Option<std::net::Ipv4Addr>,
    op_timeout: Duration,
    ttl_ms: u64,
    wait_replicas: u32,
    release: Script,
}

impl Replicated {
    pub fn new(params: &LockParams) -> Self {
        Replicated {
            key: params.keys.lock(),
            // Sentinels are asked without the data nodes' password: a
            // Sentinel's own (sentinel-pass) is another setting.
            sentinels: params
                .sentinels
                .iter()
                .map(|s| Conn::from(s, params.source, params.op_timeout))
                .collect(),
            master: params.master.clone(),
            login: params.login.clone(),
            primary: None,
            source: params.source,
            op_timeout: params.op_timeout,
            ttl_ms: params.ttl.as_millis() as u64,
            wait_replicas: params.wait_replicas,
            release: Script::new(COMPARE_AND_DELETE),
        }
    }

    /// The connection to the primary, asking the Sentinels when we have none.
    fn primary(&mut self) -> Result<&mut Conn, String> {
        if self.primary.is_none() {
            let mut last = String::from("no sentinel configured");
            for sentinel in &mut self.sentinels {
                let asked = sentinel.run(|c| {
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(&self.master)
                        .query::<Option<(String, u16)>>(c)
                });
                match asked {
                    Outcome::Ok(Some((ip, port))) => {
                        self.primary = Some(
                            Conn::from(&format!("{ip}:{port}"), self.source, self.op_timeout)
                                .with_login(self.login.clone()),
                        );
                        break;
                    }
                    Outcome::Ok(None) => last = "sentinel knows no primary".into(),
                    Outcome::Fail(e) | Outcome::Info(e) => last = format!("sentinel: {e}"),
                }
            }
            if self.primary.is_none() {
                return Err(last);
            }
        }
        Ok(self.primary.as_mut().expect("just resolved"))
    }

    /// Any failure may mean the primary moved (a refused connection, a
    /// READONLY reply from a demoted primary): ask Sentinel again next time.
    fn settle<T>(&mut self, outcome: Outcome<T>) -> Outcome<T> {
        if !matches!(outcome, Outcome::Ok(_)) {
            self.primary = None;
        }
        outcome
    }

    /// Waits until `wait_replicas` replicas have the key; if they do not,
    /// gives the lock back, so the acquisition did not happen.
    fn replicate(&mut self, token: &str) -> Outcome<Option<Grant>> {
        let (want, timeout_ms) = (self.wait_replicas, (self.op_timeout / 2).as_millis() as u64);
        let conn = self.primary.as_mut().expect("just acquired on it");
        let acked = conn.run(|c| redis::cmd("WAIT").arg(want).arg(timeout_ms).query::<u32>(c));
        match acked {
            Outcome::Ok(n) if n >= want => Outcome::Ok(Some(Grant::default())),
            Outcome::Ok(n) => match self.release(token) {
                Outcome::Ok(()) => {
                    Outcome::Fail(format!("not-replicated: {n}/{want} replicas acknowledged"))
                }
                Outcome::Fail(e) | Outcome::Info(e) => {
                    Outcome::Info(format!("not-replicated, release failed: {e}"))
                }
            },
            // The key is set; whether it stays is unknown.
            Outcome::Fail(e) | Outcome::Info(e) => self.settle(Outcome::Info(format!("wait: {e}"))),
        }
    }
}

impl LockClient for Replicated {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        let (ttl_ms, key) = (self.ttl_ms, self.key.clone());
        let set = match self.primary() {
            Ok(conn) => Single::set_nx_px(conn, &key, token, ttl_ms),
            Err(e) => return Outcome::Fail(e),
        };
        match self.settle(set) {
            Outcome::Ok(Some(_)) if self.wait_replicas > 0 => self.replicate(token),
            other => other,
        }
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        let (script, key) = (self.release.clone(), self.key.clone());
        let deleted = match self.primary() {
            Ok(conn) => conn.run(|c| script.key(&key).arg(token).invoke(c)),
            Err(e) => Outcome::Fail(e),
        };
        let deleted = self.settle(deleted);
        released(deleted)
    }
}
