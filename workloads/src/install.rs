//! The client adapters lockstorm ships (`workloads/clients/<name>/`):
//! which there are and on which topologies, their files (built into the
//! binary, so it sets them up wherever it runs) and the environment each
//! family needs (a Python venv, `npm ci`), set up once per content in a
//! cache folder under a `flock`, or one the user prepared
//! (`LOCKSTORM_PYTHON`, `LOCKSTORM_NODE_MODULES`); and how to start an
//! adapter ([`Prepared`]).

mod prepared;
mod step;

use crate::adapter::{AdapterSpec, ETCD, ZOOKEEPER};
use crate::config::Config;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why the shipped adapters' environment could not be set up, in one line.
#[derive(Debug)]
pub struct SetupFailed {
    pub message: String,
    /// The user's to fix (no registry within reach, a prepared environment
    /// that lacks a pin, too slow a link), and the message says how; else
    /// lockstorm's own set-up failed.
    pub theirs: bool,
}

impl SetupFailed {
    fn theirs(message: String) -> SetupFailed {
        SetupFailed {
            message,
            theirs: true,
        }
    }

    fn ours(message: String) -> SetupFailed {
        SetupFailed {
            message,
            theirs: false,
        }
    }
}

impl std::fmt::Display for SetupFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SetupFailed {}

/// The topology an adapter's `init` names for a config, if the config is a
/// topology and not a lock of lockstorm's own.
pub fn topology(config: Config) -> Option<&'static str> {
    match config {
        Config::Single => Some("single"),
        Config::Replicated => Some("replicated"),
        Config::Cluster => Some("cluster"),
        Config::Redlock => Some("redlock"),
        Config::Etcd => Some(ETCD),
        Config::Zookeeper => Some(ZOOKEEPER),
        _ => None,
    }
}

/// The language an adapter is written in: one environment serves each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Python,
    Node,
    /// Compiled with `javac` against Debian's jars at set-up: no registry.
    Java,
}

/// Curator's recipes jar, whose manifest names the jars it needs (the
/// framework, the client, ZooKeeper's, Guava): Debian's
/// `libcurator-recipes-java`.
const CURATOR_JAR: &str = "/usr/share/java/curator-recipes.jar";

/// A shipped adapter.
pub struct Shipped {
    pub name: &'static str,
    family: Family,
    /// The topologies it supports, the first the one to suggest.
    pub topologies: &'static [&'static str],
}

