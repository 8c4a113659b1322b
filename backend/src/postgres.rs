//! A PostgreSQL server as a node: the storage of `--storage postgres`, and
//! the lock of the configs that lock with the database. Like a Redis node it
//! has its own loopback address and port, its own folder in the run and its
//! log there, and it is killed as a process group, after an immediate
//! shutdown ([`Stop::Quit`]); its kill, restart and removal are every
//! [`Server`]'s. Its data folder is a copy of a template `initdb` makes
//! once per machine and version (a copy costs a tenth of an `initdb`).
//! PostgreSQL refuses to run as root: when lockstorm runs as root, the
//! server runs as the `postgres` user.

use crate::error::{doing, Error, Result};
use crate::provision::{Found, Launch, Program, Provisioner};
use crate::reaper::DataFolder;
use crate::server::{Kind, Managed, Server, Stop};
use nemesis::cluster::BoxFuture;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The Docker backend's image of a server (`lockstorm image import`).
pub const IMAGE: &str = "lockstorm/postgres:local";
use crate::PROBE_WITHIN;
/// `initdb` takes a few seconds; far longer, it hangs.
const INITDB_WITHIN: Duration = Duration::from_secs(120);
/// Where `LOCKSTORM_POSTGRES_BIN` points: the folder of `postgres` and `initdb`.
const BIN_ENV: &str = "LOCKSTORM_POSTGRES_BIN";
/// The unprivileged user the server runs as when lockstorm runs as root.
const SERVER_USER: &str = "postgres";
/// The time zone the template names (initdb's `TZ`): the one zone file a
/// Docker node's image holds (see `docker::image`), in every tz database.
pub const POSTGRES_TIMEZONE: &str = "UTC";

/// PostgreSQL's programs on this machine.
#[derive(Clone, Debug)]
pub struct Programs {
    bin: PathBuf,
}

impl Programs {
    /// `$LOCKSTORM_POSTGRES_BIN`, else the folder of `postgres` on PATH,
    /// else Debian's newest `/usr/lib/postgresql/<version>/bin`.
    pub fn find() -> Result<Self> {
        let missing = |looked: String| Error::MissingProgram {
            program: "postgres",
            package: "postgresql",
            env: BIN_ENV,
            looked,
        };
        if let Some(dir) = std::env::var_os(BIN_ENV) {
            let bin = PathBuf::from(dir);
            return match bin.join("postgres").is_file() {
                true => Ok(Programs { bin }),
                false => Err(missing(format!(
                    "{BIN_ENV}={} has no postgres",
                    bin.display()
                ))),
            };
        }
        let on_path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .find(|dir| dir.join("postgres").is_file() && dir.join("initdb").is_file());
        let debian = || {
            let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
                .ok()?
                .flatten()
                .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
                .filter(|(_, p): &(u32, PathBuf)| p.join("bin/postgres").is_file())
                .collect();
            versions.sort();
            versions.pop().map(|(_, p)| p.join("bin"))
        };
        on_path
            .or_else(debian)
            .map(|bin| Programs { bin })
            .ok_or_else(|| missing("not on PATH nor in /usr/lib/postgresql/*/bin".into()))
    }

    pub fn server(&self) -> PathBuf {
        self.bin.join("postgres")
    }

    /// `postgres --version`, for `run.json`.
    pub fn version(&self) -> String {
        self.answered_version()
            .unwrap_or_else(|e| format!("unknown ({e})"))
    }

    /// `postgres --version`, or why it gave none: it did not start, hung
    /// past [`PROBE_WITHIN`] (and was killed), or said no version.
    /// Asked once per program: a hung one costs its deadline once.
    fn answered_version(&self) -> std::result::Result<String, String> {
        type Answers = std::collections::HashMap<PathBuf, std::result::Result<String, String>>;
        static ANSWERS: std::sync::Mutex<Option<Answers>> = std::sync::Mutex::new(None);
        let server = self.server();
        let mut answers = ANSWERS.lock().unwrap_or_else(|e| e.into_inner());
        let answers = answers.get_or_insert_with(Default::default);
        if let Some(answer) = answers.get(&server) {
            return answer.clone();
        }
        let answer = process::output_within(Command::new(&server).arg("--version"), PROBE_WITHIN)
            .map_err(|e| e.to_string())
            .and_then(|out| {
                let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
                match out.status.success() && said.contains("PostgreSQL") {
                    true => Ok(said),
                    false => Err(format!("it said {said:?} ({})", out.status)),
                }
            });
        answers.insert(server, answer.clone());
        answer
    }

