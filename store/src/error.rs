//! What can go wrong writing the stored formats ([`Error`]), and reading
//! one back ([`ReadError`]). The harness wraps [`Error`] in its own and
//! gives each case its exit code.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The results folder cannot be written: the user's to fix (a clone
    /// owned by another user, a read-only mount).
    #[error("cannot create {}: {source}; give --results a folder you can write to", .path.display())]
    ResultsNotWritable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Every `<name>`, `<name>-1` … `<name>-999` already exists.
    #[error("too many folders named {name} in {}", .parent.display())]
    NoFreeFolder { name: String, parent: PathBuf },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An I/O error, with what was being done: `.map_err(doing(…))`.
pub(crate) fn doing(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// Why a stored JSON file could not be read back.
#[derive(Debug)]
pub enum ReadError {
    /// Missing or unreadable.
    Io(std::io::Error),
    /// Not JSON, or not the shape the file should have.
    Json(serde_json::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => e.fmt(f),
            ReadError::Json(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {}