/// Every shipped adapter (`workloads/clients/<name>/`).
pub const SHIPPED: [Shipped; 10] = [
    Shipped {
        name: "redis-py",
        family: Family::Python,
        topologies: &["single", "replicated", "cluster"],
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
        name: "kazoo",
        family: Family::Python,
        topologies: &["zookeeper"],
    },
    Shipped {
        name: "curator",
        family: Family::Java,
        topologies: &["zookeeper"],
    },
    Shipped {
        name: "node-redlock",
        family: Family::Node,
        topologies: &["redlock", "single", "cluster"],
    },
    Shipped {
        name: "redis-semaphore",
        family: Family::Node,
        topologies: &["single", "redlock", "cluster"],
    },
    Shipped {
        name: "sesamecare-redlock",
        family: Family::Node,
        topologies: &["redlock", "single", "cluster"],
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
    "kazoo/adapter.py",
];

const JAVA_FILES: &[(&str, &str)] = files!["java/Protocol.java", "curator/Adapter.java"];

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
            Family::Java => "java",
        }
    }

    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Family::Python => PYTHON_FILES,
            Family::Node => NODE_FILES,
            Family::Java => JAVA_FILES,
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

    /// The environment the user prepared for this family, if they named
    /// one: the variable that names it, and where it is. Java's has none
    /// (its jars are Debian's).
    fn prepared(self) -> Option<(&'static str, PathBuf)> {
        match self {
            Family::Python => prepared::python().map(|p| ("LOCKSTORM_PYTHON", p)),
            Family::Node => prepared::node_modules().map(|p| ("LOCKSTORM_NODE_MODULES", p)),
            Family::Java => None,
        }
    }

    /// Writes the files and installs the environment, once: a `.ready`
    /// file marks a finished set-up, and a lock keeps concurrent runs from
    /// doing it twice. With an environment the user prepared, only the
    /// files are written and it is checked against the pins instead.
    fn set_up(self) -> Result<SetUp, SetupFailed> {
        let dir = self.dir();
        let prepared = self.prepared();
        let done = |how| SetUp {
            family: self.name(),
            dir: dir.clone(),
            how,
        };
        if prepared.is_none() && dir.join(".ready").exists() {
            return Ok(done(How::Already));
        }
        let failed = |what: String| SetupFailed::ours(format!("{what} (in {})", dir.display()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| failed(format!("cannot create the folder: {e}")))?;
        let lock = std::fs::File::create(dir.join(".lock"))
            .map_err(|e| failed(format!("cannot create its lock file: {e}")))?;
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| failed(format!("cannot lock it: {e}")))?;
        self.write_files(&dir).map_err(failed)?;
        if let Some((variable, env)) = prepared {
            self.check(&env, &dir)?;
            return Ok(done(How::Prepared {
                variable,
                path: env,
            }));
        }
        if dir.join(".ready").exists() {
            return Ok(done(How::Already));
        }
        let started = Instant::now();
        eprintln!(
            "lockstorm: setting up the {} client adapters in {} (once) …",
            self.name(),
            dir.display()
        );
        let log = dir.join("setup.log");
        let _ = std::fs::remove_file(&log);
        let deadline = step::deadline();
        for (argv, cwd) in self.steps(&dir) {
            step::run(&argv, &cwd, &log, deadline).map_err(|f| {
                let mut e = step::told(f, || self.registry(&dir), &self.way_out());
                e.message
                    .push_str(&format!(" (its output: {})", log.display()));
                e
            })?;
        }
        std::fs::write(dir.join(".ready"), "")
            .map_err(|e| failed(format!("cannot mark it ready: {e}")))?;
        let took = started.elapsed();
        eprintln!(
            "lockstorm: the {} client adapters are ready ({:.0} s)",
            self.name(),
            took.as_secs_f64()
        );
        Ok(done(How::Installed(took)))
    }

    /// Writes the family's files where they differ (a running adapter may
    /// be reading the ones already there).
    fn write_files(self, dir: &Path) -> Result<(), String> {
        for (path, text) in self.files() {
            let file = dir.join(path);
            if std::fs::read_to_string(&file).is_ok_and(|t| t == *text) {
                continue;
            }
            std::fs::create_dir_all(file.parent().expect("under dir"))
                .and_then(|()| std::fs::write(&file, text))
                .map_err(|e| format!("cannot write {path}: {e}"))?;
        }
        Ok(())
    }

    /// The commands that install the environment, each with its folder.
    /// The tools' own retries are bounded so that a registry out of reach
    /// fails in seconds to tens of seconds, not minutes (npm's defaults
    /// wait 10 s, then 60 s, between tries of each request; pip tries five
    /// times): one retry, each try given 15 s (pip: per socket read) or
    /// 20 s (npm: per request).
    fn steps(self, dir: &Path) -> Vec<(Vec<String>, PathBuf)> {
        match self {
            Family::Python => {
                let venv = dir.join("python/venv");
                let pip = venv.join("bin/pip").display().to_string();
                vec![
                    (
                        words(&["python3", "-m", "venv", &venv.display().to_string()]),
                        dir.to_path_buf(),
                    ),
                    (
                        words(&[
                            &pip,
                            "install",
                            "--disable-pip-version-check",
                            "--no-input",
                            "--timeout",
                            "15",
                            "--retries",
                            "1",
                            "-r",
                            "python/requirements.txt",
                        ]),
                        dir.to_path_buf(),
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
                    "--fetch-retries=1",
                    "--fetch-retry-mintimeout=1000",
                    "--fetch-retry-maxtimeout=5000",
                    "--fetch-timeout=20000",
                ]),
                dir.join("node"),
            )],
            // Each adapter into its own classes folder, with the helper.
            Family::Java => SHIPPED
                .iter()
                .filter(|s| s.family == Family::Java)
                .map(|s| {
                    let classes = format!("{}/classes", s.name);
                    let adapter = format!("{}/Adapter.java", s.name);
                    let argv = ["javac", "-d", &classes, "-cp", CURATOR_JAR];
                    (
                        words(&[&argv[..], &["java/Protocol.java", &adapter]].concat()),
                        dir.to_path_buf(),
                    )
                })
                .collect(),
        }
    }

    /// The registry the family's tool fetches from, as it was configured.
    fn registry(self, dir: &Path) -> String {
        match self {
            // pip names its index when it is not PyPI's.
            Family::Python => std::fs::read_to_string(dir.join("setup.log"))
                .ok()
                .and_then(|log| {
                    log.lines()
                        .find_map(|l| l.strip_prefix("Looking in indexes: "))
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "https://pypi.org/simple".into()),
            Family::Node => {
                let asked = process::output_within(
                    std::process::Command::new("npm")
                        .args(["config", "get", "registry"])
                        .current_dir(dir.join("node")),
                    std::time::Duration::from_secs(30),
                );
                match asked {
                    Ok(out) if out.status.success() => {
                        String::from_utf8_lossy(&out.stdout).trim().to_string()
                    }
                    _ => "(npm's registry)".into(),
                }
            }
            Family::Java => "none (Debian's jars, compiled here)".into(),
        }
    }

    /// What to do where the registry cannot be reached.
    fn way_out(self) -> String {
        let prepared = match self {
            Family::Python => "LOCKSTORM_PYTHON to a Python that has the pinned packages",
            Family::Node => {
                "LOCKSTORM_NODE_MODULES to a node_modules folder that has the pinned packages"
            }
            Family::Java => {
                return format!(
                    "install javac and Curator's jars ({CURATOR_JAR}): apt-get install -y default-jdk-headless libcurator-recipes-java"
                )
            }
        };
        format!(
            "run `lockstorm clients setup` where it can be (e.g. when building a CI image) with the same LOCKSTORM_CACHE, or set {prepared}"
        )
    }

    /// Checks an environment the user prepared against the pins.
    fn check(self, env: &Path, dir: &Path) -> Result<(), SetupFailed> {
        match self {
            Family::Python => prepared::check_python(env, &dir.join("python/requirements.txt")),
            Family::Java => Ok(()),
            Family::Node => {
                let (path, lock) = NODE_FILES
                    .iter()
                    .find(|(p, _)| p.ends_with("package-lock.json"))
                    .expect("the Node adapters have a lockfile");
                prepared::check_node_modules(env, lock, &dir.join(path))
            }
        }
    }
}

