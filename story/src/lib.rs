//! `explain`: each anomaly example told as the smallest chain of events that
//! proves it, in words and run times: who held the lock, what struck them,
//! when their lease ran out (or their key was seen to go), who was granted
//! it next, and what the stale holder did then.
//!
//! Pure, like every checker: a history, the results checked from it, and
//! what the run knew that the history does not say ([`Known`]). A crate of
//! its own beside `checker`: the checkers decide, this tells; it reads only
//! what they give back.

use checker::history::{f, fault, key, Event, History, OpType, Process};
use checker::{anomalies, anomaly, anomaly_kind, Anomaly, Breaks, Results};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::fmt;

/// What the run knew that its history does not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Known {
    /// How many workers ran: process `p` is worker `p % workers`.
    pub workers: Option<u64>,
    /// The lock's lease (TTL), in ns, where it is one: each hold's lease
    /// runs out that long after its granted attempt was sent.
    pub lease_ns: Option<u64>,
}

/// One example of one anomaly, told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub anomaly: String,
    /// Which example (1-based, in `results.json`'s order).
    pub example: usize,
    /// The fault it is put down to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The chain, in time order.
    pub steps: Vec<Step>,
    /// How the example stands to the anomaly's count, where that is not
    /// plain (a final read that confirms losses counted from their writes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Steps the chain left out to stay short: those the conclusion does not
    /// rest on (a holder's reads, its release), latest first.
    #[serde(skip_serializing_if = "is_zero")]
    pub left_out: usize,
    /// What the chain proves.
    pub conclusion: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One link of the chain: an event of the history (`index`), or a moment
/// the history implies (a lease running out: no `index`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    pub time: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    pub text: String,
}

impl Explanation {
    /// The run times the chain spans, for a slice of the timeline.
    pub fn span(&self) -> (u64, u64) {
        let first = self.steps.first().map_or(0, |s| s.time);
        let last = self.steps.last().map_or(first, |s| s.time);
        (first, last)
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cause = self
            .cause
            .as_deref()
            .map(|c| format!(", put down to {c}"))
            .unwrap_or_default();
        writeln!(out, "{} #{}{cause}:", self.anomaly, self.example)?;
        if let Some(note) = &self.note {
            writeln!(out, "  ({note})")?;
        }
        for step in &self.steps {
            writeln!(out, "  {:>8}  {}", secs(step.time), step.text)?;
        }
        if self.left_out > 0 {
            writeln!(
                out,
                "            ({} lesser step(s) left out: the timeline has them)",
                self.left_out
            )?;
        }
        writeln!(out, "  => {}", self.conclusion)
    }
}

/// Every example of every anomaly found, in the order a reader scans them
/// (the registry's), each told as a chain.
pub fn explain(history: &History, results: &Results, known: Known) -> Vec<Explanation> {
    let mut story = Story::new(history, known);
    story.acknowledged = results.counter().map(|c| c.acknowledged);
    let mut told = Vec::new();
    for kind in anomalies() {
        let Some(a) = results.anomalies.get(kind.name) else {
            continue;
        };
        for (i, example) in a.examples.iter().enumerate() {
            if let Some(e) = story.tell(kind.name, a, i, example) {
                told.push(e);
            }
        }
    }
    told
}

/// One chain of each anomaly kind, most harmful first, each with how many
/// like it it stands for (left untold). Most harmful: what breaks the
/// `promise` before what does not, then the data before mutual exclusion
/// before progress, then the registry's order. A kind's chain is its first
/// with more than one step (a final read's shortfall alone tells little),
/// else its first.
pub fn digest(told: Vec<Explanation>, promise: checker::Promise) -> Vec<(Explanation, usize)> {
    let harm = |name: &str| {
        let kind = anomaly_kind(name);
        let breaks = kind.map_or(3, |k| match k.breaks {
            Breaks::Data => 0,
            Breaks::Exclusion => 1,
            Breaks::Liveness => 2,
        });
        (
            !promise.counts(name),
            breaks,
            kind.map_or(u8::MAX, |k| k.rank),
        )
    };
    let mut kinds: Vec<Vec<Explanation>> = Vec::new();
    for e in told {
        match kinds.iter_mut().find(|k| k[0].anomaly == e.anomaly) {
            Some(k) => k.push(e),
            None => kinds.push(vec![e]),
        }
    }
    kinds.sort_by_key(|k| harm(&k[0].anomaly));
    kinds
        .into_iter()
        .map(|mut k| {
            let more = k.len() - 1;
            let pick = k.iter().position(|e| e.steps.len() > 1).unwrap_or(0);
            (k.swap_remove(pick), more)
        })
        .collect()
}

/// The history, indexed for telling.
struct Story<'a> {
    known: Known,
    /// Every event in time order.
    events: Vec<&'a Event>,
    /// Position in `events` by event index.
    at: FxHashMap<u64, usize>,
    /// Who took each token: its acquire `ok`, by lockstorm's token and by
    /// the library's own (the key's value, which the observer reports).
    granted: FxHashMap<&'a str, &'a Event>,
    /// When the observer first saw each key value set.
    first_set: FxHashMap<&'a str, u64>,
    /// Writes the storage acknowledged, for a final read that fell short.
    acknowledged: Option<u64>,
}

/// The most steps a chain shows: enough for a pause, an expiry, a rival's
/// grant, read and write, and the stale holder's wake and write. Past it,
/// the chain keeps its steps by [`Rank`].
const MAX_STEPS: usize = 16;

/// How much the conclusion rests on a step; a long chain keeps the first
/// ranks whole and leaves out from the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    /// The anomaly's own events, their requests, and the stale holder's
    /// act once the rival held the lock.
    Proof,
    /// The grants of the holds involved.
    Holder,
    /// What ended a hold: its key seen gone, its lease run out.
    Ended,
    /// The faults that struck a holder or a node meanwhile.
    Struck,
    /// The rest of a hold: its reads, other writes, its release.
    Context,
}

impl<'a> Story<'a> {
    fn new(history: &'a History, known: Known) -> Self {
        let events = history.by_time();
        let at = events
            .iter()
            .enumerate()
            .map(|(i, e)| (e.index, i))
            .collect();
        let mut granted = FxHashMap::default();
        let mut first_set: FxHashMap<&str, u64> = FxHashMap::default();
        for &e in &events {
            if e.f == f::ACQUIRE && e.kind == OpType::Ok {
                for token in [e.token.as_deref(), key_token(e)].into_iter().flatten() {
                    granted.insert(token, e);
                }
            }
            if e.process.is_observer() && e.f == key::SET {
                if let Some(token) = e.token.as_deref() {
                    first_set.entry(token).or_insert(e.time);
                }
            }
        }
        Story {
            known,
            events,
            at,
            granted,
            first_set,
            acknowledged: None,
        }
    }

