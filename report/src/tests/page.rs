//! The page as a whole: escaping, matrices, the empty case.

use super::super::html::{esc, href};
use super::*;
use store::matrix::{Row, Skipped, Summary};

#[test]
fn text_from_disk_is_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let evil = "<script>alert(\"x&y\")</script>";
    write_run(
        root,
        "evil-none/20261129T114541",
        evil,
        "none",
        Some(&valid()),
    );
    let m = root.join("matrix-20261129T120000");
    fs::create_dir_all(&m).unwrap();
    let summary = Summary {
        ok: Some(false),
        rows: vec![Row::new(evil, "<b>")],
        skipped: vec![Skipped {
            config: "x".into(),
            nemesis: "y".into(),
            reason: "<img src=x>".into(),
        }],
        ..Summary::default()
    };
    fs::write(
        m.join("summary.json"),
        serde_json::to_string(&summary).unwrap(),
    )
    .unwrap();

    build(root).unwrap();
    let page = index(root);
    assert!(!page.contains("<script>"), "raw markup from disk");
    assert!(!page.contains("<img src=x>"));
    assert!(page.contains("&lt;script&gt;alert(&quot;x&amp;y&quot;)&lt;/script&gt;"));
    assert!(page.contains("&lt;b&gt;"));
}

#[test]
fn matrices_are_tabled_and_a_summary_that_is_not_one_is_a_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write_run(
        root,
        "single-pause/20261129T120001",
        "single",
        "pause",
        Some(&invalid()),
    );
    let full = root.join("matrix-20261129T120000");
    fs::create_dir_all(&full).unwrap();
    let summary = serde_json::json!({"started":"20261129T120000","wall_s":312.4,"time_limit_s":15,
        "runs_per_pair":1,"seed":1,"expect":"expectations.toml","ok":true,
        "rows":[{"config":"single","nemesis":"pause","runs":1,"valid":0,"invalid":1,"unknown":0,
            "expected":"invalid","matches":true,"anomalies":{"lock-overlap":5,"unsafe-action":0},
            "ops_per_s":12.3,"errors":["run 2: redis-server died"],"run_dirs":["single-pause/20261129T120001"]}],
        "skipped":[{"config":"single","nemesis":"failover","reason":"needs sentinel"}]});
    fs::write(full.join("summary.json"), summary.to_string()).unwrap();
    fs::write(full.join("comparison.png"), b"\x89PNG").unwrap();
    let sparse = root.join("matrix-20261130T000000");
    fs::create_dir_all(&sparse).unwrap();
    fs::write(sparse.join("summary.json"), r#"{"rows":[{}]}"#).unwrap();
    fs::create_dir_all(root.join("matrix-20261201T000000")).unwrap();

    let report = build(root).unwrap();
    assert_eq!((report.runs, report.matrices), (1, 3));
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    // Read typed, as the matrix wrote it: a file that is not a summary is
    // said to be damaged, and a folder without one, to lack it.
    assert!(report.problems[0].starts_with("matrix-20261201T000000: summary.json is missing"));
    assert!(report.problems[1]
        .starts_with("matrix-20261130T000000: summary.json is damaged (missing field"));
    let page = index(root);
    for needle in [
        ">EXPECTED<",
        "<td class=\"match yes\">✓</td>",
        "<td class=\"num nz\">5</td>",
        "12.3",
        "needs sentinel",
        "<span class=\"c-invalid\">run 2: redis-server died</span>",
        "href=\"#run-single-pause-20261129T120001\"",
        "src=\"matrix-20261129T120000/comparison.png\"",
        "href=\"matrix-20261129T120000/summary.json\"",
    ] {
        assert!(page.contains(needle), "{needle} missing");
    }
    let newest = page.find("<h3>matrix-20261201T000000").unwrap();
    assert!(newest < page.find("<h3>matrix-20261129T120000").unwrap());
}

#[test]
fn an_empty_results_folder_still_gets_a_page() {
    let tmp = tempfile::tempdir().unwrap();
    let report = build(tmp.path()).unwrap();
    assert_eq!((report.runs, report.matrices), (0, 0));
    assert!(index(tmp.path()).contains("No runs stored here yet."));
    assert!(build(&tmp.path().join("missing")).is_err());
}

#[test]
fn escaping_and_link_encoding() {
    assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
    assert_eq!(href("a b/c#d.svg"), "a%20b/c%23d.svg");
    assert_eq!(href("x/\"y"), "x/%22y");
}

#[test]
fn a_run_that_found_anything_links_each_count_to_its_story() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Two grants of the history, named as an overlap's example.
    let grants: Vec<u64> = history()
        .events
        .iter()
        .filter(|e| e.f == "acquire" && e.kind == checker::OpType::Ok)
        .map(|e| e.index)
        .take(2)
        .collect();
    let mut found = invalid();
    let overlap = found.anomalies.get_mut("lock-overlap").unwrap();
    overlap.examples = vec![grants];
    let rel = "single-pause/20261129T120001";
    write_run(root, rel, "single", "pause", Some(&found));
    build(root).unwrap();
    assert!(root.join(rel).join("explain.html").is_file());
    let page = index(root);
    let story = format!("{}#lock-overlap-1", href(&format!("{rel}/explain.html")));
    assert!(
        page.contains(&format!("<a href=\"{story}\">3</a>")),
        "{page}"
    );
    assert!(page.contains(">explain</a>"), "the run's files list it");
    // A valid run has no stories and no links to any.
    write_run(root, rel, "single", "pause", Some(&valid()));
    build(root).unwrap();
    assert!(!root.join(rel).join("explain.html").exists());
    assert!(!index(root).contains("explain.html"));
}
