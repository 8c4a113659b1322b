//! The audit: what a deployment says of itself through read-only commands
//! (`facts`, gathered by `gather`, the I/O), what that means for a lock
//! kept there (`rules`, pure; `cluster`, a Redis Cluster's), and how it
//! prints (`table`).

mod cluster;
pub mod facts;
mod finding;
pub mod gather;
pub mod rules;
pub mod samples;
pub mod table;
