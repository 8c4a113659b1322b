//! Errors that end a command, each mapped to the documented exit code
//! ([`crate::exit`]).

use crate::exit;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad arguments or configuration: the message names the problem and the fix.
    #[error("{0}")]
    Usage(String),
    #[error("cannot read {path}: {message}")]
    BadInput { path: PathBuf, message: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A node failed to start and its run folder (with the node's log) was
    /// discarded, so the message quotes the node instead of pointing to it.
    #[error("node {name} failed to start: {message}")]
    NodeStart { name: String, message: String },
    #[error("cannot set up iptables: {0}")]
    Firewall(#[source] std::io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("nemesis task failed: {0}")]
    NemesisTask(#[source] tokio::task::JoinError),
    /// Runs of a matrix that ended in an error (named `config × nemesis`).
    #[error("runs of {} could not complete; see their harness.log", .0.join(", "))]
    MatrixIncomplete(Vec<String>),
    /// A client adapter cannot start, refused `init` or broke the protocol
    /// at it: the user's to fix.
    #[error("{0}")]
    Adapter(String),
    /// A shipped adapter's environment (venv, `npm ci`) could not be set up:
    /// the user's to fix (254) when the registry is out of reach or a
    /// prepared environment lacks a pin, else the harness's (255).
    #[error("cannot set up the client adapters: {0}")]
    ClientSetup(#[from] workloads::install::SetupFailed),
    /// `lockstorm report` could not read the results folder or write its
    /// page: said with what caused it.
    #[error("{}", with_causes(.0))]
    Report(#[from] report::Error),
    /// A matrix's cell (a run in a process of its own) failed: its own
    /// error's message and exit code.
    #[error("{message}")]
    Cell { message: String, code: u8 },
    /// A stored file or folder could not be written (a results folder the
    /// user may not write to is theirs to fix).
    #[error(transparent)]
    Store(#[from] store::Error),
    /// Nodes could not be provisioned, or one failed (nowhere to run them
    /// as asked, or a missing program, is the user's to fix).
    #[error(transparent)]
    Backend(#[from] backend::Error),
}

impl Error {
    /// Jepsen's convention: bad input, or the harness itself failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_)
            | Error::Backend(backend::Error::Usage(_) | backend::Error::MissingProgram { .. })
            | Error::BadInput { .. }
            | Error::Store(store::Error::ResultsNotWritable { .. })
            | Error::Adapter(_) => exit::BAD_INPUT,
            Error::ClientSetup(e) if e.theirs => exit::BAD_INPUT,
            Error::NodeStart { .. }
            | Error::Backend(_)
            | Error::Io { .. }
            | Error::Firewall(_)
            | Error::Runtime(_)
            | Error::NemesisTask(_)
            | Error::MatrixIncomplete(_)
            | Error::Store(_)
            | Error::ClientSetup(_)
            | Error::Report(_) => exit::HARNESS_FAILED,
            Error::Cell { code, .. } => *code,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error and each of its causes, joined by `: `.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

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

/// A deployment's refusals are the user's to fix, its failures the
/// harness's, as for the harness's own.
impl From<deployment::Error> for Error {
    fn from(e: deployment::Error) -> Error {
        match e {
            deployment::Error::Usage(message) => Error::Usage(message),
            deployment::Error::Io { context, source } => Error::Io { context, source },
        }
    }
}
