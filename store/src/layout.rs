//! The results layout: `results/<config>-<nemesis>/<YYYYMMDDTHHMMSS>/` and a
//! `latest` link, and the files of each run folder below.

use crate::error::{doing, Error, ReadError, Result};
use crate::record::{Plan, RunRecord};
use checker::Results;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The files of a run folder (docs/formats.md lists them all).
pub const RUN_JSON: &str = "run.json";
pub const HISTORY: &str = "history.jsonl";
pub const RESULTS: &str = "results.json";
pub const HARNESS_LOG: &str = "harness.log";
/// A deployment's audit (`lockstorm audit`, and a `--target` run's
/// preflight).
pub const AUDIT: &str = "audit.json";

/// Now, as results folders are named: `YYYYMMDDTHHMMSS`, UTC.
pub fn stamp() -> String {
    chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string()
}

/// Creates `parent/name`, or `parent/name-1`, `-2` … if it exists: two
/// runs (or matrices) started in the same second each get their own.
pub fn unique_dir(parent: &Path, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(parent).map_err(|e| creating(parent, e))?;
    for n in 0..1000 {
        let path = match n {
            0 => parent.join(name),
            _ => parent.join(format!("{name}-{n}")),
        };
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(creating(&path, e)),
        }
    }
    Err(Error::NoFreeFolder {
        name: name.into(),
        parent: parent.into(),
    })
}

/// Why a results folder could not be made: a folder the user may not write
/// to is theirs to fix (bad input), anything else the harness's failure.
fn creating(path: &Path, e: std::io::Error) -> Error {
    use std::io::ErrorKind::{PermissionDenied, ReadOnlyFilesystem};
    match e.kind() {
        PermissionDenied | ReadOnlyFilesystem => Error::ResultsNotWritable {
            path: path.into(),
            source: e,
        },
        _ => doing(format!("creating {}", path.display()))(e),
    }
}

/// A run folder being written. Its paths are a [`StoredRun`]'s: the one
/// layout a run writes and `check` and `report` read back.
pub struct RunDir {
    /// `path` is absolute: nodes and workers run in folders of their own, so
    /// every path handed to them must not depend on the harness's working folder.
    folder: StoredRun,
    /// The folders above `path` that [`RunDir::create`] made, nearest first.
    made: Vec<PathBuf>,
}

impl std::ops::Deref for RunDir {
    type Target = StoredRun;
    fn deref(&self) -> &StoredRun {
        &self.folder
    }
}

impl RunDir {
    /// Creates a fresh, uniquely named folder for one run.
    pub fn create(results: &Path, name: &str) -> Result<Self> {
        let results = std::path::absolute(results)
            .map_err(doing(format!("resolving {}", results.display())))?;
        let group = results.join(name);
        let made = group
            .ancestors()
            .take_while(|p| !p.exists())
            .map(Path::to_path_buf)
            .collect();
        let path = unique_dir(&group, &stamp())?;
        let dir = RunDir {
            folder: StoredRun::open(path),
            made,
        };
        let nodes = dir.nodes();
        if let Err(e) = std::fs::create_dir(&nodes) {
            dir.discard();
            return Err(doing(format!("creating {}", nodes.display()))(e));
        }
        Ok(dir)
    }

    /// Removes the run's folder, and the folders above it that `create`
    /// made while they are empty: for a run that never started.
    pub fn discard(self) {
        let _ = std::fs::remove_dir_all(&self.path);
        for dir in &self.made {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }

    pub fn nodes(&self) -> PathBuf {
        self.path.join("nodes")
    }
}

/// Moves a finished run's folder into the group `name` beside its own
/// (same results folder, same stamp, `-1`… if taken), and removes its old
/// group if that is left empty. Returns the new path.
pub fn regroup(run: &Path, name: &str) -> Result<PathBuf> {
    let (Some(group), Some(stamp)) = (run.parent(), run.file_name()) else {
        return Ok(run.to_path_buf());
    };
    let Some(results) = group.parent() else {
        return Ok(run.to_path_buf());
    };
    let target = unique_dir(&results.join(name), &stamp.to_string_lossy())?;
    // Renaming onto the empty folder just made replaces it, atomically.
    std::fs::rename(run, &target).map_err(doing(format!(
        "moving {} to {}",
        run.display(),
        target.display()
    )))?;
    let _ = std::fs::remove_dir(group);
    Ok(target)
}

/// A library's own name for itself (`my-lock 1.0 (ioredis 5.9)`) as a
/// folder name's part: letters, digits, `.`, `_` and `-`, the rest runs of
/// `-`, at most 48 characters; `None` if nothing is left.
pub fn slug(name: &str) -> Option<String> {
    let mut out = String::new();
    for c in name.chars() {
        match c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            true => out.push(c),
            false if !out.ends_with('-') => out.push('-'),
            false => {}
        }
    }
    let out: String = out
        .trim_matches(|c| c == '-' || c == '.')
        .chars()
        .take(48)
        .collect();
    let out = out.trim_end_matches(['-', '.']).to_string();
    (!out.is_empty()).then_some(out)
}

