//! Network partitions on loopback with iptables: every node has its own
//! 127.0.0.x address, so dropping packets between two addresses (and the
//! server's port, so concurrent runs are untouched) cuts one link.
//! Rules live in a chain of the run's own, hooked into INPUT: packets are
//! sent and silently lost, as on a real partition.
//!
//! etcd's members dial each other from 127.0.0.1, whoever dials, so their
//! links cannot be told apart by address: each member runs with a group id
//! of its own ([`member_gid`]). A second chain of the run's, hooked into
//! OUTPUT (only there can a rule name the process that sent a packet), marks
//! every connection either side of a cut opens to the other (`CONNMARK`),
//! and the INPUT chain drops both directions of each marked connection: a
//! drop on the way out would fail the sender's call at once (`EPERM`),
//! which no real partition does.
//!
//! Each chain has a random name and a lock file of the same name, which its
//! run holds with `flock` for as long as the chain exists. The kernel drops
//! the lock when the run dies however it dies, so a chain whose lock can be
//! taken is provably stale; a pid would not do, as runs in other pid
//! namespaces share the firewall but not the pids. Chains named after a pid
//! (`LOCKSTORM-<pid>`, from versions that cleaned up by pid) are left to the
//! user, with a warning: nothing shows whether their run is gone, and the
//! lower-case prefix keeps those versions from removing these chains.

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

/// The start of every chain name this version makes.
pub const PREFIX: &str = "lockstorm-";
/// The start of chain names made by versions that cleaned up by pid.
const PID_NAMED: &str = "LOCKSTORM-";

/// Where chains' lock files live: a tmpfs no tmp cleaner empties.
pub const LOCK_DIR: &str = "/run/lockstorm/chains";

/// The lock file of `chain`, held by the run that owns it.
pub fn lock_path(chain: &str) -> PathBuf {
    PathBuf::from(LOCK_DIR).join(chain)
}

/// What a run's OUTPUT chain adds to its INPUT chain's name (not a hex
/// digit, so no INPUT chain's name ends in it).
const MARKS: &str = "m";

/// The name of the OUTPUT chain that goes with the run's INPUT chain
/// `chain`: where a cut between etcd members marks its connections.
pub fn marks_chain(chain: &str) -> String {
    format!("{chain}{MARKS}")
}

/// A fresh chain name: 64 random bits, 26 characters (iptables allows 28,
/// so its OUTPUT chain's name fits too).
fn new_chain_name() -> String {
    format!("{PREFIX}{:016x}", rand::random::<u64>())
}

/// A TCP link: clients at `client` talking to a server at `server:port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub client: Ipv4Addr,
    pub server: Ipv4Addr,
    pub port: u16,
}

/// The iptables arguments that cut `link` in both directions (pure).
pub fn drop_rules(chain: &str, link: Link) -> [Vec<String>; 2] {
    let (c, s, p) = (
        link.client.to_string(),
        link.server.to_string(),
        link.port.to_string(),
    );
    let rule = |src: &str, dst: &str, port_flag: &str| {
        [
            "-A", chain, "-p", "tcp", "-s", src, "-d", dst, port_flag, &p, "-j", "DROP",
        ]
        .map(String::from)
        .to_vec()
    };
    [rule(&c, &s, "--dport"), rule(&s, &c, "--sport")]
}

/// An etcd member as a cut between members names it: its address, its
/// peer port and the group id it runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub ip: Ipv4Addr,
    pub peer_port: u16,
    pub gid: u32,
}

/// The group id a member at `ip` runs with: its loopback address as a
/// number, so no two members of concurrent runs share one (pure).
pub fn member_gid(ip: Ipv4Addr) -> u32 {
    u32::from(ip)
}

