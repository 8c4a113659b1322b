use super::*;
use checker::generate::valid_history;
use checker::{History, Promise, Results, Validity};
use serde::{Deserialize, Serialize};
use std::fs;
use std::time::Duration;
use store::Outline;

/// A plan as these tests write one (`options` in `run.json`): the report
/// asks no more of a plan than `store::Plan` says.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Options {
    config: String,
    nemesis: String,
    seed: u64,
    workers: u64,
    time_limit: u64,
    ttl_ms: u64,
}

impl Plan for Options {
    type Step = serde_json::Value;
    /// Longer than any wait in these tests' valid histories.
    fn deadlock_after(&self, _expires: bool) -> Duration {
        Duration::from_secs(7)
    }
    fn outline(&self) -> Outline {
        Outline {
            config: self.config.clone(),
            nemesis: self.nemesis.clone(),
            seed: self.seed,
            workers: self.workers,
            time_limit: Duration::from_secs(self.time_limit),
            ttl: Duration::from_millis(self.ttl_ms),
        }
    }
    fn lease_is_ttl(config: &str) -> bool {
        config == "single"
    }
}

/// The report of the runs under `root`, their plans read as [`Options`].
fn build(root: &Path) -> Result<Report, Error> {
    super::build::<Options>(root)
}

fn jsonl(history: &History) -> String {
    history
        .events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect()
}

/// A run folder as `lockstorm run` leaves it; `results` None is a crash.
fn write_run(
    root: &Path,
    rel: &str,
    config: &str,
    nemesis: &str,
    results: Option<&Results>,
) -> PathBuf {
    let dir = root.join(rel);
    fs::create_dir_all(&dir).unwrap();
    let run = serde_json::json!({
        "lockstorm": "0.1.0", "started": "2026-11-29T11:45:41.88+00:00",
        "promise": "mutual-exclusion",
        "options": {"config": config, "nemesis": nemesis, "seed": 7, "workers": 3, "time_limit": 5},
    });
    fs::write(dir.join("run.json"), run.to_string()).unwrap();
    fs::write(dir.join("history.jsonl"), jsonl(&history())).unwrap();
    if let Some(r) = results {
        fs::write(dir.join("results.json"), serde_json::to_string(r).unwrap()).unwrap();
    }
    dir
}

fn history() -> History {
    valid_history(1, 3, 8, 100)
}

fn valid() -> Results {
    checker::check(&history(), Promise::MutualExclusion)
}

/// Results as if the checkers had found overlaps.
fn invalid() -> Results {
    let mut r = valid();
    r.valid = Validity::False;
    r.anomalies.get_mut("lock-overlap").unwrap().count = 3;
    r
}

fn index(root: &Path) -> String {
    fs::read_to_string(root.join(INDEX)).unwrap()
}

