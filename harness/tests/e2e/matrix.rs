//! `lockstorm matrix` on real nodes: the expectations decide the exit code,
//! pairs that do not apply are skipped and listed, bad input stops it before
//! anything starts.

use crate::common;

use common::{assert_no_process_left, lockstorm};
use std::path::{Path, PathBuf};

fn matrix(results: &Path, expect: &str, extra: &[&str]) -> (common::Run, PathBuf) {
    let file = results.join("expect.toml");
    std::fs::write(&file, expect).unwrap();
    let mut args = vec![
        "matrix",
        "--configs",
        "single",
        "--nemeses",
        "none,failover",
        "--time-limit",
        "3",
        "--results",
        results.to_str().unwrap(),
        "--expect",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let run = lockstorm(&args);
    assert_no_process_left(results);
    let dir = matrix_folders(results)
        .pop()
        .unwrap_or_else(|| panic!("no matrix folder:\n{}\n{}", run.stdout, run.stderr));
    (run, dir)
}

/// The `matrix-*` folders in `results`, oldest first.
fn matrix_folders(results: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("matrix-")
        })
        .collect();
    found.sort();
    found
}

/// The one run folder in a pair's group (a matrix cell moves no `latest`).
fn only_run(group: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(group)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

#[test]
fn the_expectations_decide_the_exit_code() {
    let tmp = common::tmp();
    // single × none is valid: expecting it invalid must fail the matrix, as
    // a negative control that stopped being caught would.
    let (run, dir) = matrix(tmp.path(), "[single]\nnone = \"invalid\"\n", &[]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["ok"], false);
    let rows = summary["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{summary}");
    assert_eq!(
        (rows[0]["valid"].as_u64(), rows[0]["matches"].as_bool()),
        (Some(1), Some(false))
    );
    // The run folder it names exists, relative to the results folder.
    let run_dir = tmp.path().join(rows[0]["run_dirs"][0].as_str().unwrap());
    assert!(run_dir.join("results.json").is_file(), "{run_dir:?}");
    let skipped = &summary["skipped"][0];
    assert_eq!(skipped["nemesis"], "failover");
    assert!(
        skipped["reason"].as_str().unwrap().contains("replicas"),
        "{skipped}"
    );
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        md.contains("NOT met") && md.contains("| single | none | 1 | VALID | invalid | **✗** |"),
        "{md}"
    );
    for picture in ["comparison.svg", "comparison.png"] {
        assert!(dir.join(picture).is_file(), "no {picture}");
    }

    // A matrix cell is not the user's run: it leaves `latest` where the
    // user's own last run put it (here, none made one).
    assert!(
        !tmp.path().join("single-none/latest").exists(),
        "a matrix cell moved the user's latest link"
    );
    let (run, _) = matrix(tmp.path(), "[single]\nnone = \"valid\"\n", &["--runs", "2"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("[2/2] single × none (seed 2)"),
        "{}",
        run.stdout
    );
}

#[test]
fn bad_input_is_one_line_and_starts_nothing() {
    let tmp = common::tmp();
    let results = tmp.path().to_str().unwrap();
    for (args, needle) in [
        (vec!["--configs", "single,fencd"], "fencd"),
        (vec!["--nemeses", "pause,explode"], "explode"),
        (vec!["--runs", "0"], "--runs 0"),
        (vec!["--shard", "3/2"], "K/N"),
        (
            vec!["--configs", "single", "--nemeses", "none", "--shard", "2/2"],
            "no pair",
        ),
        (vec!["--expect", "/nonexistent/expect.toml"], "expect.toml"),
    ] {
        let mut all = vec!["matrix", "--results", results];
        all.extend(args);
        let run = lockstorm(&all);
        assert_eq!(run.code, 254, "{all:?}: {}", run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{all:?}: {}", run.stderr);
        assert!(lines[0].contains(needle), "{all:?}: {}", run.stderr);
    }
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "[single]\npause = \"safe\"\n").unwrap();
    let run = lockstorm(&[
        "matrix",
        "--results",
        results,
        "--expect",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 254, "{}", run.stderr);
    assert!(
        run.stderr.contains("safe") && run.stderr.lines().count() == 1,
        "{}",
        run.stderr
    );
    // Nothing ran: no matrix folder, no run folder.
    let made: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "bad.toml")
        .collect();
    assert!(made.is_empty(), "{made:?}");
}

/// What [`small_matrix`] holds its pairs to.
const SMALL_EXPECT: &str = "[single]\nnone = \"valid\"\n[no-lock]\nnone = \"invalid\"\n\
                            [unsafe-key-per-worker]\nnone = \"invalid\"\n";

/// `lockstorm matrix` of `configs` × none, 2 s a run with seed `seed`, into
/// `results`, held to [`SMALL_EXPECT`]: every expectation must be met.
fn small_matrix(results: &Path, configs: &str, seed: &str, extra: &[&str]) -> common::Run {
    let file = results.join("expect.toml");
    std::fs::write(&file, SMALL_EXPECT).unwrap();
    let (results, file) = (results.to_str().unwrap(), file.to_str().unwrap());
    let mut args = vec![
        "matrix",
        "--configs",
        configs,
        "--nemeses",
        "none",
        "--time-limit",
        "2",
        "--seed",
        seed,
        "--results",
        results,
        "--expect",
        file,
    ];
    args.extend_from_slice(extra);
    let run = lockstorm(&args);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    run
}

/// The matrix in two shards, gathered in one results folder and merged by
/// `lockstorm report`, gives the unsharded matrix's rows (same pairs, same
/// order, same seeds, same verdicts against the same expectations). The
/// unsharded one runs its three cells at once, the shards one at a time:
/// `--jobs` changes no verdict either.
#[test]
fn two_shards_merge_into_the_unsharded_matrix() {
    let args = |results: &Path, shard: Option<&str>, extra: &[&str]| {
        let mut all = extra.to_vec();
        if let Some(shard) = shard {
            all.extend(["--shard", shard]);
        }
        small_matrix(results, "single,no-lock,unsafe-key-per-worker", "5", &all)
    };
    let summary = |dir: PathBuf| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
    };
    // The verdict columns: timing makes counts and rates differ run to run.
    let verdicts = |s: &serde_json::Value| -> Vec<String> {
        s["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let f = |k: &str| r[k].to_string();
                [
                    f("pair"),
                    f("config"),
                    f("nemesis"),
                    f("runs"),
                    f("valid"),
                    f("invalid"),
                    f("unknown"),
                    f("expected"),
                    f("matches"),
                ]
                .join(" ")
            })
            .collect()
    };

    let whole = common::tmp();
    let at_once = args(whole.path(), None, &["--jobs", "3"]);
    assert!(at_once.stdout.contains("3 at once"), "{}", at_once.stdout);
    let unsharded = summary(matrix_folders(whole.path()).remove(0));

    let sharded = common::tmp();
    let first = args(sharded.path(), Some("1/2"), &[]);
    assert!(
        first
            .stdout
            .contains("2 pair(s) (shard 1/2 of the 3 pair(s))"),
        "{}",
        first.stdout
    );
    args(sharded.path(), Some("2/2"), &[]);
    let shards = matrix_folders(sharded.path());
    assert_eq!(shards.len(), 2);
    let rows = |s: serde_json::Value| s["rows"].as_array().unwrap().len();
    assert_eq!(
        rows(summary(shards[0].clone())) + rows(summary(shards[1].clone())),
        3
    );

    let report = lockstorm(&["report", sharded.path().to_str().unwrap()]);
    assert_eq!(report.code, 0, "{}\n{}", report.stdout, report.stderr);
    let merged_dir = matrix_folders(sharded.path())
        .into_iter()
        .find(|p| p.to_string_lossy().contains("-merged-2"))
        .expect("a merged matrix folder");
    let merged = summary(merged_dir.clone());
    assert_eq!(verdicts(&merged), verdicts(&unsharded));
    assert_eq!(merged["ok"], true);
    assert_eq!(merged["merged_from"].as_array().unwrap().len(), 2);
    for file in ["summary.md", "comparison.svg", "comparison.png"] {
        assert!(merged_dir.join(file).is_file(), "no {file}");
    }
    let index = std::fs::read_to_string(sharded.path().join("index.html")).unwrap();
    assert!(
        index.contains("-merged-2"),
        "the index does not list the merged matrix"
    );
}

