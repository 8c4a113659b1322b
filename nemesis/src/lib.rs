//! Faults and their schedule. The schedule is a pure function of the seed;
//! the faults act on real processes through [`process`], the one module that
//! sends signals.

pub mod clock;
pub mod cluster;
pub mod fault;
mod names;
pub mod net;
mod package;
mod play;
pub use process;
pub use proxy;
pub mod runner;
pub mod schedule;
pub mod served_clock;
mod verify;

pub use cluster::{Cluster, NodeRef, Source};
pub use fault::{Action, Aimed, At, Fault, Nemesis, Targets};
pub use names::{or_list, Names};
pub use package::{applies, Package, Shape};
pub use play::play;
pub use runner::{AtPoint, Env, FaultParams, Holder, Journal, Live, WorkerControl};
pub use schedule::{place_strikes, schedule, ScheduleSpec, Step};
