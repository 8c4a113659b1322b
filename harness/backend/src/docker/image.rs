//! `lockstorm image import`: an image made from the host's own `redis-server`
//! for machines that cannot pull `redis:7.2` (no registry, as in CI).
//!
//! The image holds the real binary, every library `ldd` names (at the path
//! `ldd` names, so the loader's default search finds them without an
//! `ld.so.cache`) and the loader itself: nothing else, no shell. Nodes run it
//! with host networking and the host's PID namespace, so it needs no `/etc`.

use super::api::Api;
use bollard::query_parameters::CreateImageOptionsBuilder;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The image `lockstorm image import` makes, and the default `--image` when present.
pub const LOCAL_IMAGE: &str = "lockstorm/redis:local";
/// The label `lockstorm image import` gives its image: the Redis it holds.
pub const VERSION_LABEL: &str = "lockstorm.redis-version";

/// Where the binary goes: on the image's PATH, named so that Redis starts
/// as a server (it picks its mode from `argv[0]`, e.g. `redis-check-rdb`).
const BINARY: &str = "/usr/local/bin/redis-server";

/// One thing in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file copied from the host (symlinks followed).
    File { from: PathBuf, mode: u32 },
    /// A symbolic link to `target`.
    Symlink { target: PathBuf },
    /// A folder.
    Dir { mode: u32 },
}

/// What goes into the image: every entry by its absolute path inside the
/// image. Pure given the host's answers; built by [`plan`]. Sorted by path,
/// so every folder comes before what it holds.
#[derive(Debug, Clone, Default)]
pub struct Rootfs {
    entries: BTreeMap<PathBuf, Entry>,
}

impl Rootfs {
    /// The entries in archive order.
    pub fn entries(&self) -> impl Iterator<Item = (&Path, &Entry)> {
        self.entries.iter().map(|(p, e)| (p.as_path(), e))
    }

    /// The entry at `path` inside the image.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(Path::new(path))
    }

    /// Adds `entry` at `path` and the folders above it (mode 755) unless present.
    fn add(&mut self, path: &Path, entry: Entry) {
        for dir in path.ancestors().skip(1).filter(|d| *d != Path::new("/")) {
            self.entries
                .entry(dir.to_path_buf())
                .or_insert(Entry::Dir { mode: 0o755 });
        }
        self.entries.insert(path.to_path_buf(), entry);
    }

    /// Copies the host file `from` (symlinks followed) to `path` with its mode.
    fn copy(&mut self, path: &Path, from: &Path) -> Result<(), String> {
        let meta = std::fs::metadata(from)
            .map_err(|e| format!("cannot read {} for the image: {e}", from.display()))?;
        let mode = meta.permissions().mode() & 0o777;
        self.add(
            path,
            Entry::File {
                from: from.to_path_buf(),
                mode,
            },
        );
        Ok(())
    }
}

