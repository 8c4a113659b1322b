//! The nodes of one run, per config: a lock node, or a primary with two
//! replicas and three Sentinels; plus the storage node. Every node has its
//! own loopback address so a partition can cut the link between two of them.
//! Implements [`nemesis::Cluster`], the faults' handle on the nodes.

use crate::error::Context;
use crate::error::{Error, Result};
use crate::options::RunPlan;
use crate::origin::{Deployment, Theirs};
use backend::node::{connect, NodeClock, NodeSpec, RedisNode, Role};
use backend::{Provisioner, Server};
use nemesis::clock::TimeControl;
use nemesis::cluster::{BoxFuture, ClockReading, Promotion};
use nemesis::net::{Firewall, Link};
use nemesis::proxy;
use nemesis::Targets;
use nemesis::{Cluster, Journal, NodeRef, Source};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use store::NodeRecord;
use tokio::sync::Mutex;
use workloads::lock::PRIMARY_NAME;
use workloads::Config;

/// The storage node's name, in the proxy and in events.
pub const STORAGE: &str = "storage";

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the harness looks for nodes that died by themselves.
const DEATH_POLL: Duration = Duration::from_millis(250);

pub struct Topology {
    /// The servers of ours, each found by its name: lock nodes first (n1
    /// is the first primary, or the first etcd member), then Sentinels,
    /// then lockstorm's own storage node ([`STORAGE`]; none with
    /// `--storage-target`).
    servers: Mutex<Vec<Box<dyn Server>>>,
    /// Name → address, fixed for the run (a restart keeps both).
    addrs: Vec<(String, Ipv4Addr, u16)>,
    sentinels: Vec<String>,
    /// The name the Sentinels watch the primary under.
    master: String,
    /// The lock is PostgreSQL's, on the storage node: node faults hit it.
    locks_in_storage: bool,
    /// The lock lives on a consensus store's members (etcd's or
    /// ZooKeeper's): no Redis key to observe.
    lock_members: Option<LockMembers>,
    /// Those members as a cut between them names them (fixed for the run:
    /// a restart keeps addresses and ports).
    members: Vec<(String, nemesis::net::Member)>,
    /// lockstorm's own storage node is PostgreSQL (a lock session can be
    /// ended on it).
    storage_postgres: bool,
    /// The storage node's address (it never moves: no fault touches it).
    pub storage_addr: String,
    firewall: Option<Firewall>,
    /// The hosts the nodes run on (`--nodes`), and the cuts between them.
    remote: Option<Arc<dyn backend::Hosts>>,
    /// Node name → its time shim's control file (clock nemesis only).
    clocks: Vec<(String, TimeControl)>,
    pub addresses: Addresses,
    /// The user's fault commands, on a deployment lockstorm did not start.
    commands: Option<Arc<deployment::fault_command::Commands>>,
    /// Where the nodes come from: lockstorm's own, or the user's
    /// deployment as the run reaches it (a TLS one through its bridges).
    deployment: Deployment,
    /// The TLS bridges (the target's, the storage's): held so they live as
    /// long as the topology.
    _bridges: Option<(deployment::tls::Bridges, Option<deployment::tls::Bridges>)>,
    /// `cluster`: the lock key's slot, whose master node faults aim at.
    cluster_slot: Option<u32>,
    /// `cluster`: each node's bus port (gossip and votes), which a cut
    /// between nodes drops with their client port.
    buses: Vec<(String, u16)>,
}

/// Where one run's nodes listen and its workers connect from: every
/// address in `127.0.<block>.0/24`. Runs in different blocks share no
/// address, hence no port (a restarted node gets its own back), no
/// partition rule (rules name addresses) and no worker source address: a
/// matrix gives each cell it runs at once a block of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addresses {
    pub block: u8,
}

impl Addresses {
    fn host(self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, self.block, host)
    }

    /// Data node `n` (1-based).
    pub fn data(self, n: u8) -> Ipv4Addr {
        self.host(10 + n)
    }

    fn sentinel(self, n: u8) -> Ipv4Addr {
        self.host(20 + n)
    }

    fn storage(self) -> Ipv4Addr {
        self.host(1)
    }

    /// Each worker connects from its own address, so a partition can cut
    /// one worker off from one node (at most 64 workers: 100 to 163).
    pub fn worker(self, worker: u64) -> Ipv4Addr {
        self.host(100 + worker as u8)
    }
}

/// The counter's node: Redis, or PostgreSQL (`--storage postgres`).
async fn start_storage(
    options: &RunPlan,
    addresses: Addresses,
    nodes_dir: &Path,
    backend: Arc<dyn Provisioner>,
) -> Result<Box<dyn Server>> {
    let ip = backend.address_of(STORAGE).unwrap_or(addresses.storage());
    Ok(match options.storage {
        workloads::storage::StorageKind::Redis => {
            let spec = NodeSpec {
                name: STORAGE.into(),
                role: Role::Storage,
                ip,
                persistence: options.persistence,
                clock: None,
            };
            Box::new(RedisNode::start(spec, nodes_dir, backend).await?)
        }
        workloads::storage::StorageKind::Postgres => Box::new(
            backend::postgres::PostgresNode::start(
                STORAGE,
                ip,
                &options.postgres_settings,
                nodes_dir,
                backend,
            )
            .await?,
        ),
    })
}

/// The run's iptables chain, if it cuts links.
fn firewall_for(options: &RunPlan) -> Result<Option<Firewall>> {
    if needs_firewall(options)? {
        return Ok(Some(Firewall::create().map_err(Error::Firewall)?));
    }
    // A crashed run may have left its rules; remove them whenever we can.
    if nemesis::net::available().is_ok() {
        let _ = nemesis::net::clean_stale();
    }
    Ok(None)
}

/// Data nodes run under the time shim when the clock nemesis may shift
/// their wall clocks; each gets its own control file.
struct NodeClocks {
    shim: Option<PathBuf>,
    nodes_dir: PathBuf,
    /// Node name → its control file, as made.
    made: Vec<(String, TimeControl)>,
}

