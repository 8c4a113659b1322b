//! Unplanned stalls: a busy host starves a process exactly as SIGSTOP
//! freezes it, so a worker (or the harness) that was not scheduled for a
//! while must say so in the history. A monitor thread sleeps a short tick on
//! CLOCK_MONOTONIC and measures how late it wakes; a wake later than
//! [`THRESHOLD`] is a `stall` event naming who stalled and for how long.
//!
//! A worker frozen by the pause nemesis wakes late too. It reports that
//! stall like any other (it cannot tell who froze it); the checker's
//! attribution puts a stall that overlaps a nemesis fault down to the fault.

use crate::clock::{monotonic_ns, RunClock};
use checker::history::{f, Event, OpType, Process};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the monitor wakes: short, so a stall's length is measured to
/// about this precision (a fifth of [`THRESHOLD`]), and cheap. Every worker
/// and the harness have one: at 10 ms, the test suite's monitors took 6% of
/// its CPU time.
pub const TICK: Duration = Duration::from_millis(20);

/// The shortest lateness reported. Fixed rather than derived from the TTL so
/// the harness (which runs many TTLs in one matrix) and every worker report
/// alike. Scheduling noise on a loaded 2-core host is tens of milliseconds;
/// 100 ms is a twentieth of the default 2 s TTL, so a stall long enough to
/// eat into a lease is recorded and ordinary noise is not.
pub const THRESHOLD: Duration = Duration::from_millis(100);

/// Pure: a stall's length, if waking at `woke_ns` after going to sleep at
/// `slept_ns` for `tick` is later than `threshold`.
pub fn lateness(
    slept_ns: u64,
    woke_ns: u64,
    tick: Duration,
    threshold: Duration,
) -> Option<Duration> {
    let expected = slept_ns.saturating_add(tick.as_nanos() as u64);
    let late = Duration::from_nanos(woke_ns.saturating_sub(expected));
    (late >= threshold).then_some(late)
}

/// One stall: who stalled, for how long, and when it ended (run time, ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    pub who: String,
    pub length: Duration,
    pub end: u64,
}

impl Stall {
    /// The history event: from the stalled actor itself, not a client op, so
    /// it pairs with nothing; stamped at its end, `ms` before which it began.
    pub fn event(&self) -> Event {
        Event::new(
            self.end,
            Process::from(self.who.as_str()),
            OpType::Info,
            f::STALL,
        )
        .with_value(json!({"who": self.who, "ms": self.length.as_millis() as u64}))
    }
}

/// The monitor thread; it stops when this is dropped.
pub struct Monitor {
    stop: Arc<AtomicBool>,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Starts watching this process for stalls, reporting each to `report`.
pub fn watch(who: String, clock: RunClock, report: impl Fn(Stall) + Send + 'static) -> Monitor {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name("stall-monitor".into())
        .spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let slept = monotonic_ns();
                std::thread::sleep(TICK);
                let woke = monotonic_ns();
                if let Some(length) = lateness(slept, woke, TICK, THRESHOLD) {
                    let end = woke.saturating_sub(clock.start_ns());
                    report(Stall {
                        who: who.clone(),
                        length,
                        end,
                    });
                }
            }
        })
        .expect("a thread can be spawned");
    Monitor { stop }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const TEN: Duration = Duration::from_millis(10);
    const HUNDRED: Duration = Duration::from_millis(100);

    #[test]
    fn waking_on_time_or_a_little_late_is_no_stall() {
        assert_eq!(lateness(0, 10 * MS, TEN, HUNDRED), None);
        assert_eq!(lateness(0, 109 * MS, TEN, HUNDRED), None);
        // A clock read before the sleep ended (never, but not a stall).
        assert_eq!(lateness(50 * MS, 40 * MS, TEN, HUNDRED), None);
    }

    #[test]
    fn waking_later_than_the_threshold_is_a_stall_of_that_lateness() {
        assert_eq!(lateness(0, 110 * MS, TEN, HUNDRED), Some(HUNDRED));
        let frozen = lateness(5 * MS, 1_515 * MS, TEN, HUNDRED);
        assert_eq!(frozen, Some(Duration::from_millis(1_500)));
    }

    #[test]
    fn a_stall_event_is_not_a_client_op_and_carries_its_length() {
        let stall = Stall {
            who: "worker-3".into(),
            length: Duration::from_millis(412),
            end: 7 * MS,
        };
        let e = stall.event();
        assert!(!e.process.is_client());
        assert_eq!((e.f.as_str(), e.time), (f::STALL, 7 * MS));
        assert_eq!(e.value, json!({"who": "worker-3", "ms": 412}));
    }
}