/// Shards that do not make a whole matrix are said, one line a set, and
/// make `report` exit 254 once the page is written; a complete set beside
/// them still merges. In one results folder: seed 5's two shards (whole),
/// seed 6's shard 1/2 run twice (duplicated, and 2/2 missing), and seed 7's
/// shard 2/2 (1/2 missing: the 1/2 here is of another matrix).
#[test]
fn shards_that_do_not_make_a_matrix_are_named_and_fail_the_report() {
    let tmp = common::tmp();
    let results = tmp.path();
    let shard =
        |seed: &str, k: &str| small_matrix(results, "single,no-lock", seed, &["--shard", k]);
    shard("5", "1/2");
    shard("5", "2/2");
    shard("6", "1/2");
    shard("6", "1/2");
    shard("7", "2/2");
    // Each shard's folder by its seed and K.
    let mut folders: Vec<(u64, u64, String)> = matrix_folders(results)
        .into_iter()
        .map(|dir| {
            let s: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                    .unwrap();
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            (
                s["seed"].as_u64().unwrap(),
                s["shard"]["shard"]["k"].as_u64().unwrap(),
                name,
            )
        })
        .collect();
    folders.sort();
    let of = |seed: u64, k: u64| -> Vec<&str> {
        folders
            .iter()
            .filter(|(s, kk, _)| (*s, *kk) == (seed, k))
            .map(|(_, _, name)| name.as_str())
            .collect()
    };
    let (twice, other) = (of(6, 1), of(7, 2));
    assert_eq!((twice.len(), other.len()), (2, 1), "{folders:?}");

    let report = lockstorm(&["report", results.to_str().unwrap()]);
    assert_eq!(report.code, 254, "{}\n{}", report.stdout, report.stderr);
    let lines: Vec<&str> = report.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "two sets, then the count:\n{}",
        report.stderr
    );
    let set = |seed: &str| {
        let head = format!(
            "lockstorm report: the shards of the matrix of 2 pair(s) (single × none … no-lock × none) \
             with seed {seed}, 2 s a run, 1 run(s) a pair were not merged: "
        );
        let line = lines.iter().find(|l| l.starts_with(&head));
        line.unwrap_or_else(|| panic!("no line for seed {seed}:\n{}", report.stderr))[head.len()..]
            .to_string()
    };
    let mut twice_sorted = twice.clone();
    twice_sorted.sort();
    assert_eq!(
        set("6"),
        format!(
            "1/2 is in 2 folders ({}), the same shard run twice: remove the one that does not \
             belong; 2/2 is missing ({} is the 2/2 of another matrix: seed 7, not 6)",
            twice_sorted.join(", "),
            other[0]
        )
    );
    assert_eq!(
        set("7"),
        format!(
            "2/2 is in {}; 1/2 is missing ({} is the 1/2 of another matrix: seed 6, not 7; \
             {} is the 1/2 of another matrix: seed 6, not 7)",
            other[0], twice_sorted[0], twice_sorted[1]
        )
    );
    assert!(lines[2].contains("2 problem(s) above"), "{}", report.stderr);

    // The whole set merged all the same, and the page lists it and the two lines.
    let merged: Vec<PathBuf> = matrix_folders(results)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("-merged-"))
        .collect();
    assert_eq!(merged.len(), 1, "{merged:?}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged[0].join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["seed"], 5);
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["rows"].as_array().unwrap().len(), 2, "{summary}");
    let index = std::fs::read_to_string(results.join("index.html")).unwrap();
    assert!(
        index.contains("-merged-2"),
        "the index lacks the merged matrix"
    );
    assert!(
        index.contains("the same shard run twice") && index.contains("with seed 7"),
        "the index lacks the sets that were not merged"
    );
}