impl NodeClocks {
    fn for_run(options: &RunPlan, nodes_dir: &Path) -> Result<NodeClocks> {
        let shim = match options.needs(|p| p.needs_time_shim()) {
            true => Some(nemesis::clock::install_shim().map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidInput => Error::Usage(e.to_string()),
                _ => Error::Io {
                    context: "installing the time shim".into(),
                    source: e,
                },
            })?),
            false => None,
        };
        Ok(NodeClocks {
            shim,
            nodes_dir: nodes_dir.to_path_buf(),
            made: Vec::new(),
        })
    }

    /// The clock node `name` runs on: its own control file under the shim,
    /// or none when the run shifts no clock.
    fn for_node(&mut self, name: &str) -> Result<Option<NodeClock>> {
        let Some(shim) = &self.shim else {
            return Ok(None);
        };
        let dir = self.nodes_dir.join(name);
        std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
        let control = dir.join("time.ctl");
        let handle =
            TimeControl::create(&control).context(|| format!("creating {}", control.display()))?;
        self.made.push((name.to_string(), handle));
        Ok(Some(NodeClock {
            shim: shim.clone(),
            control,
        }))
    }
}

/// A `replicated` primary's replicas, and its Sentinels.
const REPLICAS: u8 = 2;
const SENTINELS: u8 = 3;

/// The Redis data nodes (n1…) `config` starts: its lock nodes, a
/// `replicated` primary's replicas, and a replica for each of a cluster's
/// masters.
pub fn data_nodes(config: Config) -> usize {
    let replicas = match config {
        Config::Replicated => usize::from(REPLICAS),
        _ if config.in_cluster() => config.lock_nodes(),
        _ => 0,
    };
    config.lock_nodes() + replicas
}

/// The lock's Redis nodes: one per lock node, or for `replicated` a
/// primary, two replicas in sync with it, and three Sentinels (not yet
/// waited for), or for `cluster` six nodes made one cluster (n1…n3 its
/// masters, n4…n6 their replicas; a master unreached for
/// `--down-after-ms` is failed over); none when the lock is etcd's.
async fn start_redis(
    options: &RunPlan,
    addresses: Addresses,
    clocks: &mut NodeClocks,
    nodes_dir: &Path,
    backend: &Arc<dyn Provisioner>,
) -> Result<Vec<RedisNode>> {
    let spec = |name: &str, role: Role, ip: Ipv4Addr, clock: Option<NodeClock>| NodeSpec {
        name: name.into(),
        role,
        ip,
        persistence: options.persistence,
        clock,
    };
    let start = |spec: NodeSpec| RedisNode::start(spec, nodes_dir, backend.clone());
    let ip = |name: &str, loopback: Ipv4Addr| backend.address_of(name).unwrap_or(loopback);
    let mut nodes = Vec::new();
    let (redis_locks, role) = match options.config {
        _ if options.config.locks_in_members() => (0, Role::Lock),
        _ if options.config.in_cluster() => {
            let node_timeout_ms = options.down_after.as_millis() as u64;
            (
                data_nodes(options.config),
                Role::Cluster { node_timeout_ms },
            )
        }
        _ => (options.config.lock_nodes(), Role::Lock),
    };
    for n in 1..=redis_locks as u8 {
        let name = format!("n{n}");
        let clock = clocks.for_node(&name)?;
        let at = ip(&name, addresses.data(n));
        nodes.push(start(spec(&name, role.clone(), at, clock)).await?);
    }
    if options.config.in_cluster() {
        let all: Vec<&RedisNode> = nodes.iter().collect();
        backend::redis_cluster::form(&all, options.config.lock_nodes()).await?;
    }
    if options.config == Config::Replicated {
        let primary = nodes[0].addr();
        for n in 2..=1 + REPLICAS {
            let role = Role::Replica {
                primary: primary.clone(),
            };
            let name = format!("n{n}");
            let clock = clocks.for_node(&name)?;
            let at = ip(&name, addresses.data(n));
            nodes.push(start(spec(&name, role, at, clock)).await?);
        }
        await_replication(&nodes[0], REPLICAS.into()).await?;
        for n in 1..=SENTINELS {
            let role = Role::Sentinel {
                primary: primary.clone(),
                quorum: 2,
                down_after_ms: options.down_after.as_millis() as u64,
                failover_timeout_ms: options.failover_timeout.as_millis() as u64,
            };
            let name = format!("s{n}");
            let at = ip(&name, addresses.sentinel(n));
            nodes.push(start(spec(&name, role, at, None)).await?);
        }
    }
    Ok(nodes)
}

/// Whose members hold the lock, when a consensus store's do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockMembers {
    Etcd,
    ZooKeeper,
}

impl LockMembers {
    fn of(config: Config) -> Option<LockMembers> {
        if config.locks_in_etcd() {
            Some(LockMembers::Etcd)
        } else if config.locks_in_zookeeper() {
            Some(LockMembers::ZooKeeper)
        } else {
            None
        }
    }
}

/// The lock's ZooKeeper members (n1…n`count`), an ensemble of the run's
/// own (or of `client-test`'s).
pub(crate) async fn start_zookeeper(
    count: usize,
    addresses: Addresses,
    nodes_dir: &Path,
    backend: &Arc<dyn Provisioner>,
) -> Result<Vec<backend::zookeeper::ZkMember>> {
    let members: Vec<_> = (1..=count as u8)
        .map(|n| (format!("n{n}"), addresses.data(n)))
        .collect();
    Ok(backend::zookeeper::start_ensemble(&members, nodes_dir, backend.clone()).await?)
}

/// The lock's etcd members, a cluster of the run's own.
async fn start_etcd(
    options: &RunPlan,
    addresses: Addresses,
    clocks: &mut NodeClocks,
    nodes_dir: &Path,
    backend: &Arc<dyn Provisioner>,
) -> Result<Vec<backend::etcd::EtcdMember>> {
    let mut members = Vec::new();
    for n in 1..=options.config.lock_nodes() as u8 {
        let name = format!("n{n}");
        // Go reads the clock without libc: the harness serves it.
        let clock = clocks.for_node(&name)?.map(|c| c.control);
        members.push((name, addresses.data(n), clock));
    }
    // The run's own cluster: no member of another run's may join it.
    let token = format!("lockstorm-{}-{}", std::process::id(), addresses.block);
    Ok(backend::etcd::start_cluster(&members, nodes_dir, backend.clone(), &token).await?)
}

/// Whether the run cuts links; if so, iptables must be there and usable.
/// Checked before the run's folder is made, and again when the run starts.
pub fn needs_firewall(options: &RunPlan) -> Result<bool> {
    // A deployment's failover is the user's command: lockstorm cuts
    // nothing; on --nodes hosts the hosts cut (their iptables is checked
    // as the run logs in).
    if options.target.is_some() || !options.hosts.is_empty() || !options.cuts_with_iptables() {
        return Ok(false);
    }
    let faults = options.nemesis.to_string();
    nemesis::net::available().map_err(|why| {
        Error::Usage(format!("--nemesis {faults} cuts links with iptables, and {why}: run as root, or choose another nemesis"))
    })?;
    Ok(true)
}

