//! `lockstorm matrix`: every chosen config × nemesis, `--runs` runs each,
//! into `results/matrix-<timestamp>/` (summary.json, summary.md,
//! comparison.svg/png). With `--expect`, the verdicts are held to
//! `expectations.toml`.

pub mod expect;
pub mod merge;
pub mod shard;
pub mod summary;

use crate::clients::{Client, SHIPPED};
use crate::error::{Context, Error, Result};
use crate::options::{Backend, Refusal, RunOptions, RunPlan};
use crate::{plot, run};
use checker::Validity;
use expect::Expectations;
use nemesis::{Aimed, Nemesis};
use shard::Shard;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use summary::{Row, Skipped, Summary};
use workloads::Config;

#[derive(clap::Args, Clone, Debug)]
pub struct MatrixArgs {
    /// Configs, comma-separated, or `all`.
    #[arg(long, default_value = "all")]
    pub configs: String,
    /// Nemeses, comma-separated, or `all` (none, each fault alone, plus the
    /// `partition+clock` and `kill+clock` scenarios). Join the faults of one
    /// nemesis with `+`; `@point` says where a pause or crash strikes
    /// (`pause@read`; default `checked`). Pairs that do not apply (failover without replicas)
    /// are skipped and listed.
    #[arg(long, default_value = "all")]
    pub nemeses: String,
    /// Client adapters, comma-separated (redis-py, pottery, python-redis-lock,
    /// node-redlock, redis-semaphore), or `all`: each runs on every chosen
    /// config that is a topology it supports (single, replicated, redlock),
    /// instead of the configs' own locks.
    #[arg(long)]
    pub clients: Option<String>,
    /// Runs per config × nemesis; run k uses seed `--seed` + k.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Seconds each run's workers run.
    #[arg(long, default_value_t = 30)]
    pub time_limit: u64,
    /// Seed of each pair's first run: a matrix is reproducible.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Milliseconds between faults [default: 5000].
    #[arg(long)]
    pub nemesis_interval_ms: Option<u64>,
    /// TOML of expected verdicts; the matrix exits 0 only if all are met.
    #[arg(long)]
    pub expect: Option<PathBuf>,
    /// Folder that receives the runs and `matrix-<timestamp>/`.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Where the nodes run: auto, local or docker (as for `run`).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// The Docker backend's image (as for `run`).
    #[arg(long)]
    pub image: Option<String>,
    /// Stop a pair's runs at its first invalid one: enough to show an
    /// expected-invalid pair is caught, and the time goes to the others.
    #[arg(long)]
    pub until_invalid: bool,
    /// Run only shard K of N (pair i of the whole matrix is shard i mod N + 1),
    /// one per CI runner; the shards together run every pair once.
    #[arg(long)]
    pub shard: Option<Shard>,
}

/// The files of a matrix folder besides its pictures.
pub const SUMMARY_JSON: &str = "summary.json";
pub const SUMMARY_MD: &str = "summary.md";

pub struct MatrixOutcome {
    pub dir: PathBuf,
    pub summary: Summary,
    pub interrupted: bool,
}

