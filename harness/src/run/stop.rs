//! Stop: heal every fault, let the workers finish their cycles (or cut
//! them short after a signal), stop the observer and the proxy, take the
//! final read, and close the history.

use super::faults::Faults;
use super::start::Running;
use super::Run;
use crate::clients::HarnessStorage;
use crate::error::{Context, Result};
use crate::interrupt::Interrupt;
use crate::journal::HistoryWriter;
use crate::options::RunPlan;
use crate::record::RunRecord;
use crate::workers;
use checker::history::{f, OpType, Process};
use std::time::Duration;
use workloads::storage::StorageKind;
use workloads::Outcome;

impl Run<'_> {
    /// Heals first, so no worker is left stopped and no node down, then
    /// lets the workers finish their cycles; the observer and the proxy
    /// stop, the final read is taken, and the history is closed.
    pub(super) async fn stop(&self, running: Running, faults: Faults) -> Result<RunRecord> {
        if !self.interrupt.happened() {
            tracing::info!("time limit reached: healing faults and stopping workers");
        }
        faults.heal().await?;
        let Running {
            clock,
            history,
            stalls,
            net,
            observer,
            pool,
            mut record,
            harness_storage,
            watchers,
            ..
        } = running;
        stop_workers(pool, self.options, self.interrupt).await;
        // After the workers' last releases, before the final read: the
        // observer's events all fall inside the workers' part of the history.
        if let Some(observer) = observer {
            let _ = tokio::task::spawn_blocking(move || observer.stop()).await;
        }
        if let Some(net) = &net {
            record.proxied_requests = Some(net.requests());
            net.shutdown().await;
        }
        self.final_read(&history, harness_storage, &mut record)
            .await;
        watchers.stop().await;
        drop(stalls);
        history
            .finish()
            .context(|| "writing history.jsonl".into())?;
        // A signal during the stop or the check counts too: the run was cut short.
        record.interrupted = self.interrupt.happened();
        if record.interrupted && record.interrupted_at_ms.is_none() {
            record.interrupted_at_ms = Some(clock.now() / 1_000_000);
        }
        Ok(record)
    }

    /// The harness's read of the counter, once every worker has stopped;
    /// a storage adapter that broke the protocol there is why the run ended.
    async fn final_read(
        &self,
        history: &HistoryWriter,
        harness_storage: Option<HarnessStorage>,
        record: &mut RunRecord,
    ) {
        let (options, topology) = (self.options, self.topology);
        read_counter(
            history,
            options.storage,
            &topology.storage_addr,
            &options.keys,
            topology.deployment().storage_login(),
            harness_storage.clone(),
        )
        .await;
        if let (None, Some(storage)) = (&record.adapter_broken, &harness_storage) {
            record.adapter_broken = storage.broken.lock().map(|b| b.clone()).unwrap_or_default();
        }
    }
}

/// Lets the workers finish their cycles, unless a signal says to stop: then
/// they get [`SIGNAL_GRACE`] and are killed (each recorded as a crash, its
/// op in flight as `info`), so a long critical section is not waited out.
async fn stop_workers(pool: workers::Pool, options: &RunPlan, interrupt: &Interrupt) {
    let pids = pool.pids.clone();
    let grace = match interrupt.happened() {
        true => SIGNAL_GRACE,
        false => stop_grace(options),
    };
    let stopping = pool.stop(grace);
    tokio::pin!(stopping);
    tokio::select! {
        _ = &mut stopping => return,
        _ = async {
            interrupt.wait().await;
            tokio::time::sleep(SIGNAL_GRACE).await;
        } => {}
    }
    tracing::warn!("stopping the workers now: a signal cut their last cycle short");
    for pid in pids.snapshot() {
        // Each worker leads its own group: its adapter goes with it. Only a
        // worker not yet reaped (a zombie holds its pid) is signalled, so
        // the group cannot be someone else's.
        if nemesis::process::parent(pid) == Some(std::process::id()) {
            let _ = nemesis::process::kill_group(pid);
        }
    }
    stopping.await;
}

/// How long workers may take to finish their cycle once a signal asked the
/// run to stop: a run stops within about two seconds of a signal.
const SIGNAL_GRACE: Duration = Duration::from_secs(1);

/// Long enough for a worker to finish the cycle it is in: an acquire that
/// retries to its deadline, the work, and a few requests that time out.
fn stop_grace(options: &RunPlan) -> Duration {
    options.acquire_timeout + options.work + 4 * options.op_timeout + Duration::from_secs(2)
}

/// The harness reads the counter once every worker has stopped: through a
/// fresh instance of its storage adapter if the run has one, else from the
/// storage node.
async fn read_counter(
    history: &HistoryWriter,
    kind: StorageKind,
    storage: &str,
    keys: &workloads::Keys,
    login: Option<workloads::conn::Login>,
    adapter: Option<HarnessStorage>,
) {
    let harness = Process::harness();
    history.append(history.now(harness.clone(), OpType::Invoke, f::READ), None);
    let (addr, keys) = (storage.to_string(), keys.clone());
    let read = tokio::task::spawn_blocking(move || match adapter {
        Some(adapter) => adapter.read(),
        None => {
            let timeout = Duration::from_secs(5);
            workloads::storage::open(kind, &addr, &keys, timeout, login, false, "harness")
                .read(None)
        }
    })
    .await
    .unwrap_or_else(|e| Outcome::Info(e.to_string()));
    let event = history.now(harness, OpType::Ok, f::READ);
    let event = match read {
        Outcome::Ok(v) => event.with_value(v.into()),
        Outcome::Fail(e) => history
            .now(Process::harness(), OpType::Fail, f::READ)
            .with_error(e),
        Outcome::Info(e) => history
            .now(Process::harness(), OpType::Info, f::READ)
            .with_error(e),
    };
    history.append(event, None);
}
