//! The harness's tests: one binary, so the suite links once. Each module
//! runs the real `lockstorm` binary (and real `redis-server`, Sentinel,
//! Docker, Python and Node where it says); end-to-end runs take turns
//! through `common::e2e_slot`, each in an address block of its own.

#[path = "../common/mod.rs"]
mod common;

mod audit;
mod cli;
mod clients;
mod cluster;
mod configs;
mod crash;
mod docker;
mod errors;
mod etcd;
mod explain;
mod faults;
mod kill;
mod lab;
mod lifecycle;
mod liveness;
mod matrix;
mod network;
mod observer;
mod offline;
mod output;
mod paths;
mod postgres;
mod protocol;
mod redlock;
mod replicated;
mod report;
mod runs;
mod shrink;
mod stalls;
mod storage_cmd;
mod strikes;
mod target;
mod target_bounds;
mod verdicts;
mod workspace;
mod zookeeper;
