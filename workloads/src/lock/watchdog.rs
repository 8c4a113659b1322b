//! `watchdog`: `single` whose holder keeps its lease alive, as Redisson's
//! lock watchdog does. While the lock is held, a renewal thread
//! ([`super::renewal`]) extends the key's expiry every TTL/3 with a
//! compare-and-`PEXPIRE` (only while the key still holds this holder's
//! token) and marks the lock lost the first time a renewal does not
//! succeed; the worker's lease check then says not held. Its renewals are
//! `extend` ops of process `watchdog-<worker>`.

use super::renewal::{Renew, Renewals, Renewing};
use super::single::Single;
use super::{first_node, released, Grant, LockClient, LockParams, Renewal, COMPARE_AND_DELETE};
use crate::conn::Conn;
use crate::Outcome;
use checker::history::Process;
use redis::Script;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Extends the key's expiry only if it still holds our token, so a holder
/// whose key expired cannot revive (or lengthen) the next holder's lock.
const COMPARE_AND_PEXPIRE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

pub struct Watchdog {
    /// The lock's key, the run's.
    key: String,
    conn: Conn,
    ttl: Duration,
    release: Script,
    renewals: Renewals,
    /// The renewal connection while no lock is held; the renewal thread
    /// owns it while one is, and hands it back when it stops.
    spare: Option<Conn>,
    renewing: Option<Renewing<Pexpire>>,
}

impl Watchdog {
    pub fn new(params: &LockParams) -> Self {
        let node = first_node(params);
        Watchdog {
            key: params.keys.lock(),
            conn: params.connect(node, params.op_timeout),
            ttl: params.ttl,
            release: Script::new(COMPARE_AND_DELETE),
            renewals: Renewals {
                lease: Arc::new(Mutex::new(Renewal::Unrenewed)),
                clock: params.clock.clone(),
                recorder: params.recorder.clone(),
                who: Process::Named(format!("watchdog-{}", params.worker)),
                ttl: params.ttl,
            },
            spare: Some(params.connect(node, params.op_timeout)),
            renewing: None,
        }
    }

    fn start_renewing(&mut self, token: &str, sent: Instant) {
        self.stop_renewing();
        let renewer = Pexpire {
            conn: self
                .spare
                .take()
                .expect("the spare is back whenever nothing renews"),
            script: Script::new(COMPARE_AND_PEXPIRE),
            key: self.key.clone(),
            token: token.to_string(),
            ttl: self.ttl,
        };
        self.renewing = Some(self.renewals.start(renewer, token, sent));
    }

    /// Stops the renewal thread, waiting out a renewal in flight, and takes
    /// its connection back.
    fn stop_renewing(&mut self) {
        if let Some(renewing) = self.renewing.take() {
            self.spare = Some(renewing.stop().conn);
        }
    }
}

impl LockClient for Watchdog {
    fn try_acquire(&mut self, token: &str) -> Outcome<Option<Grant>> {
        // The lease cannot have started before the request was sent: the
        // first renewal is due a third of a TTL after this.
        let sent = Instant::now();
        let ttl_ms = self.ttl.as_millis() as u64;
        let granted = Single::set_nx_px(&mut self.conn, &self.key, token, ttl_ms);
        if let Outcome::Ok(Some(_)) = granted {
            self.start_renewing(token, sent);
        }
        granted
    }

    fn release(&mut self, token: &str) -> Outcome<()> {
        // Renewing stops before the release is sent: a renewal after it
        // would find the key gone and record a failure that means nothing.
        self.stop_renewing();
        let script = &self.release;
        released(
            self.conn
                .run(|c| script.key(&self.key).arg(token).invoke(c)),
        )
    }

