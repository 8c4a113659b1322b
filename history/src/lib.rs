//! The history model: one [`Event`] per line of `history.jsonl` (docs/formats.md
//! shows the format; ARCHITECTURE.md, "The history"), as Jepsen keeps its
//! history apart from its checkers. Everything here is plain data so a
//! stored run can be re-checked later; besides it, histories other tools
//! wrote ([`edn`], Jepsen's and Knossos' EDN), histories generated from a
//! seed ([`generate`]) and a compact builder for tests ([`build`]).

#![forbid(unsafe_code)]

pub mod build;
pub mod edn;
pub mod generate;
mod jsonl;
mod scan;

pub use jsonl::read_jsonl;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::BufRead;

/// Who performed an operation: a client process id, or a named actor
/// (`"nemesis"` for faults, `"harness"` for setup and the final read,
/// `"observer"` for the lock key's life as each node saw it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum Process {
    Client(u64),
    Named(String),
}

impl Process {
    pub fn nemesis() -> Self {
        Process::Named("nemesis".into())
    }
    pub fn harness() -> Self {
        Process::Named("harness".into())
    }
    pub fn observer() -> Self {
        Process::Named("observer".into())
    }
    pub fn is_observer(&self) -> bool {
        matches!(self, Process::Named(n) if n == "observer")
    }
    pub fn is_client(&self) -> bool {
        matches!(self, Process::Client(_))
    }
}

/// How the history names worker `index` where it is not a client process id
/// (its `stall` events, the nemesis's targets, its log file): `worker-<index>`.
pub fn worker_name(index: impl std::fmt::Display) -> String {
    format!("worker-{index}")
}

/// Read as serde's `untagged` would (a number, else a string), without
/// first buffering the value as `untagged` does: every history line has one.
impl<'de> Deserialize<'de> for Process {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Process;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a client process id or a name")
            }
            fn visit_u64<E>(self, id: u64) -> Result<Process, E> {
                Ok(Process::Client(id))
            }
            fn visit_i64<E: serde::de::Error>(self, id: i64) -> Result<Process, E> {
                u64::try_from(id)
                    .map(Process::Client)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(id), &self))
            }
            fn visit_str<E>(self, name: &str) -> Result<Process, E> {
                Ok(Process::Named(name.to_owned()))
            }
            fn visit_string<E>(self, name: String) -> Result<Process, E> {
                Ok(Process::Named(name))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl From<u64> for Process {
    fn from(id: u64) -> Self {
        Process::Client(id)
    }
}

impl From<&str> for Process {
    fn from(name: &str) -> Self {
        Process::Named(name.to_owned())
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Client(p) => write!(f, "{p}"),
            Process::Named(n) => f.write_str(n),
        }
    }
}

/// `fail` means the operation definitely did not happen; `info` means its
/// outcome is unknown (it may have happened at any time after its invocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// Operation names used by clients (`f`). Nemesis events use `start-<fault>` / `stop-<fault>`.
pub mod f {
    pub const ACQUIRE: &str = "acquire";
    pub const RELEASE: &str = "release";
    pub const READ: &str = "read";
    pub const WRITE: &str = "write";
    pub const EXTEND: &str = "extend";
    /// A client process died (an `info` event by its observer); `value.process`
    /// names it, `token` the lock it still held, if any.
    pub const CRASH: &str = "crash";
    /// Not an op: a worker or the harness woke late (`value`: `who`, `ms`).
    pub const STALL: &str = "stall";
}

/// The observer's events: the lock key's life on one lock node, as that node
/// saw it (process `"observer"`, type `info`, `node` the node). `token` is
/// the token the key held when the observer can tell; `value` may say
/// [`key::BY`] who sent the command and [`key::TTL_MS`] the lease it set.
/// Checkers use them only to sharpen a finding: a history without them
/// (lock-only, or from Jepsen) is checked the same way.
pub mod key {
    /// The key was written with a token (an acquire that won).
    pub const SET: &str = "key-set";
    /// The key's lease was extended (an extend, a watchdog's renewal).
    pub const RENEWED: &str = "key-renewed";
    /// Redis expired the key (its lease ran out; see docs/formats.md for how
    /// late the node may notice).
    pub const EXPIRED: &str = "key-expired";
    /// A command deleted the key (a release, or another client's `DEL`).
    pub const DELETED: &str = "key-deleted";
    /// The value key naming who sent the command (`worker-<i>`), when the
    /// observer can tell.
    pub const BY: &str = "by";
    /// The value key holding the lease the command set, in ms.
    pub const TTL_MS: &str = "ttl_ms";

    /// Whether `f` is one of the observer's events.
    pub fn is_key_event(f: &str) -> bool {
        matches!(f, SET | RENEWED | EXPIRED | DELETED)
    }
}

