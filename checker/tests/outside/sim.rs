//! A simulated *correct* lock server with leases, and the clients that use
//! it, written from the history format alone (docs/formats.md, "history.jsonl";
//! history/src/edn.rs for Jepsen's EDN) and from nothing of lockstorm's
//! checker: the histories it writes are what a checker is tested on from
//! outside.
//!
//! Self-contained (std only, its own seeded PRNG), so a bench or an example
//! can take it in with `#[path = "../tests/outside/sim.rs"] mod sim;`.
//!
//! # The model
//!
//! One lock. The server keeps its holder and the holder's lease deadline
//! (`now + ttl` at the grant). `acquire(owner)` is granted iff the lock is
//! free or the lease ran out, else refused `lock-busy` (an acquire by the
//! holder itself is refused too: no re-entry). `release(owner)` frees the
//! lock iff `owner` holds it and its lease is live, else it is refused
//! `not-held`. An owner is the acquire attempt's token, or (tokenless) the
//! process id.
//!
//! Every request reaches the server (and takes effect there) at an instant
//! strictly between its invoke and its completion, or never (a lost
//! request, completed `info`): the histories are linearizable by
//! construction. Time is in ns; no two happenings (events written, requests
//! reaching the server) share an instant, so `time` strictly increases in
//! file order, and `index` is the file position.
//!
//! A client believes it holds from its acquire `ok` to its release's invoke;
//! it always sends that release well within its lease, so no two beliefs
//! overlap. The one lease that runs out on a believed hold is a *slow
//! release* (the release is sent within the lease and reaches the server
//! after it: refused `not-held`, and others may be granted while it is on
//! its way), the `pause --at releasing` case of a correct lock. A lease
//! that runs out before the release is even sent, with another granted
//! meanwhile, is two workers believing they hold at once: not a correct
//! lock's history under mutual exclusion, so never drawn.
//!
//! # Shapes, each with its knob in [`Config`]
//!
//! - a release after a refused acquire (Jepsen's lock workloads do it),
//!   refused `not-held` (tokenless it is granted in one case: the process
//!   still holds from a hold whose release request was lost);
//! - a double release: release `ok`, then the same release again, `not-held`;
//! - a release under a token the process never acquired (a forged one, or
//!   another process's refused attempt's), `not-held`;
//! - tokens on every op, or none (the owner is then the process);
//! - an acquire whose reply is lost (`info`, error `timeout`): its request
//!   may have reached the server (granted or refused there) or not; a grant
//!   nobody learnt of runs out with its lease. The client then either
//!   retires its id (Jepsen: the new id is the old + `processes`) or keeps
//!   it and sends a release of that token (`ok` if the grant took effect and
//!   still holds, `not-held` otherwise; sometimes only after a TTL, so it
//!   was granted and ran out);
//! - a release whose reply is lost (`info`), taken effect or not;
//! - the slow release above;
//! - ops left without completion when the run stops.
//!
//! [`inject_second_holder`] makes the invalid twin: one acquire granted
//! while another process certainly holds.

#![allow(dead_code)] // each binary that includes this uses a part of it

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::io::{self, BufRead, Read, Write};

pub const US: u64 = 1_000;
pub const MS: u64 = 1_000_000;

/// One-way network delay (client → server, server → client).
const NET: (u64, u64) = (20 * US, MS);
/// Between a client's completion and its next invoke.
const THINK: (u64, u64) = (50 * US, 2 * MS);
/// From an acquire `ok` to the release's invoke.
const HOLD: (u64, u64) = (100 * US, 4 * MS);
/// How long a client waits for a reply before it completes `info`.
const TIMEOUT: u64 = 5 * MS;
/// The shortest TTL the model allows: a hold, with the grant's way back
/// and its release's way to the server, must fit well inside the lease.
pub const MIN_TTL: u64 = 2 * (HOLD.1 + 2 * NET.1);

// ---------------------------------------------------------------- PRNG

/// splitmix64: small, fast, and the same on every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (the modulo bias is far below what matters here).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }
}

// ---------------------------------------------------------------- events

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Invoke => "invoke",
            Kind::Ok => "ok",
            Kind::Fail => "fail",
            Kind::Info => "info",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Acquire,
    Release,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Release => "release",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    NotHeld,
    LockBusy,
    Timeout,
}

impl Error {
    pub fn name(self) -> &'static str {
        match self {
            Error::NotHeld => "not-held",
            Error::LockBusy => "lock-busy",
            Error::Timeout => "timeout",
        }
    }
}

/// A lock token, one per acquire attempt: `t-<process>-<n>`, with `n`
/// unique in the history. A forged one, `f-<process>-<n>`, was never
/// acquired by anyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token {
    pub process: u64,
    pub n: u64,
    pub forged: bool,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = if self.forged { 'f' } else { 't' };
        write!(f, "{tag}-{}-{}", self.process, self.n)
    }
}

/// One history event (one line of either format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ev {
    pub index: u64,
    pub time: u64,
    pub process: u64,
    pub kind: Kind,
    pub op: Op,
    pub error: Option<Error>,
    /// Carried by every event of a history with tokens, by none otherwise.
    pub token: Option<Token>,
}

// ---------------------------------------------------------------- config

