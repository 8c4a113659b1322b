//! Finding stored runs and matrix summaries under a results folder and
//! reading them. Nothing here fails as a whole: whatever cannot be read
//! becomes a problem on the entry, so one broken run never hides the others.

use checker::{History, Promise, Results};
use serde_json::Value;
use std::fs;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::matrix::{SUMMARY_JSON, SUMMARY_MD};
pub use crate::plot::{COMPARISON_PNG, COMPARISON_SVG};
pub use crate::store::{HARNESS_LOG, HISTORY, RESULTS, RUN_JSON};

/// One stored run, as far as it could be read.
#[derive(Debug, Default)]
pub struct Run {
    /// `<group>/<stamp>`, relative to the results root, `/`-separated.
    pub rel: String,
    pub stamp: String,
    pub config: String,
    pub nemesis: String,
    pub seed: Option<u64>,
    pub started: String,
    /// `run.json` as written; kept whole so older layouts still read.
    pub meta: Value,
    pub results: Option<Results>,
    /// `results.json` was missing or unreadable: the verdict comes from
    /// checking the history again here.
    pub rechecked: bool,
    /// Files of the run folder that exist, to link to.
    pub files: Vec<&'static str>,
    pub pictures: Vec<&'static str>,
    pub notes: Vec<String>,
    pub problems: Vec<String>,
}

/// A `matrix-<timestamp>/` folder.
#[derive(Debug, Default)]
pub struct Matrix {
    pub rel: String,
    pub summary: Option<Value>,
    pub files: Vec<&'static str>,
    pub problems: Vec<String>,
}

/// Visible subfolders of `dir`, sorted; symlinks are skipped because every
/// one in the layout (`latest`) points at a folder listed anyway.
fn subdirs(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && entry.file_type()?.is_dir() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// `YYYYMMDDTHHMMSS`, possibly with a `-n` suffix for runs in the same second.
fn looks_like_stamp(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 15 && b[8] == b'T' && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit)
}

/// Run folders (`<group>/<stamp>`) and matrix folders under `root`.
pub fn find(root: &Path) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let (mut runs, mut matrices) = (Vec::new(), Vec::new());
    for group in subdirs(root)? {
        if group.starts_with("matrix-") {
            matrices.push(group);
            continue;
        }
        // A group that cannot be listed is reported as a run so it shows up.
        let Ok(leaves) = subdirs(&root.join(&group)) else {
            runs.push(group);
            continue;
        };
        for leaf in leaves {
            let dir = root.join(&group).join(&leaf);
            let has_any = [RUN_JSON, HISTORY, RESULTS]
                .iter()
                .any(|f| dir.join(f).exists());
            if has_any || looks_like_stamp(&leaf) {
                runs.push(format!("{group}/{leaf}"));
            }
        }
    }
    Ok((runs, matrices))
}

fn existing(dir: &Path, names: &[&'static str]) -> Vec<&'static str> {
    names
        .iter()
        .copied()
        .filter(|n| dir.join(n).is_file())
        .collect()
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let file = fs::File::open(path)?;
    Ok(serde_json::from_reader(BufReader::new(file))?)
}

/// Why `name` could not be read, in words a reader can act on.
fn unreadable(name: &str, e: &anyhow::Error) -> String {
    let io = e.downcast_ref::<std::io::Error>().map(|e| e.kind());
    match (io, e.downcast_ref::<serde_json::Error>()) {
        (Some(std::io::ErrorKind::NotFound), _) => format!(
            "{name} is missing: the run stopped before writing it, or this is not a lockstorm run folder (remove it to clear this)"
        ),
        (_, Some(json)) => format!(
            "{name} is damaged ({json}): it was cut off or edited; the run's other files may still be read"
        ),
        _ => format!("{name} cannot be read: {e}"),
    }
}

/// Renders a JSON scalar for display; arrays (a nemesis list) are joined.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().filter_map(text).collect();
            Some(parts.join(","))
        }
        _ => None,
    }
}

