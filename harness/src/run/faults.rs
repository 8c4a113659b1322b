//! Play the faults: the nemesis plays the schedule from the moment every
//! worker is ready, and the run goes on until its time limit, a stop
//! signal, or an adapter that broke the protocol.

use super::start::Running;
use super::Run;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

/// The nemesis at play, until it is told to heal.
pub(super) struct Faults {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Faults {
    /// Every fault heals at once, and the nemesis ends.
    pub(super) async fn heal(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.task.await.map_err(Error::NemesisTask)
    }
}

impl Run<'_> {
    /// The nemesis, set to play the schedule once every worker is ready,
    /// and the run waited out; the nemesis is handed back still playing.
    pub(super) async fn play_faults(&self, running: &mut Running) -> Faults {
        let (stop, stop_rx) = watch::channel(false);
        let env = nemesis::Env {
            workers: running.pool.pids.clone(),
            worker_control: Arc::new(running.pool.controls.clone()),
            parked: running.pool.parked(),
            cluster: self.topology.clone(),
            holders: running.holders.clone(),
            journal: running.history.clone(),
            arm_timeout: self.options.nemesis_interval.max(self.options.ttl),
            stop: stop_rx,
            net: running.net.clone(),
        };
        // The schedule and the time limit start once every worker is ready, as
        // Jepsen opens its clients before its generator runs: five adapters
        // importing their libraries on a busy machine took seconds, and a fault
        // due before any worker cycled found no one to strike.
        let (go, started) = oneshot::channel();
        let (steps, params) = (
            std::mem::take(&mut running.steps),
            self.options.fault_params(),
        );
        let task = tokio::spawn(async move {
            if let Ok(start) = started.await {
                nemesis::play(steps, env, params, start).await;
            }
        });
        self.wait_out(running, go).await;
        Faults { stop, task }
    }

    /// Until the time limit, counted from when every worker is ready (or
    /// [`READY_WITHIN`] passed), unless a signal or an adapter that broke
    /// the protocol ends the run first; the record says which.
    async fn wait_out(&self, running: &mut Running, go: oneshot::Sender<Instant>) {
        let options = self.options;
        let Running {
            pool,
            clock,
            history,
            record,
            ..
        } = running;
        let title = options.name();
        let mut broken = pool.broken();
        let ready_at = std::cell::Cell::new(None);
        let run = async {
            let (took, late) = pool.ready(READY_WITHIN).await;
            match late {
                0 => tracing::info!("workers ready in {:.2} s", took.as_secs_f64()),
                n => tracing::warn!(
                    "{n} of {} workers not ready after {:.0} s: starting the clock without them",
                    options.workers,
                    took.as_secs_f64()
                ),
            }
            ready_at.set(Some(clock.now() / 1_000_000));
            let _ = go.send(Instant::now());
            crate::progress::wait(&title, options.time_limit, || history.snapshot()).await
        };
        tokio::select! {
            _ = run => {}
            _ = self.interrupt.wait() => record.interrupted_at_ms = Some(clock.now() / 1_000_000),
            why = async {
                match broken.wait_for(Option::is_some).await {
                    Ok(why) => why.clone().unwrap_or_default(),
                    // Every supervisor has ended: nothing more can break.
                    Err(_) => std::future::pending().await,
                }
            } => {
                tracing::error!("an adapter broke the protocol: {why}; ending the run");
                record.adapter_broken = Some(why);
            }
        }
        record.workers_ready_ms = ready_at.get();
    }
}

/// How long the workers have to set up their clients before the clock
/// starts without the late ones: an adapter's own `init` budget, and a few
/// seconds for its worker to start.
const READY_WITHIN: Duration = Duration::from_secs(workloads::adapter::INIT_BUDGET.as_secs() + 5);