/// Finds the files for `server` (the host's redis-server, symlinks
/// resolved): the binary at /usr/local/bin/redis-server with redis-sentinel
/// beside it as a symlink, each library `ldd` names and the loader, and
/// empty /tmp (mode 1777) and /data folders.
pub fn plan(server: &Path) -> Result<Rootfs, String> {
    let fix = "set LOCKSTORM_REDIS_SERVER to a redis-server binary";
    let binary = std::fs::canonicalize(server)
        .map_err(|e| format!("cannot find {}: {e}: {fix}", server.display()))?;
    let mut magic = [0u8; 4];
    std::fs::File::open(&binary)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(|e| format!("cannot read {}: {e}: {fix}", binary.display()))?;
    if magic != *b"\x7fELF" {
        return Err(format!(
            "{} is not an ELF executable: {fix}",
            binary.display()
        ));
    }
    let ldd = Command::new("ldd").arg(&binary).output().map_err(|e| {
        format!("cannot run ldd to list the libraries of {}: {e}: install it (`apt-get install -y libc-bin`)", binary.display())
    })?;
    let stdout = String::from_utf8_lossy(&ldd.stdout);
    if !ldd.status.success() {
        let said = format!("{stdout} {}", String::from_utf8_lossy(&ldd.stderr));
        return Err(format!(
            "ldd cannot list the libraries of {}: {}: use a dynamically linked redis-server built for this machine (a static one is not supported), or {fix}",
            binary.display(),
            said.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    let mut rootfs = Rootfs::default();
    rootfs.copy(Path::new(BINARY), &binary)?;
    rootfs.add(
        Path::new("/usr/local/bin/redis-sentinel"),
        Entry::Symlink {
            target: "redis-server".into(),
        },
    );
    for library in parse_ldd(&binary, &stdout)? {
        rootfs.copy(&library, &library)?;
    }
    rootfs.add(Path::new("/tmp"), Entry::Dir { mode: 0o1777 });
    rootfs.add(Path::new("/data"), Entry::Dir { mode: 0o755 });
    Ok(rootfs)
}

/// The absolute paths in `ldd`'s output. Its lines are `name => /path (0x…)`,
/// `/path (0x…)` (the loader), `name (0x…)` (the kernel's vdso: no file),
/// `name => not found`, or `statically linked`.
fn parse_ldd(binary: &Path, stdout: &str) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, path) = match line.split_once(" => ") {
            Some((name, path)) => (name, path),
            None => (line, line),
        };
        let path = path.rsplit_once(" (0x").map_or(path, |(p, _)| p).trim();
        if path == "not found" {
            return Err(format!(
                "{} needs {name}, which is not installed: install the package that has it (`apt-file search {name}`), or use a redis-server whose libraries are all installed",
                binary.display()
            ));
        }
        if path.starts_with('/') {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

/// The tar archive of `rootfs`, in memory (the image is ~20 MB): paths
/// relative to the root, owner root, mtime 0, so the same files give the
/// same bytes.
pub fn tarball(rootfs: &Rootfs) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, entry) in rootfs.entries() {
        let relative = path.strip_prefix("/").unwrap_or(path);
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        match entry {
            Entry::File { from, mode } => {
                let file = std::fs::File::open(from)?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(*mode);
                header.set_size(file.metadata()?.len());
                tar.append_data(&mut header, relative, file)?;
            }
            Entry::Symlink { target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                tar.append_link(&mut header, relative, target)?;
            }
            Entry::Dir { mode } => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(*mode);
                header.set_size(0);
                tar.append_data(&mut header, relative, std::io::empty())?;
            }
        }
    }
    tar.into_inner()
}

/// What [`import`] made.
#[derive(Debug, Clone)]
pub struct Imported {
    /// `repo:tag`.
    pub image: String,
    /// The daemon's id of the new image (`sha256:…`).
    pub id: String,
    /// The size of the imported tarball.
    pub bytes: u64,
    /// Regular files copied from the host (binary, libraries, loader).
    pub files: usize,
    /// `redis-server --version` of the host binary, also the image's label.
    pub redis_version: String,
    /// From the first look at `server` to the inspected image.
    pub took: Duration,
}

