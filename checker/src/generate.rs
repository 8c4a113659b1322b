//! Histories of a correct lock, generated from a seed: workers take turns
//! (acquire → read → write → release) with some outcomes unknown, fencing
//! tokens rising with each grant. For
//! benchmarks and property tests; every checker must find nothing in them.

use crate::history::{f, Event, History, OpType, Process};

/// A small deterministic generator (SplitMix64), so this pure crate needs no
/// RNG dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// `cycles` lock cycles by `processes` workers, one holder at a time; while a
/// worker holds the lock the others' acquires fail. `info_per_mille` of the
/// releases are `info` (the worker then goes on under a new process id).
pub fn valid_history(seed: u64, processes: u64, cycles: u64, info_per_mille: u64) -> History {
    let mut rng = Rng(seed);
    let mut gaps = Rng(seed ^ 0x5EED);
    let mut events = Vec::new();
    let mut time = 0u64;
    let mut ids: Vec<u64> = (0..processes).collect();
    let mut counter = 0i64;
    let mut push = |events: &mut Vec<Event>, time: &mut u64, p: u64, kind: OpType, op: &str| {
        *time += 1 + gaps.next() % 1_000;
        let mut e = Event::new(*time, Process::Client(p), kind, op);
        e.index = events.len() as u64;
        events.push(e);
        events.len() - 1
    };
    for cycle in 0..cycles {
        let w = (cycle % processes) as usize;
        let p = ids[w];
        let token = format!("{p}-{cycle}");
        // A contender tries and is refused while the holder works.
        let other = ids[(w + 1) % processes as usize];
        let i = push(&mut events, &mut time, p, OpType::Invoke, f::ACQUIRE);
        events[i].token = Some(token.clone());
        let i = push(&mut events, &mut time, p, OpType::Ok, f::ACQUIRE);
        events[i].token = Some(token.clone());
        let fence = Some(cycle + 1);
        events[i].fence = fence;
        if processes > 1 {
            push(&mut events, &mut time, other, OpType::Invoke, f::ACQUIRE);
        }
        let i = push(&mut events, &mut time, p, OpType::Invoke, f::READ);
        events[i].fence = fence;
        let i = push(&mut events, &mut time, p, OpType::Ok, f::READ);
        events[i].value = counter.into();
        events[i].fence = fence;
        counter += 1;
        for kind in [OpType::Invoke, OpType::Ok] {
            let i = push(&mut events, &mut time, p, kind, f::WRITE);
            events[i].value = counter.into();
            events[i].fence = fence;
        }
        let i = push(&mut events, &mut time, p, OpType::Invoke, f::RELEASE);
        events[i].token = Some(token.clone());
        let outcome = if rng.chance(info_per_mille) {
            OpType::Info
        } else {
            OpType::Ok
        };
        let i = push(&mut events, &mut time, p, outcome, f::RELEASE);
        events[i].token = Some(token);
        if processes > 1 {
            let i = push(&mut events, &mut time, other, OpType::Fail, f::ACQUIRE);
            events[i].error = Some("lock-busy".into());
        }
        if outcome == OpType::Info {
            ids[w] += processes;
        }
    }
    let i = push(&mut events, &mut time, 0, OpType::Invoke, f::READ);
    events[i].process = Process::harness();
    let i = push(&mut events, &mut time, 0, OpType::Ok, f::READ);
    events[i].process = Process::harness();
    events[i].value = counter.into();
    History::new(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_history() {
        assert_eq!(valid_history(7, 3, 50, 100), valid_history(7, 3, 50, 100));
        assert_ne!(valid_history(7, 3, 50, 100), valid_history(8, 3, 50, 100));
    }
}
