//! lockstorm's stored formats, and the one place that writes and reads them:
//! the results layout and a run folder's files ([`layout`]), `run.json`
//! ([`RunRecord`]), `results.json` (`checker::Results`, read back typed), the
//! lines printed after a run ([`summary`]), and a matrix's `summary.json`
//! and `summary.md` ([`matrix`]). `check`, `report` and the matrix's merge
//! read stored runs only through here.
//!
//! It knows no harness, node, fault or lock client: what `run.json` holds in
//! the harness's types (the plan, the schedule) it holds through [`Plan`].

#![forbid(unsafe_code)]

pub mod audit;
mod error;
pub mod layout;
pub mod matrix;
mod record;
pub mod shard;
pub mod summary;

pub use error::{Error, ReadError, Result};
pub use layout::{
    read_json, write_json, RunDir, StoredRun, AUDIT, HARNESS_LOG, HISTORY, RESULTS, RUN_JSON,
};
pub use record::{
    BackendRecord, ClientRecord, NodeRecord, Outline, Plan, RunRecord, StorageAdapterRecord, NO_TTL,
};
