//! The local backend: each Redis node is a real `redis-server` child process
//! on 127.0.0.1, in its own folder under the run, with its own log.

use crate::error::{Context, Error, Result};
use nemesis::process;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Finds `redis-server`: `$LOCKSTORM_REDIS_SERVER`, else the PATH.
pub fn find_redis_server() -> Result<PathBuf> {
    find_program("redis-server", "redis-server", "LOCKSTORM_REDIS_SERVER")
}

fn find_program(
    program: &'static str,
    package: &'static str,
    env: &'static str,
) -> Result<PathBuf> {
    let missing = |looked: String| Error::MissingProgram {
        program,
        package,
        env,
        looked,
    };
    if let Some(path) = std::env::var_os(env) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        return Err(missing(format!("{env}={} is not a file", path.display())));
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| missing("not on PATH".into()))
}

/// `redis-server --version`, for `run.json`.
pub fn redis_version(server: &Path) -> String {
    Command::new(server)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// A running node. Dropping it kills the process.
#[derive(Debug)]
pub struct RedisNode {
    pub name: String,
    pub port: u16,
    pub dir: PathBuf,
    child: Child,
}

impl RedisNode {
    /// Starts a node with persistence off and waits until it answers PING.
    pub async fn start(server: &Path, name: &str, nodes_dir: &Path) -> Result<Self> {
        let dir = nodes_dir.join(name);
        std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
        // A free port can be taken by someone else before redis binds it: retry.
        let mut last = None;
        for _ in 0..5 {
            let port = free_port().context(|| "finding a free port on 127.0.0.1".into())?;
            let mut node = Self::spawn(server, name, &dir, port)?;
            match node.wait_ready().await {
                Ok(()) => return Ok(node),
                Err(e) => {
                    node.stop();
                    let in_use = std::fs::read_to_string(node.log())
                        .is_ok_and(|log| log.contains("Address already in use"));
                    if !in_use {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.expect("the loop ran"))
    }

    fn spawn(server: &Path, name: &str, dir: &Path, port: u16) -> Result<Self> {
        let mut cmd = Command::new(server);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--protected-mode", "yes", "--daemonize", "no"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--logfile", "redis.log"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        process::isolate(&mut cmd);
        let child = cmd
            .spawn()
            .context(|| format!("starting {} for node {name}", server.display()))?;
        Ok(RedisNode {
            name: name.to_string(),
            port,
            dir: dir.to_path_buf(),
            child,
        })
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn error(&self, message: impl Into<String>) -> Error {
        Error::Node {
            name: self.name.clone(),
            message: message.into(),
            log: self.log(),
        }
    }

    /// Polls PING until the node answers, or fails early if it exited.
    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .context(|| "waiting for redis".into())?
            {
                return Err(self.error(format!("redis-server exited at start ({status})")));
            }
            if ping(&self.addr()).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.error(format!("no answer to PING within {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills and reaps the node (SIGKILL also ends a stopped process).
    pub fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = process::kill_now(self.child.id());
            let _ = self.child.wait();
        }
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn ping(addr: &str) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).await?;
        Ok::<_, std::io::Error>(&reply == b"+PONG\r\n")
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Ok(true))
    )
}