/// Every `href`/`src` value in the page, unescaped.
fn links(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\""] {
        for part in page.split(attr).skip(1) {
            let value = &part[..part.find('"').unwrap()];
            out.push(value.replace("&amp;", "&"));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn every_run_is_listed_newest_first_with_its_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write_run(
        root,
        "single-pause/20261129T114541",
        "single",
        "pause",
        Some(&invalid()),
    );
    write_run(
        root,
        "redlock-kill/20261129T120000",
        "redlock",
        "kill",
        Some(&valid()),
    );
    std::os::unix::fs::symlink("20261129T114541", root.join("single-pause/latest")).unwrap();

    let report = build(root).unwrap();
    assert_eq!((report.runs, report.redrawn, report.matrices), (2, 2, 0));
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let page = index(root);
    for needle in [
        "single",
        "pause",
        "redlock",
        "kill",
        ">INVALID<",
        ">VALID<",
        "lock-overlap",
    ] {
        assert!(page.contains(needle), "{needle} missing");
    }
    assert!(
        page.contains("<td class=\"num hit\">3</td>"),
        "overlap count"
    );
    let newest = page.find("redlock-kill/20261129T120000").unwrap();
    let older = page.find("single-pause/20261129T114541").unwrap();
    assert!(newest < older, "newest run first");
    assert!(!page.contains("latest"), "the latest link is not a run");
    for pic in ["timeline.svg", "latency.png", "rate.png"] {
        assert!(root
            .join("single-pause/20261129T114541")
            .join(pic)
            .is_file());
    }
}

#[test]
fn links_are_relative_and_point_at_what_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write_run(
        root,
        "single-none/20261129T114541",
        "single",
        "none",
        Some(&valid()),
    );
    write_run(
        root,
        "odd name/20261129T114542",
        "odd",
        "none",
        Some(&valid()),
    );
    let m = root.join("matrix-20261129T120000");
    fs::create_dir_all(&m).unwrap();
    fs::write(
        m.join("comparison.svg"),
        "<svg xmlns='http://www.w3.org/2000/svg'/>",
    )
    .unwrap();
    let summary = store::matrix::Summary {
        rows: vec![store::matrix::Row {
            run_dirs: vec![
                "single-none/20261129T114541".into(),
                "gone/20200101T000000".into(),
            ],
            ..store::matrix::Row::new("single", "none")
        }],
        ..Default::default()
    };
    summary.write(&m).unwrap();

    build(root).unwrap();
    let page = index(root);
    let links = links(&page);
    assert!(links.len() > 10, "{links:?}");
    for link in links {
        if let Some(id) = link.strip_prefix('#') {
            assert!(
                page.contains(&format!("id=\"{id}\"")),
                "#{id} has no target"
            );
            continue;
        }
        assert!(
            !link.starts_with('/') && !link.contains(':'),
            "{link} is not relative"
        );
        let path = root.join(percent_decode(&link));
        assert!(path.is_file(), "{link} points at nothing");
    }
    assert!(page.contains("odd%20name/20261129T114542/timeline.svg"));
    assert!(
        page.contains("not found"),
        "unknown run folders are not linked"
    );
}

#[test]
fn an_unreadable_run_is_listed_as_a_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write_run(
        root,
        "single-pause/20261129T114541",
        "single",
        "pause",
        Some(&valid()),
    );
    let broken = root.join("fenced-kill/20261129T114600");
    fs::create_dir_all(&broken).unwrap();
    fs::write(broken.join("run.json"), "{not json").unwrap();
    fs::write(broken.join("history.jsonl"), "garbage\n{\"index\":0}\n").unwrap();

    let report = build(root).unwrap();
    assert_eq!((report.runs, report.redrawn), (2, 1));
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.starts_with("fenced-kill/20261129T114600: run.json")),
        "{:?}",
        report.problems
    );
    assert!(report.problems.iter().any(|p| p.contains("history.jsonl")));
    let page = index(root);
    assert!(page.contains("id=\"problems\""));
    assert!(page.contains(">UNREADABLE<"));
    assert!(page.contains("fenced-kill/20261129T114600: history.jsonl"));
}

#[test]
fn a_crashed_run_without_results_is_checked_again() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = write_run(root, "single-none/20261129T114659", "single", "none", None);

    let report = build(root).unwrap();
    assert_eq!((report.runs, report.redrawn), (1, 1));
    let page = index(root);
    assert!(page.contains(">VALID<"), "verdict from the history");
    assert!(page.contains("re-checked"));
    assert!(
        !page.contains("20261129T114659/results.json"),
        "no link to a missing file"
    );
    assert!(dir.join("timeline.svg").is_file());
    assert!(
        !dir.join("results.json").exists(),
        "the run's record is left alone"
    );
}

#[test]
fn a_run_json_that_is_not_a_run_record_still_shows_what_it_says() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = write_run(root, "odd-none/20261129T114541", "odd", "none", None);
    let foreign = serde_json::json!({"started": "yesterday", "redis": "v=7.2.4 sha=0",
        "schedule": [{}, {}], "options": {"config": "odd", "nemesis": ["pause", "kill"],
        "seed": 9, "workers": "three", "ttl_ms": 900}});
    fs::write(dir.join("run.json"), foreign.to_string()).unwrap();

    let report = build(root).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let page = index(root);
    for needle in [
        "<td class=\"cfg\">odd</td><td>pause,kill</td><td class=\"num\">9</td>",
        ">yesterday<",
        "promise unknown; checked as mutual-exclusion",
        "three workers · ttl 900 ms · Redis 7.2.4",
        "2 scheduled fault(s)",
    ] {
        assert!(page.contains(needle), "{needle} missing");
    }
}

mod page;
