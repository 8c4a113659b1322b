//! What a run on a deployment lockstorm did not start may touch, and what
//! it refuses before its first write: it writes only in the database the
//! URL names, leaves nothing there, refuses nodes that are not independent
//! and a login that cannot run the lock, never leaves a key without a TTL,
//! and waits for a user's fault command no longer than its deadline.

use crate::common;

use common::{lockstorm, lockstorm_with, run};
use testkit::{Builder, Server};

/// `DEBUG DIGEST`: one signature of every database's keys, values and TTLs.
fn digest(server: &Server) -> String {
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(&mut server.client())
        .unwrap()
}

fn dbsize(server: &Server, db: u32) -> u64 {
    let mut con = server.client();
    redis::cmd("SELECT").arg(db).query::<()>(&mut con).unwrap();
    redis::cmd("DBSIZE").query(&mut con).unwrap()
}

/// The user's data sits in database 0 under the very names the run's lock,
/// fence and counter take: a run aimed at databases 5 and 6 must not see
/// them, let alone change them, and must leave 5 and 6 as empty as it
/// found them.
#[test]
fn a_run_aimed_at_database_5_leaves_database_0_as_it_was_and_nothing_in_5_or_6() {
    let server = Builder::redis()
        .args(["--enable-debug-command", "yes"])
        .start();
    let prefix = "lockstorm:fenced-none:41:";
    let mut con = server.client();
    for (name, value) in [
        ("lock", "users"),
        ("fence", "not-a-number"),
        ("counter", "42"),
    ] {
        redis::cmd("SET")
            .arg(format!("{prefix}{name}"))
            .arg(value)
            .query::<()>(&mut con)
            .unwrap();
    }
    let before = digest(&server);
    let tmp = common::tmp();
    let (lock, storage) = (
        format!("redis://{}/5", server.addr()),
        format!("redis://{}/6", server.addr()),
    );
    let args = ["--target", &lock, "--storage-target", &storage];
    let args = [&args[..], &["--config", "fenced", "--nemesis", "none"]].concat();
    let args = [&args[..], &["--time-limit", "4", "--seed", "41"]].concat();
    let (out, results, dir) = run(tmp.path(), &args);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(results.stats.acquired > 0, "nothing was tested");
    assert_eq!(digest(&server), before, "database 0 changed");
    assert_eq!((dbsize(&server, 5), dbsize(&server, 6)), (0, 0));
    // The run did write there: its keys were seen in 5 while it ran.
    let history = std::fs::read_to_string(dir.join("history.jsonl")).unwrap();
    assert!(history.contains("\"f\":\"write\""), "no write");
}

/// The shipped Python adapter is told the database in `init` and selects
/// it: database 0 stays as it was.
#[test]
fn a_client_adapter_writes_in_the_database_the_target_names() {
    let server = Builder::redis()
        .args(["--enable-debug-command", "yes"])
        .start();
    redis::cmd("SET")
        .arg("lockstorm:single-none:42:lock")
        .arg("users")
        .query::<()>(&mut server.client())
        .unwrap();
    let before = digest(&server);
    let tmp = common::tmp();
    let url = format!("redis://{}/5", server.addr());
    let args = [
        "--target",
        &url,
        "--client",
        "redis-py",
        "--nemesis",
        "none",
    ];
    let args = [
        &args[..],
        &["--workers", "2", "--time-limit", "4", "--seed", "42"],
    ]
    .concat();
    let (out, results, _) = run(tmp.path(), &args);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(results.stats.acquired > 0, "nothing was tested");
    assert_eq!(digest(&server), before, "database 0 changed");
    assert_eq!(dbsize(&server, 5), 0);
}

/// One server named three times is one Redlock node, not three: refused
/// before any write, in one line.
#[test]
fn redlock_nodes_that_are_one_server_are_refused() {
    let server = Builder::redis().start();
    let one = server.addr().to_string();
    let url = format!("redlock://{one},{one},{one}");
    let tmp = common::tmp();
    let out = lockstorm(&[
        "run",
        "--results",
        tmp.path().to_str().unwrap(),
        "--config",
        "redlock",
        "--target",
        &url,
        "--nemesis",
        "none",
        "--time-limit",
        "4",
    ]);
    assert_eq!(out.code, 254, "{}\n{}", out.stdout, out.stderr);
    let line = out.stderr.trim();
    assert!(!line.contains('\n'), "{line}");
    assert!(
        line.contains("same server") && line.contains("independent"),
        "{line}"
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.client())
        .unwrap();
    assert!(keys.is_empty(), "written: {keys:?}");
}

/// A login that may read but not write cannot run the lock: bad input, not
/// an INVALID run with a deadlock.
#[test]
fn a_login_that_may_not_write_is_refused_before_the_run() {
    let server = Builder::redis()
        .args([
            "--user",
            "reader",
            "on",
            ">pw-r",
            "~*",
            "+@all",
            "-@write",
            "-@scripting",
        ])
        .start();
    let tmp = common::tmp();
    let url = format!("redis://reader@{}", server.addr());
    let out = lockstorm_with(
        &[
            "run",
            "--results",
            tmp.path().to_str().unwrap(),
            "--target",
            &url,
            "--nemesis",
            "none",
            "--time-limit",
            "4",
        ],
        &[("LOCKSTORM_REDIS_PASSWORD", "pw-r")],
    );
    assert_eq!(out.code, 254, "{}\n{}", out.stdout, out.stderr);
    let line = out.stderr.trim();
    assert!(!line.contains('\n'), "{line}");
    assert!(
        line.to_lowercase().contains("noperm") && line.contains("SET, EVAL"),
        "{line}"
    );
    assert!(!line.contains("pw-r"), "the password was shown: {line}");
}