/// What to simulate. [`Config::new`] draws every shape now and then;
/// set a knob to 0 to leave its shape out.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub seed: u64,
    /// Clients running at once.
    pub processes: u64,
    /// Invocations before the clients stop (a holder still sends its
    /// release, so a few more follow).
    pub lock_ops: u64,
    /// Tokens on every event (the owner is the attempt), or none (the owner
    /// is the process).
    pub tokens: bool,
    /// The lease, ns; at least [`MIN_TTL`].
    pub ttl: u64,
    /// Fraction of acquires whose reply is lost (`info`).
    pub info_acquire: f64,
    /// Fraction of releases whose reply is lost (`info`).
    pub info_release: f64,
    /// Of the lost replies, the fraction whose request never reached the
    /// server either (the rest took effect there).
    pub lost_request: f64,
    /// After an `info`, the chance the client keeps its process id (and,
    /// after an acquire, releases that token); otherwise it goes on under
    /// a new id, the old one + `processes`.
    pub keep_id: f64,
    /// A kept id's release after an `info` acquire waits a TTL first.
    pub late_release_after_info: f64,
    /// A refused acquire is followed by a release of its token.
    pub release_after_refused: f64,
    /// A release `ok` is followed by the same release again.
    pub double_release: f64,
    /// A release `ok` is followed by a release under a token the process
    /// never acquired (tokens only).
    pub foreign_token: f64,
    /// A holder's release reaches the server after its lease ran out.
    pub slow_release: f64,
    /// Once the clients stop, the chance each op still in flight is left
    /// without completion.
    pub unfinished: f64,
}

impl Config {
    pub fn new(seed: u64, processes: u64, lock_ops: u64) -> Self {
        Config {
            seed,
            processes,
            lock_ops,
            tokens: true,
            ttl: 30 * MS,
            info_acquire: 0.005,
            info_release: 0.01,
            lost_request: 0.5,
            keep_id: 0.0,
            late_release_after_info: 0.2,
            release_after_refused: 0.05,
            double_release: 0.05,
            foreign_token: 0.05,
            slow_release: 0.02,
            unfinished: 0.5,
        }
    }

    /// The same, with no release ever refused `not-held`: no release after
    /// a refusal, double or foreign release, slow release, nor a kept id
    /// (whose release after an `info` may be refused).
    pub fn plain(self) -> Self {
        Config {
            keep_id: 0.0,
            late_release_after_info: 0.0,
            release_after_refused: 0.0,
            double_release: 0.0,
            foreign_token: 0.0,
            slow_release: 0.0,
            ..self
        }
    }

    /// The same, without what Jepsen's reading of a history (no leases:
    /// every `fail` did not happen) cannot take from a correct lock with
    /// leases: a certain hold whose lease ran out (a slow release), which
    /// to Knossos holds for good.
    pub fn knossos(self) -> Self {
        Config {
            slow_release: 0.0,
            ..self
        }
    }

    /// One line for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "seed {} processes {} lock_ops {} tokens {} ttl {}ms info_acquire {} info_release {} \
             lost_request {} keep_id {} late_release_after_info {} release_after_refused {} \
             double_release {} foreign_token {} slow_release {} unfinished {}",
            self.seed,
            self.processes,
            self.lock_ops,
            self.tokens,
            self.ttl / MS,
            self.info_acquire,
            self.info_release,
            self.lost_request,
            self.keep_id,
            self.late_release_after_info,
            self.release_after_refused,
            self.double_release,
            self.foreign_token,
            self.slow_release,
            self.unfinished
        )
    }
}

// ---------------------------------------------------------------- simulation

/// How often each shape was drawn (what a test can ask was covered).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shapes {
    pub invokes: u64,
    pub acquires: u64,
    pub grants: u64,
    pub refusals: u64,
    /// Lost replies (acquire `info`) whose request never reached the server.
    pub lost_acquire_requests: u64,
    /// Lost replies whose acquire the server granted (nobody learnt of it).
    pub unseen_grants: u64,
    /// Lost replies whose acquire the server refused.
    pub unseen_refusals: u64,
    /// Leases that ran out unreleased (found out at the next request).
    pub expired_leases: u64,
    pub kept_ids: u64,
    pub retired_ids: u64,
    pub releases_after_info: u64,
    pub late_releases_after_info: u64,
    pub releases_after_refusal: u64,
    pub double_releases: u64,
    pub foreign_releases: u64,
    pub info_releases: u64,
    pub lost_release_requests: u64,
    pub slow_releases: u64,
    /// Grants to others while a slow release was on its way.
    pub grants_during_slow_release: u64,
    pub unfinished: u64,
}

/// One request as the server ran it (the log [`Sim::logged`] keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Act {
    /// When it took effect.
    pub time: u64,
    /// The `index` of its invoke.
    pub invoke: u64,
    pub op: Op,
    /// The token's `n`, or tokenless the process id.
    pub owner: u64,
    pub granted: bool,
}

/// Why an op is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    Acquire,
    /// A believed hold's release.
    Close,
    AfterRefusal,
    AfterInfo,
    Double,
    Foreign,
}

#[derive(Clone, Copy, Debug)]
struct Next {
    op: Op,
    token: Token,
    why: Why,
}

