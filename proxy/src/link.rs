//! One proxied connection: a worker's client on one side, its upstream on
//! the other. Requests are taken a frame at a time, in order, so a trap can
//! hold one and everything behind it waits, as on a real wire; replies are
//! matched to requests in order (Redis answers in order) so a trap can hold
//! or drop the reply to one command. Sentinel replies are rewritten.

use crate::command::{self, Class, Role};
use crate::resp;
use crate::sentinel;
use crate::trap::{self, Act, Caught, Sprung};
use crate::Inner;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};

/// How long the proxy waits for its upstream to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A request sent upstream whose reply has not come back yet.
struct Pending {
    class: Class,
    command: String,
    /// A trap that drops this request's reply.
    drop: Option<Arc<trap::Set>>,
    /// A trap that held this request: done once its reply shows what the
    /// node made of it.
    held: Option<(Arc<trap::Set>, Sprung)>,
}

/// How a connection ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// One side closed or failed: close the other.
    Closed,
    /// Reset the client: its reply was dropped, or its bytes were lost to a cut.
    Reset,
}

/// What both directions of one connection share.
struct Shared {
    fabric: Arc<Inner>,
    worker: usize,
    up: usize,
    role: Role,
    pending: Mutex<VecDeque<Pending>>,
    /// The connection subscribed: replies are pushes, not answers.
    subscribed: AtomicBool,
    /// Not RESP: forwarded as raw bytes, nothing matched.
    raw: AtomicBool,
    /// Lived through a cut: reset when the cut heals.
    cut: AtomicBool,
}

pub(crate) async fn serve(fabric: Arc<Inner>, worker: usize, up: usize, client: TcpStream) {
    let upstream = &fabric.upstreams[up];
    let role = upstream.role;
    let _ = client.set_nodelay(true);
    let shared = Shared {
        worker,
        up,
        role,
        pending: Mutex::new(VecDeque::new()),
        subscribed: AtomicBool::new(false),
        raw: AtomicBool::new(false),
        cut: AtomicBool::new(false),
        fabric: fabric.clone(),
    };
    let (client_r, client_w) = client.into_split();
    let source = fabric.onward_from_workers.then(|| fabric.workers[worker]);
    let server = match connect(source, upstream.addr).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(
                "proxy: {} unreachable for worker {worker}: {e}",
                upstream.name
            );
            return;
        }
    };
    let (server_r, server_w) = server.into_split();
    let seed = fabric.seed ^ (worker as u64) << 32 ^ (up as u64) << 16 ^ fabric.next_connection();
    let end = tokio::select! {
        end = requests(&shared, client_r, server_w, ChaCha8Rng::seed_from_u64(seed)) => end,
        end = replies(&shared, server_r, &client_w) => end,
        _ = closed(&fabric) => End::Closed,
    };
    // A held request whose reply never came (the link ended first) is done
    // all the same, with no reply to show.
    let unanswered: Vec<Pending> = shared
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .collect();
    for (set, sprung) in unanswered.into_iter().filter_map(|p| p.held) {
        set.done(sprung);
    }
    if end == End::Reset {
        // A zero linger makes the close an RST: the client sees its
        // connection reset, as after a lost reply or a healed partition.
        let _ = socket2::SockRef::from(client_w.as_ref()).set_linger(Some(Duration::ZERO));
        fabric.resets.fetch_add(1, Ordering::Relaxed);
        // No FIN first: the read half is gone, so this closes the socket.
        client_w.forget();
    }
}

async fn connect(
    source: Option<std::net::Ipv4Addr>,
    to: std::net::SocketAddr,
) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    // Leave from the worker's own address, as the worker's own connection
    // would: the node sees the same peer with or without the proxy.
    if let Some(source) = source {
        socket.bind((source, 0).into())?;
    }
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(to))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

async fn closed(fabric: &Inner) {
    let mut closed = fabric.closed.subscribe();
    let _ = closed.wait_for(|c| *c).await;
}

