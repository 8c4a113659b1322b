//! Faults and their schedule. The schedule is a pure function of the seed;
//! the faults act on real processes through [`process`], the one module that
//! sends signals.

pub mod clock;
pub mod cluster;
mod crash;
mod delay;
mod failover;
pub mod fault;
mod kill;
mod names;
pub mod net;
mod package;
pub mod partition;
mod pause;
mod play;
pub use process;
pub use proxy;
pub mod runner;
mod scenario;
pub mod schedule;
pub mod served_clock;
mod skew;
mod terminate;
mod verify;

pub use cluster::{Cluster, NodeRef, Source};
pub use fault::{Action, Aimed, At, Fault, Nemesis, Targets};
pub use names::{or_list, Names};
pub use package::{applies, Package, Shape};
pub use play::play;
pub use runner::{AtPoint, Env, FaultParams, Holder, Journal, Live, WorkerControl};
pub use schedule::{place_strikes, schedule, ScheduleSpec, Step};
