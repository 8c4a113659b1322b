//! What the topology's faults do on the hosts of `--nodes`
//! ([`crate::provision::Hosts`]): a node's host, a cut between two nodes'
//! hosts, a probe from a node's host.

use super::process::Remote;
use crate::error::{Error, Result};
use crate::provision::Hosts;
use nemesis::cluster::BoxFuture;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Duration;

impl Hosts for Remote {
    fn host_of(&self, name: &str) -> Arc<dyn nemesis::cluster::Host> {
        self.host_for(name).1.clone()
    }

    fn cut<'a>(
        &'a self,
        a: (&'a str, SocketAddrV4),
        b: (&'a str, SocketAddrV4),
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let ((ai, ah), (bi, bh)) = (self.host_for(a.0), self.host_for(b.0));
            if ai == bi {
                return Err(Error::Usage(format!(
                    "{} and {} both run on {}, and a cut between hosts cannot part them: give --nodes more hosts",
                    a.0, b.0, ah.dest
                )));
            }
            self.firewall.cut((ai, ah, a.1), (bi, bh, b.1)).await
        })
    }

    fn heal(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.firewall.heal())
    }

    fn remove_cuts(&self) -> BoxFuture<'_, Vec<String>> {
        Box::pin(self.firewall.remove())
    }

    fn connects<'a>(
        &'a self,
        from: &'a str,
        addr: &'a str,
        within: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.host_for(from).1.connects(addr, within))
    }
}