impl Topology {
    pub async fn start(
        options: &RunPlan,
        backend: Arc<dyn Provisioner>,
        nodes_dir: &Path,
    ) -> Result<Self> {
        match &options.target {
            Some(target) => Self::external(options, target, backend, nodes_dir).await,
            None => Self::own(options, backend, nodes_dir).await,
        }
    }

    /// lockstorm's own nodes, started on its backend: the lock's (Redis,
    /// with replicas and Sentinels for `replicated`, or etcd members) and
    /// the storage node.
    async fn own(
        options: &RunPlan,
        backend: Arc<dyn Provisioner>,
        nodes_dir: &Path,
    ) -> Result<Self> {
        let firewall = firewall_for(options)?;
        let remote = backend.hosts();
        let mut clocks = NodeClocks::for_run(options, nodes_dir)?;
        let addresses = Addresses {
            block: options.address_block,
        };
        let nodes = start_redis(options, addresses, &mut clocks, nodes_dir, &backend).await?;
        let cluster_slot = match options.config.in_cluster() {
            true => Some(lock_slot(&nodes[0], &options.keys.lock()).await?),
            false => None,
        };
        let buses = nodes
            .iter()
            .filter(|n| n.bus_port() != 0)
            .map(|n| (n.name().to_string(), n.bus_port()))
            .collect();
        let storage = start_storage(options, addresses, nodes_dir, backend.clone()).await?;
        let mut sentinels = Vec::new();
        for node in nodes
            .iter()
            .filter(|n| matches!(n.spec.role, Role::Sentinel { .. }))
        {
            await_sentinel(node).await?;
            sentinels.push(node.addr());
        }
        let mut nodes: Vec<Box<dyn Server>> = nodes
            .into_iter()
            .map(|n| Box::new(n) as Box<dyn Server>)
            .collect();
        let mut peers = Vec::new();
        if options.config.locks_in_zookeeper() {
            let count = options.config.lock_nodes();
            let members = start_zookeeper(count, addresses, nodes_dir, &backend).await?;
            nodes.extend(members.into_iter().map(|m| Box::new(m) as Box<dyn Server>));
        }
        if options.config.locks_in_etcd() {
            let members = start_etcd(options, addresses, &mut clocks, nodes_dir, &backend).await?;
            peers = members
                .iter()
                .map(|m| (m.name().to_string(), m.peer()))
                .collect();
            nodes.extend(members.into_iter().map(|m| Box::new(m) as Box<dyn Server>));
        }
        let addrs = nodes
            .iter()
            .map(|n| {
                let at: std::net::SocketAddrV4 =
                    n.addr().parse().expect("a node listens on ip:port");
                (n.name().to_string(), *at.ip(), at.port())
            })
            .collect();
        let storage_addr = storage.addr();
        nodes.push(storage);
        Ok(Topology {
            addrs,
            servers: Mutex::new(nodes),
            sentinels,
            master: options.master(),
            locks_in_storage: options.config.locks_in_storage(),
            lock_members: LockMembers::of(options.config),
            members: peers,
            storage_addr,
            storage_postgres: options.storage == workloads::storage::StorageKind::Postgres,
            firewall,
            remote,
            clocks: clocks.made,
            addresses,
            commands: None,
            deployment: Deployment::Own,
            _bridges: None,
            cluster_slot,
            buses,
        })
    }

    /// A deployment lockstorm did not start: its nodes, named `n1`, `n2`, …
    /// in the order given, and lockstorm's own storage node, the only one
    /// it starts (the counter never lives on the user's deployment). It owns
    /// no process of the deployment, so nothing here can kill or skew one.
    async fn external(
        options: &RunPlan,
        target: &deployment::target::Target,
        backend: Arc<dyn Provisioner>,
        nodes_dir: &Path,
    ) -> Result<Self> {
        let addresses = Addresses {
            block: options.address_block,
        };
        let mut addrs = Vec::new();
        let mut sentinels = Vec::new();
        let (target, bridges) = deployment::tls::bridge(target, options.tls_ca.as_deref()).await?;
        let target = &target;
        let named = |prefix: &str, i: usize, at: &deployment::target::Endpoint| -> Result<_> {
            let (ip, port) = deployment::reach::resolve(at)?;
            Ok((format!("{prefix}{}", i + 1), ip, port))
        };
        let mut cluster_slot = None;
        let data = match &target.kind {
            // The seeds name every node, and the lock key's slot.
            deployment::target::Kind::Cluster => {
                let (nodes, slot) =
                    deployment::reach::discover_cluster(target, &options.keys.lock()).await?;
                cluster_slot = Some(slot);
                nodes
            }
            // The Sentinels name the primary and its replicas.
            deployment::target::Kind::Sentinel { master } => {
                for (i, at) in target.endpoints.iter().enumerate() {
                    let sentinel = named("s", i, at)?;
                    sentinels.push(format!("{}:{}", sentinel.1, sentinel.2));
                    addrs.push(sentinel);
                }
                deployment::reach::discover(&sentinels, master).await?
            }
            _ => target.endpoints.clone(),
        };
        for (i, at) in data.iter().enumerate() {
            addrs.push(named("n", i, at)?);
        }
        // The counter: on the user's node with --storage-target (through
        // its own TLS bridge for rediss://), else on lockstorm's.
        let (storage, storage_addr, storage_bridges) = match &options.storage_target {
            Some(on) => {
                let (on, bridges) = deployment::tls::bridge(on, options.tls_ca.as_deref()).await?;
                let (ip, port) = deployment::reach::resolve(&on.endpoints[0])?;
                (None, format!("{ip}:{port}"), Some((on, bridges)))
            }
            None => {
                let node = start_storage(options, addresses, nodes_dir, backend).await?;
                let addr = node.addr();
                (Some(node), addr, None)
            }
        };
        let storage_on = storage_bridges.as_ref().map(|(on, _)| on.clone());
        let mut topology = Topology {
            addrs,
            storage_postgres: storage.is_some()
                && options.storage == workloads::storage::StorageKind::Postgres,
            servers: Mutex::new(storage.into_iter().collect()),
            sentinels,
            master: options.master(),
            locks_in_storage: options.config.locks_in_storage(),
            lock_members: None,
            members: Vec::new(),
            storage_addr,
            firewall: None,
            remote: None,
            clocks: Vec::new(),
            addresses,
            commands: Some(Arc::new(deployment::fault_command::Commands::new(
                options.fault_commands.clone(),
                target.clone(),
                nodes_dir.to_path_buf(),
                options.fault_cmd_wait,
            ))),
            deployment: Deployment::Own,
            _bridges: Some((bridges, storage_bridges.map(|(_, b)| b))),
            cluster_slot,
            buses: Vec::new(),
        };
        // Its data nodes as the checks before and after the run reach them.
        topology.deployment = Deployment::Theirs(Box::new(Theirs {
            target: target.clone(),
            storage: storage_on.map(|on| {
                let node = vec![(STORAGE.to_string(), on.endpoints[0].clone())];
                (on, node)
            }),
            nodes: crate::observer::data_nodes(&topology.observed()),
        }));
        Ok(topology)
    }

