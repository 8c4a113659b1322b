//! ARCHITECTURE.md's rules that a grep of the sources can hold: signals
//! only from the `process` crate, unsafe code only where it is named, SQL
//! only in `workloads/src/pg.rs`.

use super::source::{self, Source};

/// What sends a signal: nix's and libc's calls, and a `Child`'s own kill
/// (std's or tokio's). A method named `kill` on lockstorm's own types (a
/// node, a cluster) is not one: it goes through `process`.
const SIGNALS: [&str; 8] = [
    "signal::kill",
    "killpg",
    "libc::kill",
    "libc::tgkill",
    "libc::raise",
    "start_kill(",
    "child.kill(",
    "Command::new(\"kill",
];

/// Lines of a file's code (comments and literals blanked, but the program
/// name of a `Command::new` read raw) that send a signal.
fn signals(source: &Source) -> Vec<String> {
    let raw: Vec<&str> = source.raw.lines().collect();
    source
        .code
        .lines()
        .enumerate()
        .filter(|(i, line)| {
            SIGNALS
                .iter()
                .any(|s| line.contains(s) || raw[*i].contains(s) && s.contains('"'))
                || (line.contains("sys::signal::{") && line.contains("kill"))
        })
        .map(|(i, _)| format!("{}:{}: {}", source.path, i + 1, raw[i].trim()))
        .collect()
}

#[test]
fn only_the_process_crate_sends_signals() {
    // testkit, a dev-dependency, stops the test servers it started itself.
    let found: Vec<String> = source::CRATES
        .iter()
        .filter(|k| !matches!(**k, "process" | "testkit"))
        .flat_map(|k| source::files(k))
        .flat_map(|s| signals(&s))
        .collect();
    assert!(
        found.is_empty(),
        "signals sent outside the process crate (call process::kill_now, kill_group, interrupt…):\n{}",
        found.join("\n")
    );
    // The rule reads what the process crate does; if it found nothing there
    // it would find nothing anywhere.
    let own: Vec<String> = source::files("process").iter().flat_map(signals).collect();
    assert!(
        !own.is_empty(),
        "the signal patterns match nothing in process/src"
    );
}

/// Is a string literal SQL? Redis's `SELECT <db>` (a format of it) is not.
fn sql(literal: &str) -> bool {
    let words = [
        "INSERT INTO",
        "DELETE FROM",
        "CREATE TABLE",
        "CREATE SEQUENCE",
        "ALTER ",
        "pg_advisory",
        "pg_try_advisory",
        "pg_terminate_backend",
        "pg_stat_activity",
        "lock_timeout",
    ];
    let select = literal
        .match_indices("SELECT ")
        .any(|(i, _)| !literal[i + 7..].starts_with('{'));
    let update = literal.match_indices("UPDATE ").any(|(i, _)| {
        let rest = &literal[i + 7..];
        let table = rest.split_whitespace().next().unwrap_or("");
        rest[table.len()..].trim_start().starts_with("SET ")
    });
    // A transaction's control is a statement of its own, or leads one.
    let control = ["BEGIN", "COMMIT", "ROLLBACK"].iter().any(|w| {
        literal
            .strip_prefix(w)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphabetic() || c == ' '))
    });
    select || update || control || words.iter().any(|w| literal.contains(w))
}

#[test]
fn sql_lives_in_workloads_pg_only() {
    const HOME: &str = "workloads/src/pg.rs";
    let mut found = Vec::new();
    let mut home = 0;
    for source in source::CRATES.iter().flat_map(|k| source::files(k)) {
        for (line, literal) in source.strings.iter().filter(|(_, l)| sql(l)) {
            match source.path == HOME {
                true => home += 1,
                false => found.push(format!("{}:{line}: {literal:?}", source.path)),
            }
        }
    }
    assert!(
        found.is_empty(),
        "SQL outside {HOME} (give the statement a name there):\n{}",
        found.join("\n")
    );
    assert!(
        home > 10,
        "{HOME} has {home} statements the rule sees: the rule reads nothing"
    );
    assert!(!sql("SELECT {db} refused") && !sql("SELECT") && !sql("SET lockstorm:counter 9"));
    assert!(!sql("no -----BEGIN CERTIFICATE----- block") && sql("COMMIT") && sql("BEGIN; SET x"));
}

#[test]
fn unsafe_code_is_allowed_only_where_the_map_names_it() {
    let allowed = [
        "nemesis/src/clock.rs",
        "nemesis/src/served_clock.rs",
        "process/src/lib.rs",
    ];
    let allowing: Vec<String> = source::CRATES
        .iter()
        .flat_map(|k| source::files(k))
        .filter(|s| s.code.contains("allow(unsafe_code)"))
        .map(|s| s.path)
        .collect();
    assert_eq!(
        allowing, allowed,
        "the files that allow unsafe code; ARCHITECTURE.md names each (process) with its reason"
    );
}

/// On a user's deployment lockstorm reads, and writes only its own keys: no
/// command in the deployment crate empties a database, changes a setting or
/// watches every client's traffic.
#[test]
fn the_deployment_crate_never_flushes_configures_or_monitors() {
    let files = source::files("deployment");
    let never = [
        "FLUSHALL",
        "FLUSHDB",
        "MONITOR",
        "SHUTDOWN",
        "SET",
        "CONFIG SET",
    ];
    let found: Vec<(String, usize, String)> = files
        .iter()
        .flat_map(|s| {
            s.strings
                .iter()
                .map(move |(line, l)| (s.path.clone(), *line, l.clone()))
        })
        .filter(|(_, _, l)| never.contains(&l.to_uppercase().trim()))
        .collect();
    // One `SET`: the preflight's probe of the login, on the run's own key.
    let probe =
        |(path, _, l): &&(String, usize, String)| path.ends_with("own_keys.rs") && l == "SET";
    assert_eq!(found.iter().filter(probe).count(), 1, "{found:?}");
    let others: Vec<_> = found.iter().filter(|f| !probe(f)).collect();
    assert!(
        others.is_empty(),
        "commands a user's deployment must never get: {others:?}"
    );
    let literals: usize = files.iter().map(|s| s.strings.len()).sum();
    assert!(
        literals > 50,
        "the rule read {literals} literals: it reads nothing"
    );
}
