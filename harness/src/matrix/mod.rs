//! `lockstorm matrix`: every chosen config × nemesis, `--runs` runs each,
//! into `results/matrix-<timestamp>/` (summary.json, summary.md,
//! comparison.svg/png). With `--expect`, the verdicts are held to
//! `expectations.toml`.

mod board;
pub mod cell;
pub mod expect;

use crate::clients::Client;
use crate::error::{Context, Error, Result};
use crate::interrupt::Interrupt;
use crate::options::{Output, Refusal, RunOptions, RunPlan, Shared, Timing};
use checker::Validity;
use expect::Expectations;
use nemesis::{Aimed, Nemesis};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use store::matrix::{Row, ShardOf, Skipped, Summary};
use store::shard::Shard;
use tokio::sync::watch;
use workloads::install::SHIPPED;
use workloads::Config;

#[derive(clap::Args, Clone, Debug)]
pub struct MatrixArgs {
    // The lists in these options' help are read from the registries: help.rs.
    #[arg(long, default_value = "all", help = crate::help::configs())]
    pub configs: String,
    #[arg(long, default_value = "all", help = crate::help::nemeses())]
    pub nemeses: String,
    #[arg(long, help = crate::help::clients())]
    pub clients: Option<String>,
    /// Your own lock client's adapter, as for `run` (split at whitespace,
    /// run without a shell), on every topology asked for: its rows are
    /// `<config>.custom`, and an `--expect` file names them so
    /// (`[single.custom]`).
    #[arg(long, value_parser = Client::command, conflicts_with = "clients", value_name = "CMD")]
    pub client_cmd: Option<Client>,
    /// Runs per config × nemesis; run k uses seed `--seed` + k.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    #[command(flatten)]
    pub shared: Shared,
    #[command(flatten)]
    pub timing: Timing,
    /// Seed of each pair's first run: a matrix is reproducible.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// TOML of expected verdicts; the matrix exits 0 only if all are met.
    #[arg(long)]
    pub expect: Option<PathBuf>,
    #[command(flatten)]
    pub output: Output,
    #[command(flatten)]
    pub nodes: crate::options::Nodes,
    /// Stop a pair's runs at its first invalid one: enough to show an
    /// expected-invalid pair is caught, and the time goes to the others.
    #[arg(long)]
    pub until_invalid: bool,
    /// Run only shard K of N (pair i of the whole matrix is shard i mod N + 1),
    /// one per CI runner; the shards together run every pair once.
    #[arg(long)]
    pub shard: Option<Shard>,
    /// Cells (runs) at once, each in its own process and its own block of
    /// loopback addresses [default: five per core: a cell mostly waits on
    /// timers]. A pair's runs go one after another.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=MAX_JOBS as i64))]
    pub jobs: Option<u8>,
}

/// The most cells at once: each takes a `127.0.<block>.0/24` of its own.
pub const MAX_JOBS: u8 = 64;

/// Cells at once per core by default. A cell mostly sleeps on its fault
/// timers and leases: ten at once on two cores (the full matrix) kept the
/// CPU 30% busy on average and never less than 31% idle over any 5 s.
const JOBS_PER_CORE: usize = 5;

impl MatrixArgs {
    /// `--jobs`, or [`JOBS_PER_CORE`] per core, and never more than there
    /// are pairs.
    fn jobs(&self, pairs: usize) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let jobs = self
            .jobs
            .map_or(JOBS_PER_CORE * cores, usize::from)
            .min(usize::from(MAX_JOBS));
        jobs.min(pairs).max(1)
    }
}

pub struct MatrixOutcome {
    pub dir: PathBuf,
    pub summary: Summary,
    pub interrupted: bool,
}

