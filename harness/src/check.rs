//! `lockstorm check`: re-check a stored run or a bare history file.

use crate::error::{Error, Result};
use crate::run::RunRecord;
use checker::verdict::{Promise, Results};
use checker::History;
use std::path::{Path, PathBuf};

/// Where the history is, and which promise applies: the `run.json` beside a
/// history decides; `explicit` (from `--promise`) decides for a bare file.
pub fn check_path(path: &Path, explicit: Option<Promise>) -> Result<Results> {
    let (history_path, run_json) = if path.is_dir() {
        (path.join("history.jsonl"), Some(path.join("run.json")))
    } else {
        (
            path.to_path_buf(),
            path.parent().map(|p| p.join("run.json")),
        )
    };
    let bad = |p: &PathBuf, message: String| Error::BadInput {
        path: p.clone(),
        message,
    };
    let stored = run_json
        .filter(|p| p.is_file())
        .map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|e| bad(&p, e.to_string()))?;
            serde_json::from_str::<RunRecord>(&text)
                .map(|r| r.promise)
                .map_err(|e| bad(&p, format!("{e}; is this a lockstorm run folder?")))
        })
        .transpose()?;
    let promise = explicit.or(stored).unwrap_or(Promise::MutualExclusion);
    let file = std::fs::File::open(&history_path).map_err(|e| {
        bad(
            &history_path,
            format!("{e}; give a run folder (with history.jsonl) or a history file"),
        )
    })?;
    let history = History::from_jsonl(std::io::BufReader::new(file))
        .map_err(|e| bad(&history_path, e.to_string()))?;
    Ok(checker::check(&history, promise))
}