    fn event(&self, index: u64) -> Option<&'a Event> {
        self.at.get(&index).map(|&i| self.events[i])
    }

    fn name(&self, p: &Process) -> String {
        match (p, self.known.workers) {
            (Process::Client(id), Some(w)) if w > 0 => checker::history::worker_name(id % w),
            (Process::Client(id), _) => format!("process {id}"),
            (Process::Named(n), _) => n.clone(),
        }
    }

    /// The acquire `ok` of the hold `e` was made in: `e` itself for a grant,
    /// else its process's last grant before it.
    fn hold_of(&self, e: &'a Event) -> Option<&'a Event> {
        if e.f == f::ACQUIRE && e.kind == OpType::Ok {
            return Some(e);
        }
        let pos = *self.at.get(&e.index)?;
        self.events[..pos]
            .iter()
            .rev()
            .find(|x| x.process == e.process && x.f == f::ACQUIRE && x.kind == OpType::Ok)
            .copied()
    }

    /// When the hold granted by `grant` lost its lease, and how that is
    /// known.
    fn lease_end(&self, grant: &Event) -> Option<(u64, LeaseFrom)> {
        let lease = self.known.lease_ns?;
        let sent = grant.attempt_sent().unwrap_or(grant.time).min(grant.time);
        let set = key_token(grant)
            .and_then(|k| self.first_set.get(k).copied())
            .filter(|&t| t >= sent);
        let from = match set {
            Some(t) => LeaseFrom::Set(t),
            // A library that retries within one call: its request is when the
            // call began, not when the granted attempt went out.
            None if sent + lease < grant.time => LeaseFrom::Reply(grant.time),
            None => LeaseFrom::Request(sent),
        };
        Some((from.at() + lease, from))
    }

    /// The step that says a hold's lease ran out.
    fn lease_text(&self, grant: &Event, from: LeaseFrom) -> String {
        let who = self.name(&grant.process);
        let granted = secs(grant.time);
        match from {
            LeaseFrom::Set(t) => format!("{who}'s lease ran out (its key was set at {})", secs(t)),
            LeaseFrom::Request(_) => format!("{who}'s lease ran out (granted at {granted})"),
            LeaseFrom::Reply(_) => format!(
                "{who}'s lease had run out by now at the latest (granted by {granted}; its library's call began at {})",
                secs(grant.attempt_sent().unwrap_or(grant.time))
            ),
        }
    }

    fn tell(&self, name: &str, a: &Anomaly, i: usize, example: &[u64]) -> Option<Explanation> {
        let witnesses: Vec<&'a Event> = example.iter().filter_map(|&x| self.event(x)).collect();
        if witnesses.is_empty() {
            return None;
        }
        let mut chain = Chain::default();
        for w in &witnesses {
            chain.add(w, Rank::Proof);
            if let Some(request) = self.request_of(w) {
                chain.add(request, Rank::Proof);
            }
        }
        let end = witnesses.iter().map(|w| w.time).max().unwrap_or(0);
        let mut last = end;
        if name == anomaly::LOCK_OVERLAP {
            // What the first holder did once the second held the lock.
            if let [first, second, ..] = witnesses[..] {
                last = self
                    .next_action(first, second.time, &mut chain)
                    .unwrap_or(end);
            }
        }
        // Each client in the example: its hold, what it read in it, what
        // struck it, and when its lease or key went (the observer's word
        // may come a moment after the grant it made way for: a key expires
        // lazily, when the rival's SET touches it).
        let mut holds: Vec<&Event> = Vec::new();
        for w in witnesses.iter().filter(|w| w.process.is_client()) {
            let Some(grant) = self.hold_of(w) else {
                continue;
            };
            if holds.iter().any(|h| h.index == grant.index) {
                continue;
            }
            holds.push(grant);
            chain.add(grant, Rank::Holder);
            self.hold_steps(grant, end, last, &mut chain);
        }
        let start = holds.iter().map(|h| h.time).min().unwrap_or(end);
        self.faults_between(start, last, &holds, &mut chain);
        self.promoted_without(start, last, &holds, &mut chain);
        let (steps, left_out) = chain.steps(self);
        let final_read = name == anomaly::LOST_UPDATE && !witnesses[0].process.is_client();
        let note = final_read.then(|| match i {
            0 => format!(
                "the final read: its shortfall is the count ({}), more than the increments seen written twice",
                a.count
            ),
            _ => "the final read: it confirms the increments seen written twice above, and is not counted again".into(),
        });
        Some(Explanation {
            note,
            anomaly: name.to_string(),
            example: i + 1,
            cause: a.example_causes.get(i).cloned(),
            left_out,
            conclusion: match a.example_labels.get(i).cloned().flatten() {
                Some(label) => format!("{}; {label}", self.conclusion(name, &witnesses)),
                None => self.conclusion(name, &witnesses),
            },
            steps,
        })
    }

    /// A hold's own story up to `end`: its reads and writes, the lease end
    /// (or the observer's word on its key), its release.
    fn hold_steps(&self, grant: &'a Event, end: u64, seen_until: u64, chain: &mut Chain<'a>) {
        let Some(&from) = self.at.get(&grant.index) else {
            return;
        };
        // Its process's ops, and its release by token: after a timeout the
        // worker goes on under a new process id, and releases.
        let released = |e: &Event| e.f == f::RELEASE && e.token.is_some() && e.token == grant.token;
        let mine =
            |e: &&&Event| e.process == grant.process || (e.process.is_client() && released(e));
        for e in self.events[from + 1..].iter().filter(mine) {
            if e.time > end {
                break;
            }
            match (e.f.as_str(), e.kind) {
                (f::ACQUIRE, _) => break,
                (f::READ, OpType::Ok) | (f::WRITE, OpType::Invoke) => chain.add(e, Rank::Context),
                // The holder gave up on its write: what it does next, it does
                // with the write maybe still to land.
                (f::WRITE, OpType::Info) => chain.add(e, Rank::Ended),
                (f::RELEASE, OpType::Invoke) => {
                    chain.add(e, Rank::Context);
                    break;
                }
                _ => {}
            }
        }
        let token = key_token(grant);
        let seen_gone = self.events[from..]
            .iter()
            .take_while(|e| e.time <= seen_until)
            .filter(|e| e.process.is_observer() && token.is_some() && e.token.as_deref() == token)
            .filter(|e| matches!(e.f.as_str(), key::EXPIRED | key::DELETED))
            .inspect(|e| chain.add(e, Rank::Ended))
            .count();
        if seen_gone == 0 {
            if let Some((t, from)) = self.lease_end(grant).filter(|&(t, _)| t <= seen_until) {
                chain.implied(t, 0, grant.index, self.lease_text(grant, from));
            }
        }
    }

    /// The faults that struck one of `holds`' processes, or any node, while
    /// the chain ran: those already under way when it began, then each
    /// fault's start, steps (a failover's kill and promotion) and end.
    fn faults_between(&self, start: u64, end: u64, holds: &[&Event], chain: &mut Chain<'a>) {
        let names: Vec<String> = holds.iter().map(|h| self.name(&h.process)).collect();
        let struck = |e: &Event| {
            let target = e.value.get("target").and_then(|t| t.as_str());
            let process = e.value.get(fault::PROCESS).and_then(|p| p.as_u64());
            target.is_none_or(|t| names.iter().any(|n| n == t) || !t.starts_with("worker-"))
                || process.is_some_and(|p| holds.iter().any(|h| h.process == Process::Client(p)))
        };
        let target = |e: &Event| e.value.get("target").cloned();
        let mut under_way: Vec<&'a Event> = Vec::new();
        for &e in self.events.iter().filter(|e| e.is_nemesis()) {
            if e.time > end {
                break;
            }
            let kind = fault::started(&e.f).or(fault::stopped(&e.f));
            if e.time < start {
                match (fault::started(&e.f), fault::stopped(&e.f)) {
                    (Some(_), _) => under_way.push(e),
                    (_, Some(k)) => under_way
                        .retain(|s| fault::started(&s.f) != Some(k) || target(s) != target(e)),
                    _ => {}
                }
                continue;
            }
            if (kind.is_some() || fault::STEPS.contains(&e.f.as_str())) && struck(e) {
                chain.add(e, Rank::Struck);
            }
        }
        for e in under_way.into_iter().filter(|e| struck(e)) {
            chain.add(e, Rank::Struck);
        }
    }

    /// A promotion during the chain to a node cut off from where the
    /// observer saw a hold's key set, from before the grant on: the new
    /// primary never had that key, so the hold ended there. (Without the
    /// cut nothing is said: a replica's copy comes by replication, which
    /// the observer does not see, so its absence proves nothing.)
    fn promoted_without(&self, start: u64, end: u64, holds: &[&Event], chain: &mut Chain<'a>) {
        let promotions = self.events.iter().filter(|e| {
            e.is_nemesis() && e.f == fault::PROMOTED && e.time >= start && e.time <= end
        });
        for p in promotions {
            let Some(node) = p.value.get("promoted").and_then(|n| n.as_str()) else {
                continue;
            };
            for grant in holds.iter().filter(|g| g.time <= p.time) {
                let Some(key) = key_token(grant) else {
                    continue;
                };
                let sets: Vec<&str> = self
                    .events
                    .iter()
                    .take_while(|e| e.time <= p.time)
                    .filter(|e| e.process.is_observer() && e.f == key::SET)
                    .filter(|e| e.token.as_deref() == Some(key))
                    .filter_map(|e| e.node.as_deref())
                    .collect();
                if sets.is_empty() || sets.contains(&node) {
                    continue;
                }
                if !sets
                    .iter()
                    .any(|set_on| self.cut_at(set_on, node, grant.time))
                {
                    continue;
                }
                let text = format!(
                    "{node}, the new primary, never had {}'s key (the observer saw it set on {} only)",
                    self.name(&grant.process),
                    nodes_text(sets)
                );
                chain.implied(p.time, p.index, grant.index, text);
            }
        }
    }

    /// Whether nodes `a` and `b` were cut from each other at `at`: a
    /// fault's start before it naming one on each side (a failover's
    /// `target` and `cut-from`, a cluster partition's `cut`), not yet
    /// stopped.
    fn cut_at(&self, a: &str, b: &str, at: u64) -> bool {
        let names = |v: Option<&serde_json::Value>| -> Vec<String> {
            match v {
                Some(serde_json::Value::Array(all)) => all
                    .iter()
                    .flat_map(|x| match x {
                        serde_json::Value::Array(inner) => inner.clone(),
                        other => vec![other.clone()],
                    })
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect(),
                Some(serde_json::Value::String(s)) => vec![s.clone()],
                _ => Vec::new(),
            }
        };
        let mut cut = false;
        for e in self
            .events
            .iter()
            .take_while(|e| e.time <= at)
            .filter(|e| e.is_nemesis())
        {
            if let Some(kind) = fault::started(&e.f) {
                let (one, other) = match e.value.get("cut") {
                    Some(serde_json::Value::Array(sides)) if sides.len() == 2 => {
                        (names(sides.first()), names(sides.get(1)))
                    }
                    _ => (names(e.value.get("target")), names(e.value.get("cut-from"))),
                };
                let across =
                    |x: &str, y: &str| one.iter().any(|n| n == x) && other.iter().any(|n| n == y);
                if across(a, b) || across(b, a) {
                    cut = CUTS.contains(&kind);
                }
            } else if fault::stopped(&e.f).is_some_and(|k| CUTS.contains(&k)) {
                cut = false;
            }
        }
        cut
    }

    /// The first data op or release `holder`'s process sent after `after`;
    /// returns when.
    fn next_action(&self, holder: &'a Event, after: u64, chain: &mut Chain<'a>) -> Option<u64> {
        let next = self.events.iter().find(|e| {
            e.process == holder.process
                && e.time >= after
                && e.kind == OpType::Invoke
                && matches!(e.f.as_str(), f::WRITE | f::READ | f::RELEASE)
        });
        let e = next?;
        chain.add(e, Rank::Proof);
        Some(e.time)
    }

    /// The request a client's data op or release `e` answers: its
    /// process's latest invocation of the same op before it. (An acquire's
    /// may be long before its grant, which is what the chain is about.)
    fn request_of(&self, e: &'a Event) -> Option<&'a Event> {
        let asked = matches!(e.f.as_str(), f::READ | f::WRITE | f::RELEASE);
        if !e.process.is_client() || e.kind == OpType::Invoke || !asked {
            return None;
        }
        let pos = *self.at.get(&e.index)?;
        self.events[..pos]
            .iter()
            .rev()
            .find(|x| x.process == e.process && x.kind == OpType::Invoke)
            .filter(|x| x.f == e.f)
            .copied()
    }

    /// Another process's grant still held (not released) when `e` came:
    /// the holder whose lock an acquire that cannot be placed runs into.
    fn still_held(&self, e: &Event) -> Option<&'a Event> {
        let pos = *self.at.get(&e.index)?;
        let before = &self.events[..pos];
        before.iter().rev().copied().find(|g| {
            g.f == f::ACQUIRE
                && g.kind == OpType::Ok
                && g.process != e.process
                && !before.iter().any(|r| {
                    r.process == g.process
                        && r.f == f::RELEASE
                        && r.time >= g.time
                        && r.index != g.index
                })
        })
    }

    fn conclusion(&self, name: &str, w: &[&Event]) -> String {
        let who = |e: &Event| self.name(&e.process);
        let at = |e: &Event| secs(e.time);
        let meaning = anomaly_kind(name).map_or("", |k| k.harm);
        match (name, w) {
            (anomaly::LOCK_OVERLAP, [a, b, ..]) => format!(
                "{} still believed it held the lock (granted at {}, not released) when {} was granted it at {}: two holders at once ({name})",
                who(a), at(a), who(b), at(b)
            ),
            (anomaly::UNSAFE_ACTION, [op, gone, ..]) if gone.process.is_observer() => format!(
                "{} {} at {}, after {}: a holder that had lost the lock acted ({name})",
                who(op),
                match op.f.as_str() {
                    f::WRITE => format!("wrote {}", op.value),
                    _ => format!("{} {}", op.f, op.value),
                },
                at(op),
                self.describe(gone)
            ),
            (anomaly::UNSAFE_ACTION, [op, rival, rest @ ..]) => {
                let landed = rest.first().map_or(String::new(), |d| {
                    format!(", and it landed at {}", at(d))
                });
                format!(
                    "{} {} after {} was granted the lock at {}{landed}: a holder that had lost the lock acted ({name})",
                    who(op),
                    match op.f.as_str() {
                        f::WRITE => format!("wrote {}", op.value),
                        _ => format!("{} {}", op.f, op.value),
                    },
                    who(rival),
                    at(rival)
                )
            }
            (anomaly::LOST_UPDATE, [a, b, ..]) => format!(
                "{} wrote {} over {}'s {}: {}'s increment is lost ({name})",
                who(b), b.value, who(a), a.value, who(a)
            ),
            (anomaly::LOST_UPDATE, [read]) => {
                let short = self
                    .acknowledged
                    .zip(read.int_value())
                    .map(|(ack, v)| {
                        format!(" after {ack} acknowledged writes: {} increment(s) lost", ack as i64 - v)
                    })
                    .unwrap_or_else(|| ", less than the writes acknowledged".into());
                format!("the final read found {}{short} ({name})", read.value)
            }
            (anomaly::STALE_FENCE_ACCEPTED, [by, e, ..]) => format!(
                "the storage took fence {} from {} at {} after it had taken fence {} at {} ({name})",
                e.fence.map_or("?".into(), |f| f.to_string()), who(e), at(e),
                by.fence.map_or("?".into(), |f| f.to_string()), at(by)
            ),
            (anomaly::FOREIGN_RELEASE, [release, rival, ..]) => format!(
                "{}'s release at {} came after {} was granted the lock at {}: it deleted {}'s lock ({name})",
                who(release), at(release), who(rival), at(rival), who(rival)
            ),
            (anomaly::NONLINEARIZABLE, [.., last]) => {
                let why = self
                    .still_held(last)
                    .map(|g| format!(": {} held the lock since {} and had not released it", who(g), at(g)))
                    .unwrap_or_default();
                format!(
                    "no real-time order of these lock operations fits a mutex: {}'s {} at {} cannot be placed{why} ({name})",
                    who(last), last.f, at(last)
                )
            }
            _ => format!("{meaning} ({name})"),
        }
    }

    fn step(&self, e: &Event) -> Step {
        Step {
            time: e.time,
            index: Some(e.index),
            text: self.describe(e),
        }
    }

    fn describe(&self, e: &Event) -> String {
        if e.process.is_observer() {
            return self.describe_key(e, e.node.as_deref().unwrap_or("a node"));
        }
        if e.is_nemesis() {
            return self.describe_fault(e);
        }
        self.describe_op(e)
    }

    /// What the observer saw of a key, on `node` (or nodes).
    fn describe_key(&self, e: &Event, node: &str) -> String {
        let owner = e
            .token
            .as_deref()
            .and_then(|t| self.granted.get(t))
            .map_or_else(
                || "a".to_string(),
                |g| format!("{}'s", self.name(&g.process)),
            );
        let by = e
            .value
            .get(key::BY)
            .and_then(|b| b.as_str())
            .map(|b| format!(" by {b}"))
            .unwrap_or_default();
        match e.f.as_str() {
            key::SET => format!("{node} set {owner} key{by}"),
            key::RENEWED => format!("{node} renewed {owner} key{by}"),
            key::EXPIRED => format!("{owner} key expired on {node}"),
            key::DELETED => format!("{owner} key was deleted on {node}{by}"),
            other => format!("{node}: {other}"),
        }
    }

    /// A client's or the harness's op.
    fn describe_op(&self, e: &Event) -> String {
        let who = self.name(&e.process);
        let value = &e.value;
        let fence = e.fence.map(|f| format!(", fence {f}")).unwrap_or_default();
        let error = e.error.as_deref().unwrap_or("no reason given");
        match (e.f.as_str(), e.kind) {
            (f::ACQUIRE, OpType::Ok) => format!(
                "{who} was granted the lock (token {}{fence})",
                e.token.as_deref().unwrap_or("?")
            ),
            (f::READ, OpType::Ok) if !e.process.is_client() => {
                format!("the {who}'s final read found {value}")
            }
            (f::READ, OpType::Ok) => format!("{who} read {value}{fence}"),
            (f::READ, OpType::Invoke) => format!("{who} sent its read"),
            (f::WRITE, OpType::Invoke) => {
                let late = self
                    .hold_of(e)
                    .and_then(|g| self.lease_end(g))
                    .map(|(end, _)| end)
                    .filter(|&end| end < e.time)
                    .map(|end| format!(", {} past its lease", secs(e.time - end)))
                    .unwrap_or_default();
                format!("{who} sent its write of {value}{fence}{late}")
            }
            (f::WRITE, OpType::Ok) => format!("the storage took {who}'s write of {value}"),
            (f::WRITE, OpType::Fail) => format!("the storage refused {who}'s write ({error})"),
            (f::WRITE, OpType::Info) => {
                format!("{who}'s write of {value} got no answer ({error}): it may have landed")
            }
            // Sent, not done: a release can find another's key in its place.
            (f::RELEASE, OpType::Invoke) => format!("{who} sent its release"),
            (f::RELEASE, OpType::Ok) => format!("{who}'s release succeeded"),
            (f::RELEASE, OpType::Fail) => format!("{who}'s release was refused ({error})"),
            (f::CRASH, _) => format!(
                "{} died",
                value.get("process").map_or(who, |p| p.to_string())
            ),
            (op, kind) => format!(
                "{who}: {op} {kind:?}{}",
                e.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            ),
        }
    }

    fn describe_fault(&self, e: &Event) -> String {
        self.describe_fault_on(e, None)
    }

    /// A fault, on `nodes` where it is one step for several.
    fn describe_fault_on(&self, e: &Event, nodes: Option<&str>) -> String {
        let target = nodes
            .or(e.value.get("target").and_then(|t| t.as_str()))
            .or(e.node.as_deref());
        // A fault on several nodes names them all (`targets`).
        let targets: Vec<&str> = e
            .value
            .get("targets")
            .and_then(|t| t.as_array())
            .map(|t| t.iter().filter_map(|n| n.as_str()).collect())
            .unwrap_or_default();
        let on = match (target, targets.is_empty()) {
            (Some(t), _) => format!(" {t}"),
            (None, false) => format!(" {}", targets.join(", ")),
            (None, true) => String::new(),
        };
        let place = e
            .value
            .get(fault::AT)
            .and_then(|a| a.as_str()?.parse::<checker::Point>().ok())
            .map(|p| format!(" {}", p.place()))
            .unwrap_or_default();
        if let Some(kind) = fault::started(&e.f) {
            return self.fault_began(kind, e, &on, &place);
        }
        match fault::stopped(&e.f) {
            Some(kind) => fault_ended(kind, e, target, &on),
            // A step inside a fault (a failover's).
            None => self.fault_step(e, &on),
        }
    }

    /// A fault's start event, in words.
    fn fault_began(&self, kind: &str, e: &Event, on: &str, place: &str) -> String {
        let text = |k: &str| e.value.get(k).and_then(|v| v.as_str());
        match kind {
            "pause" => format!("the nemesis froze{on}{place}"),
            "crash" => format!("the nemesis killed{on}{place}"),
            "kill" => format!("the nemesis killed{on} (a restart follows)"),
            "delay" => format!(
                "the proxy held{on}'s {}",
                e.value
                    .get("command")
                    .and_then(|c| c.as_str())
                    .unwrap_or("command")
            ),
            "manual-failover" => format!(
                "the nemesis asked {} to take over from{on} in step with it (CLUSTER FAILOVER: the master stops taking writes until its replica has them all)",
                text("replica").unwrap_or("its replica")
            ),
            "failover" | "takeover" => {
                let replicas = e.value.get("cut-from").and_then(|r| r.as_array());
                let replicas: Vec<&str> = replicas
                    .map(|r| r.iter().filter_map(|n| n.as_str()).collect())
                    .unwrap_or_default();
                let (its, they) = match replicas.len() {
                    1 => ("its replica", "it never sees"),
                    _ => ("its replicas", "they never see"),
                };
                format!(
                    "the nemesis cut{on} off from {its} {}: what it takes now, {they}",
                    nodes_text(replicas)
                )
            }
            _ => format!("fault {kind} began{on}"),
        }
    }

    /// A step inside a fault (a failover's), in words.
    fn fault_step(&self, e: &Event, on: &str) -> String {
        let number = |k: &str| e.value.get(k).and_then(|v| v.as_u64());
        let text = |k: &str| e.value.get(k).and_then(|v| v.as_str());
        match e.f.as_str() {
            fault::KILLED => {
                let holder = number("holder")
                    .map(|p| format!(" while {} held the lock", self.name(&Process::Client(p))))
                    .unwrap_or_default();
                format!("the nemesis killed{on}{holder}")
            }
            fault::TAKEN_OVER => {
                let holder = number("holder")
                    .map(|p| format!(", while {} held the lock", self.name(&Process::Client(p))))
                    .unwrap_or_default();
                format!(
                    "{} took the slots of{on} at once, without it or a vote (CLUSTER FAILOVER TAKEOVER){holder}",
                    text("replica").unwrap_or("its replica")
                )
            }
            fault::PROMOTED => match text("promoted") {
                Some(new) => format!(
                    "{new} became the primary, {:.2} s after {}{}",
                    number("after_ms").unwrap_or(0) as f64 / 1e3,
                    text("since").unwrap_or("the kill"),
                    number("epoch")
                        .map(|n| format!(" (config epoch {n})"))
                        .unwrap_or_default()
                ),
                None => "no replica became the primary".into(),
            },
            fault::HEAL_FAILED => format!("healing failed: {}", text("error").unwrap_or("?")),
            other => format!("the nemesis: {other}{on}"),
        }
    }
}

