//! A plan as the command line that runs it again: `lockstorm --config …
//! --nemesis … --time-limit … --seed … --schedule …`, naming only the
//! options whose values differ from what the shorter line would resolve to
//! (a TTL given, the pause that follows it is not). Pure: each candidate
//! line is parsed and resolved as the user's would be.

use crate::clients::Client;
use crate::options::{RunOptions, RunPlan, RESULTS};
use crate::schedule_text::ScheduleText;
use clap::{FromArgMatches, ValueEnum};
use std::time::Duration;

/// An option whose value the plan holds: its flag, and its value as the
/// flag takes it (`None`: the flag is absent; `Some("")`: a bare switch).
type Field = (&'static str, fn(&RunPlan) -> Option<String>);

fn ms(d: Duration) -> Option<String> {
    Some(d.as_millis().to_string())
}

fn named<T: ValueEnum>(v: &T) -> Option<String> {
    v.to_possible_value().map(|p| p.get_name().to_string())
}

/// Options no other option's default depends on.
const OWN: &[Field] = &[
    ("--workers", |p| Some(p.workers.to_string())),
    ("--backend", |p| named(&p.backend)),
    ("--image", |p| p.image.clone()),
    ("--restart-ms", |p| ms(p.restart)),
    ("--persistence", |p| named(&p.persistence)),
    ("--wait-replicas", |p| Some(p.wait_replicas.to_string())),
    ("--targets", |p| Some(p.targets.to_string())),
    ("--holder-skew-ms", |p| Some(p.holder_skew_ms.to_string())),
    ("--down-after-ms", |p| ms(p.down_after)),
    ("--failover-timeout-ms", |p| ms(p.failover_timeout)),
    ("--no-validity-check", |p| {
        p.no_validity_check.then(String::new)
    }),
    ("--op-timeout-ms", |p| ms(p.op_timeout)),
    ("--latency-ms", |p| p.latency_ms.map(|l| l.to_string())),
    ("--at", |p| Some(p.at.to_string())),
    ("--ttl-ms", |p| ms(p.ttl)),
];

/// Options whose defaults follow the TTL (and the others above).
const DERIVED: &[Field] = &[
    ("--work-ms", |p| ms(p.work)),
    ("--pause-ms", |p| ms(p.pause)),
    ("--node-pause-ms", |p| ms(p.node_pause)),
    ("--clock-jump-ms", |p| Some(p.clock_jump_ms.to_string())),
    ("--fault-ms", |p| ms(p.fault)),
    ("--nemesis-interval-ms", |p| ms(p.nemesis_interval)),
    ("--acquire-timeout-ms", |p| ms(p.acquire_timeout)),
];

/// The arguments after `lockstorm` that run `plan` again (its address
/// block aside: the run takes a free one).
pub fn args(plan: &RunPlan) -> Vec<String> {
    let mut args: Vec<String> = vec!["--config".into(), plan.config.to_string()];
    match &plan.client {
        Some(Client::Shipped(name)) => args.extend(["--client".into(), name.clone()]),
        Some(Client::Cmd(argv)) => args.extend(["--client-cmd".into(), argv.join(" ")]),
        None => {}
    }
    args.extend(["--nemesis".into(), plan.nemesis.to_string()]);
    // The time limit and schedule go last: a shorter line is resolved
    // without them (its seeded draw at the default time limit) to learn
    // which defaults it gives.
    for (flag, value) in OWN.iter().chain(DERIVED) {
        let wanted = value(plan);
        let given = resolve(&args).map(|p| value(&p));
        if given.as_ref() != Ok(&wanted) {
            if let Some(v) = wanted {
                args.push((*flag).into());
                if !v.is_empty() {
                    args.push(v);
                }
            }
        }
    }
    if plan.results != std::path::Path::new(RESULTS) {
        args.extend(["--results".into(), plan.results.display().to_string()]);
    }
    args.extend(["--time-limit".into(), plan.time_limit.as_secs().to_string()]);
    args.extend(["--seed".into(), plan.seed.to_string()]);
    if let Some(steps) = &plan.steps {
        args.extend(["--schedule".into(), ScheduleText::of(steps).to_string()]);
    }
    args
}

/// `<prefix> <args>`, quoted for a POSIX shell: `lockstorm <args>`, or
/// `cargo run -- <args>` for a user who runs it so.
pub fn line(prefix: &str, plan: &RunPlan) -> String {
    let mut line = String::from(prefix);
    for a in args(plan) {
        line.push(' ');
        line.push_str(&quote(&a));
    }
    line
}

fn quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@,+=".contains(c);
    match !arg.is_empty() && arg.chars().all(plain) {
        true => arg.to_string(),
        false => format!("'{}'", arg.replace('\'', r"'\''")),
    }
}