    /// The data folder every server starts from, made by `initdb` the first
    /// time (by the server's user), and shared by later runs. Made aside
    /// and renamed into place, so runs starting together never see half of
    /// one.
    fn template(&self, user: Option<(u32, u32)>) -> Result<PathBuf> {
        // `postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)`: 15.18.
        let version = self.answered_version().map_err(|e| {
            Error::Usage(format!(
                "{} --version: {e}; set {BIN_ENV} to the folder of a working PostgreSQL",
                self.server().display()
            ))
        })?;
        let number = version
            .split_whitespace()
            .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
            .unwrap_or("unknown");
        // The template's shape is in its name: a new shape, a new template.
        let tag = format!("template-{number}-2");
        let euid = nix::unistd::geteuid();
        let root = std::env::temp_dir().join(format!("lockstorm-postgres-{euid}"));
        let template = root.join(tag);
        if template.join("PG_VERSION").is_file() {
            return Ok(template);
        }
        std::fs::create_dir_all(&root).map_err(doing(format!("creating {}", root.display())))?;
        // The server's user must reach the template to copy it.
        set_mode(&root, 0o755)?;
        let aside = root.join(format!("template.{}.tmp", std::process::id()));
        let _ = std::fs::remove_dir_all(&aside);
        let mut initdb = Command::new(self.bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&aside)
            .args(["-A", "trust", "-U", workloads::pg::USER])
            .args(["-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"])
            // 1 MB WAL segments, not 16: a copy per run carries one.
            .arg("--wal-segsize=1")
            // The zone in its postgresql.conf (checked at every start): the
            // one a Docker node's image holds, not this machine's.
            .env("TZ", POSTGRES_TIMEZONE);
        if let Some((uid, gid)) = user {
            // initdb creates the folder as the user, so its parent is theirs.
            std::fs::create_dir_all(&aside)
                .map_err(doing(format!("creating {}", aside.display())))?;
            chown(&aside, uid, gid)?;
            use std::os::unix::process::CommandExt;
            initdb.uid(uid).gid(gid);
        }
        let out = process::output_within(&mut initdb, INITDB_WITHIN).map_err(|e| {
            let _ = std::fs::remove_dir_all(&aside);
            Error::Usage(format!(
                "running {}: {e}",
                self.bin.join("initdb").display()
            ))
        })?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&aside);
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.lines().rev().find(|l| !l.trim().is_empty());
            return Err(Error::Usage(format!(
                "initdb failed ({}): {}",
                out.status,
                said.unwrap_or("it said nothing")
            )));
        }
        if let Err(e) = self.slim(&aside, user) {
            let _ = std::fs::remove_dir_all(&aside);
            return Err(e);
        }
        // Another run may have put its template in place first: keep that one.
        if std::fs::rename(&aside, &template).is_err() {
            let _ = std::fs::remove_dir_all(&aside);
        }
        Ok(template)
    }
}

impl Programs {
    /// Starts a server on the new template `data` (as `user`), leaves it
    /// one database ([`workloads::pg::slim_cluster`]), and stops it.
    fn slim(&self, data: &Path, user: Option<(u32, u32)>) -> Result<()> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| Ok(l.local_addr()?.port()))
            .map_err(doing("finding a free port on 127.0.0.1".into()))?;
        let mut server = Command::new(self.server());
        server
            .arg("-D")
            .arg(data)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .args(["-c", &format!("port={port}")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some((uid, gid)) = user {
            use std::os::unix::process::CommandExt;
            server.uid(uid).gid(gid);
        }
        process::isolate(&mut server);
        let child = server
            .spawn()
            .map_err(doing(format!("starting {}", self.server().display())))?;
        let addr = format!("127.0.0.1:{port}");
        let slimmed = workloads::pg::slim_cluster(&addr, READY_TIMEOUT);
        // SIGINT: a fast shutdown, which checkpoints what was done.
        let _ = process::interrupt(child.id());
        let stopped = child.wait_with_output();
        match (slimmed, stopped) {
            (Ok(()), Ok(out)) if out.status.success() => Ok(()),
            (slimmed, stopped) => Err(Error::Usage(format!(
                "preparing the PostgreSQL template in {} failed: {slimmed:?}, {}",
                data.display(),
                stopped.map_or_else(
                    |e| e.to_string(),
                    |o| String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .last()
                        .unwrap_or("")
                        .to_string()
                )
            ))),
        }
    }
}

