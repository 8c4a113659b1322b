//! The defaults `run` gives, pinned: these are the values `RunOptions::new`
//! and clap each wrote out before clap became their one home, so a changed
//! default is a decision taken here, not drift between two copies.

use super::*;
use clap::FromArgMatches;

/// What `lockstorm run` with no options meant before its defaults had one home.
pub(crate) fn before() -> RunOptions {
    RunOptions {
        config: Config::Single,
        client: ClientChoice {
            client: None,
            client_cmd: None,
        },
        nemesis: Nemesis::none(),
        at: None,
        timing: Timing { time_limit: 30 },
        workers: 5,
        ttl_ms: None,
        work_ms: None,
        seed: None,
        nodes: Nodes {
            backend: Backend::Auto,
            image: None,
            address_block: None,
            target: None,
            fault_cmd: Vec::new(),
            fault_cmd_wait_ms: 30_000,
            tls_ca: None,
            storage_target: None,
            hosts: None,
            ssh_key: None,
            install: false,
        },
        output: Output {
            results: PathBuf::from("results"),
        },
        pause_ms: None,
        node_pause_ms: None,
        restart_ms: 300,
        restart_at_vote: false,
        persistence: Persistence::None,
        shared: Shared {
            storage: None,
            targets: Targets::Majority,
            nemesis_interval_ms: None,
        },
        postgres_settings: Vec::new(),
        storage_cmd: None,
        wait_replicas: 0,
        clock_jump_ms: None,
        holder_skew_ms: 0,
        fault_ms: None,
        down_after_ms: 1000,
        failover_timeout_ms: 5000,
        no_validity_check: false,
        acquire_timeout_ms: None,
        op_timeout_ms: 500,
        latency_ms: None,
        schedule: None,
    }
}

/// `argv` as the real command line parses it: the top level's run
/// options, or its subcommand's.
pub(crate) fn parsed<T: FromArgMatches>(argv: &[&str]) -> T {
    let matches = crate::cli::command()
        .try_get_matches_from(argv)
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let matches = matches.subcommand().map_or(&matches, |(_, m)| m);
    T::from_arg_matches(matches).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

#[test]
fn an_empty_command_line_gives_the_defaults_run_always_had() {
    for argv in [&["lockstorm"][..], &["lockstorm", "run"]] {
        assert_eq!(parsed::<RunOptions>(argv), before(), "{argv:?}");
    }
    assert_eq!(RunOptions::default(), before());
    let kill: Nemesis = "kill".parse().unwrap();
    assert_eq!(
        RunOptions::new(Config::Redlock, kill.clone()),
        RunOptions {
            config: Config::Redlock,
            nemesis: kill,
            ..before()
        }
    );
}

/// What `lockstorm run --seed 0` resolved to before (and what a field
/// missing from an older run.json reads as).
pub(crate) fn plan_before() -> RunPlan {
    let ms = Duration::from_millis;
    RunPlan {
        config: Config::Single,
        client: None,
        nemesis: Nemesis::none(),
        at: At::Point(checker::Point::Checked),
        time_limit: Duration::from_secs(30),
        workers: 5,
        ttl: ms(2000),
        work: ms(200),
        seed: 0,
        backend: Backend::Auto,
        image: None,
        results: PathBuf::from("results"),
        pause: ms(3000),
        node_pause: ms(3000),
        restart: ms(300),
        restart_at_vote: false,
        persistence: Persistence::None,
        storage: StorageKind::Redis,
        postgres_settings: Vec::new(),
        storage_cmd: None,
        wait_replicas: 0,
        targets: Targets::Majority,
        clock_jump_ms: 4000,
        holder_skew_ms: 0,
        fault: ms(2000),
        down_after: ms(1000),
        failover_timeout: ms(5000),
        nemesis_interval: ms(2000),
        no_validity_check: false,
        acquire_timeout: ms(4000),
        op_timeout: ms(500),
        address_block: 0,
        latency_ms: None,
        steps: None,
        keys: workloads::Keys {
            prefix: "lockstorm:".into(),
            expire_ms: None,
        },
        target: None,
        fault_commands: Default::default(),
        fault_cmd_wait: ms(30_000),
        tls_ca: None,
        storage_target: None,
        hosts: Vec::new(),
        ssh_key: None,
        install: false,
    }
}

#[test]
fn the_default_plan_is_the_one_run_always_resolved() {
    assert_eq!(RunPlan::default(), plan_before());
    let given = parsed::<RunOptions>(&["lockstorm", "run", "--seed", "0"]);
    assert_eq!(given.resolve().unwrap(), plan_before());
}
