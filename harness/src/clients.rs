//! Client adapters as the harness sees them: which one a run tests (a
//! shipped one by name, or the user's own command), the shipped ones'
//! files and the environment they need (a Python venv, `npm ci`), set up
//! once in a cache folder, and the check that an adapter starts and
//! answers `init` before any worker relies on it.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use store::ClientRecord;
use workloads::adapter::{self, AdapterSpec, Group, Hello};
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
        let argv: Vec<String> = cmd.split_whitespace().map(String::from).collect();
        match argv.is_empty() {
            true => Err("--client-cmd is empty: give the adapter's program and arguments".into()),
            false => Ok(Client::Cmd(argv)),
        }
    }

    /// Why this client cannot run on `config`, if it cannot.
    pub fn refusal(&self, config: Config) -> Option<String> {
        let Some(topology) = topology(config) else {
            return Some(format!(
                "--config {config} is a built-in lock; a client adapter brings its own: use --config single, replicated or redlock"
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

/// What a run, a matrix row and `expectations.toml` call a setup: `single`,
/// or `single.redis-py` for a client adapter on that topology.
pub fn setup_name(config: Config, client: Option<&Client>) -> String {
    match client {
        Some(client) => format!("{config}.{client}"),
        None => config.to_string(),
    }
}

/// Reads a [`setup_name`] back: the config and the shipped client.
pub fn parse_setup(name: &str) -> Result<(Config, Option<Client>), String> {
    let (config, client) = match name.split_once('.') {
        Some((c, client)) => (c, Some(Client::shipped(client)?)),
        None => (name, None),
    };
    Ok((config.parse()?, client))
}

/// The topology an adapter's `init` names for a config, if the config is a
/// topology and not a lock of lockstorm's own.
pub fn topology(config: Config) -> Option<&'static str> {
    match config {
        Config::Single => Some("single"),
        Config::Replicated => Some("replicated"),
        Config::Redlock => Some("redlock"),
        _ => None,
    }
}

/// The language an adapter is written in: one environment serves each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Python,
    Node,
}

/// A shipped adapter.
pub struct Shipped {
    pub name: &'static str,
    family: Family,
    /// The topologies it supports, the first the one to suggest.
    pub topologies: &'static [&'static str],
}

/// Every shipped adapter (`workloads/clients/<name>/`).
pub const SHIPPED: [Shipped; 5] = [
    Shipped {
        name: "redis-py",
        family: Family::Python,
        topologies: &["single", "replicated"],
    },
    Shipped {
        name: "pottery",
        family: Family::Python,
        topologies: &["redlock", "single"],
    },
    Shipped {
        name: "python-redis-lock",
        family: Family::Python,
        topologies: &["single"],
    },
    Shipped {
        name: "node-redlock",
        family: Family::Node,
        topologies: &["redlock", "single"],
    },
    Shipped {
        name: "redis-semaphore",
        family: Family::Node,
        topologies: &["single", "redlock"],
    },
];

impl Shipped {
    fn find(name: &str) -> Option<&'static Shipped> {
        SHIPPED.iter().find(|s| s.name == name)
    }

    pub fn names() -> String {
        SHIPPED.map(|s| s.name).join(", ")
    }
}

/// The shipped adapters' files, built into the binary so it sets them up
/// wherever it runs: (path under the cache folder, content).
macro_rules! files {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../../workloads/clients/", $path)))),*]
    };
}

const PYTHON_FILES: &[(&str, &str)] = files![
    "python/requirements.txt",
    "python/protocol.py",
    "redis-py/adapter.py",
    "pottery/adapter.py",
    "python-redis-lock/adapter.py",
];

