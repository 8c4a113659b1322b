//! Client adapters as the harness sees them: which one a run tests (a
//! shipped one by name, or the user's own command), how to start it (a
//! shipped one is set up by `workloads::install`), what `run.json` says of
//! it, and the check that an adapter starts and answers `init` before any
//! worker relies on it.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use store::{ClientRecord, StorageAdapterRecord};
use workloads::adapter::{self, AdapterSpec, Group, Hello};
use workloads::install::{self, topology, How, Prepared, Shipped};
use workloads::storage::{AdapterStorage, StorageKind};
use workloads::Config;

/// The client a run tests through an adapter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    /// A shipped adapter, by name.
    Shipped(String),
    /// The user's own adapter: a program and its arguments.
    Cmd(Vec<String>),
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Client::Shipped(name) => f.write_str(name),
            Client::Cmd(_) => f.write_str("custom"),
        }
    }
}

impl Client {
    /// `--client NAME`: a shipped adapter, or the list of them.
    pub fn shipped(name: &str) -> std::result::Result<Client, String> {
        match Shipped::find(name) {
            Some(s) => Ok(Client::Shipped(s.name.into())),
            None => Err(format!(
                "unknown client '{name}': choose one of {}, or give your own with --client-cmd",
                Shipped::names()
            )),
        }
    }

    /// `--client-cmd "CMD ARGS"`: split at whitespace, run without a shell.
    pub fn command(cmd: &str) -> std::result::Result<Client, String> {
        words(cmd, "--client-cmd", "the adapter's").map(Client::Cmd)
    }

    /// The config `client-test` runs it on: one Redis node, or the
    /// ensemble for a shipped ZooKeeper client (a command is tested as a
    /// Redis client).
    pub fn tested_on(&self) -> Config {
        let shipped = match self {
            Client::Shipped(name) => Shipped::find(name),
            Client::Cmd(_) => None,
        };
        let runs_on = |config| {
            topology(config).is_some_and(|t| shipped.is_some_and(|s| s.topologies.contains(&t)))
        };
        match !runs_on(Config::Single) && runs_on(Config::Zookeeper) {
            true => Config::Zookeeper,
            false => Config::Single,
        }
    }

    /// Why this client cannot run on `config`, if it cannot.
    pub fn refusal(&self, config: Config) -> Option<String> {
        let Some(topology) = topology(config) else {
            return Some(format!(
                "--config {config} is a built-in lock; a client adapter brings its own: use --config single, replicated or redlock (etcd or zookeeper for a client of those)"
            ));
        };
        match self {
            Client::Shipped(name) => {
                let s = Shipped::find(name).expect("checked when parsed");
                (!s.topologies.contains(&topology)).then(|| {
                    format!(
                        "--client {name} runs on {}, not {topology}: use --config {}",
                        s.topologies.join(" or "),
                        s.topologies[0]
                    )
                })
            }
            Client::Cmd(_) => None,
        }
    }
}

/// An adapter's command as an option gives it: split at whitespace (it runs
/// without a shell), and not empty.
fn words(cmd: &str, option: &str, whose: &str) -> std::result::Result<Vec<String>, String> {
    let argv: Vec<String> = cmd.split_whitespace().map(String::from).collect();
    match argv.is_empty() {
        true => Err(format!(
            "{option} is empty: give {whose} program and arguments"
        )),
        false => Ok(argv),
    }
}

/// `--storage-cmd "CMD ARGS"`: the storage adapter that keeps the counter
/// (docs/protocol.md, "Storage adapters"), split and run as a client
/// adapter's command is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StorageCmd(pub Vec<String>);

impl StorageCmd {
    pub fn parse(cmd: &str) -> std::result::Result<StorageCmd, String> {
        words(cmd, "--storage-cmd", "the storage adapter's").map(StorageCmd)
    }

    /// How to start one instance, its stderr appended to `stderr`.
    pub fn spec(&self, stderr: std::path::PathBuf) -> Result<AdapterSpec> {
        refuse_a_script_without_interpreter(&self.0, "--storage-cmd")?;
        Ok(AdapterSpec {
            argv: self.0.clone(),
            env: BTreeMap::new(),
            cwd: std::env::current_dir().ok(),
            stderr,
            topology: String::new(),
            master: None,
            db: 0,
        })
    }
}

