//! One violation injected into a generated history of a correct lock must be
//! found, as the right anomaly; the untouched history must stay clean.

use checker::generate::{contended_history, valid_history, Contended};
use checker::history::{f, Event, History, OpType, Process};
use checker::{check_linearizability, Budget, Promise, Results, Validity};
use proptest::prelude::*;

/// Room made after the event at `pos` for `new` events, one ns apart, so
/// they fall strictly between it and the next one in time.
fn insert_after(history: &History, pos: usize, new: Vec<Event>) -> History {
    let t = history.events[pos].time;
    let gap = new.len() as u64 + 1;
    let mut events: Vec<Event> = history.events[..=pos].to_vec();
    for (k, mut e) in new.into_iter().enumerate() {
        e.time = t + 1 + k as u64;
        events.push(e);
    }
    events.extend(history.events[pos + 1..].iter().cloned().map(|mut e| {
        e.time += gap;
        e
    }));
    for (i, e) in events.iter_mut().enumerate() {
        e.index = i as u64;
    }
    History::new(events)
}

/// Positions of client events with this `f` and type.
fn positions(history: &History, op: &str, kind: OpType) -> Vec<usize> {
    let matches = |e: &Event| e.f == op && e.kind == kind && e.process.is_client();
    (0..history.events.len())
        .filter(|&i| matches(&history.events[i]))
        .collect()
}

fn event(p: u64, kind: OpType, op: &str) -> Event {
    Event::new(0, Process::Client(p), kind, op)
}

fn count(r: &Results, anomaly: &str) -> u64 {
    r.anomalies[anomaly].count
}

/// A process that never took part acquires (and releases) while a holder
/// reads: two holders at once.
fn inject_overlap(h: &History, cycle: usize) -> History {
    let during = positions(h, f::READ, OpType::Ok)[cycle];
    let intruder = 1_000_000;
    let token = Some("intruder".to_string());
    let mut new: Vec<Event> = [
        (OpType::Invoke, f::ACQUIRE),
        (OpType::Ok, f::ACQUIRE),
        (OpType::Invoke, f::RELEASE),
        (OpType::Ok, f::RELEASE),
    ]
    .into_iter()
    .map(|(kind, op)| event(intruder, kind, op))
    .collect();
    new.iter_mut().for_each(|e| e.token = token.clone());
    insert_after(h, during, new)
}

/// After a later grant's write, the previous cycle's fence is accepted again.
fn inject_stale_fence(h: &History, cycle: usize) -> History {
    let after = positions(h, f::WRITE, OpType::Ok)[cycle];
    let e = &h.events[after];
    let (fence, value) = (e.fence.unwrap() - 1, e.value.clone());
    let Process::Client(p) = e.process else {
        unreachable!()
    };
    let new = [OpType::Invoke, OpType::Ok].map(|kind| {
        let mut read = event(p, kind, f::READ);
        read.fence = Some(fence);
        if kind == OpType::Ok {
            read.value = value.clone();
        }
        read
    });
    insert_after(h, after, new.to_vec())
}

/// From `cycle` on, every value is one lower: that cycle read the counter
/// before the previous increment and wrote the same value again.
fn inject_lost_increment(h: &History, cycle: usize) -> History {
    let from = positions(h, f::READ, OpType::Ok)[cycle];
    let mut h = h.clone();
    for e in &mut h.events[from..] {
        if let Some(v) = e.int_value() {
            e.value = (v - 1).into();
        }
    }
    h
}

fn arbitrary_history() -> impl Strategy<Value = (History, usize)> {
    (any::<u64>(), 1u64..=8, 2u64..=30, 0u64..=300).prop_flat_map(
        |(seed, processes, cycles, info)| {
            let history = valid_history(seed, processes, cycles, info);
            (Just(history), 1..cycles as usize)
        },
    )
}

#[test]
fn a_generated_history_of_a_correct_lock_is_valid_for_every_checker() {
    for seed in 0..20 {
        let h = valid_history(seed, 5, 200, 50);
        let r = checker::check(&h, Promise::MutualExclusion);
        assert_eq!(
            r.valid,
            Validity::True,
            "seed {seed}: {:?} {:?}",
            r.anomalies,
            r.notes
        );
    }
}

