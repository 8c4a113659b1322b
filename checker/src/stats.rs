//! Throughput and outcome counts for the summary and the pictures
//! ([`Stats`]), and [`AcquiringStrikes`]: how strikes at `acquiring` inside
//! a client adapter landed, before or after the library's decision.

use crate::availability::Availability;
use crate::exposure::Exposure;
use crate::history::{error, f, fault, Event, OpType, Process, CLIENT_TOKEN};
use crate::{Invoked, OnEvent};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Rates and counts for the report. Every field defaults so results written
/// with fewer fields still read back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    /// Client invocations.
    pub ops: u64,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    pub ops_per_s: f64,
    /// Successful acquisitions.
    pub acquired: u64,
    pub cycles_per_s: f64,
    /// The median time from a granted acquire's invoke to its `ok`, in ms:
    /// what taking the lock costs, any wait for a busy lock included (with
    /// one worker, one round of the lock's protocol).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acquire_median_ms: Option<f64>,
    pub duration_s: f64,
    /// Time of the first `start-*` nemesis event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_fault_time: Option<u64>,
    /// Faults injected: `start-*` nemesis events.
    pub faults: u64,
    /// Strikes at `acquiring` in a client adapter and what came of them.
    #[serde(skip_serializing_if = "AcquiringStrikes::is_empty")]
    pub acquiring_strikes: AcquiringStrikes,
    /// Stalls of a worker or the harness that no nemesis fault explains (a
    /// busy host), and the longest of them in ms.
    pub stalls: u64,
    pub longest_stall_ms: u64,
    /// How often each kind of `error` (the part before any `:`) appeared on
    /// a client `fail`/`info`.
    pub errors: BTreeMap<String, u64>,
    /// Ops whose library reported no outcome (an adapter's `ok: null` with
    /// no error, `error` kind `unknown`), by op: a release many libraries
    /// cannot speak of, not an error, so apart from `errors`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unreported: BTreeMap<String, u64>,
    /// Grants with and without faults, recovery after heals and crashes.
    pub availability: Availability,
    /// What the faults met: holds, grants and writes.
    #[serde(default, skip_serializing_if = "Exposure::is_empty")]
    pub exposure: Exposure,
}

/// Strikes at `acquiring` in a client adapter, by whether the library had
/// decided (begun its reply) when it froze: only those before the decision
/// show what a pause mid-acquisition does, and what the struck acquires
/// then answered says what the library did about it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AcquiringStrikes {
    pub before_decision: u64,
    pub after_decision: u64,
    /// Acquires struck before the decision that were then granted with the
    /// very value whose appearance froze them: the library handed back the
    /// frozen attempt's lock, which may have expired meanwhile.
    pub granted_frozen: u64,
    /// Granted with another value: the value that froze it was a rival's
    /// (the watch cannot tell whose write it saw), or the library gave up
    /// the frozen attempt and a later one won.
    pub granted_later: u64,
    /// Granted, but the library shows no token to tell which attempt won.
    pub granted_untold: u64,
    /// Refused (`fail`): the library saw its attempt outlive the freeze, or
    /// the value that froze it was a rival's grant and the lock was busy.
    pub refused: u64,
}

impl AcquiringStrikes {
    pub fn is_empty(&self) -> bool {
        *self == AcquiringStrikes::default()
    }

    /// Acquires struck before the decision that were then granted.
    pub fn granted(&self) -> u64 {
        self.granted_frozen + self.granted_later + self.granted_untold
    }
}

/// Summed over runs (a matrix's row).
impl std::ops::AddAssign<&AcquiringStrikes> for AcquiringStrikes {
    fn add_assign(&mut self, other: &AcquiringStrikes) {
        self.before_decision += other.before_decision;
        self.after_decision += other.after_decision;
        self.granted_frozen += other.granted_frozen;
        self.granted_later += other.granted_later;
        self.granted_untold += other.granted_untold;
        self.refused += other.refused;
    }
}

/// Order does not matter here; fed like the others so one pass does all.
#[derive(Default)]
pub struct StatsCheck {
    stats: Stats,
    span: Option<(u64, u64)>,
    /// Client processes frozen mid-acquisition, before their library's
    /// decision, whose acquire has not completed yet, with the lock value
    /// whose appearance froze them.
    frozen_undecided: Vec<(u64, Option<String>)>,
    /// How long each granted acquire took, in ns.
    granted_ns: Vec<u64>,
}

