//! Events a worker records from a thread other than its loop (the watchdog's
//! renewals): stamped on the run's clock and written, one whole line at a
//! time, to the same stdout as the loop's own.

use crate::clock::RunClock;
use checker::history::{Event, OpType, Process};
use std::fmt;
use std::sync::Arc;

#[derive(Clone)]
pub struct Recorder {
    clock: RunClock,
    sink: Arc<dyn Fn(Event) + Send + Sync>,
}

impl Recorder {
    pub fn new(clock: RunClock, sink: impl Fn(Event) + Send + Sync + 'static) -> Self {
        Recorder {
            clock,
            sink: Arc::new(sink),
        }
    }

    /// Records nothing: for lock clients used outside a worker (tests).
    pub fn discard() -> Self {
        Recorder::new(RunClock::starting_now(), |_| {})
    }

    /// An event stamped now.
    pub fn event(&self, process: Process, kind: OpType, op: &str) -> Event {
        Event::new(self.clock.now(), process, kind, op)
    }

    pub fn record(&self, event: Event) {
        (self.sink)(event)
    }
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}