/// The iptables arguments that cut member `a` from each of `others`, both
/// ways (pure): in `marks` (hooked into OUTPUT), a connection either side
/// opens to the other's peer port is marked with `a`'s group id as a packet
/// of it leaves (its opener is known by its group); in `drops` (INPUT),
/// every packet of a marked connection is dropped as it arrives, the
/// replies included.
pub fn member_cut_rules(
    marks: &str,
    drops: &str,
    a: Member,
    others: &[Member],
) -> Vec<Vec<String>> {
    let chain = marks;
    let mark = a.gid.to_string();
    let opened = |by: Member, to: Member| {
        [
            "-A",
            chain,
            "-p",
            "tcp",
            "-m",
            "owner",
            "--gid-owner",
            &by.gid.to_string(),
            "-d",
            &to.ip.to_string(),
            "--dport",
            &to.peer_port.to_string(),
            "-j",
            "CONNMARK",
            "--set-mark",
            &mark,
        ]
        .map(String::from)
        .to_vec()
    };
    let mut rules: Vec<Vec<String>> = others
        .iter()
        .flat_map(|&o| [opened(a, o), opened(o, a)])
        .collect();
    rules.push(
        ["-A", drops, "-m", "connmark", "--mark", &mark, "-j", "DROP"]
            .map(String::from)
            .to_vec(),
    );
    rules
}

/// The run's chain. Dropping it removes every rule it added.
pub struct Firewall {
    chain: String,
    /// Held until the chain is gone: proof to other runs that it is in use.
    _owner: Flock<File>,
}

impl Firewall {
    /// Creates a chain of a fresh name, locked as this run's, and hooks it
    /// into INPUT, after removing the chains of runs that are gone (a crash
    /// leaves them).
    pub fn create() -> io::Result<Self> {
        clean_stale()?;
        let chain = new_chain_name();
        std::fs::create_dir_all(LOCK_DIR)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path(&chain))?;
        let owner = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            io::Error::other(format!("locking {}: {e}", lock_path(&chain).display()))
        })?;
        // From here on, dropping `fw` undoes whatever was done.
        let fw = Firewall {
            chain,
            _owner: owner,
        };
        iptables(&["-N", &fw.chain])?;
        iptables(&["-I", "INPUT", "-j", &fw.chain])?;
        Ok(fw)
    }

    pub fn chain(&self) -> &str {
        &self.chain
    }

    pub fn cut(&self, links: &[Link]) -> io::Result<()> {
        for link in links {
            for rule in drop_rules(&self.chain, *link) {
                iptables(&rule.iter().map(String::as_str).collect::<Vec<_>>())?;
            }
        }
        Ok(())
    }

    /// Cuts member `a` from each of `others` ([`member_cut_rules`]), making
    /// the run's OUTPUT chain the first time.
    pub fn cut_members(&self, a: Member, others: &[Member]) -> io::Result<()> {
        let marks = marks_chain(&self.chain);
        if !chain_exists(&marks) {
            iptables(&["-N", &marks])?;
            iptables(&["-I", "OUTPUT", "-j", &marks])?;
        }
        for rule in member_cut_rules(&marks, &self.chain, a, others) {
            iptables(&rule.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        Ok(())
    }

    pub fn heal(&self) -> io::Result<()> {
        let marks = marks_chain(&self.chain);
        if chain_exists(&marks) {
            iptables(&["-F", &marks])?;
        }
        iptables(&["-F", &self.chain])
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        // Still locked: no other run can be removing it at the same time. A
        // chain that would not go keeps its lock file, for the next run.
        if remove_chain(&self.chain) {
            let _ = std::fs::remove_file(lock_path(&self.chain));
        }
    }
}

/// Whether this process can manage iptables rules (root and the binary).
pub fn available() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("it needs root (CAP_NET_ADMIN)".into());
    }
    match Command::new("iptables").arg("-S").arg("INPUT").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "iptables failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!(
            "iptables cannot run ({e}); install it with `apt-get install -y iptables`"
        )),
    }
}

