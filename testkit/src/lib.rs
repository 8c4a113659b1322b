//! Real Redis servers for tests: `redis-server` and `redis-sentinel`
//! processes on a free port of a loopback address, each in a temporary
//! folder of its own, answering `PING` before a test gets them, and
//! SIGKILLed by PID (then reaped) when dropped, whatever the test's outcome.
//!
//! One home for what the crates' tests and benches used to each write
//! for themselves.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer its first `PING`.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A server to start: the program, where it listens, and what it is told.
#[derive(Clone, Debug)]
pub struct Builder {
    program: PathBuf,
    ip: Ipv4Addr,
    args: Vec<String>,
    config: Option<String>,
    env: Vec<(String, String)>,
    env_remove: Vec<String>,
    password: Option<String>,
}

impl Builder {
    /// `redis-server` with no persistence, on 127.0.0.1.
    pub fn redis() -> Builder {
        Builder::program("redis-server").args(["--save", "", "--appendonly", "no"])
    }

    /// `redis-sentinel`, whose settings go in its config file
    /// ([`Builder::config`]): a Sentinel must be able to rewrite it.
    pub fn sentinel() -> Builder {
        Builder::program("redis-sentinel").config("")
    }

    /// Any Redis-compatible server binary (a path or a name on `PATH`).
    pub fn program(program: impl Into<PathBuf>) -> Builder {
        Builder {
            program: program.into(),
            ip: Ipv4Addr::LOCALHOST,
            args: Vec::new(),
            config: None,
            env: Vec::new(),
            env_remove: Vec::new(),
            password: None,
        }
    }

    /// Listen on another loopback address (127.0.0.0/8 only).
    pub fn ip(mut self, ip: Ipv4Addr) -> Builder {
        assert!(
            ip.is_loopback(),
            "a test server listens on loopback only, not {ip}"
        );
        self.ip = ip;
        self
    }

    /// Command-line settings, e.g. `["--maxmemory-policy", "allkeys-lru"]`.
    pub fn args<I, S>(mut self, args: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Lines of a config file given as the first argument (the port, bind
    /// address and folder are added to it).
    pub fn config(mut self, lines: &str) -> Builder {
        let mut config = self.config.take().unwrap_or_default();
        config.push_str(lines);
        if !config.is_empty() && !config.ends_with('\n') {
            config.push('\n');
        }
        self.config = Some(config);
        self
    }

    /// `--requirepass`: the server then answers only a client that logs in
    /// with it, the readiness `PING` and [`Server::client`] included.
    pub fn password(mut self, password: &str) -> Builder {
        self.password = Some(password.into());
        self.args(["--requirepass", password])
    }

    pub fn env(mut self, name: &str, value: &str) -> Builder {
        self.env.push((name.into(), value.into()));
        self
    }

    pub fn env_remove(mut self, name: &str) -> Builder {
        self.env_remove.push(name.into());
        self
    }

    /// Starts the server and waits until it answers `PING`. A port taken
    /// between choosing it and binding it is retried on another.
    pub fn start(&self) -> Server {
        let mut last = String::new();
        for _attempt in 0..3 {
            match self.try_start() {
                Ok(server) => return server,
                Err(why) => last = why,
            }
        }
        panic!("{} did not start: {last}", self.program.display());
    }

    fn try_start(&self) -> Result<Server, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = free_port(self.ip);
        let addr = SocketAddr::from((self.ip, port));
        let place = [
            "--port".to_string(),
            port.to_string(),
            "--bind".into(),
            self.ip.to_string(),
            "--dir".into(),
            dir.path().display().to_string(),
            "--logfile".into(),
            "server.log".into(),
        ];
        let mut command = Command::new(&self.program);
        if let Some(config) = &self.config {
            let file = dir.path().join("server.conf");
            std::fs::write(&file, config).map_err(|e| e.to_string())?;
            command.arg(&file);
        }
        // Removed first, so a variable both removed and set ends up set.
        for name in &self.env_remove {
            command.env_remove(name);
        }
        command
            .args(place)
            .args(&self.args)
            .current_dir(dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "{} must be installed (apt-get install -y redis-server redis-sentinel): {e}",
                self.program.display()
            )
        });
        let mut server = Server {
            child: Some(child),
            addr,
            dir,
            password: self.password.clone(),
        };
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if server.exited() {
                break; // e.g. the port was taken meanwhile: try another
            }
            if server.ping() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!(
            "on {addr}, no PONG within {READY_WITHIN:?}; its log:\n{}",
            server.log()
        ))
    }
}

