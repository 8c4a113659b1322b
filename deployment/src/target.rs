//! A deployment lockstorm did not start, named by `--target`: the raw URL
//! the user typed, resolved into a checked [`Target`] (as turmoil keeps raw
//! settings and a resolved plan apart). Pure: nothing here connects.
//!
//! The password never appears in a URL lockstorm accepts: it comes from
//! `LOCKSTORM_REDIS_PASSWORD` when a connection is made, so no `Target`
//! (and nothing serialised from one) can carry it.

use serde::{Deserialize, Serialize};
use std::fmt;

use workloads::conn::Login;
pub use workloads::conn::PASSWORD_ENV;

const REDIS_PORT: u16 = 6379;
const SENTINEL_PORT: u16 = 26379;

/// How the deployment's nodes hold the lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Kind {
    /// One node (`redis://`, `rediss://`).
    Single,
    /// A primary with replicas, found through the Sentinels listed.
    Sentinel { master: String },
    /// Independent nodes, each asked for the lock.
    Redlock,
    /// One Redis Cluster, reached through the seeds listed: the lock is on
    /// the master of its key's slot.
    Cluster,
}

/// One `host:port` of the deployment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// Where lockstorm connects instead: a TLS bridge on loopback
    /// (`tls_bridge`) for a `rediss://` endpoint.
    #[serde(skip)]
    pub via: Option<std::net::SocketAddr>,
}

