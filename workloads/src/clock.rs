//! Time as the history sees it: CLOCK_MONOTONIC, shared by every process on
//! the host, so events from different workers order correctly.

use nix::time::{clock_gettime, ClockId};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Nanoseconds on the host's CLOCK_MONOTONIC.
pub fn monotonic_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The run's clock: nanoseconds since the run started. Every process of a run
/// gets the same start, so their `time` values are comparable.
#[derive(Clone, Copy, Debug)]
pub struct RunClock {
    start_ns: u64,
}

impl RunClock {
    pub fn starting_now() -> Self {
        RunClock {
            start_ns: monotonic_ns(),
        }
    }
    pub fn from_start(start_ns: u64) -> Self {
        RunClock { start_ns }
    }
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }
    pub fn now(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_ns)
    }
}

/// The clock a worker judges its lease by: CLOCK_MONOTONIC with an offset and
/// a rate the clock nemesis can change while the worker runs. It never touches
/// the history's clock.
#[derive(Debug)]
pub struct LockClock {
    offset_ns: AtomicI64,
    rate_bits: AtomicU64,
    anchor_ns: AtomicU64,
}

impl Default for LockClock {
    fn default() -> Self {
        LockClock {
            offset_ns: AtomicI64::new(0),
            rate_bits: AtomicU64::new(1.0f64.to_bits()),
            anchor_ns: AtomicU64::new(monotonic_ns()),
        }
    }
}

impl LockClock {
    /// Skewed nanoseconds: `real + offset + (real − anchor)·(rate − 1)`.
    pub fn now_ns(&self) -> i64 {
        let real = monotonic_ns();
        skewed(
            real,
            self.offset_ns.load(Ordering::SeqCst),
            f64::from_bits(self.rate_bits.load(Ordering::SeqCst)),
            self.anchor_ns.load(Ordering::SeqCst),
        )
    }

    /// Jumps the clock by `offset_ns` (from real time) and runs it at `rate`
    /// from now on. Continuity is not kept: a jump is the point.
    pub fn set(&self, offset_ns: i64, rate: f64) {
        self.anchor_ns.store(monotonic_ns(), Ordering::SeqCst);
        self.rate_bits.store(rate.to_bits(), Ordering::SeqCst);
        self.offset_ns.store(offset_ns, Ordering::SeqCst);
    }
}

/// Pure: the skewed reading of `real`.
pub fn skewed(real: u64, offset_ns: i64, rate: f64, anchor: u64) -> i64 {
    let since = real.saturating_sub(anchor) as f64;
    real as i64 + offset_ns + (since * (rate - 1.0)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_shifts_and_rate_stretches_time_after_the_anchor() {
        assert_eq!(skewed(1_000, 0, 1.0, 0), 1_000);
        assert_eq!(skewed(1_000, 500, 1.0, 0), 1_500);
        assert_eq!(skewed(1_000, -500, 1.0, 0), 500);
        // Twice as fast from t=600: 400 ns later it reads 400 ns ahead.
        assert_eq!(skewed(1_000, 0, 2.0, 600), 1_400);
        assert_eq!(skewed(1_000, 0, 0.5, 600), 800);
    }

    #[test]
    fn a_lock_clock_jumps_when_told() {
        let clock = LockClock::default();
        let before = clock.now_ns();
        clock.set(5_000_000_000, 1.0);
        assert!(clock.now_ns() - before >= 5_000_000_000);
    }
}
