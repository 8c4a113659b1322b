//! The command line: `run` (the default), `check`, `explain`, `matrix`,
//! `report`, `shrink`, `client-test`, `audit`, `clients setup`, `image import`, and
//! the hidden `worker`, `cell` and `reap`.
//! Exit codes follow Jepsen (see [`crate::exit`]): 0 valid, 1 invalid,
//! 2 unknown, 254 bad arguments or configuration, 255 the harness itself failed.

use crate::check::Format;
use crate::error::{Error, Result};
use crate::matrix::MatrixArgs;
use crate::options::{ClientChoice, Output, RunOptions, RunPlan};
use crate::{check, exit, logging, matrix, run};
use checker::{Promise, Validity};
use clap::{Parser, Subcommand};
use std::io::{ErrorKind, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use store::summary;
use story::Explanation;
use workloads::WorkerSpec;

#[derive(Parser, Debug)]
#[command(
    name = "lockstorm",
    version,
    about = "Jepsen-style correctness harness for Redis distributed locks",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunOptions,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one test (the default command).
    Run(Box<RunOptions>),
    /// Re-check a stored run folder, or a history file.
    Check(CheckArgs),
    /// Tell each anomaly of a stored run as the chain of events that proves
    /// it: who held the lock, what struck them, when the lease ran out, who
    /// was granted it next, and what the stale holder did.
    Explain(ExplainArgs),
    /// Run every chosen config × nemesis and compare them; with --expect,
    /// exit 0 only if every verdict is the expected one.
    Matrix(MatrixArgs),
    /// Redraw every stored run's pictures and write `results/index.html`.
    Report(ReportArgs),
    /// Search for the smallest fault schedule that still breaks an INVALID
    /// run's promise, and print it as a command (exit 0; 2 if the failure
    /// did not come back).
    Shrink(crate::shrink::ShrinkArgs),
    /// Check a client adapter against one Redis node, without faults: each
    /// step passes or fails (exit 0 if all pass, 1 if not).
    ClientTest(ClientTestArgs),
    /// Read a deployment you run, with read-only commands, and say what in
    /// it can break a lock, each with its reason and the run that shows it
    /// (exit 0 nothing at risk, 1 something at risk, 2 could not tell).
    Audit(crate::audit::AuditArgs),
    /// The shipped client adapters' environments.
    Clients(ClientsArgs),
    /// Hosts on this machine for `--nodes`, as Jepsen's n1…n5: each a
    /// network namespace on a private bridge with its own sshd.
    Lab(LabArgs),
    /// Build the Docker backend's local images from this machine's
    /// redis-server, PostgreSQL and etcd (`image import`), for daemons that cannot pull.
    Image(ImageArgs),
    /// Removes a run's containers once its harness is gone (started by the
    /// harness for each Docker run; see `backend::docker::reap`).
    #[command(hide = true)]
    Reap {
        #[arg(long)]
        daemon: PathBuf,
        #[arg(long)]
        run: String,
    },
    /// One run of a matrix, in a process of its own (started by `matrix`).
    #[command(hide = true)]
    Cell {
        /// The run's resolved plan as JSON (written by the matrix).
        #[arg(long)]
        plan: String,
    },
    #[command(hide = true)]
    Worker {
        /// The worker's spec as JSON (written by the harness).
        #[arg(long)]
        spec: String,
    },
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// A run folder (`results/<config>-<nemesis>/latest`) or a history file.
    path: PathBuf,
    /// The promise for a bare history file; a run folder's run.json decides otherwise.
    #[arg(long, value_parser = parse_promise)]
    promise: Option<Promise>,
    /// How long acquires may go ungranted with no fault active before the
    /// lock counts as stuck (`deadlock`), in ms; a run folder's run.json
    /// gives TTL + acquire timeout + 1 s. A bare history without it is not
    /// checked for deadlock.
    #[arg(long)]
    deadlock_ms: Option<u64>,
    #[arg(long, value_enum, default_value = "jsonl")]
    format: Format,
    /// Print results.json to stdout instead of the summary.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct ExplainArgs {
    /// A run folder (`results/<config>-<nemesis>/latest`).
    path: PathBuf,
    /// Tell every example, in the order of results.json (anomalies by
    /// rank, then their examples), not one of each kind.
    #[arg(long, conflicts_with = "kind")]
    all: bool,
    /// Tell every example of this anomaly only.
    #[arg(long, value_name = "ANOMALY", value_parser = anomaly_names())]
    kind: Option<String>,
    /// Tell only the first N of those.
    #[arg(long, value_name = "N")]
    anomaly: Option<usize>,
    /// Print the explanations as JSON (one array) instead of text: every
    /// example (with --kind, that anomaly's).
    #[arg(long)]
    json: bool,
}