pub async fn matrix(args: MatrixArgs) -> Result<MatrixOutcome> {
    // A client adapter brings its own lock: `all` means every topology.
    let all: Vec<String> = Config::ALL
        .into_iter()
        .filter(|&c| args.clients.is_none() || crate::clients::topology(c).is_some())
        .map(|c| c.to_string())
        .collect();
    let configs = parse_list(&args.configs, &all, |s| s.parse::<Config>())?;
    // `all` is what `Nemesis::each` lists; `+` joins one nemesis's faults,
    // `@` names where a pause or crash strikes.
    let each: Vec<String> = Nemesis::each().iter().map(|n| n.to_string()).collect();
    let nemeses = parse_list(&args.nemeses, &each, |s| s.parse::<Aimed>())?;
    let shipped: Vec<String> = SHIPPED.iter().map(|s| s.name.to_string()).collect();
    let clients: Vec<Option<Client>> = match &args.clients {
        None => vec![None],
        Some(list) => parse_list(list, &shipped, Client::shipped)?
            .into_iter()
            .map(Some)
            .collect(),
    };
    if args.runs == 0 {
        return Err(Error::Usage("--runs 0 runs nothing: use at least 1".into()));
    }
    // The options every pair shares are checked as `run` checks them.
    options_for(&args, Config::Single, Nemesis::none()).resolve()?;
    let expectations = args.expect.as_deref().map(load).transpose()?;
    // Fail before the first run if the nodes have nowhere to run.
    let replicated = configs.contains(&Config::Replicated);
    let backend =
        crate::backend::provision(args.backend, args.image.as_deref(), replicated).await?;
    backend.finish().await;

    let mut plan = Vec::new();
    let mut skipped = Vec::new();
    for client in &clients {
        for &config in &configs {
            // `--configs all` with clients means each client's own topologies.
            let all_configs = args.configs.trim() == "all";
            if all_configs && client.as_ref().is_some_and(|c| c.refusal(config).is_some()) {
                continue;
            }
            for nemesis in &nemeses {
                match plans(&args, config, client, nemesis) {
                    Ok(runs) => plan.push(runs),
                    Err(Refusal::Inapplicable(reason)) => skipped.push(Skipped {
                        config: crate::clients::setup_name(config, client.as_ref()),
                        nemesis: nemesis.to_string(),
                        reason,
                    }),
                    Err(refusal) => return Err(refusal.into()),
                }
            }
        }
    }
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
    print_plan(&plan, pairs.len(), &skipped, &args);
    // Listened for from the start, so a Ctrl-C between or during the
    // startup of runs still stops the matrix as interrupted.
    let stop = interrupt_flag();

    let started = crate::store::stamp();
    let dir = crate::store::unique_dir(&args.results, &format!("matrix-{started}"))?;
    let wall = Instant::now();
    let mut summary = Summary {
        started,
        time_limit_s: args.time_limit,
        runs_per_pair: args.runs,
        seed: args.seed,
        expect: args.expect.as_ref().map(|p| p.display().to_string()),
        skipped,
        shard: args.shard.map(|shard| summary::ShardOf { shard, pairs }),
        until_invalid: args.until_invalid,
        ..Summary::default()
    };
    let total = plan.len() * args.runs as usize;
    let mut interrupted = false;
    'pairs: for (i, (pair, runs)) in plan.into_iter().enumerate() {
        let mut row = Row::new(&runs[0].setup(), &runs[0].aimed().to_string());
        row.pair = pair;
        let mut caught = false;
        for (k, options) in runs.into_iter().enumerate() {
            let n = i * args.runs as usize + k + 1;
            let title = format!(
                "[{n}/{total}] {} × {} (seed {})",
                row.config, row.nemesis, options.seed
            );
            let start = Instant::now();
            match run::run_plan(options).await {
                Ok(outcome) => {
                    // Progress lines: a reader that has gone must not stop the matrix.
                    let _ = writeln!(
                        std::io::stdout(),
                        "{title}: {} in {:.0} s",
                        brief(&outcome.results),
                        start.elapsed().as_secs_f64()
                    );
                    // Run folders are absolute; --results may not be.
                    let results = std::path::absolute(&args.results).unwrap_or_default();
                    let rel = outcome.dir.strip_prefix(results).unwrap_or(&outcome.dir);
                    row.add(&outcome.results, rel.display().to_string());
                    if let Some(client) = &outcome.record.client {
                        row.library = Some(client.library.clone());
                    }
                    if args.until_invalid && outcome.results.valid == Validity::False {
                        caught = true;
                    }
                }
                // The setup itself is wrong: every other run would fail too.
                Err(
                    e @ (Error::Usage(_)
                    | Error::MissingProgram { .. }
                    | Error::Adapter(_)
                    | Error::ClientSetup(_)),
                ) => return Err(e),
                Err(e) => {
                    let _ = writeln!(std::io::stdout(), "{title}: the harness failed: {e}");
                    row.add_error(e.to_string());
                }
            }
            if stop.load(Ordering::SeqCst) {
                interrupted = true;
                summary.rows.push(row);
                break 'pairs;
            }
            if caught {
                break;
            }
        }
        summary.rows.push(row);
    }
    summary.interrupted = interrupted;
    summary.wall_s = wall.elapsed().as_secs_f64();
    if let Some(expectations) = &expectations {
        summary.judge(expectations);
    }
    write(&dir, &summary)?;
    Ok(MatrixOutcome {
        dir,
        summary,
        interrupted,
    })
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
            options.client = client.clone();
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
    let runs = plan.len() as u64 * u64::from(args.runs);
    let secs = runs * (args.time_limit + RUN_OVERHEAD_S);
    let shard = match args.shard {
        Some(shard) => format!(" (shard {shard} of the {pairs} pair(s))"),
        None => String::new(),
    };
    println!(
        "matrix: {} pair(s){shard} × {} run(s) of {} s, about {} min:",
        plan.len(),
        args.runs,
        args.time_limit,
        secs.div_ceil(60)
    );
    for (_, runs) in plan {
        println!("  {} × {}", runs[0].setup(), runs[0].aimed());
    }
    for s in skipped {
        println!("  skipped {} × {}: {}", s.config, s.nemesis, s.reason);
    }
}

/// A run's time beyond its limit: nodes up, workers stopped, the check.
const RUN_OVERHEAD_S: u64 = 10;

/// Set once SIGINT arrives, for as long as the matrix runs.
fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            set.store(true, Ordering::SeqCst);
        }
    });
    flag
}

fn options_for(args: &MatrixArgs, config: Config, nemesis: Nemesis) -> RunOptions {
    let mut options = RunOptions::new(config, nemesis);
    options.time_limit = args.time_limit;
    options.results = args.results.clone();
    options.seed = Some(args.seed);
    options.backend = args.backend;
    options.image = args.image.clone();
    if let Some(ms) = args.nemesis_interval_ms {
        options.nemesis_interval_ms = ms;
    }
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

pub(crate) fn write(dir: &Path, summary: &Summary) -> Result<()> {
    crate::store::write_json(&dir.join(SUMMARY_JSON), summary)?;
    let path = dir.join(SUMMARY_MD);
    std::fs::write(&path, summary.markdown()).context(|| format!("writing {}", path.display()))?;
    // The picture is a view of the table: a failure to draw is logged.
    if let Err(e) = plot::comparison(dir, summary) {
        tracing::warn!("drawing comparison.svg failed: {e:#}");
    }
    Ok(())
}

/// `INVALID (lock-overlap 5, lost-update 2)`: the verdict and what was found.
fn brief(results: &checker::Results) -> String {
    let found: Vec<String> = results
        .anomalies
        .iter()
        .filter(|(_, a)| a.count > 0)
        .map(|(n, a)| format!("{n} {}", a.count))
        .collect();
    let word = crate::summary::verdict_word(results.valid);
    match found.is_empty() {
        true => word.to_string(),
        false => format!("{word} ({})", found.join(", ")),
    }
}
