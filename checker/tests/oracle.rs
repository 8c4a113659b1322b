//! The linearizability checker against an oracle that shares nothing with
//! it: the oracle reads the raw events itself, by its own small reading of
//! docs/formats.md's table ("What an op means"), and tries every order of
//! the ops of a small history. Nothing of the checker's preparation is
//! used, so a wrong reading of the history fails here as surely as a wrong
//! search.
//!
//! The histories are drawn in the shapes other tools write: releases after
//! refused acquires, double releases, releases under a token nobody
//! holds, tokenless histories, Jepsen's retired process ids (after an
//! `info` the worker comes back as id + concurrency), workers that keep
//! their id after an `info`, lost-reply acquires, and 50 or 200 processes.

use checker::history::{Event, History, OpType, Process};
use checker::{check, Promise, Settings, Validity};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use std::collections::{HashMap, HashSet};

/// Who wrote the history: lockstorm (leases) or Jepsen (no leases).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    Lockstorm,
    Jepsen,
}

// The oracle.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    /// Needs the lock free; its owner holds it after.
    Take,
    /// Needs its owner holding; the lock is free after.
    Give,
}

/// An op as the oracle places it: somewhere in `lo..=hi`, once, if at all.
#[derive(Debug)]
struct Placed {
    owner: usize,
    effect: Effect,
    lo: u64,
    hi: u64,
    must: bool,
}

/// One op of the history: its invocation and completion, if any.
struct RawOp<'a> {
    invoke: &'a Event,
    done: Option<&'a Event>,
}

fn raw_ops(events: &[Event]) -> Vec<RawOp<'_>> {
    let mut ops: Vec<RawOp> = Vec::new();
    let mut open: HashMap<&Process, usize> = HashMap::new();
    for e in events.iter().filter(|e| e.process.is_client()) {
        if e.kind == OpType::Invoke {
            open.insert(&e.process, ops.len());
            ops.push(RawOp {
                invoke: e,
                done: None,
            });
        } else if let Some(i) = open.remove(&e.process) {
            if ops[i].invoke.f == e.f {
                ops[i].done = Some(e);
            }
        }
    }
    ops
}

/// The owner's name: its token (completion's, else invocation's), else
/// its process.
fn owner_name(op: &RawOp) -> String {
    let token = op.done.and_then(|c| c.token.as_ref());
    match token.or(op.invoke.token.as_ref()) {
        Some(t) => format!("token {t}"),
        None => format!("process {}", op.invoke.process),
    }
}

/// When an uncertain op took effect by, if at all: the completion of its
/// process's next answered op (`u64::MAX`: no such op).
fn next_answer(ops: &[RawOp], i: usize) -> u64 {
    ops[i + 1..]
        .iter()
        .filter(|o| o.invoke.process == ops[i].invoke.process)
        .find_map(|o| o.done.filter(|c| c.kind != OpType::Info).map(|c| c.time))
        .unwrap_or(u64::MAX)
}

fn is_not_held(e: &Event) -> bool {
    let error = e.error.as_deref().unwrap_or("");
    error == "not-held" || error.starts_with("not-held:")
}

/// What an owner's ops so far say of its latest hold: the oracle's own
/// bookkeeping, in the order its ops were invoked.
#[derive(Clone, Copy)]
enum Was {
    /// Granted by an acquire invoked then, not released since.
    Granted(u64),
    /// Asked for then, no answer.
    Asked(u64),
    /// Released, or ended by a refusal.
    Over,
}

/// Until when an op may still take effect after another of its owner's
/// is sent: its answer; unanswered, for ever, unless its process went on
/// (its requests arrive in order, so it took effect before the next).
fn ends(ops: &[RawOp], i: usize) -> u64 {
    match ops[i].done {
        Some(c) if c.kind != OpType::Info => c.time,
        _ if next_answer(ops, i) != u64::MAX => ops[i].invoke.time,
        _ => u64::MAX,
    }
    .max(ops[i].invoke.time)
}