pub async fn matrix(args: MatrixArgs) -> Result<MatrixOutcome> {
    let chosen = Chosen::of(&args)?;
    if args.runs == 0 {
        return Err(Error::Usage("--runs 0 runs nothing: use at least 1".into()));
    }
    if args.nodes.hosts.is_some() {
        return Err(Error::Usage("lockstorm matrix does not run on --nodes hosts yet: run each pair with `lockstorm run --nodes …`, or drop --nodes".into()));
    }
    // The options every pair shares are checked as `run` checks them.
    options_for(&args, Config::Single, Nemesis::none()).resolve()?;
    let expectations = args.expect.as_deref().map(load).transpose()?;
    // Fail before the first run if the nodes have nowhere to run.
    let replicated = chosen.configs.contains(&Config::Replicated);
    let backend =
        backend::provision(args.nodes.backend, args.nodes.image.as_deref(), replicated).await?;
    backend.finish().await;

    let (plan, mut skipped) = chosen.plan(&args)?;
    let pairs: Vec<String> = plan
        .iter()
        .map(|runs| format!("{} × {}", runs[0].setup(), runs[0].aimed()))
        .collect();
    let plan: Vec<(usize, Vec<RunPlan>)> = match args.shard {
        Some(shard) => {
            // Skipped pairs are listed once, by the first shard.
            if shard.k != 1 {
                skipped.clear();
            }
            shard.take(plan)
        }
        None => plan.into_iter().enumerate().collect(),
    };
    refuse_empty(&pairs, &plan, &skipped, &args)?;
    print_plan(&plan, pairs.len(), &skipped, &args);
    // Listened for from the start, so a signal between or during the
    // startup of runs still stops the matrix as interrupted.
    let stop = Interrupt::catch_saying(
        "stopping the matrix: each running cell stops as an interrupted run does, and no other starts",
    )
    .context(|| "catching stop signals".into())?;

    let jobs = args.jobs(plan.len());
    // Each cell at once runs in an address block of its own, held by the
    // matrix until it ends.
    let blocks = crate::blocks::claim(args.nodes.address_block, jobs)?;
    let started = store::layout::stamp();
    let dir = store::layout::unique_dir(&args.output.results, &format!("matrix-{started}"))?;
    let wall = Instant::now();
    let mut summary = Summary {
        started,
        time_limit_s: args.timing.time_limit,
        runs_per_pair: args.runs,
        seed: args.seed,
        expect: args.expect.as_ref().map(|p| p.display().to_string()),
        skipped,
        shard: args.shard.map(|shard| ShardOf { shard, pairs }),
        until_invalid: args.until_invalid,
        ..Summary::default()
    };
    let mut rows = run_lanes(&args, plan, &blocks, &stop).await?;
    let interrupted = stop.happened();
    rows.sort_by_key(|(i, _)| *i);
    summary.rows = rows.into_iter().map(|(_, row)| row).collect();
    summary.interrupted = interrupted;
    summary.wall_s = wall.elapsed().as_secs_f64();
    if let Some(expectations) = &expectations {
        expectations.judge(&mut summary);
    }
    report::write_matrix(&dir, &summary)?;
    Ok(MatrixOutcome {
        dir,
        summary,
        interrupted,
    })
}

/// The configs, nemeses and clients the matrix crosses.
struct Chosen {
    configs: Vec<Config>,
    nemeses: Vec<Aimed>,
    clients: Vec<Option<Client>>,
}

impl Chosen {
    /// The lists given, each checked against what there is.
    fn of(args: &MatrixArgs) -> Result<Self> {
        // A client adapter brings its own lock: `all` means every Redis
        // topology (a Redis library cannot speak to etcd: `etcd` is named).
        let all: Vec<String> = Config::ALL
            .into_iter()
            .filter(|&c| {
                let adapter = args.clients.is_some() || args.client_cmd.is_some();
                !adapter || (workloads::install::topology(c).is_some() && !c.locks_in_etcd())
            })
            .map(|c| c.to_string())
            .collect();
        let configs = parse_list(&args.configs, &all, |s| s.parse::<Config>())?;
        // `all` is what `Nemesis::each` lists; `+` joins one nemesis's faults,
        // `@` names where a striking fault (`Fault::striking`) strikes.
        let each: Vec<String> = Nemesis::each().iter().map(|n| n.to_string()).collect();
        let nemeses = parse_list(&args.nemeses, &each, |s| s.parse::<Aimed>())?;
        let shipped: Vec<String> = SHIPPED.iter().map(|s| s.name.to_string()).collect();
        let clients: Vec<Option<Client>> = match &args.clients {
            None if args.client_cmd.is_some() => vec![args.client_cmd.clone()],
            None => vec![None],
            Some(list) => parse_list(list, &shipped, Client::shipped)?
                .into_iter()
                .map(Some)
                .collect(),
        };
        Ok(Chosen {
            configs,
            nemeses,
            clients,
        })
    }

