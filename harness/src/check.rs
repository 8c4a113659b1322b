//! `lockstorm check`: re-check a stored run or a bare history file, and the
//! run-level judgement `lockstorm run` shares with it.

use crate::error::{Error, Result};
use crate::record::RunRecord;
use checker::History;
use checker::{Promise, Results, Settings, StreamStats, Validity};
use std::path::{Path, PathBuf};
use std::time::Duration;
use store::{ReadError, StoredRun, HISTORY, RUN_JSON};

/// How a history file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// lockstorm's `history.jsonl`.
    Jsonl,
    /// A Jepsen history: one op map per line, or all of them in one vector.
    Edn,
}

/// What the history alone cannot tell: a run that was interrupted, that
/// asked for faults and injected none, or in which no lock was ever granted
/// tested less than it claims, so it is at best `unknown`. Anomalies found
/// stand (a definite failure is never softened), except in an interrupted
/// run and in one that never granted the lock, which decide nothing.
pub fn judge_run(results: &mut Results, record: &RunRecord) {
    let mut unknown = |note: String| {
        results.notes.push(note);
        results.valid = results.valid.and(Validity::Unknown);
    };
    if let Some(why) = &record.adapter_broken {
        unknown(format!(
            "the run ended early: an adapter (a client or storage adapter) broke the protocol: {why}"
        ));
    }
    if record.interrupted {
        let at = match record.interrupted_at_ms {
            Some(ms) => format!(" after {:.1} s", ms as f64 / 1000.0),
            None => String::new(),
        };
        unknown(format!(
            "the run was interrupted{at}, before its time limit of {} s",
            record.options.time_limit.as_secs()
        ));
    }
    // Runs stored before a fault had to fit the time limit have an empty
    // schedule: the nemesis they asked for still says what was meant.
    let asked = record.schedule.as_ref().is_some_and(|s| !s.is_empty())
        || !record.options.nemesis.actions().is_empty();
    if asked && results.stats.first_fault_time.is_none() {
        unknown(format!(
            "no fault injected: --nemesis {} was scheduled but no fault started, so the run tested nothing the nemesis was for",
            record.options.nemesis
        ));
    }
    let exposure = &results.stats.exposure;
    if asked && exposure.unmet > 0 && exposure.met == 0 {
        unknown(format!(
            "no fault met the lock: {}, so the run tested nothing --nemesis {} was for",
            unmet_faults(exposure),
            record.options.nemesis
        ));
    }
    let granted_none = record.options.config.has_lock_node() && results.stats.acquired == 0;
    if granted_none {
        unknown("no lock was ever granted: no acquire succeeded, so nothing was tested".into());
    }
    if !record.expires() {
        let after = record.options.deadlock_after(false);
        results.notes.push(format!(
            "the library's lock has no TTL (its adapter declares no-ttl): it holds while its holder's session lives, so no hold outlives a lease, and the lock counts as stuck after {:.1} s without a grant (the acquire timeout and 1 s, no TTL)",
            after.as_secs_f64()
        ));
    }
    if record.interrupted || granted_none {
        // Cut short, it decides nothing, whatever it saw so far (the counts
        // stay in the results); a lock never granted is a setup that could
        // not run the lock (a login without the rights, a key in the way),
        // and a `deadlock` it shows is that, not a finding about the lock.
        results.valid = Validity::Unknown;
    }
}

/// Why each fault of a run that met nothing is no evidence.
fn unmet_faults(x: &checker::Exposure) -> String {
    let idle = x.unmet - x.interrupted;
    let mut said = Vec::new();
    if idle > 0 {
        said.push(format!("{idle} fault(s) started with no holder and no acquire or write in flight, and saw no grant or write while active"));
    }
    if x.interrupted > 0 {
        said.push(format!(
            "{} fault(s) were cut short by the run's end before they acted",
            x.interrupted
        ));
    }
    said.join("; ")
}