/// `--restart-at-vote`'s part of a restart: when the node was marked down,
/// and by whom, or that it never was (and so came back before any vote).
fn at_vote(e: &Event) -> String {
    let Some(v) = e.value.get(fault::AT_VOTE) else {
        return String::new();
    };
    let after = v["after_ms"].as_u64().unwrap_or(0) as f64 / 1e3;
    match v["by"].as_str() {
        Some(by) => format!(", as its replica's vote began ({by}, {after:.2} s after the kill)"),
        None => format!(", never marked down ({after:.2} s after the kill): no vote began"),
    }
}

/// A fault's stop event, in words.
fn fault_ended(kind: &str, e: &Event, target: Option<&str>, on: &str) -> String {
    if let Some(why) = e.value.get(fault::INTERRUPTED).and_then(|w| w.as_str()) {
        return format!("the {kind} on{on} was cut short and healed: {why}");
    }
    match kind {
        "pause" => format!("{} woke", target.unwrap_or("the frozen process")),
        "kill" => format!(
            "{} restarted{}",
            target.unwrap_or("the killed node"),
            at_vote(e)
        ),
        "failover" => format!(
            "{} restarted and its links healed",
            target.unwrap_or("the old primary")
        ),
        "takeover" | "manual-failover" => {
            let old = target.unwrap_or("the old master");
            let healed = match kind {
                "takeover" => format!("{old}'s link to its replica healed; "),
                _ => String::new(),
            };
            let still = e
                .value
                .get("old_primary")
                .and_then(|o| o.get("still_primary_after_ms"));
            match still.and_then(|ms| ms.as_u64()) {
                Some(ms) => format!(
                    "{healed}{old} was still a master {:.2} s on",
                    ms as f64 / 1e3
                ),
                None => format!("{healed}{old} follows the new master"),
            }
        }
        "delay" => {
            let reply = e.value.get("reply").and_then(|r| r.as_str());
            let answered = reply
                .map(|r| format!(": the node answered {r}"))
                .unwrap_or_default();
            format!("the proxy let{on}'s command go{answered}")
        }
        _ => format!("fault {kind} healed{on}"),
    }
}

