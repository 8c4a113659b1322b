//! `lockstorm image import`: images made from the host's own programs, for
//! machines that cannot pull `redis:7.2` (no registry, as in CI).
//!
//! One way to build them, three plans through it ([`Plan`]): `lockstorm/redis:local`
//! from the host's `redis-server` ([`redis`]), `lockstorm/postgres:local`
//! from the host's PostgreSQL ([`postgres`]) and `lockstorm/etcd:local` from
//! the host's etcd ([`etcd`]). An image holds the real binary,
//! every library `ldd` names (at the path `ldd` names, so the loader's
//! default search finds them without an `ld.so.cache`) and the loader
//! itself, plus what the program reads at run time: nothing else, no shell.
//! Nodes run it with host networking and the host's PID namespace, so it
//! needs no `/etc`.

use super::api::Api;
use crate::postgres::{Programs, POSTGRES_TIMEZONE};
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
/// The image of the PostgreSQL nodes (`--storage postgres`, the `pg-*` configs).
pub const POSTGRES_IMAGE: &str = crate::postgres::IMAGE;
/// The label of [`POSTGRES_IMAGE`]: the PostgreSQL it holds.
pub const POSTGRES_VERSION_LABEL: &str = "lockstorm.postgres-version";

/// The image of the etcd members (the `etcd` configs and topology).
pub const ETCD_IMAGE: &str = crate::etcd::IMAGE;
/// The label of [`ETCD_IMAGE`]: the etcd it holds.
pub const ETCD_VERSION_LABEL: &str = "lockstorm.etcd-version";

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
/// image. Pure given the host's answers; built by a [`Plan`]. Sorted by path,
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

    /// How many regular files it copies from the host.
    pub fn files(&self) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e, Entry::File { .. }))
            .count()
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

    /// Copies the host folder `from` (its files, symlinks followed, and its
    /// folders) to the same path.
    fn copy_tree(&mut self, from: &Path) -> Result<(), String> {
        let read = std::fs::read_dir(from)
            .map_err(|e| format!("cannot read {} for the image: {e}", from.display()))?;
        for entry in read {
            let path = entry
                .map_err(|e| format!("cannot read {} for the image: {e}", from.display()))?
                .path();
            match path.is_dir() {
                true => self.copy_tree(&path)?,
                false => self.copy(&path, &path)?,
            }
        }
        Ok(())
    }

    /// Copies the ELF executable `binary` (symlinks resolved) to `at`, with
    /// every library `ldd` names and the loader at their own paths. `fix`
    /// ends each refusal: how to point lockstorm at another binary.
    fn executable(&mut self, at: &Path, binary: &Path, fix: &str) -> Result<(), String> {
        let name = binary.file_name().map_or_else(
            || binary.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let resolved = std::fs::canonicalize(binary)
            .map_err(|e| format!("cannot find {}: {e}: {fix}", binary.display()))?;
        let mut magic = [0u8; 4];
        std::fs::File::open(&resolved)
            .and_then(|mut f| f.read_exact(&mut magic))
            .map_err(|e| format!("cannot read {}: {e}: {fix}", resolved.display()))?;
        if magic != *b"\x7fELF" {
            return Err(format!(
                "{} is not an ELF executable: {fix}",
                resolved.display()
            ));
        }
        let ldd = process::output_within(Command::new("ldd").arg(&resolved), crate::PROBE_WITHIN).map_err(|e| {
            format!("cannot run ldd to list the libraries of {}: {e}: install it (`apt-get install -y libc-bin`)", resolved.display())
        })?;
        let stdout = String::from_utf8_lossy(&ldd.stdout);
        if !ldd.status.success() {
            let said = format!("{stdout} {}", String::from_utf8_lossy(&ldd.stderr));
            return Err(format!(
                "ldd cannot list the libraries of {}: {}: use a dynamically linked {name} built for this machine (a static one is not supported), or {fix}",
                resolved.display(),
                said.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
        self.copy(at, &resolved)?;
        for library in parse_ldd(&resolved, &name, &stdout)? {
            self.copy(&library, &library)?;
        }
        Ok(())
    }
}

/// An image to build from host files: what it holds, how it starts, and
/// the program's version (its label).
#[derive(Debug, Clone)]
pub struct Plan {
    pub rootfs: Rootfs,
    /// The image's PATH.
    path: String,
    workdir: String,
    /// The program the container runs.
    pub entrypoint: String,
    /// The label naming the version, and the version (`--version`).
    label: &'static str,
    pub version: String,
}

impl Plan {
    /// The Dockerfile lines the import applies. The daemon (20.10 and
    /// later) parses `changes` as Dockerfile lines; LABEL is accepted there
    /// although the API reference does not list it.
    fn changes(&self) -> Vec<String> {
        let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        vec![
            format!("ENV PATH={}", self.path),
            format!("WORKDIR {}", self.workdir),
            format!(r#"ENTRYPOINT ["{}"]"#, quote(&self.entrypoint)),
            format!(r#"LABEL {}="{}""#, self.label, quote(&self.version)),
        ]
    }
}

/// The Redis image for `server` (the host's redis-server): the binary at
/// /usr/local/bin/redis-server with redis-sentinel beside it as a symlink,
/// its libraries and the loader, and empty /tmp (mode 1777) and /data folders.
pub fn redis(server: &Path) -> Result<Plan, String> {
    Ok(Plan {
        rootfs: redis_rootfs(server)?,
        path: "/usr/local/bin:/usr/bin:/bin".into(),
        workdir: "/data".into(),
        entrypoint: "redis-server".into(),
        label: VERSION_LABEL,
        version: version_of(server)?,
    })
}

fn redis_rootfs(server: &Path) -> Result<Rootfs, String> {
    let mut rootfs = Rootfs::default();
    let fix = "set LOCKSTORM_REDIS_SERVER to a redis-server binary";
    rootfs.executable(Path::new(BINARY), server, fix)?;
    rootfs.add(
        Path::new("/usr/local/bin/redis-sentinel"),
        Entry::Symlink {
            target: "redis-server".into(),
        },
    );
    rootfs.add(Path::new("/tmp"), Entry::Dir { mode: 0o1777 });
    rootfs.add(Path::new("/data"), Entry::Dir { mode: 0o755 });
    Ok(rootfs)
}

/// The PostgreSQL image for `programs` (the host's): `postgres` at its own
/// path (a symlink at the path `programs` names, if that is one), its
/// libraries and the loader, its library folder (`pg_config --pkglibdir`)
/// empty, the time zone abbreviations of its share folder (`pg_config
/// --sharedir`: it reads one set at start) and the zone file of
/// [`POSTGRES_TIMEZONE`], and an empty /tmp. No data folder: a run's
/// is a copy of the template `initdb` made on the host, bind-mounted.
pub fn postgres(programs: &Programs) -> Result<Plan, String> {
    let server = programs.server();
    let fix = "set LOCKSTORM_POSTGRES_BIN to the folder of another PostgreSQL's postgres";
    let resolved = std::fs::canonicalize(&server)
        .map_err(|e| format!("cannot find {}: {e}: {fix}", server.display()))?;
    let mut rootfs = Rootfs::default();
    rootfs.executable(&resolved, &server, fix)?;
    if resolved != server {
        rootfs.add(
            &server,
            Entry::Symlink {
                target: resolved.clone(),
            },
        );
    }
    let config = pg_config(&resolved, fix)?;
    let share = config("--sharedir")?;
    // It will not start without its library folder, but loads nothing from
    // it for lockstorm's statements: the folder alone.
    rootfs.add(
        Path::new(&config("--pkglibdir")?),
        Entry::Dir { mode: 0o755 },
    );
    rootfs.copy_tree(&Path::new(&share).join("timezonesets"))?;
    // Debian's PostgreSQL reads the system's zone files, others their own.
    let configure = config("--configure")?;
    let zones = configure
        .split('\'')
        .find_map(|a| a.strip_prefix("--with-system-tzdata="))
        .map_or_else(|| Path::new(&share).join("timezone"), PathBuf::from);
    rootfs.copy(
        &zones.join(POSTGRES_TIMEZONE),
        &zones.join(POSTGRES_TIMEZONE),
    )?;
    rootfs.add(Path::new("/tmp"), Entry::Dir { mode: 0o1777 });
    let bin = server.parent().unwrap_or(Path::new("/"));
    Ok(Plan {
        rootfs,
        path: format!("{}:/usr/bin:/bin", bin.display()),
        workdir: "/".into(),
        entrypoint: server.display().to_string(),
        label: POSTGRES_VERSION_LABEL,
        version: programs.version(),
    })
}

/// The etcd image for `etcd` (the host's): the binary at its own path, its
/// libraries and the loader, and an empty /tmp. A member's data folder is
/// in its node folder, bind-mounted; it names its peers by address, so it
/// needs no `/etc`.
pub fn etcd(etcd: &Path) -> Result<Plan, String> {
    let fix = "set LOCKSTORM_ETCD_BIN to the folder of another etcd";
    let mut rootfs = Rootfs::default();
    rootfs.executable(etcd, etcd, fix)?;
    rootfs.add(Path::new("/tmp"), Entry::Dir { mode: 0o1777 });
    let bin = etcd.parent().unwrap_or(Path::new("/"));
    Ok(Plan {
        rootfs,
        path: format!("{}:/usr/bin:/bin", bin.display()),
        workdir: "/".into(),
        entrypoint: etcd.display().to_string(),
        label: ETCD_VERSION_LABEL,
        version: crate::etcd::version_of(etcd)?,
    })
}

/// Asks the `pg_config` beside `server` (else on PATH) one question.
fn pg_config<'a>(
    server: &'a Path,
    fix: &'a str,
) -> Result<impl Fn(&str) -> Result<String, String> + 'a, String> {
    let beside = server.with_file_name("pg_config");
    let program = match beside.is_file() {
        true => beside,
        false => PathBuf::from("pg_config"),
    };
    Ok(move |question: &str| {
        let out = process::output_within(Command::new(&program).arg(question), crate::PROBE_WITHIN).map_err(|e| {
            format!("cannot run {} {question} to find PostgreSQL's files: {e}: install it (`apt-get install -y postgresql`), or {fix}", program.display())
        })?;
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        match out.status.success() && !answer.is_empty() {
            true => Ok(answer),
            false => Err(format!(
                "{} {question} failed ({}): {fix}",
                program.display(),
                out.status
            )),
        }
    })
}

/// The absolute paths in `ldd`'s output for `binary` (`name`, for the
/// message). Its lines are `lib => /path (0x…)`, `/path (0x…)` (the loader),
/// `lib (0x…)` (the kernel's vdso: no file), `lib => not found`, or
/// `statically linked`.
fn parse_ldd(binary: &Path, name: &str, stdout: &str) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (lib, path) = match line.split_once(" => ") {
            Some((lib, path)) => (lib, path),
            None => (line, line),
        };
        let path = path.rsplit_once(" (0x").map_or(path, |(p, _)| p).trim();
        if path == "not found" {
            return Err(format!(
                "{} needs {lib}, which is not installed: install the package that has it (`apt-file search {lib}`), or use a {name} whose libraries are all installed",
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
    /// Regular files copied from the host (binary, libraries, loader, data).
    pub files: usize,
    /// The program's `--version`, also the image's label.
    pub version: String,
    /// From the first look at the host's files to the inspected image.
    pub took: Duration,
}

/// Makes the [`Plan`] (`plan`: [`redis`] or [`postgres`]), builds its
/// tarball and imports it into the daemon as `image` (repo:tag) with the
/// plan's PATH, WORKDIR, ENTRYPOINT and version label.
pub async fn import<F>(api: &Api, plan: F, image: &str) -> Result<Imported, String>
where
    F: FnOnce() -> Result<Plan, String> + Send + 'static,
{
    let start = Instant::now();
    // Reading tens of MB and running ldd and the program block: keep them
    // off the runtime's workers (the bridge to the daemon may share them).
    let (tar, files, plan) = tokio::task::spawn_blocking(move || {
        let plan = plan()?;
        let tar = tarball(&plan.rootfs).map_err(|e| {
            format!(
                "cannot build the image's tarball for {}: {e}",
                plan.entrypoint
            )
        })?;
        Ok::<_, String>((tar, plan.rootfs.files(), plan))
    })
    .await
    .map_err(|e| format!("building the image's tarball failed: {e}"))??;
    let bytes = tar.len() as u64;
    let (repo, tag) = split_image(image);
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(&repo)
        .tag(&tag)
        .message("lockstorm image import")
        .changes(plan.changes())
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
        version: plan.version,
        took: start.elapsed(),
    })
}

/// `server --version`, one line.
fn version_of(server: &Path) -> Result<String, String> {
    let out = process::output_within(Command::new(server).arg("--version"), crate::PROBE_WITHIN)
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
        let rootfs = redis_rootfs(Path::new(HOST_SERVER)).unwrap();
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
        let paths = parse_ldd(Path::new("x"), "x", ldd).unwrap();
        assert_eq!(
            paths,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                "/lib64/ld-linux-x86-64.so.2".into()
            ]
        );
        assert!(parse_ldd(Path::new("x"), "x", "\tstatically linked\n")
            .unwrap()
            .is_empty());
        let err = parse_ldd(Path::new("x"), "x", "\tlibssl.so.3 => not found\n").unwrap_err();
        assert!(err.contains("needs libssl.so.3"), "{err}");
    }

    #[test]
    fn the_tarball_holds_every_entry_with_its_type_and_mode() {
        let rootfs = redis_rootfs(Path::new(HOST_SERVER)).unwrap();
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
        let err = redis_rootfs(&script).unwrap_err();
        assert!(
            err.contains("is not an ELF executable") && err.contains("LOCKSTORM_REDIS_SERVER"),
            "{err}"
        );
    }

    #[test]
    fn the_postgres_plan_holds_the_server_at_its_path_and_what_it_reads() {
        let programs = Programs::find().unwrap();
        let server = programs.server();
        let plan = postgres(&programs).unwrap();
        let resolved = std::fs::canonicalize(&server).unwrap();
        let at = |p: &Path| plan.rootfs.get(p.to_str().unwrap());
        assert!(
            matches!(at(&resolved), Some(Entry::File { mode, .. }) if mode & 0o111 == 0o111),
            "{} is the executable server",
            resolved.display()
        );
        if resolved != server {
            assert!(matches!(at(&server), Some(Entry::Symlink { .. })));
        }
        assert_eq!(plan.entrypoint, server.display().to_string());
        let names: Vec<String> = plan
            .rootfs
            .entries()
            .map(|(p, _)| p.display().to_string())
            .collect();
        let has = |part: &str| names.iter().any(|n| n.ends_with(part));
        assert!(has("/timezonesets/Default"), "{names:?}");
        assert!(has(&format!("/{POSTGRES_TIMEZONE}")), "{names:?}");
        assert!(names.iter().any(|n| n.contains("/libc.so")), "{names:?}");
        assert!(!has("/PG_VERSION"), "no data folder: {names:?}");
        assert!(
            plan.version.starts_with("postgres (PostgreSQL)"),
            "{}",
            plan.version
        );
        let changes = plan.changes();
        assert!(changes.contains(&format!(r#"ENTRYPOINT ["{}"]"#, server.display())));
    }

    /// Imports `plan` as a test tag, inspects it, runs it with `args` (the
    /// docker CLI) and removes it: the import, its image's config and what
    /// the run printed.
    async fn import_and_run(
        api: &Api,
        name: &str,
        plan: impl FnOnce() -> Result<Plan, String> + Send + 'static,
        args: &[&str],
    ) -> (Imported, bollard::models::ImageConfig, String) {
        let docker = api.docker.clone();
        let image = format!("lockstorm/{name}:test-{}", std::process::id());
        // Removing it at the end is only right if this test made it.
        assert!(
            docker.inspect_image(&image).await.is_err(),
            "{image} exists already: remove it first"
        );
        let imported = import(api, plan, &image).await;
        // Inspect and run, then remove whatever was made, then judge.
        let info = docker.inspect_image(&image).await;
        let ran = Command::new("docker")
            .args(["run", "--rm", "--network", "host", &image])
            .args(args)
            .output();
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
        let ran = ran.expect("the docker CLI runs");
        assert!(
            ran.status.success(),
            "{image} {args:?}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
        eprintln!(
            "{} {} bytes, {} files, {:?}",
            imported.image, imported.bytes, imported.files, imported.took
        );
        assert!(imported.id.starts_with("sha256:"), "{}", imported.id);
        let stdout = String::from_utf8_lossy(&ran.stdout).trim().to_string();
        (imported, info.unwrap().config.unwrap(), stdout)
    }

    #[tokio::test]
    #[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p backend --features docker --lib docker:: -- --ignored)"]
    async fn an_import_makes_images_that_start_redis_server_postgres_and_etcd() {
        // Asked for by --ignored: no daemon (DOCKER_HOST, else the default
        // socket) fails it below rather than passing.
        let api = super::super::api::connect_daemon().await.unwrap();
        let (imported, config, said) = import_and_run(
            &api,
            "redis",
            || redis(Path::new(HOST_SERVER)),
            &["--version"],
        )
        .await;
        assert_eq!(config.entrypoint, Some(vec!["redis-server".to_string()]));
        assert_eq!(config.working_dir.as_deref(), Some("/data"));
        assert!(config
            .env
            .unwrap()
            .contains(&"PATH=/usr/local/bin:/usr/bin:/bin".to_string()));
        let label = config.labels.unwrap().get(VERSION_LABEL).cloned();
        assert_eq!(label.as_deref(), Some(imported.version.as_str()));
        assert!(
            imported.version.starts_with("Redis server v="),
            "{}",
            imported.version
        );
        assert_eq!(said, imported.version);
        let programs = Programs::find().unwrap();
        let server = programs.server().display().to_string();
        let (imported, config, said) = import_and_run(
            &api,
            "postgres",
            move || postgres(&programs),
            &["--version"],
        )
        .await;
        assert_eq!(config.entrypoint, Some(vec![server]));
        let label = config.labels.unwrap().get(POSTGRES_VERSION_LABEL).cloned();
        assert_eq!(label.as_deref(), Some(imported.version.as_str()));
        assert!(said.starts_with("postgres (PostgreSQL)"), "{said}");
        assert_eq!(said, imported.version);
        let binary = crate::etcd::find().unwrap();
        let entrypoint = binary.display().to_string();
        let (imported, config, said) =
            import_and_run(&api, "etcd", move || etcd(&binary), &["--version"]).await;
        assert_eq!(config.entrypoint, Some(vec![entrypoint]));
        let label = config.labels.unwrap().get(ETCD_VERSION_LABEL).cloned();
        assert_eq!(label.as_deref(), Some(imported.version.as_str()));
        assert!(said.starts_with("etcd Version: "), "{said}");
        assert_eq!(said.lines().next(), Some(imported.version.as_str()));
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
