use super::*;
use crate::history::build::Hist;
use crate::history::{f, Process};
use proptest::prelude::*;
use std::time::Instant;

fn run(h: &Hist) -> Outcome {
    check(&h.build(), Budget::default())
}

#[test]
fn alternating_acquires_and_releases_are_valid() {
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.release(1, "a");
    h.acquire(2, "b");
    h.invoke(1, "acquire").token("c");
    h.fail(1, "acquire").token("c").error("lock-busy");
    h.release(2, "b");
    h.acquire(1, "d");
    h.read(1, 0);
    h.release(1, "d");
    let out = run(&h);
    assert_eq!(out.valid, Validity::True, "{out:?}");
    assert!(out.witness.is_empty());
}

#[test]
fn two_overlapping_ok_acquires_are_invalid() {
    let mut h = Hist::new();
    h.acquire(1, "a"); // ok 1
    h.acquire(2, "b"); // ok 3
    h.release(1, "a");
    h.release(2, "b");
    let out = run(&h);
    assert_eq!(out.valid, Validity::False, "{out:?}");
    assert_eq!(out.witness, vec![1, 3]);
    // When the later of the two happened.
    assert_eq!(out.witness_time, Some(3 * crate::history::build::STEP));
    assert!(out.reason.is_some());
}

#[test]
fn concurrent_acquires_may_be_ordered_either_way() {
    let mut h = Hist::new();
    h.invoke(1, "acquire").token("a");
    h.invoke(2, "acquire").token("b");
    h.ok(2, "acquire").token("b");
    h.invoke(2, "release").token("b");
    h.ok(1, "acquire").token("a"); // returns after b's release began
    h.ok(2, "release").token("b");
    h.release(1, "a");
    assert_eq!(run(&h).valid, Validity::True);
}

/// A release the node refused (it never ran) leaves the key to its TTL:
/// in lockstorm's histories a later grant to another is the lease lapsing
/// (the hold ended some time after the refusal, as a crashed holder's);
/// read as Knossos reads a `fail` (no TTL), the holder holds for good.
#[test]
fn a_failed_release_leaves_the_key_to_lapse_or_in_knossos_the_holder_holding() {
    let mut h = Hist::new();
    h.acquire(1, "a"); // ok 1
    h.invoke(1, "release").token("a");
    h.fail(1, "release")
        .token("a")
        .error("ClusterDown: The cluster is down");
    h.acquire(2, "b"); // ok 5
    assert_eq!(run(&h).valid, Validity::True);
    let settings = crate::Settings::new(crate::Promise::MutualExclusion).knossos_fail();
    let results = crate::check(&h.build(), settings);
    assert_eq!(results.anomalies["nonlinearizable"].count, 1);
}

