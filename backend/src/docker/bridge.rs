//! A Unix-socket proxy in front of the Docker daemon that lowers the API
//! version in request paths.
//!
//! testcontainers builds its bollard client for API 1.53 and never
//! negotiates, while the Docker of Debian bookworm (20.10) serves at most
//! API 1.41 and refuses every `/v1.53/...` request with a 400 ("client
//! version 1.53 is too new"). The bridge forwards each request to the real
//! socket with a newer version prefix lowered to the daemon's own; the daemon
//! then serves it as a 1.41 request (it ignores request fields it does not
//! know, and bollard's models take absent answer fields as `None`).
//! Everything else (method, headers, bodies both ways) passes through as a
//! stream, never buffered: an image import is tens of MB and a followed log
//! never ends. Upgraded connections (attach, exec) are bridged byte for byte
//! once both sides have switched; the old hijack without `Upgrade:` is only
//! bridged from the daemon to the client.
//!
//! A daemon that does not answer a request in time ([`super::api::ANSWER`] for
//! the backend) gets the client a 504 that names its socket, rather than a wait without end: a
//! testcontainers call never waits longer for its answer (the status and
//! headers, which the daemon sends at once even for a followed log or a
//! wait). None of its calls uploads a large body; an import goes straight
//! to the daemon.

use super::api::unanswered;
use bytes::Bytes;
use http_body_util::{BodyExt, Either, Empty, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST, UPGRADE};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::borrow::Cow;
use std::convert::Infallible;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Mutex;
use tokio::task::{JoinHandle, JoinSet};

/// An API version as Docker writes it, "1.41".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiVersion {
    pub major: u32,
    pub minor: u32,
}

impl std::str::FromStr for ApiVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        // Digits only: `u32::from_str` would also take "+1".
        let number = |part: &str| {
            let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| part.parse().ok()).flatten()
        };
        match s.split_once('.').map(|(a, b)| (number(a), number(b))) {
            Some((Some(major), Some(minor))) => Ok(ApiVersion { major, minor }),
            _ => Err(format!("{s:?} is not a Docker API version (like 1.41)")),
        }
    }
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// `path_and_query` with a leading `/vX.Y/` lowered to `daemon` when X.Y is
/// newer; anything else unchanged (unversioned paths, equal or older
/// versions, malformed prefixes). The version is the whole first path
/// segment, so a bare `/v1.53` (or `/v1.53?...`) is lowered too.
pub fn rewrite(path_and_query: &str, daemon: ApiVersion) -> Cow<'_, str> {
    let Some(rest) = path_and_query.strip_prefix("/v") else {
        return Cow::Borrowed(path_and_query);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].parse::<ApiVersion>() {
        Ok(asked) if asked > daemon => Cow::Owned(format!("/v{daemon}{}", &rest[end..])),
        _ => Cow::Borrowed(path_and_query),
    }
}

pub struct Bridge {
    path: PathBuf,
    daemon: ApiVersion,
    accept: JoinHandle<()>,
}

impl Bridge {
    /// Asks the daemon behind the Unix socket `upstream` for its API version
    /// (GET /version without a version prefix; JSON field "ApiVersion"),
    /// then listens on the Unix socket `listen` (a stale socket file there
    /// is removed first; the parent folder exists) and serves until dropped.
    /// The daemon has `answer` to answer each request, that one included
    /// (else: an error of kind `TimedOut`, a 504). Must be called inside a
    /// tokio runtime.
    pub async fn start(upstream: PathBuf, listen: PathBuf, answer: Duration) -> io::Result<Bridge> {
        let daemon = tokio::time::timeout(answer, ask_version(&upstream))
            .await
            .map_err(|_| {
                let what = unanswered(&upstream, "GET /version", answer);
                io::Error::new(io::ErrorKind::TimedOut, what)
            })??;
        let cannot = |e: io::Error, what: &str| {
            io::Error::new(
                e.kind(),
                format!("cannot {what} the bridge socket {}: {e}", listen.display()),
            )
        };
        // Only a socket is stale; any other file there is not ours to delete.
        if std::fs::symlink_metadata(&listen).is_ok_and(|m| m.file_type().is_socket()) {
            std::fs::remove_file(&listen).map_err(|e| cannot(e, "remove the stale"))?;
        }
        let listener = UnixListener::bind(&listen).map_err(|e| cannot(e, "listen on"))?;
        let upstream: Arc<Path> = upstream.into();
        let accept = tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every connection.
            let mut connections = JoinSet::new();
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        connections.spawn(serve(stream, upstream.clone(), daemon, answer));
                    }
                    Err(e) => {
                        // Out of descriptors, say: wait rather than spin.
                        tracing::warn!("docker bridge: accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Bridge {
            path: listen,
            daemon,
            accept,
        })
    }

    /// The daemon's API version, as it answered.
    pub fn daemon_api(&self) -> ApiVersion {
        self.daemon
    }

    /// The socket it listens on.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The daemon's `ApiVersion`, or an error naming the socket and what failed.
