//! `lockstorm client-test`: an adapter's conformance to the protocol and to
//! what a lock must do, against one real Redis node, without faults. The
//! first thing an adapter's author runs; each step prints pass or fail.

use crate::clients::{self, Client};
use crate::error::{Context, Error, Result};
use crate::options::Nodes;
use crate::topology::Addresses;
use backend::node::Persistence;
use backend::node::{NodeSpec, RedisNode, Role};
use backend::Server;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use workloads::adapter::{self, AdapterSpec, Answer, Failure, Group, Hello, Op, Reply, Session};
use workloads::Config;

/// One step's outcome: what was seen, and whether it is what the protocol
/// and a lock require (`pass`), or only what this library does (`note`:
/// whether a lease outlived by its holder is noticed is for runs to judge).
pub struct Step {
    pub name: &'static str,
    pub pass: bool,
    pub note: bool,
    pub seen: String,
}

pub struct Report {
    pub client: String,
    pub folder: PathBuf,
    pub steps: Vec<Step>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.steps.iter().all(|s| s.note || s.pass)
    }

    pub fn render(&self) -> String {
        let mut out = format!("client-test {}\n", self.client);
        for s in &self.steps {
            let mark = match (s.note, s.pass) {
                (true, _) => "note",
                (false, true) => "pass",
                (false, false) => "FAIL",
            };
            out += &format!("  {mark}  {}: {}\n", s.name, s.seen);
        }
        let count = |f: fn(&Step) -> bool| self.steps.iter().filter(|s| f(s)).count();
        out += &format!(
            "{} passed, {} failed, {} noted; adapter stderr and node log in {}\n",
            count(|s| !s.note && s.pass),
            count(|s| !s.note && !s.pass),
            count(|s| s.note),
            self.folder.display()
        );
        out
    }
}

/// Runs the steps with leases of `ttl`: one node, two adapter instances.
pub async fn client_test(
    client: &Client,
    ttl: Duration,
    results: &Path,
    nodes: &Nodes,
) -> Result<Report> {
    if nodes.hosts.is_some() {
        return Err(Error::Usage(
            "client-test runs its node on this machine: drop --nodes".into(),
        ));
    }
    let prepared = clients::prepare(client)?;
    if let Some(raw) = &nodes.target {
        let ca = nodes.tls_ca.as_deref();
        return client_test_on_target(client, prepared, ttl, results, raw, ca).await;
    }
    let backend = backend::provision(nodes.backend, nodes.image.as_deref(), false).await?;
    let block = crate::blocks::claim_one(nodes.address_block)?;
    let addresses = Addresses {
        block: block.block(),
    };
    let report = client_test_on(client, prepared, ttl, results, addresses, backend.clone()).await;
    backend.finish().await;
    report
}

async fn client_test_on(
    client: &Client,
    prepared: workloads::install::Prepared,
    ttl: Duration,
    results: &Path,
    addresses: Addresses,
    backend: std::sync::Arc<dyn backend::Provisioner>,
) -> Result<Report> {
    let folder =
        store::layout::unique_dir(results, &format!("client-test-{}", store::layout::stamp()))?;
    std::fs::create_dir_all(&folder).context(|| format!("creating {}", folder.display()))?;
    let config = client.tested_on();
    let nodes_dir = folder.join("nodes");
    let mut servers: Vec<Box<dyn Server>> = match config.locks_in_zookeeper() {
        true => {
            let count = config.lock_nodes();
            let ensemble =
                crate::topology::start_zookeeper(count, addresses, &nodes_dir, &backend).await?;
            ensemble
                .into_iter()
                .map(|m| Box::new(m) as Box<dyn Server>)
                .collect()
        }
        false => {
            let spec = NodeSpec {
                name: "n1".into(),
                role: Role::Lock,
                ip: addresses.data(1),
                persistence: Persistence::None,
                clock: None,
            };
            vec![Box::new(RedisNode::start(spec, &nodes_dir, backend).await?)]
        }
    };
    let nodes: Vec<String> = servers.iter().map(|s| s.addr()).collect();
    let mut spec = prepared.spec(config, folder.join("adapter.stderr"));
    // lockstorm's own node has no password, whatever the shell holds.
    spec.env
        .insert(workloads::conn::PASSWORD_ENV.into(), String::new());
    let on = match nodes.len() {
        1 => format!("one node at {}", nodes[0]),
        _ => format!("the {} members at {}", spec.topology, nodes.join(", ")),
    };
    let label = format!("{client} (`{}`) on {on}", spec.command());
    let steps = steps_on(spec, nodes, workloads::Keys::default(), ttl).await;
    for server in &mut servers {
        server.remove().await;
    }
    Ok(Report {
        client: label,
        folder,
        steps: steps?,
    })
}

