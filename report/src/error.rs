//! What can stop `lockstorm report` as a whole (anything less is a problem
//! on the page). The harness wraps [`Error`] and prints it with its causes,
//! each after a `: `.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The results folder could not be listed.
    #[error("reading {}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The page could not be written.
    #[error("writing {}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A merged matrix folder could not be written.
    #[error(transparent)]
    Store(#[from] store::Error),
}