/// Checks a run folder or a history file. The `run.json` beside a history
/// decides the promise and the `deadlock` threshold (`explicit` and
/// `deadlock_after`, from `--promise` and `--deadlock-ms`, override them)
/// and judges the run as `lockstorm run` did; a bare file needs neither,
/// but without a threshold its `deadlock` is not checked.
pub fn check_path(
    path: &Path,
    explicit: Option<Promise>,
    deadlock_after: Option<Duration>,
    format: Format,
) -> Result<Results> {
    let (history_path, folder) = if path.is_dir() {
        (path.join(HISTORY), Some(StoredRun::open(path)))
    } else {
        (path.to_path_buf(), path.parent().map(StoredRun::open))
    };
    let bad = |p: &Path, message: String| Error::BadInput {
        path: p.to_path_buf(),
        message,
    };
    let stored = folder
        .filter(|f| f.run_json().is_file())
        .map(|f| read_record(&f).map_err(|e| (f.run_json(), e)));
    let mut unread = None;
    let record = match (stored, explicit) {
        (None, _) => None,
        (Some(Ok(record)), _) => Some(record),
        // The history can still be checked; the note says what was not.
        (Some(Err((p, e))), Some(_)) => {
            unread = Some(format!(
                "{} could not be read ({e}): checked as a bare history under --promise",
                p.display()
            ));
            None
        }
        (Some(Err((p, e))), None) => {
            return Err(bad(
                &p,
                format!("{e}; give --promise to check the history alone"),
            ))
        }
    };
    let mut settings = record
        .as_ref()
        .map_or(Settings::new(Promise::MutualExclusion), RunRecord::settings);
    settings.promise = explicit.unwrap_or(settings.promise);
    settings.deadlock_after = deadlock_after.or(settings.deadlock_after);
    let mut results =
        check_history(&history_path, settings, format).map_err(|e| bad(&history_path, e))?;
    results.notes.extend(unread);
    if settings.deadlock_after.is_none() {
        results.notes.push(
            "give --deadlock-ms (the lock's TTL + its acquire timeout + 1 s) to check deadlock"
                .into(),
        );
    }
    if let Some(record) = &record {
        judge_run(&mut results, record);
    }
    Ok(results)
}

/// The folder's run record, or why not in words `check` shows.
fn read_record(folder: &StoredRun) -> std::result::Result<RunRecord, String> {
    folder.record().map_err(|e| match e {
        ReadError::Io(e) => e.to_string(),
        ReadError::Json(e) => {
            format!("{e}; is this a lockstorm run folder? its {RUN_JSON} is not a run record")
        }
    })
}

fn check_history(
    path: &PathBuf,
    settings: Settings,
    format: Format,
) -> std::result::Result<Results, String> {
    let open = || {
        std::fs::File::open(path)
            .map(std::io::BufReader::new)
            .map_err(|e| format!("{e}; give a run folder (with history.jsonl) or a history file"))
    };
    let text = |e: checker::history::ParseError| e.to_string();
    match format {
        Format::Jsonl => streamed(
            |window| checker::check_jsonl(open()?, settings, window, true).map_err(text),
            || History::from_jsonl(open()?).map_err(text),
            settings,
        ),
        // Jepsen's meaning of `fail`: the op did not happen, whatever its
        // error (Knossos judges these histories so).
        Format::Edn => {
            let settings = settings.knossos_fail();
            streamed(
                |window| checker::check_edn(open()?, settings, window).map_err(text),
                || checker::from_edn(open()?).map_err(text),
                settings,
            )
        }
    }
}

/// Checks a history file as it streams past (`stream`, given the reorder
/// window): the linear checkers hold only open ops and the search the lock
/// ops since the last place it could settle, so a long history re-checks
/// in little memory. When the stream cannot decide, or its events came too
/// far out of order, the history is read whole (`read`) and checked in
/// memory against `settings`, with a note saying why.
fn streamed(
    stream: impl Fn(checker::Window) -> std::result::Result<(Results, StreamStats), String>,
    read: impl Fn() -> std::result::Result<History, String>,
    settings: Settings,
) -> std::result::Result<Results, String> {
    let (results, stats) = stream(FIRST_WINDOW)?;
    let in_memory = |note: String| {
        let mut results = checker::check(&read()?, settings);
        results.notes.push(note);
        Ok(results)
    };
    if let Some(why) = stats.whole_needed {
        return in_memory(format!("{why}: the history was checked whole, in memory"));
    }
    if stats.late == 0 {
        return Ok(results);
    }
    if stats.lateness_ns <= REORDER_WINDOW_NS {
        // Late only past the first window's bound in events: a window of
        // exactly how late they came, in time alone, puts every one back
        // in order.
        let (results, again) = stream(stats.lateness_ns.into())?;
        if again.late == 0 && again.whole_needed.is_none() {
            return Ok(results);
        }
    }
    // Events later than the window cannot be put back in order as they
    // stream past; the file is on disk, so sort it whole.
    in_memory(format!(
        "events arrived up to {} s out of file order, more than {} s: the history was sorted in memory and checked whole",
        stats.lateness_ns / 1_000_000_000,
        REORDER_WINDOW_NS / 1_000_000_000
    ))
}

/// How late an event may reach the history file and still be checked in
/// time order: far beyond any pause the nemesis injects (1.5 × TTL).
const REORDER_WINDOW_NS: u64 = 120_000_000_000;

/// The first pass's window: as above in time, and at most 65 536 events
/// waiting (some 17 MB), so a history dense in time is not held whole. A
/// run writes far fewer events than that during a pause; a history whose
/// events come later than that is read again, with a window of exactly how
/// late they came.
const FIRST_WINDOW: checker::Window = checker::Window {
    ns: REORDER_WINDOW_NS,
    events: 1 << 16,
};