    /// Each pair's runs, client by client, config by config, in the order
    /// given; and the pairs refused as inapplicable, with why.
    fn plan(&self, args: &MatrixArgs) -> Result<(Vec<Vec<RunPlan>>, Vec<Skipped>)> {
        let mut plan = Vec::new();
        let mut skipped = Vec::new();
        for client in &self.clients {
            for &config in &self.configs {
                // `--configs all` with clients means each client's own topologies.
                let all_configs = args.configs.trim() == "all";
                if all_configs && client.as_ref().is_some_and(|c| c.refusal(config).is_some()) {
                    continue;
                }
                for nemesis in &self.nemeses {
                    match plans(args, config, client, nemesis) {
                        Ok(runs) => plan.push(runs),
                        Err(Refusal::Inapplicable(reason)) => skipped.push(Skipped {
                            config: crate::clients::setup_name(
                                config,
                                client.as_ref(),
                                config.storage().or(args.shared.storage).unwrap_or_default(),
                            ),
                            nemesis: nemesis.to_string(),
                            reason,
                        }),
                        Err(refusal) => return Err(refusal.into()),
                    }
                }
            }
        }
        Ok((plan, skipped))
    }
}

/// A usage error if no pair is left to run: every pair was refused, or
/// this shard has none.
fn refuse_empty(
    pairs: &[String],
    plan: &[(usize, Vec<RunPlan>)],
    skipped: &[Skipped],
    args: &MatrixArgs,
) -> Result<()> {
    if pairs.is_empty() {
        let why: Vec<String> = skipped
            .iter()
            .map(|s| format!("{} × {}: {}", s.config, s.nemesis, s.reason))
            .collect();
        return Err(Error::Usage(format!(
            "nothing to run, every pair was refused ({}): choose other --configs, --nemeses or options",
            why.join("; ")
        )));
    }
    if plan.is_empty() {
        let shard = args.shard.map(|s| s.to_string()).unwrap_or_default();
        return Err(Error::Usage(format!(
            "--shard {shard} has no pair: the matrix has {n} pair(s), so use at most {n} shards",
            n = pairs.len()
        )));
    }
    Ok(())
}

/// Runs the planned pairs, one lane per address block, until all are
/// done or `stop`: each pair's row with its place in the plan. The first
/// fatal error stops every lane and is the matrix's.
async fn run_lanes(
    args: &MatrixArgs,
    plan: Vec<(usize, Vec<RunPlan>)>,
    blocks: &[crate::blocks::Claim],
    stop: &Interrupt,
) -> Result<Vec<(usize, Row)>> {
    let total = plan.len() * args.runs as usize;
    // Pairs wait in plan order; each lane takes the next when it is free.
    let queue: std::collections::VecDeque<_> = plan.into_iter().enumerate().collect();
    let lanes = Lanes {
        queue: std::sync::Mutex::new(queue),
        board: board::Board::new(),
        runs: args.runs as usize,
        total,
        results: std::path::absolute(&args.output.results).unwrap_or_default(),
        until_invalid: args.until_invalid,
    };
    let lanes = Arc::new(lanes);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut running = tokio::task::JoinSet::new();
    for block in blocks.iter().map(crate::blocks::Claim::block) {
        let (lanes, stop) = (lanes.clone(), stop_rx.clone());
        running.spawn(async move { lanes.run(block, stop).await });
    }
    let mut rows = Vec::new();
    let mut fatal = None;
    loop {
        tokio::select! {
            done = running.join_next() => match done {
                None => break,
                Some(Ok(Ok(lane_rows))) => rows.extend(lane_rows),
                Some(Ok(Err(e))) => {
                    // The setup is wrong: no other run can succeed either.
                    let _ = stop_tx.send(true);
                    fatal.get_or_insert(e);
                }
                Some(Err(e)) => {
                    let _ = stop_tx.send(true);
                    fatal.get_or_insert(Error::Cell {
                        message: format!("a matrix lane failed: {e}"),
                        code: crate::exit::HARNESS_FAILED,
                    });
                }
            },
            _ = stop.wait(), if !*stop_tx.borrow() => {
                let _ = stop_tx.send(true);
            }
        }
    }
    match fatal {
        Some(e) => Err(e),
        None => Ok(rows),
    }
}

/// A pair waiting for a lane: its place in this matrix's plan, and its
/// place in the whole matrix with its runs.
type Waiting = (usize, (usize, Vec<RunPlan>));

/// The matrix's pairs and what its lanes share. A lane is one cell at a
/// time in its own address block; it takes the next waiting pair and runs
/// that pair's runs in order.
struct Lanes {
    queue: std::sync::Mutex<std::collections::VecDeque<Waiting>>,
    board: board::Board,
    runs: usize,
    total: usize,
    /// Run folders are absolute; --results may not be.
    results: PathBuf,
    until_invalid: bool,
}