#[derive(Clone, Copy, Debug)]
struct Flight {
    next: Next,
    invoke: u64,
    lost_reply: bool,
    granted: Option<bool>,
    slow: bool,
}

#[derive(Clone, Debug)]
struct Slot {
    process: u64,
    next: Option<Next>,
    flight: Option<Flight>,
}

const INVOKE: u8 = 0;
const ARRIVE: u8 = 1;
const COMPLETE: u8 = 2;

/// The simulation, as an iterator over the history's events in file
/// order: a history of any length streams out of it in little memory.
pub struct Sim {
    cfg: Config,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, u8, usize)>>,
    slots: Vec<Slot>,
    /// The holder's owner and lease deadline.
    holder: Option<(u64, u64)>,
    /// The slow release on its way, if any: its owner.
    slow_owner: Option<u64>,
    next_n: u64,
    written: u64,
    /// Recently refused attempts' tokens (never held by anyone).
    refused: Vec<Token>,
    shapes: Shapes,
    log: Option<Vec<Act>>,
}

impl Sim {
    pub fn new(cfg: Config) -> Self {
        assert!(
            cfg.ttl >= MIN_TTL,
            "ttl {} below MIN_TTL {MIN_TTL}",
            cfg.ttl
        );
        assert!(cfg.processes > 0);
        let mut rng = Rng::new(cfg.seed);
        let mut sim = Sim {
            slots: Vec::with_capacity(cfg.processes as usize),
            rng: Rng::new(rng.next_u64()),
            cfg,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            holder: None,
            slow_owner: None,
            next_n: 0,
            written: 0,
            refused: Vec::new(),
            shapes: Shapes::default(),
            log: None,
        };
        for p in 0..sim.cfg.processes {
            sim.slots.push(Slot {
                process: p,
                next: None,
                flight: None,
            });
            let next = sim.acquire(p);
            let at = sim.rng.range(0, MS);
            sim.schedule(p as usize, next, at);
        }
        sim
    }

