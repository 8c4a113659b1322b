//! The observer: one connection per lock node, straight to the node (not
//! through the fault proxy, not from a worker's address, so faults aimed at
//! workers never touch it), that records the lock key's life in the history
//! as events of process `"observer"` (`key-set`, `key-renewed`,
//! `key-expired`, `key-deleted`; see `checker::history::key`).
//!
//! One RESP3 connection per node carries both sources, so they arrive in
//! the order the node produced them: keyspace notifications for the lock
//! key (what a command did, and Redis's own expiry, which `MONITOR` never
//! shows) and `MONITOR` (who sent it, from which address, with which
//! token and TTL). `track.rs` reads that stream; this module owns the
//! sockets and the threads. Each event is stamped when the observer read
//! it: after the node acted, never before.
//!
//! A node that goes away (killed, restarted) is reconnected until the run
//! stops; what happened while no connection was up is not reported, and
//! nothing is invented for it: a key a restart dropped shows only as the
//! next `key-set` with no `key-expired`/`key-deleted` before it.

mod track;

use crate::journal::HistoryWriter;
use checker::history::{key, OpType, Process};
use nemesis::proxy::resp::{self, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use track::{Item, Seen, Tracker};

/// How long a read waits before the thread looks at its stop flag.
const POLL: Duration = Duration::from_millis(100);
/// How long connecting to a node, or its answer to a setup command, may take.
const CONNECT: Duration = Duration::from_secs(1);
/// How long to wait before connecting again to a node that went away.
const RETRY: Duration = Duration::from_millis(100);

/// A lock node to observe.
pub struct Node {
    pub name: String,
    pub addr: SocketAddr,
}

/// Who sent a command, from the address it came from: each worker (and its
/// fault proxy, which connects onward from the worker's address) has its own.
#[derive(Clone)]
pub struct Senders {
    /// Worker `i` connects from `workers[i]`.
    pub workers: Vec<Ipv4Addr>,
    /// The data nodes' addresses: a replica's primary replays the lock's
    /// commands from one of them, which is nobody's act on the replica.
    pub nodes: Vec<Ipv4Addr>,
}

impl Senders {
    fn name(&self, ip: Ipv4Addr) -> Option<String> {
        let i = self.workers.iter().position(|w| *w == ip)?;
        Some(checker::history::worker_name(i))
    }
}

/// The running observer: one thread per node, until [`Observer::stop`].
pub struct Observer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Observer {
    /// Starts observing every node, and returns once each has answered its
    /// setup or failed it (or [`CONNECT`] twice over has passed), so the
    /// workers' first commands are seen.
    pub fn start(
        nodes: Vec<Node>,
        key: String,
        senders: Senders,
        history: Arc<HistoryWriter>,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, set_up) = std::sync::mpsc::channel();
        let threads: Vec<_> = nodes
            .into_iter()
            .map(|node| {
                let (stop, senders, history) = (stop.clone(), senders.clone(), history.clone());
                let (ready, key) = (ready.clone(), key.clone());
                std::thread::spawn(move || watch(&node, &key, &senders, &history, &stop, ready))
            })
            .collect();
        let deadline = std::time::Instant::now() + 2 * CONNECT;
        for _ in &threads {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if set_up.recv_timeout(left).is_err() {
                break;
            }
        }
        Observer { stop, threads }
    }

    /// Stops every thread and waits for it: nothing is recorded after this.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

/// A run that ends on an error stops its observer too (without waiting).
impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Observes one node until `stop`, reconnecting whenever it goes away.
/// Says on `ready` when its first setup is done, whatever its outcome.
fn watch(
    node: &Node,
    key: &str,
    senders: &Senders,
    history: &HistoryWriter,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<()>,
) {
    let mut lost = false;
    while !stop.load(Ordering::SeqCst) {
        let opened = Session::open(node, key, senders);
        let _ = ready.send(());
        match opened {
            Ok(mut session) => {
                if lost {
                    tracing::info!(target: "observer", "observing {} again", node.name);
                }
                lost = false;
                let why = session.follow(node, senders, history, stop);
                if let Err(e) = why {
                    // Expected when a fault kills or restarts the node: info.
                    tracing::info!(target: "observer", "lost {}: {e}; events on it until it answers again are not recorded", node.name);
                    lost = true;
                }
            }
            Err(Refused::Unsupported(why)) => {
                tracing::warn!(target: "observer", "{} is not observed: {why}", node.name);
                return;
            }
            Err(Refused::Io(e)) => {
                if !lost {
                    tracing::warn!(target: "observer", "cannot observe {}: {e}; retrying", node.name);
                    lost = true;
                }
            }
        }
        std::thread::sleep(RETRY);
    }
}

enum Refused {
    /// The node cannot be observed this way (older than Redis 7).
    Unsupported(String),
    Io(std::io::Error),
}

impl From<std::io::Error> for Refused {
    fn from(e: std::io::Error) -> Self {
        Refused::Io(e)
    }
}

/// One connection in observing mode, and what is left of the last read.
struct Session {
    stream: TcpStream,
    buf: Vec<u8>,
    tracker: Tracker,
}

impl Session {
    /// Connects and sets up: RESP3, the key's token now, notifications for
    /// the key (set on every connect, so a restarted node gets them back),
    /// then `MONITOR`.
    fn open(node: &Node, key: &str, senders: &Senders) -> Result<Session, Refused> {
        let stream = TcpStream::connect_timeout(&node.addr, CONNECT)?;
        stream.set_read_timeout(Some(CONNECT))?;
        let mut s = Session {
            stream,
            buf: Vec::new(),
            tracker: Tracker::new(key, None, senders.nodes.clone()),
        };
        let hello = s.ask(&["HELLO", "3"])?;
        let version = map_get(&hello, b"version").unwrap_or_default();
        let major = version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok());
        if major.is_none_or(|m| m < 7) {
            // Before 7.0 MONITOR shows a command before it runs, and the
            // order this reading relies on does not hold.
            return Err(Refused::Unsupported(format!(
                "the observer needs Redis 7 or newer, and it runs {version:?}"
            )));
        }
        let current = s.current(key)?;
        s.tracker = Tracker::new(key, current, senders.nodes.clone());
        s.ask(&["CONFIG", "SET", "notify-keyspace-events", "Kg$x"])?;
        s.ask(&["SUBSCRIBE", &channel(key)])?;
        s.ask(&["MONITOR"])?;
        s.stream.set_read_timeout(Some(POLL))?;
        Ok(s)
    }

    /// The key's value on the node now. A cluster node that does not serve
    /// the key's slot answers `MOVED`: a replica of its master reads it
    /// once told `READONLY`; a master of other slots has none.
    fn current(&mut self, key: &str) -> std::io::Result<Option<String>> {
        let moved = |e: &std::io::Error| e.to_string().starts_with("GET answered MOVED");
        let value = match self.ask(&["GET", key]) {
            Err(e) if moved(&e) => {
                self.ask(&["READONLY"])?;
                match self.ask(&["GET", key]) {
                    Err(e) if moved(&e) => return Ok(None),
                    other => other?,
                }
            }
            other => other?,
        };
        Ok(value
            .text()
            .map(|t| String::from_utf8_lossy(t).into_owned()))
    }

    /// Sends one command and reads its answer (an error answer is an error).
    fn ask(&mut self, words: &[&str]) -> std::io::Result<Value> {
        let request = Value::Items(
            b'*',
            Some(
                words
                    .iter()
                    .map(|w| Value::Bulk(b'$', Some(w.as_bytes().to_vec())))
                    .collect(),
            ),
        );
        let mut out = Vec::new();
        request.encode(&mut out);
        self.stream.write_all(&out)?;
        // A notification may come first (a command ran after `SUBSCRIBE`):
        // it is not the answer, and with no `MONITOR` line yet to say who
        // sent it, it is dropped.
        let answer = loop {
            match self.next_frame()? {
                frame if matches!(item(&frame), Some(Item::Notice(_))) => continue,
                frame => break frame,
            }
        };
        match answer {
            Value::Line(b'-', why) => Err(std::io::Error::other(format!(
                "{} answered {}",
                words[0],
                String::from_utf8_lossy(&why)
            ))),
            v => Ok(v),
        }
    }

    /// The next whole frame; a timeout is an error of kind `WouldBlock` or
    /// `TimedOut`, and leaves what was read for the next call.
    fn next_frame(&mut self) -> std::io::Result<Value> {
        loop {
            let garbage = |e: resp::Garbage| std::io::Error::new(ErrorKind::InvalidData, e.0);
            if let Some(n) = resp::frame_len(&self.buf).map_err(garbage)? {
                let frame: Vec<u8> = self.buf.drain(..n).collect();
                return resp::parse(&frame).map_err(garbage);
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk)? {
                0 => return Err(ErrorKind::UnexpectedEof.into()),
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Records what the node shows until `stop` (`Ok`) or the connection
    /// fails (`Err`).
    fn follow(
        &mut self,
        node: &Node,
        senders: &Senders,
        history: &HistoryWriter,
        stop: &AtomicBool,
    ) -> std::io::Result<()> {
        while !stop.load(Ordering::SeqCst) {
            let frame = match self.next_frame() {
                Ok(frame) => frame,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(e) => return Err(e),
            };
            let Some(item) = item(&frame) else { continue };
            if let Some(seen) = self.tracker.feed(item, |ip| senders.name(ip)) {
                record(history, &node.name, seen);
            }
        }
        Ok(())
    }
}

/// The keyspace channel of the lock key (database 0, the workers' own).
fn channel(key: &str) -> String {
    format!("__keyspace@0__:{key}")
}

/// A frame of the stream as an item: a notification (a push `message`
/// on the key's channel) or a `MONITOR` line (a simple string).
fn item(frame: &Value) -> Option<Item> {
    match frame {
        Value::Items(b'>', Some(parts)) => match &parts[..] {
            [kind, _, event] if kind.text() == Some(b"message") => Some(Item::Notice(
                String::from_utf8_lossy(event.text()?).into_owned(),
            )),
            _ => None,
        },
        Value::Line(b'+', line) => track::monitor_line(&String::from_utf8_lossy(line)),
        _ => None,
    }
}

/// The value of `name` in a RESP3 map.
fn map_get(map: &Value, name: &[u8]) -> Option<String> {
    let Value::Items(b'%', Some(items)) = map else {
        return None;
    };
    items
        .chunks(2)
        .find(|kv| kv[0].text() == Some(name))
        .and_then(|kv| kv.get(1)?.text())
        .map(|t| String::from_utf8_lossy(t).into_owned())
}

fn record(history: &HistoryWriter, node: &str, seen: Seen) {
    let mut value = serde_json::Map::new();
    if let Some(by) = seen.by {
        value.insert(key::BY.into(), by.into());
    }
    if let Some(ttl) = seen.ttl_ms {
        value.insert(key::TTL_MS.into(), ttl.into());
    }
    let mut event = history
        .now(Process::observer(), OpType::Info, seen.f)
        .with_node(node)
        .with_value(value.into());
    if let Some(token) = seen.token {
        event = event.with_token(token);
    }
    history.append(event, None);
}

/// The data nodes of a topology's deployment, by address.
pub fn data_nodes(observed: &[Node]) -> deployment::own_keys::DataNodes {
    observed
        .iter()
        .map(|n| {
            // Reached where the run reaches it (a TLS target's bridge).
            let at = deployment::Endpoint {
                via: Some(n.addr),
                ..deployment::Endpoint::new(n.addr.ip().to_string(), n.addr.port())
            };
            (n.name.clone(), at)
        })
        .collect()
}