impl OnEvent for StatsCheck {
    fn on_event(&mut self, e: &Event, invoke: Option<&Invoked>) {
        let s = &mut self.stats;
        self.span = Some(self.span.map_or((e.time, e.time), |(lo, hi)| {
            (lo.min(e.time), hi.max(e.time))
        }));
        if e.is_nemesis() {
            if fault::started(&e.f).is_some() {
                s.first_fault_time = Some(s.first_fault_time.map_or(e.time, |t| t.min(e.time)));
                s.faults += 1;
                let strikes = &mut s.acquiring_strikes;
                match e.value.get(fault::DECIDED).and_then(|d| d.as_bool()) {
                    Some(false) => {
                        strikes.before_decision += 1;
                        let seen = e.value.get(fault::SEEN).and_then(|v| v.as_str());
                        if let Some(p) = e.value.get(fault::PROCESS).and_then(|p| p.as_u64()) {
                            self.frozen_undecided.push((p, seen.map(String::from)));
                        }
                    }
                    Some(true) => strikes.after_decision += 1,
                    None => {}
                }
            }
            return;
        }
        let Process::Client(process) = e.process else {
            return;
        };
        if e.f == f::ACQUIRE && e.kind != OpType::Invoke {
            if let Some(i) = self
                .frozen_undecided
                .iter()
                .position(|(p, _)| *p == process)
            {
                let (_, seen) = self.frozen_undecided.swap_remove(i);
                let strikes = &mut s.acquiring_strikes;
                let token = e.value.get(CLIENT_TOKEN).and_then(|t| t.as_str());
                match (e.kind, token, seen) {
                    (OpType::Ok, Some(token), Some(seen)) if token == seen => {
                        strikes.granted_frozen += 1
                    }
                    (OpType::Ok, Some(_), Some(_)) => strikes.granted_later += 1,
                    (OpType::Ok, _, _) => strikes.granted_untold += 1,
                    (OpType::Fail, _, _) => strikes.refused += 1,
                    _ => {}
                }
            }
        }
        match e.kind {
            OpType::Invoke => s.ops += 1,
            OpType::Ok => {
                s.ok += 1;
                if e.f == f::ACQUIRE {
                    s.acquired += 1;
                    if let Some(i) = invoke {
                        self.granted_ns.push(e.time.saturating_sub(i.time));
                    }
                }
            }
            OpType::Fail => s.fail += 1,
            OpType::Info => s.info += 1,
        }
        if matches!(e.kind, OpType::Fail | OpType::Info) {
            match e.error.as_deref().map(error::kind) {
                Some(error::UNKNOWN) => *s.unreported.entry(e.f.clone()).or_default() += 1,
                Some(kind) => *s.errors.entry(kind.to_string()).or_default() += 1,
                None => {}
            }
        }
    }
}

impl StatsCheck {
    pub fn finish(self) -> Stats {
        let mut s = self.stats;
        let (min, max) = self.span.unwrap_or_default();
        s.duration_s = (max - min) as f64 / 1e9;
        if s.duration_s > 0.0 {
            s.ops_per_s = s.ops as f64 / s.duration_s;
            s.cycles_per_s = s.acquired as f64 / s.duration_s;
        }
        s.acquire_median_ms = median(self.granted_ns.iter().map(|&ns| ns as f64 / 1e6).collect());
        s
    }
}

