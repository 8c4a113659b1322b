//! `lockstorm shrink <run>`: the smallest fault schedule that still breaks
//! the run's promise. The faults armed before the run's first anomaly are
//! cut down by delta debugging (`ddmin.rs`), then moved as soon as a
//! seeded draw could start one; each candidate is the stored plan with that
//! schedule (`--schedule`) and a time limit cut to just past its last fault
//! (`target.rs`), run up to `--tries` times, since timing varies: the first
//! try that breaks the promise settles it. The result is run `--tries` more
//! times for its rate, and printed as the command that runs it
//! (`command.rs`).
//!
//! Candidates run one at a time as `lockstorm cell` processes, as a
//! matrix's do, in one address block held for the whole search; their
//! folders go under `<run>/shrink/`, so the user's `latest` links stay
//! where they were. A signal stops the running candidate in order (its
//! faults healed) and reports the smallest schedule found so far.

mod command;
mod ddmin;
mod found;
mod target;

pub use found::Found;
use found::{plural, Shrunk, INTERRUPTED};

use crate::error::{Error, Result};
use crate::matrix::cell::{self, Ended};
use crate::options::RunPlan;
use crate::record::RunRecord;
use crate::schedule_text::{seconds, ScheduleText};
use checker::Validity;
use ddmin::Verdict;
use nemesis::Step;
use std::path::{Path, PathBuf};
use std::time::Instant;
use store::StoredRun;
use target::Shrinkable;
use tokio::sync::watch;

#[derive(clap::Args, Debug)]
pub struct ShrinkArgs {
    /// A run folder whose verdict is INVALID (`results/<config>-<nemesis>/latest`).
    pub run: PathBuf,
    /// How many times a candidate schedule is run before it counts as
    /// keeping the promise (timing varies), and how many times the result is
    /// run for its rate.
    #[arg(long, default_value_t = 3)]
    pub tries: u32,
    /// The most runs the search makes, the result's own tries included;
    /// once reached, the smallest schedule found so far is reported.
    #[arg(long, default_value_t = 30)]
    pub max_runs: u32,
}

/// Reads the run and searches. Bad input (not a run folder, a run that is
/// neither valid nor invalid, tries out of range) is an error, exit 254.
pub fn shrink(args: &ShrinkArgs) -> Result<Found> {
    if !(1..=20).contains(&args.tries) {
        return Err(Error::Usage(format!(
            "--tries {} is out of range: use 1 to 20",
            args.tries
        )));
    }
    if args.max_runs < 2 * args.tries {
        return Err(Error::Usage(format!(
            "--max-runs {} leaves no room: the run's own faults take up to --tries {} runs and the result {} more; use --max-runs {} or more",
            args.max_runs, args.tries, args.tries, 2 * args.tries
        )));
    }
    let stored = StoredRun::open(&args.run);
    let not_a_run = |path: &Path, e: store::ReadError| Error::BadInput {
        path: path.to_path_buf(),
        message: format!(
            "{e}; give a run folder, results/<config>-<nemesis>/<timestamp> or its latest link"
        ),
    };
    let record: RunRecord = stored
        .record()
        .map_err(|e| not_a_run(&stored.run_json(), e))?;
    let results = stored
        .results()
        .map_err(|e| not_a_run(&stored.results_json(), e))?;
    let dir = args.run.canonicalize().unwrap_or_else(|_| args.run.clone());
    let title = format!(
        "{} × {} (seed {})",
        record.options.setup(),
        record.options.aimed(),
        record.options.seed
    );
    match target::shrinkable(&record, &results) {
        Shrinkable::Valid => Ok(Found::Nothing(format!(
            "nothing to shrink: {} is VALID, no promise was broken",
            dir.display()
        ))),
        Shrinkable::Unknown => Err(Error::Usage(format!(
            "{} is UNKNOWN: there is no broken promise to shrink; shrink a run whose verdict is INVALID",
            dir.display()
        ))),
        Shrinkable::BeforeAnyFault { first_anomaly_ms } => Ok(Found::Nothing(format!(
            "nothing to shrink: {} broke its promise at {}, before its first fault",
            dir.display(),
            seconds(first_anomaly_ms)
        ))),
        Shrinkable::Steps { steps, lag_ms } => {
            let search = Search {
                original: record.options.clone(),
                lag_ms,
                tries: args.tries,
                folder: dir.join("shrink"),
            };
            search.run(&title, &steps, args.max_runs)
        }
    }
}

struct Search {
    original: RunPlan,
    lag_ms: u64,
    tries: u32,
    folder: PathBuf,
}

/// Runs candidates, one at a time, counting them against the budget.
struct Runner {
    rt: tokio::runtime::Runtime,
    stop: watch::Receiver<bool>,
    block: u8,
    folder: PathBuf,
    runs: u32,
    budget: u32,
    /// What ended the search early, if anything did: an error that would
    /// fail every run, kept to be returned.
    fatal: Option<Error>,
}

