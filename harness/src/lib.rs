//! The `lockstorm` harness: provisions Redis nodes, runs workers and the
//! nemesis, records the history, checks it and stores the results.

#![forbid(unsafe_code)]

pub mod audit;
mod blocks;
pub mod check;
pub mod cli;
pub mod client_test;
pub mod clients;
mod defaults;
pub mod error;
pub mod exit;
pub mod explain;
mod help;
mod interrupt;
pub mod invoked;
mod journal;
mod logging;
pub mod matrix;
mod observer;
pub mod options;
mod origin;
mod progress;
mod proxied;
pub mod record;
pub mod run;
pub mod schedule_text;
pub mod shrink;
pub mod topology;
mod workers;

pub use error::{Error, Result};
pub use options::{Refusal, RunOptions, RunPlan};
