//! ZooKeeper's client protocol, the few requests the lock recipe needs:
//! every ZooKeeper request lockstorm makes lives here, as every SQL
//! statement lives in `pg.rs` and every etcd request in `etcd.rs`. Jute's
//! encoding (big-endian ints and longs, length-prefixed strings and
//! buffers, each packet length-prefixed), one request in flight at a time
//! on one blocking connection, and a heartbeat thread that pings the
//! session every third of its timeout while nothing else is sent, as the
//! Java client's does: a process frozen by SIGSTOP stops pinging, and its
//! session expires on the ensemble while it sleeps.
//!
//! A session outlives its connection: when one breaks, the client dials
//! the next member with the session's id and password, and the member
//! either resumes it or says it expired (a timeout of 0). An expired
//! session's ephemeral nodes are gone, and with them any lock it held.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a request has no answer to act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Nothing reached ZooKeeper: the request took no effect.
    NotSent(String),
    /// Sent, and the connection broke before the answer: it may have
    /// taken effect.
    Unknown(String),
    /// The session expired: its ephemeral nodes are gone.
    Expired,
    /// ZooKeeper answered with an error code (`-101`: no node, `-110`:
    /// node exists), which applied nothing.
    Refused(i32),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotSent(why) => write!(f, "not sent: {why}"),
            Failure::Unknown(why) => write!(f, "no answer: {why}"),
            Failure::Expired => write!(f, "the session expired"),
            Failure::Refused(code) => write!(f, "ZooKeeper refused (code {code})"),
        }
    }
}

pub const NO_NODE: i32 = -101;
pub const NODE_EXISTS: i32 = -110;
const SESSION_EXPIRED: i32 = -112;

/// The part of a node's `Stat` the lock reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The zxid of the transaction that created the node: totally ordered
    /// across the ensemble and never reused.
    pub czxid: i64,
}

/// Request types (ZooDefs.OpCode).
mod op {
    pub const DELETE: i32 = 2;
    pub const GET_CHILDREN: i32 = 8;
    pub const PING: i32 = 11;
    pub const CREATE2: i32 = 15;
    pub const CLOSE: i32 = -11;
}

/// Create flags: an ephemeral node goes with its session; a sequential
/// one gets a ten-digit suffix from its parent's counter.
pub const PERSISTENT: i32 = 0;
pub const EPHEMERAL_SEQUENTIAL: i32 = 3;

/// A jute packet being written.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn int(mut self, v: i32) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn long(mut self, v: i64) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn bool(mut self, v: bool) -> Self {
        self.0.push(v as u8);
        self
    }
    fn buffer(self, v: &[u8]) -> Self {
        let mut out = self.int(v.len() as i32);
        out.0.extend(v);
        out
    }
    fn string(self, v: &str) -> Self {
        self.buffer(v.as_bytes())
    }
    /// The world-anyone ACL: all permissions, as the recipe's nodes have.
    fn open_acl(self) -> Self {
        self.int(1).int(0x1f).string("world").string("anyone")
    }
    /// Length-prefixed, as it goes on the wire.
    fn framed(self) -> Vec<u8> {
        let mut framed = (self.0.len() as i32).to_be_bytes().to_vec();
        framed.extend(self.0);
        framed
    }
}

/// A jute packet being read.
struct In<'a>(&'a [u8]);

impl In<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err(format!("a reply {n} bytes short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn int(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn long(&mut self) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn buffer(&mut self) -> Result<Vec<u8>, String> {
        let n = self.int()?;
        Ok(self.take(n.max(0) as usize)?.to_vec())
    }
    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.buffer()?).map_err(|e| e.to_string())
    }
    fn stat(&mut self) -> Result<Stat, String> {
        let czxid = self.long()?;
        // mzxid, ctime, mtime, the three versions, ephemeralOwner,
        // dataLength, numChildren, pzxid: read past, all 68 bytes checked.
        self.take(8 + 8 + 8 + 4 + 4 + 4 + 8 + 4 + 4 + 8)?;
        Ok(Stat { czxid })
    }
}

/// The session as the members know it.
#[derive(Clone, Copy, Debug, Default)]
struct Session {
    id: i64,
    password: [u8; 16],
    timeout: Duration,
    last_zxid: i64,
}

/// The connection to one member, if there is one, and the session it
/// carries (kept when the connection breaks, to resume it on another).
struct Line {
    stream: Option<TcpStream>,
    session: Session,
    xid: i32,
    /// When a packet was last sent: the heartbeat pings after a third of
    /// the timeout without one.
    sent: Instant,
}