/// Builds the tarball for `server` and imports it into the daemon as
/// `image` (repo:tag), with PATH, WORKDIR /data, ENTRYPOINT redis-server and
/// the [`VERSION_LABEL`] label; returns the new image's id.
pub async fn import(api: &Api, server: &Path, image: &str) -> Result<Imported, String> {
    let start = Instant::now();
    // Reading ~20 MB and running ldd and redis-server block: keep them off
    // the runtime's workers (the bridge to the daemon may share them).
    let host = server.to_path_buf();
    let (tar, files, version) = tokio::task::spawn_blocking(move || {
        let rootfs = plan(&host)?;
        let version = version_of(&host)?;
        let files = rootfs
            .entries()
            .filter(|(_, e)| matches!(e, Entry::File { .. }))
            .count();
        let tar = tarball(&rootfs).map_err(|e| {
            format!(
                "cannot build the image's tarball from {}: {e}",
                host.display()
            )
        })?;
        Ok::<_, String>((tar, files, version))
    })
    .await
    .map_err(|e| format!("building the image's tarball failed: {e}"))??;
    let bytes = tar.len() as u64;
    // The daemon (20.10 and later) parses `changes` as Dockerfile lines;
    // LABEL is accepted there although the API reference does not list it.
    let label = version.replace('\\', "\\\\").replace('"', "\\\"");
    let changes = vec![
        "ENV PATH=/usr/local/bin:/usr/bin:/bin".to_string(),
        "WORKDIR /data".to_string(),
        r#"ENTRYPOINT ["redis-server"]"#.to_string(),
        format!(r#"LABEL {}="{label}""#, VERSION_LABEL),
    ];
    let (repo, tag) = split_image(image);
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(&repo)
        .tag(&tag)
        .message("lockstorm image import")
        .changes(changes)
        .build();
    let docker = &api.docker;
    let mut progress =
        docker.create_image(Some(options), Some(bollard::body_full(tar.into())), None);
    // Timed per progress message, not as a whole: a slow disk makes a long
    // import, a silent daemon a stuck one.
    let what = format!("the import of {image}");
    while let Some(step) = api
        .progress(&what, &mut progress)
        .await
        .map_err(|e| e.to_string())?
    {
        step.map_err(|e| {
            format!("the Docker daemon refused the import of {image}: {e}: check `docker info` and the daemon's log")
        })?;
    }
    let what = format!("an inspect of image {image}");
    let info = api
        .answer(&what, docker.inspect_image(image))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| {
            format!("the Docker daemon accepted the import but cannot show {image}: {e}: check `docker images`")
        })?;
    Ok(Imported {
        image: image.to_string(),
        id: info.id.unwrap_or_default(),
        bytes,
        files,
        redis_version: version,
        took: start.elapsed(),
    })
}

/// `server --version`, one line.
fn version_of(server: &Path) -> Result<String, String> {
    let out = Command::new(server)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {} --version: {e}", server.display()))?;
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || line.is_empty() {
        return Err(format!(
            "{} --version failed ({}): set LOCKSTORM_REDIS_SERVER to a working redis-server",
            server.display(),
            out.status
        ));
    }
    Ok(line)
}