fn anomaly_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(checker::anomalies().iter().map(|a| a.name))
}

// The client group is optional for `run` (the config's own lock is the
// default) and required here.
#[derive(clap::Args, Debug)]
#[command(mut_group("ClientChoice", |g| g.required(true)))]
struct ClientTestArgs {
    #[command(flatten)]
    client: ClientChoice,
    #[arg(long, value_name = "MS", default_value_t = crate::defaults::CLIENT_TEST_MS, help = crate::help::ttl_client_test())]
    ttl_ms: u64,
    #[command(flatten)]
    output: Output,
    #[command(flatten)]
    nodes: crate::options::Nodes,
}

#[derive(clap::Args, Debug)]
struct ClientsArgs {
    #[command(subcommand)]
    command: ClientsCommand,
}

#[derive(Subcommand, Debug)]
enum ClientsCommand {
    /// Install every shipped adapter's environment now (a Python venv,
    /// `npm ci`) where the package registries can be reached, e.g. when
    /// building a CI image, so runs need no network; or check the ones
    /// named by LOCKSTORM_PYTHON and LOCKSTORM_NODE_MODULES.
    Setup,
}

#[derive(clap::Args, Debug)]
struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand, Debug)]
enum LabCommand {
    /// Make the hosts (as root; needs Debian's openssh-server) and print
    /// their `--nodes` value, and nothing else, on stdout.
    Up {
        /// How many hosts: n1 … nN.
        #[arg(long, default_value_t = 5)]
        hosts: usize,
        /// Hosts made without Redis's programs (n2,n3), to see what a run
        /// says of a host that lacks them.
        #[arg(long, value_delimiter = ',', value_name = "HOST")]
        bare: Vec<String>,
    },
    /// Take the lab down: its sshd processes, namespaces, links, bridge
    /// and keys.
    Down,
}

#[derive(clap::Args, Debug)]
struct ImageArgs {
    #[command(subcommand)]
    command: ImageCommand,
}

#[derive(Subcommand, Debug)]
enum ImageCommand {
    /// Import `lockstorm/redis:local` (redis-server, redis-sentinel and the
    /// libraries they link) into the Docker daemon, without a registry; and
    /// `lockstorm/postgres:local` (postgres, its libraries and what it
    /// reads) when PostgreSQL is installed, and `lockstorm/etcd:local`
    /// (etcd and its libraries) when etcd is.
    Import {
        /// The Redis image's name (PostgreSQL's is always lockstorm/postgres:local,
        /// etcd's lockstorm/etcd:local).
        #[arg(long, default_value = "lockstorm/redis:local")]
        tag: String,
    },
}

#[derive(clap::Args, Debug)]
struct ReportArgs {
    /// The results folder.
    #[arg(default_value = crate::options::RESULTS)]
    path: PathBuf,
}

/// The command line as clap sees it: docs/options.md is rendered from it.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

fn parse_promise(s: &str) -> Result<Promise, String> {
    s.parse()
        .map_err(|_| format!("unknown promise '{s}': choose mutual-exclusion or data-safety"))
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            complain(&one_line(&e.render().to_string()));
            return ExitCode::from(exit::BAD_INPUT);
        }
    };
    match cli.command {
        Some(Command::Worker { spec }) => worker(&spec),
        Some(Command::Cell { plan }) => cell(&plan),
        Some(Command::Reap { daemon, run }) => reap(&daemon, &run),
        Some(Command::Image(args)) => finish(image_command(args)),
        Some(Command::Lab(args)) => finish(lab_command(args)),
        Some(Command::Clients(args)) => finish(clients_command(args)),
        Some(Command::Check(args)) => finish(check_command(args)),
        Some(Command::Explain(args)) => finish(explain_command(args)),
        Some(Command::Matrix(args)) => finish(matrix_command(args)),
        Some(Command::Report(args)) => finish(report_command(args)),
        Some(Command::Shrink(args)) => finish(shrink_command(&args)),
        Some(Command::ClientTest(args)) => finish(client_test_command(args)),
        Some(Command::Audit(args)) => finish(audit_command(&args)),
        Some(Command::Run(options)) => finish(run_command(*options)),
        None => finish(run_command(cli.run)),
    }
}