/// A running server, stopped by PID when dropped.
pub struct Server {
    child: Option<Child>,
    addr: SocketAddr,
    dir: tempfile::TempDir,
    password: Option<String>,
}

impl Server {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://ip:port/` (`redis://:password@ip:port/` with a
    /// [`Builder::password`]).
    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@{}/", self.addr),
            None => format!("redis://{}/", self.addr),
        }
    }

    /// The server's working folder (its data and `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A connection with a read timeout, to look at the server from outside.
    pub fn client(&self) -> redis::Connection {
        let con = redis::Client::open(self.url())
            .expect("a loopback URL")
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("{} does not answer: {e}", self.addr));
        con.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("a read timeout");
        con
    }

    /// SIGKILLs the server and reaps it; later calls do nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        client
            .get_connection_with_timeout(Duration::from_millis(200))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok_and(|pong| pong == "PONG")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Sentinel watching the primary on 127.0.0.1:`primary_port` as `mm`
/// (quorum 1, `down-after-milliseconds` 1000, and `more` config lines),
/// returned once it lists a replica of it: ready to fail over.
pub fn sentinel_of(primary_port: u16, more: &str) -> Server {
    let sentinel = Builder::sentinel()
        .config(&format!(
            "sentinel monitor mm 127.0.0.1 {primary_port} 1\nsentinel down-after-milliseconds mm 1000\n{more}"
        ))
        .start();
    let deadline = Instant::now() + READY_WITHIN * 3;
    loop {
        let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
            .arg("replicas")
            .arg("mm")
            .query(&mut sentinel.client())
            .unwrap_or_default();
        if !replicas.is_empty() {
            return sentinel;
        }
        assert!(
            Instant::now() < deadline,
            "the Sentinel on {} never listed a replica of port {primary_port}",
            sentinel.addr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A port free on `ip` when asked (the server may still lose it: retried).
pub fn free_port(ip: Ipv4Addr) -> u16 {
    TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral loopback port")
        .port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_answers_and_is_gone_once_dropped() {
        let server = Builder::redis().start();
        let pid = server.pid().expect("running");
        let mut con = server.client();
        redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query::<()>(&mut con)
            .unwrap();
        let got: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
        assert_eq!(got, "v");
        drop(con);
        drop(server);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "redis-server {pid} outlived its Server"
        );
    }

    #[test]
    fn a_sentinel_reads_its_config_and_answers() {
        let primary = Builder::redis().start();
        let sentinel = Builder::sentinel()
            .config(&format!(
                "sentinel monitor mm 127.0.0.1 {} 1",
                primary.port()
            ))
            .start();
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("mm")
            .query(&mut sentinel.client())
            .unwrap();
        assert_eq!(
            addr,
            vec!["127.0.0.1".to_string(), primary.port().to_string()]
        );
    }

    #[test]
    fn a_server_with_a_password_answers_only_those_who_log_in() {
        let server = Builder::redis().password("pw-1").start();
        let pong: String = redis::cmd("PING").query(&mut server.client()).unwrap();
        assert_eq!(pong, "PONG");
        let bare = format!("redis://{}/", server.addr());
        let refused = redis::Client::open(bare)
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
        assert!(refused.is_err(), "{refused:?}");
    }

    #[test]
    fn a_server_that_cannot_start_says_why_with_its_log() {
        let failed =
            std::panic::catch_unwind(|| Builder::redis().args(["--no-such-setting", "1"]).start());
        let why = failed.err().expect("a bad setting stops the server");
        let why = why.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(why.contains("did not start"), "{why}");
    }
}