/// Reads more bytes into `buf`, unless the link is cut: then what arrives
/// is dropped, and when the cut heals the connection is reset.
async fn fill(shared: &Shared, from: &mut OwnedReadHalf, buf: &mut Vec<u8>) -> Result<(), End> {
    let mut cuts = shared.fabric.cut_gen.subscribe();
    loop {
        if shared.fabric.is_cut(shared.worker, shared.up) {
            shared.cut.store(true, Ordering::Relaxed);
        } else if shared.cut.load(Ordering::Relaxed) {
            return Err(End::Reset);
        }
        let start = buf.len();
        tokio::select! {
            n = from.read_buf(buf) => match n {
                Ok(0) | Err(_) => return Err(End::Closed),
                Ok(n) => {
                    if shared.fabric.is_cut(shared.worker, shared.up) {
                        shared.cut.store(true, Ordering::Relaxed);
                        shared.fabric.dropped.fetch_add(n as u64, Ordering::Relaxed);
                        buf.truncate(start);
                        continue;
                    }
                    return Ok(());
                }
            },
            _ = cuts.changed() => continue,
        }
    }
}

/// Client → upstream, one request frame at a time.
async fn requests(
    shared: &Shared,
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut rng: ChaCha8Rng,
) -> End {
    let fabric = &shared.fabric;
    let mut buf = Vec::with_capacity(4096);
    loop {
        match fill(shared, &mut from, &mut buf).await {
            Ok(()) => {}
            // The client is gone, but what it sent is still on its way, as
            // on a real wire: close toward the node after it (a FIN, not a
            // reset that would discard it) and let the replies drain until
            // the node closes too.
            Err(End::Closed) => {
                let _ = to.shutdown().await;
                return std::future::pending().await;
            }
            Err(end) => return end,
        }
        while let Some(frame) = next_frame(shared, &mut buf) {
            let words = resp::words(&frame).unwrap_or_default();
            command::learn(&words, &fabric.scripts);
            let class = command::classify(&words, shared.role, &fabric.keys, &fabric.scripts);
            let name = command::name(&words);
            if matches!(name.as_str(), "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE") {
                shared.subscribed.store(true, Ordering::Relaxed);
            }
            if let Some(latency) = fabric.latency {
                let ms = rng.random_range(latency.0.as_micros()..=latency.1.as_micros());
                tokio::time::sleep(Duration::from_micros(ms as u64)).await;
            }
            let mut pending = Pending {
                class,
                command: String::new(),
                drop: None,
                held: None,
            };
            for set in fabric.traps(shared.worker, shared.role, class) {
                match set.trap.act {
                    Act::HoldPast { hold, after } => {
                        let caught = catch(shared, class, command::summary(&words));
                        if set.take(caught.clone()) {
                            let mut answered = fabric.answered.subscribe();
                            let (cut_short, behind) = set
                                .hold_past(hold, &mut answered, shared.worker, after)
                                .await;
                            let sprung = Sprung {
                                held_ms: millis(caught.at.elapsed()),
                                caught,
                                bytes: frame.len(),
                                reset: 0,
                                cut_short,
                                behind_another: Some(behind),
                                delivered: Some(Instant::now()),
                                ..Sprung::default()
                            };
                            pending.held = Some((set.clone(), sprung));
                        }
                    }
                    Act::HoldRequest(hold) => {
                        let caught = catch(shared, class, command::summary(&words));
                        if set.take(caught.clone()) {
                            let cut_short = set.hold(hold).await;
                            let sprung = Sprung {
                                held_ms: millis(caught.at.elapsed()),
                                caught,
                                bytes: frame.len(),
                                cut_short,
                                delivered: Some(Instant::now()),
                                ..Sprung::default()
                            };
                            pending.held = Some((set.clone(), sprung));
                        }
                    }
                    Act::DropReply if pending.drop.is_none() => pending.drop = Some(set),
                    _ => {}
                }
            }
            // Evidence is only wanted for a reply a trap may catch.
            if pending.drop.is_some() || fabric.armed() {
                pending.command = command::summary(&words);
            }
            shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(pending);
            fabric.requests.fetch_add(1, Ordering::Relaxed);
            if to.write_all(&frame).await.is_err() {
                return End::Closed;
            }
        }
        if shared.raw.load(Ordering::Relaxed) && !buf.is_empty() {
            if to.write_all(&buf).await.is_err() {
                return End::Closed;
            }
            buf.clear();
        }
    }
}