    /// Where the run's nodes come from, as the run asks it.
    pub fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// Where worker `index` connects from: its own address on lockstorm's
    /// nodes; the host's own on a deployment lockstorm did not start
    /// (protected mode takes 127.0.0.1, not 127.0.x.y).
    pub fn worker_source(&self, index: u64) -> Option<Ipv4Addr> {
        self.sources_of_its_own()
            .then(|| self.addresses.worker(index))
    }

    /// Whether each worker reaches the nodes from an address of its own:
    /// on lockstorm's nodes on this machine; not on a deployment (protected
    /// mode takes 127.0.0.1 alone), nor on other hosts (a loopback address
    /// reaches no other machine).
    pub fn sources_of_its_own(&self) -> bool {
        self.deployment.owned() && self.remote.is_none()
    }

    /// Addresses the lock clients talk to directly (none for `replicated`,
    /// whose clients ask the Sentinels).
    pub fn lock_addrs(&self) -> Vec<String> {
        if !self.sentinels.is_empty() {
            return Vec::new();
        }
        self.data_nodes()
            .map(|(_, ip, port)| format!("{ip}:{port}"))
            .collect()
    }

    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels.clone()
    }

    /// The names of [`Self::sentinel_addrs`], same order.
    pub fn sentinel_names(&self) -> Vec<String> {
        let named = |a: &String| self.name_of(a).expect("every Sentinel is a node");
        self.sentinels.iter().map(named).collect()
    }

    /// The names of [`Self::lock_addrs`], same order.
    pub fn lock_names(&self) -> Vec<String> {
        if !self.sentinels.is_empty() {
            return Vec::new();
        }
        self.data_nodes().map(|(name, _, _)| name.clone()).collect()
    }

    /// Every node a worker talks to, named, with its role for the fault
    /// proxy: the data nodes, the Sentinels and the storage.
    pub fn upstreams(&self) -> Vec<proxy::Upstream> {
        let storage = self
            .storage_addr
            .parse()
            .expect("the storage listens on ip:port");
        let node = |(name, ip, port): &(String, Ipv4Addr, u16), role| proxy::Upstream {
            name: name.clone(),
            addr: (*ip, *port).into(),
            role,
        };
        let sentinels = self.addrs.iter().filter(|(n, _, _)| n.starts_with('s'));
        self.data_nodes()
            .map(|n| node(n, proxy::Role::Lock))
            .chain(sentinels.map(|n| node(n, proxy::Role::Sentinel)))
            .chain([proxy::Upstream {
                name: STORAGE.into(),
                addr: storage,
                role: proxy::Role::Storage,
            }])
            .collect()
    }

    /// Every data node, named, with its address: what the observer watches
    /// (on `replicated`, the primary and its replicas, whichever is primary).
    pub fn observed(&self) -> Vec<crate::observer::Node> {
        if self.lock_members.is_some() {
            return Vec::new();
        }
        self.data_nodes()
            .map(|(name, ip, port)| crate::observer::Node {
                name: name.clone(),
                addr: (*ip, *port).into(),
            })
            .collect()
    }

    fn data_nodes(&self) -> impl Iterator<Item = &(String, Ipv4Addr, u16)> {
        self.addrs
            .iter()
            .filter(|(name, _, _)| name.starts_with('n'))
    }

    /// A node's address and port.
    fn socket_of(&self, node: &str) -> std::io::Result<(Ipv4Addr, u16)> {
        self.addrs
            .iter()
            .find(|(n, _, _)| n == node)
            .map(|(_, ip, port)| (*ip, *port))
            .ok_or_else(|| std::io::Error::other(format!("no node {node}")))
    }

    fn name_of(&self, addr: &str) -> Option<String> {
        self.addrs
            .iter()
            .find(|(_, ip, port)| format!("{ip}:{port}") == addr)
            .map(|(name, _, _)| name.clone())
    }

    pub async fn records(&self) -> Vec<NodeRecord> {
        let servers = self.servers.lock().await;
        // A deployment's nodes are nobody's process here: pid 0.
        let external = self
            .data_nodes()
            .filter(|(name, _, _)| !servers.iter().any(|n| n.name() == name))
            .map(|(name, ip, port)| NodeRecord {
                name: name.clone(),
                role: "target".into(),
                addr: format!("{ip}:{port}"),
                pid: 0,
                host: None,
            });
        // The storage's role is "storage", whichever server it runs.
        let owned = servers.iter().map(|n| NodeRecord {
            name: n.name().to_string(),
            role: n.role().into(),
            addr: n.addr(),
            pid: n.pid(),
            host: self.host_of(n.name()).map(|h| h.name()),
        });
        external.chain(owned).collect()
    }

    /// Removes every node and the run's iptables chain.
    pub async fn shutdown(&self) {
        // All at once: a node on another host takes round trips to stop
        // and to fetch its logs from.
        let servers = std::mem::take(&mut *self.servers.lock().await);
        let mut removals = tokio::task::JoinSet::new();
        for mut server in servers {
            removals.spawn(async move { server.remove().await });
        }
        while removals.join_next().await.is_some() {}
        if let Some(fw) = &self.firewall {
            let _ = fw.heal();
        }
        if let Some(hosts) = &self.remote {
            for left in hosts.remove_cuts().await {
                tracing::warn!("left on a host: {left}");
            }
        }
    }

    /// The master of the lock key's slot now, as more than half of the
    /// nodes' views name it (`cluster`).
    async fn cluster_master(&self) -> Option<String> {
        self.slot_claim().await.map(|(name, _)| name)
    }

    /// [`Self::cluster_master`] and the config epoch it serves the slot
    /// under.
    async fn slot_claim(&self) -> Option<(String, u64)> {
        let slot = self.cluster_slot?;
        let addrs = self.data_addrs();
        let (addr, epoch) = tokio::task::spawn_blocking(move || {
            let views = backend::redis_cluster::look(&addrs);
            let master = workloads::cluster_view::agreed_master(&views, slot)?;
            Some((master.addr.clone(), master.config_epoch))
        })
        .await
        .ok()??;
        Some((self.name_of(&addr)?, epoch))
    }

    /// Whether the cluster flags the node at `addr` `fail` (a node that
    /// gathered a majority of masters' doubts said so, and told the rest):
    /// how many of the answering nodes show it.
    async fn cluster_flags_failed(&self, addr: &str) -> Option<String> {
        let (addrs, addr) = (self.data_addrs(), addr.to_string());
        tokio::task::spawn_blocking(move || {
            let views = backend::redis_cluster::look(&addrs);
            let flagging = views
                .iter()
                .filter(|v| v.iter().any(|n| n.addr == addr && n.failed))
                .count();
            (flagging > 0).then(|| format!("{flagging} of {} nodes flag it fail", views.len()))
        })
        .await
        .ok()?
    }

    /// Whether a Sentinel holds the primary objectively down (`o_down`:
    /// its quorum agreed, the step before the Sentinels elect a leader to
    /// fail it over), or is failing it over.
    async fn sentinel_says_down(&self) -> Option<String> {
        let (sentinels, master) = (self.sentinels.clone(), self.master.clone());
        let (who, flags) = tokio::task::spawn_blocking(move || {
            sentinels.into_iter().find_map(|s| {
                let mut con = connect(&s).ok()?;
                let fields: std::collections::HashMap<String, String> = redis::cmd("SENTINEL")
                    .arg("master")
                    .arg(&master)
                    .query(&mut con)
                    .ok()?;
                // Its failover goes on once begun, even as the old primary
                // answers again (and `o_down` clears).
                let flags = fields.get("flags")?.clone();
                let down = |f: &str| matches!(f, "o_down" | "failover_in_progress");
                flags.split(',').any(down).then_some((s, flags))
            })
        })
        .await
        .ok()??;
        let who = self.name_of(&who).unwrap_or(who);
        Some(format!("Sentinel {who} flags it {flags}"))
    }

    /// The data nodes' `ip:port`s.
    fn data_addrs(&self) -> Vec<String> {
        self.data_nodes()
            .map(|(_, ip, port)| format!("{ip}:{port}"))
            .collect()
    }

    /// On a cluster, whether `key` (the one a client adapter says its
    /// library stores the lock under) is in the run's slot, whose master the
    /// faults strike and the observer watches: `Err` says why not.
    pub async fn check_lock_slot(&self, key: &str) -> std::result::Result<(), String> {
        let Some(slot) = self.cluster_slot else {
            return Ok(());
        };
        let addrs = self.data_addrs();
        let asked = key.to_string();
        let theirs = tokio::task::spawn_blocking(move || {
            addrs
                .iter()
                .find_map(|a| backend::redis_cluster::key_slot(a, &asked).ok())
        })
        .await
        .ok()
        .flatten();
        match theirs {
            Some(s) if s == slot => Ok(()),
            Some(s) => Err(format!(
                "the adapter says its library stores the lock under {key}, in slot {s}, not in the run's slot {slot}, whose master the faults strike: keep init's key whole in yours (its hash tag keeps the slot)"
            )),
            None => Err(format!("no cluster node answered CLUSTER KEYSLOT {key}")),
        }
    }

    /// The current primary as Sentinel names it.
    async fn sentinel_primary(&self) -> Option<String> {
        let (sentinels, master) = (self.sentinels.clone(), self.master.clone());
        let addr = tokio::task::spawn_blocking(move || {
            sentinels.iter().find_map(|s| {
                let mut con = connect(s).ok()?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&master)
                    .query::<Option<(String, u16)>>(&mut con)
                    .ok()
                    .flatten()
                    .map(|(ip, port)| format!("{ip}:{port}"))
            })
        })
        .await
        .ok()??;
        self.name_of(&addr)
    }

    /// Records a `crash` naming the node (process `harness`, `node` set)
    /// each time a node's process ends that no fault killed, until `stop`:
    /// a node killed by hand, or one that crashed, is why the lock stopped
    /// working, and `node-died` is the cause the checker then names.
    pub fn watch_deaths(
        self: &Arc<Self>,
        history: Arc<crate::journal::HistoryWriter>,
        stop: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        use checker::history::{f, OpType, Process};
        let topology = self.clone();
        tokio::spawn(async move {
            let mut reported = std::collections::HashSet::new();
            while !stop.load(Ordering::SeqCst) {
                let mut dead = Vec::new();
                for server in topology.servers.lock().await.iter_mut() {
                    let pid = server.pid();
                    if let Some(status) = server.died().await {
                        dead.push((server.name().to_string(), pid, status));
                    }
                }
                for (name, pid, status) in dead {
                    if reported.insert(pid) {
                        tracing::error!(
                            "node {name} (pid {pid}) died ({status}), and no fault killed it"
                        );
                        let value = serde_json::json!({"node": name, "pid": pid, "status": status});
                        let event = history.now(Process::harness(), OpType::Info, f::CRASH);
                        history.append(event.with_node(name).with_value(value), None);
                    }
                }
                tokio::time::sleep(DEATH_POLL).await;
            }
        })
    }

    /// Records every `+switch-master` a Sentinel announces, until `stop`.
    pub fn watch_failovers(
        &self,
        journal: Arc<dyn Journal>,
        stop: Arc<AtomicBool>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let sentinel = self.sentinels.first()?.clone();
        let names: Vec<(String, String)> = self
            .addrs
            .iter()
            .map(|(n, ip, port)| (format!("{ip} {port}"), n.clone()))
            .collect();
        Some(std::thread::spawn(move || {
            let Ok(mut con) = connect(&sentinel) else {
                return;
            };
            let mut pubsub = con.as_pubsub();
            if pubsub.subscribe("+switch-master").is_err() {
                return;
            }
            let _ = pubsub.set_read_timeout(Some(Duration::from_millis(200)));
            while !stop.load(Ordering::SeqCst) {
                let Ok(msg) = pubsub.get_message() else {
                    continue;
                };
                // "<name> <old-ip> <old-port> <new-ip> <new-port>"
                let payload: String = msg.get_payload().unwrap_or_default();
                let name_of = |addr: &str| {
                    names
                        .iter()
                        .find(|(a, _)| a == addr)
                        .map(|(_, n)| n.clone())
                };
                let parts: Vec<&str> = payload.split_whitespace().collect();
                if let [_, oip, oport, nip, nport] = parts[..] {
                    let (from, to) = (
                        name_of(&format!("{oip} {oport}")),
                        name_of(&format!("{nip} {nport}")),
                    );
                    let value = serde_json::json!({"from": from, "to": to, "sentinel": payload});
                    journal.record("switch-master", value, to.as_deref());
                }
            }
        }))
    }
}