    fn renewal(&self) -> Renewal {
        self.renewals.lease()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

/// One hold's renewal: the compare-and-`PEXPIRE` on the thread's own
/// connection.
struct Pexpire {
    conn: Conn,
    script: Script,
    key: String,
    token: String,
    ttl: Duration,
}

impl Renew for Pexpire {
    fn renew(&mut self) -> Outcome<()> {
        let (script, ttl_ms) = (&self.script, self.ttl.as_millis() as u64);
        // PEXPIRE answers 1 as DEL does: a key found (ours) and changed.
        released(
            self.conn
                .run(|c| script.key(&self.key).arg(&self.token).arg(ttl_ms).invoke(c)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::test_nodes::Nodes;
    use crate::recorder::Recorder;
    use checker::history::{error::NOT_HELD, f, Event, OpType};
    use redis::Commands;

    fn recorded(nodes: &Nodes, ttl: Duration) -> (Watchdog, Arc<Mutex<Vec<Event>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let mut params = nodes.params(ttl);
        params.worker = 3;
        params.recorder = Recorder::new(crate::clock::RunClock::starting_now(), move |e| {
            sink.lock().unwrap().push(e)
        });
        (Watchdog::new(&params), events)
    }

    #[test]
    fn a_held_lock_outlives_its_ttl_and_renewing_stops_at_release() {
        let nodes = Nodes::start(1);
        // A TTL of 1 s, renewed every 333 ms: a renewal thread starved for
        // 300 ms on a busy 2-core machine (a matrix beside the tests) let a
        // 300 ms key expire.
        let ttl = Duration::from_millis(1_000);
        let (mut a, events) = recorded(&nodes, ttl);
        let mut b = Watchdog::new(&nodes.params(ttl));
        assert_eq!(a.try_acquire("A"), Outcome::Ok(Some(Grant::default())));
        std::thread::sleep(3 * ttl);
        // Three TTLs later the key is still A's, and renewed recently.
        assert_eq!(b.try_acquire("B"), Outcome::Ok(None));
        assert!(
            matches!(a.renewal(), Renewal::Renewed(_)),
            "{:?}",
            a.renewal()
        );
        assert_eq!(a.release("A"), Outcome::Ok(()));
        let extends = {
            let events = events.lock().unwrap();
            assert!(events.iter().all(|e| e.f == f::EXTEND
                && e.process == Process::Named("watchdog-3".into())
                && e.token.as_deref() == Some("A")));
            assert!(events.iter().all(|e| e.kind != OpType::Fail), "{events:?}");
            events.len()
        };
        assert!(
            extends >= 4,
            "at least two renewals, each invoke and ok: {extends}"
        );
        // Stopped at release: nothing more is recorded, and B gets the lock.
        std::thread::sleep(ttl / 2);
        assert_eq!(events.lock().unwrap().len(), extends);
        assert_eq!(b.try_acquire("B"), Outcome::Ok(Some(Grant::default())));
        assert_eq!(b.release("B"), Outcome::Ok(()));
    }

    #[test]
    fn a_renewal_that_finds_the_key_someone_elses_marks_the_lock_lost() {
        let nodes = Nodes::start(1);
        let (mut a, events) = recorded(&nodes, Duration::from_millis(300));
        assert_eq!(a.try_acquire("A"), Outcome::Ok(Some(Grant::default())));
        // Someone else's key now (as after an expiry and a rival's SET).
        let _: () = nodes
            .client(0)
            .set(crate::Keys::default().lock(), "B")
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while a.renewal() != Renewal::Lost {
            assert!(Instant::now() < deadline, "never marked lost");
            std::thread::sleep(Duration::from_millis(10));
        }
        let last = events.lock().unwrap().last().cloned().unwrap();
        assert_eq!(
            (last.kind, last.error.as_deref()),
            (OpType::Fail, Some(NOT_HELD))
        );
        // The renewal left B's key alone (no expiry set on it).
        let ttl: i64 = nodes.client(0).pttl(crate::Keys::default().lock()).unwrap();
        assert_eq!(ttl, -1, "B's key got an expiry");
        assert_eq!(a.release("A"), Outcome::Fail(NOT_HELD.into()));
    }
}
