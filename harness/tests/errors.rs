//! Setup problems end a run with one clear line on stderr, the documented
//! exit code, and nothing left in the results folder.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

struct Failed {
    code: i32,
    stderr: String,
}

fn run(cmd: &mut Command, results: &Path, args: &[&str]) -> Failed {
    let out = cmd
        .args(["run", "--time-limit", "30", "--seed", "1", "--results"])
        .arg(results)
        .args(args)
        .output()
        .expect("lockstorm runs");
    Failed {
        code: out.status.code().expect("lockstorm exits"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn lockstorm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockstorm"))
}

/// One line on stderr that contains `needle`, exit `code`, no folder.
fn assert_clean_failure(f: &Failed, code: i32, needle: &str, results: &Path) {
    assert_eq!(f.code, code, "exit code; stderr:\n{}", f.stderr);
    let lines: Vec<&str> = f.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "want one line on stderr:\n{}", f.stderr);
    assert!(
        lines[0].contains(needle),
        "{needle:?} not in {:?}",
        lines[0]
    );
    assert!(
        !results.exists(),
        "{} was left behind: {:?}",
        results.display(),
        walk(results)
    );
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path().display().to_string());
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

#[test]
fn a_missing_redis_sentinel_is_one_line_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results");
    let f = run(
        lockstorm().env("LOCKSTORM_REDIS_SENTINEL", tmp.path().join("no-sentinel")),
        &results,
        // Local: `auto` would go on to Docker where a daemon answers.
        &[
            "--config",
            "replicated",
            "--nemesis",
            "none",
            "--backend",
            "local",
        ],
    );
    assert_clean_failure(&f, 254, "LOCKSTORM_REDIS_SENTINEL", &results);
}

#[test]
fn a_missing_iptables_is_one_line_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results");
    let empty = tmp.path().join("bin");
    std::fs::create_dir(&empty).unwrap();
    let f = run(
        lockstorm()
            .env("PATH", &empty)
            .env("LOCKSTORM_REDIS_SERVER", "/usr/bin/redis-server"),
        &results,
        &["--config", "single", "--nemesis", "partition"],
    );
    assert_clean_failure(&f, 254, "iptables", &results);
}

#[test]
fn a_node_that_fails_to_start_shows_its_fatal_line_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results");
    let server = tmp.path().join("redis-server");
    std::fs::write(
        &server,
        "#!/bin/sh\n\
         echo '*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***' >&2\n\
         echo 'Bad directive or wrong number of arguments' >&2\n\
         exit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = run(
        lockstorm().env("LOCKSTORM_REDIS_SERVER", &server),
        &results,
        &["--config", "single", "--nemesis", "none"],
    );
    assert_clean_failure(&f, 255, "Bad directive", &results);
    assert!(f.stderr.contains("node n1"), "{}", f.stderr);
}

/// A partition needs root; run as `nobody` (through setpriv) when the test
/// runs as root, else as the test's own non-root user.
#[test]
fn a_partition_without_root_is_one_line_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    // Writable by anyone, so the run could make its folder if it got that far.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let results = tmp.path().join("results");
    let root = nix::unistd::geteuid().is_root();
    let mut cmd = match root {
        true => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_lockstorm"));
            c
        }
        false => lockstorm(),
    };
    let f = run(
        &mut cmd,
        &results,
        &["--config", "single", "--nemesis", "partition"],
    );
    assert_clean_failure(&f, 254, "root", &results);
}

/// `image import` and `--backend docker` without a daemon, and `image
/// import` without a `redis-server`: one line naming the fix, exit 254.
#[test]
fn docker_without_a_daemon_or_a_redis_server_says_how_to_fix_it() {
    let tmp = tempfile::tempdir().unwrap();
    let nowhere = format!("unix://{}/no-docker.sock", tmp.path().display());
    let import = |env: &[(&str, &str)]| {
        let out = lockstorm()
            .args(["image", "import"])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        Failed {
            code: out.status.code().unwrap(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    let results = tmp.path().join("results");
    let no_daemon = import(&[("DOCKER_HOST", &nowhere)]);
    assert_clean_failure(&no_daemon, 254, "no Docker daemon answers", &results);
    assert!(
        no_daemon.stderr.contains("DOCKER_HOST"),
        "{}",
        no_daemon.stderr
    );
    let no_server = import(&[("LOCKSTORM_REDIS_SERVER", "/nonexistent/redis-server")]);
    assert_clean_failure(&no_server, 254, "redis-server not found", &results);

    let f = run(
        lockstorm().env("DOCKER_HOST", &nowhere),
        &results,
        &["--backend", "docker"],
    );
    assert_clean_failure(&f, 254, "no Docker daemon answers", &results);
    let tcp = run(
        lockstorm().env("DOCKER_HOST", "tcp://127.0.0.1:2375"),
        &results,
        &["--backend", "docker"],
    );
    assert_clean_failure(&tcp, 254, "not a Unix socket", &results);
    let local = run(
        &mut lockstorm(),
        &results,
        &["--backend", "local", "--image", "redis:7.2"],
    );
    assert_clean_failure(&local, 254, "--image", &results);
}
