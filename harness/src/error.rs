//! Errors that end a command, each mapped to the documented exit code.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad arguments or configuration: the message names the problem and the fix.
    #[error("{0}")]
    Usage(String),
    #[error("{program} not found ({looked}): install it with `apt-get install -y {package}`, or set {env} to its path")]
    MissingProgram {
        program: &'static str,
        package: &'static str,
        env: &'static str,
        looked: String,
    },
    #[error("cannot read {path}: {message}")]
    BadInput { path: PathBuf, message: String },
    #[error("node {name} failed: {message} (see {log})")]
    Node {
        name: String,
        message: String,
        log: PathBuf,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Harness(String),
}

impl Error {
    /// Jepsen's convention: 254 for bad input, 255 when the harness itself failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::MissingProgram { .. } | Error::BadInput { .. } => 254,
            Error::Node { .. } | Error::Io { .. } | Error::Harness(_) => 255,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches what was being done to an I/O error.
pub trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for std::io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            context: what(),
            source,
        })
    }
}