/// `unsafe-setnx` can leave a key with no TTL: never on a deployment.
#[test]
fn a_negative_control_that_can_leave_a_key_without_ttl_is_refused_on_a_target() {
    let out = lockstorm(&[
        "run",
        "--target",
        "redis://127.0.0.1:1",
        "--config",
        "unsafe-setnx",
    ]);
    assert_eq!(out.code, 254, "{}\n{}", out.stdout, out.stderr);
    let line = out.stderr.trim();
    assert!(!line.contains('\n'), "{line}");
    assert!(
        line.contains("no expiry") && line.contains("drop --target"),
        "{line}"
    );
}

/// A restart script that starts the new server in the background, holding
/// the script's stdout, as such scripts are often written: the run still
/// ends in its time.
/// How long the run in `dir` took, from its log's first line to its last:
/// the test's own clock would count its wait for a run slot too (over a
/// minute once, on a machine with a CPU-bound loop beside the suite).
fn run_took(dir: &std::path::Path) -> std::time::Duration {
    let log = std::fs::read_to_string(dir.join("harness.log")).unwrap();
    // "2026-12-05T18:51:42.036103Z  INFO …": the time of day, in seconds
    // (a message's later lines have none).
    let at = |line: &str| -> Option<f64> {
        let mut parts = line.get(11..26)?.split(':').map(|p| p.parse::<f64>().ok());
        Some(parts.next()?? * 3600.0 + parts.next()?? * 60.0 + parts.next()??)
    };
    let times: Vec<f64> = log.lines().filter_map(at).collect();
    let (first, last) = (times[0], times[times.len() - 1]);
    // A run that crossed midnight wraps.
    let secs = (last - first).rem_euclid(86_400.0);
    std::time::Duration::from_secs_f64(secs)
}

#[test]
fn a_fault_command_that_leaves_a_background_child_does_not_hold_the_run() {
    let server = Builder::redis().start();
    let tmp = common::tmp();
    let d = tmp.path().display();
    let script = tmp.path().join("restart.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nport=${{LOCKSTORM_NODE_ADDR##*:}}\n\
             redis-cli -p \"$port\" shutdown nosave >/dev/null 2>&1\n\
             while redis-cli -p \"$port\" ping >/dev/null 2>&1; do sleep 0.05; done\n\
             redis-server --port \"$port\" --bind 127.0.0.1 --save '' --appendonly no --dir {d} &\n\
             echo $! >> {d}/restarted.pid\n\
             echo restarted\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cmd = format!("kill={}", script.display());
    let url = format!("redis://{}", server.addr());
    let args = ["--target", &url, "--nemesis", "kill", "--fault-cmd", &cmd];
    let args = [
        &args[..],
        &["--ttl-ms", "1000", "--time-limit", "8", "--seed", "43"],
    ]
    .concat();
    let results = tmp.path().join("results");
    let (out, _, dir) = run(&results, &args);
    let took = run_took(&dir);
    // The servers the script started are the "user's": ours to stop, by pid.
    let pids = std::fs::read_to_string(tmp.path().join("restarted.pid")).unwrap_or_default();
    for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(!pids.is_empty(), "the script never ran: {}", out.stdout);
    // Its time limit, and far less than the command's 120 s deadline.
    assert!(
        took < std::time::Duration::from_secs(60),
        "took {took:?}: {}",
        out.stdout
    );
    assert_ne!(out.code, 2, "the kill was not verified: {}", out.stdout);
}

/// An adapter written before `init` carried `db` (the protocol page's
/// example without its `SELECT`) would write the lock in database 0, among
/// the user's keys: the adapter check before the run takes the lock once,
/// finds no key of the run in database 5, and refuses the run in one line;
/// the user's key stays, and nothing of the run is left.
#[test]
fn an_adapter_that_ignores_inits_db_is_refused_before_the_run() {
    let server = Builder::redis().start();
    let mut con = server.client();
    redis::cmd("SET")
        .arg("owner:key")
        .arg("keep")
        .query::<()>(&mut con)
        .unwrap();
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))
        .unwrap();
    let (_, after) = page
        .split_once("<!-- example-adapter -->\n```python\n")
        .expect("the protocol page's example adapter");
    let (code, _) = after.split_once("```").unwrap();
    let select = "        if req.get(\"db\"):  # a --target's database: the run's keys go there only\n            call(\"SELECT\", req[\"db\"])\n";
    assert!(code.contains(select), "the example selects init's db");
    let tmp = common::tmp();
    let url = format!("redis://{}/5", server.addr());
    let run_with = |name: &str, code: &str| {
        let adapter = tmp.path().join(name);
        std::fs::write(&adapter, code).unwrap();
        let cmd = format!("python3 {}", adapter.display());
        let results = tmp.path().join("results");
        lockstorm(&[
            "run",
            "--results",
            results.to_str().unwrap(),
            "--target",
            &url,
            "--client-cmd",
            &cmd,
            "--nemesis",
            "none",
            "--workers",
            "2",
            "--time-limit",
            "3",
            "--seed",
            "44",
        ])
    };
    let out = run_with("old_adapter.py", &code.replace(select, ""));
    assert_eq!(out.code, 254, "{}\n{}", out.stdout, out.stderr);
    let line = out.stderr.trim();
    assert!(
        !line.contains('\n') && line.contains("ignores init's db"),
        "{line}"
    );
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, ["owner:key"]);
    // The page's own example passes the same check, and runs.
    let out = run_with("example_adapter.py", code);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(dbsize(&server, 0), 1);
}
