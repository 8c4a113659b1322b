//! Checking a whole history: every registered checker, then the verdict.
//! [`check`] takes a history in memory, [`check_jsonl`] and [`check_edn`]
//! one streamed from a file (one body, [`check_streamed`], reading either);
//! all feed every checker the events in time order and end in
//! [`assemble`], so they give the same results for the same events.

use crate::feed::{Pairing, Reorder};
use crate::finding::{Anomaly, Finding, Validity};
use crate::history::edn::read_edn;
use crate::history::read_jsonl;
use crate::history::{self, Event, History};
use crate::pass::{OnePass, PassFindings};
use crate::registry::{CheckerEntry, Fed, CHECKERS};
use crate::settings::Settings;
use crate::verdict::{self, Results};
use crate::{cause, crashes, faults, Whole};
use std::collections::BTreeMap;

/// Checks `history` against `settings` (a [`Promise`](crate::settings::Promise) will do:
/// then `deadlock` is not checked). Every anomaly looked for is reported,
/// with count 0 when absent.
pub fn check(history: &History, settings: impl Into<Settings>) -> Results {
    let settings = settings.into();
    let mut pass = OnePass::new(&settings);
    let mut pairing = Pairing::default();
    let mut wholes = whole_checkers(&settings);
    for e in history.in_time_order() {
        pairing.feed(e, &mut pass);
        wholes.iter_mut().for_each(|(_, w)| w.keep(e));
    }
    let whole = wholes.into_iter().map(|(c, w)| (c, w.finish())).collect();
    let notes: Vec<String> = unmatched_note(&pairing).into_iter().collect();
    assemble(pass.finish(), whole, history.truncated, settings, notes)
}

/// Each whole-history checker, ready to be fed.
fn whole_checkers(settings: &Settings) -> Vec<(&'static CheckerEntry, Box<dyn Whole>)> {
    CHECKERS
        .iter()
        .filter_map(|c| match c.fed {
            Fed::Whole(new) => Some((c, new(settings))),
            Fed::Events(_) => None,
        })
        .collect()
}

/// How far out of time order a streamed history's events may arrive and
/// still be checked in order: until the newest event seen is `ns` past
/// them, and at most `events` wait at once (the earliest goes on when one
/// more arrives). A bare number is a window in time alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub ns: u64,
    pub events: usize,
}

impl From<u64> for Window {
    fn from(ns: u64) -> Self {
        Window {
            ns,
            events: usize::MAX,
        }
    }
}

/// How a streamed check went: what it needed to hold at most.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    pub events: u64,
    /// Most events waiting at once in the reorder window.
    pub peak_waiting: usize,
    /// Events that arrived later than the window and were checked out of order.
    pub late: u64,
    /// How far behind the newest event before it an event arrived, at most
    /// (ns): a window of this much time alone puts the file in order.
    pub lateness_ns: u64,
    /// Why a checker could not decide from what it kept as the history
    /// streamed past, if one could not: check the history whole.
    pub whole_needed: Option<String>,
}

/// Checks a JSONL history as it is read, without holding it: every checker
/// sees each event once, put back into time order within `window`. The
/// whole-history checker (`nonlinearizable`), run when `linearizability_too`
/// asks for it, keeps a compact record of the lock events since the last
/// place it could settle; when what it let go of leaves it unable to decide,
/// [`StreamStats::whole_needed`] says why, and the caller checks the history
/// whole ([`check`]).
pub fn check_jsonl(
    reader: impl std::io::BufRead,
    settings: impl Into<Settings>,
    window: impl Into<Window>,
    linearizability_too: bool,
) -> Result<(Results, StreamStats), history::ParseError> {
    let read = |each: &mut dyn FnMut(Event)| {
        let mut truncated = false;
        read_jsonl(reader, &mut truncated, each).map(|()| truncated)
    };
    check_streamed(read, settings.into(), window.into(), linearizability_too)
}

/// Checks a Jepsen EDN history as it is read ([`read_edn`]), as
/// [`check_jsonl`] does a JSONL one, linearizability included. `settings`
/// are used as given: Jepsen's meaning of `fail` is the caller's to ask for
/// ([`Settings::knossos_fail`]). A cut-off EDN file is an error, never a
/// truncated history.
pub fn check_edn(
    reader: impl std::io::BufRead,
    settings: impl Into<Settings>,
    window: impl Into<Window>,
) -> Result<(Results, StreamStats), history::ParseError> {
    let read = |each: &mut dyn FnMut(Event)| read_edn(reader, each).map(|()| false);
    check_streamed(read, settings.into(), window.into(), true)
}