async fn ask_version(socket: &Path) -> io::Result<ApiVersion> {
    let name = format!("unix://{}", socket.display());
    let not_docker = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{name} is not a Docker daemon: {what}"),
        )
    };
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("no Docker daemon at {name} ({e})")))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| not_docker(e.to_string()))?;
    let driver = tokio::spawn(conn);
    // Docker, like any HTTP/1.1 server, refuses a request without Host.
    let request = Request::get("/version")
        .header(HOST, "docker")
        .body(Empty::<Bytes>::new());
    let request = request.map_err(|e| not_docker(e.to_string()))?;
    let response = send
        .send_request(request)
        .await
        .map_err(|e| not_docker(format!("GET /version failed ({e})")))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), 1 << 20).collect().await;
    driver.abort();
    let body = body
        .map_err(|e| not_docker(format!("reading its answer to GET /version failed ({e})")))?
        .to_bytes();
    let json: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let reported = json
        .as_ref()
        .and_then(|j| j.get("ApiVersion"))
        .and_then(|v| v.as_str());
    match reported {
        Some(version) if status.is_success() => version
            .parse()
            .map_err(|e| not_docker(format!("its ApiVersion: {e}"))),
        _ => Err(not_docker(format!(
            "GET /version answered {status} {:?}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))),
    }
}

/// One client connection's way to the daemon: opened on its first request
/// (and again if the daemon closed it in between), with the tasks driving
/// it and any upgraded stream.
struct Upstream {
    send: Option<SendRequest<Incoming>>,
    tasks: JoinSet<()>,
}

type Body = Either<Incoming, Full<Bytes>>;

/// Serves one client connection, then lets its upgraded stream, if any, run out.
async fn serve(stream: UnixStream, socket: Arc<Path>, daemon: ApiVersion, answer: Duration) {
    let upstream = Arc::new(Mutex::new(Upstream {
        send: None,
        tasks: JoinSet::new(),
    }));
    let service = {
        let upstream = upstream.clone();
        hyper::service::service_fn(move |req| {
            forward(req, socket.clone(), daemon, answer, upstream.clone())
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!("docker bridge: a client connection ended: {e}");
    }
    let mut upstream = upstream.lock().await;
    upstream.send = None; // so the daemon connection ends
    while upstream.tasks.join_next().await.is_some() {}
}

async fn forward(
    mut req: Request<Incoming>,
    socket: Arc<Path>,
    daemon: ApiVersion,
    answer: Duration,
    upstream: Arc<Mutex<Upstream>>,
) -> Result<Response<Body>, Infallible> {
    let lowered = req
        .uri()
        .path_and_query()
        .map(|p| rewrite(p.as_str(), daemon));
    if let Some(Cow::Owned(lowered)) = lowered {
        let mut parts = req.uri().clone().into_parts();
        parts.path_and_query = lowered.parse().ok();
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    let client_side = req
        .headers()
        .contains_key(UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let mut upstream = upstream.lock().await;
    let what = format!("{} {}", req.method(), req.uri());
    let answered = tokio::time::timeout(answer, send(&mut upstream, &socket, req)).await;
    let mut response = match answered {
        Ok(Ok(response)) => response,
        Ok(Err(message)) => return Ok(gateway_error(StatusCode::BAD_GATEWAY, message)),
        Err(_) => {
            // The request may still be in flight on that connection: the
            // next one gets a new connection, and this one's task goes.
            upstream.send = None;
            upstream.tasks.abort_all();
            let message = unanswered(&socket, &what, answer);
            return Ok(gateway_error(StatusCode::GATEWAY_TIMEOUT, message));
        }
    };
    if let (StatusCode::SWITCHING_PROTOCOLS, Some(client_side)) = (response.status(), client_side) {
        let daemon_side = hyper::upgrade::on(&mut response);
        upstream.tasks.spawn(async move {
            if let (Ok(client), Ok(daemon)) = (client_side.await, daemon_side.await) {
                let _ = tokio::io::copy_bidirectional(
                    &mut TokioIo::new(client),
                    &mut TokioIo::new(daemon),
                )
                .await;
            }
        });
    }
    Ok(response.map(Either::Left))
}

async fn send(
    upstream: &mut Upstream,
    socket: &Path,
    req: Request<Incoming>,
) -> Result<Response<Incoming>, String> {
    let name = || format!("the Docker daemon at unix://{}", socket.display());
    let sender = match upstream.send.take() {
        Some(sender) if !sender.is_closed() => sender,
        _ => {
            let stream = UnixStream::connect(socket)
                .await
                .map_err(|e| format!("cannot reach {} ({e})", name()))?;
            let (sender, conn) = hyper::client::conn::http1::Builder::new()
                .preserve_header_case(true)
                .handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("cannot talk to {} ({e})", name()))?;
            while upstream.tasks.try_join_next().is_some() {}
            upstream
                .tasks
                .spawn(async move { drop(conn.with_upgrades().await) });
            sender
        }
    };
    let sender = upstream.send.insert(sender);
    sender
        .ready()
        .await
        .map_err(|e| format!("lost {} ({e})", name()))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| format!("{} did not answer ({e})", name()))
}

/// An error as Docker writes them, so clients show the message.
fn gateway_error(status: StatusCode, message: String) -> Response<Body> {
    let body = serde_json::json!({ "message": format!("lockstorm's Docker bridge: {message}") });
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::CONNECTION;
    use hyper::Method;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const ANSWER: Duration = super::super::api::ANSWER;

    fn v(s: &str) -> ApiVersion {
        s.parse().unwrap()
    }

    #[test]
    fn versions_parse_print_and_order() {
        assert_eq!(
            v("1.41"),
            ApiVersion {
                major: 1,
                minor: 41
            }
        );
        assert_eq!(v("1.41").to_string(), "1.41");
        assert!(v("1.53") > v("1.41") && v("1.41") > v("1.9") && v("2.0") > v("1.99"));
        for bad in [
            "",
            "1",
            "1.",
            ".41",
            "1.41.0",
            "v1.41",
            " 1.41",
            "+1.41",
            "1.4x",
            "1.99999999999",
        ] {
            let err = bad.parse::<ApiVersion>().unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn a_newer_version_is_lowered_to_the_daemons() {
        let d = v("1.41");
        assert_eq!(
            rewrite("/v1.53/containers/json?all=1", d),
            "/v1.41/containers/json?all=1"
        );
        assert_eq!(rewrite("/v1.53/_ping", d), "/v1.41/_ping");
        assert_eq!(rewrite("/v2.0/info", d), "/v1.41/info");
        assert_eq!(rewrite("/v1.53", d), "/v1.41");
        assert_eq!(rewrite("/v1.53?x=/v1.53/", d), "/v1.41?x=/v1.53/");
        assert!(matches!(rewrite("/v1.53/info", d), Cow::Owned(_)));
    }

    #[test]
    fn everything_else_is_left_alone() {
        let d = v("1.41");
        for path in [
            "/v1.41/containers/json?all=1",
            "/v1.24/info",
            "/version",
            "/_ping",
            "/",
            "",
            "/v",
            "/v/info",
            "/v1/info",
            "/v1.x/info",
            "/v1.53.1/info",
            "/vfoo/v1.53/info",
            "/containers/v1.53/json",
        ] {
            assert!(
                matches!(rewrite(path, d), Cow::Borrowed(p) if p == path),
                "{path}"
            );
        }
    }

    /// A stand-in daemon at `socket`: answers GET /version with `version`,
    /// upgrades `Upgrade:` requests to an echo stream, never answers a path
    /// ending in `/silent`, and answers anything else with its path, body
    /// length and Host.
    fn fake_daemon(socket: &Path, version: (StatusCode, &'static str)) -> JoinHandle<()> {
        let listener = UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let service =
                    hyper::service::service_fn(move |mut req: Request<Incoming>| async move {
                        let path = req
                            .uri()
                            .path_and_query()
                            .map(|p| p.to_string())
                            .unwrap_or_default();
                        let mut response = Response::new(Full::new(Bytes::new()));
                        if path == "/version" {
                            *response.status_mut() = version.0;
                            *response.body_mut() = Full::new(Bytes::from(version.1));
                        } else if path.ends_with("/silent") {
                            std::future::pending::<()>().await;
                        } else if req.headers().contains_key(UPGRADE) {
                            let on = hyper::upgrade::on(&mut req);
                            tokio::spawn(async move {
                                let (mut r, mut w) =
                                    tokio::io::split(TokioIo::new(on.await.unwrap()));
                                let _ = tokio::io::copy(&mut r, &mut w).await;
                            });
                            *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                            let headers = response.headers_mut();
                            headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
                            headers.insert(UPGRADE, HeaderValue::from_static("tcp"));
                            headers.insert("x-path", path.parse().unwrap());
                        } else {
                            let host = req
                                .headers()
                                .get(HOST)
                                .and_then(|h| h.to_str().ok())
                                .unwrap_or("")
                                .to_string();
                            let len = req.into_body().collect().await?.to_bytes().len();
                            *response.body_mut() =
                                Full::new(Bytes::from(format!("{path} {len} {host}")));
                        }
                        Ok::<_, hyper::Error>(response)
                    });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades(),
                );
            }
        })
    }

    const DOCKER_20: (StatusCode, &str) = (
        StatusCode::OK,
        r#"{"Version":"20.10.24","ApiVersion":"1.41"}"#,
    );

    async fn client(socket: &Path) -> SendRequest<Full<Bytes>> {
        let stream = UnixStream::connect(socket).await.unwrap();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn.with_upgrades());
        send
    }

    fn request(method: Method, uri: &str, body: Vec<u8>) -> Request<Full<Bytes>> {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(HOST, "docker")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    }

    async fn call(
        send: &mut SendRequest<Full<Bytes>>,
        req: Request<Full<Bytes>>,
    ) -> hyper::Result<(StatusCode, String)> {
        send.ready().await?;
        let response = send.send_request(req).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    #[tokio::test]
    async fn requests_are_lowered_streamed_and_kept_alive() {
        let dir = tempfile::tempdir().unwrap();
        let (daemon, listen) = (
            dir.path().join("daemon.sock"),
            dir.path().join("bridge.sock"),
        );
        let _daemon = fake_daemon(&daemon, DOCKER_20);
        drop(std::os::unix::net::UnixListener::bind(&listen).unwrap()); // a stale socket
        let bridge = Bridge::start(daemon, listen.clone(), ANSWER).await.unwrap();
        assert_eq!(
            (bridge.daemon_api(), bridge.path()),
            (v("1.41"), listen.as_path())
        );

        // Three requests on one connection, the second with a 5 MB body.
        let mut send = client(bridge.path()).await;
        let list = request(Method::GET, "/v1.53/containers/json?all=1", vec![]);
        let answer = call(&mut send, list).await.unwrap();
        assert_eq!(
            answer,
            (
                StatusCode::OK,
                "/v1.41/containers/json?all=1 0 docker".into()
            )
        );
        let load = request(
            Method::POST,
            "/v1.53/images/load?quiet=1",
            vec![7; 5_000_000],
        );
        let answer = call(&mut send, load).await.unwrap();
        assert_eq!(
            answer,
            (
                StatusCode::OK,
                "/v1.41/images/load?quiet=1 5000000 docker".into()
            )
        );
        let info = request(Method::GET, "/v1.24/info", vec![]);
        assert_eq!(
            call(&mut send, info).await.unwrap().1,
            "/v1.24/info 0 docker"
        );

        drop(bridge);
        assert!(!listen.exists(), "the socket file outlived the bridge");
        let ping = request(Method::GET, "/v1.53/_ping", vec![]);
        let after = tokio::time::timeout(Duration::from_secs(5), call(&mut send, ping))
            .await
            .unwrap();
        assert!(
            after.is_err(),
            "a connection outlived the bridge: {after:?}"
        );
    }

    #[tokio::test]
    async fn an_upgraded_connection_is_bridged_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let (daemon, listen) = (
            dir.path().join("daemon.sock"),
            dir.path().join("bridge.sock"),
        );
        let _daemon = fake_daemon(&daemon, DOCKER_20);
        let bridge = Bridge::start(daemon, listen, ANSWER).await.unwrap();
        let mut send = client(bridge.path()).await;
        let mut attach = request(Method::POST, "/v1.53/containers/c/attach?stream=1", vec![]);
        attach
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("Upgrade"));
        attach
            .headers_mut()
            .insert(UPGRADE, HeaderValue::from_static("tcp"));
        send.ready().await.unwrap();
        let response = send.send_request(attach).await.unwrap();
        assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            response.headers()["x-path"],
            "/v1.41/containers/c/attach?stream=1"
        );
        let mut stream = TokioIo::new(hyper::upgrade::on(response).await.unwrap());
        for word in [&b"ping"[..], b"pong"] {
            stream.write_all(word).await.unwrap();
            let mut echo = [0; 4];
            stream.read_exact(&mut echo).await.unwrap();
            assert_eq!(&echo, word);
        }
    }

    #[tokio::test]
    async fn start_says_what_is_wrong_with_the_daemon_socket() {
        let dir = tempfile::tempdir().unwrap();
        let listen = dir.path().join("bridge.sock");
        let start = |name: &str| Bridge::start(dir.path().join(name), listen.clone(), ANSWER);

        let err = start("absent.sock").await.err().unwrap().to_string();
        assert!(
            err.contains("no Docker daemon at unix://") && err.contains("absent.sock"),
            "{err}"
        );

        let _web = fake_daemon(
            &dir.path().join("web.sock"),
            (StatusCode::NOT_FOUND, "page not found"),
        );
        let err = start("web.sock").await.err().unwrap().to_string();
        assert!(
            err.contains("web.sock is not a Docker daemon") && err.contains("404"),
            "{err}"
        );

        let _odd = fake_daemon(
            &dir.path().join("odd.sock"),
            (StatusCode::OK, r#"{"ApiVersion":"one"}"#),
        );
        let err = start("odd.sock").await.err().unwrap().to_string();
        assert!(err.contains("odd.sock") && err.contains("\"one\""), "{err}");
        assert!(!listen.exists());
    }

    /// The answer limit is what these tests wait out: short here, so the
    /// silence is proven in a second.
    const SHORT: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn a_request_the_daemon_never_answers_gets_a_504_naming_its_socket() {
        let dir = tempfile::tempdir().unwrap();
        let (daemon, listen) = (
            dir.path().join("daemon.sock"),
            dir.path().join("bridge.sock"),
        );
        let _daemon = fake_daemon(&daemon, DOCKER_20);
        let bridge = Bridge::start(daemon, listen, SHORT).await.unwrap();
        let mut send = client(bridge.path()).await;
        let silent = request(Method::POST, "/v1.53/containers/create/silent", vec![]);
        let (status, body) = call(&mut send, silent).await.unwrap();
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
        for needle in [
            "daemon.sock (DOCKER_HOST) did not answer POST /v1.41/containers/create/silent within 1 s",
            "docker info",
        ] {
            assert!(body.contains(needle), "{needle:?} not in {body}");
        }
        // The same client connection goes on, over a new one to the daemon.
        let info = request(Method::GET, "/v1.53/info", vec![]);
        assert_eq!(
            call(&mut send, info).await.unwrap(),
            (StatusCode::OK, "/v1.41/info 0 docker".into())
        );
    }

    #[tokio::test]
    async fn a_socket_that_accepts_and_never_answers_times_out_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("hang.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let _held = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let listen = dir.path().join("bridge.sock");
        let err = Bridge::start(socket, listen.clone(), SHORT)
            .await
            .err()
            .unwrap();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        let err = err.to_string();
        assert!(
            err.contains("hang.sock (DOCKER_HOST) did not answer GET /version within 1 s"),
            "{err}"
        );
        assert!(!listen.exists());
    }
}
