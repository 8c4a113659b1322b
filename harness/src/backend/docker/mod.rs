//! The Docker backend: each node is a container started through
//! testcontainers from one image, with **host networking** (it binds its own
//! loopback address and port, as a local node does, so partitions, worker
//! source addresses and client adapters work unchanged) and the **host's PID
//! namespace** (its `redis-server` has a host PID: pause is SIGSTOP of that
//! PID, verified in /proc, and `INFO server`'s `process_id` proves the
//! answering server is our container's). The node's folder, and the time
//! shim when the clock nemesis runs, are bind-mounted at the same paths, so
//! every argument, log and control file is where the harness expects it.
//!
//! testcontainers speaks Docker API 1.53 and does not negotiate; it reaches
//! the daemon through [`bridge`], which lowers the version for an older
//! daemon. The harness's own calls (inspect, kill, list, remove, import) use
//! a negotiated bollard client ([`Api`]). No call waits on the daemon for
//! ever: each answer is awaited for [`ANSWER`], each progress message of a
//! pull or an import for [`PROGRESS`], here and in the bridge (which answers
//! testcontainers' call with a 504 when the daemon does not). Every
//! container carries the run's labels ([`reap`]): the run removes its
//! containers at its end, a reaper process removes them if the harness dies,
//! and a later start removes those of runs that are provably gone.

pub mod bridge;
pub mod image;
pub mod reap;

