//! Shards back into one matrix. `matrix --shard K/N` on N runners writes N
//! `matrix-*` folders whose summaries name the whole matrix they are part of
//! (its pairs in order, seed, time limit, runs per pair); once the N folders
//! are gathered in one results folder, `lockstorm report` calls [`merge`],
//! which writes `matrix-<first start>-merged-<n>/` with the summary, the
//! table and the grid the unsharded matrix would have written. A set that
//! cannot be merged (a shard missing, one K in two folders) is said, one
//! line a set ([`Unmerged`]): a lost shard must not vanish from the report.

use crate::folder::write_matrix;
use std::collections::BTreeMap;
use std::path::Path;
use store::matrix::{ShardOf, Summary};

/// What identifies a whole matrix across its shards.
type Whole = (Vec<String>, u64, u64, u32, u32);
/// One matrix's shard summaries by K, each with its folder.
type ByK = BTreeMap<u32, Vec<(String, Summary)>>;

/// One matrix's shards that were not merged, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Unmerged {
    whole: Whole,
    /// Each K found, with the folders that hold it (two or more: the same
    /// shard twice, and no telling which is the matrix's).
    pub present: BTreeMap<u32, Vec<String>>,
    /// Each K not found, with the folders that hold that K of another
    /// matrix of as many shards, and how that matrix differs.
    pub missing: BTreeMap<u32, Vec<(String, String)>>,
}

impl std::fmt::Display for Unmerged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (pairs, seed, limit, runs, n) = &self.whole;
        let span = match (pairs.first(), pairs.last()) {
            (Some(first), Some(last)) if pairs.len() > 1 => format!(" ({first} … {last})"),
            (Some(only), _) => format!(" ({only})"),
            _ => String::new(),
        };
        write!(
            f,
            "the shards of the matrix of {} pair(s){span} with seed {seed}, {limit} s a run, {runs} run(s) a pair were not merged:",
            pairs.len()
        )?;
        let mut parts = Vec::new();
        for (k, folders) in &self.present {
            parts.push(match folders.len() {
                1 => format!("{k}/{n} is in {}", folders[0]),
                _ => format!(
                    "{k}/{n} is in {} folders ({}), the same shard run twice: remove the one that does not belong",
                    folders.len(),
                    folders.join(", ")
                ),
            });
        }
        for (k, others) in &self.missing {
            let mut part = format!("{k}/{n} is missing");
            if !others.is_empty() {
                let others: Vec<String> = others
                    .iter()
                    .map(|(rel, differs)| {
                        format!("{rel} is the {k}/{n} of another matrix: {differs}")
                    })
                    .collect();
                part.push_str(&format!(" ({})", others.join("; ")));
            }
            parts.push(part);
        }
        write!(f, " {}", parts.join("; "))
    }
}

/// How matrix `theirs` differs from `ours`, for a reader: what is not the same.
fn differs(ours: &Whole, theirs: &Whole) -> String {
    let (pairs, seed, limit, runs, _) = ours;
    let (their_pairs, their_seed, their_limit, their_runs, _) = theirs;
    let mut what = Vec::new();
    if their_pairs != pairs {
        what.push(match their_pairs.len() == pairs.len() {
            true => "other pairs".to_string(),
            false => format!("{} pair(s), not {}", their_pairs.len(), pairs.len()),
        });
    }
    if their_seed != seed {
        what.push(format!("seed {their_seed}, not {seed}"));
    }
    if their_limit != limit {
        what.push(format!("{their_limit} s a run, not {limit}"));
    }
    if their_runs != runs {
        what.push(format!("{their_runs} run(s) a pair, not {runs}"));
    }
    what.join(", ")
}

/// What [`sets`] made of the shards it was given.
#[derive(Debug, Default)]
pub struct Sets {
    /// One summary per complete set.
    pub merged: Vec<Summary>,
    /// The sets that are not complete, or claim a K twice.
    pub unmerged: Vec<Unmerged>,
}

fn whole(summary: &Summary, shard: &ShardOf) -> Whole {
    (
        shard.pairs.clone(),
        summary.seed,
        summary.time_limit_s,
        summary.runs_per_pair,
        shard.shard.n,
    )
}