impl Topology {
    /// A deployment's node as a fault sees it (not our process).
    async fn external_ref(&self, name: &str) -> Option<NodeRef> {
        let commands = self.commands.clone()?;
        let addr = self.addr_of(name)?;
        let name = name.to_string();
        tokio::task::spawn_blocking(move || commands.node_ref(&name, &addr).ok())
            .await
            .ok()?
    }

    fn addr_of(&self, name: &str) -> Option<String> {
        let (ip, port) = self.socket_of(name).ok()?;
        Some(format!("{ip}:{port}"))
    }
}

impl Topology {
    /// A cut between `a` and each of `others`, with this machine's iptables.
    fn cut_here(&self, a: &str, others: &[String]) -> std::io::Result<()> {
        let fw = self
            .firewall
            .as_ref()
            .ok_or_else(|| std::io::Error::other("this run has no firewall"))?;
        if self.lock_members == Some(LockMembers::Etcd) {
            let member = |n: &str| {
                self.members
                    .iter()
                    .find(|(name, _)| name == n)
                    .map(|(_, m)| *m)
                    .ok_or_else(|| std::io::Error::other(format!("no member {n}")))
            };
            let others = others
                .iter()
                .map(|o| member(o))
                .collect::<std::io::Result<Vec<_>>>()?;
            return fw.cut_members(member(a)?, &others);
        }
        let find = |n: &str| self.socket_of(n);
        let bus = |n: &str| self.buses.iter().find(|(b, _)| b == n).map(|(_, p)| *p);
        let (aip, aport) = find(a)?;
        let mut links = Vec::new();
        for o in others {
            let (oip, oport) = find(o)?;
            links.push(Link {
                client: oip,
                server: aip,
                port: aport,
            });
            links.push(Link {
                client: aip,
                server: oip,
                port: oport,
            });
            // A cluster's nodes also talk over their bus: gossip, votes.
            if let (Some(abus), Some(obus)) = (bus(a), bus(o)) {
                links.push(Link {
                    client: oip,
                    server: aip,
                    port: abus,
                });
                links.push(Link {
                    client: aip,
                    server: oip,
                    port: obus,
                });
            }
        }
        fw.cut(&links)
    }