    /// The same, keeping the server's log of every request it ran.
    pub fn logged(cfg: Config) -> Self {
        let mut sim = Sim::new(cfg);
        sim.log = Some(Vec::new());
        sim
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The shapes drawn so far.
    pub fn shapes(&self) -> &Shapes {
        &self.shapes
    }

    /// The server's log so far (empty unless [`Sim::logged`]).
    pub fn log(&self) -> &[Act] {
        self.log.as_deref().unwrap_or(&[])
    }

    fn push(&mut self, at: u64, what: u8, slot: usize) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, what, slot)));
    }

    fn schedule(&mut self, slot: usize, next: Next, at: u64) {
        self.slots[slot].next = Some(next);
        self.push(at, INVOKE, slot);
    }

    fn net(&mut self) -> u64 {
        self.rng.range(NET.0, NET.1)
    }

    fn think(&mut self) -> u64 {
        self.rng.range(THINK.0, THINK.1)
    }

    fn token(&mut self, process: u64, forged: bool) -> Token {
        self.next_n += 1;
        Token {
            process,
            n: self.next_n,
            forged,
        }
    }

    fn acquire(&mut self, process: u64) -> Next {
        Next {
            op: Op::Acquire,
            token: self.token(process, false),
            why: Why::Acquire,
        }
    }

    fn owner(&self, token: Token, process: u64) -> u64 {
        match self.cfg.tokens {
            true => token.n,
            false => process,
        }
    }

    fn emit(&mut self, process: u64, kind: Kind, op: Op, error: Option<Error>, token: Token) -> Ev {
        let e = Ev {
            index: self.written,
            time: self.now,
            process,
            kind,
            op,
            error,
            token: self.cfg.tokens.then_some(token),
        };
        self.written += 1;
        e
    }

    /// Runs the next happening; `None` once nothing is left, else the
    /// event it wrote, if any.
    fn step(&mut self) -> Option<Option<Ev>> {
        let Reverse((at, _, what, slot)) = self.queue.pop()?;
        // No two happenings share an instant: ties go one ns later, in
        // the order they were scheduled.
        self.now = at.max(self.now + 1);
        Some(match what {
            INVOKE => self.invoke(slot),
            ARRIVE => {
                self.arrive(slot);
                None
            }
            _ => self.complete(slot),
        })
    }

    fn invoke(&mut self, slot: usize) -> Option<Ev> {
        let next = self.slots[slot]
            .next
            .take()
            .expect("an invoke is scheduled with its op");
        // Once the run's ops are spent only a believed hold's release goes out.
        if self.shapes.invokes >= self.cfg.lock_ops && next.why != Why::Close {
            return None;
        }
        self.shapes.invokes += 1;
        let process = self.slots[slot].process;
        let e = self.emit(process, Kind::Invoke, next.op, None, next.token);
        let (p_info, acquire) = match next.op {
            Op::Acquire => (self.cfg.info_acquire, true),
            Op::Release => (self.cfg.info_release, false),
        };
        if acquire {
            self.shapes.acquires += 1;
        }
        let lost_reply = self.rng.chance(p_info);
        let reaches = !(lost_reply && self.rng.chance(self.cfg.lost_request));
        let mut arrive = self.now + self.net();
        let mut slow = false;
        if next.why == Why::Close && reaches && self.rng.chance(self.cfg.slow_release) {
            let owner = self.owner(next.token, process);
            if let Some((o, deadline)) = self.holder {
                if o == owner && self.slow_owner.is_none() {
                    slow = true;
                    self.slow_owner = Some(owner);
                    self.shapes.slow_releases += 1;
                    arrive = arrive.max(deadline + self.rng.range(US, self.cfg.ttl / 2));
                }
            }
        }
        match next.why {
            Why::AfterRefusal => self.shapes.releases_after_refusal += 1,
            Why::AfterInfo => self.shapes.releases_after_info += 1,
            Why::Double => self.shapes.double_releases += 1,
            Why::Foreign => self.shapes.foreign_releases += 1,
            Why::Acquire | Why::Close => {}
        }
        if reaches {
            self.push(arrive, ARRIVE, slot);
        } else if acquire {
            self.shapes.lost_acquire_requests += 1;
        } else {
            self.shapes.lost_release_requests += 1;
        }
        if lost_reply {
            let timeout = (self.now + TIMEOUT).max(arrive + 1);
            self.push(timeout, COMPLETE, slot);
            if !acquire {
                self.shapes.info_releases += 1;
            }
        }
        self.slots[slot].flight = Some(Flight {
            next,
            invoke: e.index,
            lost_reply,
            granted: None,
            slow,
        });
        Some(e)
    }

    /// The request reaches the server and takes effect.
    fn arrive(&mut self, slot: usize) {
        let process = self.slots[slot].process;
        let flight = self.slots[slot].flight.expect("a request in flight");
        let owner = self.owner(flight.next.token, process);
        if let Some((_, deadline)) = self.holder {
            if deadline <= self.now {
                self.holder = None;
                self.shapes.expired_leases += 1;
            }
        }
        let granted = match flight.next.op {
            Op::Acquire => match self.holder {
                None => {
                    self.holder = Some((owner, self.now + self.cfg.ttl));
                    self.shapes.grants += 1;
                    if self.slow_owner.is_some_and(|o| o != owner) {
                        self.shapes.grants_during_slow_release += 1;
                    }
                    true
                }
                Some(_) => {
                    self.shapes.refusals += 1;
                    false
                }
            },
            Op::Release => match self.holder {
                Some((o, _)) if o == owner => {
                    self.holder = None;
                    true
                }
                _ => false,
            },
        };
        if flight.slow {
            self.slow_owner = None;
        }
        if flight.lost_reply && flight.next.op == Op::Acquire {
            match granted {
                true => self.shapes.unseen_grants += 1,
                false => self.shapes.unseen_refusals += 1,
            }
        }
        if let Some(log) = &mut self.log {
            log.push(Act {
                time: self.now,
                invoke: flight.invoke,
                op: flight.next.op,
                owner,
                granted,
            });
        }
        self.slots[slot].flight.as_mut().unwrap().granted = Some(granted);
        if !flight.lost_reply {
            let at = self.now + self.net();
            self.push(at, COMPLETE, slot);
        }
    }

    fn complete(&mut self, slot: usize) -> Option<Ev> {
        let flight = self.slots[slot].flight.take().expect("an op in flight");
        if self.shapes.invokes >= self.cfg.lock_ops && self.rng.chance(self.cfg.unfinished) {
            self.shapes.unfinished += 1;
            return None; // the client stops with its op open
        }
        let process = self.slots[slot].process;
        let Next { op, token, why } = flight.next;
        let (kind, error) = match (flight.lost_reply, op, flight.granted) {
            (true, _, _) => (Kind::Info, Some(Error::Timeout)),
            (false, _, Some(true)) => (Kind::Ok, None),
            (false, Op::Acquire, _) => (Kind::Fail, Some(Error::LockBusy)),
            (false, Op::Release, _) => (Kind::Fail, Some(Error::NotHeld)),
        };
        let e = self.emit(process, kind, op, error, token);
        let think = self.think();
        let (next, wait) = match (op, kind) {
            (Op::Acquire, Kind::Ok) => {
                let next = Next {
                    op: Op::Release,
                    token,
                    why: Why::Close,
                };
                (next, self.rng.range(HOLD.0, HOLD.1))
            }
            (Op::Acquire, Kind::Fail) => {
                if self.refused.len() == 16 {
                    self.refused.remove(0);
                }
                self.refused.push(token);
                match self.rng.chance(self.cfg.release_after_refused) {
                    true => (release(token, Why::AfterRefusal), think),
                    false => (self.acquire(process), think),
                }
            }
            (Op::Acquire, _) => match self.rng.chance(self.cfg.keep_id) {
                true => {
                    self.shapes.kept_ids += 1;
                    let mut wait = think;
                    if self.rng.chance(self.cfg.late_release_after_info) {
                        self.shapes.late_releases_after_info += 1;
                        wait += self.cfg.ttl;
                    }
                    (release(token, Why::AfterInfo), wait)
                }
                false => {
                    let process = self.retire(slot);
                    (self.acquire(process), think)
                }
            },
            (Op::Release, Kind::Ok) if matches!(why, Why::Close | Why::AfterInfo) => {
                if self.cfg.tokens && self.rng.chance(self.cfg.foreign_token) {
                    let stolen = self
                        .refused
                        .iter()
                        .rev()
                        .find(|t| t.process != process)
                        .copied();
                    let foreign = match stolen {
                        Some(t) if self.rng.chance(0.5) => t,
                        _ => self.token(process, true),
                    };
                    (release(foreign, Why::Foreign), think)
                } else if self.rng.chance(self.cfg.double_release) {
                    (release(token, Why::Double), think)
                } else {
                    (self.acquire(process), think)
                }
            }
            (Op::Release, Kind::Info) => {
                let process = match self.rng.chance(self.cfg.keep_id) {
                    true => {
                        self.shapes.kept_ids += 1;
                        process
                    }
                    false => self.retire(slot),
                };
                (self.acquire(process), think)
            }
            (Op::Release, _) => (self.acquire(process), think),
        };
        let at = self.now + wait;
        self.schedule(slot, next, at);
        Some(e)
    }

    /// The client goes on under a new process id.
    fn retire(&mut self, slot: usize) -> u64 {
        self.shapes.retired_ids += 1;
        self.slots[slot].process += self.cfg.processes;
        self.slots[slot].process
    }
}