/// A ZooKeeper session: a connection to one of its members at a time, kept
/// alive by a heartbeat thread until dropped (which closes the session,
/// its ephemeral nodes with it).
pub struct Client {
    shared: Arc<Shared>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    members: Vec<SocketAddr>,
    source: Option<Ipv4Addr>,
    op_timeout: Duration,
    line: Mutex<Line>,
    /// `false` once a member said the session expired.
    alive: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Client {
    /// A new session of `timeout` on the first member that answers.
    pub fn connect(
        members: &[String],
        source: Option<Ipv4Addr>,
        timeout: Duration,
        op_timeout: Duration,
    ) -> Result<Client, Failure> {
        let members = members
            .iter()
            .map(|m| m.parse().map_err(|e| Failure::NotSent(format!("{m}: {e}"))))
            .collect::<Result<Vec<SocketAddr>, _>>()?;
        let shared = Arc::new(Shared {
            members,
            source,
            op_timeout,
            line: Mutex::new(Line {
                stream: None,
                session: Session {
                    timeout,
                    ..Session::default()
                },
                xid: 0,
                sent: Instant::now(),
            }),
            alive: AtomicBool::new(true),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        shared.dial(&mut shared.line.lock().unwrap())?;
        let beating = shared.clone();
        let heartbeat = std::thread::Builder::new()
            .name("zk-heartbeat".into())
            .spawn(move || beating.beat())
            .map_err(|e| Failure::NotSent(format!("starting the heartbeat: {e}")))?;
        Ok(Client {
            shared,
            heartbeat: Some(heartbeat),
        })
    }

    /// Whether the session is alive as far as this client knows: no member
    /// has said it expired. A client frozen past its timeout still says
    /// yes until it next hears from a member.
    pub fn alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Creates `path` (with `flags`) holding `data`; the created path (a
    /// sequential node's has its suffix) and its `Stat`.
    pub fn create(&self, path: &str, data: &[u8], flags: i32) -> Result<(String, Stat), Failure> {
        let body = Out::default()
            .string(path)
            .buffer(data)
            .open_acl()
            .int(flags);
        self.shared
            .call(op::CREATE2, body, |r| Ok((r.string()?, r.stat()?)))
    }

    /// Deletes `path`, whatever its version.
    pub fn delete(&self, path: &str) -> Result<(), Failure> {
        let body = Out::default().string(path).int(-1);
        self.shared.call(op::DELETE, body, |_| Ok(()))
    }

    /// The names of `path`'s children.
    pub fn children(&self, path: &str) -> Result<Vec<String>, Failure> {
        let body = Out::default().string(path).bool(false);
        self.shared.call(op::GET_CHILDREN, body, |r| {
            let n = r.int()?;
            (0..n.max(0)).map(|_| r.string()).collect()
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap() = true;
        self.shared.wake.notify_all();
        if let Some(heartbeat) = self.heartbeat.take() {
            let _ = heartbeat.join();
        }
        // Ends the session now rather than a timeout later: its nodes go.
        if self.alive() {
            let _ = self.shared.call(op::CLOSE, Out::default(), |_| Ok(()));
        }
    }
}

impl Line {
    fn read_packet(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
        let mut len = [0; 4];
        stream.read_exact(&mut len)?;
        let len = i32::from_be_bytes(len);
        if !(0..=16 << 20).contains(&len) {
            return Err(std::io::Error::other(format!("a packet of {len} bytes")));
        }
        let mut packet = vec![0; len as usize];
        stream.read_exact(&mut packet)?;
        Ok(packet)
    }
}

impl Shared {
    /// Connects `line` to the first member that takes its session: a new
    /// one, or the session resumed. A session a member says expired is
    /// [`Failure::Expired`], and stays so.
    fn dial(&self, line: &mut Line) -> Result<(), Failure> {
        let mut last = Failure::NotSent("no member".into());
        for member in &self.members {
            match self.handshake(*member, line.session) {
                Ok((stream, session)) => {
                    line.stream = Some(stream);
                    line.session = session;
                    line.sent = Instant::now();
                    return Ok(());
                }
                Err(Failure::Expired) => {
                    self.alive.store(false, Ordering::SeqCst);
                    return Err(Failure::Expired);
                }
                Err(failure) => last = failure,
            }
        }
        Err(last)
    }

    fn handshake(
        &self,
        member: SocketAddr,
        mut session: Session,
    ) -> Result<(TcpStream, Session), Failure> {
        let failed = |e: String| Failure::NotSent(format!("{member}: {e}"));
        let mut stream = crate::conn::tcp_from(member, self.source, self.op_timeout)
            .map_err(|e| failed(e.to_string()))?;
        let connect = Out::default()
            .int(0)
            .long(session.last_zxid)
            .int(session.timeout.as_millis() as i32)
            .long(session.id)
            .buffer(&session.password)
            .bool(false);
        stream
            .write_all(&connect.framed())
            .map_err(|e| failed(e.to_string()))?;
        let reply = Line::read_packet(&mut stream).map_err(|e| failed(e.to_string()))?;
        let mut r = In(&reply);
        let (_version, timeout, id, password) =
            (|| Ok::<_, String>((r.int()?, r.int()?, r.long()?, r.buffer()?)))().map_err(failed)?;
        if timeout <= 0 {
            return Err(Failure::Expired);
        }
        session.id = id;
        session.timeout = Duration::from_millis(timeout as u64);
        session.password = password.try_into().unwrap_or([0; 16]);
        Ok((stream, session))
    }

    /// One request and its reply on the session's connection, dialling a
    /// member first if there is none. A request whose connection broke
    /// before its reply is [`Failure::Unknown`]; the next dials again.
    fn call<T>(
        &self,
        kind: i32,
        body: Out,
        read: impl FnOnce(&mut In) -> Result<T, String>,
    ) -> Result<T, Failure> {
        if !self.alive.load(Ordering::SeqCst) {
            return Err(Failure::Expired);
        }
        let mut line = self.line.lock().unwrap();
        if line.stream.is_none() {
            self.dial(&mut line)?;
        }
        let xid = match kind {
            op::PING => -2,
            _ => {
                line.xid += 1;
                line.xid
            }
        };
        let mut packet = Out::default().int(xid).int(kind);
        packet.0.extend(body.0);
        line.sent = Instant::now();
        let stream = line.stream.as_mut().expect("dialled above");
        let answered = match stream.write_all(&packet.framed()) {
            // A packet cut short is one the member cannot read: not applied.
            Err(e) => Err(Failure::NotSent(e.to_string())),
            Ok(()) => Line::read_packet(stream).map_err(|e| Failure::Unknown(e.to_string())),
        };
        let reply = match answered {
            Ok(reply) => reply,
            Err(failure) => {
                line.stream = None;
                return Err(failure);
            }
        };
        let mut r = In(&reply);
        let (_xid, zxid, err) =
            (|| Ok::<_, String>((r.int()?, r.long()?, r.int()?)))().map_err(Failure::Unknown)?;
        if zxid > 0 {
            line.session.last_zxid = zxid;
        }
        match err {
            0 => read(&mut r).map_err(Failure::Unknown),
            SESSION_EXPIRED => {
                self.alive.store(false, Ordering::SeqCst);
                Err(Failure::Expired)
            }
            code => Err(Failure::Refused(code)),
        }
    }

    /// Pings the session a third of its timeout after the last packet,
    /// until the client is dropped or the session expired. A ping that
    /// fails leaves the connection to be dialled again by the next one.
    fn beat(&self) {
        let mut stop = self.stop.lock().unwrap();
        loop {
            let due = {
                let line = self.line.lock().unwrap();
                (line.sent + line.session.timeout / 3).saturating_duration_since(Instant::now())
            };
            if !due.is_zero() {
                stop = self.wake.wait_timeout(stop, due).unwrap().0;
            }
            if *stop {
                return;
            }
            if !due.is_zero() {
                continue;
            }
            drop(stop);
            let pinged = self.call(op::PING, Out::default(), |_| Ok(()));
            stop = self.stop.lock().unwrap();
            if pinged == Err(Failure::Expired) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_request_is_encoded_as_jute_frames_it() {
        let body = Out::default()
            .string("/l")
            .buffer(b"t")
            .open_acl()
            .int(EPHEMERAL_SEQUENTIAL)
            .framed();
        let mut expected = vec![0, 0, 0, 42];
        expected.extend([0, 0, 0, 2, b'/', b'l', 0, 0, 0, 1, b't']);
        expected.extend([0, 0, 0, 1, 0, 0, 0, 0x1f]);
        expected.extend([0, 0, 0, 5, b'w', b'o', b'r', b'l', b'd']);
        expected.extend([0, 0, 0, 6, b'a', b'n', b'y', b'o', b'n', b'e']);
        expected.extend([0, 0, 0, 3]);
        assert_eq!(body, expected);
    }

    #[test]
    fn a_stat_is_read_for_its_creation_zxid() {
        let mut stat = Vec::new();
        stat.extend(7i64.to_be_bytes());
        stat.extend([0; 36]);
        stat.extend(42i64.to_be_bytes());
        stat.extend([0; 16]);
        let got = In(&stat).stat().unwrap();
        assert_eq!(got.czxid, 7);
        assert!(In(&stat[..60]).stat().is_err(), "a short stat is an error");
    }
}
