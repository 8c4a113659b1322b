//! Judge and store: check the history as stored, the way `lockstorm check`
//! does, then keep the verdict, the pictures and the run's record in its
//! folder.

use super::{Run, RunOutcome};
use crate::error::{Context, Error, Result};
use crate::record::RunRecord;
use checker::{History, Results};
use store::write_json;

impl Run<'_> {
    /// Checks the history as stored on disk, the same way `lockstorm check`
    /// does, and holds the verdict to what the run could show.
    pub(super) fn judge(&self, record: &RunRecord) -> Result<(Results, History)> {
        let path = self.dir.history();
        let file = std::fs::File::open(&path).context(|| format!("opening {}", path.display()))?;
        let history =
            History::from_jsonl(std::io::BufReader::new(file)).map_err(|e| Error::BadInput {
                path: path.clone(),
                message: e.to_string(),
            })?;
        let mut results = checker::check(&history, record.settings());
        crate::check::judge_run(&mut results, record);
        Ok((results, history))
    }

    /// results.json, the pictures and run.json as the run ended; an invalid
    /// run's first breach, told.
    pub(super) fn store(
        &self,
        record: RunRecord,
        results: Results,
        history: History,
    ) -> Result<RunOutcome> {
        let (options, dir) = (self.options, self.dir);
        write_json(&dir.results_json(), &results)?;
        // Pictures are evidence, not the verdict: a failure to draw is logged.
        let setup = report::plot::Setup {
            workers: options.workers,
            lease: record.lease(),
        };
        if let Err(e) =
            report::plot::render(&dir.path, &history, &results, setup, &options.heading())
        {
            tracing::warn!("drawing the run's pictures failed: {e:#}");
        }
        write_json(&dir.run_json(), &record)?;
        tracing::info!("verdict {:?}", results.valid);
        let first_breach = (results.valid == checker::Validity::False)
            .then(|| crate::explain::first_breach(&history, &results, &record))
            .flatten();
        Ok(RunOutcome {
            dir: dir.path.clone(),
            record,
            results,
            first_breach,
        })
    }
}
