//! The client adapters lockstorm ships (`workloads/clients/<name>/`):
//! which there are and on which topologies, their files (built into the
//! binary, so it sets them up wherever it runs) and the environment each
//! family needs (a Python venv, `npm ci`), set up once per content in a
//! cache folder under a `flock`; and how to start an adapter ([`Prepared`]).

use crate::adapter::AdapterSpec;
use crate::config::Config;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Why the shipped adapters' environment could not be set up: what failed,
/// and in which folder.
#[derive(Debug)]
pub struct SetupFailed(pub String);

impl std::fmt::Display for SetupFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SetupFailed {}

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
pub const SHIPPED: [Shipped; 8] = [
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
        name: "portalocker",
        family: Family::Python,
        topologies: &["single"],
    },
    Shipped {
        name: "aioredlock",
        family: Family::Python,
        topologies: &["redlock", "single"],
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
    Shipped {
        name: "sesamecare-redlock",
        family: Family::Node,
        topologies: &["redlock", "single"],
    },
];

impl Shipped {
    pub fn find(name: &str) -> Option<&'static Shipped> {
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
        &[$(($path, include_str!(concat!("../clients/", $path)))),*]
    };
}

const PYTHON_FILES: &[(&str, &str)] = files![
    "python/requirements.txt",
    "python/protocol.py",
    "redis-py/adapter.py",
    "pottery/adapter.py",
    "python-redis-lock/adapter.py",
    "portalocker/adapter.py",
    "aioredlock/adapter.py",
];

const NODE_FILES: &[(&str, &str)] = files![
    "node/package.json",
    "node/package-lock.json",
    "node/protocol.js",
    "node/redlock.js",
    "node-redlock/adapter.js",
    "redis-semaphore/adapter.js",
    "sesamecare-redlock/adapter.js",
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
    fn set_up(self) -> Result<PathBuf, SetupFailed> {
        let dir = self.dir();
        if dir.join(".ready").exists() {
            return Ok(dir);
        }
        let failed = |what: String| SetupFailed(format!("{what} (in {})", dir.display()));
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

impl Shipped {
    /// Sets up its family's environment (once) and says how to start it.
    pub fn prepare(&self) -> Result<Prepared, SetupFailed> {
        let dir = self.family.set_up()?;
        let name = self.name;
        let path = |p: &str| dir.join(p).display().to_string();
        Ok(match self.family {
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
}

/// How to start a client's adapter: its command and environment, with the
/// shipped ones' environment set up first.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
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
            master: (config == Config::Replicated).then(|| crate::lock::PRIMARY_NAME.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