/// The same steps on a deployment's one node (`--target redis://…`), under
/// a prefix of their own, checked free before and removed after.
async fn client_test_on_target(
    client: &Client,
    prepared: workloads::install::Prepared,
    ttl: Duration,
    results: &Path,
    raw: &str,
    tls_ca: Option<&Path>,
) -> Result<Report> {
    use deployment::target::{Kind, Target};
    let target = Target::parse(raw).map_err(Error::Usage)?;
    if target.kind != Kind::Single {
        return Err(Error::Usage(format!(
            "--target {target}: client-test checks a library on one node: give redis://host:port"
        )));
    }
    let (target, _bridges) = deployment::tls::bridge(&target, tls_ca).await?;
    let at = target.endpoints[0].clone();
    let (ip, port) = deployment::reach::resolve(&at)?;
    let addr = format!("{ip}:{port}");
    let stamp = store::layout::stamp();
    let keys = workloads::Keys::for_run(&format!("client-test:{stamp}"), 600_000);
    let nodes = vec![("n1".to_string(), at)];
    deployment::own_keys::preflight(&target, nodes.clone(), &keys).await?;
    let folder = store::layout::unique_dir(results, &format!("client-test-{stamp}"))?;
    std::fs::create_dir_all(&folder).context(|| format!("creating {}", folder.display()))?;
    let mut spec = prepared.spec(Config::Single, folder.join("adapter.stderr"));
    if let Some(user) = &target.user {
        spec.env
            .insert(deployment::reach::USER_ENV.into(), user.clone());
    }
    let label = format!("{client} (`{}`) on {target}", spec.command());
    let steps = steps_on(spec, vec![addr], keys.clone(), ttl).await;
    deployment::own_keys::clean(&target, nodes, &keys).await;
    Ok(Report {
        client: label,
        folder,
        steps: steps?,
    })
}

/// The adapters live on one thread from start to end: each dies with the
/// thread that started it.
async fn steps_on(
    spec: AdapterSpec,
    nodes: Vec<String>,
    keys: workloads::Keys,
    ttl: Duration,
) -> Result<Vec<Step>> {
    tokio::task::spawn_blocking(move || Steps::new(spec, nodes, keys, ttl).run())
        .await
        .map_err(|e| Error::Adapter(format!("the client test failed: {e}")))?
}

struct Steps {
    spec: AdapterSpec,
    /// The lock's nodes, as `init` names them.
    nodes: Vec<String>,
    /// The lock's key is `keys.lock()`.
    keys: workloads::Keys,
    ttl: Duration,
    done: Vec<Step>,
}

/// Long enough for any step's reply: Python and Node start slowly.
const BUDGET: Duration = Duration::from_secs(20);

/// How long an adapter has to exit once its stdin closes. The step asks
/// whether it exits, not how fast: an interpreter winding down its library's
/// threads took over half a second on a loaded 2-core machine. (A run's own
/// adapters get half a second: a worker waits on them.)
const EXIT_BUDGET: Duration = Duration::from_secs(5);
/// What a reply may take beyond the wait its request asks for.
const MARGIN: Duration = Duration::from_secs(5);

/// How long a reply to `op` is waited for: an acquire may wait as long as
/// it asks (three leases, with the holder frozen), and the budget follows.
fn budget(op: &Op) -> Duration {
    match op {
        Op::Acquire { timeout_ms } => (Duration::from_millis(*timeout_ms) + MARGIN).max(BUDGET),
        _ => BUDGET,
    }
}
/// How long a second instance waits for a lock that is held.
const BUSY_WAIT: Duration = Duration::from_millis(300);