#[test]
fn a_release_refused_as_not_held_is_a_lease_that_ran_out_during_it() {
    // Frozen inside its release past the TTL: another is granted, then
    // the release finds the key gone. The lease worked as designed.
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.invoke(1, "release").token("a");
    h.acquire(2, "b");
    h.fail(1, "release").token("a").error("not-held");
    h.release(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
    // A lease that ran out before the release began: the lock service
    // behaved as a mutex whose holds expire (the refusal says this one
    // did), so the order fits; its holder believed it held while
    // another was granted, which is `lock-overlap`'s to report.
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.acquire(2, "b"); // ok 3
    h.invoke(1, "release").token("a");
    h.fail(1, "release").token("a").error("not-held");
    assert_eq!(run(&h).valid, Validity::True);
    let results = crate::check(&h.build(), crate::Promise::MutualExclusion);
    assert_eq!(results.anomalies["lock-overlap"].count, 1);
    // Read as Knossos reads a `fail` (a Jepsen history), the release did
    // not happen, and the second grant fits no order.
    let settings = crate::Settings::new(crate::Promise::MutualExclusion).knossos_fail();
    let results = crate::check(&h.build(), settings);
    assert_eq!(results.anomalies["nonlinearizable"].count, 1);
    // Refused for any other reason, the release did not happen.
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.invoke(1, "release").token("a");
    h.acquire(2, "b");
    h.fail(1, "release").token("a").error("connection-refused");
    assert_eq!(run(&h).valid, Validity::False);
}

/// After an acquire whose outcome is unknown, the same process's
/// release refused `not-held` may mean there never was a hold: it
/// forces nothing (a release that may have happened), while another
/// holds the lock throughout.
#[test]
fn a_not_held_release_after_an_info_acquire_forces_no_hold() {
    let mut h = Hist::new();
    h.acquire(2, "b");
    h.invoke(1, "acquire").token("a");
    h.info(1, "acquire").token("a");
    h.invoke(1, "release").token("a");
    h.fail(1, "release").token("a").error("not-held");
    h.release(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
    // Had it been granted, its release says its hold ended by then.
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.invoke(1, "release").token("a");
    h.fail(1, "release").token("a").error("not-held");
    h.acquire(2, "b");
    h.release(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
}

#[test]
fn an_info_acquire_may_never_have_happened() {
    let mut h = Hist::new();
    h.invoke(1, "acquire").token("a");
    h.info(1, "acquire").token("a").error("timeout");
    h.acquire(2, "b");
    h.release(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
}

#[test]
fn an_info_acquire_released_later_under_a_new_process_id_happened() {
    let mut h = Hist::new();
    h.invoke(1, "acquire").token("a");
    h.info(1, "acquire").token("a").error("timeout");
    h.release(11, "a");
    h.acquire(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
    // Tokenless, as a client that never learnt its token records it.
    let mut h = Hist::new();
    h.invoke(1, "acquire");
    h.info(1, "acquire").error("timeout");
    h.release(11, "lost");
    assert_eq!(run(&h).valid, Validity::True);
}

#[test]
fn a_lost_reply_acquire_that_nothing_releases_did_not_take_effect() {
    // `lose-reply`: acquires whose replies were lost, their workers gone
    // on under new ids, never released, and the lock granted to others
    // after each. Taken, either would hold the lock for good (the model
    // has no TTL), so each must be judged not taken.
    let mut h = Hist::new();
    h.invoke(1, "acquire").token("a");
    h.invoke(2, "acquire").token("b");
    h.info(1, "acquire").token("a").error("timeout"); // 1 goes on as 11
    h.ok(2, "acquire").token("b");
    h.invoke(3, "acquire").token("c");
    h.release(2, "b");
    h.info(3, "acquire").token("c").error("timeout"); // 3 goes on as 13
    h.acquire(11, "d");
    h.release(11, "d");
    h.acquire(13, "e");
    let out = run(&h);
    assert_eq!(out.valid, Validity::True, "{out:?}");
}

#[test]
fn a_lost_reply_acquire_whose_token_is_released_took_effect_and_can_overlap() {
    // The release of its token under the worker's new id proves the
    // lost reply's acquire took effect, so it is not pruned as not
    // taken; and it held while b did.
    let mut h = Hist::new();
    h.invoke(1, "acquire").token("a");
    h.info(1, "acquire").token("a").error("timeout"); // goes on as 11
    h.acquire(2, "b"); // ok 3
    h.release(11, "a"); // ok 5: a held while b did
    h.release(2, "b");
    let out = run(&h);
    assert_eq!(out.valid, Validity::False, "{out:?}");
    assert_eq!(out.witness, vec![3, 5]);
}

#[test]
fn a_lost_reply_acquire_whose_token_is_released_must_be_judged_taken() {
    // Only a taking effect, between b's release and its own, explains
    // the release of a; c, never released, did not take effect.
    let mut h = Hist::new();
    h.invoke(1, "acquire").token("a");
    h.acquire(2, "b");
    h.info(1, "acquire").token("a").error("timeout"); // goes on as 11
    h.release(2, "b");
    h.invoke(3, "acquire").token("c");
    h.info(3, "acquire").token("c").error("timeout");
    h.release(11, "a");
    h.acquire(12, "d");
    h.release(12, "d");
    let out = run(&h);
    assert_eq!(out.valid, Validity::True, "{out:?}");
}

#[test]
fn an_info_release_may_have_happened() {
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.invoke(1, "release").token("a");
    h.info(1, "release").token("a").error("timeout");
    h.acquire(2, "b");
    h.release(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
    // ... but not before it was invoked.
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.acquire(2, "b"); // ok 3
    h.invoke(1, "release").token("a");
    h.info(1, "release").token("a");
    assert_eq!(run(&h).valid, Validity::False);
}

#[test]
fn a_crashed_holder_lets_the_lock_go() {
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.invoke(1, "read");
    h.info(1, "read").error("crashed");
    h.crash(1).token("a");
    h.acquire(2, "b");
    h.release(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
    // Under an earlier id of the same worker, named by the crash's token.
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.invoke(1, "write");
    h.info(1, "write").error("timeout");
    h.crash(11).token("a");
    h.acquire(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
}

#[test]
fn a_grant_before_the_crash_is_still_a_second_holder() {
    let mut h = Hist::new();
    h.acquire(1, "a"); // ok 1
    h.acquire(2, "b"); // ok 3
    h.crash(1).token("a");
    let out = run(&h);
    assert_eq!(out.valid, Validity::False, "{out:?}");
    assert_eq!(out.witness, vec![1, 3]);
}

/// A worker that goes on under the same id after a timeout sent its next
/// request after the uncertain one: the uncertain op took effect, if at
/// all, before that request was answered. Under a new id (Jepsen's
/// convention) it may take effect at any later time.
#[test]
fn an_uncertain_op_takes_effect_by_its_process_s_next_answer() {
    let build = |later: u64| {
        let mut h = Hist::new();
        h.invoke(1, "acquire").token("a");
        h.info(1, "acquire").token("a").error("timeout");
        h.invoke(later, "release").token("a");
        h.fail(later, "release").token("a").error("not-held");
        h.acquire(2, "b");
        h.release(2, "b");
        h.invoke(later, "release").token("a"); // 8
        h.ok(later, "release").token("a"); // 9
        h
    };
    // The same worker: its acquire was answered `not-held` before b's
    // grant, so a was not held after it, and the last release frees nothing.
    let out = run(&build(1));
    assert_eq!(out.valid, Validity::False, "{out:?}");
    assert_eq!(out.witness, vec![9]);
    // Gone on as 11: a may have been granted after b's release.
    assert_eq!(run(&build(11)).valid, Validity::True);
}

/// Tokenless, the owner is the process: a `not-held` refusal after an
/// uncertain acquire ends no earlier hold of the process, and forces none.
#[test]
fn a_tokenless_refusal_after_an_uncertain_acquire_forces_no_hold() {
    let mut h = Hist::new();
    h.invoke(1, "acquire");
    h.ok(1, "acquire");
    h.invoke(1, "release");
    h.ok(1, "release");
    h.acquire(2, "b");
    h.invoke(1, "acquire");
    h.info(1, "acquire").error("timeout");
    h.invoke(1, "release");
    h.fail(1, "release").error("not-held");
    h.release(2, "b");
    assert_eq!(run(&h).valid, Validity::True);
}

#[test]
fn a_crash_with_no_hold_changes_nothing() {
    let mut h = Hist::new();
    h.acquire(1, "a"); // ok 1
    h.invoke(3, "acquire").token("c");
    h.crash(3); // died waiting: its acquire never completes
    h.acquire(2, "b"); // ok 5: 1 still holds
    let out = run(&h);
    assert_eq!(out.valid, Validity::False, "{out:?}");
    assert_eq!(out.witness, vec![1, 5]);
}

#[test]
fn a_release_by_a_non_holder_is_invalid() {
    let mut h = Hist::new();
    h.acquire(1, "a"); // ok 1
    h.release(2, "b"); // ok 3
    let out = run(&h);
    assert_eq!(out.valid, Validity::False, "{out:?}");
    assert_eq!(out.witness, vec![1, 3]);
    let mut h = Hist::new();
    h.release(2, "b"); // ok 1: nobody holds
    assert_eq!(run(&h).witness, vec![1]);
}

#[test]
fn an_exhausted_budget_is_unknown() {
    let mut h = Hist::new();
    for _ in 0..10 {
        h.acquire(1, "a");
        h.release(1, "a");
    }
    let out = check(
        &h.build(),
        Budget {
            max_states: 5,
            max_time: Duration::from_secs(10),
        },
    );
    assert_eq!(out.valid, Validity::Unknown);
    assert!(out.reason.unwrap().contains("states"));
}

#[test]
fn a_long_valid_history_checks_quickly() {
    // 5 workers contending: each round one acquires, the others fail,
    // and now and then a release times out (info) or an acquire does.
    let mut h = Hist::new();
    let mut next_proc = [0u64, 1, 2, 3, 4];
    let mut ops = 0;
    let mut round = 0u64;
    while ops < 20_000 {
        round += 1;
        let w = (round % 5) as usize;
        let tok = format!("t{round}");
        let p = next_proc[w];
        h.invoke(p, "acquire").token(&tok);
        for (o, &q) in next_proc.iter().enumerate() {
            if o != w {
                h.invoke(q, "acquire").token(&format!("f{round}-{o}"));
            }
        }
        h.ok(p, "acquire").token(&tok);
        for (o, &q) in next_proc.iter().enumerate() {
            if o != w {
                h.fail(q, "acquire").token(&format!("f{round}-{o}"));
            }
        }
        h.invoke(p, "release").token(&tok);
        if round.is_multiple_of(97) {
            h.info(p, "release").token(&tok);
            next_proc[w] += 5;
        } else {
            h.ok(p, "release").token(&tok);
        }
        if round.is_multiple_of(89) {
            let q = next_proc[(w + 1) % 5];
            h.invoke(q, "acquire").token(&format!("i{round}"));
            h.info(q, "acquire").token(&format!("i{round}"));
            next_proc[(w + 1) % 5] += 5;
        }
        ops += 7;
    }
    let started = Instant::now();
    let out = run(&h);
    assert_eq!(out.valid, Validity::True, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// Definition-based oracle: tries every subset of the uncertain ops in
/// every order that respects real time (a before b when a completed
/// before b was invoked).
fn oracle(p: &Prepared) -> bool {
    fn go(p: &Prepared, placed: &mut Vec<bool>, holder: u32) -> bool {
        if (0..p.ops.len()).all(|i| placed[i] || !p.ops[i].certain()) {
            return true;
        }
        for i in 0..p.ops.len() {
            if placed[i] {
                continue;
            }
            let ready = (0..p.ops.len())
                .all(|j| placed[j] || p.ops[j].ret().is_none_or(|r| r >= p.ops[i].invoke));
            // A soft op goes before every op invoked after its deadline.
            let in_time = !p.ops[i].soft
                || (0..p.ops.len()).all(|j| !placed[j] || p.ops[j].invoke <= p.ops[i].done);
            if !ready || !in_time {
                continue;
            }
            if let Some(next) = p.step(holder, &p.ops[i]) {
                placed[i] = true;
                let ok = go(p, placed, next);
                placed[i] = false;
                if ok {
                    return true;
                }
            }
        }
        false
    }
    go(p, &mut vec![false; p.ops.len()], NIL)
}

#[derive(Clone, Debug)]
struct Step {
    /// After an `info`, the worker keeps its process id (another
    /// generator's shape: its next op says what became of it) rather
    /// than moving to a new one (Jepsen's convention).
    keep_id: bool,
    worker: usize,
    release: bool,
    token: Option<u8>,
    outcome: u8, // 0 ok, 1 fail, 2 info, 3 fail not-held (a lost hold, for a release)
    gap: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            0..4usize,
            any::<bool>(),
            prop::option::weighted(0.85, 0..3u8),
            0..4u8,
            0..3u64,
            any::<bool>(),
        )
            .prop_map(|(worker, release, token, outcome, gap, keep_id)| Step {
                keep_id,
                worker,
                release,
                token,
                outcome,
                gap,
            }),
        0..36,
    )
}

/// Each step completes the worker's op in flight, or invokes a new one
/// (at most 12 ops, so up to 36 steps); ops still in flight at the end never complete.
fn history(steps: &[Step]) -> History {
    let mut events = Vec::new();
    let mut time = 0;
    let mut proc_of = [0u64, 1, 2, 3];
    let mut in_flight: [Option<(&str, Option<String>)>; 4] = Default::default();
    let mut ops = 0;
    for s in steps {
        time += s.gap * 10;
        let p = Process::Client(proc_of[s.worker]);
        let mut e = match in_flight[s.worker].take() {
            Some((f, token)) => {
                let kind =
                    [OpType::Ok, OpType::Fail, OpType::Info, OpType::Fail][s.outcome as usize];
                if kind == OpType::Info && !s.keep_id {
                    proc_of[s.worker] += 4;
                }
                let mut e = crate::history::Event::new(time, p, kind, f);
                e.token = token;
                if s.outcome == 3 {
                    e.error = Some(crate::history::error::NOT_HELD.into());
                }
                e
            }
            None if ops < 12 => {
                ops += 1;
                let f = if s.release { f::RELEASE } else { f::ACQUIRE };
                let token = s.token.map(|t| format!("t{t}"));
                in_flight[s.worker] = Some((f, token.clone()));
                let mut e = crate::history::Event::new(time, p, OpType::Invoke, f);
                e.token = token;
                e
            }
            None => continue,
        };
        e.index = events.len() as u64;
        events.push(e);
    }
    History::new(events)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    #[test]
    fn agrees_with_a_brute_force_oracle(steps in steps()) {
        let h = history(&steps);
        let out = check(&h, Budget::default());
        prop_assume!(out.valid != Validity::Unknown);
        let expected = oracle(&prepared(&h));
        prop_assert_eq!(out.valid == Validity::True, expected, "{:?}", out);
        prop_assert_eq!(out.witness.is_empty(), expected);
        if let Ok((pieces, _)) = in_pieces(&h, 2) {
            prop_assert_eq!(pieces == Validity::True, expected);
        }
    }
}

/// Histories of another shape than the project's own workers write
/// (`generate::live`): workers that go on under the same id after a lost
/// reply, leases that run out mid-hold, crashed holders, lost release
/// replies; with and without tokens. A correct lock's are valid; with one
/// refusal inside a certain hold turned into a grant, invalid.
#[test]
fn live_histories_are_decided_both_ways() {
    use crate::generate::live::{live_history, with_overlap, Live};
    for (seed, tokens) in [(1, true), (2, false), (3, true), (4, false)] {
        let shape = Live {
            processes: 8,
            lock_ops: 20_000,
            info_acquire: 200,
            info_release: 100,
            expiry: 30,
            crash: 10,
            tokens,
        };
        let h = live_history(seed, shape);
        let out = check(&h, Budget::default());
        assert_eq!(out.valid, Validity::True, "seed {seed}: {out:?}");
        let bad = with_overlap(&h).expect("a refusal inside a hold");
        let out = check(&bad, Budget::default());
        assert_eq!(out.valid, Validity::False, "seed {seed}: {out:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    /// Small live histories, and their overlapping twins, against the oracle.
    #[test]
    fn live_histories_agree_with_the_oracle(seed in any::<u64>(), tokens: bool, overlap: bool) {
        use crate::generate::live::{live_history, with_overlap, Live};
        let shape = Live {
            processes: 3,
            lock_ops: 14,
            info_acquire: 300,
            info_release: 200,
            expiry: 200,
            crash: 100,
            tokens,
        };
        let h = live_history(seed, shape);
        // Too short a history may have no refusal inside a hold.
        let bad = overlap.then(|| with_overlap(&h)).flatten();
        let valid = bad.is_none();
        let h = bad.unwrap_or(h);
        let out = check(&h, Budget::default());
        let expected = oracle(&prepared(&h));
        prop_assert_eq!(out.valid == Validity::True, expected, "{:?}", out);
        prop_assert_eq!(expected, valid);
        // In pieces as small as can be: the same, or no verdict and why.
        if let Ok((pieces, _)) = in_pieces(&h, 2) {
            prop_assert_eq!(pieces == Validity::True, expected);
        }
    }
}

/// Twenty acquires at once, every reply lost; each worker then releases
/// (one `ok`, the rest `not-held`), and the first releases again, `ok`:
/// nothing can hold for it the second time. Each shape a generator may
/// write: workers that keep their id, or go on under new ones, with tokens
/// or without (tokenless needs kept ids: nothing else ties a release to
/// its acquire).
#[test]
fn twenty_uncertain_acquires_and_an_extra_release_are_invalid_at_once() {
    for (kept, tokens) in [(true, true), (true, false), (false, true)] {
        let mut h = Hist::new();
        let token = |w: u64| tokens.then(|| format!("t{w}"));
        let later = |w: u64| if kept { w } else { w + 100 };
        for w in 0..20 {
            h.invoke(w, "acquire").token_opt(token(w));
        }
        for w in 0..20 {
            h.info(w, "acquire").token_opt(token(w)).error("timeout");
        }
        for w in 0..20 {
            h.invoke(later(w), "release").token_opt(token(w));
            match w {
                0 => h.ok(later(w), "release").token_opt(token(w)),
                _ => h
                    .fail(later(w), "release")
                    .token_opt(token(w))
                    .error("not-held"),
            };
        }
        h.invoke(later(0), "release").token_opt(token(0));
        h.ok(later(0), "release").token_opt(token(0)); // 81
        let out = run(&h);
        assert_eq!(
            out.valid,
            Validity::False,
            "kept {kept}, tokens {tokens}: {out:?}"
        );
        assert_eq!(out.witness, vec![81]);
        // Decided by pruning, not by trying 2^19 subsets.
        assert!(out.states < 1_000, "{out:?}");
    }
}

/// The search fed `h` as a streamed check feeds it, trying a cut each
/// `every` events: its verdict and how many prefixes it settled and let go,
/// or why the pieces could not decide.
fn in_pieces(h: &History, every: usize) -> Result<(Validity, usize), String> {
    let mut s = stream::Streamed::new(Kept::new(Dialect::Lockstorm), 0);
    s.stream(every);
    h.in_time_order().for_each(|e| s.keep(e));
    let found = s.finish()?;
    let pieces = found.report.details.get("pieces").and_then(|p| p.as_u64());
    Ok((found.report.valid, pieces.map_or(0, |p| p as usize - 1)))
}

/// `cycles` turns of two workers on a correct lock, from `time` on.
fn turns(h: &mut Hist, cycles: u64, tag: &str) {
    for c in 0..cycles {
        let token = format!("{tag}{c}");
        h.acquire(10 + c % 2, &token);
        h.release(10 + c % 2, &token);
    }
}

#[test]
fn a_long_history_is_settled_in_pieces_with_the_verdict_of_the_whole() {
    // The benchmarks' shape: one holder at a time, 2% of releases lost,
    // their workers gone on under new ids.
    for seed in 1..=3 {
        let h = crate::generate::valid_history(seed, 5, 20_000, 20);
        let (valid, cuts) = in_pieces(&h, 1_000).expect("decided in pieces");
        assert_eq!(valid, Validity::True, "seed {seed}");
        // 120 k lock events, a cut tried every thousand.
        assert!(cuts > 100, "seed {seed}: only {cuts} cuts");
    }
}

#[test]
fn an_overlap_in_a_later_piece_is_found_after_cuts() {
    let mut h = Hist::new();
    turns(&mut h, 200, "a");
    h.acquire(1, "x"); // ok 801
    h.acquire(2, "y"); // ok 803
    h.release(1, "x");
    h.release(2, "y");
    turns(&mut h, 200, "b");
    let whole = run(&h);
    assert_eq!(whole.valid, Validity::False);
    let (valid, cuts) = in_pieces(&h.build(), 64).expect("decided in pieces");
    assert_eq!(valid, Validity::False);
    assert!(cuts > 0, "the overlap is past the first cut");
}

#[test]
fn a_process_that_acts_again_after_its_loose_op_was_cut_off_needs_the_whole() {
    // Process 1's release reply is lost, so its release may take effect at
    // any time; the pieces assume process 1 is gone, and it is not.
    let mut h = Hist::new();
    h.acquire(1, "a");
    h.invoke(1, "release").token("a");
    h.info(1, "release").token("a");
    turns(&mut h, 200, "b");
    h.acquire(1, "c");
    h.release(1, "c");
    assert_eq!(run(&h).valid, Validity::True);
    let why = in_pieces(&h.build(), 64).expect_err("the pieces cannot decide");
    assert!(why.contains("process 1 acted again after a cut"), "{why}");
}

/// Small live histories laid end to end, each after a quiet gap with its
/// own processes or the block before's, a fifth with an overlap; ops
/// a block leaves in flight are answered at its end (acquires refused,
/// releases `ok`).
fn blocks(parts: &[(u64, bool, bool, bool)]) -> History {
    use crate::generate::live::{live_history, with_overlap, Live};
    let mut events: Vec<crate::history::Event> = Vec::new();
    for (b, &(seed, tokens, overlap, same_processes)) in parts.iter().enumerate() {
        let shape = Live {
            processes: 3,
            lock_ops: 12,
            info_acquire: 300,
            info_release: 200,
            expiry: 200,
            crash: 100,
            tokens,
        };
        let h = live_history(seed, shape);
        let h = overlap.then(|| with_overlap(&h)).flatten().unwrap_or(h);
        let start = events.last().map_or(0, |e| e.time + 100);
        let shift = if same_processes {
            b.saturating_sub(1)
        } else {
            b
        } as u64
            * 100;
        let mut open = std::collections::BTreeMap::new();
        for mut e in h.events {
            e.time += start;
            if let Process::Client(p) = e.process {
                e.process = Process::Client(p + shift);
            }
            e.token = e.token.map(|t| format!("{b}-{t}"));
            match e.kind {
                OpType::Invoke => open.insert(e.process.clone(), e.clone()),
                _ => open.remove(&e.process),
            };
            events.push(e);
        }
        let end = events.last().map_or(0, |e| e.time + 1);
        for (_, mut e) in open {
            e.kind = if e.f == f::ACQUIRE {
                OpType::Fail
            } else {
                OpType::Ok
            };
            e.time = end;
            events.push(e);
        }
    }
    for (i, e) in events.iter_mut().enumerate() {
        e.index = i as u64;
    }
    History::new(events)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    /// Blocks with room between them for cuts: in pieces, the verdict of
    /// the whole search, or no verdict and why.
    #[test]
    fn pieces_agree_with_the_whole(
        parts in prop::collection::vec(
            (any::<u64>(), any::<bool>(), prop::bool::weighted(0.2), any::<bool>()),
            2..6,
        ),
        every in 1..8usize,
    ) {
        let h = blocks(&parts);
        let whole = check(&h, Budget::default());
        prop_assume!(whole.valid != Validity::Unknown);
        if let Ok((pieces, _)) = in_pieces(&h, every) {
            prop_assert_eq!(pieces, whole.valid);
        }
    }
}
