//! SIGINT, SIGTERM and SIGHUP all end a run the same way: faults healed,
//! partition chains removed, every process stopped, and an `unknown` result
//! stored. Once caught, none of them kills the harness outright (that would
//! leave faults in place), whichever phase the run is in; a repeated signal
//! only says that the orderly stop is under way.

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// Counts the stop signals received since [`Interrupt::catch`].
pub struct Interrupt {
    received: watch::Receiver<u32>,
}

impl Interrupt {
    /// From now on the three signals are caught (for the rest of the process).
    pub fn catch() -> std::io::Result<Self> {
        Self::catch_saying(
            "interrupted; healing faults, stopping workers and checking what was recorded",
        )
    }

    /// As [`Interrupt::catch`], warning `first` at the first signal.
    pub fn catch_saying(first: &'static str) -> std::io::Result<Self> {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        let (tx, received) = watch::channel(0);
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    // The run is over: the next one (in a matrix) listens itself.
                    _ = tx.closed() => return,
                    _ = int.recv() => "SIGINT",
                    _ = term.recv() => "SIGTERM",
                    _ = hup.recv() => "SIGHUP",
                };
                tx.send_modify(|n| *n += 1);
                match *tx.borrow() {
                    1 => tracing::warn!("{name}: {first}"),
                    _ => tracing::warn!(
                        "{name} again: still healing faults and stopping every process; the run exits when that is done"
                    ),
                }
            }
        });
        Ok(Interrupt { received })
    }

    pub fn happened(&self) -> bool {
        *self.received.borrow() > 0
    }

    /// Returns once a signal has arrived (at once if one already has).
    pub async fn wait(&self) {
        let mut received = self.received.clone();
        if received.wait_for(|n| *n > 0).await.is_err() {
            // The listener is gone with the runtime: no signal will come.
            std::future::pending::<()>().await;
        }
    }
}