impl Steps {
    fn new(spec: AdapterSpec, nodes: Vec<String>, keys: workloads::Keys, ttl: Duration) -> Self {
        Steps {
            spec,
            nodes,
            keys,
            ttl,
            done: Vec::new(),
        }
    }

    fn step(&mut self, name: &'static str, pass: bool, seen: impl Into<String>) -> bool {
        self.done.push(Step {
            name,
            pass,
            note: false,
            seen: seen.into(),
        });
        pass
    }

    /// What the library does where a lock may differ, shown, not judged.
    fn note(&mut self, name: &'static str, seen: impl Into<String>) {
        self.done.push(Step {
            name,
            pass: true,
            note: true,
            seen: seen.into(),
        });
    }

    fn start(&self, worker: u64) -> std::result::Result<(Session, Hello), Failure> {
        let init = self.spec.init(
            &self.nodes,
            &[],
            self.ttl.as_millis() as u64,
            (self.ttl * 2).as_millis() as u64,
            worker,
            self.keys.lock(),
        );
        adapter::start(&self.spec, init, BUDGET, Group::Own)
    }

    /// Every step in order; a step that leaves nothing to build on ends it.
    fn run(mut self) -> Result<Vec<Step>> {
        let (mut a, hello) = match self.start(0) {
            Ok(started) => started,
            // Nothing to test: bad input, as for `run`.
            Err(Failure::Unstartable(why)) => return Err(Error::Adapter(why)),
            Err(f) => {
                self.step("init", false, f.to_string());
                return Ok(self.done);
            }
        };
        let features = match hello.features.is_empty() {
            true => "none".to_string(),
            false => hello.features.join(", "),
        };
        self.step(
            "init",
            true,
            format!("{}, features: {features}", hello.client),
        );
        let (mut b, _) = match self.start(1) {
            Ok(started) => started,
            Err(f) => {
                self.step("init a second instance", false, f.to_string());
                return Ok(self.done);
            }
        };
        let ttl_ms = self.ttl.as_millis() as u64;

        let (reply, took) = call(&mut a, Op::Acquire { timeout_ms: ttl_ms });
        let granted = answer(&reply) == Some(Answer::Yes);
        self.step("acquire", granted, describe(&reply, took));
        if !granted {
            return Ok(self.done);
        }
        let (reply, took) = call(
            &mut b,
            Op::Acquire {
                timeout_ms: BUSY_WAIT.as_millis() as u64,
            },
        );
        let refused = answer(&reply) == Some(Answer::No);
        self.step(
            "a second instance is refused while it is held",
            refused,
            describe(&reply, took),
        );
        if hello.has("check") {
            let (reply, took) = call(&mut a, Op::Check);
            let valid = matches!(&reply, Ok(r) if r.valid == Some(true));
            self.step("check while held says valid", valid, describe(&reply, took));
        }
        let (reply, took) = call(&mut a, Op::Release);
        let released = matches!(answer(&reply), Some(Answer::Yes | Answer::Unknown));
        self.step("release", released, describe(&reply, took));
        // Whatever the release said, the lock must now be free.
        let (reply, took) = call(&mut b, Op::Acquire { timeout_ms: ttl_ms });
        let free = answer(&reply) == Some(Answer::Yes);
        self.step(
            "after the release another instance acquires",
            free,
            describe(&reply, took),
        );
        if free {
            let _ = call(&mut b, Op::Release);
        }
        let (reply, took) = call(&mut a, Op::Release);
        let not_held = matches!(&reply, Ok(r) if r.answer == Some(Answer::No));
        self.step(
            "release when not held says not-held",
            not_held,
            describe(&reply, took),
        );
        self.expiry(&mut a, &mut b, &hello);
        let started = Instant::now();
        let ended = a.close_within(EXIT_BUDGET);
        let seen = match ended.exited {
            true => format!("exited in {} ms", started.elapsed().as_millis()),
            false => format!(
                "still running {} s after its stdin closed (killed; {})",
                EXIT_BUDGET.as_secs(),
                ended.stuck.as_deref().unwrap_or("state unknown")
            ),
        };
        self.step("exits when its stdin closes", ended.exited, seen);
        let strays = [ended.strays, b.close().strays].concat();
        if !strays.is_empty() {
            self.note("processes left behind", adapter::strays_left(&strays));
        }
        Ok(self.done)
    }