/// The median of `values` (the mean of the middle two when their number is
/// even); `None` when there are none.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::Hist;
    use crate::history::History;

    fn stats(h: &History) -> Stats {
        crate::feed::feed::<StatsCheck>(h).finish()
    }

    #[test]
    fn strikes_at_acquiring_count_by_whether_the_library_had_decided() {
        let mut h = Hist::new();
        let strike = |decided: bool, process: u64| serde_json::json!({"at": "acquiring", "decided": decided, "process": process, "seen": "v1"});
        let granted = |token: &str| serde_json::json!({ "client_token": token });
        // Process 1 frozen before the decision, then granted the frozen
        // value; process 2 after it; process 3 before it, then refused;
        // process 4 before it, then granted a later attempt's value; process
        // 5 before it, granted with no token to tell.
        h.invoke(1, "acquire").token("a");
        h.nemesis("start-pause").value(strike(false, 1));
        h.nemesis("stop-pause");
        h.ok(1, "acquire").token("a").value(granted("v1"));
        h.invoke(2, "acquire").token("b");
        h.nemesis("start-pause").value(strike(true, 2));
        h.ok(2, "acquire").token("b");
        h.invoke(3, "acquire").token("c");
        h.nemesis("start-pause").value(strike(false, 3));
        h.fail(3, "acquire").error("lock-busy");
        h.invoke(4, "acquire").token("d");
        h.nemesis("start-pause").value(strike(false, 4));
        h.ok(4, "acquire").token("d").value(granted("v2"));
        h.invoke(5, "acquire").token("e");
        h.nemesis("start-pause").value(strike(false, 5));
        h.ok(5, "acquire").token("e");
        h.nemesis("start-pause")
            .value(serde_json::json!({"at": "checked"}));
        // A later acquire of process 1 is not the struck one.
        h.invoke(1, "acquire").token("f");
        h.fail(1, "acquire").error("lock-busy");
        let s = stats(&h.build()).acquiring_strikes;
        let expected = AcquiringStrikes {
            before_decision: 4,
            after_decision: 1,
            granted_frozen: 1,
            granted_later: 1,
            granted_untold: 1,
            refused: 1,
        };
        assert_eq!(s, expected);
        assert_eq!(s.granted(), 3);
    }

    #[test]
    fn counts_client_ops_and_rates_over_the_whole_span() {
        let mut h = Hist::new();
        h.acquire(1, "a").time(0);
        h.nemesis("stop-pause"); // a stop is not a fault starting
        h.nemesis("start-pause").time(30);
        h.invoke(1, "write").value(1);
        h.info(1, "write").error("timeout");
        h.invoke(11, "release").token("a");
        h.fail(11, "release").error("not-held");
        h.final_read(0); // the harness's ops are not client ops
        h.nemesis("start-kill").time(2_000_000_000);
        let s = stats(&h.build());
        assert_eq!((s.ops, s.ok, s.fail, s.info), (3, 1, 1, 1));
        assert_eq!(s.acquired, 1);
        assert_eq!(s.first_fault_time, Some(30));
        assert_eq!(s.duration_s, 2.0);
        assert_eq!(s.ops_per_s, 1.5);
        assert_eq!(s.cycles_per_s, 0.5);

        assert_eq!(s.errors["timeout"], 1);
        assert_eq!(s.errors["not-held"], 1);
        assert_eq!(s.errors.len(), 2);
    }

    #[test]
    fn a_granted_acquire_costs_the_time_from_its_invoke_to_its_ok() {
        let mut h = Hist::new();
        for (start, took_ms) in [(0, 4), (100, 2), (200, 9)] {
            h.invoke(1, "acquire").token("a").time(start * 1_000_000);
            h.ok(1, "acquire")
                .token("a")
                .time((start + took_ms) * 1_000_000);
        }
        h.invoke(2, "acquire").token("b").time(0);
        h.fail(2, "acquire").error("lock-busy").time(500_000_000);
        assert_eq!(stats(&h.build()).acquire_median_ms, Some(4.0));
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 10.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn errors_are_counted_by_kind_not_by_their_details() {
        let mut h = Hist::new();
        for detail in [
            "connection-lost: reset",
            "connection-lost: eof",
            "no-quorum: 1/3",
        ] {
            h.invoke(1, "acquire").token("a");
            h.info(1, "acquire").error(detail);
        }
        let s = stats(&h.build());
        assert_eq!(s.errors["connection-lost"], 2);
        assert_eq!(s.errors["no-quorum"], 1);
    }

    #[test]
    fn an_empty_or_instant_history_has_zero_rates() {
        let s = stats(&History::default());
        assert_eq!((s.ops, s.duration_s, s.ops_per_s), (0, 0.0, 0.0));
        let mut h = Hist::new();
        h.invoke(1, "read").time(5);
        let s = stats(&h.build());
        assert_eq!((s.ops, s.ops_per_s, s.cycles_per_s), (1, 0.0, 0.0));
    }

    #[test]
    fn a_release_the_library_reports_nothing_of_is_not_an_error() {
        let mut h = Hist::new();
        h.acquire(1, "a");
        h.invoke(1, "release").token("a");
        h.info(1, "release")
            .token("a")
            .error("unknown: the adapter did not say");
        let s = stats(&h.build());
        assert!(s.errors.is_empty(), "{:?}", s.errors);
        assert_eq!(s.unreported.get("release"), Some(&1));
    }
}