/// Error names clients put in `error` (free-form strings are allowed too).
pub mod error {
    pub const NOT_HELD: &str = "not-held";
    pub const STALE_FENCE: &str = "stale-fence";
    pub const TIMEOUT: &str = "timeout";
    pub const LEASE_EXPIRED: &str = "lease-expired";
    pub const LOCK_BUSY: &str = "lock-busy";
    /// The process died with the op in flight (completed by its observer).
    pub const CRASHED: &str = "crashed";
    /// A client adapter hung or died with the op in flight (it was restarted).
    pub const ADAPTER: &str = "adapter";
    /// A client's library could not say whether the op took effect (an
    /// adapter's `ok: null` for a release its library reports nothing of).
    pub const UNKNOWN: &str = "unknown";

    /// The kind of an error: what comes before its first `:` (the rest is
    /// detail, such as which nodes answered), so the stats group like with like.
    pub fn kind(error: &str) -> &str {
        error.split(':').next().unwrap_or(error).trim()
    }
}

/// Fault events: their names (`start-<fault>` / `stop-<fault>`, read here
/// only) and the keys of their `value`: the nemesis shows there whether the
/// fault took effect, and the checker reads it (a fault that may not have
/// happened leaves the verdict unknown).
pub mod fault {
    /// `start-<fault>`: the fault has taken effect. Returns the fault's name.
    pub fn started(f: &str) -> Option<&str> {
        f.strip_prefix("start-")
    }

    /// `stop-<fault>`: the fault is healed. Returns the fault's name.
    pub fn stopped(f: &str) -> Option<&str> {
        f.strip_prefix("stop-")
    }

    /// The key that holds the evidence of its effect.
    pub const VERIFIED: &str = "verified";
    /// The key a stop event carries, saying why, when the run's end cut the
    /// fault short before it did what it is for (a failover's cut, with no
    /// kill after it): whatever it met, it is no evidence.
    pub const INTERRUPTED: &str = "interrupted";
    /// The key of a `kill`'s restart under `--restart-at-vote`: when, and
    /// by whom, the node was marked down before it came back.
    pub const AT_VOTE: &str = "at_vote";
    /// The key that says why its effect was not seen.
    pub const UNVERIFIED: &str = "unverified";
    /// The key naming the strike point a fault that struck a client landed
    /// at (a strike point's name, see `strike.rs`).
    pub const AT: &str = "at";
    /// The key naming the client process such a fault struck.
    pub const PROCESS: &str = "process";
    /// The key saying, of a strike at `acquiring` in a client adapter,
    /// whether the library had already decided (begun its reply) when the
    /// adapter froze: `false` is a strike mid-acquisition.
    pub const DECIDED: &str = "decided";
    /// The key holding, of such a strike, the lock value whose appearance
    /// froze the adapter: compare it with the acquire's `client_token`.
    pub const SEEN: &str = "seen";
    /// The key of a fault's stop event saying the storage accepted, at that
    /// event's time, a write the fault had held back in the network: its
    /// value is the value the write carried (a `write` invoke's `value`).
    pub const DELIVERED_WRITE: &str = "delivered_write";
    /// The key of a held request's stop event saying whether the node
    /// accepted it (a fenced storage refuses a stale write).
    pub const ACCEPTED: &str = "accepted";
    /// A failover's steps between its start and its end: the primary killed
    /// (`holder`: who held the lock then), a replica told to take the
    /// slots (`replica`, `command`, `holder`), a replica promoted
    /// (`promoted`, or null, and `after_ms` since the kill or the command),
    /// a heal that failed (`error`).
    pub const KILLED: &str = "kill";
    pub const TAKEN_OVER: &str = "taken-over";
    pub const PROMOTED: &str = "promoted";
    pub const HEAL_FAILED: &str = "heal-failed";
    pub const STEPS: [&str; 4] = [KILLED, TAKEN_OVER, PROMOTED, HEAL_FAILED];
}

/// The key of an acquire `ok`'s value holding the history time its granted
/// attempt was sent: see [`Event::attempt_sent`].
pub const ATTEMPT_SENT: &str = "attempt_sent";