const NODE_FILES: &[(&str, &str)] = files![
    "node/package.json",
    "node/package-lock.json",
    "node/protocol.js",
    "node-redlock/adapter.js",
    "redis-semaphore/adapter.js",
];

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Python => "python",
            Family::Node => "node",
        }
    }

    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Family::Python => PYTHON_FILES,
            Family::Node => NODE_FILES,
        }
    }

    /// The folder for this family's files and environment: named after
    /// their content, so a changed pin gets a fresh environment.
    fn dir(self) -> PathBuf {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a
        for (path, text) in self.files() {
            for b in path.bytes().chain(text.bytes()) {
                hash = (hash ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
        cache_root()
            .join("clients")
            .join(format!("{}-{hash:016x}", self.name()))
    }

    /// Writes the files and installs the environment, once: a `.ready`
    /// file marks a finished set-up, and a lock keeps concurrent runs from
    /// doing it twice.
    fn set_up(self) -> Result<PathBuf> {
        let dir = self.dir();
        if dir.join(".ready").exists() {
            return Ok(dir);
        }
        let failed = |what: String| Error::ClientSetup(format!("{what} (in {})", dir.display()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| failed(format!("cannot create the folder: {e}")))?;
        let lock = std::fs::File::create(dir.join(".lock"))
            .map_err(|e| failed(format!("cannot create its lock file: {e}")))?;
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| failed(format!("cannot lock it: {e}")))?;
        if dir.join(".ready").exists() {
            return Ok(dir);
        }
        let started = Instant::now();
        eprintln!(
            "lockstorm: setting up the {} client adapters in {} (once) …",
            self.name(),
            dir.display()
        );
        for (path, text) in self.files() {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().expect("under dir"))
                .and_then(|()| std::fs::write(&file, text))
                .map_err(|e| failed(format!("cannot write {path}: {e}")))?;
        }
        let steps: Vec<(Vec<String>, PathBuf)> = match self {
            Family::Python => {
                let venv = dir.join("python/venv");
                let pip = venv.join("bin/pip").display().to_string();
                vec![
                    (
                        vec![
                            python(),
                            "-m".into(),
                            "venv".into(),
                            venv.display().to_string(),
                        ],
                        dir.clone(),
                    ),
                    (
                        words(&[
                            &pip,
                            "install",
                            "--disable-pip-version-check",
                            "--no-input",
                            "-q",
                            "-r",
                            "python/requirements.txt",
                        ]),
                        dir.clone(),
                    ),
                ]
            }
            Family::Node => vec![(
                words(&[
                    "npm",
                    "ci",
                    "--omit=dev",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                ]),
                dir.join("node"),
            )],
        };
        for (argv, cwd) in steps {
            let out = Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(&cwd)
                .output()
                .map_err(|e| failed(format!("cannot run `{}`: {e}", argv.join(" "))))?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let last = stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                return Err(failed(format!(
                    "`{}` failed ({}): {last}",
                    argv.join(" "),
                    out.status
                )));
            }
        }
        std::fs::write(dir.join(".ready"), "")
            .map_err(|e| failed(format!("cannot mark it ready: {e}")))?;
        eprintln!(
            "lockstorm: the {} client adapters are ready ({:.0} s)",
            self.name(),
            started.elapsed().as_secs_f64()
        );
        Ok(dir)
    }
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// The Python that makes the venv: `LOCKSTORM_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("LOCKSTORM_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// `LOCKSTORM_CACHE`, else `$XDG_CACHE_HOME/lockstorm`, else `~/.cache/lockstorm`.
fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("LOCKSTORM_CACHE") {
        return dir.into();
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Path::new(&dir).join("lockstorm");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    Path::new(&home).join(".cache/lockstorm")
}

/// How to start a client's adapter: its command and environment, with the
/// shipped ones' environment set up first.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
}

pub fn prepare(client: &Client) -> Result<Prepared> {
    let name = match client {
        Client::Shipped(name) => name,
        Client::Cmd(argv) => {
            return Ok(Prepared {
                argv: argv.clone(),
                env: BTreeMap::new(),
            })
        }
    };
    let shipped = Shipped::find(name).expect("checked when parsed");
    let dir = shipped.family.set_up()?;
    let path = |p: &str| dir.join(p).display().to_string();
    Ok(match shipped.family {
        Family::Python => Prepared {
            argv: vec![
                path("python/venv/bin/python"),
                "-u".into(),
                path(&format!("{name}/adapter.py")),
            ],
            env: BTreeMap::from([
                ("PYTHONPATH".into(), path("python")),
                ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            ]),
        },
        Family::Node => Prepared {
            argv: vec!["node".into(), path(&format!("{name}/adapter.js"))],
            env: BTreeMap::from([("NODE_PATH".into(), path("node/node_modules"))]),
        },
    })
}

impl Prepared {
    /// The spec a worker starts its adapter from; its stderr goes to `stderr`.
    pub fn spec(&self, config: Config, stderr: PathBuf) -> AdapterSpec {
        AdapterSpec {
            argv: self.argv.clone(),
            env: self.env.clone(),
            cwd: std::env::current_dir().ok(),
            stderr,
            topology: topology(config).unwrap_or("single").into(),
            master: (config == Config::Replicated).then(|| workloads::lock::PRIMARY_NAME.into()),
        }
    }
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
) -> Result<Hello> {
    use std::sync::atomic::Ordering::SeqCst;
    // Python and Node take a moment to start; a library may dial every node.
    let started = adapter::start_noting(spec, init, Duration::from_secs(20), Group::Own, |pid| {
        leader.store(pid, SeqCst)
    });
    // Ours to stop from here on, whatever came of it.
    leader.store(0, SeqCst);
    let (session, hello) = started.map_err(|f| Error::Adapter(f.to_string()))?;
    let strays = session.close().strays;
    if !strays.is_empty() {
        tracing::warn!("the adapter check: {}", adapter::strays_left(&strays));
    }
    Ok(hello)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            err.contains("redis-py, pottery, python-redis-lock, node-redlock, redis-semaphore"),
            "{err}"
        );
        assert_eq!(Client::shipped("pottery").unwrap().to_string(), "pottery");
    }

    #[test]
    fn every_shipped_adapter_has_its_files_and_a_first_topology() {
        for s in &SHIPPED {
            let (dir, ext) = match s.family {
                Family::Python => ("python", "py"),
                Family::Node => ("node", "js"),
            };
            let files = s.family.files();
            let adapter = format!("{}/adapter.{ext}", s.name);
            assert!(
                files.iter().any(|(p, _)| *p == adapter),
                "{} lacks {adapter}",
                s.name
            );
            assert!(files.iter().any(|(p, _)| p.starts_with(dir)), "{}", s.name);
            assert!(!s.topologies.is_empty());
        }
        // The environment is named after the files: a changed pin is a new one.
        assert_ne!(Family::Python.dir(), Family::Node.dir());
    }
}
