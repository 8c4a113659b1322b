//! Zeller's delta debugging (ddmin), pure: the smallest subsequence of a
//! failing input that still fails, where "fails" is whatever the caller's
//! test says. The input is assumed to fail; the empty input is never tried
//! (a run that asks for faults and injects none tests nothing). A subset is
//! tested once: the answer is remembered. Each test may also say stop (a
//! budget spent, a signal), and the search returns the smallest failing
//! input it has found so far.

use std::collections::HashMap;

/// What one test of a candidate said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The candidate still breaks the promise.
    Fails,
    /// It did not, in every try it was given.
    Passes,
    /// Stop searching: no answer for this candidate.
    Stop,
}

/// The search's answer: the smallest failing input found, and whether it
/// was cut short (then a smaller one may exist).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Minimal<T> {
    pub kept: Vec<T>,
    pub stopped: bool,
}

/// ddmin over `items` (which fail): splits the current input into `n`
/// chunks, tries each chunk, then each complement, and keeps the first that
/// fails; with none, it splits finer, until chunks are single items.
pub fn ddmin<T: Clone>(items: &[T], mut test: impl FnMut(&[T]) -> Verdict) -> Minimal<T> {
    let mut current: Vec<usize> = (0..items.len()).collect();
    let mut seen: HashMap<Vec<usize>, Verdict> = HashMap::new();
    let mut ask = |subset: &[usize]| -> Verdict {
        if let Some(v) = seen.get(subset) {
            return *v;
        }
        let candidate: Vec<T> = subset.iter().map(|&i| items[i].clone()).collect();
        let v = test(&candidate);
        if v != Verdict::Stop {
            seen.insert(subset.to_vec(), v);
        }
        v
    };
    let mut n = 2;
    let mut stopped = false;
    'search: while current.len() >= 2 {
        let chunks = split(&current, n);
        let complements: Vec<Vec<usize>> = (0..chunks.len())
            .map(|skip| {
                let rest = chunks.iter().enumerate().filter(|(i, _)| *i != skip);
                rest.flat_map(|(_, c)| c.iter().copied()).collect()
            })
            .collect();
        for chunk in &chunks {
            match ask(chunk) {
                Verdict::Fails => {
                    current = chunk.clone();
                    n = 2;
                    continue 'search;
                }
                Verdict::Stop => {
                    stopped = true;
                    break 'search;
                }
                Verdict::Passes => {}
            }
        }
        // With two chunks each complement is the other chunk: tried above.
        if chunks.len() > 2 {
            for complement in &complements {
                match ask(complement) {
                    Verdict::Fails => {
                        current = complement.clone();
                        n = (n - 1).max(2);
                        continue 'search;
                    }
                    Verdict::Stop => {
                        stopped = true;
                        break 'search;
                    }
                    Verdict::Passes => {}
                }
            }
        }
        if n >= current.len() {
            break;
        }
        n = (n * 2).min(current.len());
    }
    Minimal {
        kept: current.iter().map(|&i| items[i].clone()).collect(),
        stopped,
    }
}

/// `items` in `n` contiguous chunks as even as they come (the first ones
/// one longer).
fn split(items: &[usize], n: usize) -> Vec<Vec<usize>> {
    let (len, n) = (items.len(), n.min(items.len()));
    let mut chunks = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let size = len / n + usize::from(i < len % n);
        chunks.push(items[start..start + size].to_vec());
        start += size;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails when every one of `needed` is in the candidate.
    fn needs(needed: &[u32]) -> impl Fn(&[u32]) -> Verdict + '_ {
        move |c| match needed.iter().all(|n| c.contains(n)) {
            true => Verdict::Fails,
            false => Verdict::Passes,
        }
    }

    #[test]
    fn one_culprit_among_many_is_found() {
        let items: Vec<u32> = (0..8).collect();
        let mut tests = 0;
        let found = ddmin(&items, |c| {
            tests += 1;
            needs(&[5])(c)
        });
        assert_eq!(
            found,
            Minimal {
                kept: vec![5],
                stopped: false
            }
        );
        assert!(tests <= 8, "{tests} tests");
    }

    #[test]
    fn two_culprits_apart_are_both_kept_in_order() {
        let items: Vec<u32> = (0..10).collect();
        let found = ddmin(&items, needs(&[2, 7]));
        assert_eq!(found.kept, vec![2, 7]);
        let found = ddmin(&items, needs(&[1, 2, 9]));
        assert_eq!(found.kept, vec![1, 2, 9]);
    }

    #[test]
    fn a_single_item_or_an_input_that_needs_all_stays_whole() {
        let mut tests = 0;
        let found = ddmin(&[4u32], |_| {
            tests += 1;
            Verdict::Fails
        });
        assert_eq!((found.kept, tests), (vec![4], 0));
        let items = [1u32, 2, 3];
        assert_eq!(ddmin(&items, needs(&items)).kept, items);
    }

    #[test]
    fn no_candidate_is_tested_twice() {
        let items: Vec<u32> = (0..9).collect();
        let mut tried: Vec<Vec<u32>> = Vec::new();
        ddmin(&items, |c| {
            assert!(!tried.contains(&c.to_vec()), "{c:?} again");
            tried.push(c.to_vec());
            needs(&[0, 4, 8])(c)
        });
    }

    #[test]
    fn a_stop_keeps_the_smallest_failure_so_far() {
        let items: Vec<u32> = (0..8).collect();
        let mut budget = 1;
        let found = ddmin(&items, |c| {
            if budget == 0 {
                return Verdict::Stop;
            }
            budget -= 1;
            needs(&[1])(c)
        });
        // The first half failed (it holds 1); then the budget was spent.
        assert_eq!(
            found,
            Minimal {
                kept: vec![0, 1, 2, 3],
                stopped: true
            }
        );
    }
}