/// The faults that cut nodes off from each other: what a node never
/// received while one lasted, it never had.
const CUTS: [&str; 3] = ["failover", "takeover", "partition"];

/// The steps gathered for one example: events (each once, at the best
/// rank it was added with) and implied lease ends.
#[derive(Default)]
struct Chain<'a> {
    events: Vec<(&'a Event, Rank)>,
    /// Moments the history implies (a lease's end, a new primary without
    /// a key): when, after which event at that instant (0: before them
    /// all), the grant's index, and the step's text.
    implied: Vec<(u64, u64, u64, String)>,
}

/// One step, before a long chain is cut down: its time, event index (0 for
/// an implied moment, which sorts before an event at the same instant) and
/// rank.
type Ranked = (u64, u64, Rank, Step);

impl<'a> Chain<'a> {
    fn add(&mut self, e: &'a Event, rank: Rank) {
        match self.events.iter_mut().find(|(x, _)| x.index == e.index) {
            Some((_, r)) => *r = (*r).min(rank),
            None => self.events.push((e, rank)),
        }
    }

    /// A moment the history implies for the hold granted at event
    /// `grant`, each once.
    fn implied(&mut self, at: u64, after: u64, grant: u64, text: String) {
        if !self
            .implied
            .iter()
            .any(|(_, _, g, t)| *g == grant && *t == text)
        {
            self.implied.push((at, after, grant, text));
        }
    }