fn release(token: Token, why: Why) -> Next {
    Next {
        op: Op::Release,
        token,
        why,
    }
}

impl Iterator for Sim {
    type Item = Ev;

    fn next(&mut self) -> Option<Ev> {
        loop {
            if let Some(e) = self.step()? {
                return Some(e);
            }
        }
    }
}

/// The whole history of `cfg`.
pub fn simulate(cfg: Config) -> Vec<Ev> {
    Sim::new(cfg).collect()
}

// ---------------------------------------------------------------- writers

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Edn,
}

/// Appends `e` as one line of `format`.
pub fn render(out: &mut Vec<u8>, e: &Ev, format: Format) {
    let w = match format {
        Format::Jsonl => {
            let w = write!(
                out,
                r#"{{"index":{},"time":{},"process":{},"type":"{}","f":"{}","value":null"#,
                e.index,
                e.time,
                e.process,
                e.kind.name(),
                e.op.name()
            );
            w.and_then(|()| match e.token {
                Some(t) => write!(out, r#","token":"{t}""#),
                None => Ok(()),
            })
            .and_then(|()| match e.error {
                Some(err) => write!(out, r#","error":"{}""#, err.name()),
                None => Ok(()),
            })
        }
        Format::Edn => {
            let w = write!(
                out,
                "{{:type :{}, :f :{}, :process {}, :time {}, :index {}, :value nil",
                e.kind.name(),
                e.op.name(),
                e.process,
                e.time,
                e.index
            );
            w.and_then(|()| match e.token {
                Some(t) => write!(out, r#", :token "{t}""#),
                None => Ok(()),
            })
            .and_then(|()| match e.error {
                Some(err) => write!(out, ", :error :{}", err.name()),
                None => Ok(()),
            })
        }
    };
    w.expect("writing to a Vec cannot fail");
    out.extend_from_slice(b"}\n");
}

fn to_text(events: &[Ev], format: Format) -> String {
    let mut out = Vec::with_capacity(events.len() * 110);
    events.iter().for_each(|e| render(&mut out, e, format));
    String::from_utf8(out).expect("ASCII")
}

/// lockstorm's `history.jsonl`, one event a line.
pub fn to_jsonl(events: &[Ev]) -> String {
    to_text(events, Format::Jsonl)
}

/// Jepsen's `history.edn`, one op map a line.
pub fn to_edn(events: &[Ev]) -> String {
    to_text(events, Format::Edn)
}

fn write_format(
    out: &mut impl Write,
    events: impl IntoIterator<Item = Ev>,
    format: Format,
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1 << 16);
    for e in events {
        render(&mut buf, &e, format);
        if buf.len() >= 1 << 16 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

/// Writes `events` (a [`Sim`] will do) as JSONL, a chunk at a time.
pub fn write_jsonl(out: &mut impl Write, events: impl IntoIterator<Item = Ev>) -> io::Result<()> {
    write_format(out, events, Format::Jsonl)
}

/// Writes `events` as EDN, a chunk at a time.
pub fn write_edn(out: &mut impl Write, events: impl IntoIterator<Item = Ev>) -> io::Result<()> {
    write_format(out, events, Format::Edn)
}

/// A history's text read as it is rendered: a `BufRead` over events (a
/// [`Sim`] will do), for a reader that checks a history as it streams past.
pub struct Lines<I> {
    events: I,
    format: Format,
    buf: Vec<u8>,
    pos: usize,
}

/// `events` as JSONL text to read.
pub fn jsonl_reader<I: IntoIterator<Item = Ev>>(events: I) -> Lines<I::IntoIter> {
    Lines {
        events: events.into_iter(),
        format: Format::Jsonl,
        buf: Vec::with_capacity(1 << 16),
        pos: 0,
    }
}

/// `events` as EDN text to read.
pub fn edn_reader<I: IntoIterator<Item = Ev>>(events: I) -> Lines<I::IntoIter> {
    Lines {
        format: Format::Edn,
        ..jsonl_reader(events)
    }
}

impl<I: Iterator<Item = Ev>> Read for Lines<I> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let have = self.fill_buf()?;
            let n = have.len().min(out.len());
            out[..n].copy_from_slice(&have[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<I: Iterator<Item = Ev>> BufRead for Lines<I> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            while self.buf.len() < 1 << 16 {
                let Some(e) = self.events.next() else { break };
                render(&mut self.buf, &e, self.format);
            }
        }
        Ok(&self.buf[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
    }
}

// ---------------------------------------------------------------- the invalid twin

/// A history with one second holder in it.
#[derive(Clone, Debug)]
pub struct Injected {
    pub events: Vec<Ev>,
    /// The `index` of the holder's acquire `ok` and of the intruder's.
    pub pair: [u64; 2],
    pub holder: u64,
    pub intruder: u64,
}

/// The invalid twin of a history: from `at_fraction` of its events on, the
/// first acquire `ok` whose holder's next op is its release, answered `ok`,
/// is taken (or, if none follows, the last one before); just
/// after it a process the history never used acquires (`ok`) and releases
/// (`ok`), all before that holder's release is sent, its lease live. That
/// is the one overlap of two certain holds in it (the intruder's hold lies
/// inside the holder's). Later events move 5 ns on, and are indexed anew.
/// `None` if the history has no such hold.
pub fn inject_second_holder(events: &[Ev], at_fraction: f64) -> Option<Injected> {
    let tokens = events.iter().any(|e| e.token.is_some());
    let intruder = events.iter().map(|e| e.process).max()? + 1;
    let n = events
        .iter()
        .filter_map(|e| e.token)
        .map(|t| t.n)
        .max()
        .unwrap_or(0)
        + 1;
    let from = ((events.len() as f64 * at_fraction) as usize).min(events.len());
    // An `ok`, then its release, answered `ok`: nothing in the history
    // lets that hold end before its release (a refusal `not-held` would: in
    // lockstorm's reading the lease ran out some time in the hold).
    let certain = |i: usize| {
        let e = &events[i];
        let mut own = events[i + 1..].iter().filter(|x| x.process == e.process);
        let (release, answer) = (own.next(), own.next());
        e.op == Op::Acquire
            && e.kind == Kind::Ok
            && release
                .is_some_and(|x| (x.op, x.kind, x.token) == (Op::Release, Kind::Invoke, e.token))
            && answer.is_some_and(|x| (x.op, x.kind) == (Op::Release, Kind::Ok))
    };
    let at = (from..events.len())
        .find(|&i| certain(i))
        .or_else(|| (0..from).rev().find(|&i| certain(i)))?;
    let t = events[at].time;
    let token = tokens.then_some(Token {
        process: intruder,
        n,
        forged: false,
    });
    let mut out: Vec<Ev> = Vec::with_capacity(events.len() + 4);
    out.extend_from_slice(&events[..=at]);
    for (k, (kind, op)) in [
        (Kind::Invoke, Op::Acquire),
        (Kind::Ok, Op::Acquire),
        (Kind::Invoke, Op::Release),
        (Kind::Ok, Op::Release),
    ]
    .into_iter()
    .enumerate()
    {
        out.push(Ev {
            index: 0,
            time: t + 1 + k as u64,
            process: intruder,
            kind,
            op,
            error: None,
            token,
        });
    }
    out.extend(events[at + 1..].iter().map(|e| Ev {
        time: e.time + 5,
        ..*e
    }));
    for (i, e) in out.iter_mut().enumerate() {
        e.index = i as u64;
    }
    Some(Injected {
        events: out,
        pair: [at as u64, at as u64 + 2],
        holder: events[at].process,
        intruder,
    })
}

// ---------------------------------------------------------------- what a history shows

/// Pairs of acquire `ok` indices whose holds overlap, a hold running from
/// its `ok` to its process's next release invoke (or the history's end).
/// Empty for every history [`Sim`] writes; one pair after
/// [`inject_second_holder`].
pub fn overlapping_holds(events: &[Ev]) -> Vec<[u64; 2]> {
    let mut open: HashMap<u64, u64> = HashMap::new(); // process -> its ok's index
    let mut pairs = Vec::new();
    for e in events {
        match (e.op, e.kind) {
            (Op::Acquire, Kind::Ok) => {
                pairs.extend(open.values().map(|&other| [other, e.index]));
                open.insert(e.process, e.index);
            }
            (Op::Release, Kind::Invoke) => {
                open.remove(&e.process);
            }
            _ => {}
        }
    }
    pairs.sort_unstable();
    pairs
}

/// The history's own shape: indices are positions, time strictly
/// increases, each process has one op at a time and completes the op it
/// invoked (same `f`, same token), errors fit types, and tokens are on
/// every event or none.
pub fn well_formed(events: &[Ev]) -> Result<(), String> {
    let tokens = events.first().is_some_and(|e| e.token.is_some());
    let mut open: HashMap<u64, Ev> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let at = || format!("event {i} {e:?}");
        if e.index != i as u64 {
            return Err(format!("{}: index is not its position", at()));
        }
        if i > 0 && events[i - 1].time >= e.time {
            return Err(format!("{}: time does not increase", at()));
        }
        if e.token.is_some() != tokens {
            return Err(format!("{}: tokens on some events only", at()));
        }
        let fits = matches!(
            (e.kind, e.op, e.error),
            (Kind::Invoke | Kind::Ok, _, None)
                | (Kind::Fail, Op::Acquire, Some(Error::LockBusy))
                | (Kind::Fail, Op::Release, Some(Error::NotHeld))
                | (Kind::Info, _, Some(Error::Timeout))
        );
        if !fits {
            return Err(format!("{}: error does not fit the type", at()));
        }
        match (e.kind, open.remove(&e.process)) {
            (Kind::Invoke, Some(before)) => {
                return Err(format!("{}: invoked while {before:?} is open", at()))
            }
            (Kind::Invoke, None) => {
                open.insert(e.process, *e);
            }
            (_, None) => return Err(format!("{}: completes nothing", at())),
            (_, Some(inv)) if inv.op != e.op || inv.token != e.token => {
                return Err(format!("{}: completes {inv:?}", at()))
            }
            (_, Some(_)) => {}
        }
    }
    Ok(())
}

/// Counts of what a history holds, by `f`, type and error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    pub events: u64,
    pub processes: u64,
    pub acquire: [u64; 4],
    pub release: [u64; 4],
    pub open: u64,
}

impl fmt::Display for Census {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [ai, ao, af, an] = self.acquire;
        let [ri, ro, rf, rn] = self.release;
        write!(
            f,
            "{} events, {} process ids, acquire invoke/ok/fail/info {ai}/{ao}/{af}/{an}, \
             release {ri}/{ro}/{rf}/{rn}, {} open at the end",
            self.events, self.processes, self.open
        )
    }
}

pub fn census(events: &[Ev]) -> Census {
    let mut c = Census {
        events: events.len() as u64,
        ..Census::default()
    };
    let mut open: HashMap<u64, bool> = HashMap::new();
    for e in events {
        let k = match e.kind {
            Kind::Invoke => 0,
            Kind::Ok => 1,
            Kind::Fail => 2,
            Kind::Info => 3,
        };
        match e.op {
            Op::Acquire => c.acquire[k] += 1,
            Op::Release => c.release[k] += 1,
        }
        open.insert(e.process, e.kind == Kind::Invoke);
    }
    c.processes = open.len() as u64;
    c.open = open.values().filter(|&&o| o).count() as u64;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape in plenty: tokens, ids kept half the time.
    fn busy(seed: u64, processes: u64, tokens: bool) -> Config {
        Config {
            tokens,
            info_acquire: 0.2,
            info_release: 0.05,
            keep_id: 0.5,
            release_after_refused: 0.1,
            double_release: 0.1,
            foreign_token: 0.1,
            slow_release: 0.05,
            ..Config::new(seed, processes, 20_000)
        }
    }

    fn shapes_to_try() -> Vec<Config> {
        let mut all = Vec::new();
        for (seed, processes) in [(1, 5), (2, 20), (3, 50), (4, 200)] {
            for tokens in [true, false] {
                all.push(busy(seed, processes, tokens));
                all.push(Config::new(seed, processes, 20_000));
            }
        }
        all
    }

    /// Replays the server's log against a lease mutex of its own, and
    /// holds it against the history: each request took effect strictly
    /// between its invoke and its completion, and the completion says what
    /// the server did.
    fn agrees(cfg: &Config) -> Result<(), String> {
        let mut sim = Sim::logged(cfg.clone());
        let events: Vec<Ev> = sim.by_ref().collect();
        let log = sim.log().to_vec();
        let mut completion: HashMap<u64, Ev> = HashMap::new(); // invoke index -> completion
        let mut open: HashMap<u64, u64> = HashMap::new();
        for e in &events {
            match e.kind {
                Kind::Invoke => {
                    open.insert(e.process, e.index);
                }
                _ => {
                    completion.insert(open.remove(&e.process).unwrap(), *e);
                }
            }
        }
        let mut holder: Option<(u64, u64)> = None; // owner, lease end
        let mut last_end = 0; // when the previous grant's hold ended, at most
        let mut decided = 0;
        for act in &log {
            let invoke = events[act.invoke as usize];
            if invoke.kind != Kind::Invoke || invoke.op != act.op || act.time <= invoke.time {
                return Err(format!("{act:?} does not follow its invoke {invoke:?}"));
            }
            if holder.is_some_and(|(_, end)| end <= act.time) {
                holder = None;
            }
            let granted = match act.op {
                Op::Acquire => holder.is_none(),
                Op::Release => holder.is_some_and(|(o, _)| o == act.owner),
            };
            if granted != act.granted {
                return Err(format!("{act:?}: a lease mutex says granted = {granted}"));
            }
            match (act.op, granted) {
                (Op::Acquire, true) => {
                    if act.time < last_end {
                        return Err(format!("{act:?} granted before the last hold ended"));
                    }
                    holder = Some((act.owner, act.time + cfg.ttl));
                    last_end = act.time + cfg.ttl;
                }
                (Op::Release, true) => {
                    holder = None;
                    last_end = act.time;
                }
                _ => {}
            }
            if let Some(c) = completion.get(&act.invoke) {
                if c.time <= act.time {
                    return Err(format!("{act:?} took effect after its completion {c:?}"));
                }
                let says = match c.kind {
                    Kind::Ok => Some(true),
                    Kind::Fail => Some(false),
                    _ => None,
                };
                if says.is_some_and(|s| s != granted) {
                    return Err(format!("{act:?} completed as {c:?}"));
                }
                decided += says.is_some() as u64;
            }
        }
        let answered = completion
            .values()
            .filter(|c| matches!(c.kind, Kind::Ok | Kind::Fail))
            .count() as u64;
        if decided != answered {
            return Err(format!(
                "{answered} ops answered ok/fail, {decided} of them in the server's log"
            ));
        }
        Ok(())
    }

    #[test]
    fn the_server_is_a_lease_mutex_and_the_history_says_what_it_did() {
        for cfg in shapes_to_try() {
            if let Err(why) = agrees(&cfg) {
                panic!("{}: {why}", cfg.describe());
            }
        }
    }

    #[test]
    fn histories_are_well_formed_and_no_two_holds_overlap() {
        for cfg in shapes_to_try() {
            let events = simulate(cfg.clone());
            let shape = cfg.describe();
            if let Err(why) = well_formed(&events) {
                panic!("{shape}: {why}");
            }
            let overlaps = overlapping_holds(&events);
            assert!(overlaps.is_empty(), "{shape}: holds overlap: {overlaps:?}");
            let c = census(&events);
            assert!(c.acquire[0] >= cfg.lock_ops / 2, "{shape}: {c}");
        }
    }

    #[test]
    fn every_shape_is_drawn() {
        for tokens in [true, false] {
            let cfg = busy(7, 20, tokens);
            let mut sim = Sim::new(cfg.clone());
            let events: Vec<Ev> = sim.by_ref().collect();
            let s = sim.shapes().clone();
            let shape = format!("{}: {s:?} {}", cfg.describe(), census(&events));
            for (name, n) in [
                ("grants", s.grants),
                ("refusals", s.refusals),
                ("lost_acquire_requests", s.lost_acquire_requests),
                ("unseen_grants", s.unseen_grants),
                ("unseen_refusals", s.unseen_refusals),
                ("expired_leases", s.expired_leases),
                ("kept_ids", s.kept_ids),
                ("retired_ids", s.retired_ids),
                ("releases_after_info", s.releases_after_info),
                ("late_releases_after_info", s.late_releases_after_info),
                ("releases_after_refusal", s.releases_after_refusal),
                ("double_releases", s.double_releases),
                ("info_releases", s.info_releases),
                ("lost_release_requests", s.lost_release_requests),
                ("slow_releases", s.slow_releases),
                ("grants_during_slow_release", s.grants_during_slow_release),
                ("unfinished", s.unfinished),
            ] {
                assert!(n > 0, "{name} never drawn: {shape}");
            }
            assert_eq!(s.foreign_releases > 0, tokens, "{shape}");
            let c = census(&events);
            assert!(
                c.release[2] > 0 && c.acquire[3] > 0 && c.release[3] > 0,
                "{shape}"
            );
            assert_eq!(c.open, s.unfinished, "{shape}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_history() {
        let cfg = busy(11, 20, true);
        assert_eq!(simulate(cfg.clone()), simulate(cfg.clone()));
        let other = simulate(Config {
            seed: 12,
            ..cfg.clone()
        });
        assert_ne!(simulate(cfg), other);
    }

    #[test]
    fn the_injected_twin_has_one_overlap_the_pair() {
        for cfg in shapes_to_try() {
            let events = simulate(cfg.clone());
            let shape = cfg.describe();
            let twin = inject_second_holder(&events, 0.95)
                .unwrap_or_else(|| panic!("{shape}: no hold after 95%: {}", census(&events)));
            assert_eq!(twin.events.len(), events.len() + 4, "{shape}");
            well_formed(&twin.events).unwrap_or_else(|why| panic!("{shape}: {why}"));
            assert_eq!(overlapping_holds(&twin.events), vec![twin.pair], "{shape}");
            let [h, i] = twin.pair.map(|p| twin.events[p as usize]);
            assert_eq!(
                (h.process, h.kind, h.op),
                (twin.holder, Kind::Ok, Op::Acquire)
            );
            assert_eq!(
                (i.process, i.kind, i.op),
                (twin.intruder, Kind::Ok, Op::Acquire)
            );
        }
    }

    #[test]
    fn both_renderings_have_a_line_per_event_and_stream_alike() {
        let cfg = busy(5, 20, true);
        let events = simulate(cfg.clone());
        let (jsonl, edn) = (to_jsonl(&events), to_edn(&events));
        assert_eq!(jsonl.lines().count(), events.len());
        assert_eq!(edn.lines().count(), events.len());
        let mut streamed = String::new();
        jsonl_reader(Sim::new(cfg.clone()))
            .read_to_string(&mut streamed)
            .unwrap();
        assert_eq!(streamed, jsonl);
        let mut written = Vec::new();
        write_edn(&mut written, events.iter().copied()).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), edn);
        let first = jsonl.lines().next().unwrap();
        assert!(first.starts_with(r#"{"index":0,"time":"#), "{first}");
        assert!(edn.contains(":error :not-held") && edn.contains(":error :lock-busy"));
        assert!(edn.contains(":error :timeout") && edn.contains(":token \"t-"));
    }
}