impl Search {
    fn run(&self, title: &str, steps: &[Step], max_runs: u32) -> Result<Found> {
        let started = Instant::now();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let stop = rt.block_on(catch_signals())?;
        // Held until the search ends: every candidate runs in it.
        let claim = crate::blocks::claim_one(None)?;
        let mut runner = Runner {
            rt,
            stop,
            block: claim.block(),
            folder: self.folder.clone(),
            runs: 0,
            // The result's own tries are kept aside for its rate.
            budget: max_runs - self.tries,
            fatal: None,
        };
        let not_reproduced = |interrupted| Found::NotReproduced {
            title: title.to_string(),
            faults: steps.len(),
            tries: self.tries,
            interrupted,
        };
        match runner.tries(&self.candidate(steps), self.tries) {
            Verdict::Fails => {}
            Verdict::Passes => return Ok(not_reproduced(false)),
            Verdict::Stop => match runner.fatal.take() {
                Some(e) => return Err(e),
                None => return Ok(not_reproduced(true)),
            },
        }
        let minimal = ddmin::ddmin(steps, |c| runner.tries(&self.candidate(c), self.tries));
        let (mut kept, mut stopped) = (minimal.kept, minimal.stopped);
        // Then as soon as a seeded draw could start a fault: a shorter run.
        let start_ms = self.original.nemesis_interval.as_millis() as u64 / 2;
        if let Some(moved) = target::sooner(&kept, start_ms).filter(|_| !stopped) {
            match runner.tries(&self.candidate(&moved), self.tries) {
                Verdict::Fails => kept = moved,
                Verdict::Passes => {}
                Verdict::Stop => stopped = true,
            }
        }
        if let Some(e) = runner.fatal.take() {
            return Err(e);
        }
        let plan = self.candidate(&kept);
        runner.budget = runner.runs + self.tries;
        let mut broke = 0;
        let mut tried = 0;
        for _ in 0..self.tries {
            match runner.once(&plan) {
                Some(Validity::False) => broke += 1,
                Some(_) => {}
                None => break,
            }
            tried += 1;
        }
        if let Some(e) = runner.fatal.take() {
            return Err(e);
        }
        let cut = match (runner.interrupted(), stopped) {
            (true, _) => Some(INTERRUPTED.to_string()),
            (false, true) => Some(format!("stopped at --max-runs {max_runs}")),
            (false, false) => None,
        };
        Ok(Found::Shrunk(Box::new(Shrunk {
            title: title.to_string(),
            from: steps.len(),
            plan,
            broke,
            tried,
            runs: runner.runs,
            took: started.elapsed(),
            folder: self.folder.clone(),
            cut,
        })))
    }

    /// The plan a candidate schedule runs (and prints) as.
    fn candidate(&self, steps: &[Step]) -> RunPlan {
        target::candidate(&self.original, steps, self.lag_ms)
    }
}

impl Runner {
    fn interrupted(&self) -> bool {
        *self.stop.borrow()
    }

    /// Up to `k` runs of `plan`, until one breaks the promise.
    fn tries(&mut self, plan: &RunPlan, k: u32) -> Verdict {
        for _ in 0..k {
            match self.once(plan) {
                Some(Validity::False) => return Verdict::Fails,
                Some(_) => {}
                None => return Verdict::Stop,
            }
        }
        Verdict::Passes
    }

    /// One run of `plan` as a cell; `None` when the search must stop (the
    /// budget is spent, a signal came, or the setup cannot run at all).
    fn once(&mut self, plan: &RunPlan) -> Option<Validity> {
        if self.runs >= self.budget || self.interrupted() || self.fatal.is_some() {
            return None;
        }
        self.runs += 1;
        let plan = RunPlan {
            results: self.folder.clone(),
            address_block: self.block,
            ..plan.clone()
        };
        let steps = plan.steps.as_deref().unwrap_or_default();
        let what = format!(
            "shrink: run {}: {} in {} s ({})",
            self.runs,
            plural(steps.len(), "fault"),
            plan.time_limit.as_secs(),
            ScheduleText::of(steps)
        );
        let mut stop = self.stop.clone();
        let ended = self.rt.block_on(cell::run(&plan, &mut stop, |_| {}));
        let verdict = match ended {
            Ended::Ran(outcome) if outcome.record.interrupted => None,
            Ended::Ran(outcome) => Some(outcome.results.valid),
            // A run that could not complete (a node that would not start)
            // did not break the promise; the next try may.
            Ended::Failed(e) => {
                eprintln!("{what}: could not complete: {e}");
                return Some(Validity::Unknown);
            }
            Ended::Fatal(e) => {
                self.fatal = Some(e);
                return None;
            }
        };
        let word = verdict.map_or("interrupted", store::summary::verdict_word);
        eprintln!("{what}: {word}");
        verdict
    }
}

/// From the first SIGINT, SIGTERM or SIGHUP on, the receiver reads true:
/// the running candidate gets one SIGINT from `cell::run` and stops in
/// order, and no other starts.
async fn catch_signals() -> Result<watch::Receiver<bool>> {
    let interrupt = crate::interrupt::Interrupt::catch().map_err(|e| Error::Io {
        context: "catching stop signals".into(),
        source: e,
    })?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        interrupt.wait().await;
        eprintln!("shrink: interrupted; stopping the run under way (it heals its faults) and reporting what was found");
        let _ = tx.send(true);
    });
    Ok(rx)
}
