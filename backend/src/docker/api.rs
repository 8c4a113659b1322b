//! The Docker daemon as the harness reaches it: where it is (`DOCKER_HOST`,
//! remembered before testcontainers is pointed at the bridge), and [`Api`],
//! the negotiated client whose every call waits [`ANSWER`] for its answer
//! and a pull or import [`PROGRESS`] between messages. The backend, the
//! bridge, the image import and the reaper all use it; it uses none of them.

use crate::error::{Error, Result};
use futures_util::StreamExt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// How long one call may wait for the daemon's answer. A daemon answers a
/// ping, an inspect, a list or a kill in milliseconds, and creates or
/// starts a container in seconds even on a loaded CI machine: 30 s is far
/// beyond what a working daemon takes, and short enough that one that never
/// answers is reported within a minute.
pub const ANSWER: Duration = Duration::from_secs(30);
/// How long a pull or an import may go without a progress message. The
/// whole may take minutes (a registry, tens of MB to unpack and commit),
/// but the daemon reports as it goes: only a silence this long is stuck.
pub const PROGRESS: Duration = Duration::from_secs(120);

/// The one line for a daemon that did not answer `what` within `after`.
pub fn unanswered(socket: &Path, what: &str, after: Duration) -> String {
    format!(
        "the Docker daemon at unix://{} (DOCKER_HOST) did not answer {what} within {} s: check that dockerd is running and answers (`docker info`, and its log), or set DOCKER_HOST to the socket of one that does",
        socket.display(),
        after.as_secs()
    )
}

/// A daemon that does not answer is bad configuration (exit 254), as a
/// socket with no daemon behind it is: the socket is the one the user named
/// (DOCKER_HOST, or the default) and what listens there is theirs to fix.
/// Only lockstorm's own mistakes with it (DOCKER_HOST not routed to the
/// bridge) are the harness failing (255).
fn silent(socket: &Path, what: &str, after: Duration) -> Error {
    Error::Usage(unanswered(socket, what, after))
}

/// The daemon's negotiated client, and its socket for the messages that
/// name it.
#[derive(Clone)]
pub struct Api {
    pub docker: bollard::Docker,
    pub socket: Arc<Path>,
}

impl Api {
    /// `call`'s outcome, or the line saying the daemon did not answer
    /// `what` within [`ANSWER`].
    pub async fn answer<T>(&self, what: &str, call: impl Future<Output = T>) -> Result<T> {
        tokio::time::timeout(ANSWER, call)
            .await
            .map_err(|_| silent(&self.socket, what, ANSWER))
    }

    /// The next progress message of a pull or an import (`what`), or the
    /// line saying none came within [`PROGRESS`].
    pub async fn progress<S: futures_util::Stream + Unpin>(
        &self,
        what: &str,
        stream: &mut S,
    ) -> Result<Option<S::Item>> {
        tokio::time::timeout(PROGRESS, stream.next())
            .await
            .map_err(|_| silent(&self.socket, what, PROGRESS))
    }
}

/// The daemon's socket as the user named it (`DOCKER_HOST`) before
/// [`route_testcontainers`] pointed `DOCKER_HOST` at the bridge.
static DAEMON: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Points testcontainers (which reads `DOCKER_HOST` whenever it makes its
/// client) at this process's bridge socket, and remembers where the daemon
/// really is. Call before the async runtime starts: changing the
/// environment is only sound while one thread runs.
pub fn route_testcontainers() {
    let daemon = DAEMON.get_or_init(|| daemon_socket(std::env::var("DOCKER_HOST").ok()));
    if daemon.is_ok() {
        if let Ok(path) = bridge_socket() {
            std::env::set_var("DOCKER_HOST", format!("unix://{}", path.display()));
        }
    }
}

/// The daemon's Unix socket from a `DOCKER_HOST` value (or the default).
fn daemon_socket(docker_host: Option<String>) -> Result<PathBuf, String> {
    match docker_host.as_deref().filter(|h| !h.is_empty()) {
        None => Ok(PathBuf::from(DEFAULT_SOCKET)),
        Some(host) => match host.strip_prefix("unix://") {
            Some(path) => Ok(PathBuf::from(path)),
            None => Err(format!(
                "DOCKER_HOST={host} is not a Unix socket: the Docker backend runs containers in this machine's network, so it needs the local daemon's socket (unix:///var/run/docker.sock)"
            )),
        },
    }
}

/// This process's bridge socket, in the user's private folder.
pub(super) fn bridge_socket() -> std::io::Result<PathBuf> {
    Ok(nemesis::clock::private_dir()?.join(format!("docker-{}.sock", std::process::id())))
}

/// The daemon, or why not, for `--backend auto` and every error message.
pub(super) fn daemon() -> Result<PathBuf> {
    DAEMON
        .get_or_init(|| daemon_socket(std::env::var("DOCKER_HOST").ok()))
        .clone()
        .map_err(Error::Usage)
}

/// A negotiated client of the daemon at `socket`, once it answers a ping.
pub async fn client(socket: &Path) -> Result<Api> {
    let no_daemon = |e: &dyn std::fmt::Display| {
        Error::Usage(format!(
            "no Docker daemon answers at unix://{} ({e}): start one (`dockerd`), or set DOCKER_HOST to its socket",
            socket.display()
        ))
    };
    let path = socket.to_string_lossy();
    // bollard's own limit (on a request's answer, not on a stream) only
    // backs up ours: [`Api::answer`] and [`Api::progress`] come first.
    let docker =
        bollard::Docker::connect_with_unix(&path, PROGRESS.as_secs(), bollard::API_DEFAULT_VERSION)
            .map_err(|e| no_daemon(&e))?;
    let mut api = Api {
        docker,
        socket: socket.into(),
    };
    let negotiated = api.docker.clone().negotiate_version();
    api.docker = api
        .answer("GET /version", negotiated)
        .await?
        .map_err(|e| no_daemon(&e))?;
    api.answer("a ping", api.docker.ping())
        .await?
        .map_err(|e| no_daemon(&e))?;
    Ok(api)
}

/// The daemon's client for `lockstorm image import` and the tests.
pub async fn connect_daemon() -> Result<Api> {
    client(&daemon()?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_must_be_a_unix_socket() {
        assert_eq!(daemon_socket(None).unwrap(), PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(
            daemon_socket(Some(String::new())).unwrap(),
            PathBuf::from(DEFAULT_SOCKET)
        );
        assert_eq!(
            daemon_socket(Some("unix:///tmp/d.sock".into())).unwrap(),
            PathBuf::from("/tmp/d.sock")
        );
        let tcp = daemon_socket(Some("tcp://10.0.0.1:2375".into())).unwrap_err();
        assert!(
            tcp.contains("not a Unix socket") && tcp.contains("DOCKER_HOST"),
            "{tcp}"
        );
    }
}
