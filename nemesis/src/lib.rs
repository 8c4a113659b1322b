//! Faults and their schedule. The schedule is a pure function of the seed;
//! the faults act on real processes through [`process`], the one module that
//! sends signals.

pub mod clock;
pub mod cluster;
mod failover;
pub mod fault;
mod kill;
pub mod net;
mod pause;
pub mod process;
pub mod runner;
pub mod schedule;

pub use cluster::{Cluster, NodeRef};
pub use fault::{Fault, Nemesis};
pub use runner::{Durations, Env, Holder, Journal};
pub use schedule::{schedule, ScheduleSpec, Step};
