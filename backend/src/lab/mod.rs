//! `lockstorm lab`: hosts on this machine for `--nodes`, as Jepsen's n1…n5.
//! Each host is a network namespace with one interface on a private bridge
//! (`lslab0`, 10.213.0.0/24, no uplink and no route out of the namespaces),
//! a PID namespace (its PIDs are not this machine's), a `/tmp` of its own
//! (a run's folders on one host are not on another), and its own `sshd`
//! (Debian's `openssh-server`) that takes one generated key. Cutting a link between two hosts is then a real drop on a real
//! interface, not a loopback trick.
//!
//! This file is the plan, pure: names, addresses, the files a lab keeps.
//! `up.rs` makes it and takes it down, every command under a deadline.

mod up;

pub use up::{down, read_record as read, up, Down};

use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The most hosts a lab has (Jepsen's tests use five).
pub const MAX_HOSTS: usize = 9;

/// The bridge every host's interface hangs on.
pub const BRIDGE: &str = "lslab0";

/// The lab's subnet: private, and refused if the machine already routes it.
pub const SUBNET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 213, 0, 0), 24);

/// The bridge's own address: this machine's side, where `ssh` comes from.
pub const BRIDGE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);

/// Where a lab keeps its key, each host's `sshd` files and its record.
pub fn home() -> PathBuf {
    // Not under /tmp: each host has a /tmp of its own, which hides the
    // machine's.
    PathBuf::from("/run/lockstorm-lab")
}

/// The lab's client key, which every host's `sshd` takes.
pub fn key(home: &Path) -> PathBuf {
    home.join("id_ed25519")
}

/// The lab's hosts' public keys, as `known_hosts` lists them.
pub fn known_hosts(home: &Path) -> PathBuf {
    home.join("known_hosts")
}

/// One host of the lab.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// `n1`, `n2`, …
    pub name: String,
    /// Its network namespace.
    pub netns: String,
    /// Its end of the link on the bridge (the other end is its `eth0`).
    pub veth: String,
    pub addr: Ipv4Addr,
}

impl Host {
    fn new(i: usize) -> Host {
        let name = format!("n{i}");
        Host {
            netns: format!("lockstorm-lab-{name}"),
            veth: format!("lslab-{name}"),
            addr: Ipv4Addr::new(10, 213, 0, 10 + i as u8),
            name,
        }
    }

    /// Its folder in the lab's home: `sshd`'s config, host key, pid and log.
    pub fn dir(&self, home: &Path) -> PathBuf {
        home.join(&self.name)
    }

    /// What `--nodes` takes for it.
    pub fn destination(&self) -> String {
        format!("root@{}", self.addr)
    }
}

/// What a lab is made of, kept as `lab.json` in its home so `down` takes
/// apart exactly what `up` made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lab {
    pub hosts: Vec<Host>,
    /// Whether `up` made `/run/sshd` (sshd's privilege separation folder),
    /// so `down` removes it if no other `sshd` is left to use it.
    pub made_run_sshd: bool,
    /// Hosts made without Redis's programs (`--bare`), to try what a run
    /// says of a host that lacks them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bare: Vec<String>,
}

impl Lab {
    /// The plan for `n` hosts, the ones named in `bare` without Redis;
    /// out of range, or a bare host not among them, is bad input.
    pub fn plan(n: usize, bare: &[String]) -> Result<Lab, String> {
        if !(1..=MAX_HOSTS).contains(&n) {
            return Err(format!(
                "--hosts {n} is out of range: a lab has 1 to {MAX_HOSTS} hosts"
            ));
        }
        let hosts: Vec<Host> = (1..=n).map(Host::new).collect();
        if let Some(name) = bare.iter().find(|b| !hosts.iter().any(|h| &h.name == *b)) {
            return Err(format!(
                "--bare {name} names no host of this lab: give n1 to n{n}"
            ));
        }
        Ok(Lab {
            hosts,
            made_run_sshd: false,
            bare: bare.to_vec(),
        })
    }

    pub fn is_bare(&self, host: &Host) -> bool {
        self.bare.contains(&host.name)
    }

    /// The `--nodes` value: every host's destination, comma-separated.
    pub fn nodes(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(Host::destination).collect();
        hosts.join(",")
    }
}

