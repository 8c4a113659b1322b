//! A run's fault proxy: when the run asks for it ([`RunPlan::proxied`]),
//! every worker reaches every data node, Sentinel and the storage through
//! its own proxy address, and its spec names those addresses instead of the
//! nodes'. A client adapter gets them in `init` and sees nothing more.

use crate::error::{Error, Result};
use crate::options::{Latency, RunPlan};
use crate::topology::{Topology, STORAGE};
use nemesis::proxy::{Fabric, Keys, Spec, WriteArg};
use workloads::WorkerSpec;

/// Starts the proxies, one per worker and node, if the run needs them.
pub async fn start(plan: &RunPlan, topology: &Topology) -> Result<Option<Fabric>> {
    if !plan.proxied() {
        return Ok(None);
    }
    let spec = Spec {
        workers: (0..plan.workers)
            .map(|w| topology.addresses.worker(w))
            .collect(),
        onward_from_workers: topology.sources_of_its_own(),
        upstreams: topology.upstreams(),
        keys: Keys {
            lock: plan.keys.lock(),
            counter: plan.keys.counter(),
            write_arg: WriteArg {
                index: workloads::storage::MODE_ARG,
                value: workloads::storage::WRITE_MODE.into(),
            },
        },
        latency: plan.latency_ms.and_then(Latency::range),
        seed: plan.seed,
    };
    Fabric::start(spec)
        .await
        .map(Some)
        .map_err(|source| Error::Io {
            context: "starting the fault proxy".into(),
            source,
        })
}

/// `spec` with every node address swapped for its worker's proxy address.
pub fn route(mut spec: WorkerSpec, fabric: &Fabric, topology: &Topology) -> WorkerSpec {
    let worker = spec.index as usize;
    let via = |name: &str| {
        fabric
            .addr(worker, name)
            .map(|a| a.to_string())
            .expect("every node has a proxy for every worker")
    };
    spec.lock_nodes = spec.lock_node_names.iter().map(|n| via(n)).collect();
    spec.sentinels = topology.sentinel_names().iter().map(|n| via(n)).collect();
    spec.storage_node = via(STORAGE);
    spec
}