/// Owners with two ops at once (one invoked before another may have
/// taken effect): their refusals cannot say which hold they end.
fn overlapping(ops: &[RawOp]) -> HashSet<String> {
    let mut out = HashSet::new();
    for i in 0..ops.len() {
        for j in i + 1..ops.len() {
            let same = owner_name(&ops[i]) == owner_name(&ops[j]);
            if same && ops[j].invoke.time <= ends(ops, i) {
                out.insert(owner_name(&ops[i]));
            }
        }
    }
    out
}

/// Every op the history may have linearized, read by `writer`'s meaning.
fn placed(events: &[Event], writer: Writer) -> Vec<Placed> {
    let ops = raw_ops(events);
    let overlapping = overlapping(&ops);
    // When each owner's latest acquire not refused was invoked.
    let mut asked: HashMap<usize, u64> = HashMap::new();
    let mut owners: HashMap<String, usize> = HashMap::new();
    let mut was: HashMap<usize, Was> = HashMap::new();
    let mut out: Vec<Placed> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let n = owners.len();
        let owner = *owners.entry(owner_name(op)).or_insert(n);
        let acquire = op.invoke.f == "acquire";
        let effect = if acquire { Effect::Take } else { Effect::Give };
        let inv = op.invoke.time;
        let mut place = |effect, lo, hi, must| {
            out.push(Placed {
                owner,
                effect,
                lo,
                hi,
                must,
            })
        };
        let before = was.get(&owner).copied().unwrap_or(Was::Over);
        let outcome = op.done.map(|c| (c.kind, c));
        match outcome {
            Some((OpType::Ok, c)) => place(effect, inv, c.time.max(inv), true),
            Some((OpType::Fail, _)) if acquire => {}
            Some((OpType::Fail, c)) if writer == Writer::Lockstorm && is_not_held(c) => {
                // The lease of the hold it speaks of ran out by the refusal;
                // which hold, its owner's order cannot tell when its ops
                // overlap: then any, since its latest acquire.
                if overlapping.contains(&owner_name(op)) {
                    let from = asked.get(&owner).copied().unwrap_or(inv).min(inv);
                    place(Effect::Give, from, c.time, false);
                } else {
                    match before {
                        Was::Granted(from) => place(Effect::Give, from, c.time, true),
                        Was::Asked(from) => place(Effect::Give, from, c.time, false),
                        Was::Over => {}
                    }
                }
                was.insert(owner, Was::Over);
            }
            // Never ran: the key runs out some time after the refusal.
            Some((OpType::Fail, c)) if writer == Writer::Lockstorm => {
                place(Effect::Give, c.time, u64::MAX, false)
            }
            Some((OpType::Fail, _)) => {}
            _ => place(effect, inv, next_answer(&ops, i), false),
        }
        let granted = matches!(outcome, Some((OpType::Ok, _)));
        let refused = matches!(outcome, Some((OpType::Fail, _)));
        if acquire && !refused {
            asked.insert(owner, inv);
        }
        match (acquire, granted, before) {
            (true, true, _) => was.insert(owner, Was::Granted(inv)),
            (true, false, Was::Granted(_)) => None,
            (true, false, _) if outcome.is_none_or(|(k, _)| k != OpType::Fail) => {
                was.insert(owner, Was::Asked(inv))
            }
            (false, true, _) => was.insert(owner, Was::Over),
            _ => None,
        };
    }
    out
}

/// Whether some order of the ops, each at a point in its window, points
/// never going back, fits the mutex: every `must` op placed.
fn linearizable(ops: &[Placed]) -> bool {
    assert!(ops.len() <= 30, "the oracle is for small histories");
    let mut seen = HashSet::new();
    place_next(ops, 0, None, 0, &mut seen)
}

fn place_next(
    ops: &[Placed],
    done: u32,
    holder: Option<usize>,
    now: u64,
    seen: &mut HashSet<(u32, Option<usize>, u64)>,
) -> bool {
    let left = |j: usize| done & (1 << j) == 0;
    if (0..ops.len()).all(|j| !left(j) || !ops[j].must) {
        return true;
    }
    if !seen.insert((done, holder, now)) {
        return false;
    }
    for (i, op) in ops.iter().enumerate().filter(|&(i, _)| left(i)) {
        let at = now.max(op.lo);
        let late = |j: usize| j != i && left(j) && ops[j].must && ops[j].hi < at;
        if at > op.hi || (0..ops.len()).any(late) {
            continue;
        }
        let next = match op.effect {
            Effect::Take if holder.is_none() => Some(op.owner),
            Effect::Give if holder == Some(op.owner) => None,
            _ => continue,
        };
        if place_next(ops, done | 1 << i, next, at, seen) {
            return true;
        }
    }
    false
}

