//! The numbers a command fills in when a flag is not given and clap cannot
//! say it alone (it depends on the faults, or on another flag), each with
//! its reason; `help.rs` shows them, `options.rs` resolves with them.
//!
//! `--ttl-ms` is the lock's lease (TTL), in ms, with one meaning in every
//! command that takes it (`run`, and each run of a `matrix`, which resolves
//! it as `run` does; `client-test`; `audit`); what differs is each
//! command's default, as each does something else with the lease.

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

/// The quietest and busiest default fault intervals: the interval follows
/// the TTL within these, so short leases still leave the workers time
/// between faults and long ones still see a few.
pub const MIN_INTERVAL_MS: u64 = 1_000;
pub const MAX_INTERVAL_MS: u64 = 5_000;

/// A holder's work when the faults are fast, unless half the TTL is less.
pub const WORK_MS: u64 = 200;

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