/// What run.json says of the storage adapter a run tested, from its `init`.
pub fn storage_record(spec: &AdapterSpec, storage: &str) -> StorageAdapterRecord {
    StorageAdapterRecord {
        command: spec.command(),
        storage: storage.into(),
    }
}

/// What a run, a matrix row and `expectations.toml` call a setup: `single`,
/// `single.redis-py` for a client adapter on that topology, and
/// `+postgres` after either when the counter lives in PostgreSQL though
/// the lock is not PostgreSQL's (`fenced+postgres`).
pub fn setup_name(config: Config, client: Option<&Client>, storage: StorageKind) -> String {
    setup_named(config, client.map(Client::to_string).as_deref(), storage)
}

/// [`setup_name`] with the client given by name (a `--client-cmd` run's
/// folder, named after its library).
pub fn setup_named(config: Config, client: Option<&str>, storage: StorageKind) -> String {
    let setup = match client {
        Some(client) => format!("{config}.{client}"),
        None => config.to_string(),
    };
    match config.storage() == Some(storage) || storage == StorageKind::default() {
        true => setup,
        false => format!("{setup}+{storage}"),
    }
}

/// Reads a [`setup_name`] back: the config, the client (a shipped one or
/// `custom`: the `--client-cmd` adapter, whose command is not in the name,
/// so this one carries none) and the storage.
pub fn parse_setup(name: &str) -> Result<(Config, Option<Client>, StorageKind), String> {
    let (name, storage) = match name.split_once('+') {
        Some((setup, storage)) => (setup, storage.parse()?),
        None => (name, StorageKind::default()),
    };
    let (config, client) = match name.split_once('.') {
        Some((c, "custom")) => (c, Some(Client::Cmd(Vec::new()))),
        Some((c, client)) => (c, Some(Client::shipped(client)?)),
        None => (name, None),
    };
    let config: Config = config.parse()?;
    Ok((config, client, config.storage().unwrap_or(storage)))
}

/// How to start a client's adapter: its command, or a shipped one's with
/// its environment set up first.
pub fn prepare(client: &Client) -> Result<Prepared> {
    Ok(match client {
        Client::Shipped(name) => Shipped::find(name)
            .expect("checked when parsed")
            .prepare()?,
        Client::Cmd(argv) => {
            refuse_a_script_without_interpreter(argv, "--client-cmd")?;
            Prepared {
                argv: argv.clone(),
                env: BTreeMap::new(),
            }
        }
    })
}

/// `lockstorm clients setup`: every family of shipped adapters set up, a
/// line for each saying where and how.
pub fn set_up_all() -> Result<String> {
    let mut text = String::new();
    for done in install::set_up_all()? {
        let (family, dir) = (done.family, done.dir.display());
        text.push_str(&match done.how {
            How::Installed(took) => format!(
                "{family}: installed in {dir} ({:.0} s)\n",
                took.as_secs_f64()
            ),
            How::Already => format!("{family}: ready in {dir} (installed earlier)\n"),
            How::Prepared { variable, path } => format!(
                "{family}: {variable}={} has the pinned packages (adapter files in {dir})\n",
                path.display()
            ),
        });
    }
    Ok(text)
}

/// A script named as the program, with no `#!` line, would be run by the
/// shell (`execvp` falls back to `/bin/sh` for a file it cannot execute),
/// and the user would see the shell's syntax errors about their Python or
/// JavaScript: refuse it first, in one line that says how to fix it.
fn refuse_a_script_without_interpreter(argv: &[String], option: &str) -> Result<()> {
    let Some(program) = argv.first().filter(|p| p.contains('/')) else {
        return Ok(());
    };
    let mut start = [0u8; 4];
    let read = std::fs::File::open(program).and_then(|mut f| {
        use std::io::Read;
        f.read(&mut start)
    });
    match read {
        Ok(n) if !runs_itself(&start[..n]) => Err(Error::Adapter(format!(
            "{program} has no #! line, so it would run as a shell script: add one such as `#!/usr/bin/env python3` (or `#!/usr/bin/env node`) as its first line, or name the interpreter: {option} \"python3 {program}\""
        ))),
        // Not readable, or a program: starting it says what is wrong.
        _ => Ok(()),
    }
}