/// Points `<group>/latest` at the run folder `run`, replacing the old link
/// atomically. Only a user's own run moves it: a matrix cell (or any run
/// made on the user's behalf) leaves the link where the user last put it.
pub fn link_latest(run: &Path) -> Result<()> {
    let group = run.parent().expect("a run dir has a group");
    let leaf = run.file_name().expect("a run dir has a name");
    let tmp = group.join(format!(".latest-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(leaf, &tmp).map_err(doing(format!("linking {}", tmp.display())))?;
    let latest = group.join("latest");
    std::fs::rename(&tmp, &latest).map_err(doing(format!("replacing {}", latest.display())))
}

/// A stored run folder, opened to be read back: its files' paths, and
/// `run.json` and `results.json` typed. Nothing is read until asked, and
/// each file fails on its own, so a damaged one never hides the others.
#[derive(Clone, Debug)]
pub struct StoredRun {
    pub path: PathBuf,
}

impl StoredRun {
    pub fn open(path: impl Into<PathBuf>) -> Self {
        StoredRun { path: path.into() }
    }

    pub fn history(&self) -> PathBuf {
        self.path.join(HISTORY)
    }
    pub fn run_json(&self) -> PathBuf {
        self.path.join(RUN_JSON)
    }
    pub fn results_json(&self) -> PathBuf {
        self.path.join(RESULTS)
    }
    pub fn harness_log(&self) -> PathBuf {
        self.path.join(HARNESS_LOG)
    }

    /// `run.json`, typed; older runs load with defaults for what they lack.
    pub fn record<P: Plan>(&self) -> std::result::Result<RunRecord<P>, ReadError> {
        read_json(&self.run_json())
    }

    /// `results.json` as the run (or `lockstorm check`) wrote it.
    pub fn results(&self) -> std::result::Result<Results, ReadError> {
        read_json(&self.results_json())
    }
}

/// Reads one stored JSON file, typed.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> std::result::Result<T, ReadError> {
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    serde_json::from_reader(std::io::BufReader::new(file)).map_err(ReadError::Json)
}

/// Writes beside `path`, then renames over it: a reader, or a run killed
/// mid-write, sees the old file or the new one, never half of one.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value).expect("results always serialise");
    text.push('\n');
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).map_err(doing(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(doing(format!("replacing {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_never_sees_a_half_written_json_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("results.json");
        let big: Vec<String> = (0..50_000).map(|i| format!("value {i}")).collect();
        write_json(&path, &big).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let parsed = serde_json::from_str::<Vec<String>>(&text);
                    assert!(parsed.is_ok(), "read {} bytes mid-write", text.len());
                    reads += 1;
                }
                reads
            })
        };
        for _ in 0..20 {
            write_json(&path, &big).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(reader.join().unwrap() > 0);
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "temporary files left: {left:?}");
    }

    #[test]
    fn two_runs_in_one_second_get_distinct_folders_and_latest_follows() {
        let tmp = tempfile::tempdir().unwrap();
        let a = RunDir::create(tmp.path(), "single-pause").unwrap();
        let b = RunDir::create(tmp.path(), "single-pause").unwrap();
        assert_ne!(a.path, b.path);
        assert!(a.nodes().is_dir());
        link_latest(&a.path).unwrap();
        link_latest(&b.path).unwrap();
        let latest = tmp.path().join("single-pause/latest");
        assert_eq!(
            latest.canonicalize().unwrap(),
            b.path.canonicalize().unwrap()
        );
    }

    #[test]
    fn a_run_folder_is_absolute_and_a_discarded_one_leaves_nothing_it_made() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("mine")).unwrap();
        let results = tmp.path().join("results");
        let dir = RunDir::create(&relative_to_cwd(&results), "single-none").unwrap();
        assert!(dir.path.is_absolute(), "{}", dir.path.display());
        let real = |p: &Path| p.canonicalize().unwrap();
        assert!(real(&dir.path).starts_with(real(&results)));
        let kept = RunDir::create(tmp.path(), "mine").unwrap();
        dir.discard();
        kept.discard();
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(tmp.path().join("mine").is_dir(), "a folder it did not make");
    }

    #[test]
    fn a_run_moves_into_a_group_named_after_its_library_and_leaves_no_empty_one() {
        assert_eq!(
            slug("my-lock 1.0 (ioredis 5.9.3)").as_deref(),
            Some("my-lock-1.0-ioredis-5.9.3")
        );
        assert_eq!(
            slug("redlock/ünïcode  1.4.0").as_deref(),
            Some("redlock-n-code-1.4.0")
        );
        assert_eq!(slug(" ()/ "), None);
        assert_eq!(slug(&"x".repeat(100)).map(|s| s.len()), Some(48));
        let tmp = tempfile::tempdir().unwrap();
        let a = RunDir::create(tmp.path(), "single.custom-pause").unwrap();
        std::fs::write(a.path.join("run.json"), "{}").unwrap();
        let moved = regroup(&a.path, "single.my-lock-1.0-pause").unwrap();
        assert_eq!(
            moved.parent().unwrap(),
            tmp.path().join("single.my-lock-1.0-pause")
        );
        assert_eq!(moved.file_name(), a.path.file_name());
        assert!(moved.join("run.json").is_file() && moved.join("nodes").is_dir());
        assert!(!tmp.path().join("single.custom-pause").exists());
        // A second run of the same second beside it gets a folder of its own.
        let b = RunDir::create(tmp.path(), "single.custom-pause").unwrap();
        let again = regroup(&b.path, "single.my-lock-1.0-pause").unwrap();
        assert_ne!(again, moved);
    }

    /// `path` relative to the current folder, through `..` as needed.
    fn relative_to_cwd(path: &Path) -> PathBuf {
        let cwd = std::env::current_dir().unwrap();
        let up = cwd.components().count() - 1;
        let mut rel: PathBuf = std::iter::repeat_n("..", up).collect();
        rel.push(path.strip_prefix("/").unwrap());
        rel
    }
}