/// The key of an acquire `ok`'s value holding the token a client adapter's
/// library stored in the lock key, when it shows its own: what the
/// observer's events then carry as `token`.
pub const CLIENT_TOKEN: &str = "client_token";

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the file; assigned by the harness as it writes events.
    #[serde(default)]
    pub index: u64,
    /// Nanoseconds since the run started, from the host's CLOCK_MONOTONIC.
    pub time: u64,
    pub process: Process,
    #[serde(rename = "type")]
    pub kind: OpType,
    pub f: String,
    #[serde(default)]
    pub value: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl Event {
    /// A new event with no index (the writer assigns it) and no optional fields.
    pub fn new(time: u64, process: Process, kind: OpType, f: impl Into<String>) -> Self {
        Event {
            index: 0,
            time,
            process,
            kind,
            f: f.into(),
            value: serde_json::Value::Null,
            token: None,
            fence: None,
            error: None,
            node: None,
        }
    }
    pub fn with_value(mut self, value: serde_json::Value) -> Self {
        self.value = value;
        self
    }
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
    pub fn with_fence(mut self, fence: Option<u64>) -> Self {
        self.fence = fence;
        self
    }
    pub fn with_error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }
    pub fn with_node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }
    pub fn is_nemesis(&self) -> bool {
        self.process == Process::nemesis()
    }
    /// The process a `crash` event says died. Only the harness (which saw
    /// it die) or the nemesis (which killed it) records a crash; a client's
    /// `crash` line is not honoured (`crashes.rs` says so).
    pub fn crashed(&self) -> Option<Process> {
        if self.f != f::CRASH || self.process.is_client() {
            return None;
        }
        serde_json::from_value(self.value.get("process")?.clone()).ok()
    }
    /// A node that died with no fault killing it: the harness's `crash`
    /// naming a `node` (a worker's names a `process` instead).
    pub fn node_died(&self) -> bool {
        self.f == f::CRASH && !self.process.is_client() && self.node.is_some()
    }
    /// When an acquire `ok`'s granted attempt was sent (its value's
    /// [`ATTEMPT_SENT`]): a retried acquire's earlier attempts found the lock
    /// busy and changed nothing, so its grant came after this. `None` for
    /// other events and histories that do not say (the invoke bounds it then).
    pub fn attempt_sent(&self) -> Option<u64> {
        if self.f != f::ACQUIRE || self.kind != OpType::Ok {
            return None;
        }
        self.value.get(ATTEMPT_SENT)?.as_u64()
    }
    /// The counter value of a `read`/`write`, when it is an integer.
    pub fn int_value(&self) -> Option<i64> {
        self.value.as_i64()
    }
}

/// A whole history, in file (`index`) order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub events: Vec<Event>,
    /// The last line was cut off (a crashed writer): the history is a prefix.
    pub truncated: bool,
}

/// The longest history line read: far beyond any real event, and a bound on
/// what a file that is not a history (say `/dev/zero`) makes a reader hold.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Reads the next line into `buf` (cleared first), with its newline if it
/// has one; `false` at the end of input. `line` (1-based) names it in the
/// error a line longer than [`MAX_LINE_BYTES`] gives.
pub fn next_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    line: usize,
) -> Result<bool, ParseError> {
    use std::io::Read;
    buf.clear();
    let limit = MAX_LINE_BYTES as u64 + 1;
    reader.by_ref().take(limit).read_until(b'\n', buf)?;
    if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
        return Err(ParseError::Line {
            line,
            message: format!(
                "longer than {} MiB, so not a history event (is this a history file?)",
                MAX_LINE_BYTES >> 20
            ),
        });
    }
    Ok(!buf.is_empty())
}

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("history line {line}: {message}; fix or remove that line")]
    Line { line: usize, message: String },
    #[error("cannot read history: {0}")]
    Io(#[from] std::io::Error),
}

impl History {
    pub fn new(events: Vec<Event>) -> Self {
        History {
            events,
            truncated: false,
        }
    }

    /// Events sorted by `time` (the authority on real-time order), ties by `index`.
    pub fn by_time(&self) -> Vec<&Event> {
        let mut events: Vec<&Event> = self.events.iter().collect();
        events.sort_by_key(|e| (e.time, e.index));
        events
    }

    /// Events in time order (ties by `index`), without sorting or allocating
    /// when the file is already in that order, as it mostly is.
    pub fn in_time_order(&self) -> Box<dyn Iterator<Item = &Event> + '_> {
        let key = |e: &Event| (e.time, e.index);
        if self.events.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
            return Box::new(self.events.iter());
        }
        Box::new(self.time_order().into_iter().map(|i| &self.events[i]))
    }

    /// Positions in `events` in the order of [`History::by_time`]; checkers
    /// that must point back at neighbouring events (an op's invoke) use these.
    pub fn time_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.events.len()).collect();
        order.sort_by_key(|&i| (self.events[i].time, self.events[i].index));
        order
    }

    /// The earliest and latest `time` in the history, if it has any event.
    pub fn time_span(&self) -> Option<(u64, u64)> {
        let min = self.events.iter().map(|e| e.time).min()?;
        let max = self.events.iter().map(|e| e.time).max()?;
        Some((min, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_the_design_example() {
        let line = r#"{"index":8,"time":1532980044,"process":3,"type":"ok","f":"acquire","value":null,"token":"3-9f2c41","fence":34}"#;
        let e: Event = serde_json::from_str(line).unwrap();
        assert_eq!(e.process, Process::Client(3));
        assert_eq!(e.kind, OpType::Ok);
        assert_eq!(e.fence, Some(34));
        assert_eq!(serde_json::to_string(&e).unwrap(), line);
        let nemesis = r#"{"index":9,"time":1,"process":"nemesis","type":"info","f":"start-pause","value":{"pid":4242}}"#;
        assert!(serde_json::from_str::<Event>(nemesis).unwrap().is_nemesis());
    }
}
