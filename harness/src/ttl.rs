//! `--ttl-ms`: the lock's lease (TTL), in ms. One meaning in every command
//! that takes it (`run`, and each run of a `matrix`, which resolves it as
//! `run` does; `client-test`; `audit`); what differs is each command's
//! default, as each does something else with the lease. The defaults live
//! here with their reasons, and so does the help that shows them.

/// `run`: a lease short enough that a 30 s run sees many of the faults
/// that outlast it (a pause is 1.5 × TTL).
pub const RUN_MS: u64 = 2_000;

/// `run` when a fault takes seconds to act (kill, failover, partition):
/// long enough that the holder is still in its critical section when the
/// lock is granted again.
pub const SLOW_RUN_MS: u64 = 6_000;

/// `client-test`: short, so the steps that wait a lease out end soon.
pub const CLIENT_TEST_MS: u64 = 1_000;

/// `audit`: the lease is the user's to give; without it the deployment's
/// timings are held to a common production lease, and the audit says so.
pub const AUDIT_MS: u64 = 10_000;

/// `run`'s lease when `--ttl-ms` is not given.
pub fn run_default(slow_faults: bool) -> u64 {
    match slow_faults {
        true => SLOW_RUN_MS,
        false => RUN_MS,
    }
}

/// The help's first words, the same in every command.
fn help(whose: &str) -> String {
    format!("The lock's lease (TTL), in ms: {whose}")
}

pub fn run_help() -> String {
    format!(
        "{} [default: {RUN_MS}; {SLOW_RUN_MS} with {}]",
        help("the lease each worker's lock takes"),
        crate::help::slow()
    )
}

/// clap adds the default ([`CLIENT_TEST_MS`]).
pub fn client_test_help() -> String {
    help("the lease the adapter's locks take in each step")
}

pub fn audit_help() -> String {
    format!(
        "{}, which the deployment's timings are held to [default: {AUDIT_MS}]",
        help("the lease your locks take")
    )
}

#[cfg(test)]
mod tests {
    use crate::options::defaults_tests::parsed;

    /// The lease each command takes when `--ttl-ms` is not given.
    #[test]
    fn each_command_gives_its_own_default_lease() {
        use crate::options::RunOptions;
        let run = parsed::<RunOptions>(&["lockstorm", "run", "--seed", "0"]);
        assert_eq!(run.ttl_ms, None);
        assert_eq!(run.resolve().unwrap().ttl.as_millis(), 2_000);
        let kill = parsed::<RunOptions>(&["lockstorm", "--nemesis", "kill", "--seed", "0"]);
        assert_eq!(kill.resolve().unwrap().ttl.as_millis(), 6_000);
        let argv = ["lockstorm", "client-test", "--client", "redis-py"];
        let matches = crate::cli::command().try_get_matches_from(argv).unwrap();
        let (_, client_test) = matches.subcommand().unwrap();
        assert_eq!(client_test.get_one::<u64>("ttl_ms"), Some(&1_000));
        let argv = ["lockstorm", "audit", "--target", "redis://h:1"];
        let audit = parsed::<crate::audit::AuditArgs>(&argv);
        assert_eq!(audit.ttl_ms, None, "audit says when it took its default");
        assert_eq!(super::AUDIT_MS, 10_000);
    }
}