use crate::backend::{Launch, NodeProcess, Program, Provisioner};
use crate::error::{Error, Result};
use bollard::models::ContainerState;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, KillContainerOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use nemesis::cluster::BoxFuture;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use store::BackendRecord;
use testcontainers::core::{AccessMode, Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

/// The image used when `--image` is not given and no local image was imported.
pub const PUBLIC_IMAGE: &str = "redis:7.2";
const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// The label `lockstorm image import` gives its image: the Redis it holds.
pub const VERSION_LABEL: &str = "lockstorm.redis-version";

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
fn bridge_socket() -> std::io::Result<PathBuf> {
    Ok(nemesis::clock::private_dir()?.join(format!("docker-{}.sock", std::process::id())))
}

/// Removes the bridge sockets in `dir` of harnesses that died without
/// removing theirs (a SIGKILL): those whose PID no longer exists.
fn remove_stale_sockets(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix("docker-")?.strip_suffix(".sock"))
            .and_then(|pid| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The daemon, or why not, for `--backend auto` and every error message.
fn daemon() -> Result<PathBuf> {
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

pub struct Docker {
    api: Api,
    /// Held for the run: testcontainers talks through it.
    _bridge: bridge::Bridge,
    image: String,
    image_id: String,
    redis: String,
    labels: reap::Labels,
    reaper: Mutex<Option<reap::Reaper>>,
    /// Numbers container names: a node retried on a taken port is a new container.
    launched: AtomicU32,
}

impl Docker {
    /// Connects to the daemon, removes containers of runs that are gone,
    /// finds the image (pulling it if absent), and starts the bridge and
    /// this run's reaper.
    pub async fn connect(image: Option<&str>) -> Result<Self> {
        let socket = daemon()?;
        let api = client(&socket).await?;
        reap::sweep(&api).await?;
        let (image, image_id, redis) = find_image(&api, image).await?;
        let path = bridge_socket().map_err(|e| Error::Io {
            context: "finding a folder for the Docker bridge's socket".into(),
            source: e,
        })?;
        if let Some(dir) = path.parent() {
            remove_stale_sockets(dir);
        }
        if std::env::var("DOCKER_HOST").ok() != Some(format!("unix://{}", path.display())) {
            // The harness's own fault, not the user's: exit 255.
            return Err(Error::Io {
                context: "starting the Docker backend".into(),
                source: std::io::Error::other(
                    "DOCKER_HOST was not pointed at the bridge before the runtime started (a lockstorm bug: call route_testcontainers first)",
                ),
            });
        }
        let bridge = bridge::Bridge::start(socket.clone(), path, ANSWER)
            .await
            .map_err(|e| match e.kind() {
                // The daemon went silent: its message names the socket.
                std::io::ErrorKind::TimedOut => Error::Usage(e.to_string()),
                _ => Error::Io {
                    context: "starting the Docker API bridge".into(),
                    source: e,
                },
            })?;
        let labels = reap::Labels::fresh();
        let reaper = reap::Reaper::start(&socket, &labels.run).map_err(|e| Error::Io {
            context: "starting the container reaper".into(),
            source: e,
        })?;
        Ok(Docker {
            api,
            _bridge: bridge,
            image,
            image_id,
            redis,
            labels,
            reaper: Mutex::new(Some(reaper)),
            launched: AtomicU32::new(0),
        })
    }

    fn request(&self, l: &Launch) -> testcontainers::ContainerRequest<GenericImage> {
        let (repo, tag) = split_image(&self.image);
        let mut args = l.args.clone();
        if l.program == Program::Sentinel {
            // `redis-sentinel <conf>` is `redis-server <conf> --sentinel`.
            args.insert(1.min(args.len()), "--sentinel".into());
        }
        let dir = l.dir.to_string_lossy().into_owned();
        let n = self.launched.fetch_add(1, Ordering::Relaxed);
        let user = format!(
            "{}:{}",
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw()
        );
        let mut request = GenericImage::new(repo, tag)
            .with_entrypoint("redis-server")
            // Readiness is the node's own check: PING, then its process id.
            .with_wait_for(WaitFor::Nothing)
            .with_cmd(args)
            .with_network("host")
            .with_working_dir(dir.clone())
            .with_mount(Mount::bind_mount(dir.clone(), dir))
            // Files in the results folder belong to whoever runs lockstorm.
            .with_user(user)
            .with_container_name(format!("lockstorm-{}-{}-{n}", self.labels.run, l.name))
            .with_startup_timeout(Duration::from_secs(60))
            .with_host_config_modifier(|host| {
                host.pid_mode = Some("host".into());
                // Host networking publishes nothing; testcontainers asks anyway.
                host.publish_all_ports = Some(false);
                host.port_bindings = None;
            });
        for (key, value) in self.labels.of(&l.name) {
            request = request.with_label(key, value);
        }
        for file in &l.reads {
            let file = file.to_string_lossy().into_owned();
            request = request.with_mount(
                Mount::bind_mount(file.clone(), file).with_access_mode(AccessMode::ReadOnly),
            );
        }
        for (key, value) in &l.env {
            request = request.with_env_var(key, value);
        }
        request
    }
}

impl Provisioner for Docker {
    fn launch(&self, launch: Launch) -> BoxFuture<'_, Result<Box<dyn NodeProcess>>> {
        Box::pin(async move {
            let container = self
                .request(&launch)
                .start()
                .await
                .map_err(|e| Error::Node {
                    name: launch.name.clone(),
                    message: format!("its container did not start from {}: {e}", self.image),
                    log: launch.output.clone(),
                })?;
            let mut node = Container {
                api: self.api.clone(),
                container: Some(container),
                pid: 0,
                output: launch.output,
            };
            node.pid = node.host_pid().await;
            Ok(Box::new(node) as Box<dyn NodeProcess>)
        })
    }

    fn record(&self) -> BackendRecord {
        BackendRecord {
            kind: "docker".into(),
            image: Some(self.image.clone()),
            image_id: Some(self.image_id.clone()),
            run: Some(self.labels.run.clone()),
        }
    }

    fn redis_version(&self) -> String {
        format!("{} (image {})", self.redis, self.image)
    }

    fn finish(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // What a silent daemon keeps, the reaper or a later sweep removes.
            if let Err(e) = reap::remove_run(&self.api, &self.labels.run).await {
                tracing::warn!("{e}");
            }
            let reaper = self.reaper.lock().ok().and_then(|mut r| r.take());
            if let Some(reaper) = reaper {
                reaper.dismiss().await;
            }
        })
    }
}