    /// A cut between `a` and each of `others`, with their hosts' iptables.
    async fn cut_between_hosts(
        &self,
        hosts: &Arc<dyn backend::Hosts>,
        a: &str,
        others: &[String],
    ) -> std::io::Result<()> {
        let at = |n: &str| -> std::io::Result<_> {
            let (ip, port) = self.socket_of(n)?;
            Ok(std::net::SocketAddrV4::new(ip, port))
        };
        for o in others {
            let cut = hosts.cut((a, at(a)?), (o, at(o)?)).await;
            cut.map_err(std::io::Error::other)?;
        }
        Ok(())
    }
}

impl Cluster for Topology {
    fn primary(&self) -> BoxFuture<'_, Option<NodeRef>> {
        Box::pin(async move {
            if self.locks_in_storage {
                return self.targets(Targets::Storage).await.into_iter().next();
            }
            let name = if self.cluster_slot.is_some() {
                self.cluster_master().await?
            } else if self.sentinels.is_empty() {
                self.data_nodes().next()?.0.clone()
            } else {
                self.sentinel_primary().await?
            };
            if self.commands.is_some() {
                return self.external_ref(&name).await;
            }
            let nodes = self.servers.lock().await;
            let node = nodes.iter().find(|n| n.name() == name)?;
            (node.pid() != 0).then(|| node.node_ref())
        })
    }

    fn replicas_of(&self, primary: &str) -> Vec<String> {
        if self.cluster_slot.is_some() {
            return cluster_partner(primary).into_iter().collect();
        }
        self.data_nodes()
            .map(|(n, _, _)| n.clone())
            .filter(|n| n != primary)
            .collect()
    }

    fn kill(&self, name: &str) -> BoxFuture<'_, std::io::Result<NodeRef>> {
        let name = name.to_string();
        Box::pin(async move {
            if let Some(commands) = self.commands.clone() {
                let addr = self.addr_of(&name).unwrap_or_default();
                return tokio::task::spawn_blocking(move || commands.kill(&name, &addr))
                    .await
                    .map_err(std::io::Error::other)?;
            }
            let not_running = || std::io::Error::other(format!("node {name} is not running"));
            let mut servers = self.servers.lock().await;
            let node = servers
                .iter_mut()
                .find(|n| n.name() == name)
                .ok_or_else(not_running)?;
            let was = node.node_ref();
            node.kill().await.ok_or_else(not_running)?;
            Ok(was)
        })
    }

    fn restart(&self, name: &str) -> BoxFuture<'_, Result<NodeRef, String>> {
        let name = name.to_string();
        Box::pin(async move {
            if let Some(commands) = self.commands.clone() {
                let addr = self.addr_of(&name).unwrap_or_default();
                return tokio::task::spawn_blocking(move || commands.back(&name, &addr))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let mut servers = self.servers.lock().await;
            let node = servers
                .iter_mut()
                .find(|n| n.name() == name)
                .ok_or_else(|| match name == STORAGE {
                    true => "no storage node of ours".to_string(),
                    false => format!("no node {name}"),
                })?;
            node.restart().await.map_err(|e| e.to_string())?;
            Ok(node.node_ref())
        })
    }

    fn host_of(&self, name: &str) -> Option<Arc<dyn nemesis::cluster::Host>> {
        Some(self.remote.as_ref()?.host_of(name))
    }

    fn partition<'a>(
        &'a self,
        a: &'a str,
        others: &'a [String],
    ) -> BoxFuture<'a, std::io::Result<()>> {
        Box::pin(async move {
            match &self.remote {
                Some(remote) => self.cut_between_hosts(remote, a, others).await,
                None => self.cut_here(a, others),
            }
        })
    }

    fn heal(&self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move {
            if let Some(hosts) = &self.remote {
                return hosts.heal().await.map_err(std::io::Error::other);
            }
            match &self.firewall {
                Some(fw) => fw.heal(),
                None => Ok(()),
            }
        })
    }

    fn lock_nodes(&self) -> Vec<String> {
        self.data_nodes().map(|(n, _, _)| n.clone()).collect()
    }

    fn consensus(&self) -> bool {
        self.lock_members.is_some()
    }

    fn fails_over(&self) -> bool {
        !self.sentinels.is_empty() || self.cluster_slot.is_some()
    }

    fn votes(&self) -> bool {
        self.cluster_slot.is_some() && self.deployment.owned()
    }

    fn hand_over(&self, replica: &str, takeover: bool) -> BoxFuture<'_, Result<(), String>> {
        let addr = self
            .socket_of(replica)
            .map(|(ip, port)| format!("{ip}:{port}"));
        let ours = self.votes();
        Box::pin(async move {
            let addr = addr.map_err(|e| e.to_string())?;
            if !ours {
                return Err("not a Redis Cluster lockstorm started".into());
            }
            tokio::task::spawn_blocking(move || backend::redis_cluster::failover(&addr, takeover))
                .await
                .map_err(|e| e.to_string())?
        })
    }

    fn has_leader(&self, node: &str) -> BoxFuture<'_, Result<bool, String>> {
        let addr = self
            .socket_of(node)
            .map(|(ip, port)| format!("{ip}:{port}"));
        let members = self.lock_members;
        Box::pin(async move {
            match (addr, members) {
                (Ok(addr), Some(LockMembers::ZooKeeper)) => {
                    backend::zookeeper::has_leader(addr).await
                }
                (Ok(addr), _) => backend::etcd::has_leader(addr).await,
                (Err(e), _) => Err(e.to_string()),
            }
        })
    }

    fn targets(&self, targets: Targets) -> BoxFuture<'_, Vec<NodeRef>> {
        Box::pin(async move {
            if targets == Targets::Storage || self.locks_in_storage {
                let servers = self.servers.lock().await;
                let storage = servers.iter().find(|n| n.name() == STORAGE);
                let running = storage.filter(|n| n.pid() != 0);
                return running.map(|n| n.node_ref()).into_iter().collect();
            }
            if !self.sentinels.is_empty() || self.cluster_slot.is_some() {
                return self.primary().await.into_iter().collect();
            }
            let names = targets.pick(&self.lock_nodes());
            if self.commands.is_some() {
                let mut found = Vec::new();
                for name in names {
                    found.extend(self.external_ref(&name).await);
                }
                return found;
            }
            let nodes = self.servers.lock().await;
            names
                .into_iter()
                .filter_map(|name| Some(nodes.iter().find(|n| n.name() == name)?.node_ref()))
                .collect()
        })
    }

    fn set_clock(&self, node: &str, offset_ns: i64, rate: f64) -> std::io::Result<()> {
        let (_, control) = self.clocks.iter().find(|(n, _)| n == node).ok_or_else(|| {
            std::io::Error::other(format!("node {node} runs without the time shim"))
        })?;
        control.set(offset_ns, rate)
    }

    fn connects(
        &self,
        from: Source,
        node: &str,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<bool, String>> {
        let target = self.socket_of(node);
        if let (Some(hosts), Source::Node(n)) = (self.remote.clone(), &from) {
            let n = n.clone();
            return Box::pin(async move {
                let (ip, port) = target.map_err(|e| e.to_string())?;
                let addr = format!("{ip}:{port}");
                let probe = hosts.connects(&n, &addr, timeout).await;
                probe.map_err(|e| e.to_string())
            });
        }
        let source = match &from {
            Source::Harness => Ok(None),
            Source::Worker(_) if !self.sources_of_its_own() => Ok(None),
            Source::Worker(w) => Ok(Some(self.addresses.worker(*w as u64))),
            Source::Node(n) => self.socket_of(n).map(|(ip, _)| Some(ip)),
        };
        Box::pin(async move {
            let (ip, port) = target.map_err(|e| e.to_string())?;
            let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
            if let Some(src) = source.map_err(|e| e.to_string())? {
                socket
                    .bind((src, 0).into())
                    .map_err(|e| format!("binding a probe to {src}: {e}"))?;
            }
            let attempt = tokio::time::timeout(timeout, socket.connect((ip, port).into()));
            Ok(matches!(attempt.await, Ok(Ok(_))))
        })
    }

    fn wall_clock(&self, node: &str) -> BoxFuture<'_, Result<ClockReading, String>> {
        let target = self.socket_of(node);
        let name = node.to_string();
        let member =
            self.lock_members == Some(LockMembers::Etcd) && self.lock_nodes().contains(&name);
        Box::pin(async move {
            let (ip, port) = target.map_err(|e| e.to_string())?;
            let addr = format!("{ip}:{port}");
            if member {
                return backend::etcd::wall_clock(addr).await;
            }
            tokio::task::spawn_blocking(move || {
                let mut con = connect(&addr)?;
                let before_ns = nemesis::clock::real_now_ns();
                let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut con)?;
                let after_ns = nemesis::clock::real_now_ns();
                Ok::<_, redis::RedisError>(ClockReading {
                    via: "TIME",
                    node_ns: s * 1_000_000_000 + us * 1_000,
                    before_ns,
                    after_ns,
                })
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("TIME from {name}: {e}"))
        })
    }

    fn run_command(
        &self,
        fault: &str,
        node: &str,
    ) -> BoxFuture<'_, Option<Result<String, String>>> {
        let (fault, node) = (fault.to_string(), node.to_string());
        Box::pin(async move {
            let commands = self.commands.clone()?;
            let addr = self.addr_of(&node).unwrap_or_default();
            tokio::task::spawn_blocking(move || commands.run(&fault, &node, &addr))
                .await
                .unwrap_or_else(|e| Some(Err(e.to_string())))
        })
    }

    fn role_of(&self, node: &str) -> BoxFuture<'_, Option<String>> {
        let (addr, commands) = (self.addr_of(node), self.commands.clone());
        Box::pin(async move {
            let addr = addr?;
            tokio::task::spawn_blocking(move || match commands {
                Some(commands) => commands.role(&addr).ok(),
                None => {
                    let mut con = connect(&addr).ok()?;
                    let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).ok()?;
                    match reply.first()? {
                        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into()),
                        _ => None,
                    }
                }
            })
            .await
            .ok()?
        })
    }

    fn end_lock_session(&self, worker: &str) -> BoxFuture<'_, Result<Vec<i32>, String>> {
        let (addr, worker) = (self.storage_addr.clone(), worker.to_string());
        Box::pin(async move {
            if !self.storage_postgres {
                return Err("the run's storage is not PostgreSQL".into());
            }
            tokio::task::spawn_blocking(move || {
                workloads::pg::terminate_lock_session(&addr, &worker, Duration::from_secs(10))
                    .map_err(|f| format!("{f:?}"))
            })
            .await
            .map_err(|e| e.to_string())?
        })
    }

    fn await_marked_down(&self, node: &str, timeout: Duration) -> BoxFuture<'_, Option<String>> {
        let addr = self.addr_of(node);
        Box::pin(async move {
            let addr = addr?;
            let watch = async {
                loop {
                    let said = match self.cluster_slot.is_some() {
                        true => self.cluster_flags_failed(&addr).await,
                        false => self.sentinel_says_down().await,
                    };
                    if said.is_some() {
                        return said;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            within(timeout, watch).await
        })
    }

    fn await_promotion(&self, old: &str, timeout: Duration) -> BoxFuture<'_, Option<Promotion>> {
        let old = old.to_string();
        Box::pin(async move {
            let watch = async {
                loop {
                    let now = match self.cluster_slot.is_some() {
                        true => self.slot_claim().await.map(|(node, e)| (node, Some(e))),
                        false => self.sentinel_primary().await.map(|node| (node, None)),
                    };
                    match now {
                        Some((node, epoch)) if node != old => {
                            return Some(Promotion { node, epoch })
                        }
                        _ => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            };
            within(timeout, watch).await
        })
    }
}

/// `watch`'s answer if it comes within `timeout`. The deadline holds over
/// a slow answer too: a kill's restart waits on a watch, and a Sentinel
/// that took 2 s to answer on a busy machine once kept a 300 ms kill's node
/// down past Sentinel's own notice, which then failed it over.
async fn within<T>(
    timeout: Duration,
    watch: impl std::future::Future<Output = Option<T>>,
) -> Option<T> {
    tokio::time::timeout(timeout, watch).await.ok().flatten()
}

/// Polls a blocking probe until it says yes, or fails with `what`.
async fn await_probe(
    what: String,
    log: PathBuf,
    name: &str,
    probe: impl Fn() -> bool + Send + Sync + 'static,
) -> Result<()> {
    let probe = Arc::new(probe);
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let p = probe.clone();
        if tokio::task::spawn_blocking(move || p())
            .await
            .unwrap_or(false)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(backend::Error::Node {
                name: name.to_string(),
                message: format!("{what} not within {READY_TIMEOUT:?}"),
                log,
            }
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A cluster node's pair, by name ([`workloads::cluster_view::partner`]).
fn cluster_partner(node: &str) -> Option<String> {
    let i: usize = node.strip_prefix('n')?.parse().ok()?;
    let masters = Config::Cluster.lock_nodes();
    let other = workloads::cluster_view::partner(i.checked_sub(1)?, masters)?;
    Some(format!("n{}", other + 1))
}

/// The slot the lock's key hashes to, as `node` says.
async fn lock_slot(node: &RedisNode, key: &str) -> Result<u32> {
    let (addr, key) = (node.addr(), key.to_string());
    let slot = tokio::task::spawn_blocking(move || backend::redis_cluster::key_slot(&addr, &key))
        .await
        .map_err(|e| e.to_string())
        .and_then(|slot| slot.map_err(|e| e.to_string()));
    slot.map_err(|e| {
        backend::Error::Node {
            name: node.name().to_string(),
            message: format!("CLUSTER KEYSLOT of the lock's key: {e}"),
            log: node.log(),
        }
        .into()
    })
}

/// Waits until the primary reports `replicas` replicas online and in sync.
async fn await_replication(primary: &RedisNode, replicas: usize) -> Result<()> {
    let addr = primary.addr();
    await_probe(
        format!("{replicas} replicas in sync"),
        primary.log(),
        primary.name(),
        move || {
            let Ok(mut con) = connect(&addr) else {
                return false;
            };
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut con)
                .unwrap_or_default();
            info.lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .count()
                >= replicas
        },
    )
    .await
}

/// Waits until a Sentinel knows the primary, both replicas and the other two
/// Sentinels (without them it could not win a failover vote).
async fn await_sentinel(sentinel: &RedisNode) -> Result<()> {
    let addr = sentinel.addr();
    let what = "knowing 2 replicas and 2 other sentinels".to_string();
    await_probe(what, sentinel.log(), sentinel.name(), move || {
        let Ok(mut con) = connect(&addr) else {
            return false;
        };
        let fields: Vec<String> = redis::cmd("SENTINEL")
            .arg("master")
            .arg(PRIMARY_NAME)
            .query(&mut con)
            .unwrap_or_default();
        let get = |k: &str| {
            fields
                .iter()
                .position(|f| f == k)
                .and_then(|i| fields.get(i + 1))
                .cloned()
        };
        get("num-slaves").as_deref() == Some("2")
            && get("num-other-sentinels").as_deref() == Some("2")
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every address a run in `block` uses, storage included.
    fn all(block: u8) -> Vec<Ipv4Addr> {
        let a = Addresses { block };
        let most = Config::ALL.into_iter().map(data_nodes).max().unwrap() as u8;
        let mut ips: Vec<Ipv4Addr> = (1..=most).map(|n| a.data(n)).collect();
        ips.extend((1..=3).map(|n| a.sentinel(n)));
        ips.extend((0..64).map(|w| a.worker(w)));
        ips.push(a.storage());
        ips
    }

    #[test]
    fn a_clusters_masters_and_replicas_pair_off_both_ways() {
        assert_eq!(data_nodes(Config::Cluster), 6);
        assert_eq!(data_nodes(Config::Replicated), 3);
        assert_eq!(data_nodes(Config::Redlock), 5);
        for (master, replica) in [("n1", "n4"), ("n2", "n5"), ("n3", "n6")] {
            assert_eq!(cluster_partner(master).as_deref(), Some(replica));
            assert_eq!(cluster_partner(replica).as_deref(), Some(master));
        }
        for other in ["n0", "n7", "s1", "storage"] {
            assert_eq!(cluster_partner(other), None, "{other}");
        }
    }

    #[test]
    fn address_blocks_share_no_address_and_stay_on_loopback() {
        let zero = all(0);
        assert_eq!(zero[0], Ipv4Addr::new(127, 0, 0, 11));
        assert_eq!(*zero.last().unwrap(), Ipv4Addr::LOCALHOST);
        for block in [0, 1, 2, 63] {
            let ips = all(block);
            let mut unique = ips.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), ips.len(), "block {block} repeats an address");
            assert!(ips.iter().all(|ip| ip.is_loopback()));
            for other in [0, 1, 2, 63].into_iter().filter(|&b| b != block) {
                assert!(
                    all(other).iter().all(|ip| !ips.contains(ip)),
                    "blocks {block} and {other} share an address"
                );
            }
        }
    }
}
