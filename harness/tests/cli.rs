//! Bad input: one clear line, the documented exit code, nothing left behind.

mod common;

use common::{lockstorm, lockstorm_with};

#[test]
fn an_unknown_config_exits_254_naming_the_valid_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lockstorm(&[
        "--config",
        "redlok",
        "--results",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(out.code, 254);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("single, replicated, redlock, redlock-rslock, fenced, watchdog, unsafe-del, unsafe-get-del, unsafe-setnx, unsafe-key-per-worker, no-lock"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "a run folder was created"
    );
}

#[test]
fn an_unknown_nemesis_exits_254_naming_the_valid_ones() {
    let out = lockstorm(&["run", "--nemesis", "pause,gc"]);
    assert_eq!(out.code, 254);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("none, pause, pause-node, crash, kill, failover, clock, partition, all"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_missing_redis_server_exits_254_saying_how_to_install_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lockstorm_with(
        &[
            "--results",
            tmp.path().to_str().unwrap(),
            "--time-limit",
            "1",
            // Local: `auto` would go on to Docker where a daemon answers.
            "--backend",
            "local",
        ],
        &[("LOCKSTORM_REDIS_SERVER", "/nonexistent/redis-server")],
    );
    assert_eq!(out.code, 254, "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("apt-get install -y redis-server"),
        "{}",
        out.stderr
    );
    common::assert_no_process_left(tmp.path());
}

#[test]
fn check_of_a_missing_path_exits_254() {
    let out = lockstorm(&["check", "/nonexistent/run"]);
    assert_eq!(out.code, 254);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("/nonexistent/run"), "{}", out.stderr);
}

#[test]
fn report_of_a_missing_folder_exits_254() {
    let out = lockstorm(&["report", "/nonexistent/results"]);
    assert_eq!(out.code, 254, "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("/nonexistent/results"),
        "{}",
        out.stderr
    );
}

#[test]
fn check_reads_a_bare_history_with_a_promise() {
    let tmp = tempfile::tempdir().unwrap();
    // Two holders at once: an overlap, which only mutual exclusion forbids.
    let history = common::overlap_history(tmp.path());
    let path = history.to_str().unwrap();
    let me = lockstorm(&["check", path]);
    assert_eq!(me.code, 1, "{}", me.stdout);
    assert!(me.stdout.contains("lock-overlap 1"), "{}", me.stdout);
    let ds = lockstorm(&["check", "--promise", "data-safety", path]);
    assert_eq!(ds.code, 0, "{}", ds.stdout);
}

#[test]
fn check_reads_a_jepsen_edn_history_and_names_a_bad_line() {
    let tmp = tempfile::tempdir().unwrap();
    let history = tmp.path().join("h.edn");
    // Jepsen's layout: one vector of op maps; two processes hold the lock at once.
    let edn = r#"[{:type :invoke, :f :acquire, :process 0, :time 10, :index 0}
 {:type :ok, :f :acquire, :process 0, :time 20, :index 1}
 {:type :invoke, :f :acquire, :process 1, :time 30, :index 2}
 {:type :ok, :f :acquire, :process 1, :time 40, :index 3}
 {:type :info, :f :start-pause, :process :nemesis, :time 45, :value {:target "worker-0"}}]"#;
    std::fs::write(&history, edn).unwrap();
    let path = history.to_str().unwrap();
    let out = lockstorm(&[
        "check",
        "--format",
        "edn",
        "--promise",
        "mutual-exclusion",
        path,
    ]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("lock-overlap 1"), "{}", out.stdout);

    std::fs::write(&history, edn.replace(":time 30", ":time :soon")).unwrap();
    let out = lockstorm(&["check", "--format", "edn", path]);
    assert_eq!(out.code, 254, "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("line 3"), "{}", out.stderr);
}