/// One node's container.
struct Container {
    api: Api,
    container: Option<ContainerAsync<GenericImage>>,
    /// Its `redis-server`'s host PID; 0 while stopped.
    pid: u32,
    output: PathBuf,
}

impl Container {
    fn id(&self) -> Option<String> {
        self.container.as_ref().map(|c| c.id().to_string())
    }

    /// The container's state, or why it cannot be had: the daemon lost it,
    /// or did not answer.
    async fn state(&self, id: &str) -> Result<Option<ContainerState>, String> {
        let what = format!("an inspect of container {id}");
        match self
            .api
            .answer(&what, self.api.docker.inspect_container(id, None))
            .await
        {
            Ok(Ok(info)) => Ok(info.state),
            Ok(Err(e)) => Err(format!("its container is gone ({e})")),
            Err(silent) => Err(silent.to_string()),
        }
    }

    /// The host PID of the container's process, 0 unless it runs.
    async fn host_pid(&self) -> u32 {
        let Some(id) = self.id() else { return 0 };
        match self.state(&id).await {
            Ok(Some(s)) if s.running == Some(true) => s.pid.unwrap_or(0).max(0) as u32,
            _ => 0,
        }
    }

    /// Copies the container's stdout and stderr (every launch's, as Docker
    /// keeps them) into the node's output file.
    async fn keep_output(&self) {
        let Some(container) = &self.container else {
            return;
        };
        // The bridge bounds the wait for the answer; this, a log that stalls.
        let what = format!("the logs of container {}", container.id());
        let logs = async {
            let mut text = container.stdout_to_vec().await.unwrap_or_default();
            text.extend(container.stderr_to_vec().await.unwrap_or_default());
            text
        };
        match self.api.answer(&what, logs).await {
            Ok(text) => {
                let _ = std::fs::write(&self.output, text);
            }
            Err(silent) => tracing::warn!("{silent}"),
        }
    }

    /// SIGKILL, never SIGTERM (`docker stop` sends SIGTERM first, and Redis
    /// would shut down cleanly, flushing what a crash loses); then waits for
    /// the daemon to see it exit.
    async fn kill_now(&mut self) {
        let Some(id) = self.id() else { return };
        let kill = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
        let docker = &self.api.docker;
        let killed = self
            .api
            .answer(
                &format!("the kill of container {id}"),
                docker.kill_container(&id, Some(kill)),
            )
            .await;
        let waited = match killed {
            Ok(Ok(())) => {
                let mut exit = docker.wait_container(&id, None);
                let what = format!("the wait for container {id} to exit");
                self.api.answer(&what, exit.next()).await.map(drop)
            }
            Ok(Err(_)) => Ok(()),
            Err(silent) => Err(silent),
        };
        if let Err(silent) = waited {
            // The run goes on to its end, where whatever is left of it is
            // removed (by the reaper, or a later start's sweep).
            tracing::warn!("{silent}");
        }
        self.pid = 0;
        self.keep_output().await;
    }
}

impl NodeProcess for Container {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn exited(&mut self) -> BoxFuture<'_, Option<String>> {
        Box::pin(async move {
            let id = self.id()?;
            match self.state(&id).await {
                Err(why) => Some(why),
                Ok(Some(s)) if s.running == Some(true) => None,
                Ok(s) => {
                    self.pid = 0;
                    self.keep_output().await;
                    let code = s.and_then(|s| s.exit_code);
                    Some(format!(
                        "container exited with code {}",
                        code.map_or("?".into(), |c| c.to_string())
                    ))
                }
            }
        })
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.kill_now())
    }

    fn restart(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.kill_now().await;
            let Some(container) = &self.container else {
                return Err(Error::Usage("the container was removed".into()));
            };
            let what = format!("the start of container {}", container.id());
            self.api
                .answer(&what, container.start())
                .await?
                .map_err(|e| Error::Io {
                    context: format!("starting container {} again", container.id()),
                    source: std::io::Error::other(e.to_string()),
                })?;
            self.pid = self.host_pid().await;
            Ok(())
        })
    }

    fn remove(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            self.kill_now().await;
            if let Some(container) = self.container.take() {
                let id = container.id().to_string();
                let what = format!("the removal of container {id}");
                let removed = self.api.answer(&what, container.rm()).await;
                if !matches!(removed, Ok(Ok(()))) {
                    let force = RemoveContainerOptionsBuilder::new().force(true).build();
                    let docker = &self.api.docker;
                    let forced = docker.remove_container(&id, Some(force));
                    if let Err(silent) = self.api.answer(&what, forced).await {
                        // The reaper, or a later start's sweep, removes it.
                        tracing::warn!("{silent}");
                    }
                }
            }
        })
    }
}

