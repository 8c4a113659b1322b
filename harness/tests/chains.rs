//! A run removes the partition chains left by runs that are gone, and only
//! those: a chain whose lock file is held belongs to a live run (maybe in
//! another pid namespace, where its pid means nothing here) and stays.
//!
//! In a test binary of its own, run while no other test runs: the planted
//! stale chain is any starting run's to remove, and each that does says so
//! on stderr, which the tests of one-line errors would see.

mod common;

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::process::Command;

fn iptables(args: &[&str]) -> bool {
    Command::new("iptables")
        .args(["-w", "5"])
        .args(args)
        .status()
        .expect("iptables runs (CI installs it)")
        .success()
}

fn present(chain: &str) -> bool {
    iptables(&["-S", chain])
}

/// A chain hooked into INPUT with its lock file, as a run makes it (the
/// lock taken first when `held`, so no run at once sees it free), and the
/// chain hooked into OUTPUT that a cut between etcd's members adds
/// (`<name>m`); removed when dropped, so a failing test leaves nothing.
struct Chain {
    name: String,
    marks: String,
    _lock: Option<Flock<File>>,
}

impl Chain {
    fn new(tag: &str, held: bool) -> Self {
        let name = format!("{}{tag}{:08x}", nemesis::net::PREFIX, std::process::id());
        std::fs::create_dir_all(nemesis::net::LOCK_DIR).unwrap();
        let file = File::create(nemesis::net::lock_path(&name)).unwrap();
        let lock = held.then(|| {
            Flock::lock(file, FlockArg::LockExclusiveNonblock)
                .map_err(|(_, e)| e)
                .expect("the lock is free")
        });
        assert!(iptables(&["-N", &name]), "cannot create chain {name}");
        assert!(iptables(&["-I", "INPUT", "-j", &name]));
        let marks = nemesis::net::marks_chain(&name);
        assert!(iptables(&["-N", &marks]), "cannot create chain {marks}");
        assert!(iptables(&["-I", "OUTPUT", "-j", &marks]));
        Chain {
            name,
            marks,
            _lock: lock,
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        while iptables(&["-D", "INPUT", "-j", &self.name]) {}
        iptables(&["-F", &self.name]);
        iptables(&["-X", &self.name]);
        while iptables(&["-D", "OUTPUT", "-j", &self.marks]) {}
        iptables(&["-F", &self.marks]);
        iptables(&["-X", &self.marks]);
        let _ = std::fs::remove_file(nemesis::net::lock_path(&self.name));
    }
}

#[test]
fn a_run_removes_a_chain_whose_lock_is_free_and_keeps_one_whose_lock_is_held() {
    let live = Chain::new("11ve0000", true);
    let stale = Chain::new("57a1e000", false);
    let tmp = tempfile::tempdir().unwrap();
    let (run, _, _) = common::run_short(tmp.path(), "single", "none", "1", "5", &[]);
    for chain in [&live.name, &live.marks] {
        assert!(
            present(chain),
            "{chain} of a live run (its lock held) was removed: {}",
            run.stderr
        );
    }
    for chain in [&stale.name, &stale.marks] {
        assert!(
            !present(chain),
            "{chain} of a gone run (its lock free) was left: {}",
            run.stderr
        );
    }
    assert!(
        !nemesis::net::lock_path(&stale.name).exists(),
        "the stale chain's lock file was left"
    );
}
