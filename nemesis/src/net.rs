//! Network partitions on loopback with iptables: every node has its own
//! 127.0.0.x address, so dropping packets between two addresses (and the
//! server's port, so concurrent runs are untouched) cuts one link.
//! Rules live in a chain of the run's own, hooked into INPUT: packets are
//! sent and silently lost, as on a real partition.

use std::io;
use std::net::Ipv4Addr;
use std::process::Command;

const PREFIX: &str = "LOCKSTORM-";

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

/// The run's chain. Dropping it removes every rule it added.
pub struct Firewall {
    chain: String,
}

impl Firewall {
    /// Creates `LOCKSTORM-<pid>` and hooks it into INPUT, after removing the
    /// chains of earlier runs whose harness is gone (a crash leaves them).
    pub fn create() -> io::Result<Self> {
        clean_stale()?;
        let chain = format!("{PREFIX}{}", std::process::id());
        iptables(&["-N", &chain])?;
        let fw = Firewall { chain };
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

    pub fn heal(&self) -> io::Result<()> {
        iptables(&["-F", &self.chain])
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        remove_chain(&self.chain);
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

/// Names of lockstorm chains present now.
pub fn chains() -> io::Result<Vec<String>> {
    let out = Command::new("iptables").arg("-S").output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .filter(|c| c.starts_with(PREFIX))
        .map(String::from)
        .collect())
}

/// Removes the chains of runs whose harness is gone (a crash leaves them).
pub fn clean_stale() -> io::Result<()> {
    for chain in chains()? {
        let alive = chain[PREFIX.len()..]
            .parse::<u32>()
            .is_ok_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            tracing::warn!("removing iptables chain {chain} left by a run that did not finish");
            remove_chain(&chain);
        }
    }
    Ok(())
}

fn remove_chain(chain: &str) {
    // The hook may have been inserted more than once; remove until gone.
    while iptables(&["-D", "INPUT", "-j", chain]).is_ok() {}
    let _ = iptables(&["-F", chain]);
    let _ = iptables(&["-X", chain]);
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
        let [there, back] = drop_rules("LOCKSTORM-1", link);
        assert_eq!(
            there.join(" "),
            "-A LOCKSTORM-1 -p tcp -s 127.0.0.12 -d 127.0.0.11 --dport 6400 -j DROP"
        );
        assert_eq!(
            back.join(" "),
            "-A LOCKSTORM-1 -p tcp -s 127.0.0.11 -d 127.0.0.12 --sport 6400 -j DROP"
        );
    }
}
