//! A run removes the partition chains left by runs that are gone, and only
//! those: a chain whose lock file is held belongs to a live run (maybe in
//! another pid namespace, where its pid means nothing here) and stays.

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

/// A chain hooked into INPUT with its lock file, as a run makes it; removed
/// when dropped, so a failing test leaves nothing.
struct Chain(String);

impl Chain {
    fn new(tag: &str) -> Self {
        let name = format!("{}{tag}{:08x}", nemesis::net::PREFIX, std::process::id());
        std::fs::create_dir_all(nemesis::net::LOCK_DIR).unwrap();
        File::create(nemesis::net::lock_path(&name)).unwrap();
        assert!(iptables(&["-N", &name]), "cannot create chain {name}");
        assert!(iptables(&["-I", "INPUT", "-j", &name]));
        Chain(name)
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        while iptables(&["-D", "INPUT", "-j", &self.0]) {}
        iptables(&["-F", &self.0]);
        iptables(&["-X", &self.0]);
        let _ = std::fs::remove_file(nemesis::net::lock_path(&self.0));
    }
}

#[test]
fn a_run_removes_a_chain_whose_lock_is_free_and_keeps_one_whose_lock_is_held() {
    let live = Chain::new("11ve0000");
    let stale = Chain::new("57a1e000");
    let file = File::open(nemesis::net::lock_path(&live.0)).unwrap();
    let _held = Flock::lock(file, FlockArg::LockExclusiveNonblock).expect("the lock is free");
    let tmp = tempfile::tempdir().unwrap();
    let (run, _, _) = common::run_short(tmp.path(), "single", "none", "1", "5", &[]);
    assert!(
        present(&live.0),
        "the chain of a live run (its lock held) was removed: {}",
        run.stderr
    );
    assert!(
        !present(&stale.0),
        "the chain of a gone run (its lock free) was left: {}",
        run.stderr
    );
    assert!(
        !nemesis::net::lock_path(&stale.0).exists(),
        "the stale chain's lock file was left"
    );
}
