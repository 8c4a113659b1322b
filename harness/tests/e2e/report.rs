//! `lockstorm report`'s page, opened in a real (headless) Chromium from
//! `file://`: the runs, verdicts and pictures must be in the rendered DOM,
//! and a screenshot must come out.

use checker::generate::valid_history;
use checker::{History, Promise, Results, Validity};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use store::matrix::{Expected, Row, Summary};

/// The browser: `LOCKSTORM_CHROMIUM`, else the first Chromium on PATH under
/// the names distributions give it.
fn browser() -> PathBuf {
    if let Some(path) = std::env::var_os("LOCKSTORM_CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no Chromium on PATH: this test needs a real browser; install it with \
                 `apt-get install -y chromium` (or set LOCKSTORM_CHROMIUM)"
            )
        })
}
const DEADLINE: Duration = Duration::from_secs(90);

fn history() -> History {
    valid_history(3, 4, 12, 50)
}

/// A run folder as `lockstorm run` leaves it; no `results` is a crashed run.
fn write_run(root: &Path, rel: &str, config: &str, nemesis: &str, results: Option<&Results>) {
    let dir = root.join(rel);
    fs::create_dir_all(&dir).unwrap();
    let run = serde_json::json!({
        "lockstorm": "0.1.0", "started": "2026-11-29T11:45:41.88+00:00",
        "promise": "mutual-exclusion",
        "options": {"config": config, "nemesis": nemesis, "seed": 1, "workers": 4, "time_limit": 3},
    });
    fs::write(dir.join("run.json"), run.to_string()).unwrap();
    let lines: String = history()
        .events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    fs::write(dir.join("history.jsonl"), lines).unwrap();
    if let Some(r) = results {
        fs::write(dir.join("results.json"), serde_json::to_string(r).unwrap()).unwrap();
    }
}

fn results_tree(root: &Path) {
    let valid = checker::check(&history(), Promise::MutualExclusion);
    let mut invalid = valid.clone();
    invalid.valid = Validity::False;
    invalid.anomalies.get_mut("lock-overlap").unwrap().count = 4;
    write_run(
        root,
        "single-pause/20261129T114541",
        "single",
        "pause",
        Some(&invalid),
    );
    write_run(
        root,
        "redlock-none/20261129T114600",
        "redlock",
        "none",
        Some(&valid),
    );
    write_run(root, "fenced-kill/20261129T114700", "fenced", "kill", None);
    let m = root.join("matrix-20261129T120000");
    fs::create_dir_all(&m).unwrap();
    let summary = Summary {
        ok: Some(true),
        rows: vec![Row {
            runs: 1,
            invalid: 1,
            expected: Some(Expected::Invalid),
            matches: Some(true),
            anomalies: [("lock-overlap".to_string(), 4)].into(),
            ops_per_s: 9.5,
            run_dirs: vec!["single-pause/20261129T114541".into()],
            ..Row::new("single", "pause")
        }],
        ..Summary::default()
    };
    fs::write(
        m.join("summary.json"),
        serde_json::to_string(&summary).unwrap(),
    )
    .unwrap();
    fs::write(
        m.join("comparison.svg"),
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"80\">\
         <rect width=\"200\" height=\"80\" fill=\"#cf222e\"/></svg>",
    )
    .unwrap();
}

/// Runs Chromium headless on `page` with `extra` flags and returns its
/// stdout. Its own process group, killed by id if it outlives the deadline,
/// so a hung browser cannot hang the test or outlive it.
fn chromium(page: &Path, extra: &[String], scratch: &Path) -> String {
    let browser = browser();
    let profile = tempfile::tempdir_in(scratch).unwrap();
    let out_path = scratch.join(format!("chromium-{}.out", extra.len()));
    let err_path = scratch.join(format!("chromium-{}.err", extra.len()));
    let mut child = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .expect("chromium starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
            panic!(
                "chromium still running after {DEADLINE:?}; stderr:\n{}",
                fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "chromium failed ({status}); stderr:\n{}",
        fs::read_to_string(&err_path).unwrap_or_default()
    );
    fs::read_to_string(&out_path).unwrap()
}

fn tree_with_page() -> (tempfile::TempDir, PathBuf) {
    let tmp = crate::common::tmp();
    let root = tmp.path().join("results");
    fs::create_dir(&root).unwrap();
    results_tree(&root);
    let report = report::build::<lockstorm::RunPlan>(&root).unwrap();
    assert_eq!((report.runs, report.matrices, report.redrawn), (3, 1, 3));
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    (tmp, report.index)
}

#[test]
fn the_page_renders_in_headless_chromium_with_every_run_and_picture() {
    let (tmp, index) = tree_with_page();
    let dom = chromium(&index, &["--dump-dom".into()], tmp.path());

    assert!(dom.contains("<title>lockstorm results</title>"), "{dom}");
    for config in ["single", "redlock", "fenced"] {
        assert!(
            dom.contains(&format!("<td class=\"cfg\">{config}</td>")),
            "{config} row"
        );
    }
    assert!(dom.contains(">INVALID<") && dom.contains(">VALID<"));
    assert!(dom.contains("re-checked"), "the crashed run's note");
    for run in [
        "single-pause/20261129T114541",
        "redlock-none/20261129T114600",
        "fenced-kill/20261129T114700",
    ] {
        for pic in ["timeline.svg", "latency.png", "rate.png"] {
            assert!(
                dom.contains(&format!("<img src=\"{run}/{pic}\"")),
                "{run}/{pic} not shown"
            );
        }
    }
    assert!(dom.contains("<img src=\"matrix-20261129T120000/comparison.svg\""));
    assert!(dom.contains("<td class=\"match yes\">✓</td>"));
    assert_eq!(dom.matches("<details").count(), 3);
}

#[test]
fn a_screenshot_of_the_page_is_a_real_picture() {
    let (tmp, index) = tree_with_page();
    let shot = tmp.path().join("page.png");
    chromium(
        &index,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,2000".into(),
            "--hide-scrollbars".into(),
        ],
        tmp.path(),
    );
    let png = fs::read(&shot).expect("chromium wrote the screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1280, 2000));
    // A blank or error page compresses to a few kilobytes; text, tables
    // and the open run's plots do not.
    assert!(png.len() > 40_000, "screenshot only {} bytes", png.len());
}

/// A `run.json` of `null` is no run record: `check` refuses it, and the
/// page neither checks nor redraws that run, and says why.
#[test]
fn a_run_whose_run_json_is_null_is_neither_checked_nor_redrawn() {
    let tmp = crate::common::tmp();
    let rel = "single-pause/20261129T114541";
    write_run(tmp.path(), rel, "single", "pause", None);
    let dir = tmp.path().join(rel);
    fs::write(dir.join("run.json"), "null").unwrap();
    let check = crate::common::lockstorm(&["check", dir.to_str().unwrap()]);
    assert_eq!(check.code, 254, "{}{}", check.stdout, check.stderr);
    // A problem named, as for any unreadable run: exit 254.
    let out = crate::common::lockstorm(&["report", tmp.path().to_str().unwrap()]);
    assert_eq!(out.code, 254, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("run.json is not a run record"),
        "{}",
        out.stderr
    );
    let page = fs::read_to_string(tmp.path().join("index.html")).unwrap();
    assert!(page.contains("is not a run record"), "{page}");
    assert!(!dir.join("timeline.svg").exists(), "the run was redrawn");
    assert!(!dir.join("results.json").exists(), "the run was checked");
}