impl Endpoint {
    pub fn new(host: impl Into<String>, port: u16) -> Endpoint {
        Endpoint {
            host: host.into(),
            port,
            via: None,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// A checked `--target`: what it is, where, and how to log in (the
/// password apart). Serialises as `run.json` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    #[serde(flatten)]
    pub kind: Kind,
    /// The data nodes (`single`, `redlock`) or the Sentinels (`sentinel`).
    pub endpoints: Vec<Endpoint>,
    /// TLS (`rediss://`).
    pub tls: bool,
    /// An ACL user; the password comes from [`PASSWORD_ENV`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub db: u32,
}

impl Target {
    /// Reads a `--target` value; `Err` is one line naming the fix.
    pub fn parse(raw: &str) -> Result<Target, String> {
        let (scheme, rest) = raw.split_once("://").ok_or_else(|| {
            format!(
                "--target {raw}: no scheme; use redis://host:port, sentinel://host:port/<master>, redlock://host:port,host:port,host:port or redis+cluster://host:port[,host:port…]"
            )
        })?;
        let (login, rest) = match rest.rsplit_once('@') {
            Some((login, rest)) => (Some(login), rest),
            None => (None, rest),
        };
        let user = match login {
            None | Some("") => None,
            Some(l) if l.contains(':') => {
                return Err(format!(
                    "--target: a password in the URL would be stored with the run; give it in {PASSWORD_ENV} and write {scheme}://{}@…",
                    l.split(':').next().unwrap_or_default()
                ))
            }
            Some(l) => Some(l.to_string()),
        };
        let (hosts, path) = match rest.split_once('/') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        let default_port = match scheme {
            "sentinel" => SENTINEL_PORT,
            _ => REDIS_PORT,
        };
        let endpoints = hosts
            .split(',')
            .map(|h| endpoint(h, default_port))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|why| format!("--target {raw}: {why}"))?;
        let db = |path: Option<&str>| -> Result<u32, String> {
            match path {
                None | Some("") => Ok(0),
                Some(n) => n.parse().map_err(|_| {
                    format!("--target {raw}: the database is a number (/0, /1 …), not {n:?}")
                }),
            }
        };
        let one = |what: &str| -> Result<(), String> {
            match endpoints.len() {
                1 => Ok(()),
                n => Err(format!(
                    "--target {raw}: {what} names one node, not {n}; for independent nodes use redlock://, for Sentinels sentinel://"
                )),
            }
        };
        let target = |kind, tls, db| Target {
            kind,
            endpoints: endpoints.clone(),
            tls,
            user: user.clone(),
            db,
        };
        match scheme {
            "redis" | "rediss" => {
                one(scheme)?;
                Ok(target(Kind::Single, scheme == "rediss", db(path)?))
            }
            "sentinel" => {
                let master = path.unwrap_or_default();
                if master.is_empty() || master.contains('/') {
                    return Err(format!(
                        "--target {raw}: name the primary the Sentinels watch: sentinel://host:port[,host:port…]/<master>"
                    ));
                }
                Ok(target(
                    Kind::Sentinel {
                        master: master.to_string(),
                    },
                    false,
                    0,
                ))
            }
            "redlock" => {
                if endpoints.len() < 3 {
                    return Err(format!(
                        "--target {raw}: Redlock needs at least 3 independent nodes (5 is usual), not {}",
                        endpoints.len()
                    ));
                }
                Ok(target(Kind::Redlock, false, db(path)?))
            }
            "redis+cluster" => match db(path)? {
                0 => Ok(target(Kind::Cluster, false, 0)),
                n => Err(format!(
                    "--target {raw}: a Redis Cluster has database 0 only, not {n}: drop /{n}"
                )),
            },
            "rediss+cluster" => Err(format!(
                "--target {raw}: a TLS cluster is not reachable yet (its nodes name their own addresses, which lockstorm's TLS bridges do not stand in for): use redis+cluster:// on a cluster without TLS"
            )),
            other => Err(format!(
                "--target {raw}: unknown scheme {other}://; use redis://, rediss://, sentinel://, redlock:// or redis+cluster://"
            )),
        }
    }

    /// `single`, `sentinel`, `redlock`: the topology a client runs on
    /// (`sentinel` is the `replicated` one).
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Single => "single",
            Kind::Sentinel { .. } => "sentinel",
            Kind::Redlock => "redlock",
            Kind::Cluster => "cluster",
        }
    }

    /// The password from the environment, if set: read at each connection,
    /// never kept in the target.
    pub fn password() -> Option<String> {
        Login::password()
    }

    /// How the workers log in to its nodes (the password stays in the
    /// environment).
    pub fn login(&self) -> Login {
        Login {
            user: self.user.clone(),
            db: self.db,
        }
    }

    /// A connection URL for one endpoint of this target, with the password
    /// from the environment: for the redis client only, never to be logged.
    pub fn url_for(&self, at: &Endpoint, password: Option<&str>) -> String {
        let login = Login::userinfo(self.user.as_deref(), password);
        match at.via {
            // Its TLS bridge speaks TLS for us.
            Some(via) => format!("redis://{login}{via}/{}", self.db),
            None => {
                let scheme = if self.tls { "rediss" } else { "redis" };
                format!("{scheme}://{login}{at}/{}", self.db)
            }
        }
    }
}

impl fmt::Display for Target {
    /// The target as the user would write it, without any secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match (&self.kind, self.tls) {
            (Kind::Single, true) => "rediss",
            (Kind::Single, false) => "redis",
            (Kind::Sentinel { .. }, _) => "sentinel",
            (Kind::Redlock, _) => "redlock",
            (Kind::Cluster, _) => "redis+cluster",
        };
        let user = self
            .user
            .as_ref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let hosts: Vec<String> = self.endpoints.iter().map(Endpoint::to_string).collect();
        write!(f, "{scheme}://{user}{}", hosts.join(","))?;
        match &self.kind {
            Kind::Sentinel { master } => write!(f, "/{master}"),
            _ if self.db != 0 => write!(f, "/{}", self.db),
            _ => Ok(()),
        }
    }
}