    /// A holder frozen past its TTL (as a crashed or paused one would be,
    /// its renewals with it) loses the lock to the next, and its library
    /// then says it no longer holds it.
    fn expiry(&mut self, a: &mut Session, b: &mut Session, hello: &Hello) {
        let ttl_ms = self.ttl.as_millis() as u64;
        let (reply, _) = call(a, Op::Acquire { timeout_ms: ttl_ms });
        if answer(&reply) != Some(Answer::Yes) {
            self.step(
                "acquire after TTL expiry",
                false,
                format!(
                    "the holder could not acquire first: {}",
                    describe(&reply, Duration::ZERO)
                ),
            );
            return;
        }
        let frozen = match nemesis::process::Suspended::new(a.pid()) {
            Ok(frozen) => frozen,
            Err(e) => {
                self.step(
                    "acquire after TTL expiry",
                    false,
                    format!("cannot freeze the holder: {e}"),
                );
                return;
            }
        };
        let (reply, took) = call(
            b,
            Op::Acquire {
                timeout_ms: ttl_ms * 3,
            },
        );
        drop(frozen);
        let granted = answer(&reply) == Some(Answer::Yes);
        let seen = format!(
            "with the holder frozen, {} (TTL {ttl_ms} ms)",
            describe(&reply, took)
        );
        let in_time = took < self.ttl * 2 + BUSY_WAIT;
        self.step("acquire after TTL expiry", granted && in_time, seen);
        if hello.has("check") {
            let (reply, took) = call(a, Op::Check);
            self.note("the outlived holder's check", describe(&reply, took));
        }
        let (reply, took) = call(a, Op::Release);
        self.note("the outlived holder's release", describe(&reply, took));
        let _ = call(b, Op::Release);
        // A library that gives up its connection for good after a freeze
        // (a client closed on its first timeout) would fail every op of a
        // run after the first pause: it must come back.
        let (reply, took) = call(a, Op::Acquire { timeout_ms: ttl_ms });
        let back = answer(&reply) == Some(Answer::Yes);
        self.step(
            "the frozen holder, resumed, acquires again",
            back,
            describe(&reply, took),
        );
        if back {
            let _ = call(a, Op::Release);
        }
    }
}

fn call(session: &mut Session, op: Op) -> (std::result::Result<Reply, Failure>, Duration) {
    let started = Instant::now();
    let budget = budget(&op);
    let reply = session.call(op, budget, |_| {});
    (reply, started.elapsed())
}

fn answer(reply: &std::result::Result<Reply, Failure>) -> Option<Answer> {
    reply.as_ref().ok().and_then(|r| r.answer)
}

/// `ok in 3 ms`, `fail (lock-busy) in 301 ms`, or how the adapter failed.
fn describe(reply: &std::result::Result<Reply, Failure>, took: Duration) -> String {
    let r = match reply {
        Ok(r) => r,
        Err(f) => return f.to_string(),
    };
    let what = match r.answer {
        Some(Answer::Yes) => "ok".to_string(),
        Some(Answer::No) => "fail".to_string(),
        _ => "unknown (ok: null)".to_string(),
    };
    let mut detail = Vec::new();
    if let Some(e) = &r.error {
        detail.push(e.clone());
    }
    if let Some(v) = r.valid {
        detail.push(format!("valid: {v}"));
    }
    let detail = match detail.is_empty() {
        true => String::new(),
        false => format!(" ({})", detail.join(", ")),
    };
    format!("{what}{detail} in {} ms", took.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_is_waited_for_as_long_as_it_asks_and_then_some() {
        // The expiry step at the largest --ttl-ms: 3 leases of 60 s.
        let at_most = budget(&Op::Acquire {
            timeout_ms: 180_000,
        });
        assert_eq!(at_most, Duration::from_secs(185));
        let frozen_holder = budget(&Op::Acquire { timeout_ms: 63_000 });
        assert_eq!(frozen_holder, Duration::from_secs(68));
        // Never less than before, for a slow start.
        assert_eq!(budget(&Op::Acquire { timeout_ms: 300 }), BUDGET);
        assert_eq!(budget(&Op::Release), BUDGET);
        assert_eq!(budget(&Op::Check), BUDGET);
    }
}