/// The next whole frame in `buf`, unless the connection is raw or `buf`
/// holds only part of one. Bytes that are not RESP turn the connection raw:
/// from then on they pass through unparsed.
fn next_frame(shared: &Shared, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    if shared.raw.load(Ordering::Relaxed) {
        return None;
    }
    match resp::frame_len(buf) {
        Ok(Some(n)) => Some(buf.drain(..n).collect()),
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(
                "proxy: not RESP on worker {}'s link ({}): passing bytes through",
                shared.worker,
                e.0
            );
            shared.raw.store(true, Ordering::Relaxed);
            None
        }
    }
}

/// What a trap caught on this link, now: one home for requests and replies.
fn catch(shared: &Shared, class: Class, command: String) -> Caught {
    Caught {
        worker: shared.worker,
        node: shared.fabric.upstreams[shared.up].name.clone(),
        class,
        command,
        at: Instant::now(),
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Upstream → client, one reply frame at a time, each matched to its request.
async fn replies(shared: &Shared, mut from: OwnedReadHalf, to: &OwnedWriteHalf) -> End {
    let fabric = &shared.fabric;
    let mut buf = Vec::with_capacity(4096);
    loop {
        if let Err(end) = fill(shared, &mut from, &mut buf).await {
            return end;
        }
        while let Some(mut frame) = next_frame(shared, &mut buf) {
            if shared.role == Role::Sentinel {
                frame = rewrite(fabric, shared.worker, frame);
            }
            let push = frame.first() == Some(&b'>') || shared.subscribed.load(Ordering::Relaxed);
            let mut pending = match push {
                true => None,
                false => shared
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop_front(),
            };
            if let Some((set, mut sprung)) = pending.as_mut().and_then(|p| p.held.take()) {
                sprung.reply = Some(resp::brief(&frame));
                sprung.accepted = Some(resp::accepts(&frame));
                set.done(sprung);
            }
            if let Some(p) = &pending {
                // A lost acquire reply matters when the node granted it:
                // the client then holds nothing it knows of, while the key
                // holds its token. A refusal's reply passes.
                let lost = p.class != Class::Acquire || resp::grants(&frame);
                if let Some(set) = p.drop.as_ref().filter(|_| lost) {
                    let caught = catch(shared, p.class, p.command.clone());
                    if set.take(caught.clone()) {
                        set.done(Sprung {
                            caught,
                            held_ms: 0,
                            bytes: frame.len(),
                            reset: 1,
                            ..Sprung::default()
                        });
                        return End::Reset;
                    }
                }
                for set in fabric.traps(shared.worker, shared.role, p.class) {
                    if let Act::HoldReply { hold, granted_only } = set.trap.act {
                        if granted_only && !resp::grants(&frame) {
                            continue;
                        }
                        let caught = catch(shared, p.class, p.command.clone());
                        if set.take(caught.clone()) {
                            let cut_short = set.hold(hold).await;
                            set.done(Sprung {
                                held_ms: millis(caught.at.elapsed()),
                                caught,
                                bytes: frame.len(),
                                cut_short,
                                ..Sprung::default()
                            });
                        }
                    }
                }
            }
            let answered = pending.as_ref().map(|p| p.class).filter(|c| match c {
                Class::Other => false,
                Class::Acquire => resp::grants(&frame),
                _ => true,
            });
            if write(to, &frame).await.is_err() {
                return End::Closed;
            }
            if let Some(class) = answered {
                let (worker, role) = (shared.worker, shared.role);
                fabric
                    .answered
                    .send_modify(|a| a.count(worker, role, class));
            }
        }
        if shared.raw.load(Ordering::Relaxed) && !buf.is_empty() {
            if write(to, &buf).await.is_err() {
                return End::Closed;
            }
            buf.clear();
        }
    }
}

/// Writes through a shared write half (`&` so the caller can still reset it).
async fn write(to: &OwnedWriteHalf, bytes: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < bytes.len() {
        to.as_ref().writable().await?;
        match to.try_write(&bytes[done..]) {
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn rewrite(fabric: &Inner, worker: usize, frame: Vec<u8>) -> Vec<u8> {
    let Ok(mut value) = resp::parse(&frame) else {
        return frame;
    };
    if !sentinel::rewrite(&mut value, &fabric.addresses[worker]) {
        return frame;
    }
    let mut out = Vec::with_capacity(frame.len());
    value.encode(&mut out);
    out
}