    /// The steps in time order, at most [`MAX_STEPS`], and how many were
    /// left out. The observer's word on one key across nodes is one step.
    fn steps(&self, story: &Story) -> (Vec<Step>, usize) {
        let mut steps: Vec<Ranked> = Vec::new();
        let mut groups: Vec<(&Event, Rank, Vec<&str>)> = Vec::new();
        for &(e, rank) in &self.events {
            let Some(node) = node_of(e) else {
                steps.push((e.time, e.index, rank, story.step(e)));
                continue;
            };
            match groups.iter_mut().find(|(g, _, _)| alike(g, e)) {
                Some((g, r, nodes)) => {
                    *r = (*r).min(rank);
                    nodes.push(node);
                    if e.time < g.time {
                        *g = e;
                    }
                }
                None => groups.push((e, rank, vec![node])),
            }
        }
        for (e, rank, nodes) in groups {
            let nodes = nodes_text(nodes);
            let text = match e.process.is_observer() {
                true => story.describe_key(e, &nodes),
                false => story.describe_fault_on(e, Some(&nodes)),
            };
            let step = Step {
                time: e.time,
                index: Some(e.index),
                text,
            };
            steps.push((e.time, e.index, rank, step));
        }
        for (at, after, _, text) in &self.implied {
            let step = Step {
                time: *at,
                index: None,
                text: text.clone(),
            };
            steps.push((*at, *after, Rank::Ended, step));
        }
        let left_out = steps.len().saturating_sub(MAX_STEPS);
        if left_out > 0 {
            steps.sort_by_key(|(t, i, rank, _)| (*rank, *t, *i));
            steps.truncate(MAX_STEPS);
        }
        steps.sort_by_key(|(t, i, _, _)| (*t, *i));
        (steps.into_iter().map(|(_, _, _, s)| s).collect(), left_out)
    }
}

/// What a hold's lease is dated from, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaseFrom {
    /// The observer saw its key set: the server's moment, on the run's clock.
    Set(u64),
    /// Its granted attempt's request (lockstorm's own clients send one a try).
    Request(u64),
    /// Only its reply: the lease began before it, so it ended by then + TTL.
    Reply(u64),
}

impl LeaseFrom {
    fn at(self) -> u64 {
        match self {
            LeaseFrom::Set(t) | LeaseFrom::Request(t) | LeaseFrom::Reply(t) => t,
        }
    }
}

/// The value a grant's key holds: the library's own token where it shows
/// one, else lockstorm's.
fn key_token(grant: &Event) -> Option<&str> {
    let client = grant.value.get(checker::history::CLIENT_TOKEN);
    client.and_then(|t| t.as_str()).or(grant.token.as_deref())
}

/// The node an observer's key event or a fault on one node is about: such
/// steps alike but for their node are told as one.
fn node_of(e: &Event) -> Option<&str> {
    if e.process.is_observer() {
        return Some(e.node.as_deref().unwrap_or("a node"));
    }
    let target = e.value.get("target").and_then(|t| t.as_str());
    target.filter(|t| e.is_nemesis() && !t.starts_with("worker-"))
}