/// The `sshd_config` of `host`: its address only, the lab's key only, no
/// password, no PAM; `StrictModes` off as the home is under the shared
/// temporary folder.
pub fn sshd_config(host: &Host, home: &Path) -> String {
    let dir = host.dir(home);
    let file = |name: &str| dir.join(name).display().to_string();
    [
        format!("ListenAddress {}", host.addr),
        "Port 22".into(),
        format!("HostKey {}", file("host_key")),
        format!(
            "AuthorizedKeysFile {}",
            home.join("authorized_keys").display()
        ),
        // Its PID 1 in a namespace of its own: `down` stops it through
        // the `unshare` that holds it, not by a pid file.
        "PidFile none".into(),
        "PermitRootLogin prohibit-password".into(),
        "PasswordAuthentication no".into(),
        "KbdInteractiveAuthentication no".into(),
        "UsePAM no".into(),
        "StrictModes no".into(),
        String::new(),
    ]
    .join("\n")
}

/// The first route of `ip -4 route`'s output that overlaps `SUBNET`, if
/// any: the lab would shadow it, or be shadowed.
pub fn clashing_route(routes: &str) -> Option<&str> {
    routes.lines().find(|line| {
        let Some(dest) = line.split_whitespace().next() else {
            return false;
        };
        let (addr, len) = match dest {
            "default" => return false,
            d => d.split_once('/').unwrap_or((d, "32")),
        };
        let (Ok(addr), Ok(len)) = (addr.parse::<Ipv4Addr>(), len.parse::<u8>()) else {
            return false;
        };
        overlaps((addr, len), SUBNET)
    })
}

fn overlaps(a: (Ipv4Addr, u8), b: (Ipv4Addr, u8)) -> bool {
    let len = a.1.min(b.1).min(32);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(a.0) & mask == u32::from(b.0) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_named_and_addressed_in_order_within_the_subnet() {
        let lab = Lab::plan(3, &[]).unwrap();
        let names: Vec<&str> = lab.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["n1", "n2", "n3"]);
        assert_eq!(
            lab.nodes(),
            "root@10.213.0.11,root@10.213.0.12,root@10.213.0.13"
        );
        for h in &Lab::plan(MAX_HOSTS, &[]).unwrap().hosts {
            assert!(overlaps((h.addr, 32), SUBNET), "{h:?}");
            assert_ne!(h.addr, BRIDGE_ADDR);
            // Interface names fit the kernel's 15 bytes.
            assert!(h.veth.len() <= 15 && BRIDGE.len() <= 15, "{h:?}");
        }
    }

    #[test]
    fn a_host_count_out_of_range_is_refused_naming_the_range() {
        for n in [0, MAX_HOSTS + 1] {
            let refused = Lab::plan(n, &[]).unwrap_err();
            assert!(refused.contains("1 to 9"), "{refused}");
        }
        let stray = Lab::plan(2, &["n3".into()]).unwrap_err();
        assert!(stray.contains("--bare n3 names no host"), "{stray}");
        let lab = Lab::plan(2, &["n2".into()]).unwrap();
        assert!(lab.is_bare(&lab.hosts[1]) && !lab.is_bare(&lab.hosts[0]));
    }

    #[test]
    fn a_route_over_the_subnet_clashes_and_others_do_not() {
        let routes = "default via 192.0.2.1 dev eth0\n192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2\n";
        assert_eq!(clashing_route(routes), None);
        let wide = format!("{routes}10.0.0.0/8 dev tun0\n");
        assert_eq!(clashing_route(&wide), Some("10.0.0.0/8 dev tun0"));
        assert_eq!(
            clashing_route("10.213.0.7 dev wg0\n"),
            Some("10.213.0.7 dev wg0")
        );
        assert_eq!(clashing_route("10.214.0.0/24 dev x\n"), None);
    }

    #[test]
    fn sshd_takes_only_the_labs_key_on_the_hosts_own_address() {
        let host = &Lab::plan(2, &[]).unwrap().hosts[1];
        let config = sshd_config(host, Path::new("/tmp/lab"));
        assert!(config.contains("ListenAddress 10.213.0.12\n"), "{config}");
        assert!(config.contains("AuthorizedKeysFile /tmp/lab/authorized_keys\n"));
        assert!(config.contains("HostKey /tmp/lab/n2/host_key\n"));
        assert!(config.contains("PasswordAuthentication no\n"));
    }
}
