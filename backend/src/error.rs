//! What can go wrong provisioning a node. The harness wraps [`Error`] in
//! its own and gives each case its exit code.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nowhere to run the nodes as asked (no daemon, no such image, a
    /// backend not built in): the message names the problem and the fix.
    #[error("{0}")]
    Usage(String),
    #[error("{program} not found ({looked}): install it with `apt-get install -y {package}`, or set {env} to its path")]
    MissingProgram {
        program: &'static str,
        package: &'static str,
        env: &'static str,
        looked: String,
    },
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
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An I/O error, with what was being done: `.map_err(doing(…))`.
pub(crate) fn doing(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}
