//! Time as the history sees it: CLOCK_MONOTONIC, shared by every process on
//! the host, so events from different workers order correctly.

use nix::time::{clock_gettime, ClockId};

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