/// Names of lockstorm chains present now (of any version); a run's OUTPUT
/// chain goes by its INPUT chain's name, which holds the lock of both.
pub fn chains() -> io::Result<Vec<String>> {
    let out = Command::new("iptables").arg("-S").output()?;
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .filter(|c| c.starts_with(PREFIX) || c.starts_with(PID_NAMED))
        .map(|c| {
            c.strip_suffix(MARKS)
                .filter(|_| c.starts_with(PREFIX))
                .unwrap_or(c)
        })
        .map(String::from)
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Removes the chains of runs that are gone (a crash leaves them): those
/// whose lock file this process can lock. A chain without a lock file may
/// belong to a run that cannot see this machine's lock folder, so it stays.
pub fn clean_stale() -> io::Result<()> {
    for chain in chains()? {
        match claim(&chain) {
            // Its run ended after the listing: it removes its chain, then its
            // lock file, then lets go of the lock. Not stale, nothing to say.
            Ok(Some(_lock)) if !lock_path(&chain).exists() => {}
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    && !chain_exists(&chain)
                    && !chain_exists(&marks_chain(&chain)) => {}
            Ok(Some(_lock)) => {
                tracing::warn!("removing iptables chain {chain} left by a run that did not finish");
                if remove_chain(&chain) {
                    let _ = std::fs::remove_file(lock_path(&chain));
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                "leaving iptables chain {chain}: its owner cannot be shown gone ({}: {e}); \
                 if no run uses it, remove it with `iptables -D INPUT -j {chain}; iptables -F {chain}; iptables -X {chain}` \
                 (and the same for {chain}{MARKS} and OUTPUT, if it is there)",
                lock_path(&chain).display()
            ),
        }
    }
    Ok(())
}

/// The lock of `chain` if its owner is gone, `None` while it holds it.
fn claim(chain: &str) -> io::Result<Option<Flock<File>>> {
    let file = File::open(lock_path(chain))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(e.into()),
    }
}

fn chain_exists(chain: &str) -> bool {
    iptables(&["-S", chain]).is_ok()
}

/// Unhooks, empties and deletes `chain`; whether it is gone (by whoever).
fn remove_chain(chain: &str) -> bool {
    // The hook may have been inserted more than once; remove until gone.
    while iptables(&["-D", "INPUT", "-j", chain]).is_ok() {}
    let marks = marks_chain(chain);
    if chain_exists(&marks) {
        while iptables(&["-D", "OUTPUT", "-j", &marks]).is_ok() {}
        let _ = iptables(&["-F", &marks]);
        let _ = iptables(&["-X", &marks]);
    }
    let _ = iptables(&["-F", chain]);
    iptables(&["-X", chain]).is_ok() || !chain_exists(chain)
}

fn iptables(args: &[&str]) -> io::Result<()> {
    let out = Command::new("iptables")
        .args(["-w", "5"])
        .args(args)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_cut_both_ways_and_only_for_the_server_port() {
        let link = Link {
            client: Ipv4Addr::new(127, 0, 0, 12),
            server: Ipv4Addr::new(127, 0, 0, 11),
            port: 6400,
        };
        let [there, back] = drop_rules("lockstorm-1", link);
        assert_eq!(
            there.join(" "),
            "-A lockstorm-1 -p tcp -s 127.0.0.12 -d 127.0.0.11 --dport 6400 -j DROP"
        );
        assert_eq!(
            back.join(" "),
            "-A lockstorm-1 -p tcp -s 127.0.0.11 -d 127.0.0.12 --sport 6400 -j DROP"
        );
    }

    #[test]
    fn a_member_is_cut_by_the_connections_either_side_opens_to_the_other() {
        let member = |last: u8, port: u16| {
            let ip = Ipv4Addr::new(127, 0, 3, last);
            Member {
                ip,
                peer_port: port,
                gid: member_gid(ip),
            }
        };
        let (a, b, c) = (member(11, 5001), member(12, 5002), member(13, 5003));
        assert_eq!(a.gid, 2130707211, "127.0.3.11 as a number");
        let rules: Vec<String> = member_cut_rules("lockstorm-1m", "lockstorm-1", a, &[b, c])
            .iter()
            .map(|r| r.join(" "))
            .collect();
        let mark = "-j CONNMARK --set-mark 2130707211";
        assert_eq!(
            rules,
            [
                format!("-A lockstorm-1m -p tcp -m owner --gid-owner 2130707211 -d 127.0.3.12 --dport 5002 {mark}"),
                format!("-A lockstorm-1m -p tcp -m owner --gid-owner 2130707212 -d 127.0.3.11 --dport 5001 {mark}"),
                format!("-A lockstorm-1m -p tcp -m owner --gid-owner 2130707211 -d 127.0.3.13 --dport 5003 {mark}"),
                format!("-A lockstorm-1m -p tcp -m owner --gid-owner 2130707213 -d 127.0.3.11 --dport 5001 {mark}"),
                "-A lockstorm-1 -m connmark --mark 2130707211 -j DROP".to_string(),
            ]
        );
    }

    #[test]
    fn chain_names_fit_iptables_and_differ_between_runs() {
        let (a, b) = (new_chain_name(), new_chain_name());
        assert!(a.len() <= 28, "{a} is longer than iptables allows");
        assert!(a.starts_with(PREFIX));
        assert_ne!(a, b);
    }
}