/// Whether a file that starts with `start` runs by itself: a `#!` script
/// or an ELF binary.
fn runs_itself(start: &[u8]) -> bool {
    start.starts_with(b"#!") || start.starts_with(b"\x7fELF")
}

/// What run.json says of the client a run tested, from the adapter's
/// `init` answer.
pub fn record(client: &Client, spec: &AdapterSpec, hello: &Hello) -> ClientRecord {
    let check = match hello.has("check") {
        true => "the library's own view (op check) before each write",
        false => "none: the library offers no check, so the worker treats every hold as valid",
    };
    ClientRecord {
        name: client.to_string(),
        command: spec.command(),
        library: hello.client.clone(),
        features: hello.features.clone(),
        check: check.into(),
        options: hello.options.clone(),
        key: hello.key.clone(),
    }
}

/// Starts the adapter once and has it `init` against the running topology,
/// so a broken adapter is one clear error before any worker starts.
///
/// `leader` holds the adapter's group while it runs (0 before and after),
/// so a run interrupted meanwhile can stop the adapter and its children.
pub fn preflight(
    spec: &AdapterSpec,
    init: adapter::Init,
    leader: &std::sync::atomic::AtomicU32,
    held: Option<&dyn Fn() -> std::result::Result<(), String>>,
) -> Result<Hello> {
    use std::sync::atomic::Ordering::SeqCst;
    let acquire_ms = init.acquire_timeout_ms;
    let started = adapter::start_noting(spec, init, adapter::INIT_BUDGET, Group::Own, |pid| {
        leader.store(pid, SeqCst)
    });
    let (mut session, hello) = match started {
        Ok(started) => started,
        Err(f) => {
            leader.store(0, SeqCst);
            return Err(Error::Adapter(f.to_string()));
        }
    };
    // `held` looks at the lock while the adapter holds it (one acquire and
    // its release, before any worker starts).
    let looked = held.map(|held| hold_once(&mut session, acquire_ms, held));
    // Ours to stop from here on, whatever came of it.
    leader.store(0, SeqCst);
    let strays = session.close().strays;
    if let Some(Err(why)) = looked {
        return Err(Error::Usage(format!(
            "the adapter `{}` {why}",
            spec.command()
        )));
    }
    if !strays.is_empty() {
        tracing::warn!("the adapter check: {}", adapter::strays_left(&strays));
    }
    Ok(hello)
}

/// One acquire, `held` while it is held, and the release: why not, if not.
fn hold_once(
    session: &mut adapter::Session,
    acquire_ms: u64,
    held: &dyn Fn() -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let budget = std::time::Duration::from_millis(acquire_ms) + adapter::INIT_BUDGET;
    let reply = session.call(
        adapter::Op::Acquire {
            timeout_ms: acquire_ms,
        },
        budget,
        |_| {},
    );
    match reply {
        Ok(r) if r.answer == Some(adapter::Answer::Yes) => {}
        Ok(r) => {
            return Err(format!(
                "was not granted the free lock before the run: {:?}",
                r.error
            ))
        }
        Err(f) => return Err(format!("failed its first acquire before the run: {f}")),
    }
    let seen = held();
    let _ = session.call(adapter::Op::Release, budget, |_| {});
    seen
}

