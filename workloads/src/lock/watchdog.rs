//! `watchdog`: `single` whose holder keeps its lease alive, as Redisson's
//! lock watchdog does. While the lock is held, a renewal thread extends the
//! key's expiry every TTL/3 with a compare-and-`PEXPIRE` (only while the key
//! still holds this holder's token) and marks the lock lost the first time a
//! renewal does not succeed; the worker's lease check then says not held.
//!
//! The thread runs inside the worker process, so a SIGSTOP of the worker
//! freezes it with its holder: a pause longer than the TTL still lets the key
//! expire under a holder that believes it holds the lock.
//!
//! Each renewal is an `extend` op in the history under a process of its own,
//! `watchdog-<worker>`: the worker's process has its loop's op in flight
//! (a read or a write) while the renewal runs, and a process has one op in
//! flight at a time.

use super::single::Single;
use super::{first_node, released, Grant, LockClient, LockParams, Renewal, COMPARE_AND_DELETE};
use crate::clock::LockClock;
use crate::conn::Conn;
use crate::recorder::Recorder;
use crate::Outcome;
use checker::history::{f, OpType, Process};
use redis::Script;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
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
    clock: Arc<LockClock>,
    recorder: Recorder,
    who: Process,
    /// The renewal connection while no lock is held; the renewal thread
    /// owns it while one is, and hands it back when it stops.
    spare: Option<Conn>,
    renewing: Option<Renewing>,
    lease: Arc<Mutex<Renewal>>,
}

impl Watchdog {
    pub fn new(params: &LockParams) -> Self {
        let node = first_node(params);
        Watchdog {
            key: params.keys.lock(),
            conn: params.connect(node, params.op_timeout),
            ttl: params.ttl,
            release: Script::new(COMPARE_AND_DELETE),
            clock: params.clock.clone(),
            recorder: params.recorder.clone(),
            who: Process::Named(format!("watchdog-{}", params.worker)),
            spare: Some(params.connect(node, params.op_timeout)),
            renewing: None,
            lease: Arc::new(Mutex::new(Renewal::Unrenewed)),
        }
    }

    fn start_renewing(&mut self, token: &str, sent: Instant) {
        self.stop_renewing();
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Renewal::Unrenewed;
        let renewer = Renewer {
            conn: self
                .spare
                .take()
                .expect("the spare is back whenever nothing renews"),
            script: Script::new(COMPARE_AND_PEXPIRE),
            key: self.key.clone(),
            token: token.to_string(),
            ttl: self.ttl,
            clock: self.clock.clone(),
            lease: self.lease.clone(),
            recorder: self.recorder.clone(),
            who: self.who.clone(),
        };
        let stop = Arc::new(Stop::default());
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || renewer.run(sent, &stopped))
            .expect("spawning the renewal thread");
        self.renewing = Some(Renewing { stop, thread });
    }

    /// Stops the renewal thread, waiting out a renewal in flight, and takes
    /// its connection back.
    fn stop_renewing(&mut self) {
        let Some(Renewing { stop, thread }) = self.renewing.take() else {
            return;
        };
        stop.stop();
        self.spare = Some(thread.join().expect("the renewal thread does not panic"));
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
        *self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

/// A renewal thread at work, and how to stop it.
struct Renewing {
    stop: Arc<Stop>,
    thread: JoinHandle<Conn>,
}

/// What the renewal thread of one hold owns.
struct Renewer {
    conn: Conn,
    script: Script,
    key: String,
    token: String,
    ttl: Duration,
    clock: Arc<LockClock>,
    lease: Arc<Mutex<Renewal>>,
    recorder: Recorder,
    who: Process,
}

impl Renewer {
    /// Renews every TTL/3, counted from when the previous lease's request
    /// was sent, until stopped or a renewal does not succeed; returns the
    /// connection for the next hold.
    fn run(mut self, acquired: Instant, stop: &Stop) -> Conn {
        let interval = self.ttl / 3;
        let mut due = acquired + interval;
        while !stop.wait_until(due) {
            let sent = Instant::now();
            let sent_ns = self.clock.now_ns();
            let renewed = self.extend();
            let mut lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
            if renewed {
                *lease = Renewal::Renewed(sent_ns);
                due = sent + interval;
            } else {
                *lease = Renewal::Lost;
                break;
            }
        }
        self.conn
    }

    /// One renewal, recorded as an `extend` op: the compare-and-`PEXPIRE`
    /// and nothing else, so a fault can be aimed between renewals. `true`
    /// if the key was still ours and now lives another TTL.
    fn extend(&mut self) -> bool {
        let token = self.token.as_str();
        let invoke = self
            .recorder
            .event(self.who.clone(), OpType::Invoke, f::EXTEND);
        self.recorder.record(invoke.with_token(token));
        let (script, ttl_ms) = (&self.script, self.ttl.as_millis() as u64);
        // PEXPIRE answers 1 as DEL does: a key found (ours) and changed.
        let outcome = released(
            self.conn
                .run(|c| script.key(&self.key).arg(token).arg(ttl_ms).invoke(c)),
        );
        let (kind, error) = match &outcome {
            Outcome::Ok(()) => (OpType::Ok, None),
            Outcome::Fail(e) => (OpType::Fail, Some(e.clone())),
            Outcome::Info(e) => (OpType::Info, Some(e.clone())),
        };
        let mut done = self.recorder.event(self.who.clone(), kind, f::EXTEND);
        done = done.with_token(token);
        if let Some(error) = error {
            done = done.with_error(error);
        }
        self.recorder.record(done);
        outcome == Outcome::Ok(())
    }
}

/// A stop signal the renewal thread can wait on with a deadline.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
    }

    /// Waits until `due` or a stop, whichever comes first; `true` if stopped.
    fn wait_until(&self, due: Instant) -> bool {
        let stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        let timeout = due.saturating_duration_since(Instant::now());
        let (stopped, _) = self
            .wake
            .wait_timeout_while(stopped, timeout, |s| !*s)
            .unwrap_or_else(|e| e.into_inner());
        *stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::test_nodes::Nodes;
    use checker::history::{error::NOT_HELD, Event};
    use redis::Commands;

    #[test]
    fn a_stop_wakes_the_waiter_before_its_deadline() {
        let stop = Arc::new(Stop::default());
        let t0 = Instant::now();
        assert!(
            !stop.wait_until(t0 + Duration::from_millis(20)),
            "not stopped"
        );
        assert!(t0.elapsed() >= Duration::from_millis(20));
        let stopper = stop.clone();
        let waiter = std::thread::spawn(move || {
            stopper.wait_until(Instant::now() + Duration::from_secs(60))
        });
        stop.stop();
        assert!(waiter.join().unwrap(), "woken by the stop");
        assert!(
            stop.wait_until(Instant::now() + Duration::from_secs(60)),
            "stays stopped"
        );
    }

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