/// `repo:tag` split for testcontainers (`latest` when untagged; a registry
/// port is not a tag).
pub(super) fn split_image(image: &str) -> (String, String) {
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo.to_string(), tag.to_string()),
        _ => (image.to_string(), "latest".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_SERVER: &str = "/usr/bin/redis-server";

    #[test]
    fn the_plan_holds_the_binary_its_libraries_and_the_loader() {
        let rootfs = plan(Path::new(HOST_SERVER)).unwrap();
        let resolved = std::fs::canonicalize(HOST_SERVER).unwrap();
        match rootfs.get(BINARY) {
            Some(Entry::File { from, mode }) => {
                assert_eq!(
                    std::fs::read(from).unwrap(),
                    std::fs::read(&resolved).unwrap()
                );
                assert_eq!(mode & 0o111, 0o111, "the binary is executable");
            }
            other => panic!("{BINARY} is {other:?}"),
        }
        assert_eq!(
            rootfs.get("/usr/local/bin/redis-sentinel"),
            Some(&Entry::Symlink {
                target: "redis-server".into()
            })
        );
        let names: Vec<String> = rootfs
            .entries()
            .map(|(p, _)| p.display().to_string())
            .collect();
        let has = |part: &str| names.iter().any(|n| n.contains(part));
        assert!(has("/ld-linux"), "the loader is in {names:?}");
        assert!(has("/libc.so"), "libc is in {names:?}");
        assert!(!has("vdso"), "no vdso in {names:?}");
        assert_eq!(rootfs.get("/tmp"), Some(&Entry::Dir { mode: 0o1777 }));
        assert!(matches!(rootfs.get("/data"), Some(Entry::Dir { .. })));
    }

    #[test]
    fn ldd_output_gives_paths_and_names_what_is_missing() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let paths = parse_ldd(Path::new("x"), ldd).unwrap();
        assert_eq!(
            paths,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                "/lib64/ld-linux-x86-64.so.2".into()
            ]
        );
        assert!(parse_ldd(Path::new("x"), "\tstatically linked\n")
            .unwrap()
            .is_empty());
        let err = parse_ldd(Path::new("x"), "\tlibssl.so.3 => not found\n").unwrap_err();
        assert!(err.contains("needs libssl.so.3"), "{err}");
    }

    #[test]
    fn the_tarball_holds_every_entry_with_its_type_and_mode() {
        let rootfs = plan(Path::new(HOST_SERVER)).unwrap();
        let bytes = tarball(&rootfs).unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut read = BTreeMap::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let path = entry.path().unwrap().into_owned();
            assert!(!path.has_root(), "{} is relative", path.display());
            let header = entry.header();
            let link = entry.link_name().unwrap().map(|l| l.into_owned());
            read.insert(
                Path::new("/").join(path),
                (
                    header.entry_type(),
                    header.mode().unwrap(),
                    header.size().unwrap(),
                    link,
                ),
            );
        }
        assert_eq!(read.len(), rootfs.entries().count());
        for (path, entry) in rootfs.entries() {
            let got = read
                .get(path)
                .unwrap_or_else(|| panic!("{} is in the tarball", path.display()));
            let want = match entry {
                Entry::File { from, mode } => (
                    tar::EntryType::Regular,
                    *mode,
                    std::fs::metadata(from).unwrap().len(),
                    None,
                ),
                Entry::Symlink { target } => {
                    (tar::EntryType::Symlink, 0o777, 0, Some(target.clone()))
                }
                Entry::Dir { mode } => (tar::EntryType::Directory, *mode, 0, None),
            };
            assert_eq!(*got, want, "{}", path.display());
        }
    }

    #[test]
    fn a_file_that_is_not_elf_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("redis-server");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let err = plan(&script).unwrap_err();
        assert!(
            err.contains("is not an ELF executable") && err.contains("LOCKSTORM_REDIS_SERVER"),
            "{err}"
        );
    }

    #[tokio::test]
    #[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --lib docker:: -- --ignored)"]
    async fn an_import_makes_an_image_that_starts_redis_server() {
        // Asked for by --ignored: no daemon (DOCKER_HOST, else the default
        // socket) fails it below rather than passing.
        let api = super::super::api::connect_daemon().await.unwrap();
        let docker = api.docker.clone();
        let image = format!("lockstorm/redis:test-{}", std::process::id());
        // Removing it at the end is only right if this test made it.
        assert!(
            docker.inspect_image(&image).await.is_err(),
            "{image} exists already: remove it first"
        );
        let imported = import(&api, Path::new(HOST_SERVER), &image).await;
        // Inspect, then remove whatever was made, then judge.
        let info = docker.inspect_image(&image).await;
        if info.is_ok() {
            let _ = docker
                .remove_image(
                    &image,
                    None::<bollard::query_parameters::RemoveImageOptions>,
                    None,
                )
                .await;
        }
        let imported = imported.unwrap();
        let config = info.unwrap().config.unwrap();
        eprintln!(
            "{} {} bytes, {} files, {:?}",
            imported.image, imported.bytes, imported.files, imported.took
        );
        assert!(imported.id.starts_with("sha256:"), "{}", imported.id);
        assert_eq!(config.entrypoint, Some(vec!["redis-server".to_string()]));
        assert_eq!(config.working_dir.as_deref(), Some("/data"));
        assert!(config
            .env
            .unwrap()
            .contains(&"PATH=/usr/local/bin:/usr/bin:/bin".to_string()));
        let label = config.labels.unwrap().get(VERSION_LABEL).cloned();
        assert_eq!(label.as_deref(), Some(imported.redis_version.as_str()));
        assert!(
            imported.redis_version.starts_with("Redis server v="),
            "{}",
            imported.redis_version
        );
    }

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
}
