//! The fault proxy: every connection from a worker to a lock node, a
//! Sentinel or the counter storage can run through it, one listening address
//! per worker and upstream, so a fault can single out one worker and one
//! command. Toxiproxy's model (a proxy per upstream, faults on it) made
//! RESP-aware: requests and replies are parsed a frame at a time, in order,
//! so a [`Trap`] can hold or drop *one named command* — the acquire, the
//! storage write, the release — and nothing else; a cut drops every byte of
//! chosen links both ways; background latency delays every request.
//!
//! The proxy lives inside the harness process: its tasks and sockets end
//! with [`Fabric::shutdown`], or with the process, whatever kills it.

mod command;
mod link;
pub mod resp;
mod sentinel;
mod trap;

pub use command::{Class, Keys, Role, WriteArg};
pub use trap::{Act, Armed, Caught, Sprung, Trap};

use command::Scripts;
use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// One upstream every worker reaches through its own proxy address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// The node's name (`n1`, `s1`, `storage`): what faults and evidence say.
    pub name: String,
    pub addr: SocketAddr,
    pub role: Role,
}

/// What a fabric is built from.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Each worker's own loopback address: its proxies listen there, and
    /// (with `onward_from_workers`) their upstream connections leave from
    /// there.
    pub workers: Vec<Ipv4Addr>,
    /// Upstream connections leave from the worker's address, as on nodes
    /// lockstorm started; a deployment it did not start is reached from
    /// the host's own (Redis's protected mode, or another host, would not
    /// take a connection from 127.0.x.y).
    pub onward_from_workers: bool,
    pub upstreams: Vec<Upstream>,
    pub keys: Keys,
    /// Background latency on every request, drawn uniformly from the range.
    pub latency: Option<(Duration, Duration)>,
    /// Seeds the latency draws.
    pub seed: u64,
}

/// What a healed cut did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CutReport {
    /// Bytes dropped on cut links while the cut lasted.
    pub dropped_bytes: u64,
    /// Client connections reset (since the fabric started).
    pub reset: u32,
}

/// Every proxy of one run.
#[derive(Clone)]
pub struct Fabric {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    workers: Vec<Ipv4Addr>,
    onward_from_workers: bool,
    upstreams: Vec<Upstream>,
    keys: Keys,
    latency: Option<(Duration, Duration)>,
    seed: u64,
    /// `[worker][upstream]`: where each proxy listens.
    listen: Vec<Vec<SocketAddr>>,
    /// `[worker]`: upstream address → this worker's proxy for it (Sentinel
    /// replies are rewritten through it).
    addresses: Vec<sentinel::Addresses>,
    scripts: Scripts,
    traps: Mutex<Vec<Arc<trap::Set>>>,
    cuts: Mutex<HashSet<(usize, usize)>>,
    /// Bumped at every cut and heal, so idle connections look again.
    cut_gen: watch::Sender<u64>,
    closed: watch::Sender<bool>,
    /// Answers to lock and counter requests so far (holds past another
    /// worker's request wait on them).
    answered: watch::Sender<trap::Answered>,
    connections: AtomicU64,
    requests: AtomicU64,
    dropped: AtomicU64,
    resets: AtomicU32,
    loops: Mutex<JoinSet<()>>,
    /// The thread that runs the proxy's own runtime.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Inner {
    fn next_connection(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed)
    }

    fn is_cut(&self, worker: usize, up: usize) -> bool {
        self.cuts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(worker, up))
    }

    /// Whether any trap is set (most requests pass none).
    fn armed(&self) -> bool {
        !self
            .traps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The live traps a command of `worker` on a `role` upstream may spring.
    fn traps(&self, worker: usize, role: Role, class: Class) -> Vec<Arc<trap::Set>> {
        if class == Class::Other {
            return Vec::new();
        }
        let mut traps = self.traps.lock().unwrap_or_else(|e| e.into_inner());
        traps.retain(|t| !t.is_over());
        traps
            .iter()
            .filter(|t| t.matches(worker, role, class))
            .cloned()
            .collect()
    }
}