/// Whether two steps of [`node_of`] say the same thing of different nodes.
fn alike(a: &Event, b: &Event) -> bool {
    let without_target = |e: &Event| {
        let mut v = e.value.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("target");
        }
        v
    };
    a.process == b.process
        && a.f == b.f
        && a.token == b.token
        && without_target(a) == without_target(b)
}

/// Nodes named once each, in order, a run of `nK` names as `n1–n5`.
fn nodes_text(mut nodes: Vec<&str>) -> String {
    let number = |n: &str| n.strip_prefix('n').and_then(|k| k.parse::<u32>().ok());
    nodes.sort_by_key(|n| (number(n), n.to_string()));
    nodes.dedup();
    let numbers: Option<Vec<u32>> = nodes.iter().map(|n| number(n)).collect();
    match numbers {
        Some(k) if k.len() > 2 && k.windows(2).all(|w| w[1] == w[0] + 1) => {
            format!("n{}–n{}", k[0], k[k.len() - 1])
        }
        _ => nodes.join(", "),
    }
}

fn secs(ns: u64) -> String {
    format!("{:.2} s", ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use checker::history::build::Hist;
    use checker::{check, Promise};
    use serde_json::json;

    const S: u64 = 1_000_000_000;

    /// The material's Demo 2: worker 0 reads 8 and is frozen right before
    /// its write; its 2 s lease runs out; worker 1 is granted the lock,
    /// reads 8 and writes 9; worker 0 wakes and writes 9 too.
    fn demo_2(observed: bool) -> Hist {
        demo_2_expiring(observed.then_some(5))
    }

    /// Demo 2; with the observer's `key-expired` stamped `ns` after 3 s
    /// (the rival's grant is at 3 s + 10 ns).
    fn demo_2_expiring(expired: Option<u64>) -> Hist {
        let mut h = Hist::new();
        let t = |s: u64, n: u64| s * S + n;
        h.invoke(0, f::ACQUIRE).time(t(1, 0));
        h.ok(0, f::ACQUIRE).time(t(1, 1)).token("0-1");
        h.invoke(0, f::READ).time(t(1, 2));
        h.ok(0, f::READ).time(t(1, 3)).value(8);
        h.nemesis("start-pause")
            .time(S + S / 5)
            .value(json!({"target": "worker-0", "process": 0, "at": "checked"}));
        if let Some(ns) = expired {
            h.ok(Process::observer(), key::EXPIRED)
                .time(t(3, ns))
                .token("0-1")
                .value(json!({}));
        }
        h.invoke(1, f::ACQUIRE).time(t(3, 0));
        h.ok(1, f::ACQUIRE).time(t(3, 10)).token("1-1");
        h.invoke(1, f::READ).time(t(3, 11));
        h.ok(1, f::READ).time(t(3, 12)).value(8);
        h.invoke(1, f::WRITE).time(t(3, 13)).value(9);
        h.ok(1, f::WRITE).time(t(3, 14)).value(9);
        h.invoke(1, f::RELEASE).time(t(3, 15)).token("1-1");
        h.ok(1, f::RELEASE).time(t(3, 16)).token("1-1");
        h.nemesis("stop-pause")
            .time(t(4, 0))
            .value(json!({"target": "worker-0", "process": 0}));
        h.invoke(0, f::WRITE).time(t(4, 1)).value(9);
        h.ok(0, f::WRITE).time(t(4, 2)).value(9);
        h.invoke(0, f::RELEASE).time(t(4, 3)).token("0-1");
        h.ok(0, f::RELEASE).time(t(4, 4)).token("0-1");
        h.invoke("harness", f::READ).time(t(5, 0));
        h.ok("harness", f::READ).time(t(5, 1)).value(1);
        h
    }

    fn told(h: &Hist) -> Vec<Explanation> {
        let history = h.build();
        let results = check(&history, Promise::MutualExclusion);
        let known = Known {
            workers: Some(2),
            lease_ns: Some(2 * S),
        };
        explain(&history, &results, known)
    }

    fn texts(e: &Explanation) -> Vec<&str> {
        e.steps.iter().map(|s| s.text.as_str()).collect()
    }

    #[test]
    fn demo_2_names_the_pause_the_expiry_the_rivals_grant_and_the_lost_increment() {
        let all = told(&demo_2(false));
        let lost = all
            .iter()
            .find(|e| e.anomaly == anomaly::LOST_UPDATE && e.steps.len() > 1)
            .expect("a lost update told as a chain");
        let steps = texts(lost);
        let expected = [
            "worker-0 was granted the lock (token 0-1)",
            "worker-0 read 8",
            "the nemesis froze worker-0 right before its write, after its last check",
            "worker-0's lease ran out (granted at 1.00 s)",
            "worker-1 was granted the lock (token 1-1)",
            "worker-1 read 8",
            "worker-1 sent its write of 9",
            "the storage took worker-1's write of 9",
            "worker-0 woke",
            "worker-0 sent its write of 9, 1.00 s past its lease",
            "the storage took worker-0's write of 9",
        ];
        for (i, want) in expected.iter().enumerate() {
            assert!(
                steps.contains(want),
                "missing step {i} {want:?}: {steps:#?}"
            );
        }
        let order: Vec<usize> = expected
            .iter()
            .map(|w| steps.iter().position(|s| s == w).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{steps:#?}");
        assert_eq!(
            lost.conclusion,
            "worker-0 wrote 9 over worker-1's 9: worker-1's increment is lost (lost-update)"
        );
        assert_eq!(lost.cause.as_deref(), Some("pause"));
        let unsafe_action = all.iter().find(|e| e.anomaly == anomaly::UNSAFE_ACTION);
        let unsafe_action = unsafe_action.expect("the stale write is an unsafe action");
        assert!(
            unsafe_action
                .conclusion
                .starts_with("worker-0 wrote 9 after worker-1 was granted"),
            "{}",
            unsafe_action.conclusion
        );
    }

    /// Demo 2 on five nodes, each frozen and woken while worker 0 sleeps,
    /// and the observer's word on each node's key.
    fn demo_2_on_five_nodes() -> Hist {
        let mut h = demo_2(false);
        let t = |s: u64, n: u64| s * S + n;
        for (k, node) in ["n1", "n2", "n3", "n4", "n5"].into_iter().enumerate() {
            let k = k as u64;
            h.key(key::SET, node, "0-1").time(t(1, 100 + k));
            h.nemesis("start-pause")
                .time(t(2, k))
                .value(json!({"target": node}));
            h.nemesis("stop-pause")
                .time(t(2, 100 + k))
                .value(json!({"target": node}));
            h.key(key::EXPIRED, node, "0-1").time(t(3, 1 + k));
            h.key(key::SET, node, "1-1").time(t(3, 20 + k));
        }
        h
    }

    fn lost_update(h: &Hist) -> Explanation {
        let all = told(h);
        let lost = all
            .into_iter()
            .find(|e| e.anomaly == anomaly::LOST_UPDATE && e.steps.len() > 1);
        lost.expect("a lost update told as a chain")
    }

    /// What a lost update's chain rests on: both holds, the stale one's
    /// end, both writes and their requests.
    const PROOF: [&str; 7] = [
        "worker-0 was granted the lock (token 0-1)",
        "worker-0's key expired on n1–n5",
        "worker-1 was granted the lock (token 1-1)",
        "worker-1 sent its write of 9",
        "the storage took worker-1's write of 9",
        "worker-0 sent its write of 9, 1.00 s past its lease",
        "the storage took worker-0's write of 9",
    ];

    #[test]
    fn what_happened_alike_on_every_node_is_one_step() {
        let lost = lost_update(&demo_2_on_five_nodes());
        let steps = texts(&lost);
        for want in PROOF
            .into_iter()
            .chain(["the nemesis froze n1–n5", "n1–n5 woke"])
        {
            assert!(steps.contains(&want), "missing {want:?}: {steps:#?}");
        }
        assert_eq!(lost.left_out, 0, "{steps:#?}");
    }

    #[test]
    fn a_long_chain_keeps_what_its_conclusion_rests_on_and_says_what_it_left_out() {
        // Clock jumps on one node after another, each its own step.
        let mut h = demo_2_on_five_nodes();
        for k in 0..12u64 {
            h.nemesis("start-clock")
                .time(2 * S + 200 + k)
                .value(json!({"target": "n1", "offset_ms": 100 * (k + 1)}));
        }
        let lost = lost_update(&h);
        let steps = texts(&lost);
        assert_eq!(steps.len(), MAX_STEPS, "{steps:#?}");
        for want in PROOF {
            assert!(steps.contains(&want), "missing {want:?}: {steps:#?}");
        }
        // The holders' reads and releases go first.
        assert!(!steps.contains(&"worker-1 sent its release"), "{steps:#?}");
        assert!(lost.left_out > 0);
        let shown = lost.to_string();
        assert!(shown.contains("lesser step(s) left out"), "{shown}");
        let times: Vec<u64> = lost.steps.iter().map(|s| s.time).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    }

    #[test]
    fn a_lease_never_runs_out_before_its_grant() {
        // Worker 1's library retries inside one acquire call from 0.5 s
        // until its grant at 3 s, its own token in the key; the observer
        // sees that key set at 3 s, or nothing.
        for observed in [false, true] {
            let mut h = Hist::new();
            h.invoke(1, f::ACQUIRE).time(S / 2);
            h.ok(1, f::ACQUIRE)
                .time(3 * S)
                .token("1-1")
                .value(json!({"attempt_sent": S / 2, "client_token": "lib-1"}));
            if observed {
                h.key(key::SET, "n1", "lib-1").time(3 * S - 5);
            }
            let history = h.build();
            let known = Known {
                workers: Some(2),
                lease_ns: Some(2 * S),
            };
            let story = Story::new(&history, known);
            let grant = history.events.iter().find(|e| e.kind == OpType::Ok);
            let grant = grant.expect("the grant");
            let (end, from) = story.lease_end(grant).expect("a lease");
            assert!(end > grant.time, "{observed}: {from:?}");
            let want = match observed {
                true => "worker-1's lease ran out (its key was set at 3.00 s)",
                false => "worker-1's lease had run out by now at the latest (granted by 3.00 s; its library's call began at 0.50 s)",
            };
            assert_eq!(story.lease_text(grant, from), want);
        }
    }

    /// Granted before the cut, the key went to the replica by replication,
    /// which the observer does not show: its absence there proves nothing,
    /// and the story does not say the new primary lacked it.
    #[test]
    fn a_key_granted_before_the_cut_is_not_said_missing_from_the_new_primary() {
        let mut h = Hist::new();
        h.invoke(0, f::ACQUIRE).time(S);
        h.key(key::SET, "n1", "0-1").time(S + 1);
        h.ok(0, f::ACQUIRE).time(S + 2).token("0-1");
        h.nemesis("start-partition")
            .time(2 * S)
            .value(json!({"cut": [["n1"], ["n2", "n3", "n4"]], "target": "n1"}));
        h.nemesis("promoted").time(4 * S).value(
            json!({"promoted": "n4", "replaces": "n1", "after_ms": 2000, "since": "the cut"}),
        );
        h.invoke(1, f::ACQUIRE).time(4 * S + 2);
        h.key(key::SET, "n4", "1-1").time(4 * S + 3);
        h.ok(1, f::ACQUIRE).time(4 * S + 4).token("1-1");
        h.release(0, "0-1");
        h.release(1, "1-1");
        let all = told(&h);
        let overlap = all.iter().find(|e| e.anomaly == anomaly::LOCK_OVERLAP);
        let steps = texts(overlap.expect("an overlap"));
        assert!(
            steps.contains(&"n4 became the primary, 2.00 s after the cut"),
            "{steps:#?}"
        );
        assert!(!steps.iter().any(|s| s.contains("never had")), "{steps:#?}");
    }

    #[test]
    fn a_failover_is_told_from_the_cut_to_the_new_primary_without_the_key() {
        let mut h = Hist::new();
        h.nemesis("start-failover")
            .time(S)
            .value(json!({"target": "n1", "cut-from": ["n2", "n3"]}));
        h.invoke(0, f::ACQUIRE).time(2 * S);
        h.key(key::SET, "n1", "0-1").time(2 * S + 1);
        h.ok(0, f::ACQUIRE).time(2 * S + 2).token("0-1");
        h.nemesis("kill")
            .time(3 * S)
            .value(json!({"target": "n1", "holder": 0}));
        h.nemesis("promoted")
            .time(5 * S)
            .value(json!({"promoted": "n2", "after_ms": 2000}));
        h.nemesis("stop-failover")
            .time(5 * S + 1)
            .value(json!({"target": "n1"}));
        h.invoke(1, f::ACQUIRE).time(5 * S + 2);
        h.key(key::SET, "n2", "1-1").time(5 * S + 3);
        h.ok(1, f::ACQUIRE).time(5 * S + 4).token("1-1");
        h.release(0, "0-1");
        h.release(1, "1-1");
        let all = told(&h);
        let overlap = all.iter().find(|e| e.anomaly == anomaly::LOCK_OVERLAP);
        let steps = texts(overlap.expect("an overlap"));
        let expected = [
            "the nemesis cut n1 off from its replicas n2, n3: what it takes now, they never see",
            "worker-0 was granted the lock (token 0-1)",
            "the nemesis killed n1 while worker-0 held the lock",
            "n2 became the primary, 2.00 s after the kill",
            "n2, the new primary, never had worker-0's key (the observer saw it set on n1 only)",
            "n1 restarted and its links healed",
            "worker-1 was granted the lock (token 1-1)",
        ];
        let at: Vec<Option<usize>> = expected
            .iter()
            .map(|w| steps.iter().position(|s| s == w))
            .collect();
        assert!(at.iter().all(Option::is_some), "{steps:#?}");
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{steps:#?}");
    }

    #[test]
    fn a_hold_tells_its_write_timing_out_and_its_release_under_a_new_id() {
        // Worker 0's write is held in the network; it times out, and the
        // worker, now process 2, releases the lock.
        let mut h = Hist::new();
        h.acquire(0, "0-1");
        h.read(0, 7);
        h.invoke(0, f::WRITE).value(8);
        h.info(0, f::WRITE).value(8).error("timeout");
        h.release(2, "0-1");
        let history = h.build();
        let story = Story::new(
            &history,
            Known {
                workers: Some(2),
                lease_ns: None,
            },
        );
        let grant = history
            .events
            .iter()
            .find(|e| e.f == f::ACQUIRE && e.kind == OpType::Ok);
        let mut chain = Chain::default();
        story.hold_steps(grant.unwrap(), u64::MAX, u64::MAX, &mut chain);
        let (steps, _) = chain.steps(&story);
        let texts: Vec<&str> = steps.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "worker-0 read 7",
                "worker-0 sent its write of 8",
                "worker-0's write of 8 got no answer (timeout): it may have landed",
                "worker-0 sent its release",
            ]
        );
    }

    #[test]
    fn a_digest_tells_one_chain_of_each_kind_worst_first() {
        let chain = |anomaly: &str, example: usize, steps: usize| Explanation {
            anomaly: anomaly.into(),
            example,
            cause: None,
            note: None,
            steps: (0..steps)
                .map(|i| Step {
                    time: i as u64,
                    index: Some(i as u64),
                    text: format!("step {i}"),
                })
                .collect(),
            left_out: 0,
            conclusion: String::new(),
        };
        let told = vec![
            chain(anomaly::LOCK_OVERLAP, 1, 5),
            chain(anomaly::LOCK_OVERLAP, 2, 5),
            chain(anomaly::LOCK_OVERLAP, 3, 5),
            chain(anomaly::LOST_UPDATE, 1, 1),
            chain(anomaly::LOST_UPDATE, 2, 9),
        ];
        let told_of = |promise| -> Vec<(String, usize, usize)> {
            let d = digest(told.clone(), promise);
            d.into_iter()
                .map(|(e, more)| (e.anomaly, e.example, more))
                .collect()
        };
        // The data first, and of a kind its first chain with more than a step.
        let want = vec![
            (anomaly::LOST_UPDATE.to_string(), 2, 1),
            (anomaly::LOCK_OVERLAP.to_string(), 1, 2),
        ];
        assert_eq!(told_of(Promise::MutualExclusion), want);
        assert_eq!(told_of(Promise::DataSafety), want);
        // What breaks the promise goes before what does not, whatever it is.
        let deadlock = vec![
            chain(anomaly::LOCK_OVERLAP, 1, 5),
            chain(anomaly::DEADLOCK, 1, 3),
        ];
        let kinds = |p| -> Vec<String> {
            digest(deadlock.clone(), p)
                .into_iter()
                .map(|(e, _)| e.anomaly)
                .collect()
        };
        assert_eq!(
            kinds(Promise::MutualExclusion),
            [anomaly::LOCK_OVERLAP, anomaly::DEADLOCK]
        );
        assert_eq!(
            kinds(Promise::DataSafety),
            [anomaly::DEADLOCK, anomaly::LOCK_OVERLAP]
        );
    }

    #[test]
    fn nodes_are_named_as_a_run_where_they_form_one() {
        assert_eq!(nodes_text(vec!["n3", "n1", "n2", "n2"]), "n1–n3");
        assert_eq!(nodes_text(vec!["n1", "n3"]), "n1, n3");
        assert_eq!(nodes_text(vec!["a node"]), "a node");
    }

    #[test]
    fn an_observed_expiry_stands_in_for_the_lease_arithmetic() {
        // Stamped before the rival's grant, or just after it (a key expires
        // lazily, when the rival's SET touches it).
        for ns in [5, 12] {
            let all = told(&demo_2_expiring(Some(ns)));
            let overlap = all.iter().find(|e| e.anomaly == anomaly::LOCK_OVERLAP);
            let steps = texts(overlap.expect("an overlap"));
            assert!(
                steps.contains(&"worker-0's key expired on a node"),
                "{ns}: {steps:#?}"
            );
        }
        let all = told(&demo_2(true));
        let overlap = all
            .iter()
            .find(|e| e.anomaly == anomaly::LOCK_OVERLAP)
            .expect("an overlap");
        let steps = texts(overlap);
        assert!(
            steps.contains(&"worker-0's key expired on a node"),
            "{steps:#?}"
        );
        assert!(
            !steps.iter().any(|s| s.contains("lease ran out")),
            "the observer said when: {steps:#?}"
        );
        // What the stale holder did once the rival held the lock.
        assert!(steps.contains(&"worker-0 sent its write of 9, 1.00 s past its lease"));
    }

    #[test]
    fn a_run_with_nothing_found_has_nothing_to_tell() {
        let mut h = Hist::new();
        h.acquire(0, "0-1");
        h.write(0, 1);
        h.release(0, "0-1");
        h.final_read(1);
        assert!(told(&h).is_empty());
    }

    #[test]
    fn a_write_after_its_own_key_was_seen_gone_names_the_expiry() {
        // One worker, frozen past its lease with no rival: only the observer
        // shows its write went out after its key expired.
        let mut h = Hist::new();
        let t = |s: u64, n: u64| s * S + n;
        h.invoke(0, f::ACQUIRE).time(t(1, 0));
        h.ok(0, f::ACQUIRE).time(t(1, 1)).token("0-1");
        h.key(key::SET, "n1", "0-1").time(t(1, 2));
        h.invoke(0, f::READ).time(t(1, 3));
        h.ok(0, f::READ).time(t(1, 4)).value(0);
        h.key(key::EXPIRED, "n1", "0-1").time(t(3, 50));
        h.invoke(0, f::WRITE).time(t(4, 0)).value(1);
        h.ok(0, f::WRITE).time(t(4, 1)).value(1);
        h.invoke("harness", f::READ).time(t(5, 0));
        h.ok("harness", f::READ).time(t(5, 1)).value(1);
        let all = told(&h);
        let action = all
            .iter()
            .find(|e| e.anomaly == anomaly::UNSAFE_ACTION)
            .expect("the write after the expiry is unsafe");
        assert!(
            action
                .conclusion
                .starts_with("worker-0 wrote 1 at 4.00 s, after worker-0's key expired on n1"),
            "{}",
            action.conclusion
        );
    }

    #[test]
    fn a_kill_of_several_nodes_names_them_all() {
        let kill = Event::new(1, Process::nemesis(), OpType::Info, "start-kill")
            .with_value(json!({"targets": ["n1", "n2", "n3"]}));
        let back = Event::new(2, Process::nemesis(), OpType::Info, "stop-kill")
            .with_value(json!({"target": "n1"}));
        let h = History::new(vec![kill.clone(), back.clone()]);
        let story = Story::new(&h, Known::default());
        assert_eq!(
            story.describe(&kill),
            "the nemesis killed n1, n2, n3 (a restart follows)"
        );
        assert_eq!(story.describe(&back), "n1 restarted");
    }

    #[test]
    fn a_fault_cut_short_by_the_runs_end_says_so_not_that_it_ended() {
        let value = json!({"target": "n1", "healed": "run ending", "interrupted": "the run ended before the kill"});
        let stop =
            Event::new(2, Process::nemesis(), OpType::Info, "stop-failover").with_value(value);
        let h = History::new(vec![stop.clone()]);
        let story = Story::new(&h, Known::default());
        assert_eq!(
            story.describe(&stop),
            "the failover on n1 was cut short and healed: the run ended before the kill"
        );
    }

    #[test]
    fn a_restart_at_the_vote_says_who_marked_the_node_down() {
        let at = |v| {
            let value = json!({"target": "n3", "at_vote": v});
            Event::new(2, Process::nemesis(), OpType::Info, "stop-kill").with_value(value)
        };
        let marked = at(json!({"after_ms": 1210, "by": "5 of 5 nodes flag it fail"}));
        let never = at(json!({"after_ms": 6000}));
        let h = History::new(vec![marked.clone(), never.clone()]);
        let story = Story::new(&h, Known::default());
        assert_eq!(
            story.describe(&marked),
            "n3 restarted, as its replica's vote began (5 of 5 nodes flag it fail, 1.21 s after the kill)"
        );
        assert_eq!(
            story.describe(&never),
            "n3 restarted, never marked down (6.00 s after the kill): no vote began"
        );
    }
}