/// `repo:tag` split for testcontainers (`latest` when untagged; a registry
/// port is not a tag).
fn split_image(image: &str) -> (String, String) {
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), tag.to_string()),
        _ => (image.to_string(), "latest".to_string()),
    }
}

/// The image to run (`--image`, else the imported local image when present,
/// else the public one), pulled if absent: its name, id and Redis version.
async fn find_image(api: &Api, asked: Option<&str>) -> Result<(String, String, String)> {
    let docker = &api.docker;
    let inspect = |name: &str| {
        let what = format!("an inspect of image {name}");
        let name = name.to_string();
        async move { api.answer(&what, docker.inspect_image(&name)).await }
    };
    let name = match asked {
        Some(name) => name.to_string(),
        None if inspect(image::LOCAL_IMAGE).await?.is_ok() => image::LOCAL_IMAGE.into(),
        None => PUBLIC_IMAGE.into(),
    };
    if inspect(&name).await?.is_err() {
        let pull = CreateImageOptionsBuilder::new().from_image(&name).build();
        let mut progress = docker.create_image(Some(pull), None, None);
        let what = format!("the pull of {name}");
        while let Some(step) = api.progress(&what, &mut progress).await? {
            if let Err(e) = step {
                return Err(Error::Usage(format!(
                    "image {name} is not on the Docker daemon and cannot be pulled ({e}): without a registry, run `lockstorm image import` (it builds {} from this machine's redis-server, the default when present); with one, `docker pull {name}`",
                    image::LOCAL_IMAGE
                )));
            }
        }
    }
    let info = inspect(&name).await?.map_err(|e| {
        Error::Usage(format!(
            "image {name} cannot be inspected after the pull ({e})"
        ))
    })?;
    let config = info.config.unwrap_or_default();
    let label = config
        .labels
        .as_ref()
        .and_then(|l| l.get(VERSION_LABEL).cloned());
    let env = config.env.unwrap_or_default().into_iter().find_map(|e| {
        e.strip_prefix("REDIS_VERSION=")
            .map(|v| format!("Redis server v={v}"))
    });
    let redis = label
        .or(env)
        .unwrap_or_else(|| "Redis (version unknown)".into());
    Ok((name, info.id.unwrap_or_default(), redis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_splits_at_its_tag_not_at_a_registry_port() {
        let split = |s| split_image(s);
        assert_eq!(split("redis:7.2"), ("redis".into(), "7.2".into()));
        assert_eq!(
            split("lockstorm/redis:local"),
            ("lockstorm/redis".into(), "local".into())
        );
        assert_eq!(split("redis"), ("redis".into(), "latest".into()));
        assert_eq!(
            split("127.0.0.1:5000/redis"),
            ("127.0.0.1:5000/redis".into(), "latest".into())
        );
        assert_eq!(
            split("127.0.0.1:5000/redis:7"),
            ("127.0.0.1:5000/redis".into(), "7".into())
        );
    }

    #[test]
    fn only_the_bridge_sockets_of_dead_harnesses_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let me = std::process::id();
        for name in [
            format!("docker-{dead}.sock"),
            format!("docker-{me}.sock"),
            "other".into(),
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        remove_stale_sockets(dir.path());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [format!("docker-{me}.sock"), "other".into()]);
    }

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