fn endpoint(raw: &str, default_port: u16) -> Result<Endpoint, String> {
    let (host, port) = match raw.strip_prefix('[') {
        // [::1]:6379
        Some(v6) => {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{raw:?} opens [ and never closes it"))?;
            (host, after.strip_prefix(':'))
        }
        None => match raw.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (raw, None),
        },
    };
    if host.is_empty() {
        return Err(format!("a node with no host ({raw:?})"));
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("{p:?} is not a port (1 to 65535)"))?,
    };
    Ok(Endpoint::new(host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str, port: u16) -> Endpoint {
        Endpoint::new(host, port)
    }

    #[test]
    fn each_scheme_resolves_to_its_kind() {
        let t = Target::parse("redis://app@127.0.0.1:7000/2").unwrap();
        assert_eq!(t.kind, Kind::Single);
        assert_eq!(t.endpoints, [ep("127.0.0.1", 7000)]);
        assert_eq!((t.user.as_deref(), t.db, t.tls), (Some("app"), 2, false));
        assert!(Target::parse("rediss://localhost").unwrap().tls);
        assert_eq!(
            Target::parse("redis://localhost").unwrap().endpoints[0].port,
            6379
        );

        let t = Target::parse("sentinel://127.0.0.1:26379,127.0.0.2/mymaster").unwrap();
        let master = "mymaster".to_string();
        assert_eq!(t.kind, Kind::Sentinel { master });
        assert_eq!(
            t.endpoints,
            [ep("127.0.0.1", 26379), ep("127.0.0.2", 26379)]
        );

        let t = Target::parse("redlock://a:1,b:2,c:3,[::1]:4,e:5").unwrap();
        assert_eq!(t.kind, Kind::Redlock);
        assert_eq!(t.endpoints[3], ep("::1", 4));

        let t = Target::parse("redis+cluster://app@a:7000,b").unwrap();
        assert_eq!(t.kind, Kind::Cluster);
        assert_eq!(t.endpoints, [ep("a", 7000), ep("b", 6379)]);
        assert_eq!(t.to_string(), "redis+cluster://app@a:7000,b:6379");
    }

    #[test]
    fn bad_targets_are_one_line_naming_the_fix() {
        for (raw, says) in [
            ("127.0.0.1:6379", "no scheme"),
            ("redis://u:secret@h:1", "LOCKSTORM_REDIS_PASSWORD"),
            ("redis://a:1,b:2", "redlock://"),
            ("redis://h:0", "not a port"),
            ("redis://h:99999", "not a port"),
            ("redis://h:1/x", "database is a number"),
            ("sentinel://h:1", "name the primary"),
            ("sentinel://h:1/", "name the primary"),
            ("redlock://a:1,b:2", "at least 3"),
            ("memcached://h:1", "unknown scheme"),
            ("redis://:1", "no host"),
            ("redis+cluster://h:1/3", "database 0 only"),
            ("rediss+cluster://h:1", "use redis+cluster://"),
        ] {
            let why = Target::parse(raw).expect_err(raw);
            assert!(why.contains(says), "{raw}: {why}");
            assert!(!why.contains('\n'), "{raw}: {why}");
            assert!(!why.contains("secret"), "{raw} leaks its password: {why}");
        }
    }

    #[test]
    fn neither_display_nor_json_carries_a_password() {
        let t = Target::parse("redis://app@127.0.0.1:7000/2").unwrap();
        assert_eq!(t.to_string(), "redis://app@127.0.0.1:7000/2");
        let url = t.url_for(&t.endpoints[0], Some("p@ss:w/rd"));
        assert_eq!(url, "redis://app:p%40ss%3Aw%2Frd@127.0.0.1:7000/2");
        let json = serde_json::to_string(&t).unwrap();
        assert!(!json.contains("p@ss"), "{json}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&json).unwrap()["kind"],
            "single"
        );
        let s = Target::parse("sentinel://h:1,h:2/mm").unwrap();
        assert_eq!(s.to_string(), "sentinel://h:1,h:2/mm");
        assert_eq!(s.url_for(&s.endpoints[1], None), "redis://h:2/0");
    }
}
