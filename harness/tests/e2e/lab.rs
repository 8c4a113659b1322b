//! `lockstorm lab`: hosts on this machine, each a network namespace with
//! its own address on a private bridge and its own sshd, reached with the
//! lab's key; `lab down` leaves no namespace, interface, sshd or key.
//! (As root, with Debian's openssh-server: `.ci/run` installs it.)

use crate::common::{lockstorm, one_line_254};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The lab's home, where `up` keeps its key and `down` removes everything.
fn home() -> PathBuf {
    std::env::temp_dir().join("lockstorm-lab")
}

/// One lab at a time on a machine: tests that make one hold this lock, and
/// take the lab down however they end.
struct LabTurn {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl LabTurn {
    fn take() -> LabTurn {
        let path = std::env::temp_dir().join("lockstorm-test-lab.lock");
        let file = std::fs::File::create(path).unwrap();
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive);
        LabTurn {
            _lock: lock.map_err(|(_, e)| e).expect("the lab test lock"),
        }
    }
}

impl Drop for LabTurn {
    fn drop(&mut self) {
        let _ = lockstorm(&["lab", "down"]);
    }
}

/// `ssh` to `destination` with the lab's key, running `command` there.
fn ssh(destination: &str, command: &str) -> String {
    let key = home().join("id_ed25519");
    let out = Command::new("timeout")
        .args(["20", "ssh", "-i"])
        .arg(&key)
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"])
        .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
        .args([destination, command])
        .output()
        .expect("ssh runs");
    assert!(
        out.status.success(),
        "ssh {destination} {command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Live processes whose command line names the lab's home (its sshds).
fn lab_processes() -> Vec<String> {
    let home = home().display().to_string();
    let entries = std::fs::read_dir("/proc").unwrap().flatten();
    entries
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let live = nemesis::process::state(pid).is_some_and(|s| s != 'Z');
            (live && cmdline.contains(&home)).then(|| format!("{pid}: {cmdline}"))
        })
        .collect()
}

fn names_in(dir: &str, prefix: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let names = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned());
    names.filter(|n| n.starts_with(prefix)).collect()
}

#[test]
fn lab_hosts_answer_ssh_each_in_a_namespace_of_its_own_and_down_leaves_nothing() {
    let _turn = LabTurn::take();
    let up = lockstorm(&["lab", "up", "--hosts", "3"]);
    assert_eq!(up.code, 0, "{}{}", up.stdout, up.stderr);
    // Nothing but the --nodes value on stdout.
    assert_eq!(up.stdout.lines().count(), 1, "{}", up.stdout);
    let nodes: Vec<&str> = up.stdout.trim().split(',').collect();
    assert_eq!(
        nodes,
        ["root@10.213.0.11", "root@10.213.0.12", "root@10.213.0.13"]
    );
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let mut namespaces = Vec::new();
    for (node, addr) in nodes
        .iter()
        .zip(["10.213.0.11", "10.213.0.12", "10.213.0.13"])
    {
        // Its only address is its own, and it has no route out of the subnet.
        let said = ssh(
            node,
            "ip -4 -o addr show scope global; ip -4 route; readlink /proc/self/ns/net",
        );
        assert!(said.contains(&format!("inet {addr}/24")), "{said}");
        assert_eq!(said.matches(" inet ").count(), 1, "{said}");
        assert!(!said.contains("default"), "a route out: {said}");
        let ns = said.lines().last().unwrap().to_string();
        assert_ne!(
            Path::new(&ns),
            ours.as_path(),
            "{node} shares this machine's network"
        );
        namespaces.push(ns);
    }
    namespaces.dedup();
    assert_eq!(
        namespaces.len(),
        3,
        "hosts share a namespace: {namespaces:?}"
    );
    // One lab at a time, and a count out of range: one line, 254.
    let again = one_line_254(&lockstorm(&["lab", "up", "--hosts", "2"]));
    assert!(again.contains("lockstorm lab down"), "{again}");
    let many = one_line_254(&lockstorm(&["lab", "up", "--hosts", "10"]));
    assert!(many.contains("1 to 9"), "{many}");

    let down = lockstorm(&["lab", "down"]);
    assert_eq!(down.code, 0, "{}{}", down.stdout, down.stderr);
    assert_eq!(down.stdout.trim(), "lab down: n1, n2, n3 removed");
    assert_eq!(
        names_in("/run/netns", "lockstorm-lab-"),
        Vec::<String>::new()
    );
    assert_eq!(names_in("/sys/class/net", "lslab"), Vec::<String>::new());
    assert_eq!(lab_processes(), Vec::<String>::new());
    assert!(!home().exists(), "the lab's key and files are left");
    let twice = lockstorm(&["lab", "down"]);
    assert_eq!(
        (twice.code, twice.stdout.trim()),
        (0, "lab down: no lab was up")
    );
}
