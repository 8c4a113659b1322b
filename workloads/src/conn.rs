//! A Redis connection that classifies failures the way the history needs them:
//! a command that never reached the server is `fail`, one whose reply was lost
//! is `info`. It leaves from the worker's own loopback address when it has
//! one, so a partition can cut one worker off from one node.

use crate::Outcome;
use redis::{ConnectionLike, Parser, RedisError, RedisResult, Value};
use socket2::{Domain, Socket, Type};
use std::io::{BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// The environment variable a deployment's password comes from. It is
/// read when a connection opens and never written anywhere: not in a spec,
/// not in `run.json`, not in a log.
pub const PASSWORD_ENV: &str = "LOCKSTORM_REDIS_PASSWORD";

/// How to log in to a deployment's nodes: its ACL user, if any, the
/// password from [`PASSWORD_ENV`], if set, and the database the user named
/// (`redis://host:port/5`), selected on every connection to a data node, so
/// that nothing the run writes lands in another database.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Login {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub db: u32,
}

fn is_zero(db: &u32) -> bool {
    *db == 0
}

impl Login {
    pub fn password() -> Option<String> {
        std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty())
    }

    /// The `user:password@` part of a URL for a client library that takes
    /// only URLs, percent-encoded; empty with neither. Never to be logged.
    pub fn userinfo(user: Option<&str>, password: Option<&str>) -> String {
        match (user, password) {
            (Some(u), Some(p)) => format!("{}:{}@", encode(u), encode(p)),
            (None, Some(p)) => format!(":{}@", encode(p)),
            (Some(u), None) => format!("{}@", encode(u)),
            (None, None) => String::new(),
        }
    }
}

/// Percent-encodes what a URL's login part cannot hold as is.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub struct Conn {
    addr: String,
    source: Option<Ipv4Addr>,
    timeout: Duration,
    login: Option<Login>,
    link: Option<Link>,
}

impl Conn {
    pub fn new(addr: &str, timeout: Duration) -> Self {
        Self::from(addr, None, timeout)
    }

    /// A connection whose packets leave from `source` (any 127.0.0.x).
    pub fn from(addr: &str, source: Option<Ipv4Addr>, timeout: Duration) -> Self {
        Conn {
            addr: addr.to_string(),
            source,
            timeout,
            login: None,
            link: None,
        }
    }

    /// Logs in on every connection it opens (a deployment's nodes).
    pub fn with_login(mut self, login: Option<Login>) -> Self {
        self.login = login;
        self
    }

    fn connect(&mut self) -> std::io::Result<&mut Link> {
        if self.link.is_none() {
            let mut link = Link::open(&self.addr, self.source, self.timeout)?;
            if let Some(login) = &self.login {
                link.log_in(login)?;
                link.select(login.db)?;
            }
            self.link = Some(link);
        }
        Ok(self.link.as_mut().expect("just connected"))
    }

    /// Runs one request. A failure to connect means nothing was sent (`fail`);
    /// a timeout or broken connection after sending means the outcome is
    /// unknown (`info`), and the connection is dropped because a late reply
    /// would otherwise be read as the answer to the next request.
    pub fn run<T>(
        &mut self,
        request: impl FnOnce(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Outcome<T> {
        let link = match self.connect() {
            Ok(link) => link,
            Err(e) => {
                self.link = None;
                return Outcome::Fail(format!("unreachable: {e}"));
            }
        };
        match request(link) {
            Ok(v) => Outcome::Ok(v),
            Err(e) if e.is_timeout() => {
                self.link = None;
                Outcome::Info("timeout".into())
            }
            Err(e)
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() =>
            {
                self.link = None;
                Outcome::Info(format!("connection-lost: {}", short(&e)))
            }
            // The server answered with an error: the command did not take effect.
            Err(e) => Outcome::Fail(short(&e)),
        }
    }
}

fn short(e: &RedisError) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// A TCP connection to `target` from `source` (a worker's own loopback
/// address, so a partition can single it out), without Nagle's delay, each
/// read and write bounded by `timeout`.
pub(crate) fn tcp_from(
    target: SocketAddr,
    source: Option<Ipv4Addr>,
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    if let Some(ip) = source {
        socket.bind(&SocketAddr::from((ip, 0)).into())?;
    }
    socket.connect_timeout(&target.into(), timeout)?;
    socket.set_tcp_nodelay(true)?;
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// One TCP connection speaking RESP through redis-rs' own command encoding
/// and reply parser; only the socket is ours, because redis-rs cannot bind a
/// source address.
struct Link {
    stream: BufReader<TcpStream>,
    parser: Parser,
    open: bool,
}

impl Link {
    fn open(addr: &str, source: Option<Ipv4Addr>, timeout: Duration) -> std::io::Result<Self> {
        let target: SocketAddr = addr
            .parse()
            .map_err(|e| std::io::Error::other(format!("bad address {addr}: {e}")))?;
        let stream = tcp_from(target, source, timeout)?;
        Ok(Link {
            stream: BufReader::new(stream),
            parser: Parser::new(),
            open: true,
        })
    }

    /// `AUTH [user] password`, when there is a password to give.
    fn log_in(&mut self, login: &Login) -> std::io::Result<()> {
        let Some(password) = Login::password() else {
            return Ok(());
        };
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = &login.user {
            auth.arg(user);
        }
        auth.arg(password)
            .query::<()>(self)
            .map_err(|e| std::io::Error::other(format!("AUTH refused: {}", short(&e))))
    }

    /// `SELECT db`, before the connection carries anything else; database 0
    /// is every connection's own.
    fn select(&mut self, db: u32) -> std::io::Result<()> {
        if db == 0 {
            return Ok(());
        }
        redis::cmd("SELECT")
            .arg(db)
            .query::<()>(self)
            .map_err(|e| std::io::Error::other(format!("SELECT {db} refused: {}", short(&e))))
    }

    fn read(&mut self) -> RedisResult<Value> {
        let value = self.parser.parse_value(&mut self.stream);
        if value.is_err() {
            self.open = false;
        }
        value
    }
}

impl ConnectionLike for Link {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.stream.get_mut().write_all(cmd)?;
        self.read()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.stream.get_mut().write_all(cmd)?;
        let mut replies = Vec::with_capacity(count);
        for i in 0..offset + count {
            let value = self.read()?;
            if i >= offset {
                replies.push(value);
            }
        }
        Ok(replies)
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}
