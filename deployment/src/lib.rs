//! What lockstorm does on a deployment it did not start (`--target`): it
//! names it ([`target`], pure), reaches it ([`reach`], [`tls`]), touches
//! only the run's own keys there ([`own_keys`]: the preflight before the
//! first write, the cleanup after the last), breaks it only through the
//! user's own commands ([`fault_command`]), and reads it without writing
//! ([`audit`]: gathered facts, pure rules).

pub mod audit;
pub mod fault_command;
pub mod own_keys;
pub mod reach;
pub mod role;
pub mod target;
pub mod tls;

pub use target::{Endpoint, Kind, Target};

/// What can go wrong on a deployment: the user's to fix (a name that does
/// not resolve, a refused login, a key of the run already there), or
/// lockstorm's own (a task or socket that failed).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The message names the problem and the fix.
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A blocking task that could not be joined, as an error of `what`.
fn joined(what: &str, e: tokio::task::JoinError) -> Error {
    Error::Io {
        context: what.into(),
        source: std::io::Error::other(e),
    }
}