/// The `lose-reply` shape (issue 25) at test size: 20 workers contending, a
/// fifth of the acquires ending `info`, never released.
const LOST_REPLIES: Contended = Contended {
    processes: 20,
    lock_ops: 2_000,
    info_acquire_per_mille: 200,
};

#[test]
fn a_contended_history_with_lost_replies_is_decided_valid() {
    for seed in 0..5 {
        let h = contended_history(seed, LOST_REPLIES);
        let acquires = positions(&h, f::ACQUIRE, OpType::Invoke).len();
        let lost = positions(&h, f::ACQUIRE, OpType::Info).len();
        assert!(
            (150..250).contains(&(lost * 1000 / acquires)),
            "{lost}/{acquires}"
        );
        let out = check_linearizability(&h, Budget::default());
        assert_eq!(out.valid, Validity::True, "seed {seed}: {out:?}");
        // About a state per op: each lost reply's acquire is pruned when the
        // search first meets it. Were it kept as a candidate at every later
        // free moment, states would grow with lost acquires × grants (some
        // 60 000 here, and a 20 000-op history would exhaust the budget).
        assert!(out.states < 2 * LOST_REPLIES.lock_ops as usize, "{out:?}");
        let r = checker::check(&h, Promise::MutualExclusion);
        assert_eq!(r.valid, Validity::True, "seed {seed}: {:?}", r.anomalies);
    }
}

#[test]
fn a_double_grant_among_lost_replies_is_caught() {
    let h = contended_history(1, LOST_REPLIES);
    let holds = positions(&h, f::READ, OpType::Ok).len();
    for cycle in [0, holds / 2, holds - 1] {
        let r = checker::check(&inject_overlap(&h, cycle), Promise::MutualExclusion);
        assert_eq!(count(&r, "nonlinearizable"), 1, "cycle {cycle}");
        assert_eq!(count(&r, "lock-overlap"), 1, "cycle {cycle}");
        assert_eq!(r.valid, Validity::False);
    }
}

/// The `k`th lost reply's acquire, made to take effect: its worker, under a
/// new id, releases its token right after the first event at or after it of
/// this `f` and type. Its invoke and the event found.
fn release_lost(h: &History, k: usize, op: &str, kind: OpType) -> (History, usize, usize) {
    let info = positions(h, f::ACQUIRE, OpType::Info)[k];
    let token = h.events[info].token.clone();
    let invoke = (0..info)
        .rev()
        .find(|&i| h.events[i].process == h.events[info].process)
        .expect("an info has its invoke");
    let at = *positions(h, op, kind)
        .iter()
        .find(|&&i| i > invoke)
        .expect("events after it");
    let new = [OpType::Invoke, OpType::Ok].map(|kind| {
        let mut e = event(2_000_000, kind, f::RELEASE);
        e.token = token.clone();
        e
    });
    (insert_after(h, at, new.to_vec()), invoke, at)
}

#[test]
fn a_lost_reply_acquire_released_during_a_hold_took_effect_and_is_caught() {
    // Released inside another's hold (after its read): the release proves
    // the acquire took effect, and it held while the other did.
    let h = contended_history(2, LOST_REPLIES);
    for k in [0, 10, 100] {
        let (h, ..) = release_lost(&h, k, f::READ, OpType::Ok);
        let out = check_linearizability(&h, Budget::default());
        assert_eq!(out.valid, Validity::False, "lost reply {k}: {out:?}");
        let r = checker::check(&h, Promise::MutualExclusion);
        assert_eq!(count(&r, "nonlinearizable"), 1, "lost reply {k}");
        assert_eq!(r.valid, Validity::False);
    }
}