impl Lanes {
    /// Runs pairs in address block `block` until none waits or `stop`;
    /// each pair's row with its place in the plan. An error is fatal.
    async fn run(&self, block: u8, mut stop: watch::Receiver<bool>) -> Result<Vec<(usize, Row)>> {
        let mut rows = Vec::new();
        loop {
            if *stop.borrow() {
                return Ok(rows);
            }
            let next = self.queue.lock().expect("queue lock poisoned").pop_front();
            let Some((i, (pair, runs))) = next else {
                return Ok(rows);
            };
            let mut row = Row::new(&runs[0].setup(), &runs[0].aimed().to_string());
            row.pair = pair;
            for (k, mut options) in runs.into_iter().enumerate() {
                if k > 0 && *stop.borrow() {
                    break;
                }
                let n = i * self.runs + k + 1;
                let title = format!(
                    "[{n}/{}] {} × {} (seed {})",
                    self.total, row.config, row.nemesis, options.seed
                );
                options.address_block = block;
                let start = Instant::now();
                self.board.start(n, &title, options.time_limit.as_secs());
                let ended = cell::run(&options, &mut stop, |tick| self.board.tick(n, tick)).await;
                let secs = start.elapsed().as_secs_f64();
                let caught = match ended {
                    cell::Ended::Ran(outcome) => {
                        self.board.finish(
                            n,
                            &format!("{title}: {} in {secs:.0} s", brief(&outcome.results)),
                        );
                        let rel = outcome
                            .dir
                            .strip_prefix(&self.results)
                            .unwrap_or(&outcome.dir);
                        row.add(&outcome.results, rel.display().to_string());
                        if let Some(client) = &outcome.record.client {
                            row.library = Some(client.library.clone());
                        }
                        outcome.results.valid == Validity::False
                    }
                    cell::Ended::Failed(e) => {
                        self.board
                            .finish(n, &format!("{title}: the harness failed: {e}"));
                        row.add_error(e.to_string());
                        false
                    }
                    cell::Ended::Fatal(e) => {
                        self.board.finish(n, &format!("{title}: {e}"));
                        return Err(e);
                    }
                };
                if self.until_invalid && caught {
                    break;
                }
            }
            rows.push((i, row));
        }
    }
}

/// A pair's runs, each resolved once as `run` resolves it: run k uses seed
/// `--seed` + k. A pair that `run` would refuse for any seed is refused.
fn plans(
    args: &MatrixArgs,
    config: Config,
    client: &Option<Client>,
    nemesis: &Aimed,
) -> std::result::Result<Vec<RunPlan>, Refusal> {
    (0..args.runs)
        .map(|k| {
            let mut options = options_for(args, config, nemesis.nemesis.clone());
            options.client.client = client.clone();
            // The default point stays unset: `run` refuses `--at` without a strike.
            if nemesis.at != nemesis::At::default() {
                options.at = Some(nemesis.at);
            }
            options.seed = Some(args.seed + u64::from(k));
            options.resolve()
        })
        .collect()
}

/// What will run, and roughly how long it takes: each run's time limit
/// plus its setup, stop and check.
fn print_plan(
    plan: &[(usize, Vec<RunPlan>)],
    pairs: usize,
    skipped: &[Skipped],
    args: &MatrixArgs,
) {
    let jobs = args.jobs(plan.len()) as u64;
    // Lanes take whole pairs: the slowest lane ends the matrix.
    let per_pair = u64::from(args.runs) * (args.timing.time_limit + RUN_OVERHEAD_S);
    let secs = (plan.len() as u64).div_ceil(jobs) * per_pair;
    let shard = match args.shard {
        Some(shard) => format!(" (shard {shard} of the {pairs} pair(s))"),
        None => String::new(),
    };
    println!(
        "matrix: {} pair(s){shard} × {} run(s) of {} s, {jobs} at once, about {} min:",
        plan.len(),
        args.runs,
        args.timing.time_limit,
        secs.div_ceil(60)
    );
    for (_, runs) in plan {
        println!("  {} × {}", runs[0].setup(), runs[0].aimed());
    }
    for s in skipped {
        println!("  skipped {} × {}: {}", s.config, s.nemesis, s.reason);
    }
}

/// A run's time beyond its limit: nodes up, workers stopped, the check
/// (2.4 s a run in a release build's full matrix, rounded up).
const RUN_OVERHEAD_S: u64 = 3;

