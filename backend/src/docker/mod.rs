//! The Docker backend: each node is a container started through
//! testcontainers from one image (a PostgreSQL node from
//! [`image::POSTGRES_IMAGE`], as the user the local backend would run it
//! as), with **host networking** (it binds its own
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
//! a negotiated bollard client ([`api::Api`]). No call waits on the daemon for
//! ever: each answer is awaited for [`api::ANSWER`], each progress message of a
//! pull or an import for [`api::PROGRESS`], here and in the bridge (which answers
//! testcontainers' call with a 504 when the daemon does not). Every
//! container carries the run's labels ([`reap`]): the run removes its
//! containers at its end, a reaper process removes them if the harness dies,
//! and a later start removes those of runs that are provably gone.

pub mod api;
pub mod bridge;
pub mod image;
pub mod reap;

use api::{bridge_socket, client, daemon, Api, ANSWER};
pub use api::{connect_daemon, route_testcontainers};
use image::{split_image, VERSION_LABEL};

use crate::error::{doing, Error, Result};
use crate::provision::{Found, Launch, NodeProcess, Program, Provisioner};
use bollard::models::ContainerState;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, KillContainerOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use nemesis::cluster::BoxFuture;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use store::BackendRecord;
use testcontainers::core::{AccessMode, Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

/// The image used when `--image` is not given and no local image was imported.
pub const PUBLIC_IMAGE: &str = "redis:7.2";

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
        let path = bridge_socket().map_err(doing(
            "finding a folder for the Docker bridge's socket".into(),
        ))?;
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
                _ => doing("starting the Docker API bridge".into())(e),
            })?;
        let labels = reap::Labels::fresh();
        let reaper = reap::Reaper::start(&socket, &labels.run)
            .map_err(doing("starting the container reaper".into()))?;
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

    /// The container for `l`: Redis's from the run's image, PostgreSQL's
    /// from [`image::POSTGRES_IMAGE`] and an etcd member's from
    /// [`image::ETCD_IMAGE`], each with its program's path (`program`) as
    /// its entrypoint; as `l.user` when set (PostgreSQL's user; an etcd
    /// member's own group, which its partition's rules match).
    fn request(
        &self,
        l: &Launch,
        image: &str,
        program: &str,
    ) -> testcontainers::ContainerRequest<GenericImage> {
        let (repo, tag) = split_image(image);
        let mut args = l.args.clone();
        if l.program == Program::Sentinel {
            // `redis-sentinel <conf>` is `redis-server <conf> --sentinel`.
            args.insert(1.min(args.len()), "--sentinel".into());
        }
        let dir = l.dir.to_string_lossy().into_owned();
        let n = self.launched.fetch_add(1, Ordering::Relaxed);
        // Files in the results folder belong to whoever runs lockstorm (or
        // to the server's user, as on the local backend).
        let (uid, gid) = l.user.unwrap_or_else(|| {
            (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        });
        let mut request = GenericImage::new(repo, tag)
            .with_entrypoint(program)
            // Readiness is the node's own check: PING, then its process id.
            .with_wait_for(WaitFor::Nothing)
            .with_cmd(args)
            .with_network("host")
            .with_working_dir(dir.clone())
            .with_mount(Mount::bind_mount(dir.clone(), dir))
            .with_user(format!("{uid}:{gid}"))
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
        for folder in &l.writes {
            let folder = folder.to_string_lossy().into_owned();
            request = request.with_mount(Mount::bind_mount(folder.clone(), folder));
        }
        for (key, value) in &l.env {
            request = request.with_env_var(key, value);
        }
        request
    }

    /// The image and entrypoint of `program`'s containers. PostgreSQL's
    /// and etcd's images must have been imported: nothing to pull them from.
    /// Each holds its program at the path the local backend finds it at.
    async fn image_of(&self, program: &Program) -> Result<(String, String)> {
        let (image, from, entrypoint) = match program {
            Program::Server | Program::Sentinel => {
                return Ok((self.image.clone(), "redis-server".into()))
            }
            Program::Found(Found {
                image: Some((image, from)),
                path,
                ..
            }) => (*image, *from, path),
            Program::Found(found) => {
                return Err(Error::Usage(format!(
                    "{} runs on the local backend only: add --backend local",
                    found.path.display()
                )))
            }
        };
        let what = format!("an inspect of image {image}");
        let found = self
            .api
            .answer(&what, self.api.docker.inspect_image(image))
            .await?;
        if found.is_err() {
            return Err(Error::Usage(format!(
                "image {image} is not on the Docker daemon: run `lockstorm image import` (it builds it from this machine's {from}), or add --backend local"
            )));
        }
        Ok((image.into(), entrypoint.to_string_lossy().into_owned()))
    }
}

impl Provisioner for Docker {
    fn launch(&self, launch: Launch) -> BoxFuture<'_, Result<Box<dyn NodeProcess>>> {
        Box::pin(async move {
            if launch.served_clock.is_some() {
                return Err(Error::Usage(format!(
                    "node {}: the clock nemesis moves an etcd member's clock only on the local backend (the harness serves it to the member's process, which it cannot do in a container): add --backend local, or choose another --nemesis",
                    launch.name
                )));
            }
            let (image, program) = self.image_of(&launch.program).await?;
            let container = self
                .request(&launch, &image, &program)
                .start()
                .await
                .map_err(|e| Error::Node {
                    name: launch.name.clone(),
                    message: format!("its container did not start from {image}: {e}"),
                    log: launch.output.clone(),
                })?;
            let mut node = Container {
                api: self.api.clone(),
                container: Some(container),
                pid: 0,
                output: launch.output,
                forget_on_restart: launch.forget_on_restart,
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
            hosts: Vec::new(),
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
    /// Its server's (`redis-server`, `postgres`) host PID; 0 while stopped.
    pid: u32,
    output: PathBuf,
    /// What a restart starts without (the launch's).
    forget_on_restart: Vec<PathBuf>,
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
        // The host's PID namespace: children that left the server's group
        // (PostgreSQL's backends) would outlive its kill.
        let strays = match self.pid {
            0 => Vec::new(),
            pid => process::kill_children(pid),
        };
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
        let gone = tokio::task::spawn_blocking(move || {
            process::wait_gone(&strays, std::time::Duration::from_secs(5))
        });
        if !matches!(gone.await, Ok(true)) {
            tracing::warn!("container {id}: a child of its killed server still runs");
        }
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
            // The node's folder is this host's, mounted in the container.
            crate::local::forget(&self.forget_on_restart);
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
}