/// `--until-invalid` stops a pair at its first invalid run; the detection
/// table says what was found how fast.
#[test]
fn until_invalid_stops_a_caught_pair_and_the_summary_measures_detection() {
    let tmp = common::tmp();
    let results = tmp.path().to_str().unwrap();
    let args = [
        "matrix",
        "--configs",
        "no-lock",
        "--nemeses",
        "none",
        "--runs",
        "3",
    ];
    let more = ["--until-invalid", "--time-limit", "3", "--results", results];
    let run = lockstorm(&[&args[..], &more[..]].concat());
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let dir = matrix_folders(tmp.path()).pop().expect("a matrix folder");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let row = &summary["rows"][0];
    assert_eq!(
        (row["runs"].as_u64(), row["invalid"].as_u64()),
        (Some(1), Some(1)),
        "{row}"
    );
    assert!(row["counted_anomalies"].as_u64().unwrap() > 0, "{row}");
    assert_eq!(row["faults"], 0, "{row}");
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        md.contains("## Detection") && md.contains("| no-lock | none | 1 | 1 | 0 | – |"),
        "{md}"
    );
}

/// Two cells that cut links (iptables) and jump clocks (the time shim) run
/// at once, each in its own address block: each sees only its own faults,
/// every one verified, and each verdict is the one expected of it alone.
#[test]
fn concurrent_partition_and_clock_cells_keep_to_their_own_addresses() {
    let tmp = common::tmp();
    let expect = "[redlock]\npartition = \"valid\"\nclock = \"invalid\"\n";
    let file = tmp.path().join("expect.toml");
    std::fs::write(&file, expect).unwrap();
    let run = lockstorm(&[
        "matrix",
        "--configs",
        "redlock",
        "--nemeses",
        "partition,clock",
        "--time-limit",
        "15",
        "--nemesis-interval-ms",
        "3000",
        "--seed",
        "3",
        "--jobs",
        "2",
        "--results",
        tmp.path().to_str().unwrap(),
        "--expect",
        file.to_str().unwrap(),
    ]);
    assert_no_process_left(tmp.path());
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("2 at once"), "{}", run.stdout);
    assert!(
        common::orphaned_chains().is_empty(),
        "a chain was left behind"
    );
    let mut blocks = Vec::new();
    for group in ["redlock-partition", "redlock-clock"] {
        let dir = only_run(&tmp.path().join(group));
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
        let block = record["options"]["address_block"].as_u64().unwrap();
        let prefix = format!("127.0.{block}.");
        for node in record["nodes"].as_array().unwrap() {
            let addr = node["addr"].as_str().unwrap();
            assert!(
                addr.starts_with(&prefix),
                "{group}: {addr} outside {prefix}x"
            );
        }
        let history = std::fs::read_to_string(dir.join("history.jsonl")).unwrap();
        let starts = history
            .lines()
            .filter(|l| l.contains("\"f\":\"start-"))
            .count();
        assert!(starts > 0, "{group}: no fault started");
        assert!(
            !history.contains("unverified"),
            "{group}: a fault did not take effect"
        );
        blocks.push(block);
    }
    assert_ne!(blocks[0], blocks[1], "both cells in one address block");
}
