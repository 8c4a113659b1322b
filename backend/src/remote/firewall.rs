//! Cuts between nodes on different hosts: real packet drops, made with
//! iptables on the hosts themselves. Each host that takes part gets a chain
//! of the run's own, hooked into its INPUT; a cut of the link between node
//! A and node B drops, on each side, what comes from the other side's
//! address to or from the two nodes' ports, so both directions are lost
//! and other traffic between the hosts (ssh, other nodes) goes on. A heal
//! empties the chains; the end of the run removes them.

use super::host::Host;
use crate::error::Result;
use std::net::SocketAddrV4;
use std::sync::Arc;
use tokio::sync::Mutex;

pub(super) struct HostFirewall {
    chain: String,
    /// The hosts whose INPUT the chain is hooked into, by `--nodes` index.
    hooked: Mutex<Vec<(usize, Arc<Host>)>>,
}

/// A node on a host, as a cut names it: the host's index and the node's address.
pub type Side<'a> = (usize, &'a Arc<Host>, SocketAddrV4);

impl Default for HostFirewall {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        HostFirewall {
            // The chain name local runs use too (`nemesis::net::PREFIX`),
            // 26 characters as iptables allows.
            chain: format!(
                "{}{:08x}{:08x}",
                nemesis::net::PREFIX,
                std::process::id(),
                nanos
            ),
            hooked: Mutex::new(Vec::new()),
        }
    }
}

impl HostFirewall {
    /// Drops every packet between `a` and `b`, both ways.
    pub async fn cut(&self, a: Side<'_>, b: Side<'_>) -> Result<()> {
        for (me, other) in [(&a, &b), (&b, &a)] {
            self.hook(me.0, me.1).await?;
            let (mine, theirs) = (me.2, other.2);
            let rule = |port: &str, p: u16| {
                format!(
                    "iptables -w 5 -A {c} -s {src} -d {dst} -p tcp --{port} {p} -j DROP",
                    c = self.chain,
                    src = theirs.ip(),
                    dst = mine.ip(),
                )
            };
            let script = format!(
                "{} && {}",
                rule("dport", mine.port()),
                rule("sport", theirs.port())
            );
            me.1.run(&script).await?;
        }
        Ok(())
    }

    /// Hooks the chain into host `index`'s INPUT, once.
    async fn hook(&self, index: usize, host: &Arc<Host>) -> Result<()> {
        let mut hooked = self.hooked.lock().await;
        if hooked.iter().any(|(i, _)| *i == index) {
            return Ok(());
        }
        let c = &self.chain;
        host.run(&format!(
            "iptables -w 5 -N {c} && iptables -w 5 -I INPUT -j {c}"
        ))
        .await?;
        hooked.push((index, host.clone()));
        Ok(())
    }

    /// Empties the chain on every host: every cut heals.
    pub async fn heal(&self) -> Result<()> {
        for (_, host) in self.hooked.lock().await.iter() {
            host.run(&format!("iptables -w 5 -F {}", self.chain))
                .await?;
        }
        Ok(())
    }

    /// Unhooks and deletes the chain on every host; the hosts whose chain
    /// would not go, with why.
    pub async fn remove(&self) -> Vec<String> {
        let mut left = Vec::new();
        let c = &self.chain;
        for (_, host) in self.hooked.lock().await.drain(..) {
            let script = format!(
                "iptables -w 5 -D INPUT -j {c}; iptables -w 5 -F {c}; iptables -w 5 -X {c}; ! iptables -w 5 -n -L {c} >/dev/null 2>&1"
            );
            if let Err(e) = host.run(&script).await {
                left.push(format!("{}: chain {c} ({e})", host.dest));
            }
        }
        left
    }
}
