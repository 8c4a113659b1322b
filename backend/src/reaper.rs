//! A data folder's reaper: a small `sh` that outlives the harness to remove
//! a server's data folder (PostgreSQL's, an etcd member's) however the
//! harness ended, even by SIGKILL. It waits for its stdin to close (the
//! kernel closes the pipe when the harness dies), gives the server (which
//! dies with the harness) up to 10 s to be gone, then removes the folder.
//! It first resumes the server, in case the harness died while it was
//! paused: a PostgreSQL server's death signal is SIGQUIT, the shutdown that
//! removes its shared memory, and a stopped process does not act on it.
//! A server removed in order dismisses its reaper, which then finds nothing.
//! [`DataFolder`] is a data folder together with its reaper.

use crate::error::{doing, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// `$1` the data folder, `$2` the file whose first line is the server's pid.
const REAPER: &str = r#"cat >/dev/null
pid=$(head -n 1 "$2" 2>/dev/null)
[ -n "$pid" ] && kill -CONT "$pid" 2>/dev/null
i=0
while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
rm -rf "$1""#;

/// A server's data folder, removed when dropped (once the server is gone:
/// see [`crate::server::Managed`]), and by its reaper if the harness ends
/// first.
pub struct DataFolder {
    path: PathBuf,
    reaper: Option<Child>,
    /// The pid file lockstorm writes for a server that writes none.
    noted: Option<PathBuf>,
}

impl DataFolder {
    /// `data`, reaped for a `server` whose pid `pid_file` holds (the server
    /// writes it: PostgreSQL's `postmaster.pid`).
    pub fn reaped(server: &str, data: &Path, pid_file: &Path) -> Result<Self> {
        Ok(DataFolder {
            path: data.to_path_buf(),
            reaper: Some(start(server, data, pid_file)?),
            noted: None,
        })
    }

    /// [`Self::reaped`], for a server that writes no pid file of its own:
    /// [`Self::note_pid`] writes `pid_file` at each launch (etcd, ZooKeeper).
    pub fn reaped_noting_pid(server: &str, data: &Path, pid_file: &Path) -> Result<Self> {
        let mut folder = Self::reaped(server, data, pid_file)?;
        folder.noted = Some(pid_file.to_path_buf());
        Ok(folder)
    }

    /// Writes `pid` where the reaper reads it, if lockstorm is the one to.
    pub fn note_pid(&self, pid: u32) {
        if let Some(file) = &self.noted {
            let _ = std::fs::write(file, format!("{pid}\n"));
        }
    }
}

impl Drop for DataFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        dismiss(self.reaper.take());
    }
}

/// Starts the reaper of `data` for a `server` whose pid `pid_file` holds:
/// its own process group (a Ctrl-C at the terminal does not reach it) and
/// no parent-death signal, so it outlives the harness to do its job.
fn start(server: &str, data: &Path, pid_file: &Path) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .args(["-c", REAPER, &format!("lockstorm-{server}-reaper")])
        .arg(data)
        .arg(pid_file)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(doing(format!("starting the {server} data folder's reaper")))
}

/// The folder is gone: the reaper finds nothing to do and exits at once.
fn dismiss(reaper: Option<Child>) {
    if let Some(mut reaper) = reaper {
        drop(reaper.stdin.take());
        let _ = reaper.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_folder_is_gone_once_dropped_and_its_reaper_with_it() {
        let top = tempfile::tempdir().unwrap();
        let data = top.path().join("data");
        std::fs::create_dir_all(data.join("wal")).unwrap();
        std::fs::write(data.join("wal/0001"), b"entries").unwrap();
        let folder = DataFolder::reaped("test", &data, &top.path().join("none.pid")).unwrap();
        let reaper = folder.reaper.as_ref().unwrap().id();
        assert!(data.is_dir(), "removed while held");
        drop(folder);
        assert!(!data.exists(), "the data folder outlived its holder");
        // Dismissed and waited for: no such process, not even a zombie.
        assert!(process::state(reaper).is_none(), "the reaper is left");
    }
}