/// A family set up: where, and how.
pub struct SetUp {
    pub family: &'static str,
    pub dir: PathBuf,
    pub how: How,
}

pub enum How {
    /// Installed now, taking this long.
    Installed(Duration),
    /// Installed by an earlier run.
    Already,
    /// The user's own environment, named by this variable
    /// (`LOCKSTORM_PYTHON`, `LOCKSTORM_NODE_MODULES`) and checked against
    /// the pins.
    Prepared {
        variable: &'static str,
        path: PathBuf,
    },
}

/// Sets up every family of shipped adapters (`lockstorm clients setup`),
/// stopping at the first that fails.
pub fn set_up_all() -> Result<Vec<SetUp>, SetupFailed> {
    [Family::Python, Family::Node, Family::Java]
        .into_iter()
        .map(Family::set_up)
        .collect()
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
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
        let set_up = self.family.set_up()?;
        let dir = &set_up.dir;
        let name = self.name;
        let path = |p: &str| dir.join(p).display().to_string();
        let prepared = match set_up.how {
            How::Prepared { path, .. } => Some(path.display().to_string()),
            How::Installed(_) | How::Already => None,
        };
        Ok(match self.family {
            Family::Python => Prepared {
                argv: vec![
                    prepared.unwrap_or_else(|| path("python/venv/bin/python")),
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
                env: BTreeMap::from([(
                    "NODE_PATH".into(),
                    prepared.unwrap_or_else(|| path("node/node_modules")),
                )]),
            },
            // A small heap and the quick compiler: five JVMs start in
            // seconds on two cores.
            Family::Java => Prepared {
                argv: words(&[
                    "java",
                    "-Xmx128m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",
                    "-cp",
                    &format!("{}:{CURATOR_JAR}", path(&format!("{name}/classes"))),
                    "Adapter",
                ]),
                env: BTreeMap::new(),
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
            db: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_adapter_has_its_files_and_a_first_topology() {
        for s in &SHIPPED {
            let (dir, file) = match s.family {
                Family::Python => ("python", "adapter.py"),
                Family::Node => ("node", "adapter.js"),
                Family::Java => ("java", "Adapter.java"),
            };
            let files = s.family.files();
            let adapter = format!("{}/{file}", s.name);
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
