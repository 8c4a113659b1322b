//! Paths the harness hands to its children: the default relative `results/`
//! folder, and results folders whose path LD_PRELOAD would split.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn lockstorm_in(cwd: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockstorm"));
    cmd.current_dir(cwd)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn finish(child: Child) -> (i32, String) {
    let out = child.wait_with_output().expect("lockstorm runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().expect("lockstorm exits"), text)
}

#[test]
fn every_topology_runs_with_the_default_relative_results_folder() {
    for config in ["single", "replicated", "redlock", "fenced"] {
        let cwd = common::tmp();
        let args = [
            "--config",
            config,
            "--nemesis",
            "none",
            "--time-limit",
            "2",
            "--seed",
            "1",
        ];
        let _slot = common::e2e_slot();
        let child = lockstorm_in(cwd.path(), &args).spawn().unwrap();
        let (code, output) = finish(child);
        // No fault, a few seconds of ordinary locking: anything but VALID is
        // either the harness failing (255) or a finding this test must show.
        assert_eq!(
            code, 0,
            "{config} with the default results/ folder exited {code}:\n{output}"
        );
        let run = cwd.path().join(format!("results/{config}-none/latest"));
        assert!(
            run.join("results.json").is_file(),
            "{config}: no results under {}:\n{output}",
            cwd.path().display()
        );
        common::assert_no_process_left(cwd.path());
    }
}

/// A `redis-server` running with its cwd under `root` and `node` as its
/// folder name; None until there is one.
fn node_pid(root: &Path, node: &str) -> Option<u32> {
    let root = root.canonicalize().ok()?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
        let cwd = std::fs::read_link(e.path().join("cwd")).ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (cwd.starts_with(&root) && cwd.ends_with(node) && comm.starts_with("redis-server"))
            .then_some(pid)
    })
}

/// `--config single --nemesis clock --seed 1` for `time_limit` s in `results`.
fn clock_args<'a>(results: &'a Path, time_limit: &'a str) -> Vec<&'a str> {
    let mut args = vec!["--config", "single", "--nemesis", "clock", "--seed", "1"];
    args.extend(["--time-limit", time_limit]);
    args.extend(["--results", results.to_str().unwrap()]);
    args
}

/// Runs the clock nemesis with seed 1 in `results`; returns its exit code
/// and output, and whether its lock node had the time shim mapped.
fn clock_run(results: &Path) -> (i32, String, bool) {
    // Seed 1's first jump comes 1.7 s in and breaks the lock at once.
    let args = clock_args(results, "6");
    // It starts nodes, as every run: it takes its turn like the others (it
    // did not, and with every test started at once its node came up after
    // the 20 s this waited for it on a crowded host).
    let _slot = common::e2e_slot();
    let mut child = lockstorm_in(Path::new("/"), &args).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut maps = None;
    while maps.is_none() && Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        maps = node_pid(results, "n1")
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/maps")).ok());
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, output) = finish(child);
    let shim = maps.is_some_and(|m| m.contains(nemesis::clock::SHIM_FILE_NAME));
    (code, output, shim)
}

#[test]
fn the_time_shim_loads_whatever_the_results_path() {
    let tmp = common::tmp();
    // A plain folder is every other clock test's.
    let folders: Vec<PathBuf> = ["a b", "a:b"].iter().map(|n| tmp.path().join(n)).collect();
    for results in &folders {
        let (code, output, shim) = clock_run(results);
        assert!(
            shim,
            "node n1 of the run in {} did not map the time shim:\n{output}",
            results.display()
        );
        // Seed 1 jumps the node's clock past the lease while a holder works:
        // VALID here means the jump did not reach the node.
        assert_eq!(
            code,
            1,
            "the clock run in {} is not INVALID:\n{output}",
            results.display()
        );
    }
}

/// A node that drops LD_PRELOAD (here: a wrapper that unsets it) would run
/// the clock nemesis without moving its clock: the run must not start.
#[test]
fn a_node_without_the_time_shim_stops_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = common::tmp();
    let server = tmp.path().join("redis-server");
    let real = backend::local::find_redis_server().unwrap();
    std::fs::write(
        &server,
        format!(
            "#!/bin/sh\nunset LD_PRELOAD\nexec '{}' \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    let results = tmp.path().join("results");
    let args = clock_args(&results, "10");
    let _slot = common::e2e_slot();
    let child = lockstorm_in(tmp.path(), &args)
        .env("LOCKSTORM_REDIS_SERVER", &server)
        .spawn()
        .unwrap();
    let (code, output) = finish(child);
    assert_eq!(code, 255, "{output}");
    assert!(
        output.contains("node n1") && output.contains("without the time shim"),
        "{output}"
    );
    assert!(!results.exists(), "a run folder was left behind");
    common::assert_no_process_left(tmp.path());
}

/// A user without write access to the results folder (a clone owned by
/// root) gets bad input naming the folder and `--results`, not a harness
/// failure, from every command that writes one; nothing is started.
#[test]
fn a_results_folder_the_user_cannot_write_is_bad_input_naming_it() {
    // Root writes anywhere, so the harness runs as `nobody` here; the
    // folder is root's and closed to others, as in a root-owned clone.
    let tmp = common::tmp();
    let results = tmp.path().join("results");
    let results = results.to_str().unwrap();
    for args in [
        vec![
            "run",
            "--config",
            "single",
            "--nemesis",
            "none",
            "--time-limit",
            "2",
        ],
        vec![
            "matrix",
            "--configs",
            "single",
            "--nemeses",
            "none",
            "--time-limit",
            "3",
        ],
    ] {
        let out = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_lockstorm"))
            .args(&args)
            .args(["--results", results])
            .current_dir(tmp.path())
            .output()
            .expect("setpriv (util-linux) runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(254), "{args:?}: {stderr}");
        let line = stderr.lines().last().unwrap_or_default();
        assert!(
            line.contains(results) && line.contains("Permission denied"),
            "{args:?}: {line}"
        );
        assert!(
            line.contains("give --results a folder you can write to"),
            "{line}"
        );
    }
}
