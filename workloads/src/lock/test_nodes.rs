//! Real `redis-server` processes for the lock clients' own tests, each on a
//! free port of 127.0.0.1, ready (answering `PING`) before a test uses them.

use super::LockParams;
use crate::recorder::Recorder;
use std::time::Duration;
use testkit::{Builder, Server};

/// Real redis-server processes, SIGKILLed and reaped on drop, even when
/// a test fails.
pub struct Nodes {
    servers: Vec<Server>,
    pub addrs: Vec<String>,
}

impl Nodes {
    pub fn start(n: usize) -> Nodes {
        let servers: Vec<Server> = (0..n).map(|_| Builder::redis().start()).collect();
        let addrs = servers.iter().map(|s| s.addr().to_string()).collect();
        Nodes { servers, addrs }
    }

    pub fn kill(&mut self, i: usize) {
        self.servers[i].kill();
    }
}

impl Nodes {
    /// Lock parameters for these nodes: worker 0, nothing recorded, no strikes.
    pub fn params(&self, ttl: Duration) -> LockParams {
        LockParams {
            nodes: self.addrs.clone(),
            storage_node: String::new(),
            keys: Default::default(),
            login: None,
            sentinels: Vec::new(),
            master: super::PRIMARY_NAME.into(),
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
        self.servers[i].client()
    }
}
