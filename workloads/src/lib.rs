//! lockstorm workloads: the lock clients (one module per config), the counter
//! storage client and the worker loop that runs inside each worker process.

#![forbid(unsafe_code)]

pub mod adapter;
pub mod clock;
pub mod cluster_view;
pub mod config;
pub mod conn;
pub mod etcd;
pub mod install;
pub mod keys;
pub mod lock;
pub mod pg;
pub mod recorder;
pub mod stall;
pub mod storage;
pub mod strike;
pub mod worker;
pub mod zookeeper;

pub use config::Config;
pub use keys::Keys;
pub use worker::{WorkerLine, WorkerSpec};

/// The result of one client step, in Jepsen's terms: `Fail` definitely did not
/// happen, `Info` may or may not have happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    Ok(T),
    Fail(String),
    Info(String),
}

impl<T> Outcome<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Ok(v) => Outcome::Ok(f(v)),
            Outcome::Fail(e) => Outcome::Fail(e),
            Outcome::Info(e) => Outcome::Info(e),
        }
    }
}
