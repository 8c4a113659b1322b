//! Keeping a held lease alive: a thread per hold renews it every TTL/3
//! until the lock is released or a renewal does not succeed, as Redisson's
//! watchdog and etcd's lease keep-alive do. What one renewal is belongs to
//! the lock ([`Renew`]); the thread, its schedule and its `extend` ops in
//! the history live here.
//!
//! The thread runs inside the worker process, so a SIGSTOP of the worker
//! freezes it with its holder: a pause longer than the TTL still lets the
//! lease expire under a holder that believes it holds the lock.
//!
//! Each renewal is an `extend` op in the history under a process of its own
//! (`watchdog-<worker>`, `keepalive-<worker>`): the worker's process has its
//! loop's op in flight (a read or a write) while the renewal runs, and a
//! process has one op in flight at a time.

use super::Renewal;
use crate::clock::LockClock;
use crate::recorder::Recorder;
use crate::Outcome;
use checker::history::{f, OpType, Process};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One renewal of the held lease, and nothing else, so a fault can be aimed
/// between renewals: `Ok` if the lease was still ours and now lives
/// another TTL. The renewer goes back to its lock when the hold ends.
pub(crate) trait Renew: Send + 'static {
    fn renew(&mut self) -> Outcome<()>;
}

/// What every hold's renewal thread shares with its lock.
pub(crate) struct Renewals {
    /// The lease as the renewals left it, for the worker's lease check.
    pub lease: Arc<Mutex<Renewal>>,
    pub clock: Arc<LockClock>,
    pub recorder: Recorder,
    /// The process its `extend` ops are recorded under.
    pub who: Process,
    /// How long a lease lives: renewed every third of it.
    pub ttl: Duration,
}

impl Renewals {
    /// Starts renewing the lease of the hold under `token`, granted by a
    /// request sent at `acquired`: the first renewal is due a third of a
    /// TTL after that.
    pub fn start<R: Renew>(&self, renewer: R, token: &str, acquired: Instant) -> Renewing<R> {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Renewal::Unrenewed;
        let thread = Thread {
            renewer,
            token: token.to_string(),
            interval: self.ttl / 3,
            clock: self.clock.clone(),
            lease: self.lease.clone(),
            recorder: self.recorder.clone(),
            who: self.who.clone(),
        };
        let stop = Arc::new(Stop::default());
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("renewal".into())
            .spawn(move || thread.run(acquired, &stopped))
            .expect("spawning the renewal thread");
        Renewing { stop, thread }
    }

    pub fn lease(&self) -> Renewal {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A renewal thread at work, and how to stop it.
pub(crate) struct Renewing<R> {
    stop: Arc<Stop>,
    thread: JoinHandle<R>,
}

impl<R> Renewing<R> {
    /// Stops the thread, waiting out a renewal in flight, and hands back
    /// its renewer.
    pub fn stop(self) -> R {
        self.stop.stop();
        self.thread
            .join()
            .expect("the renewal thread does not panic")
    }
}

struct Thread<R> {
    renewer: R,
    token: String,
    interval: Duration,
    clock: Arc<LockClock>,
    lease: Arc<Mutex<Renewal>>,
    recorder: Recorder,
    who: Process,
}

impl<R: Renew> Thread<R> {
    /// Renews every interval, counted from when the previous lease's request
    /// was sent, until stopped or a renewal does not succeed.
    fn run(mut self, acquired: Instant, stop: &Stop) -> R {
        let mut due = acquired + self.interval;
        while !stop.wait_until(due) {
            let sent = Instant::now();
            let sent_ns = self.clock.now_ns();
            let renewed = self.extend();
            let mut lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
            if renewed {
                *lease = Renewal::Renewed(sent_ns);
                due = sent + self.interval;
            } else {
                *lease = Renewal::Lost;
                break;
            }
        }
        self.renewer
    }

    /// One renewal, recorded as an `extend` op.
    fn extend(&mut self) -> bool {
        let token = self.token.as_str();
        let invoke = self
            .recorder
            .event(self.who.clone(), OpType::Invoke, f::EXTEND);
        self.recorder.record(invoke.with_token(token));
        let outcome = self.renewer.renew();
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
}
