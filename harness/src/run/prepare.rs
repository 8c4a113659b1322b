//! Prepare the clients, before any worker starts: the client adapter
//! started once against the running nodes (a broken one is one clear error
//! here, not in every worker), and the storage adapter's own instance,
//! which resets the counter and is kept for the final read.

use super::{millis, unless_interrupted, Halt, Run};
use crate::clients::HarnessStorage;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use workloads::adapter::{AdapterSpec, Hello};

/// What preparing the clients found, for the phases after it.
#[derive(Default)]
pub(super) struct Clients {
    pub(super) client: Option<store::ClientRecord>,
    pub(super) storage: Option<store::StorageAdapterRecord>,
    /// The key the adapter's library stores the lock under, if it prefixes
    /// the run's: what the observer watches.
    pub(super) library_key: Option<String>,
    /// The storage adapter's own instance, kept for the final read.
    pub(super) harness_storage: Option<HarnessStorage>,
}

impl Run<'_> {
    /// Before any worker starts: the client adapter started once against
    /// the nodes, and the storage adapter's own instance, which resets the
    /// counter.
    pub(super) async fn prepare_clients(&self) -> Result<Clients, Halt> {
        let mut clients = Clients::default();
        if let Some(spec) = self.adapter("preflight") {
            let hello = self.check_adapter(&spec).await?;
            if let Some(key) = &hello.key {
                let in_slot = self.topology.check_lock_slot(key).await;
                in_slot.map_err(|why| Halt::from(Error::Adapter(why)))?;
            }
            let chosen = self
                .options
                .client
                .as_ref()
                .expect("a prepared client was chosen");
            clients.client = Some(crate::clients::record(chosen, &spec, &hello));
            clients.library_key = hello.key.clone();
        }
        if let Some(spec) = self.storage_adapter("harness")? {
            let storage = HarnessStorage {
                spec,
                init: workloads::adapter::StorageInit {
                    worker: None,
                    key: self.options.keys.counter(),
                    node: self.topology.storage_addr.clone(),
                    // Its one read, the final one, carries no fence.
                    fenced: false,
                },
                op_timeout: self.options.op_timeout,
                broken: Default::default(),
            };
            let named = self.reset_storage(&storage).await?;
            clients.storage = Some(crate::clients::storage_record(&storage.spec, &named));
            clients.harness_storage = Some(storage);
        }
        Ok(clients)
    }

    /// The client adapter's `init` against the running nodes, and what the
    /// deployment asks of its lock while it holds it once.
    async fn check_adapter(&self, spec: &AdapterSpec) -> Result<Hello, Halt> {
        let (options, topology) = (self.options, self.topology);
        let init = spec.init(
            &topology.lock_addrs(),
            &topology.sentinel_addrs(),
            millis(options.ttl),
            millis(options.acquire_timeout),
            0,
            options.keys.lock(),
        );
        let checked = spec.clone();
        let leader = Arc::new(AtomicU32::new(0));
        let held = topology.deployment().adapter_key_check(&options.keys);
        let check = tokio::task::spawn_blocking({
            let leader = leader.clone();
            move || {
                let held = held
                    .as_ref()
                    .map(|h| h as &dyn Fn() -> std::result::Result<(), String>);
                crate::clients::preflight(&checked, init, &leader, held)
            }
        });
        let check = async {
            check
                .await
                .map_err(|e| Error::Adapter(format!("the adapter check failed: {e}")))?
        };
        // Left behind on a signal, the check's thread ends with the process
        // (the runtime does not wait for it); its adapter's group goes now.
        let during = "its client adapter started";
        unless_interrupted(self.interrupt, during, check)
            .await
            .inspect_err(|halt| {
                let pid = leader.load(Ordering::SeqCst);
                if matches!(halt, Halt::Interrupted(_)) && pid != 0 {
                    let _ = nemesis::process::kill_group(pid);
                }
            })
    }

    /// The storage adapter's own instance resets the counter: what storage
    /// it named.
    async fn reset_storage(&self, storage: &HarnessStorage) -> Result<String, Halt> {
        let check = tokio::task::spawn_blocking({
            let storage = storage.clone();
            move || storage.reset()
        });
        let check = async {
            check
                .await
                .map_err(|e| Error::Adapter(format!("the storage adapter check failed: {e}")))?
        };
        // Left behind on a signal, the check's thread ends with the process,
        // and its adapter (its own group) with the harness.
        unless_interrupted(self.interrupt, "its storage adapter started", check).await
    }

    /// The client adapter's spec for `name` (a worker, or the preflight),
    /// if the run tests one.
    pub(super) fn adapter(&self, name: &str) -> Option<AdapterSpec> {
        let client = self.client.as_ref()?;
        let stderr = self.dir.path.join("clients").join(format!("{name}.stderr"));
        let mut spec = client.spec(self.options.config, stderr);
        self.topology
            .deployment()
            .adapter_login(&mut spec, self.options);
        Some(spec)
    }

    /// The storage adapter's spec for `name`, if the run keeps its counter
    /// through one.
    pub(super) fn storage_adapter(&self, name: &str) -> Result<Option<AdapterSpec>> {
        match &self.options.storage_cmd {
            Some(cmd) => {
                let stderr = self.dir.path.join("storage").join(format!("{name}.stderr"));
                Ok(Some(cmd.spec(stderr)?))
            }
            None => Ok(None),
        }
    }
}
