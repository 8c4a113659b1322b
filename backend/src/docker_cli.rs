//! What the command line asks of the Docker backend, whether it is built in
//! or not. With the `docker` feature these reach the daemon; without it,
//! routing and reaping have nothing to do and the rest say how to build it
//! in. The harness has no feature of its own for it: a user's
//! `cargo run --features docker` and `cargo test --workspace` (which builds
//! this crate with its default features) get the same binary.

use crate::{Backend, Error, Result};
use std::path::Path;

/// How to get the Docker backend when it was left out.
pub const LEFT_OUT: &str = "this lockstorm was built without the Docker backend (it is a cargo feature, left out of the default build to keep the first build short): run it as `cargo run --features docker -- …`, or build it with `cargo build --release --features docker`";

/// testcontainers finds the daemon through `DOCKER_HOST`, which may only
/// change before the runtime's threads start.
pub fn route(backend: Backend) {
    #[cfg(feature = "docker")]
    if backend != Backend::Local {
        crate::docker::route_testcontainers();
    }
    #[cfg(not(feature = "docker"))]
    let _ = backend;
}

/// `lockstorm reap`: removes a run's containers; none without Docker.
pub fn reap(daemon: &Path, run: &str) -> std::io::Result<usize> {
    #[cfg(feature = "docker")]
    return crate::docker::reap::reap(daemon, run);
    #[cfg(not(feature = "docker"))]
    {
        let _ = (daemon, run);
        Ok(0)
    }
}

/// `lockstorm image import`: the lines it prints, one per image.
#[cfg(not(feature = "docker"))]
pub async fn import_images(_tag: &str) -> Result<String> {
    Err(Error::Usage(LEFT_OUT.into()))
}

/// `lockstorm image import`: the lines it prints, one per image (Redis's,
/// then PostgreSQL's and etcd's, or why each was skipped).
#[cfg(feature = "docker")]
pub async fn import_images(tag: &str) -> Result<String> {
    use crate::docker::image;
    let server = crate::local::find_redis_server()?;
    let postgres = crate::postgres::Programs::find();
    let etcd = crate::etcd::find();
    let api = crate::docker::connect_daemon().await?;
    let from = server.clone();
    let redis = image::import(&api, move || image::redis(&from), tag).await;
    let mut said = imported_line(&redis.map_err(Error::Usage)?, &server);
    let pg_from = |p: &crate::postgres::Programs| p.server();
    let pg_plan = |p: &crate::postgres::Programs| image::postgres(p);
    said += &import_or_skip(
        &api,
        postgres,
        pg_from,
        pg_plan,
        image::POSTGRES_IMAGE,
        "PostgreSQL",
    )
    .await?;
    let etcd_plan = |p: &std::path::PathBuf| image::etcd(p);
    said += &import_or_skip(
        &api,
        etcd,
        Clone::clone,
        etcd_plan,
        image::ETCD_IMAGE,
        "etcd members",
    )
    .await?;
    Ok(said)
}

/// Imports `image` from what was `found` (`from` names its program for the
/// line), or says why it skipped it: Redis-only machines are fine, and the
/// line says what the runs that need the image lack.
#[cfg(feature = "docker")]
async fn import_or_skip<T: Send + 'static>(
    api: &crate::docker::api::Api,
    found: Result<T>,
    from: impl Fn(&T) -> std::path::PathBuf,
    plan: fn(&T) -> std::result::Result<crate::docker::image::Plan, String>,
    image: &str,
    runs: &str,
) -> Result<String> {
    match found {
        Ok(found) => {
            let program = from(&found);
            let imported = crate::docker::image::import(api, move || plan(&found), image).await;
            Ok(imported_line(&imported.map_err(Error::Usage)?, &program))
        }
        Err(why) => Ok(format!(
            "skipped {image}, which --backend docker runs {runs} from: {why}\n"
        )),
    }
}

#[cfg(feature = "docker")]
fn imported_line(imported: &crate::docker::image::Imported, from: &Path) -> String {
    format!(
        "imported {} ({}, {} files, {:.1} MB) from {} in {:.1} s\n",
        imported.image,
        imported.version,
        imported.files,
        imported.bytes as f64 / 1e6,
        from.display(),
        imported.took.as_secs_f64()
    )
}