impl Fabric {
    /// Opens every worker's proxy for every upstream (each on the worker's
    /// address, a port the system picks) and starts serving, on a runtime of
    /// its own: the harness's runtime writes the history as events arrive,
    /// and a request must not wait behind that (on the shared runtime, the
    /// hop cost a lock cycle five times its own length).
    pub async fn start(spec: Spec) -> std::io::Result<Fabric> {
        let (opened_tx, opened) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("lockstorm-proxy".into())
            .spawn(move || {
                // One thread: a request's wake-up is handled where epoll saw
                // it, with no hand-over to another thread.
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => return drop(opened_tx.send(Err(e))),
                };
                runtime.block_on(async move {
                    let fabric = match Fabric::open(spec).await {
                        Ok(f) => f,
                        Err(e) => return drop(opened_tx.send(Err(e))),
                    };
                    let mut closed = fabric.inner.closed.subscribe();
                    let _ = opened_tx.send(Ok(fabric.clone()));
                    let _ = closed.wait_for(|c| *c).await;
                    let mut loops = std::mem::take(
                        &mut *fabric.inner.loops.lock().unwrap_or_else(|e| e.into_inner()),
                    );
                    while loops.join_next().await.is_some() {}
                });
            })?;
        let fabric = opened
            .await
            .map_err(|_| std::io::Error::other("the proxy's thread ended before it opened"))??;
        *fabric
            .inner
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(thread);
        Ok(fabric)
    }

    async fn open(spec: Spec) -> std::io::Result<Fabric> {
        let mut listeners = Vec::new();
        let mut listen = Vec::new();
        for ip in &spec.workers {
            let mut row = Vec::new();
            for _ in &spec.upstreams {
                let l = TcpListener::bind((*ip, 0)).await?;
                row.push(l.local_addr()?);
                listeners.push(l);
            }
            listen.push(row);
        }
        let addresses = listen
            .iter()
            .map(|row| {
                spec.upstreams
                    .iter()
                    .zip(row)
                    .map(|(u, l)| {
                        let key = (u.addr.ip().to_string(), u.addr.port().to_string());
                        (key, (l.ip().to_string(), l.port().to_string()))
                    })
                    .collect()
            })
            .collect();
        let inner = Arc::new(Inner {
            workers: spec.workers,
            onward_from_workers: spec.onward_from_workers,
            upstreams: spec.upstreams,
            keys: spec.keys,
            latency: spec.latency,
            seed: spec.seed,
            listen,
            addresses,
            scripts: Scripts::default(),
            traps: Mutex::new(Vec::new()),
            cuts: Mutex::new(HashSet::new()),
            cut_gen: watch::channel(0).0,
            closed: watch::channel(false).0,
            answered: watch::channel(trap::Answered::default()).0,
            connections: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            resets: AtomicU32::new(0),
            loops: Mutex::new(JoinSet::new()),
            thread: Mutex::new(None),
        });
        let ups = inner.upstreams.len();
        for (i, listener) in listeners.into_iter().enumerate() {
            let (worker, up) = (i / ups, i % ups);
            let inner2 = inner.clone();
            inner
                .loops
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .spawn(accept(inner2, worker, up, listener));
        }
        Ok(Fabric { inner })
    }

    /// Worker `worker`'s proxy address for upstream `name`.
    pub fn addr(&self, worker: usize, name: &str) -> Option<SocketAddr> {
        let up = self.upstream(name)?;
        Some(*self.inner.listen.get(worker)?.get(up)?)
    }

    fn upstream(&self, name: &str) -> Option<usize> {
        self.inner.upstreams.iter().position(|u| u.name == name)
    }

    /// Sets a trap: the first matching command springs it.
    pub fn arm(&self, trap: Trap) -> Armed {
        let (set, armed) = trap::new(trap);
        self.inner
            .traps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::new(set));
        armed
    }

    /// Cuts each `(worker, upstream name)` link: every byte either way is
    /// dropped until [`Fabric::heal`], and a connection that lived through
    /// the cut is reset when it heals.
    pub fn cut(&self, links: &[(usize, String)]) -> Result<(), String> {
        let mut resolved = Vec::new();
        for (w, name) in links {
            let up = self
                .upstream(name)
                .ok_or_else(|| format!("no proxied upstream named {name}"))?;
            if *w >= self.inner.workers.len() {
                return Err(format!("no worker {w}"));
            }
            resolved.push((*w, up));
        }
        self.inner.dropped.store(0, Ordering::Relaxed);
        self.inner
            .cuts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(resolved);
        self.inner.cut_gen.send_modify(|g| *g += 1);
        Ok(())
    }

    /// Ends every cut.
    pub fn heal(&self) -> CutReport {
        self.inner
            .cuts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.inner.cut_gen.send_modify(|g| *g += 1);
        CutReport {
            dropped_bytes: self.inner.dropped.load(Ordering::Relaxed),
            reset: self.inner.resets.load(Ordering::Relaxed),
        }
    }

    /// Whether a `PING` sent through worker `worker`'s proxy for `name` is
    /// answered within `timeout`: what that worker would see of the node.
    pub async fn answers(
        &self,
        worker: usize,
        name: &str,
        timeout: Duration,
    ) -> Result<bool, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self
            .addr(worker, name)
            .ok_or_else(|| format!("no proxy for worker {worker} and {name}"))?;
        let ping = async {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            s.write_all(b"*1\r\n$4\r\nPING\r\n").await?;
            let mut reply = [0u8; 7];
            s.read_exact(&mut reply).await?;
            Ok::<_, std::io::Error>(&reply == b"+PONG\r\n")
        };
        Ok(matches!(
            tokio::time::timeout(timeout, ping).await,
            Ok(Ok(true))
        ))
    }

    /// Requests proxied so far.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Closes every listener and connection and waits for their tasks.
    pub async fn shutdown(&self) {
        let _ = self.inner.closed.send(true);
        let thread = self
            .inner
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// Serves one worker's proxy for one upstream until the fabric closes; its
/// connections end with it.
async fn accept(inner: Arc<Inner>, worker: usize, up: usize, listener: TcpListener) {
    let mut links = JoinSet::new();
    let mut closed = inner.closed.subscribe();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    links.spawn(link::serve(inner.clone(), worker, up, stream));
                }
                Err(e) => tracing::debug!("proxy accept: {e}"),
            },
            // Reap finished connections as they go.
            Some(_) = links.join_next(), if !links.is_empty() => {}
            _ = closed.wait_for(|c| *c) => break,
        }
    }
    drop(listener);
    links.shutdown().await;
}
