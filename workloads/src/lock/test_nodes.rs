//! Real `redis-server` processes for the lock clients' own tests, each on a
//! free port of 127.0.0.1, ready (answering `PING`) before a test uses them.

use super::LockParams;
use crate::recorder::Recorder;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Real redis-server processes, SIGKILLed and reaped on drop, even when
/// a test fails.
pub struct Nodes {
    children: Vec<Option<Child>>,
    pub addrs: Vec<String>,
    dir: tempfile::TempDir,
}

impl Nodes {
    pub fn start(n: usize) -> Nodes {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes = Nodes {
            children: Vec::new(),
            addrs: Vec::new(),
            dir,
        };
        for i in 0..n {
            let port = free_port();
            let wd = nodes.dir.path().join(format!("n{i}"));
            std::fs::create_dir_all(&wd).expect("node dir");
            let child = Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&wd)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed");
            nodes.children.push(Some(child));
            nodes.addrs.push(format!("127.0.0.1:{port}"));
        }
        for addr in &nodes.addrs {
            wait_for_ping(addr);
        }
        nodes
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

fn wait_for_ping(addr: &str) {
    let client = redis::Client::open(format!("redis://{addr}/")).expect("url");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pong = client
            .get_connection_with_timeout(Duration::from_millis(200))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
        if matches!(pong.as_deref(), Ok("PONG")) {
            return;
        }
        assert!(Instant::now() < deadline, "{addr} never answered PING");
        sleep(Duration::from_millis(20));
    }
}

impl Nodes {
    /// Lock parameters for these nodes: worker 0, nothing recorded, no strikes.
    pub fn params(&self, ttl: Duration) -> LockParams {
        LockParams {
            nodes: self.addrs.clone(),
            sentinels: Vec::new(),
            ttl,
            op_timeout: Duration::from_millis(500),
            wait_replicas: 0,
            clock: Default::default(),
            source: None,
            worker: 0,
            recorder: Recorder::discard(),
            strike: crate::strike::no_hook(),
            acquire_timeout: ttl * 2,
            adapter: None,
            give_up: std::sync::Arc::new(|why| panic!("{why}")),
            warn: std::sync::Arc::new(|why| panic!("{why}")),
        }
    }

    /// A plain redis connection to node `i`, to look at the key from outside.
    pub fn client(&self, i: usize) -> redis::Connection {
        redis::Client::open(format!("redis://{}/", self.addrs[i]))
            .expect("url")
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("the node answers")
    }
}