#[test]
fn a_lost_reply_acquire_released_while_the_lock_may_be_free_is_judged_taken() {
    // Released just after a holder began releasing: the acquire may have
    // taken effect right after that release, so it must not be pruned.
    let h = contended_history(2, LOST_REPLIES);
    for k in [0, 10, 100] {
        let (h, ..) = release_lost(&h, k, f::RELEASE, OpType::Invoke);
        let out = check_linearizability(&h, Budget::default());
        assert_eq!(out.valid, Validity::True, "lost reply {k}: {out:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn a_correct_lock_history_is_clean((h, _) in arbitrary_history()) {
        let r = checker::check(&h, Promise::MutualExclusion);
        prop_assert_eq!(r.valid, Validity::True, "{:?}", r.anomalies);
        prop_assert!(r.anomalies.values().all(|a| a.count == 0));
    }

    #[test]
    fn an_injected_overlap_is_a_lock_overlap_and_not_linearizable((h, cycle) in arbitrary_history()) {
        let r = checker::check(&inject_overlap(&h, cycle), Promise::MutualExclusion);
        prop_assert_eq!(count(&r, "lock-overlap"), 1);
        prop_assert_eq!(count(&r, "nonlinearizable"), 1);
        prop_assert_eq!(count(&r, "lost-update"), 0);
        prop_assert_eq!(r.valid, Validity::False);
        // A fenced setup promises data safety only: an overlap alone is fine.
        let r = checker::check(&inject_overlap(&h, cycle), Promise::DataSafety);
        prop_assert_eq!(r.valid, Validity::True);
    }

    #[test]
    fn an_injected_stale_fence_is_found_under_either_promise((h, cycle) in arbitrary_history()) {
        let stale = inject_stale_fence(&h, cycle);
        for promise in [Promise::MutualExclusion, Promise::DataSafety] {
            let r = checker::check(&stale, promise);
            prop_assert_eq!(count(&r, "stale-fence-accepted"), 1);
            prop_assert_eq!(count(&r, "lock-overlap"), 0);
            prop_assert_eq!(r.valid, Validity::False);
        }
    }

    #[test]
    fn an_injected_lost_increment_is_a_lost_update_seen_by_the_reads((h, cycle) in arbitrary_history()) {
        let r = checker::check(&inject_lost_increment(&h, cycle), Promise::DataSafety);
        prop_assert!(count(&r, "lost-update") >= 1, "{:?}", r.anomalies);
        prop_assert_eq!(count(&r, "lock-overlap"), 0);
        prop_assert_eq!(r.valid, Validity::False);
        // Every read from that cycle on trails the acknowledged count by one.
        let bounds = &r.checkers["counter"].details["bounds"];
        let later_reads = bounds["reads"].as_u64().unwrap() - cycle as u64;
        prop_assert_eq!(bounds["below"].as_u64(), Some(later_reads), "{}", bounds);
    }
}

/// The history as JSONL, with the event at `late` written up to `by` lines
/// later, as a paused worker delivers it: past other processes' events,
/// never past its own process's next one. `index` is file order, as the
/// harness writes it.
fn jsonl_with_a_late_event(h: &History, late: usize, by: usize) -> (History, Vec<u8>) {
    let mut events = h.events.clone();
    if !events.is_empty() {
        let late = late % events.len();
        let e = events.remove(late);
        let own_next = events[late..]
            .iter()
            .position(|o| o.process == e.process)
            .map_or(events.len(), |k| late + k);
        events.insert((late + by).min(own_next), e);
    }
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    #[test]
    fn streaming_a_file_gives_the_same_results_as_checking_it_in_memory(
        (h, cycle) in arbitrary_history(),
        inject in 0..4usize,
        late in any::<usize>(),
        by in 0..20usize,
    ) {
        let h = match inject {
            0 => h,
            1 => inject_overlap(&h, cycle),
            2 => inject_stale_fence(&h, cycle),
            _ => inject_lost_increment(&h, cycle),
        };
        let (h, text) = jsonl_with_a_late_event(&h, late, by);
        let in_memory = checker::check(&h, Promise::MutualExclusion);
        let window = 1_000_000_000;
        let (streamed, stream) =
            checker::check_jsonl(&text[..], Promise::MutualExclusion, window, true).unwrap();
        prop_assert_eq!(stream.late, 0);
        prop_assert_eq!(stream.events, h.events.len() as u64);
        prop_assert_eq!(
            serde_json::to_value(&streamed).unwrap(),
            serde_json::to_value(&in_memory).unwrap()
        );
    }
}
