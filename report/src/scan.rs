//! Finding stored runs and matrix summaries under a results folder and
//! reading them. Nothing here fails as a whole: whatever cannot be read
//! becomes a problem on the entry, so one broken run never hides the others.

use checker::{History, Promise, Results};
use serde::Deserialize;
use serde_json::Value;
use std::fs;
use std::io::BufReader;
use std::path::Path;
use std::time::Duration;
use store::audit::Severity;
use store::matrix::Summary;
use store::{Plan, ReadError, RunRecord, StoredRun};

pub use crate::plot::{COMPARISON_PNG, COMPARISON_SVG};
pub use store::matrix::{SUMMARY_JSON, SUMMARY_MD};
pub use store::{HARNESS_LOG, HISTORY, RESULTS, RUN_JSON};

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
    /// What `run.json` says, as far as it could be read.
    pub shown: Shown,
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
    pub summary: Option<Summary>,
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
pub fn find(root: &Path) -> std::io::Result<(Vec<String>, Vec<String>)> {
    let (mut runs, mut matrices) = (Vec::new(), Vec::new());
    for group in subdirs(root)? {
        if group.starts_with("matrix-") {
            matrices.push(group);
            continue;
        }
        // An adapter's conformance check: its stderr and node log, no run.
        if group.starts_with("client-test-") {
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

/// Why `name` could not be read, in words a reader can act on.
fn unreadable(name: &str, e: &ReadError) -> String {
    match e {
        ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => format!(
            "{name} is missing: the run stopped before writing it, or this is not a lockstorm run folder (remove it to clear this)"
        ),
        ReadError::Json(json) => format!(
            "{name} is damaged ({json}): it was cut off or edited; the run's other files may still be read"
        ),
        ReadError::Io(io) => format!("{name} cannot be read: {io}"),
    }
}

/// What the page shows of `run.json`: from a run record, what it holds;
/// from a file that is JSON but not a run record (hand-written, or from
/// another tool), each field as written, shown if it reads as what the page
/// needs there and left out if not.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Shown {
    pub started: Value,
    pub promise: Value,
    pub redis: Value,
    pub interrupted: Value,
    pub schedule: Value,
    pub options: Loose<ShownOptions>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ShownOptions {
    pub config: Value,
    pub nemesis: Value,
    pub seed: Value,
    pub workers: Value,
    pub time_limit: Value,
    pub ttl_ms: Value,
}

impl<P: Plan> From<&RunRecord<P>> for Shown {
    fn from(r: &RunRecord<P>) -> Self {
        let o = r.options.outline();
        // What a record left empty, its file did not say.
        let said = |s: &str| match s {
            "" => Value::Null,
            s => Value::from(s),
        };
        Shown {
            started: said(&r.started),
            promise: Value::from(r.promise.to_string()),
            redis: said(&r.redis),
            interrupted: Value::from(r.interrupted),
            schedule: r.schedule.as_ref().map_or(Value::Null, |s| {
                Value::Array(s.iter().map(|_| Value::Null).collect())
            }),
            options: Loose(Some(ShownOptions {
                config: Value::from(o.config),
                nemesis: Value::from(o.nemesis),
                seed: Value::from(o.seed),
                workers: Value::from(o.workers),
                time_limit: Value::from(o.time_limit.as_secs()),
                ttl_ms: Value::from(o.ttl.as_millis() as u64),
            })),
        }
    }
}

impl Shown {
    pub fn options(&self) -> &ShownOptions {
        static NONE: ShownOptions = ShownOptions {
            config: Value::Null,
            nemesis: Value::Null,
            seed: Value::Null,
            workers: Value::Null,
            time_limit: Value::Null,
            ttl_ms: Value::Null,
        };
        self.options.0.as_ref().unwrap_or(&NONE)
    }
}

/// A field that reads as `T`, or None: missing, null or of another type.
#[derive(Debug)]
pub struct Loose<T>(pub Option<T>);

impl<T> Default for Loose<T> {
    fn default() -> Self {
        Loose(None)
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Loose<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Ok(Loose(serde_json::from_value(value).ok()))
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
pub fn read_run<P: Plan>(root: &Path, rel: &str) -> (Run, Option<History>, crate::plot::Setup) {
    let folder = StoredRun::open(root.join(rel));
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
    let mut settings = None;
    let mut lease = None;
    // A run.json that is JSON but no object (`null`) says nothing of the
    // run: `check` refuses it, and the page neither checks nor redraws it.
    let mut unusable = false;
    match folder.record::<P>() {
        Ok(record) => {
            run.shown = Shown::from(&record);
            settings = Some(record.settings());
            lease = Some(record.lease());
        }
        // JSON, but not a run record (hand-written, or from another tool):
        // the page still shows what it says, as before records were typed.
        Err(ReadError::Json(e)) if e.is_data() => {
            match store::read_json::<serde_json::Value>(&folder.run_json()) {
                Ok(v) if v.is_object() => run.shown = serde_json::from_value(v).unwrap_or_default(),
                _ => {
                    run.problems.push(format!(
                        "{RUN_JSON} is not a run record (not a JSON object): neither checked nor redrawn, as `lockstorm check` refuses it"
                    ));
                    unusable = true;
                }
            }
        }
        Err(e) => run.problems.push(unreadable(RUN_JSON, &e)),
    }
    let shown = &run.shown;
    let o = shown.options();
    if let Some(c) = text(&o.config) {
        run.config = c;
    }
    if let Some(n) = text(&o.nemesis) {
        run.nemesis = n;
    }
    run.seed = o.seed.as_u64();
    // A record that did not parse as a run's: its config and TTL as written.
    let lease = lease.unwrap_or_else(|| match o.config.as_str() {
        Some(c) if P::lease_is_ttl(c) => o.ttl_ms.as_u64().map(Duration::from_millis),
        _ => None,
    });
    let setup = crate::plot::Setup {
        workers: o.workers.as_u64().unwrap_or(0),
        lease,
    };
    run.started = display_time(shown.started.as_str(), stamp);
    if shown.interrupted.as_bool() == Some(true) {
        run.notes.push("interrupted".into());
    }
    let promise = shown.promise.as_str().map(str::parse::<Promise>);

    let history = match fs::File::open(folder.history()) {
        _ if unusable => None,
        Ok(f) => match History::from_jsonl(BufReader::new(f)) {
            Ok(h) => Some(h),
            Err(e) => {
                run.problems.push(format!("{HISTORY}: {e}"));
                None
            }
        },
        Err(e) => {
            run.problems.push(unreadable(HISTORY, &ReadError::Io(e)));
            None
        }
    };
    if history.as_ref().is_some_and(|h| h.truncated) {
        run.notes
            .push("history cut off mid-line (the run crashed?)".into());
    }

    match folder.results() {
        Ok(r) => run.results = Some(r),
        Err(e) if folder.results_json().exists() => run.problems.push(unreadable(RESULTS, &e)),
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
            // The record's deadlock threshold, when it has one.
            let settings = settings.unwrap_or_default();
            let settings = checker::Settings {
                promise,
                ..settings
            };
            run.results = Some(checker::check(h, settings));
            run.rechecked = true;
            run.notes.push(format!(
                "no readable {RESULTS}: verdict re-checked from the history"
            ));
        }
    }
    run.files = existing(
        &folder.path,
        &[RESULTS, HISTORY, RUN_JSON, HARNESS_LOG, store::AUDIT],
    );
    if let Some(said) = audit_note(&folder.path) {
        run.notes.push(said);
    }
    (run, history, setup)
}

/// A `--target` run's audit of its deployment, in a line: what it found at
/// risk (the table links `audit.json` for the rest).
fn audit_note(dir: &Path) -> Option<String> {
    let audit = store::audit::AuditRecord::read(dir).ok()?;
    let risks = audit.rules_with(Severity::Risk);
    let unknown = audit.rules_with(Severity::Unknown);
    let target = &audit.target;
    Some(match (risks.is_empty(), unknown.is_empty()) {
        (false, _) => format!("audit of {target}: at risk: {}", risks.join(", ")),
        (true, false) => format!("audit of {target}: could not see {}", unknown.join(", ")),
        (true, true) => format!("audit of {target}: nothing at risk"),
    })
}

pub fn read_matrix(root: &Path, rel: &str) -> Matrix {
    let dir = root.join(rel);
    let mut matrix = Matrix {
        rel: rel.to_owned(),
        ..Matrix::default()
    };
    match Summary::read(&dir) {
        Ok(v) => matrix.summary = Some(v),
        Err(e) => matrix.problems.push(unreadable(SUMMARY_JSON, &e)),
    }
    matrix.files = existing(
        &dir,
        &[SUMMARY_MD, SUMMARY_JSON, COMPARISON_SVG, COMPARISON_PNG],
    );
    matrix
}