/// The streamed check: `read` hands every event of the file, in file order,
/// to the function it is given, and says whether the file was truncated.
fn check_streamed(
    read: impl FnOnce(&mut dyn FnMut(Event)) -> Result<bool, history::ParseError>,
    settings: Settings,
    window: Window,
    linearizability_too: bool,
) -> Result<(Results, StreamStats), history::ParseError> {
    let mut pass = OnePass::new(&settings);
    let mut pairing = Pairing::default();
    let mut reorder = Reorder::new(window.ns).holding_at_most(window.events);
    let mut wholes = match linearizability_too {
        true => whole_checkers(&settings),
        false => Vec::new(),
    };
    wholes.iter_mut().for_each(|(_, w)| w.forget_settled());
    let mut stream = StreamStats::default();
    let truncated = {
        let mut sink = |e: Event| {
            pairing.feed(&e, &mut pass);
            wholes.iter_mut().for_each(|(_, w)| w.keep(&e));
        };
        let truncated = read(&mut |e| {
            stream.events += 1;
            reorder.push(e, &mut sink);
        })?;
        reorder.drain(&mut sink);
        truncated
    };
    stream.peak_waiting = reorder.peak;
    stream.late = reorder.late;
    stream.lateness_ns = reorder.lateness;
    let mut whole = Vec::new();
    for (c, w) in wholes {
        match w.finish_streamed() {
            Ok(finding) => whole.push((c, finding)),
            Err(why) => {
                stream.whole_needed.get_or_insert(why);
                whole.push((c, c.not_checked()));
            }
        }
    }
    if !linearizability_too {
        let skipped = CHECKERS.iter().filter(|c| matches!(c.fed, Fed::Whole(_)));
        whole.extend(skipped.map(|c| (c, c.not_checked())));
    }
    let notes: Vec<String> = unmatched_note(&pairing).into_iter().collect();
    let mut results = assemble(pass.finish(), whole, truncated, settings, notes);
    if stream.late > 0 {
        note_late(&mut results, stream.late, window);
    }
    Ok((results, stream))
}

/// `late` events were checked out of order: what was found so may be an
/// artefact of the order, so a verdict must rest on a named anomaly, or be
/// unknown.
fn note_late(results: &mut Results, late: u64, window: Window) {
    let bound = match window.events {
        usize::MAX => format!("{} ms", window.ns / 1_000_000),
        n => format!("{} ms or {n} events", window.ns / 1_000_000),
    };
    results.notes.push(format!(
        "{late} event(s) arrived more than {bound} out of time order and were checked out of order",
    ));
    let named = results.anomalies.values().any(|a| a.found());
    results.valid = match named {
        true => results.valid.and(Validity::Unknown),
        false => Validity::Unknown,
    };
}

