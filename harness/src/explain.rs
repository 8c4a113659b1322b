//! `lockstorm explain`: each anomaly of a stored run told as the chain of
//! events that proves it (`story::explain`), and the first one `run`
//! prints under the summary of an invalid run.

use crate::check::{self, Format};
use crate::error::{Error, Result};
use crate::record::RunRecord;
use checker::{History, Results};
use std::path::Path;
use store::{StoredRun, HISTORY};
use story::{Explanation, Known};

/// What the run knew that its history does not say.
pub fn known(record: &RunRecord) -> Known {
    let o = &record.options;
    Known {
        workers: Some(o.workers),
        lease_ns: record
            .lease()
            .map(|ttl| ttl.as_nanos().try_into().unwrap_or(u64::MAX)),
    }
}

/// Re-checks the run folder `dir` and tells every example of every
/// anomaly; with the promise the run was judged by.
pub fn explain_dir(dir: &Path) -> Result<(Vec<Explanation>, checker::Promise)> {
    let bad = |message: String| Error::BadInput {
        path: dir.to_path_buf(),
        message,
    };
    if !dir.join(HISTORY).is_file() {
        return Err(bad(format!(
            "no {HISTORY} here; give a run folder, such as results/single-pause/latest"
        )));
    }
    let results = check::check_path(dir, None, None, Format::Jsonl)?;
    let record = StoredRun::open(dir)
        .record::<crate::options::RunPlan>()
        .map_err(|e| {
            bad(format!(
                "{e}; explain needs the run.json of a lockstorm run"
            ))
        })?;
    Ok((told(dir, &results, &record)?, results.promise))
}

/// Every example told, from the history in `dir` and its `results`.
pub fn told(dir: &Path, results: &Results, record: &RunRecord) -> Result<Vec<Explanation>> {
    let path = dir.join(HISTORY);
    let history = std::fs::File::open(&path)
        .map_err(|e| e.to_string())
        .and_then(|f| History::from_jsonl(std::io::BufReader::new(f)).map_err(|e| e.to_string()))
        .map_err(|message| Error::BadInput { path, message })?;
    Ok(story::explain(&history, results, known(record)))
}

/// The chain of the most harmful anomaly that breaks the promise (as
/// `explain` orders them), for the end of an invalid run's summary: from
/// the history the run just checked, still in memory.
pub fn first_breach(
    history: &History,
    results: &Results,
    record: &RunRecord,
) -> Option<Explanation> {
    let all = story::explain(history, results, known(record));
    let digest = story::digest(all, results.promise);
    let mut breaches = digest.into_iter().map(|(e, _)| e);
    breaches.find(|e| results.promise.counts(&e.anomaly))
}