/// What `lockstorm run <args>` resolves to (with a fixed seed, so two
/// resolutions agree).
fn resolve(args: &[String]) -> Result<RunPlan, String> {
    parse(args)?.resolve().map_err(|e| format!("{e:?}"))
}

/// `lockstorm run <args>` as clap parses it.
pub(crate) fn parse(args: &[String]) -> Result<RunOptions, String> {
    let mut all = vec!["run".to_string()];
    all.extend(args.iter().cloned());
    if !args.iter().any(|a| a == "--seed") {
        all.extend(["--seed".into(), "0".into()]);
    }
    // The run command's own flags, not the whole CLI: shrink sits below it.
    let run = <RunOptions as clap::Args>::augment_args(clap::Command::new("run"));
    let matches = run.try_get_matches_from(all).map_err(|e| e.to_string())?;
    RunOptions::from_arg_matches(&matches).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use workloads::Config;

    fn plan(args: &[&str]) -> RunPlan {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        parse(&args).unwrap().resolve().unwrap()
    }

    fn same_run(a: &RunPlan, b: &RunPlan) {
        assert_eq!(
            RunPlan {
                address_block: 0,
                ..a.clone()
            },
            RunPlan {
                address_block: 0,
                ..b.clone()
            }
        );
    }

    #[test]
    fn the_line_names_only_what_differs_and_runs_the_same_plan() {
        let p = plan(&[
            "--config",
            "unsafe-del",
            "--nemesis",
            "pause",
            "--seed",
            "7",
            "--time-limit",
            "12",
            "--nemesis-interval-ms",
            "2000",
        ]);
        assert_eq!(
            line("lockstorm", &p),
            "lockstorm --config unsafe-del --nemesis pause --time-limit 12 --seed 7"
        );
        // The interval given was the default: not repeated.
        let mut given = plan(&[
            "--config",
            "redlock",
            "--nemesis",
            "pause,kill",
            "--ttl-ms",
            "3000",
            "--pause-ms",
            "5000",
            "--no-validity-check",
            "--results",
            "/tmp/my results",
            "--latency-ms",
            "1..3",
            "--at",
            "read",
            "--seed",
            "3",
            "--time-limit",
            "40",
        ]);
        given.steps = Some(given.schedule()[..2].to_vec());
        given.time_limit = Duration::from_secs(20);
        let text = line("lockstorm", &given);
        assert!(text.contains("--ttl-ms 3000 --pause-ms 5000"), "{text}");
        assert!(text.contains("--results '/tmp/my results'"), "{text}");
        assert!(!text.contains("--work-ms"), "follows the TTL: {text}");
        let again = parse(&args(&given)).unwrap().resolve().unwrap();
        same_run(&again, &given);
    }

    #[test]
    fn a_client_adapter_and_its_command_come_back() {
        for client in [
            &["--client", "redis-py"][..],
            &["--client-cmd", "python3 my adapter.py"],
        ] {
            let mut a = vec!["--config", "single", "--nemesis", "pause", "--seed", "1"];
            a.extend_from_slice(client);
            let p = plan(&a);
            assert_eq!(p.config, Config::Single);
            let again = parse(&args(&p)).unwrap().resolve().unwrap();
            same_run(&again, &p);
        }
    }
}