/// The harness's own instance of the storage adapter, started in a group of
/// its own twice: to `reset` the counter before any worker starts, and
/// afresh for the final read, each closed when done (one kept for the whole
/// run would die with the thread that started it: its parent-death signal
/// follows that thread).
#[derive(Clone)]
pub struct HarnessStorage {
    pub spec: AdapterSpec,
    pub init: adapter::StorageInit,
    pub op_timeout: std::time::Duration,
    /// Why it broke the protocol at the final read, should it.
    pub broken: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl HarnessStorage {
    fn start(&self) -> std::result::Result<AdapterStorage, adapter::Failure> {
        let broken = self.broken.clone();
        let give_up = std::sync::Arc::new(move |why: String| {
            tracing::error!("the storage adapter broke the protocol: {why}");
            *broken.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        });
        let warn =
            std::sync::Arc::new(|warning: String| tracing::warn!("the storage adapter: {warning}"));
        let init = self.init.clone();
        AdapterStorage::start(&self.spec, init, self.op_timeout, Group::Own, give_up, warn)
    }

    /// Has it `reset` the counter: the storage its `init` named, or why not
    /// (one that cannot start, `init` or `reset` is one clear error, exit 254).
    pub fn reset(&self) -> Result<String> {
        let mut storage = self
            .start()
            .map_err(|f| Error::Adapter(format!("the storage adapter: {f}")))?;
        match storage.reset() {
            workloads::Outcome::Ok(()) => Ok(storage.storage().to_string()),
            workloads::Outcome::Fail(e) | workloads::Outcome::Info(e) => {
                Err(Error::Adapter(format!(
                    "the storage adapter `{}` did not reset the counter: {e}{}",
                    self.spec.command(),
                    self.spec.stderr_tail()
                )))
            }
        }
    }

    /// The final read, unfenced; one that cannot start leaves it unknown
    /// (and, if it broke the protocol, says so in `broken`).
    pub fn read(&self) -> workloads::Outcome<i64> {
        use workloads::storage::Storage;
        match self.start() {
            Ok(mut storage) => storage.read(None),
            Err(f) => {
                if let adapter::Failure::Broken(why) | adapter::Failure::Unstartable(why) = &f {
                    *self.broken.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                }
                workloads::Outcome::Info(format!("{}: {f}", checker::history::error::ADAPTER))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_name_reads_back_with_its_client_and_its_storage() {
        use StorageKind::{Postgres, Redis};
        let redis_py = Client::shipped("redis-py").unwrap();
        let setups = [
            (Config::Single, None, Redis, "single"),
            (Config::Fenced, None, Postgres, "fenced+postgres"),
            (Config::PgRowLock, None, Postgres, "pg-row-lock"),
            (
                Config::Single,
                Some(redis_py.clone()),
                Redis,
                "single.redis-py",
            ),
            (
                Config::Single,
                Some(redis_py),
                Postgres,
                "single.redis-py+postgres",
            ),
        ];
        for (config, client, storage, name) in setups {
            assert_eq!(setup_name(config, client.as_ref(), storage), name);
            assert_eq!(parse_setup(name), Ok((config, client, storage)), "{name}");
        }
        assert!(parse_setup("fenced+mysql")
            .unwrap_err()
            .contains("postgres"));
    }

    #[test]
    fn only_a_script_with_its_interpreter_or_a_binary_runs_itself() {
        assert!(runs_itself(b"#!/usr/bin/env python3"));
        assert!(runs_itself(b"\x7fELF"));
        assert!(!runs_itself(b"import sys"));
        assert!(!runs_itself(b""));
    }

    /// `store` reads the feature from run.json; the adapter protocol
    /// accepts it: one name, which neither crate can take from the other.
    #[test]
    fn the_no_ttl_feature_run_json_reads_is_one_the_protocol_accepts() {
        assert!(workloads::adapter::protocol::FEATURES.contains(&store::NO_TTL));
    }

    #[test]
    fn a_command_is_split_into_words_and_a_shipped_name_is_checked() {
        let cmd = Client::command("  python3   my_adapter.py --fast ").unwrap();
        assert_eq!(
            cmd,
            Client::Cmd(vec![
                "python3".into(),
                "my_adapter.py".into(),
                "--fast".into()
            ])
        );
        assert_eq!(cmd.to_string(), "custom");
        assert!(Client::command(" ").unwrap_err().contains("empty"));
        let err = Client::shipped("redlock").unwrap_err();
        assert!(
            err.contains("redis-py, pottery, python-redis-lock, portalocker, aioredlock, kazoo, curator, node-redlock, redis-semaphore, sesamecare-redlock"),
            "{err}"
        );
        assert_eq!(Client::shipped("pottery").unwrap().to_string(), "pottery");
    }
}