/// The user the server runs as: the `postgres` user when lockstorm runs as
/// root, else lockstorm's own (`None`).
fn server_user() -> Result<Option<(u32, u32)>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    match nix::unistd::User::from_name(SERVER_USER) {
        Ok(Some(u)) => Ok(Some((u.uid.as_raw(), u.gid.as_raw()))),
        _ => Err(Error::Usage(format!(
            "PostgreSQL refuses to run as root, and there is no user {SERVER_USER} to run it as: install PostgreSQL with `apt-get install -y postgresql` (it makes one), or run lockstorm as another user"
        ))),
    }
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(doing(format!("giving {} to uid {uid}", path.display())))
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(doing(format!("setting the mode of {}", path.display())))
}

/// Whether `user` may walk down to `dir` (every folder above it must let
/// them through). Pure but for the `stat`s.
fn reachable(dir: &Path, (uid, gid): (u32, u32)) -> bool {
    use std::os::unix::fs::MetadataExt;
    dir.ancestors().skip(1).all(|a| {
        let Ok(m) = std::fs::metadata(a) else {
            return false;
        };
        let mode = m.mode();
        match (m.uid() == uid, m.gid() == gid) {
            (true, _) => mode & 0o100 != 0,
            (_, true) => mode & 0o010 != 0,
            _ => mode & 0o001 != 0,
        }
    })
}

/// A running PostgreSQL server. Its identity is
/// `pg_postmaster_start_time()` of our process when it became ready: a
/// restarted server answers with a new one.
pub struct PostgresNode {
    core: Managed,
    /// `postgres`, found here and in its own image; asked to shut down
    /// (its shared memory goes with it only then).
    program: Found,
    /// Its data folder: `data` in its folder, or beside the template when
    /// the server's user cannot reach the run's folder (removed at the
    /// end, as the core's data folder).
    data: PathBuf,
    /// The user's `-c` settings, after lockstorm's own.
    settings: Vec<(String, String)>,
}