/// Merges complete sets of shards (exactly one summary per K of N) into one
/// summary each, with the folders (relative to the results folder) they
/// came from; says why each other set was not. A K in two folders is not
/// merged either: a shard run again may have found what the first run did
/// not (verdicts depend on timing), and keeping either silently would hide
/// the other. Pure.
pub fn sets(shards: Vec<(String, Summary)>) -> Sets {
    let mut groups: BTreeMap<Whole, ByK> = BTreeMap::new();
    for (rel, summary) in shards {
        let Some(shard) = summary.shard.clone() else {
            continue;
        };
        let by_k = groups.entry(whole(&summary, &shard)).or_default();
        by_k.entry(shard.shard.k).or_default().push((rel, summary));
    }
    let complete = |(whole, by_k): (&Whole, &ByK)| {
        by_k.len() == whole.4 as usize
            && (1..=whole.4).all(|k| by_k.get(&k).is_some_and(|found| found.len() == 1))
    };
    let (whole_sets, broken): (Vec<_>, Vec<_>) = groups.iter().partition(|g| complete(*g));
    let mut out = Sets::default();
    for (_, by_k) in whole_sets {
        let parts = by_k.values().map(|found| found[0].clone()).collect();
        out.merged.push(combine(parts));
    }
    for &(whole, by_k) in &broken {
        let n = whole.4;
        let missing = (1..=n)
            .filter(|k| !by_k.contains_key(k))
            .map(|k| {
                // Where the missing shard may have gone: the same K of
                // another broken set (a merged set's shards are its own).
                let elsewhere = broken
                    .iter()
                    .filter(|(other, _)| *other != whole && other.4 == n)
                    .flat_map(|(other, their)| {
                        their
                            .get(&k)
                            .into_iter()
                            .flatten()
                            .map(|(rel, _)| (rel.clone(), differs(whole, other)))
                    })
                    .collect();
                (k, elsewhere)
            })
            .collect();
        out.unmerged.push(Unmerged {
            whole: whole.clone(),
            present: by_k
                .iter()
                .map(|(k, found)| (*k, found.iter().map(|(rel, _)| rel.clone()).collect()))
                .collect(),
            missing,
        });
    }
    out
}

/// One summary from all the shards of one matrix.
fn combine(parts: Vec<(String, Summary)>) -> Summary {
    let first = &parts[0].1;
    let mut merged = Summary {
        started: parts
            .iter()
            .map(|(_, s)| s.started.clone())
            .min()
            .unwrap_or_default(),
        // The shards ran side by side: the matrix took as long as the slowest.
        wall_s: parts.iter().map(|(_, s)| s.wall_s).fold(0.0, f64::max),
        time_limit_s: first.time_limit_s,
        runs_per_pair: first.runs_per_pair,
        seed: first.seed,
        expect: first.expect.clone(),
        interrupted: parts.iter().any(|(_, s)| s.interrupted),
        until_invalid: first.until_invalid,
        merged_from: parts.iter().map(|(rel, _)| rel.clone()).collect(),
        ..Summary::default()
    };
    for (_, part) in &parts {
        merged.rows.extend(part.rows.iter().cloned());
        merged.skipped.extend(part.skipped.iter().cloned());
        merged.missing.extend(part.missing.iter().cloned());
    }
    merged.rows.sort_by_key(|r| r.pair);
    let verdicts: Vec<Option<bool>> = parts.iter().map(|(_, s)| s.ok).collect();
    merged.ok = match verdicts.iter().all(Option::is_none) {
        true => None,
        false => Some(verdicts.iter().all(|ok| *ok == Some(true))),
    };
    merged
}

/// The folder a merged matrix is written to.
pub fn folder(merged: &Summary) -> String {
    format!(
        "matrix-{}-merged-{}",
        merged.started,
        merged.merged_from.len()
    )
}