/// clap's multi-line error as one line: the problem and the valid choices.
fn one_line(rendered: &str) -> String {
    let parts: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect();
    format!("{} (see `lockstorm --help`)", parts.join(" "))
}

fn finish(outcome: Result<Validity>) -> ExitCode {
    match outcome {
        Ok(v) => ExitCode::from(exit::of(v)),
        Err(e) => {
            complain(&format!("lockstorm: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}

/// Writes `text` to stdout. A reader that has gone (`| head -1`) is not an
/// error: it asked for no more. Anything else (a full disk) is.
fn say(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(Error::Io {
            context: "writing to stdout".into(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// The JSON argument of a hidden subcommand lockstorm starts itself; bad
/// JSON is one line saying who starts it, exit 254.
fn internal_arg<T: serde::de::DeserializeOwned>(
    (command, option): (&str, &str),
    json: &str,
    started_by: &str,
) -> std::result::Result<T, ExitCode> {
    serde_json::from_str(json).map_err(|e| {
        complain(&format!(
            "lockstorm {command}: bad {option} ({e}); {started_by}"
        ));
        ExitCode::from(exit::BAD_INPUT)
    })
}

/// One line on stderr; if even that fails there is nobody left to tell.
fn complain(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)
}

/// Runs one run to its end. Its work is done when the future is: a blocking
/// thread still going then was left behind by a signal (an adapter's start
/// that never answers), so it is not waited for; it ends with the process.
fn run_to_end<T>(run: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let rt = runtime()?;
    let outcome = rt.block_on(run);
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    outcome
}

fn run_command(options: RunOptions) -> Result<Validity> {
    logging::init();
    backend::docker_cli::route(options.nodes.backend);
    let shaped = options.fault_shaping_flags();
    let outcome = run_to_end(run::run(options))?;
    let title = outcome.record.options.heading();
    let path = outcome.dir.display().to_string();
    say(&summary::render(&title, &outcome.results, &path))?;
    // A setup lockstorm started, under a fault the repository documents.
    let plan = &outcome.record.options;
    let nemesis = plan.aimed().to_string();
    let known = crate::matrix::expect::documented(&plan.setup(), &nemesis, outcome.results.valid);
    if let Some(line) = known.filter(|_| plan.target.is_none() && nemesis != "none") {
        let line = match shaped.as_slice() {
            [] => line,
            flags => format!(
                "not held to expectations.toml, which documents {} × {nemesis} under the defaults: this run gave {}",
                plan.setup(),
                flags.join(", ")
            ),
        };
        say(&format!("  {line}\n"))?;
    }
    if let Some(first) = &outcome.first_breach {
        say(&format!(
            "\nthe worst, explained (one of each kind: {} explain {path}):\n{first}",
            crate::invoked::prefix()
        ))?;
    }
    Ok(outcome.results.valid)
}

/// Exit: 2 if interrupted, 1 if an expectation was not met, 255 if a run
/// could not complete, else 0 (without --expect the verdicts are the output).
fn matrix_command(args: MatrixArgs) -> Result<Validity> {
    logging::init();
    backend::docker_cli::route(args.nodes.backend);
    let outcome = runtime()?.block_on(matrix::matrix(args))?;
    let s = &outcome.summary;
    say(&format!(
        "\n{}\nmatrix: {}\n",
        s.markdown(),
        outcome.dir.display()
    ))?;
    let failed: Vec<String> = s
        .rows
        .iter()
        .filter(|r| !r.errors.is_empty())
        .map(|r| format!("{} × {}", r.config, r.nemesis))
        .collect();
    // Runs cut short by the interruption may have failed: that is not the
    // harness's failure, and the expectations were not all tried.
    if outcome.interrupted {
        return Ok(Validity::Unknown);
    }
    if s.ok == Some(false) {
        return Ok(Validity::False);
    }
    if !failed.is_empty() {
        return Err(Error::MatrixIncomplete(failed));
    }
    Ok(Validity::True)
}

/// Problems with single runs are listed on the page and on stderr, and
/// make the command exit 254 once the page is written.
fn report_command(args: ReportArgs) -> Result<Validity> {
    if !args.path.is_dir() {
        return Err(Error::BadInput {
            path: args.path,
            message: "no such folder; give the results folder runs were written to".into(),
        });
    }
    let report = report::build::<RunPlan>(&args.path)?;
    for problem in &report.problems {
        complain(&format!("lockstorm report: {problem}"));
    }
    say(&format!(
        "{} run(s) ({} redrawn), {} matri{}: {}\n",
        report.runs,
        report.redrawn,
        report.matrices,
        if report.matrices == 1 { "x" } else { "ces" },
        report.index.display()
    ))?;
    if !report.problems.is_empty() {
        // Unreadable run folders or shard sets that do not make a matrix:
        // the page covers the rest, but the input was not whole (254).
        return Err(Error::Usage(format!(
            "{}: {} problem(s) above (each names what to fix), also listed on {}",
            args.path.display(),
            report.problems.len(),
            report.index.display()
        )));
    }
    Ok(Validity::True)
}

/// Exit: 0 when there is nothing to shrink or a schedule was found, 2 when
/// the failure did not come back (or a signal cut the search short).
fn shrink_command(args: &crate::shrink::ShrinkArgs) -> Result<Validity> {
    let found = crate::shrink::shrink(args)?;
    say(&found.render())?;
    Ok(found.validity())
}

fn client_test_command(args: ClientTestArgs) -> Result<Validity> {
    let client = args.client.chosen().expect("clap requires one");
    if !(100..=60_000).contains(&args.ttl_ms) {
        return Err(Error::Usage(format!(
            "--ttl-ms {} is out of range: use 100 to 60000 (ms)",
            args.ttl_ms
        )));
    }
    let ttl = std::time::Duration::from_millis(args.ttl_ms);
    backend::docker_cli::route(args.nodes.backend);
    let report = runtime()?.block_on(crate::client_test::client_test(
        client,
        ttl,
        &args.output.results,
        &args.nodes,
    ))?;
    say(&report.render())?;
    Ok(match report.passed() {
        true => Validity::True,
        false => Validity::False,
    })
}

fn check_command(args: CheckArgs) -> Result<Validity> {
    let deadlock = args.deadlock_ms.map(std::time::Duration::from_millis);
    let results = check::check_path(&args.path, args.promise, deadlock, args.format)?;
    if args.json {
        let json = serde_json::to_string_pretty(&results).expect("results always serialise");
        say(&format!("{json}\n"))?;
    } else {
        let title = format!("check {}", args.path.display());
        say(&summary::render(
            &title,
            &results,
            &args.path.display().to_string(),
        ))?;
    }
    Ok(results.valid)
}

/// Exit 0 once told (a run with nothing to explain says so in one line);
/// 254 for a folder that is not a run. The verdict is `check`'s to give.
/// By default one chain of each kind, most harmful first, and how many
/// like it were left untold; `--all`, `--kind` and `--json` tell each.
fn explain_command(args: ExplainArgs) -> Result<Validity> {
    let (mut told, promise) = crate::explain::explain_dir(&args.path)?;
    if let Some(kind) = &args.kind {
        told.retain(|e| &e.anomaly == kind);
    }
    let each = args.all || args.kind.is_some() || args.json;
    let mut told: Vec<(Explanation, usize)> = match each {
        true => told.into_iter().map(|e| (e, 0)).collect(),
        false => story::digest(told, promise),
    };
    if let Some(n) = args.anomaly {
        told.truncate(n);
    }
    let path = args.path.display();
    if args.json {
        let told: Vec<&Explanation> = told.iter().map(|(e, _)| e).collect();
        let json = serde_json::to_string_pretty(&told).expect("explanations always serialise");
        say(&format!("{json}\n"))?;
    } else if told.is_empty() {
        let what = args.kind.as_deref().unwrap_or("anomaly");
        say(&format!("{path}: no {what} found, nothing to explain\n"))?;
    } else {
        let text: Vec<String> = told
            .iter()
            .map(|(e, more)| match more {
                0 => e.to_string(),
                n => format!(
                    "{e}  ({n} more like it: {} explain --kind {} {path})\n",
                    crate::invoked::prefix(),
                    e.anomaly
                ),
            })
            .collect();
        say(&text.join("\n"))?;
    }
    Ok(Validity::True)
}

/// Exit 0 when nothing is at risk (warnings allowed), 1 when something
/// is, 2 when a rule that could find a risk could not look; 254 for a bad
/// target.
fn audit_command(args: &crate::audit::AuditArgs) -> Result<Validity> {
    let audited = crate::audit::audit(args)?;
    say(&audited.text)?;
    Ok(match audited.code {
        exit::VALID => Validity::True,
        exit::INVALID => Validity::False,
        _ => Validity::Unknown,
    })
}

/// Exit 0 once every family is set up; 254 when a registry is out of
/// reach or a prepared environment lacks a pin (the line says what to do).
fn clients_command(args: ClientsArgs) -> Result<Validity> {
    let ClientsCommand::Setup = args.command;
    say(&crate::clients::set_up_all()?)?;
    Ok(Validity::True)
}

fn lab_command(args: LabArgs) -> Result<Validity> {
    use backend::lab::{self, Down};
    match args.command {
        LabCommand::Up { hosts, bare } => say(&format!("{}\n", lab::up(hosts, &bare)?.nodes()))?,
        LabCommand::Down => match lab::down()? {
            Down::Removed(hosts) => say(&format!("lab down: {} removed\n", hosts.join(", ")))?,
            Down::NoneWasUp => say("lab down: no lab was up\n")?,
        },
    }
    Ok(Validity::True)
}

fn image_command(args: ImageArgs) -> Result<Validity> {
    let ImageCommand::Import { tag } = args.command;
    let said = runtime()?.block_on(backend::docker_cli::import_images(&tag))?;
    say(&said)?;
    Ok(Validity::True)
}

/// `lockstorm reap`: exit 0 once the run's containers are removed.
fn reap(daemon: &std::path::Path, run: &str) -> ExitCode {
    if let Err(e) = backend::docker_cli::reap(daemon, run) {
        complain(&format!("lockstorm reap: {e}"));
        return ExitCode::from(exit::HARNESS_FAILED);
    }
    ExitCode::SUCCESS
}

/// A matrix's run: its outcome as a line on stdout ([`matrix::cell`]),
/// its exit code as `run`'s.
fn cell(plan: &str) -> ExitCode {
    let plan: RunPlan = match internal_arg(
        ("cell", "--plan"),
        plan,
        "cells are started by `lockstorm matrix`",
    ) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    logging::init();
    crate::progress::report_ticks_to(|tick| {
        matrix::cell::report(&matrix::cell::Line::Progress(tick))
    });
    backend::docker_cli::route(plan.backend);
    let outcome = run_to_end(run::run_plan(plan));
    matrix::cell::report(&matrix::cell::outcome_line(&outcome));
    match outcome {
        Ok(o) => ExitCode::from(exit::of(o.results.valid)),
        Err(e) => ExitCode::from(e.exit_code()),
    }
}

fn worker(spec: &str) -> ExitCode {
    let spec: WorkerSpec = match internal_arg(
        ("worker", "--spec"),
        spec,
        "workers are started by `lockstorm run`",
    ) {
        Ok(spec) => spec,
        Err(code) => return code,
    };
    // First, while the worker has one thread: a guard that resumes the
    // worker's group should the harness die while it is paused (a worker
    // started by hand, in someone else's group, has none).
    if nix::unistd::getpgrp() == nix::unistd::getpid() {
        use std::os::fd::AsFd;
        if let Err(e) = nemesis::process::guard_group(std::io::stdin().as_fd()) {
            eprintln!("no guard: a worker paused when the harness dies may stay stopped: {e}");
        }
    }
    let control = workloads::worker::watch_control(std::io::BufReader::new(std::io::stdin()));
    workloads::worker::run(spec, std::io::stdout(), control);
    ExitCode::SUCCESS
}
