//! `lockstorm check`: re-check a stored run or a bare history file.

use crate::error::{Error, Result};
use checker::verdict::{Promise, Results};
use std::path::{Path, PathBuf};

/// Where the history is, and which promise applies: the `run.json` beside a
/// history decides; `explicit` (from `--promise`) decides for a bare file.
/// How a history file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// lockstorm's `history.jsonl`.
    Jsonl,
    /// A Jepsen history: one op map per line, or all of them in one vector.
    Edn,
}

pub fn check_path(path: &Path, explicit: Option<Promise>, format: Format) -> Result<Results> {
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
            // Only the promise matters here, so runs stored by older versions
            // (with other options) still re-check.
            serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| serde_json::from_value::<Promise>(v["promise"].clone()).ok())
                .ok_or_else(|| {
                    bad(
                        &p,
                        "no promise in it; is this a lockstorm run folder?".into(),
                    )
                })
        })
        .transpose()?;
    let promise = explicit.or(stored).unwrap_or(Promise::MutualExclusion);
    let file = std::fs::File::open(&history_path).map_err(|e| {
        bad(
            &history_path,
            format!("{e}; give a run folder (with history.jsonl) or a history file"),
        )
    })?;
    let reader = std::io::BufReader::new(file);
    let results = match format {
        // Streamed: the linear checkers hold only open ops, so a long
        // history re-checks in little memory.
        Format::Jsonl => checker::check_jsonl(reader, promise, REORDER_WINDOW_NS, true)
            .map(|(results, _)| results),
        Format::Edn => checker::edn::from_edn(reader).map(|h| checker::check(&h, promise)),
    };
    results.map_err(|e| bad(&history_path, e.to_string()))
}

/// How late an event may reach the history file and still be checked in
/// time order: far beyond any pause the nemesis injects (1.5 × TTL).
const REORDER_WINDOW_NS: u64 = 120_000_000_000;
