//! What a check is asked to hold a history to, beyond the history itself.

use crate::verdict::Promise;
use std::time::Duration;

/// The promise to judge by, and what the history cannot say about the run
/// that made it. `Settings::from(promise)` checks everything the history
/// alone decides; `deadlock` is then reported as not checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub promise: Promise,
    /// How long acquires may go ungranted with no fault active before the
    /// lock counts as stuck (`deadlock`). The history does not record the
    /// lock's TTL, so this comes from the run (lockstorm uses TTL + acquire
    /// timeout + 1 s); `None` leaves `deadlock` unchecked.
    pub deadlock_after: Option<Duration>,
}

impl Settings {
    pub fn new(promise: Promise) -> Self {
        Settings {
            promise,
            deadlock_after: None,
        }
    }

    /// The same settings, with `deadlock` checked at `threshold`.
    pub fn deadlock_after(self, threshold: Duration) -> Self {
        Settings {
            deadlock_after: Some(threshold),
            ..self
        }
    }
}

impl From<Promise> for Settings {
    fn from(promise: Promise) -> Self {
        Settings::new(promise)
    }
}