// The histories.

#[derive(Clone, Debug)]
struct Shape {
    /// Jepsen's concurrency: the worker slots; a retired id comes back as
    /// id + this.
    concurrency: u64,
    tokens: bool,
    /// After an `info`, the worker keeps its process id.
    keep_id: bool,
}

#[derive(Clone, Debug)]
struct Step {
    /// Complete an op in flight rather than invoke one, if there is one.
    complete: bool,
    pick: usize,
    release: bool,
    /// Which token a release names: 0–4 its own latest, 5 one of another
    /// op, 6 one nobody acquired.
    token: u8,
    outcome: u8,
    gap: u64,
}

fn shapes() -> impl Strategy<Value = Shape> {
    let concurrency = prop_oneof![1..=4u64, Just(50), Just(200)];
    (concurrency, any::<bool>(), any::<bool>()).prop_map(|(concurrency, tokens, keep_id)| Shape {
        concurrency,
        tokens,
        keep_id,
    })
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        any::<bool>(),
        any::<usize>(),
        any::<bool>(),
        0..7u8,
        0..8u8,
        0..3u64,
    );
    let step = step.prop_map(|(complete, pick, release, token, outcome, gap)| Step {
        complete,
        pick,
        release,
        token,
        outcome,
        gap,
    });
    prop::collection::vec(step, 0..40)
}