fn options_for(args: &MatrixArgs, config: Config, nemesis: Nemesis) -> RunOptions {
    let mut options = RunOptions::new(config, nemesis);
    options.timing = args.timing;
    options.output = args.output.clone();
    options.seed = Some(args.seed);
    options.nodes = args.nodes.clone();
    options.shared = args.shared.clone();
    options
}

/// `all`, or names separated by commas (a nemesis's own faults joined by `+`).
fn parse_list<T>(
    text: &str,
    all: &[String],
    parse: impl Fn(&str) -> std::result::Result<T, String>,
) -> Result<Vec<T>> {
    let names: Vec<String> = match text.trim() {
        "all" => all.to_vec(),
        list => list.split(',').map(|s| s.trim().to_string()).collect(),
    };
    names
        .iter()
        .map(|n| parse(n).map_err(Error::Usage))
        .collect()
}

fn load(path: &Path) -> Result<Expectations> {
    let bad = |message: String| Error::BadInput {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("{e}; give a TOML file like expectations.toml")))?;
    Expectations::parse(&text).map_err(bad)
}

/// `INVALID (lock-overlap 5, lost-update 2)`: the verdict and what was found.
/// A cell's verdict and what it found: what breaks the promise, then what
/// the promise allows, said so (a fenced lock promises data safety only, so
/// its overlaps are no finding against it).
fn brief(results: &checker::Results) -> String {
    let found = results.anomalies.iter().filter(|(_, a)| a.count > 0);
    let (broke, allowed): (Vec<_>, Vec<_>) = found.partition(|(n, _)| results.promise.counts(n));
    let list = |v: Vec<(&String, &checker::Anomaly)>| -> Vec<String> {
        v.into_iter()
            .map(|(n, a)| format!("{n} {}", a.count))
            .collect()
    };
    let mut parts = Vec::new();
    if !broke.is_empty() {
        parts.push(list(broke).join(", "));
    }
    if !allowed.is_empty() {
        let allowed = list(allowed).join(", ");
        parts.push(format!("allowed by {}: {allowed}", results.promise));
    }
    let word = store::summary::verdict_word(results.valid);
    match parts.is_empty() {
        true => word.to_string(),
        false => format!("{word} ({})", parts.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        matrix: MatrixArgs,
    }

    fn args(extra: &[&str]) -> std::result::Result<MatrixArgs, clap::Error> {
        Cli::try_parse_from([&["matrix"], extra].concat()).map(|c| c.matrix)
    }

    #[test]
    fn a_cells_brief_says_what_its_promise_allows() {
        let history = checker::History::new(Vec::new());
        let mut r = checker::check(&history, checker::Promise::DataSafety);
        r.anomalies.get_mut("lock-overlap").unwrap().count = 12;
        r.valid = checker::Validity::True;
        r.promise = checker::Promise::DataSafety;
        assert_eq!(brief(&r), "VALID (allowed by data-safety: lock-overlap 12)");
        r.promise = checker::Promise::MutualExclusion;
        r.valid = checker::Validity::False;
        assert_eq!(brief(&r), "INVALID (lock-overlap 12)");
    }

    /// What each run of `lockstorm matrix` with no options was given
    /// before its run options had one home: `run`'s defaults, seed 1.
    #[test]
    fn a_matrix_with_no_options_gives_each_run_the_defaults_it_always_had() {
        use crate::options::defaults_tests::{before, parsed, plan_before};
        let args: MatrixArgs = parsed(&["lockstorm", "matrix"]);
        let expected = RunOptions {
            seed: Some(1),
            ..before()
        };
        assert_eq!(
            options_for(&args, Config::Single, Nemesis::none()),
            expected
        );
        let none = "none".parse().unwrap();
        let runs = plans(&args, Config::Single, &None, &none).unwrap();
        let plan = RunPlan {
            seed: 1,
            ..plan_before()
        };
        assert_eq!(runs, [plan]);
    }

    #[test]
    fn jobs_default_to_five_per_core_and_never_exceed_the_pairs() {
        let cores = std::thread::available_parallelism().unwrap().get();
        let default = args(&[]).unwrap();
        assert_eq!(default.jobs(1000), (5 * cores).min(64));
        assert_eq!(default.jobs(1), 1);
        let three = args(&["--jobs", "3"]).unwrap();
        assert_eq!((three.jobs(10), three.jobs(2)), (3, 2));
        assert_eq!(args(&["--jobs", "64"]).unwrap().jobs(100), 64);
        for bad in ["0", "65", "x"] {
            let e = args(&["--jobs", bad]).expect_err("refused");
            assert!(e.to_string().contains("--jobs"), "{e}");
        }
    }
}