/// Reads every shard summary under `root`, merges the complete sets and
/// writes each as a matrix folder. Returns the folders written, and the
/// sets that were not merged.
pub fn merge(root: &Path, matrices: &[String]) -> store::Result<(Vec<String>, Vec<Unmerged>)> {
    let shards: Vec<(String, Summary)> = matrices
        .iter()
        .filter_map(|rel| {
            let summary = Summary::read(&root.join(rel)).ok()?;
            summary.shard.is_some().then(|| (rel.clone(), summary))
        })
        .collect();
    let sets = sets(shards);
    let mut written = Vec::new();
    for merged in sets.merged {
        let rel = folder(&merged);
        let dir = root.join(&rel);
        std::fs::create_dir_all(&dir).map_err(|e| store::Error::Io {
            context: format!("creating {}", dir.display()),
            source: e,
        })?;
        write_matrix(&dir, &merged)?;
        written.push(rel);
    }
    Ok((written, sets.unmerged))
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::matrix::Row;
    use store::shard::Shard;

    fn shard(k: u32, n: u32, started: &str, rows: &[(usize, &str)]) -> (String, Summary) {
        let pairs: Vec<String> = (0..5).map(|i| format!("c{i} × none")).collect();
        let summary = Summary {
            started: started.into(),
            wall_s: f64::from(k) * 10.0,
            seed: 1,
            time_limit_s: 10,
            runs_per_pair: 1,
            ok: Some(true),
            rows: rows
                .iter()
                .map(|&(pair, config)| Row {
                    pair,
                    ..Row::new(config, "none")
                })
                .collect(),
            shard: Some(ShardOf {
                shard: Shard { k, n },
                pairs,
            }),
            ..Summary::default()
        };
        (format!("matrix-{started}"), summary)
    }

    #[test]
    fn complete_sets_merge_in_the_whole_matrix_order() {
        let one = shard(1, 2, "20261201T010000", &[(0, "c0"), (2, "c2"), (4, "c4")]);
        let two = shard(2, 2, "20261201T010005", &[(1, "c1"), (3, "c3")]);
        let sets = sets(vec![two, one]);
        assert!(sets.unmerged.is_empty(), "{:?}", sets.unmerged);
        let merged = sets.merged;
        assert_eq!(merged.len(), 1);
        let m = &merged[0];
        let order: Vec<&str> = m.rows.iter().map(|r| r.config.as_str()).collect();
        assert_eq!(order, ["c0", "c1", "c2", "c3", "c4"]);
        assert_eq!(
            (m.started.as_str(), m.wall_s, m.ok),
            ("20261201T010000", 20.0, Some(true))
        );
        assert_eq!(m.shard, None);
        assert_eq!(
            m.merged_from,
            ["matrix-20261201T010000", "matrix-20261201T010005"]
        );
        assert_eq!(folder(m), "matrix-20261201T010000-merged-2");
    }

    #[test]
    fn a_failed_shard_fails_the_merge() {
        let one = shard(1, 3, "20261201T010000", &[(0, "c0")]);
        let two = shard(2, 3, "20261201T010001", &[(1, "c1")]);
        let mut three = shard(3, 3, "20261201T010002", &[(2, "c2")]);
        three.1.ok = Some(false);
        assert_eq!(sets(vec![one, two, three]).merged[0].ok, Some(false));
    }

    #[test]
    fn an_incomplete_set_is_not_merged_and_says_which_shard_is_missing() {
        let one = shard(1, 3, "20261201T010000", &[(0, "c0")]);
        let three = shard(3, 3, "20261201T010002", &[(2, "c2")]);
        let sets = sets(vec![three, one]);
        assert!(sets.merged.is_empty());
        let [unmerged] = &sets.unmerged[..] else {
            panic!("{:?}", sets.unmerged)
        };
        assert_eq!(unmerged.missing, BTreeMap::from([(2, vec![])]));
        assert_eq!(unmerged.present.keys().copied().collect::<Vec<_>>(), [1, 3]);
        assert_eq!(
            unmerged.to_string(),
            "the shards of the matrix of 5 pair(s) (c0 × none … c4 × none) with seed 1, \
             10 s a run, 1 run(s) a pair were not merged: 1/3 is in matrix-20261201T010000; \
             3/3 is in matrix-20261201T010002; 2/3 is missing"
        );
    }

    #[test]
    fn a_shard_in_two_folders_is_not_merged_and_both_are_named() {
        let old = shard(1, 2, "20261201T010000", &[(0, "old")]);
        let new = shard(1, 2, "20261202T010000", &[(0, "new")]);
        let two = shard(2, 2, "20261201T010000", &[(1, "c1")]);
        let sets = sets(vec![new, old, two]);
        assert!(sets.merged.is_empty(), "{:?}", sets.merged);
        let [unmerged] = &sets.unmerged[..] else {
            panic!("{:?}", sets.unmerged)
        };
        assert!(unmerged.missing.is_empty());
        assert_eq!(
            unmerged.present[&1],
            ["matrix-20261202T010000", "matrix-20261201T010000"]
        );
        let line = unmerged.to_string();
        assert!(
            line.contains(
                "1/2 is in 2 folders (matrix-20261202T010000, matrix-20261201T010000), \
                 the same shard run twice: remove the one that does not belong; \
                 2/2 is in matrix-20261201T010000"
            ),
            "{line}"
        );
    }

    #[test]
    fn shards_of_different_matrices_say_how_the_other_differs() {
        let one = shard(1, 2, "20261201T010000", &[(0, "c0")]);
        let mut other = shard(2, 2, "20261201T020000", &[(1, "c1")]);
        other.1.seed = 2;
        other.1.time_limit_s = 30;
        // A complete set beside them still merges.
        let mut a = shard(1, 2, "20261203T010000", &[(0, "c0")]);
        let mut b = shard(2, 2, "20261203T010001", &[(1, "c1")]);
        a.1.seed = 9;
        b.1.seed = 9;
        let sets = sets(vec![one, other, a, b]);
        assert_eq!(sets.merged.len(), 1);
        assert_eq!(sets.merged[0].seed, 9);
        assert_eq!(sets.unmerged.len(), 2, "{:?}", sets.unmerged);
        let lines: Vec<String> = sets.unmerged.iter().map(|u| u.to_string()).collect();
        for (seed, end) in [
            (
                1,
                "2/2 is missing (matrix-20261201T020000 is the 2/2 of another matrix: \
                 seed 2, not 1, 30 s a run, not 10)",
            ),
            (
                2,
                "1/2 is missing (matrix-20261201T010000 is the 1/2 of another matrix: \
                 seed 1, not 2, 10 s a run, not 30)",
            ),
        ] {
            let set = format!("with seed {seed},");
            let line = lines.iter().find(|l| l.contains(&set)).unwrap();
            assert!(line.ends_with(end), "{line}");
        }
    }
}
