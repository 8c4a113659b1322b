//! A compact history builder so tests read like histories (the checkers' and
//! the story's).
//!
//! Each event gets the next `index` and a time `STEP` ns after the previous
//! one; `.time(t)` overrides one event's time without moving the clock, and
//! `sleep` moves the clock.

use crate::{Event, History, OpType, Process};

pub const STEP: u64 = 10;

#[derive(Default)]
pub struct Hist {
    events: Vec<Event>,
    now: u64,
    truncated: bool,
}

/// The event just added, for setting its optional fields.
pub struct At<'a>(&'a mut Event);

impl At<'_> {
    pub fn token(self, token: &str) -> Self {
        self.0.token = Some(token.into());
        self
    }
    /// A token, or none (a tokenless client's op).
    pub fn token_opt(self, token: Option<String>) -> Self {
        self.0.token = token;
        self
    }
    pub fn fence(self, fence: u64) -> Self {
        self.0.fence = Some(fence);
        self
    }
    pub fn value(self, value: impl Into<serde_json::Value>) -> Self {
        self.0.value = value.into();
        self
    }
    pub fn error(self, error: &str) -> Self {
        self.0.error = Some(error.into());
        self
    }
    pub fn time(self, time: u64) -> Self {
        self.0.time = time;
        self
    }
    pub fn node(self, node: &str) -> Self {
        self.0.node = Some(node.into());
        self
    }
}

impl Hist {
    pub fn new() -> Self {
        Hist::default()
    }

    fn push(&mut self, p: impl Into<Process>, kind: OpType, f: &str) -> At<'_> {
        let mut e = Event::new(self.now, p.into(), kind, f);
        e.index = self.events.len() as u64;
        self.now += STEP;
        self.events.push(e);
        At(self.events.last_mut().unwrap())
    }

    pub fn invoke(&mut self, p: impl Into<Process>, f: &str) -> At<'_> {
        self.push(p, OpType::Invoke, f)
    }
    pub fn ok(&mut self, p: impl Into<Process>, f: &str) -> At<'_> {
        self.push(p, OpType::Ok, f)
    }
    pub fn fail(&mut self, p: impl Into<Process>, f: &str) -> At<'_> {
        self.push(p, OpType::Fail, f)
    }
    pub fn info(&mut self, p: impl Into<Process>, f: &str) -> At<'_> {
        self.push(p, OpType::Info, f)
    }

    /// Successful acquire: invoke, then ok with `token` (returned).
    pub fn acquire(&mut self, p: u64, token: &str) -> At<'_> {
        self.invoke(p, "acquire");
        self.ok(p, "acquire").token(token)
    }
    /// Successful release: invoke and ok, both with `token`.
    pub fn release(&mut self, p: u64, token: &str) -> At<'_> {
        self.invoke(p, "release").token(token);
        self.ok(p, "release").token(token)
    }
    /// Acknowledged write of `v`; the ok is returned (for `.fence`).
    pub fn write(&mut self, p: u64, v: i64) -> At<'_> {
        self.invoke(p, "write").value(v);
        self.ok(p, "write").value(v)
    }
    pub fn read(&mut self, p: u64, v: i64) -> At<'_> {
        self.invoke(p, "read");
        self.ok(p, "read").value(v)
    }
    /// The harness's final read of the counter.
    pub fn final_read(&mut self, v: i64) {
        self.invoke("harness", "read");
        self.ok("harness", "read").value(v);
    }
    /// The observer saw `f` (a `history::key` event) of `token`'s key on
    /// `node`.
    pub fn key(&mut self, f: &str, node: &str, token: &str) -> At<'_> {
        self.push(Process::observer(), OpType::Info, f)
            .token(token)
            .node(node)
            .value(serde_json::json!({}))
    }
    pub fn nemesis(&mut self, f: &str) -> At<'_> {
        self.push(Process::nemesis(), OpType::Info, f)
    }
    /// The harness saw client `p` die; `.token(t)` for the lock it held.
    pub fn crash(&mut self, p: u64) -> At<'_> {
        let value = serde_json::json!({ "process": p });
        self.push("harness", OpType::Info, crate::f::CRASH)
            .value(value)
    }
    /// The harness saw node `node` die by itself at `time`.
    pub fn push_crash_of_node(&mut self, node: &str, time: u64) {
        let value = serde_json::json!({ "node": node });
        self.push("harness", OpType::Info, crate::f::CRASH)
            .value(value)
            .time(time)
            .0
            .node = Some(node.into());
    }
    /// Processes 2 and 3 try to acquire from `from` to `until` and are never
    /// granted: each attempt times out after 4 s.
    pub fn ungranted(&mut self, from: u64, until: u64) {
        const S: u64 = 1_000_000_000;
        let mut t = from;
        while t + 4 * S <= until {
            for p in [2, 3] {
                self.invoke(p, "acquire").time(t);
                self.fail(p, "acquire").time(t + 4 * S).error("timeout");
            }
            t += 4 * S;
        }
    }
    pub fn sleep(&mut self, ns: u64) {
        self.now += ns;
    }
    /// The history's last line was cut off.
    pub fn truncated(&mut self) {
        self.truncated = true;
    }

    pub fn build(&self) -> History {
        History {
            events: self.events.clone(),
            truncated: self.truncated,
        }
    }
}
