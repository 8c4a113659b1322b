//! The Docker backend against a real daemon: the nodes are containers
//! (host networking, the host's PID namespace) of the images `lockstorm image
//! import` built (Redis's, PostgreSQL's for the storage in PostgreSQL, and
//! etcd's for the etcd members),
//! and every finding of the local backend holds the same way.
//! No container outlives its run, however the run ends.
//!
//! These tests need a Docker daemon, so they are ignored by a plain
//! `cargo test`; `.ci/run` starts one, imports the image and runs them with
//! `--ignored`, where a missing daemon fails them rather than skipping them:
//! `cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored` (with `DOCKER_HOST`
//! naming the daemon's socket, if not the default).

use crate::common;

use common::{count, wait_for};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const NEEDS_DAEMON: &str = "needs a Docker daemon";

/// The daemon must answer: a test asked to run without one fails here.
fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{NEEDS_DAEMON}: cannot run the docker CLI ({e})"));
    assert!(
        out.status.success(),
        "{NEEDS_DAEMON}: `docker {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every lockstorm container on the daemon: its id, run label and owner label.
fn lockstorm_containers() -> Vec<String> {
    docker(&[
        "ps",
        "-a",
        "--filter",
        "label=lockstorm.run",
        "--format",
        "{{.ID}} {{.Label \"lockstorm.run\"}} {{.Label \"lockstorm.owner\"}}",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

fn containers_of(run: &str) -> Vec<String> {
    lockstorm_containers()
        .into_iter()
        .filter(|c| c.split_whitespace().nth(1) == Some(run))
        .collect()
}

fn run_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("run.json")).expect("run.json");
    serde_json::from_str(&text).unwrap()
}

/// Asserts run.json says the nodes were containers; returns their run label.
fn assert_ran_in_containers(dir: &Path) -> String {
    let record = run_json(dir);
    assert_eq!(record["backend"]["kind"], "docker", "{record}");
    assert!(
        record["backend"]["image"]
            .as_str()
            .is_some_and(|i| !i.is_empty()),
        "{record}"
    );
    assert!(
        record["redis"]
            .as_str()
            .is_some_and(|r| r.contains("image")),
        "{record}"
    );
    record["backend"]["run"]
        .as_str()
        .expect("the containers' run label")
        .to_string()
}

/// `lockstorm run --backend docker` with a short schedule, as the local
/// tests run it.
fn docker_run(
    results: &Path,
    config: &str,
    nemesis: &str,
    time_limit: &str,
    seed: &str,
    extra: &[&str],
) -> (common::Run, checker::Results, PathBuf) {
    let mut args = vec!["--backend", "docker"];
    args.extend_from_slice(extra);
    let outcome = common::run_short(results, config, nemesis, time_limit, seed, &args);
    let run = assert_ran_in_containers(&outcome.2);
    let left = containers_of(&run);
    assert!(left.is_empty(), "containers left after the run: {left:?}");
    outcome
}

/// The pause runs of `runs.rs`: a holder frozen for 1.5 s with a 1 s lease.
const PAUSE: &[&str] = &[
    "--ttl-ms",
    "1000",
    "--work-ms",
    "200",
    "--no-validity-check",
];

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn single_under_pause_breaks_in_containers_too() {
    let tmp = common::tmp();
    let extra = [PAUSE, &["--at", "read"]].concat();
    let (out, results, dir) = docker_run(tmp.path(), "single", "pause", "15", "7", &extra);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    common::assert_verified(&dir, "start-pause");
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn fenced_under_pause_keeps_the_data_safe_in_containers_too() {
    let tmp = common::tmp();
    let (out, results, dir) = docker_run(tmp.path(), "fenced", "pause", "15", "7", PAUSE);
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(count(&results, "stale-fence-accepted"), 0);
    let counter = results.counter().expect("a counter report");
    assert!(
        counter.stale_fence_rejected.writes >= 1,
        "no stale write was refused: {}",
        out.stdout
    );
}

/// The fault proxy sits between the workers and containers on the host
/// network as it does between workers and local processes.
#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn a_write_delayed_in_the_proxy_lands_behind_the_next_holder_in_containers_too() {
    let tmp = common::tmp();
    let (out, results, dir) = docker_run(tmp.path(), "single", "delay", "12", "3", &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    // The held write lands after another worker was granted the lock. It
    // loses an update only if it lands between a holder's write and the
    // next read: inside a holder's read and write (most of a cycle), that
    // holder's write covers it (CI saw it so, final = acknowledged).
    assert!(count(&results, "unsafe-action") > 0, "{}", out.stdout);
    common::assert_all_caused(&results, "unsafe-action");
    common::assert_verified(&dir, "start-delay");
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn a_primary_container_restarted_empty_loses_the_lock() {
    let tmp = common::tmp();
    let (out, results, dir) = docker_run(tmp.path(), "replicated", "kill", "15", "1", &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    // The same container came back as a new process with a new run id.
    common::assert_verified(&dir, "start-kill");
    common::assert_verified(&dir, "stop-kill");
    let log = std::fs::read_to_string(dir.join("nodes/n1/redis.log")).unwrap();
    assert!(
        log.matches("Ready to accept connections").count() >= 2,
        "n1 never restarted:\n{log}"
    );
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn clock_jumps_on_a_majority_of_containers_break_redlock() {
    let tmp = common::tmp();
    let extra = ["--targets", "majority"];
    let (out, results, dir) = docker_run(tmp.path(), "redlock", "clock", "15", "1", &extra);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    // The shim, bind-mounted into each container, moved its clock: read back.
    common::assert_verified(&dir, "start-clock");
    common::assert_verified(&dir, "stop-clock");
}

/// The storage node's PostgreSQL in its container: run.json's PID is the
/// server's as the host sees it (the container's log, which PostgreSQL
/// prefixes with its PID, says it started it), and its data folder, written
/// by the server's user through the bind mount, is gone with the run.
fn assert_postgres_ran_in_its_container(dir: &Path) -> u32 {
    let record = run_json(dir);
    assert!(
        record["postgres"]
            .as_str()
            .is_some_and(|v| v.starts_with("postgres (PostgreSQL)")),
        "{record}"
    );
    let storage = record["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == "storage"))
        .unwrap_or_else(|| panic!("no storage node: {record}"));
    let pid = storage["pid"].as_u64().expect("the storage node's pid") as u32;
    let log = std::fs::read_to_string(dir.join("nodes/storage/output.log")).unwrap();
    assert!(
        log.contains(&format!("[{pid}] : LOG:  starting PostgreSQL")),
        "the container's postgres was not PID {pid}:\n{log}"
    );
    let data = dir.join("nodes/storage/data");
    assert!(!data.exists(), "{} outlived the run", data.display());
    pid
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn fenced_writes_to_postgres_in_a_container_refuse_the_stale_holder() {
    // The server's user (postgres, when the tests run as root) must reach
    // the run's folder, for the data folder to be in it.
    let tmp = common::open_tmp();
    let extra = [PAUSE, &["--storage", "postgres"]].concat();
    let (out, results, dir) = docker_run(tmp.path(), "fenced", "pause", "8", "7", &extra);
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let counter = results.counter().expect("a counter report");
    assert!(
        counter.stale_fence_rejected.writes >= 1,
        "no stale write was refused: {}",
        out.stdout
    );
    assert_postgres_ran_in_its_container(&dir);
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn a_row_lock_survives_its_postgres_container_killed_and_restarted() {
    let tmp = common::open_tmp();
    let (out, results, dir) = docker_run(tmp.path(), "pg-row-lock", "kill", "12", "29", &[]);
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    // The same container came back as a new server with a new start time.
    common::assert_verified(&dir, "start-kill");
    common::assert_verified(&dir, "stop-kill");
    assert_postgres_ran_in_its_container(&dir);
    let log = std::fs::read_to_string(dir.join("nodes/storage/output.log")).unwrap();
    assert!(
        log.matches("database system is ready to accept connections")
            .count()
            >= 2,
        "the storage never restarted:\n{log}"
    );
}

/// A majority of etcd members, each a container of `lockstorm/etcd:local`,
/// killed and restarted on their data: the fence keeps the data, as on the
/// local backend. While the run goes, a watcher sees its three members'
/// containers (no other test runs that image).
#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn etcd_members_in_containers_killed_and_restarted_keep_the_fenced_data() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let names = docker(&[
                    "ps",
                    "--filter",
                    "ancestor=lockstorm/etcd:local",
                    "--format",
                    "{{.Label \"lockstorm.run\"}} {{.Label \"lockstorm.node\"}}",
                ]);
                let mut members: Vec<(String, String)> = names
                    .lines()
                    .filter_map(|l| l.split_once(' '))
                    .map(|(run, node)| (run.to_string(), node.to_string()))
                    .collect();
                members.sort();
                if members.len() == 3 {
                    return Some(members);
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            None
        })
    };
    let tmp = common::tmp();
    let (out, results, dir) = docker_run(tmp.path(), "etcd-fenced", "kill", "12", "29", &[]);
    done.store(true, Ordering::Relaxed);
    let members = watcher.join().unwrap();
    common::assert_valid(&results, &dir);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let run = run_json(&dir)["backend"]["run"]
        .as_str()
        .unwrap()
        .to_string();
    let expected: Vec<(String, String)> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| (run.clone(), n.to_string()))
        .collect();
    assert_eq!(
        members,
        Some(expected),
        "the run's members were not three containers of lockstorm/etcd:local"
    );
    // Each killed member came back as a new process on its data.
    common::assert_verified(&dir, "start-kill");
    common::assert_verified(&dir, "stop-kill");
    let counter = results.counter().expect("a counter report");
    assert!(
        counter.acknowledged > 0,
        "nothing was written: {}",
        out.stdout
    );
    for member in ["n1", "n2", "n3"] {
        let data = dir.join(format!("nodes/{member}/data"));
        assert!(!data.exists(), "{} outlived the run", data.display());
    }
}

/// A long docker run with long pauses, and its folder once a pause is on.
fn start_long_run(results: &Path) -> (std::process::Child, PathBuf) {
    let child = Command::new(env!("CARGO_BIN_EXE_lockstorm"))
        .args([
            "--backend",
            "docker",
            "--config",
            "redlock",
            "--nemesis",
            "pause",
        ])
        .args([
            "--ttl-ms",
            "500",
            "--pause-ms",
            "60000",
            "--time-limit",
            "120",
        ])
        .args(["--nemesis-interval-ms", "200", "--seed", "9"])
        .args(["--results", results.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = wait_for("a pause to start", || {
        let group = results.join("redlock-pause");
        let run = std::fs::read_dir(&group)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.is_dir())?;
        let history = std::fs::read_to_string(run.join("history.jsonl")).ok()?;
        history.contains("start-pause").then_some(run)
    });
    (child, run)
}

/// The run label on the containers of the harness with PID `harness`
/// (their owner label is `<boot id>/<pid>/<start time>`).
fn run_of(harness: u32) -> String {
    let all = lockstorm_containers();
    let ids: std::collections::BTreeSet<String> = all
        .iter()
        .map(|c| c.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.get(2).and_then(|o| o.split('/').nth(1)) == Some(&*harness.to_string()))
        .map(|c| c[1].to_string())
        .collect();
    assert_eq!(
        ids.len(),
        1,
        "expected one run of harness {harness}: {all:?}"
    );
    ids.into_iter().next().unwrap()
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn ctrl_c_removes_every_container_of_the_run() {
    let _slot = common::e2e_heavy_slot();
    let tmp = common::tmp();
    let (child, run) = start_long_run(tmp.path());
    let id = run_of(child.id());
    assert_eq!(
        containers_of(&id).len(),
        6,
        "five lock nodes and the storage"
    );
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let history = std::fs::read_to_string(run.join("history.jsonl")).unwrap();
    assert!(history.contains("stop-pause"), "the pause was not healed");
    assert!(containers_of(&id).is_empty(), "{:?}", containers_of(&id));
    common::assert_no_process_left(tmp.path());
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn a_killed_harness_leaves_no_container() {
    let _slot = common::e2e_heavy_slot();
    let tmp = common::tmp();
    let (mut child, _run) = start_long_run(tmp.path());
    let id = run_of(child.id());
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    // The reaper sees its stdin close and removes the run's containers
    // (one of them frozen by the pause).
    wait_for("the killed run's containers to be removed", || {
        containers_of(&id).is_empty().then_some(())
    });
    wait_for("the run's processes to end", || {
        common::leftover_processes(tmp.path())
            .is_empty()
            .then_some(())
    });
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn a_later_start_removes_containers_of_runs_that_are_gone() {
    // A container as a run whose harness and reaper both died would leave it:
    // its owner a process that has exited.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    gone.wait().unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let owner = format!("lockstorm.owner={}/{pid}/{start}", boot.trim());
    let stale = docker(&[
        "create",
        "--label",
        &owner,
        "--label",
        "lockstorm.run=gone-1",
        IMAGE,
    ]);
    // An owner label that cannot be read proves nothing: that one stays.
    let unproven = docker(&[
        "create",
        "--label",
        "lockstorm.owner=unreadable",
        "--label",
        "lockstorm.run=unproven-1",
        IMAGE,
    ]);
    let tmp = common::tmp();
    let (out, _, dir) = docker_run_keep(tmp.path());
    assert_ran_in_containers(&dir);
    let left = lockstorm_containers();
    docker(&["rm", "-f", unproven.trim()]);
    assert!(
        !left.iter().any(|c| stale
            .trim()
            .starts_with(c.split_whitespace().next().unwrap())),
        "the gone run's container is still there: {left:?}\n{}",
        out.stderr
    );
    assert!(
        left.iter().any(|c| c.contains("unproven-1")),
        "a container whose owner is not provably gone was removed: {left:?}"
    );
}

/// The image the tests run (the one `.ci/run` imported).
const IMAGE: &str = "lockstorm/redis:local";

/// A short docker run that may leave other runs' containers in place.
fn docker_run_keep(results: &Path) -> (common::Run, checker::Results, PathBuf) {
    let args = [
        "--backend",
        "docker",
        "--config",
        "single",
        "--nemesis",
        "none",
        "--time-limit",
        "3",
        "--seed",
        "1",
    ];
    common::run(results, &args)
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn auto_picks_local_then_docker_then_says_how_to_fix_neither() {
    let none = [
        "--config",
        "single",
        "--nemesis",
        "none",
        "--time-limit",
        "3",
        "--seed",
        "1",
    ];
    let backend_of = |env: &[(&str, &str)]| {
        let tmp = common::tmp();
        let mut args = vec!["run", "--results", tmp.path().to_str().unwrap()];
        args.extend_from_slice(&none);
        let out = common::lockstorm_with(&args, env);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        let group = tmp.path().join("single-none/latest");
        run_json(&group)["backend"]["kind"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // redis-server on PATH: local.
    assert_eq!(backend_of(&[]), "local");
    // No redis-server on PATH (an empty PATH: the harness needs nothing
    // else from it), a daemon: docker.
    let empty = common::tmp();
    let path = empty.path().to_str().unwrap();
    assert_eq!(backend_of(&[("PATH", path)]), "docker");
    // Neither: one line naming both ways out, exit 254, nothing left.
    let tmp = common::tmp();
    let mut args = vec!["run", "--results", tmp.path().to_str().unwrap()];
    args.extend_from_slice(&none);
    let out = common::lockstorm_with(
        &args,
        &[
            ("PATH", path),
            ("DOCKER_HOST", "unix:///nonexistent/docker.sock"),
        ],
    );
    assert_eq!(out.code, 254, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    for fix in ["redis-server", "Docker", "--backend"] {
        assert!(out.stderr.contains(fix), "{fix}: {}", out.stderr);
    }
    assert!(
        std::fs::read_dir(tmp.path()).unwrap().next().is_none(),
        "a run folder was left"
    );
}

#[test]
#[ignore = "needs a Docker daemon: .ci/run runs it (cargo test -p lockstorm --features docker --test e2e docker:: -- --ignored)"]
fn an_image_that_cannot_be_pulled_is_one_line_naming_image_import() {
    let tmp = common::tmp();
    let args = [
        "run",
        "--results",
        tmp.path().to_str().unwrap(),
        "--backend",
        "docker",
        "--image",
        "127.0.0.1:9/lockstorm-no-such-image:1",
        "--nemesis",
        "none",
        "--time-limit",
        "3",
    ];
    let out = common::lockstorm(&args);
    assert_eq!(out.code, 254, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("lockstorm image import"),
        "{}",
        out.stderr
    );
    assert!(
        std::fs::read_dir(tmp.path()).unwrap().next().is_none(),
        "a run folder was left"
    );
}
