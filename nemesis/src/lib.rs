//! Faults and their schedule. The schedule is a pure function of the seed;
//! the faults act on real processes through [`process`], the one module that
//! sends signals.

pub mod fault;
mod pause;
pub mod process;
pub mod runner;
pub mod schedule;

pub use fault::{Fault, Nemesis};
pub use runner::{Env, Holder, Journal};
pub use schedule::{schedule, ScheduleSpec, Step};