impl PostgresNode {
    /// Starts a server on a free port of `ip`, gives it lockstorm's schema,
    /// and returns once it answers as ours.
    pub async fn start(
        name: &str,
        ip: Ipv4Addr,
        settings: &[(String, String)],
        nodes_dir: &Path,
        backend: Arc<dyn Provisioner>,
    ) -> Result<Self> {
        let programs = Programs::find()?;
        let program = Found {
            path: programs.server(),
            image: Some((IMAGE, "PostgreSQL; apt-get install -y postgresql")),
            quits: true,
        };
        let user = server_user()?;
        let mut core = Managed::new(name, ip, nodes_dir)?;
        core.stop = Stop::Quit;
        let dir = core.dir.clone();
        let template = tokio::task::spawn_blocking(move || programs.template(user))
            .await
            .map_err(|e| Error::Usage(format!("making the PostgreSQL template: {e}")))??;
        let data = match user {
            Some(user) if !reachable(&dir, user) => template
                .parent()
                .expect("the template has a parent")
                .join(format!("data-{}-{name}", std::process::id())),
            _ => dir.join("data"),
        };
        let _ = std::fs::remove_dir_all(&data);
        let copied = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(&data)
            .status()
            .map_err(doing(format!("copying {}", template.display())))?;
        if !copied.success() {
            return Err(Error::Usage(format!(
                "copying the PostgreSQL template {} to {} failed ({copied})",
                template.display(),
                data.display()
            )));
        }
        if let Some((uid, gid)) = user {
            chown(&dir, uid, gid)?;
        }
        // Removes the data folder if the harness dies without doing it.
        core.data = Some(DataFolder::reaped(
            "postgres",
            &data,
            &data.join("postmaster.pid"),
        )?);
        let mut node = PostgresNode {
            core,
            program,
            data,
            settings: settings.to_vec(),
        };
        let mut last = None;
        for _ in 0..5 {
            node.core.port = crate::server::free_port(ip)?;
            let launch = node.launch_spec(user);
            node.core.process = Some(backend.launch(launch).await?);
            match node.ready().await {
                Ok(()) => {
                    let addr = node.addr();
                    let schema = tokio::task::spawn_blocking(move || {
                        workloads::pg::create_schema(&addr, Duration::from_secs(5))
                    })
                    .await;
                    return match schema {
                        Ok(Ok(())) => Ok(node),
                        Ok(Err(e)) => Err(node.error(&format!("refused the schema: {e:?}"))),
                        Err(e) => Err(node.error(&format!("refused the schema: {e}"))),
                    };
                }
                Err(e) => {
                    let in_use = std::fs::read_to_string(node.output_log())
                        .is_ok_and(|out| out.contains("Address already in use"));
                    // Ended, its data kept for the next port.
                    node.core.end().await;
                    if !in_use {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.expect("the loop ran"))
    }

    fn launch_spec(&self, user: Option<(u32, u32)>) -> Launch {
        let ip = self.core.ip.to_string();
        let mut args: Vec<String> = vec!["-D".into(), self.data.display().to_string()];
        let settings = [
            ("listen_addresses", ip.as_str()),
            ("port", &self.core.port.to_string()),
            // No socket file: the run's folder path may be too long for one.
            ("unix_socket_directories", ""),
            ("fsync", "on"),
            ("synchronous_commit", "on"),
            ("shared_buffers", "16MB"),
            ("max_connections", "200"),
            ("logging_collector", "off"),
            ("log_line_prefix", "%m [%p] %a: "),
        ];
        let own = settings.iter().map(|&(k, v)| (k, v));
        let users = self.settings.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in own.chain(users) {
            args.push("-c".into());
            args.push(format!("{k}={v}"));
        }
        Launch {
            name: self.core.name.clone(),
            program: Program::Found(self.program.clone()),
            args,
            env: Vec::new(),
            dir: self.core.dir.clone(),
            reads: Vec::new(),
            writes: match self.data.starts_with(&self.core.dir) {
                true => Vec::new(),
                false => vec![self.data.clone()],
            },
            output: self.output_log(),
            served_clock: None,
            user,
            forget_on_restart: Vec::new(),
        }
    }

    /// Polls until the server answers and says its data folder is ours, or
    /// fails early if the process exited.
    async fn answers(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let (addr, data) = (self.addr(), self.data.display().to_string());
        loop {
            if let Some(status) = self.core.exited().await {
                return Err(self
                    .refused_setting()
                    .unwrap_or_else(|| self.error(&format!("exited at start ({status})"))));
            }
            let a = addr.clone();
            let seen = tokio::task::spawn_blocking(move || {
                workloads::pg::identify(&a, Duration::from_millis(500))
            })
            .await
            .ok()
            .and_then(Result::ok);
            match seen {
                Some((dir, started)) if dir == data => {
                    self.core.identity = started;
                    return Ok(());
                }
                Some((dir, _)) => {
                    return Err(self.error(&format!(
                        "another server answers on {addr} (its data folder is {dir})"
                    )))
                }
                None if Instant::now() > deadline => {
                    return Err(self.error(&format!("did not answer within {READY_TIMEOUT:?}")))
                }
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The server would not start on a setting the user gave
    /// (`--postgres-setting`): bad input, in PostgreSQL's own words.
    fn refused_setting(&self) -> Option<Error> {
        let output = std::fs::read_to_string(self.output_log()).ok()?;
        let fatal = output.lines().rev().find(|l| l.contains("FATAL"))?;
        let (name, _) = self
            .settings
            .iter()
            // Its names are case-insensitive: `timezone` is "TimeZone" there.
            .find(|(name, _)| fatal.to_lowercase().contains(&name.to_lowercase()))?;
        let said = fatal.split_once("FATAL:").map_or(fatal, |(_, s)| s).trim();
        Some(Error::Usage(format!(
            "--postgres-setting {name}: PostgreSQL would not start with it ({said}): fix or drop it"
        )))
    }
}

impl Server for PostgresNode {
    /// The storage, also when the lock lives there.
    fn role(&self) -> &'static str {
        "storage"
    }
}

/// A restart starts the server again on its data: PostgreSQL recovers from
/// its WAL, and what it committed survives, `fsync` being on.
impl Kind for PostgresNode {
    fn core(&self) -> &Managed {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Managed {
        &mut self.core
    }

    fn ready(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.answers())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_reachable_only_through_folders_that_let_the_user_through() {
        use std::os::unix::fs::MetadataExt;
        let top = tempfile::tempdir().unwrap();
        let inner = top.path().join("a/b");
        std::fs::create_dir_all(&inner).unwrap();
        let m = std::fs::metadata(top.path()).unwrap();
        let stranger = (m.uid() + 1000, m.gid() + 1000);
        set_mode(top.path(), 0o700).unwrap();
        assert!(!reachable(&inner, stranger), "a 0700 folder on the way");
        assert!(
            reachable(&inner, (m.uid(), m.gid())),
            "its owner goes through"
        );
        set_mode(top.path(), 0o711).unwrap();
        set_mode(&top.path().join("a"), 0o755).unwrap();
        // Above the temporary folder, / and /tmp let everyone through.
        assert!(
            reachable(&inner, stranger),
            "0711 and 0755 let a stranger through"
        );
    }
}