/// `2026-11-29T11:45:41.88+00:00` or a folder stamp, shown to the second.
fn display_time(started: Option<&str>, stamp: &str) -> String {
    if let Some(t) = started.and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok()) {
        return t.format("%Y-%m-%d %H:%M:%S").to_string();
    }
    if let Some(s) = started {
        return s.to_owned();
    }
    match chrono::NaiveDateTime::parse_from_str(stamp.get(..15).unwrap_or(""), "%Y%m%dT%H%M%S") {
        Ok(t) => t.format("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => stamp.to_owned(),
    }
}

/// Reads one run folder. Returns the history too (when readable) so the
/// caller can redraw the pictures, and the worker count they need.
pub fn read_run(root: &Path, rel: &str) -> (Run, Option<History>, crate::plot::Setup) {
    let dir: PathBuf = root.join(rel);
    let (group, stamp) = rel.split_once('/').unwrap_or((rel, ""));
    let mut run = Run {
        rel: rel.to_owned(),
        stamp: stamp.to_owned(),
        // Config names contain `-` too, so the folder name cannot be split
        // reliably; it only stands in when `run.json` says nothing.
        config: group.to_owned(),
        nemesis: "?".to_owned(),
        ..Run::default()
    };
    match read_json::<Value>(&dir.join(RUN_JSON)) {
        Ok(meta) => run.meta = meta,
        Err(e) => run.problems.push(unreadable(RUN_JSON, &e)),
    }
    let options = &run.meta["options"];
    if let Some(c) = text(&options["config"]) {
        run.config = c;
    }
    if let Some(n) = text(&options["nemesis"]) {
        run.nemesis = n;
    }
    run.seed = options["seed"].as_u64();
    let lease = match options["config"].as_str() {
        Some("no-lock") | None => None,
        Some(_) => options["ttl_ms"].as_u64().map(Duration::from_millis),
    };
    let setup = crate::plot::Setup {
        workers: options["workers"].as_u64().unwrap_or(0),
        lease,
    };
    run.started = display_time(run.meta["started"].as_str(), stamp);
    if run.meta["interrupted"].as_bool() == Some(true) {
        run.notes.push("interrupted".into());
    }
    let promise = run.meta["promise"].as_str().map(str::parse::<Promise>);

    let history = match fs::File::open(dir.join(HISTORY)) {
        Ok(f) => match History::from_jsonl(BufReader::new(f)) {
            Ok(h) => Some(h),
            Err(e) => {
                run.problems.push(format!("{HISTORY}: {e}"));
                None
            }
        },
        Err(e) => {
            run.problems.push(unreadable(HISTORY, &e.into()));
            None
        }
    };
    if history.as_ref().is_some_and(|h| h.truncated) {
        run.notes
            .push("history cut off mid-line (the run crashed?)".into());
    }

    let results_path = dir.join(RESULTS);
    match read_json::<Results>(&results_path) {
        Ok(r) => run.results = Some(r),
        Err(e) if results_path.exists() => run.problems.push(unreadable(RESULTS, &e)),
        Err(_) => {}
    }
    if run.results.is_none() {
        if let Some(h) = &history {
            let promise = match promise {
                Some(Ok(p)) => p,
                _ => {
                    run.notes.push(format!(
                        "promise unknown; checked as {}",
                        Promise::default()
                    ));
                    Promise::default()
                }
            };
            run.results = Some(checker::check(h, promise));
            run.rechecked = true;
            run.notes.push(format!(
                "no readable {RESULTS}: verdict re-checked from the history"
            ));
        }
    }
    run.files = existing(&dir, &[RESULTS, HISTORY, RUN_JSON, HARNESS_LOG]);
    (run, history, setup)
}

pub fn read_matrix(root: &Path, rel: &str) -> Matrix {
    let dir = root.join(rel);
    let mut matrix = Matrix {
        rel: rel.to_owned(),
        ..Matrix::default()
    };
    match read_json::<Value>(&dir.join(SUMMARY_JSON)) {
        Ok(v) => matrix.summary = Some(v),
        Err(e) => matrix.problems.push(unreadable(SUMMARY_JSON, &e)),
    }
    matrix.files = existing(
        &dir,
        &[SUMMARY_MD, SUMMARY_JSON, COMPARISON_SVG, COMPARISON_PNG],
    );
    matrix
}
