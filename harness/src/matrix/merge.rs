//! Shards back into one matrix. `matrix --shard K/N` on N runners writes N
//! `matrix-*` folders whose summaries name the whole matrix they are part of
//! (its pairs in order, seed, time limit, runs per pair); once the N folders
//! are gathered in one results folder, `lockstorm report` calls [`merge`],
//! which writes `matrix-<first start>-merged-<n>/` with the summary, the
//! table and the grid the unsharded matrix would have written.

use super::summary::{ShardOf, Summary};
use std::collections::BTreeMap;
use std::path::Path;

/// What identifies a whole matrix across its shards.
type Whole = (Vec<String>, u64, u64, u32, u32);

fn whole(summary: &Summary, shard: &ShardOf) -> Whole {
    (
        shard.pairs.clone(),
        summary.seed,
        summary.time_limit_s,
        summary.runs_per_pair,
        shard.shard.n,
    )
}

/// Merges complete sets of shards (one summary per K of N; where a K was
/// run more than once, its newest) into one summary each, with the
/// folders (relative to the results folder) they came from. Pure.
pub fn sets(shards: Vec<(String, Summary)>) -> Vec<Summary> {
    let mut groups: BTreeMap<Whole, BTreeMap<u32, (String, Summary)>> = BTreeMap::new();
    for (rel, summary) in shards {
        let Some(shard) = summary.shard.clone() else {
            continue;
        };
        let by_k = groups.entry(whole(&summary, &shard)).or_default();
        let newer = by_k
            .get(&shard.shard.k)
            .is_none_or(|(_, have)| have.started < summary.started);
        if newer {
            by_k.insert(shard.shard.k, (rel, summary));
        }
    }
    groups
        .into_iter()
        .filter(|((_, _, _, _, n), by_k)| by_k.len() == *n as usize)
        .map(|(_, by_k)| combine(by_k.into_values().collect()))
        .collect()
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
/// writes each as a matrix folder. Returns the folders written.
pub fn merge(root: &Path, matrices: &[String]) -> crate::Result<Vec<String>> {
    let shards: Vec<(String, Summary)> = matrices
        .iter()
        .filter_map(|rel| {
            let summary: Summary =
                crate::store::read_json(&root.join(rel).join(super::SUMMARY_JSON)).ok()?;
            summary.shard.is_some().then(|| (rel.clone(), summary))
        })
        .collect();
    let mut written = Vec::new();
    for merged in sets(shards) {
        let rel = folder(&merged);
        let dir = root.join(&rel);
        std::fs::create_dir_all(&dir).map_err(|e| crate::Error::Io {
            context: format!("creating {}", dir.display()),
            source: e,
        })?;
        super::write(&dir, &merged)?;
        written.push(rel);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::super::shard::Shard;
    use super::super::summary::Row;
    use super::*;

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
        let merged = sets(vec![two, one]);
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
    fn an_incomplete_set_is_not_merged_and_a_failed_shard_fails_the_merge() {
        let one = shard(1, 3, "20261201T010000", &[(0, "c0")]);
        let two = shard(2, 3, "20261201T010000", &[(1, "c1")]);
        assert!(sets(vec![one.clone(), two.clone()]).is_empty());
        let mut three = shard(3, 3, "20261201T010000", &[(2, "c2")]);
        three.1.ok = Some(false);
        assert_eq!(sets(vec![one, two, three])[0].ok, Some(false));
    }

    #[test]
    fn a_shard_run_twice_counts_once_its_newest() {
        let old = shard(1, 2, "20261201T010000", &[(0, "old")]);
        let new = shard(1, 2, "20261202T010000", &[(0, "new")]);
        let two = shard(2, 2, "20261201T010000", &[(1, "c1")]);
        let merged = sets(vec![new, old, two]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].rows[0].config, "new");
    }
}
