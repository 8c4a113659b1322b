//! The lists `--help` shows, read from the registries: the configs
//! (`Config::ALL`), the faults and scenarios (`Fault::ALL`, `Action`, and
//! what each fault's package says of itself), the strike points
//! (`Point::ALL`) and the shipped clients (`install::SHIPPED`). A new
//! config, fault, point or client appears in `--help` without editing prose.

use crate::defaults;
use checker::Point;
use nemesis::{or_list, Action, At, Fault, Nemesis, Package, Targets};
use workloads::install::{self, Shipped};
use workloads::Config;

fn configs_where(pick: impl Fn(Config) -> bool) -> String {
    let names: Vec<&str> = Config::ALL
        .into_iter()
        .filter(|c| pick(*c))
        .map(Config::name)
        .collect();
    names.join(", ")
}

/// The faults whose package says `need`.
fn faults_where(need: impl Fn(&dyn Package) -> bool) -> Vec<&'static str> {
    Fault::ALL
        .into_iter()
        .filter(|f| need(f.package()))
        .map(Fault::name)
        .collect()
}

/// The configs a client adapter can run on: `single, replicated, cluster, redlock, etcd or zookeeper`.
fn topologies() -> String {
    let names: Vec<&str> = Config::ALL
        .into_iter()
        .filter_map(install::topology)
        .collect();
    or_list(&names)
}

/// `a, b and c`.
fn and_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

fn scenarios() -> String {
    and_list(&Action::SCENARIOS.map(Action::name))
}

/// The faults that take seconds to act, which lengthen the default lease.
pub(crate) fn slow() -> String {
    or_list(&faults_where(|p| p.slow()))
}

pub fn config() -> String {
    format!(
        "Lock setup to test: {}; the negative controls (locks broken on purpose): {}",
        configs_where(|c| !c.negative_control()),
        configs_where(Config::negative_control)
    )
}

pub fn configs() -> String {
    format!("Configs, comma-separated, or `all`: {}", Config::names())
}

pub fn client() -> String {
    format!(
        "Test a shipped lock client through its adapter: {}. In a run, the config picks the \
         topology ({})",
        Shipped::names(),
        topologies()
    )
}

pub fn clients() -> String {
    format!(
        "Client adapters, comma-separated ({}), or `all`: each runs on every chosen config \
         that is a topology it supports ({}), instead of the configs' own locks",
        Shipped::names(),
        topologies()
    )
}

pub fn client_cmd() -> String {
    "Test your own lock client: the command that starts its adapter (split at whitespace, \
     run without a shell; the protocol is docs/protocol.md)"
        .into()
}

pub fn nemesis() -> String {
    format!(
        "Faults, joined by `+` (or `,`): {}. `all` is every fault alone and every scenario; \
         the scenarios {} run when all of their faults are asked for",
        Nemesis::names(),
        scenarios()
    )
}

pub fn nemeses() -> String {
    format!(
        "Nemeses, comma-separated, or `all` (none, each fault alone, and the scenarios {}). \
         Faults: {}. Join the faults of one nemesis with `+`; `@point` says where {} strikes \
         ({}; default {}). Pairs that do not apply (failover without replicas) are skipped \
         and listed",
        scenarios(),
        Fault::ALL.map(Fault::name).join(", "),
        Fault::striking_names(),
        points(),
        At::default_point()
    )
}

/// `acquiring, acquired, …, releasing`.
fn points() -> String {
    let names: Vec<&str> = Point::ALL.map(Point::name).to_vec();
    names.join(", ")
}

pub fn at() -> String {
    format!(
        "Where {} strikes a worker: {}, or random (one per strike, seeded) [default: {}, \
         after the holder's last lease check, right before its write]",
        Fault::striking_names(),
        points(),
        At::default_point()
    )
}

pub fn targets() -> String {
    format!(
        "Redlock: which lock nodes a node fault hits: {} (ring: partition only, every worker \
         keeps a different majority; storage: kill and pause-node hit the storage node)",
        Targets::NAMES
    )
}

pub fn work_ms() -> String {
    format!(
        "Time a holder spends between reading and writing the counter [default: {}, at most \
         half the TTL; 2/3 of the TTL with {}, so the holder is still working when the lock is \
         granted again]",
        defaults::WORK_MS,
        slow()
    )
}

pub fn nemesis_interval_ms() -> String {
    let (min, max) = (defaults::MIN_INTERVAL_MS, defaults::MAX_INTERVAL_MS);
    let (run, slow_run) = (defaults::RUN_MS, defaults::SLOW_RUN_MS);
    format!(
        "Mean quiet time between faults [default: the TTL, within {min}–{max}: {}; {} with {}]",
        run.clamp(min, max),
        slow_run.clamp(min, max),
        slow()
    )
}

/// The help's first words, the same in every command.
fn ttl_help(whose: &str) -> String {
    format!("The lock's lease (TTL), in ms: {whose}")
}

pub fn ttl_run() -> String {
    format!(
        "{} [default: {}; {} with {}]",
        ttl_help("the lease each worker's lock takes"),
        defaults::RUN_MS,
        defaults::SLOW_RUN_MS,
        slow()
    )
}

/// clap adds the default ([`defaults::CLIENT_TEST_MS`]).
pub fn ttl_client_test() -> String {
    ttl_help("the lease the adapter's locks take in each step")
}

pub fn ttl_audit() -> String {
    format!(
        "{}, which the deployment's timings are held to [default: {}]",
        ttl_help("the lease your locks take"),
        defaults::AUDIT_MS
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_as_prose() {
        assert!(
            at().contains("pause, crash, delay, lose-reply or terminate-session"),
            "{}",
            at()
        );
        assert_eq!(or_list(&["a"]), "a");
        assert_eq!(or_list(&["a", "b", "c"]), "a, b or c");
        assert_eq!(and_list(&["a", "b"]), "a and b");
        assert_eq!(
            topologies(),
            "single, replicated, cluster, redlock, etcd or zookeeper"
        );
    }
}