/// A worker slot: its process id now, its op in flight, its latest token.
#[derive(Clone, Default)]
struct Slot {
    process: u64,
    in_flight: Option<(&'static str, Option<String>)>,
    token: Option<String>,
    /// When its latest event happened (its next comes later).
    last: u64,
}

/// Up to 12 ops drawn by `steps`; ops still in flight at the end never
/// complete.
fn history(shape: &Shape, steps: &[Step]) -> History {
    let mut slots: Vec<Slot> = (0..shape.concurrency)
        .map(|w| Slot {
            process: w,
            ..Slot::default()
        })
        .collect();
    let (mut events, mut time, mut ops, mut tokens) = (Vec::new(), 0, 0, 0);
    for s in steps {
        time += s.gap * 10;
        // A worker's own events never share a moment (times are ns): their
        // order is real time's. Different workers' may.
        let busy: Vec<usize> = (0..slots.len())
            .filter(|&w| slots[w].in_flight.is_some())
            .collect();
        let idle: Vec<usize> = (0..slots.len())
            .filter(|&w| slots[w].in_flight.is_none())
            .collect();
        let event = if (s.complete || ops == 12 || idle.is_empty()) && !busy.is_empty() {
            let slot = &mut slots[busy[s.pick % busy.len()]];
            time = time.max(slot.last + 1);
            slot.last = time;
            complete(slot, s, shape, time)
        } else if ops < 12 && !idle.is_empty() {
            ops += 1;
            let slot = &mut slots[idle[s.pick % idle.len()]];
            time = time.max(slot.last + 1);
            slot.last = time;
            let f = if s.release { "release" } else { "acquire" };
            let token = match (shape.tokens, f, s.token) {
                (false, _, _) => None,
                (true, "acquire", _) | (true, _, 6) => {
                    tokens += 1;
                    Some(format!("t{tokens}"))
                }
                (true, _, 5) => Some(format!("t{}", 1 + s.pick % tokens.max(1))),
                (true, _, _) => slot.token.clone(),
            };
            if f == "acquire" {
                slot.token = token.clone();
            }
            slot.in_flight = Some((f, token.clone()));
            let mut e = Event::new(time, Process::Client(slot.process), OpType::Invoke, f);
            e.token = token;
            e
        } else {
            continue;
        };
        let mut event = event;
        event.index = events.len() as u64;
        events.push(event);
    }
    History::new(events)
}

/// Completes `slot`'s op as `s.outcome` says.
fn complete(slot: &mut Slot, s: &Step, shape: &Shape, time: u64) -> Event {
    let (f, token) = slot.in_flight.take().expect("an op in flight");
    let (kind, error) = match (f, s.outcome) {
        (_, 0..=2) => (OpType::Ok, None),
        ("acquire", 3 | 4) => (OpType::Fail, Some("lock-busy")),
        ("release", 3..=5) => (OpType::Fail, Some("not-held")),
        ("release", 6) => (OpType::Fail, Some("connection-refused")),
        _ => (OpType::Info, Some("timeout")),
    };
    let mut e = Event::new(time, Process::Client(slot.process), kind, f);
    e.token = token;
    e.error = error.map(String::from);
    if kind == OpType::Info && !shape.keep_id {
        slot.process += shape.concurrency;
    }
    e
}

// The property.

fn settings(writer: Writer) -> Settings {
    let s = Settings::new(Promise::MutualExclusion);
    match writer {
        Writer::Lockstorm => s,
        Writer::Jepsen => s.knossos_fail(),
    }
}

fn agrees(shape: &Shape, steps: &[Step]) -> Result<(), TestCaseError> {
    let h = history(shape, steps);
    for writer in [Writer::Lockstorm, Writer::Jepsen] {
        let expected = linearizable(&placed(&h.events, writer));
        let results = check(&h, settings(writer));
        let got = results.checkers["nonlinearizable"].valid;
        let found = &results.anomalies["nonlinearizable"];
        let shown: Vec<String> = h.events.iter().map(|e| format!("{e:?}")).collect();
        let why = format!(
            "{writer:?}: oracle {expected}, checker {got:?} {found:?}\n{}",
            shown.join("\n")
        );
        prop_assert_ne!(got, Validity::Unknown, "{}", why);
        prop_assert_eq!(got == Validity::True, expected, "{}", why);
        prop_assert_eq!(found.count == 0, expected, "{}", why);
    }
    Ok(())
}

/// 30 000 histories from a fixed seed, each judged as both writers'.
fn run(seed: u64) {
    let config = Config {
        cases: 30_000,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&(shapes(), steps()), |(shape, steps)| {
        agrees(&shape, &steps)
    });
    if let Err(e) = result {
        panic!("seed {seed}: {e}");
    }
}

#[test]
fn agrees_with_an_oracle_of_its_own_seed_1() {
    run(1);
}

#[test]
fn agrees_with_an_oracle_of_its_own_seed_2() {
    run(2);
}

#[test]
fn agrees_with_an_oracle_of_its_own_seed_3() {
    run(3);
}

/// The oracle itself, on histories whose answer is known by hand.
#[test]
fn the_oracle_reads_the_table() {
    let ev = |t, p, kind, f: &str, error: Option<&str>| {
        let mut e = Event::new(t, Process::Client(p), kind, f);
        e.error = error.map(String::from);
        e
    };
    let (inv, ok, fail) = (OpType::Invoke, OpType::Ok, OpType::Fail);
    let double = vec![
        ev(1, 0, inv, "acquire", None),
        ev(2, 0, ok, "acquire", None),
        ev(3, 0, inv, "release", None),
        ev(4, 0, ok, "release", None),
        ev(5, 0, inv, "release", None),
        ev(6, 0, fail, "release", Some("not-held")),
    ];
    assert!(linearizable(&placed(&double, Writer::Lockstorm)));
    assert!(linearizable(&placed(&double, Writer::Jepsen)));
    let mut twice = double.clone();
    twice[5].kind = OpType::Ok;
    twice[5].error = None;
    assert!(!linearizable(&placed(&twice, Writer::Lockstorm)));
    // A refusal inside a hold lets another in (a lease) only in lockstorm's.
    let lapsed = vec![
        ev(1, 0, inv, "acquire", None),
        ev(2, 0, ok, "acquire", None),
        ev(3, 0, inv, "release", None),
        ev(4, 0, fail, "release", Some("not-held")),
        ev(5, 1, inv, "acquire", None),
        ev(6, 1, ok, "acquire", None),
    ];
    assert!(linearizable(&placed(&lapsed, Writer::Lockstorm)));
    assert!(!linearizable(&placed(&lapsed, Writer::Jepsen)));
}