/// Builds `Results` from every checker's finding: the event-fed ones from
/// the pass, then `whole` (the whole-history ones), both in registry order.
/// Notes come in that order too, then the run's own (`extra_notes`, faults),
/// then the verdict's.
fn assemble(
    pass: PassFindings,
    whole: Vec<(&'static CheckerEntry, Finding)>,
    truncated: bool,
    settings: Settings,
    extra_notes: Vec<String>,
) -> Results {
    let promise = settings.promise;
    let PassFindings {
        checkers: event_fed,
        stats,
        faults,
        crashes,
        causes,
    } = pass;
    let findings = event_fed.into_iter().chain(whole);

    let mut checkers = BTreeMap::new();
    let mut anomalies: BTreeMap<String, Anomaly> = BTreeMap::new();
    let mut notes = Vec::new();
    let mut not_asked = Vec::new();
    let mut incidents = causes.incidents();
    for (c, finding) in findings {
        if finding.not_asked {
            not_asked.push(c.name);
        }
        checkers.insert(c.name.to_string(), finding.report);
        for (anomaly, mut a) in finding.anomalies {
            cause::attribute(anomaly, &mut a, &causes, &mut incidents);
            anomalies.insert(anomaly.to_string(), a);
        }
        notes.extend(finding.notes);
    }
    // The run's own record: did it test what it claims, and does the
    // history agree with itself? If not, nothing found proves anything.
    let (faults, fault_notes) = faults.finish();
    let (crashes, crash_notes) = crashes.finish();
    let untrusted = faults.valid == Validity::Unknown || crashes.valid == Validity::Unknown;
    checkers.insert(faults::NAME.to_string(), faults);
    checkers.insert(crashes::NAME.to_string(), crashes);

    let mut stats = stats;
    (stats.stalls, stats.longest_stall_ms) = causes.unplanned();
    notes.extend(causes.note());
    notes.extend(extra_notes);
    notes.extend(fault_notes);
    notes.extend(crash_notes);
    let mut valid = verdict::decide(
        promise, &anomalies, &checkers, &not_asked, truncated, &mut notes,
    );
    if untrusted {
        // An unverified fault means the run did not test what it claims; a
        // crash that cannot be believed may hide or invent a hold. A definite
        // failure found under either is not evidence: unknown, whatever else
        // was found (the counts stay in the results).
        if valid == Validity::False {
            notes.push(
                "anomalies were found, but the run cannot show what it tested: unknown, not invalid"
                    .into(),
            );
        }
        valid = Validity::Unknown;
    }
    Results {
        valid,
        promise,
        anomalies,
        checkers,
        stats,
        notes,
        incidents,
    }
}

/// Completions the pairing could not match, if any, as a note.
fn unmatched_note(pairing: &Pairing) -> Option<String> {
    (pairing.unmatched() > 0).then(|| {
        format!(
            "{} client completion(s) had no invocation before them and were skipped",
            pairing.unmatched()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;
    use crate::settings::Promise;
    use crate::{anomaly, counter, deadlock, fence, mutex};
    use serde_json::json;

    /// A long history is searched in pieces as it streams; when a worker
    /// it took for gone acts again, the caller is told to check it whole,
    /// and the whole check decides.
    #[test]
    fn a_streamed_check_says_when_the_history_must_be_checked_whole() {
        let long = crate::generate::valid_history(7, 5, 12_000, 20);
        let back = crate::generate::with_lost_worker_back(&long).expect("a lost reply");
        let jsonl = |h: &History| -> Vec<u8> {
            let lines = h.events.iter().map(|e| serde_json::to_string(e).unwrap());
            lines.collect::<Vec<_>>().join("\n").into_bytes()
        };
        let mode = Promise::MutualExclusion;
        let (results, stream) = check_jsonl(&jsonl(&long)[..], mode, 1_000_000u64, true).unwrap();
        assert_eq!((results.valid, stream.whole_needed), (Validity::True, None));
        let (_, stream) = check_jsonl(&jsonl(&back)[..], mode, 1_000_000u64, true).unwrap();
        let why = stream.whole_needed.expect("the pieces cannot decide");
        assert!(why.contains("acted again after a cut"), "{why}");
        assert_eq!(check(&back, mode).valid, Validity::True);
    }

    /// `h` as a Jepsen EDN history: in one vector, each op over two lines.
    fn edn(h: &History) -> Vec<u8> {
        fn value(v: &serde_json::Value) -> String {
            use serde_json::Value;
            match v {
                Value::Null => "nil".into(),
                Value::Array(items) => format!(
                    "[{}]",
                    items.iter().map(value).collect::<Vec<_>>().join(" ")
                ),
                Value::Object(m) => {
                    let pairs = m.iter().map(|(k, v)| format!("{} {}", json!(k), value(v)));
                    format!("{{{}}}", pairs.collect::<Vec<_>>().join(", "))
                }
                other => other.to_string(),
            }
        }
        let mut text = String::from("[");
        for e in &h.events {
            let process = match &e.process {
                history::Process::Client(id) => id.to_string(),
                history::Process::Named(name) => format!(":{name}"),
            };
            let kind = serde_json::to_value(e.kind).unwrap();
            text += &format!(
                "{{:type :{}, :f :{}, :process {process}, :time {}, :index {}\n  :value {}",
                kind.as_str().unwrap(),
                e.f,
                e.time,
                e.index,
                value(&e.value)
            );
            let strings = [
                (":token", &e.token),
                (":error", &e.error),
                (":node", &e.node),
            ];
            for (key, v) in strings {
                if let Some(v) = v {
                    text += &format!(", {key} {}", json!(v));
                }
            }
            if let Some(fence) = e.fence {
                text += &format!(", :fence {fence}");
            }
            text += "}\n";
        }
        text += "]\n";
        text.into_bytes()
    }

    /// Streamed from EDN, a history checks as it does collected in memory,
    /// and a long one says, as JSONL does, when it must be checked whole.
    #[test]
    fn a_streamed_edn_history_checks_as_the_history_in_memory_does() {
        let knossos = |p| settings(p).knossos_fail();
        for (h, promise) in [
            (clean(), Promise::MutualExclusion),
            (paused_holder(false), Promise::MutualExclusion),
            (paused_holder(true), Promise::DataSafety),
            (acts_after_its_crash(None), Promise::MutualExclusion),
        ] {
            let text = edn(&h.build());
            let read = crate::from_edn(&text[..]).unwrap();
            assert_eq!(read.events, h.build().events);
            let (streamed, stats) = check_edn(&text[..], knossos(promise), 1_000_000u64).unwrap();
            assert_eq!((stats.events, stats.late), (read.events.len() as u64, 0));
            assert_eq!(
                serde_json::to_value(streamed).unwrap(),
                serde_json::to_value(check(&read, knossos(promise))).unwrap()
            );
        }
        let long = crate::generate::valid_history(7, 5, 12_000, 20);
        let back = crate::generate::with_lost_worker_back(&long).expect("a lost reply");
        let mode = Settings::new(Promise::MutualExclusion).knossos_fail();
        let (results, stream) = check_edn(&edn(&long)[..], mode, 1_000_000u64).unwrap();
        assert_eq!((results.valid, stream.whole_needed), (Validity::True, None));
        let (_, stream) = check_edn(&edn(&back)[..], mode, 1_000_000u64).unwrap();
        assert!(stream.whole_needed.is_some());
        // A cut-off file is an error, not a truncated history.
        let text = edn(&clean().build());
        let mid = text.len() / 2;
        let cut = &text[..mid + text[mid..].windows(3).position(|w| w == b":f ").unwrap()];
        let err = check_edn(cut, mode, 1_000_000u64).unwrap_err().to_string();
        assert!(err.contains("truncated file?"), "{err}");
    }

    /// Every anomaly's name, in the order a reader scans for them.
    fn all() -> Vec<&'static str> {
        crate::registry::anomalies()
            .iter()
            .map(|a| a.name)
            .collect()
    }

    /// Two workers taking turns, with fences; one acquire times out and the
    /// worker continues as process 11.
    fn clean() -> Hist {
        let mut h = Hist::new();
        h.final_read(0);
        h.acquire(1, "a").fence(1);
        h.read(1, 0).fence(1);
        h.write(1, 1).fence(1);
        h.release(1, "a");
        h.invoke(2, "acquire");
        h.info(2, "acquire").error("timeout");
        h.release(12, "lost"); // releasing whatever the timed-out acquire took
        h.acquire(1, "b").fence(3);
        h.read(1, 1).fence(3);
        h.write(1, 2).fence(3);
        h.release(1, "b");
        h.final_read(2);
        h
    }

    /// Process 1 is paused past its TTL; 2 acquires, then 1 wakes and writes.
    fn paused_holder(fenced: bool) -> Hist {
        let mut h = Hist::new();
        h.acquire(1, "a").fence(1);
        h.read(1, 0).fence(1);
        h.nemesis("start-pause");
        h.sleep(1_000);
        h.acquire(2, "b").fence(2);
        h.read(2, 0).fence(2);
        h.write(2, 1).fence(2);
        h.release(2, "b");
        h.nemesis("stop-pause");
        h.invoke(1, "write").value(1).fence(1);
        if fenced {
            h.fail(1, "write").fence(1).error("stale-fence");
        } else {
            h.ok(1, "write").value(1).fence(1);
        }
        h.invoke(1, "release").token("a");
        h.fail(1, "release").token("a").error("not-held");
        h.final_read(1);
        h
    }

    /// A check that knows the run's liveness threshold.
    fn settings(promise: Promise) -> Settings {
        Settings::new(promise).deadlock_after(std::time::Duration::from_secs(7))
    }

    #[test]
    fn a_clean_run_is_valid_and_lists_every_anomaly_at_zero() {
        let r = check(&clean().build(), settings(Promise::MutualExclusion));
        assert_eq!(r.valid, Validity::True, "{r:#?}");
        for name in all() {
            assert_eq!(r.anomalies[name].count, 0, "{name}");
        }
        assert!(r.checkers.values().all(|c| c.valid == Validity::True));
        let counter = r.counter().unwrap();
        assert_eq!((counter.acknowledged, counter.final_value), (2, Some(2)));
        assert_eq!(r.stats.acquired, 2);
        assert!(r.notes.is_empty(), "{:?}", r.notes);
    }

    /// A transaction lock's history: four increments committed, then
    /// process 2 writes 5 and dies before its release (the `COMMIT`)
    /// completes, so its write was rolled back; process 11 reads 4, writes 5
    /// again and commits. The counter ends at 5.
    fn a_holder_dies_before_its_commit() -> Hist {
        let mut h = Hist::new();
        h.final_read(0);
        for v in 1..=4 {
            h.acquire(1, &format!("t{v}"));
            h.read(1, v - 1);
            h.write(1, v);
            h.release(1, &format!("t{v}"));
        }
        h.acquire(2, "t5");
        h.read(2, 4);
        h.write(2, 5);
        h.invoke(2, "release").token("t5");
        h.crash(2).token("t5");
        h.acquire(11, "t6");
        h.read(11, 4);
        h.write(11, 5);
        h.release(11, "t6");
        h.final_read(5);
        h
    }

    #[test]
    fn a_write_rolled_back_with_its_dead_holders_transaction_is_no_lost_update() {
        let h = a_holder_dies_before_its_commit().build();
        let committing = Settings::new(Promise::MutualExclusion).writes_commit_with_release(true);
        let r = check(&h, committing);
        assert_eq!(r.anomalies[anomaly::LOST_UPDATE].count, 0, "{r:#?}");
        let counter = r.counter().unwrap();
        assert_eq!(counter.valid, Validity::True);
        // The dead holder's write may have committed: possible, not acknowledged.
        assert_eq!((counter.acknowledged, counter.possible), (5, 6));
        assert_eq!(r.valid, Validity::True, "{:?}", r.notes);

        // Counted at its ok, the rolled-back write is an increment lost,
        // and 5 written twice.
        let r = check(&h, Promise::MutualExclusion);
        assert_eq!(r.anomalies[anomaly::LOST_UPDATE].count, 1, "{r:#?}");
        assert_eq!(r.counter().unwrap().valid, Validity::False);
        assert_eq!(r.valid, Validity::False);
    }

    #[test]
    fn without_a_threshold_deadlock_is_not_checked_and_says_so_but_decides_nothing() {
        let r = check(&clean().build(), Promise::MutualExclusion);
        assert_eq!(r.valid, Validity::True, "{r:#?}");
        let deadlock = &r.checkers[deadlock::NAME];
        assert_eq!(deadlock.valid, Validity::Unknown);
        assert!(deadlock.details.contains_key("not_checked"), "{deadlock:?}");
        assert_eq!(
            r.notes,
            ["deadlock not checked: no threshold was given, and the history does not record the lock's TTL"]
        );
        let with = check(&clean().build(), settings(Promise::MutualExclusion));
        assert_eq!(with.checkers[deadlock::NAME].details["threshold_ms"], 7_000);
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_lock_stuck_after_its_node_died_by_itself_is_put_down_to_the_death() {
        let mut h = Hist::new();
        h.invoke(1, "acquire").time(S);
        h.ok(1, "acquire").token("a").time(S);
        h.ungranted(S, 13 * S);
        h.push_crash_of_node("n1", 2 * S);
        let r = check(&h.build(), settings(Promise::MutualExclusion));
        assert_eq!(
            r.anomalies[anomaly::DEADLOCK].causes["node-died"],
            1,
            "{r:?}"
        );
    }

    #[test]
    fn a_deadlock_after_a_crash_is_put_down_to_the_crash_and_fails_every_promise() {
        let mut h = Hist::new();
        h.invoke(1, "acquire").time(S);
        h.nemesis("start-crash").time(S + 1);
        h.info(1, "acquire").time(S + 2).error("crashed");
        h.crash(1).time(S + 3);
        h.nemesis("stop-crash").time(S + 4);
        h.ungranted(2 * S, 20 * S);
        h.final_read(0);
        for promise in [Promise::MutualExclusion, Promise::DataSafety] {
            let r = check(&h.build(), settings(promise));
            let a = &r.anomalies[anomaly::DEADLOCK];
            assert_eq!(a.count, 1, "{a:?}");
            assert_eq!(a.example_causes, ["crash"], "{a:?}");
            assert_eq!(r.valid, Validity::False, "{promise}");
        }
    }

    #[test]
    fn an_unverified_fault_makes_even_an_invalid_run_unknown_keeping_its_counts() {
        let mut h = paused_holder(false);
        h.nemesis("start-kill")
            .value(json!({"unverified": "n1 answered by a server with pid 99, not ours"}));
        let r = check(&h.build(), settings(Promise::MutualExclusion));
        assert_eq!(r.valid, Validity::Unknown, "{:?}", r.notes);
        assert_eq!(r.anomalies[anomaly::LOCK_OVERLAP].count, 1);
        assert!(r.notes.iter().any(|n| n.contains("fault not verified")));
        assert!(r.notes.iter().any(|n| n.contains("unknown, not invalid")));
    }

    /// Process 0 holds, "crashes", then writes and releases while process 1
    /// holds: the crash hides the overlap, so the history cannot be believed.
    fn acts_after_its_crash(crash_by: Option<u64>) -> Hist {
        let s = 500_000_000;
        let mut h = Hist::new();
        h.acquire(0, "a");
        h.sleep(3 * s);
        match crash_by {
            None => h.crash(0).token("a"),
            Some(p) => h.info(p, history::f::CRASH).value(json!({"process": 0})),
        };
        h.sleep(s);
        h.acquire(1, "b");
        h.sleep(s);
        h.write(0, 1);
        h.release(0, "a");
        h.sleep(s);
        h.release(1, "b");
        h.final_read(1);
        h
    }

    #[test]
    fn ops_after_a_crash_or_a_crash_from_a_client_leave_the_verdict_unknown() {
        for crash_by in [None, Some(1)] {
            let r = check(
                &acts_after_its_crash(crash_by).build(),
                Promise::MutualExclusion,
            );
            assert_eq!(r.valid, Validity::Unknown, "{crash_by:?}: {:?}", r.notes);
            assert!(
                r.notes.iter().any(|n| n.contains("contradicts itself")),
                "{:?}",
                r.notes
            );
        }
    }

    #[test]
    fn a_truncated_history_cannot_be_declared_valid() {
        let mut h = clean();
        h.truncated();
        let r = check(&h.build(), Promise::MutualExclusion);
        assert_eq!(r.valid, Validity::Unknown);
        assert!(
            r.notes.iter().any(|n| n.contains("truncated")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn a_missing_final_read_leaves_the_verdict_unknown() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.write(1, 1);
        h.release(1, "a");
        for promise in [Promise::MutualExclusion, Promise::DataSafety] {
            let r = check(&h.build(), promise);
            assert_eq!(r.valid, Validity::Unknown, "{promise}");
            assert_eq!(r.checkers[counter::NAME].valid, Validity::Unknown);
        }
    }

    #[test]
    fn an_unfenced_stale_holder_breaks_mutual_exclusion() {
        let h = paused_holder(false);
        let r = check(&h.build(), Promise::MutualExclusion);
        assert_eq!(r.valid, Validity::False);
        assert_eq!(
            r.anomalies[anomaly::LOCK_OVERLAP].examples,
            vec![vec![1, 6]]
        );
        assert_eq!(
            r.anomalies[anomaly::UNSAFE_ACTION].examples,
            vec![vec![15, 6]]
        );
        // Both writes wrote 1.
        assert_eq!(r.anomalies[anomaly::LOST_UPDATE].count, 1);
        assert_eq!(r.checkers[mutex::NAME].valid, Validity::False);
        assert_eq!(r.stats.first_fault_time, Some(h.build().events[4].time));
        assert_eq!(r.stats.faults, 1);
        // The first counted anomaly, and how long after the fault it came.
        let first = r.first_anomaly_time().expect("an anomaly");
        assert_eq!(r.detection_ns(), Some(first - h.build().events[4].time));
        assert!(r.counted_anomalies() >= 2, "{:?}", r.anomalies);
        // Every occurrence is put down to the pause, the lost update too.
        for (name, a) in r.anomalies.iter().filter(|(_, a)| a.count > 0) {
            assert_eq!(a.causes.get("pause"), Some(&a.count), "{name}: {a:?}");
            assert_eq!(a.example_causes.len(), a.examples.len(), "{name}");
            assert!(a.example_causes.iter().all(|c| c == "pause"), "{name}");
        }
    }

    /// `paused_holder` as the observer saw it on node n1: a's key set,
    /// expired during the pause, then b's set and deleted by b's release.
    fn observed_paused_holder() -> History {
        use crate::history::key;
        let mut h = Hist::new();
        h.acquire(1, "a").fence(1);
        h.key(key::SET, "n1", "a");
        h.read(1, 0).fence(1);
        h.nemesis("start-pause");
        h.sleep(1_000);
        h.key(key::EXPIRED, "n1", "a");
        h.acquire(2, "b").fence(2);
        h.key(key::SET, "n1", "b");
        h.read(2, 0).fence(2);
        h.write(2, 1).fence(2);
        h.release(2, "b");
        h.key(key::DELETED, "n1", "b");
        h.nemesis("stop-pause");
        h.invoke(1, "write").value(1).fence(1);
        h.ok(1, "write").value(1).fence(1);
        h.invoke(1, "release").token("a");
        h.fail(1, "release").token("a").error("not-held");
        h.final_read(1);
        h.build()
    }

    #[test]
    fn the_observer_events_change_nothing_but_the_labels_they_sharpen() {
        let observed = observed_paused_holder();
        let mut bare = observed.clone();
        bare.events.retain(|e| !e.process.is_observer());
        let settings = || settings(Promise::MutualExclusion);
        let with = check(&observed, settings());
        let without = check(&bare, settings());
        let overlap = &with.anomalies[anomaly::LOCK_OVERLAP];
        assert_eq!(overlap.labels, [(crate::LEASE_EXPIRED.into(), 1)].into());
        assert_eq!(overlap.example_labels, [Some(crate::LEASE_EXPIRED.into())]);
        // The stale write is already unsafe by b's grant: counted once.
        assert_eq!(with.anomalies[anomaly::UNSAFE_ACTION].count, 1);
        let mut with = serde_json::to_value(&with).unwrap();
        let labelled = &mut with["anomalies"][anomaly::LOCK_OVERLAP];
        let labelled = labelled.as_object_mut().unwrap();
        labelled.remove("labels");
        labelled.remove("example_labels");
        assert_eq!(with, serde_json::to_value(&without).unwrap());
        // And streamed as a file, the same.
        let jsonl: Vec<u8> = observed
            .events
            .iter()
            .flat_map(|e| serde_json::to_vec(e).unwrap().into_iter().chain([b'\n']))
            .collect();
        let (streamed, _) = check_jsonl(&jsonl[..], settings(), 1_000_000u64, true).unwrap();
        assert_eq!(
            serde_json::to_value(&streamed).unwrap()["anomalies"],
            serde_json::to_value(check(&observed, settings())).unwrap()["anomalies"]
        );
    }

    #[test]
    fn a_fenced_overlap_is_reported_but_keeps_data_safety() {
        let r = check(&paused_holder(true).build(), Promise::DataSafety);
        assert_eq!(r.anomalies[anomaly::LOCK_OVERLAP].count, 1);
        assert_eq!(r.checkers[mutex::NAME].valid, Validity::False);
        assert_eq!(r.valid, Validity::True, "{r:#?}");
        assert!(r.notes.iter().any(|n| n.starts_with("lock-overlap")));
        assert_eq!(r.counter().unwrap().stale_fence_rejected.writes, 1);
        // The same history breaks the stronger promise.
        let strict = check(&paused_holder(true).build(), Promise::MutualExclusion);
        assert_eq!(strict.valid, Validity::False);
    }

    #[test]
    fn a_stale_fence_accepted_breaks_data_safety() {
        let mut h = Hist::new();
        h.acquire(1, "a").fence(1);
        h.acquire(2, "b").fence(2);
        h.write(2, 1).fence(2); // ok 5
        h.release(2, "b");
        h.read(1, 1).fence(1); // ok 9: should have been refused
        h.release(1, "a");
        h.final_read(1);
        let r = check(&h.build(), Promise::DataSafety);
        assert_eq!(r.valid, Validity::False);
        assert_eq!(
            r.anomalies[anomaly::STALE_FENCE_ACCEPTED].examples,
            vec![vec![5, 9]]
        );
        assert_eq!(r.checkers[fence::NAME].valid, Validity::False);
    }

    #[test]
    fn a_del_release_is_foreign_but_not_under_data_safety() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.acquire(2, "b"); // 3
        h.release(1, "a"); // ok 5
        h.release(2, "b");
        h.final_read(0);
        let mutex = check(&h.build(), Promise::MutualExclusion);
        assert_eq!(
            mutex.anomalies[anomaly::FOREIGN_RELEASE].examples,
            vec![vec![5, 3]]
        );
        assert_eq!(mutex.valid, Validity::False);
        let data = check(&h.build(), Promise::DataSafety);
        assert_eq!(data.valid, Validity::True);
    }

    /// `h` as JSONL, with the event at `late` written `by` lines later (as a
    /// paused worker delivers it), re-indexed in file order.
    fn jsonl_with_a_late_event(h: &History, late: usize, by: usize) -> (History, Vec<u8>) {
        let mut events = h.events.clone();
        let e = events.remove(late);
        events.insert(late + by, e);
        for (i, e) in events.iter_mut().enumerate() {
            e.index = i as u64;
        }
        let mut text = Vec::new();
        for e in &events {
            serde_json::to_writer(&mut text, e).unwrap();
            text.push(b'\n');
        }
        (History::new(events), text)
    }

    #[test]
    fn a_window_bounded_in_events_checks_as_memory_does_until_an_event_outruns_it() {
        for (h, promise) in [
            (clean(), Promise::MutualExclusion),
            (paused_holder(false), Promise::MutualExclusion),
            (paused_holder(true), Promise::DataSafety),
        ] {
            // The second event, five lines late.
            let (h, text) = jsonl_with_a_late_event(&h.build(), 1, 5);
            let in_memory = serde_json::to_value(check(&h, settings(promise))).unwrap();
            let stream = |window: Window| check_jsonl(&text[..], settings(promise), window, true);
            let roomy = Window {
                ns: u64::MAX,
                events: 6,
            };
            let (results, stats) = stream(roomy).unwrap();
            assert_eq!((stats.late, stats.peak_waiting), (0, 7));
            assert_eq!(serde_json::to_value(results).unwrap(), in_memory);
            // Past the bound it is late, and says how late it came: a window
            // of that much time alone puts it back in order.
            let tight = Window { events: 4, ..roomy };
            let (results, stats) = stream(tight).unwrap();
            assert_eq!(stats.late, 1);
            assert_ne!(results.valid, Validity::True);
            assert!(results.notes.iter().any(|n| n.contains("or 4 events")));
            let (results, again) = stream(stats.lateness_ns.into()).unwrap();
            assert_eq!((again.late, again.lateness_ns), (0, stats.lateness_ns));
            assert_eq!(serde_json::to_value(results).unwrap(), in_memory);
        }
    }

    #[test]
    fn results_json_has_the_contract_shape_and_reads_back() {
        let cases = [
            (clean(), Promise::MutualExclusion, json!(true)),
            (paused_holder(false), Promise::MutualExclusion, json!(false)),
            (
                {
                    let mut h = clean();
                    h.truncated();
                    h
                },
                Promise::DataSafety,
                json!("unknown"),
            ),
        ];
        for (h, promise, valid) in cases {
            let r = check(&h.build(), promise);
            let text = serde_json::to_string_pretty(&r).unwrap();
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(json["valid"], valid);
            assert_eq!(json["promise"], promise.to_string());
            assert_eq!(json["anomalies"].as_object().unwrap().len(), all().len());
            assert!(json["checkers"]["counter"]["acknowledged"].is_u64());
            assert!(json["stats"]["ops_per_s"].is_f64());
            let back: Results = serde_json::from_str(&text).unwrap();
            assert_eq!(back, r);
        }
    }

    #[test]
    fn each_lost_update_is_put_down_to_the_fault_before_it() {
        // Two pauses, each followed by two writes of one value: the final
        // read's shortfall is those two losses, one per pause.
        let mut h = Hist::new();
        for v in [1, 2] {
            h.nemesis("start-pause");
            h.nemesis("stop-pause");
            h.write(1, v);
            h.write(2, v);
            h.sleep(20 * 1_000_000_000);
        }
        h.final_read(2);
        let r = check(&h.build(), Promise::MutualExclusion);
        assert_eq!(r.anomalies[anomaly::LOST_UPDATE].count, 2);
        let per_pause: Vec<Option<u64>> = r
            .incidents
            .iter()
            .map(|i| i.anomalies.get(anomaly::LOST_UPDATE).copied())
            .collect();
        assert_eq!(per_pause, [Some(1), Some(1)]);
    }
}
