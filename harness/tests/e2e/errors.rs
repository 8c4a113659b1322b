//! Setup problems end a run with one clear line on stderr, the documented
//! exit code, and nothing left in the results folder.

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
    let tmp = crate::common::tmp();
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
    let tmp = crate::common::tmp();
    let results = tmp.path().join("results");
    let empty = tmp.path().join("bin");
    std::fs::create_dir(&empty).unwrap();
    let f = run(
        lockstorm()
            .env("PATH", &empty)
            .env("LOCKSTORM_REDIS_SERVER", "/usr/bin/redis-server"),
        &results,
        &["--config", "replicated", "--nemesis", "failover"],
    );
    assert_clean_failure(&f, 254, "iptables", &results);
}

#[test]
fn a_node_that_fails_to_start_shows_its_fatal_line_and_leaves_nothing() {
    let tmp = crate::common::tmp();
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

/// Cutting links (failover partitions the primary) needs root; run as `nobody` (through setpriv) when the test
/// runs as root, else as the test's own non-root user.
#[test]
fn a_partition_without_root_is_one_line_and_leaves_nothing() {
    let tmp = crate::common::tmp();
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
        &["--config", "replicated", "--nemesis", "failover"],
    );
    assert_clean_failure(&f, 254, "root", &results);
}

/// `image import` and `--backend docker` without a daemon, and `image
/// import` without a `redis-server`: one line naming the fix, exit 254.
#[test]
#[cfg_attr(
    not(feature = "docker"),
    ignore = "the Docker backend is a cargo feature: .ci/run runs this with --features lockstorm/docker"
)]
fn docker_without_a_daemon_or_a_redis_server_says_how_to_fix_it() {
    let tmp = crate::common::tmp();
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
}

/// `--image` is the Docker backend's: with the local one it is refused.
#[test]
fn an_image_without_the_docker_backend_is_refused() {
    let tmp = crate::common::tmp();
    let results = tmp.path().join("results");
    let local = run(
        &mut lockstorm(),
        &results,
        &["--backend", "local", "--image", "redis:7.2"],
    );
    assert_clean_failure(&local, 254, "--image", &results);
}

/// A build without the Docker backend (the default, and the README's tests')
/// answers `--backend docker` and `image import` with one line saying how to
/// build it in, exit 254, before it looks for a daemon.
#[cfg(not(feature = "docker"))]
#[test]
fn a_build_without_the_docker_backend_says_how_to_build_it_in() {
    let tmp = crate::common::tmp();
    let results = tmp.path().join("results");
    let nowhere = format!("unix://{}/no-docker.sock", tmp.path().display());
    let f = run(
        lockstorm().env("DOCKER_HOST", &nowhere),
        &results,
        &["--backend", "docker"],
    );
    assert_clean_failure(&f, 254, "--features docker", &results);
    let out = lockstorm()
        .args(["image", "import"])
        .env("DOCKER_HOST", &nowhere)
        .output()
        .unwrap();
    let import = Failed {
        code: out.status.code().unwrap(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_clean_failure(&import, 254, "--features docker", &results);
}

/// A Unix socket that accepts every connection and never answers, as a
/// wedged dockerd (or another program listening at `DOCKER_HOST`) does:
/// connections are held open and never read or written.
struct Silent {
    path: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accepting: Option<std::thread::JoinHandle<()>>,
}

impl Silent {
    fn open(path: std::path::PathBuf) -> Silent {
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let accepting = std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                held.extend(stream.ok());
            }
        });
        Silent {
            path,
            stop,
            accepting: Some(accepting),
        }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accepting thread so it sees the flag.
        let _ = std::os::unix::net::UnixStream::connect(&self.path);
        if let Some(t) = self.accepting.take() {
            let _ = t.join();
        }
    }
}

/// Processes whose command line names `needle` (a lockstorm reaper names
/// the daemon's socket).
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(format!("{:?}: {cmdline}", entry.file_name()));
        }
    }
    found
}

/// `run --backend docker`, `client-test --backend docker` and `image
/// import` against a daemon socket that accepts and never answers: each
/// ends by itself with one line naming the socket and what to check, exit
/// 254 (the socket is the user's setting, as when no daemon is there at
/// all), and leaves no folder, process or bridge socket behind. Each is
/// killed and the test failed if it is still running after `BOUND`.
#[test]
#[cfg_attr(
    not(feature = "docker"),
    ignore = "the Docker backend is a cargo feature: .ci/run runs this with --features lockstorm/docker"
)]
fn a_docker_socket_that_never_answers_is_one_line_not_a_hang() {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    const BOUND: Duration = Duration::from_secs(60);
    let tmp = crate::common::tmp();
    let socket = tmp.path().join("hang.sock");
    let silent = Silent::open(socket.clone());
    let docker_host = format!("unix://{}", socket.display());
    let results = tmp.path().join("results");
    let results_arg = results.to_str().unwrap();
    let commands: [(&str, Vec<&str>); 3] = [
        (
            "run",
            vec![
                "run",
                "--backend",
                "docker",
                "--time-limit",
                "3",
                "--results",
                results_arg,
            ],
        ),
        (
            "client-test",
            vec![
                "client-test",
                "--client-cmd",
                "/bin/cat",
                "--backend",
                "docker",
                "--results",
                results_arg,
            ],
        ),
        ("image import", vec!["image", "import"]),
    ];
    // All at once: each waits out the same silence.
    let started = Instant::now();
    let mut children: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            let err = tmp.path().join(format!("stderr-{i}"));
            let child = lockstorm()
                .args(args)
                .env("DOCKER_HOST", &docker_host)
                .env("LOCKSTORM_REDIS_SERVER", "/usr/bin/redis-server")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&err).unwrap())
                .process_group(0)
                .spawn()
                .unwrap();
            (*name, child, err)
        })
        .collect();
    let mut outcomes = Vec::new();
    for (name, child, err) in &mut children {
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > BOUND {
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let Some(status) = status else {
            // Its own group: whatever it started goes with it.
            let group = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            outcomes.push(format!(
                "`lockstorm {name}` still running after {BOUND:?}: it hangs on a daemon that never answers; stderr: {:?}",
                std::fs::read_to_string(&*err).unwrap_or_default()
            ));
            continue;
        };
        let f = Failed {
            code: status.code().expect("lockstorm exits"),
            stderr: std::fs::read_to_string(&*err).unwrap(),
        };
        assert_clean_failure(&f, 254, "did not answer", &results);
        for needle in [socket.to_str().unwrap(), "DOCKER_HOST", "docker info"] {
            assert!(
                f.stderr.contains(needle),
                "{name}: {needle:?} not in {}",
                f.stderr
            );
        }
        let bridge = nemesis::clock::private_dir()
            .unwrap()
            .join(format!("docker-{}.sock", child.id()));
        assert!(!bridge.exists(), "{name} left {}", bridge.display());
    }
    assert!(outcomes.is_empty(), "{}", outcomes.join("\n"));
    let left = processes_naming(socket.to_str().unwrap());
    assert!(left.is_empty(), "processes left behind: {left:?}");
    drop(silent);
}

/// Whether `pid` is gone: no such process, or a zombie (killed, and only
/// waiting for whoever adopted it to reap it).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A `redis-server` that starts a child of its own and never answers PING
/// (a wrapper script, or a server stuck in its startup): the run fails
/// with its documented line and code, and the node's whole process group
/// goes with it, the wrapper's child included.
#[test]
fn a_node_that_never_answers_is_killed_with_its_children() {
    use std::time::{Duration, Instant};
    let tmp = crate::common::tmp();
    let results = tmp.path().join("results");
    let pids = tmp.path().join("children");
    let server = tmp.path().join("redis-server");
    std::fs::write(
        &server,
        format!(
            "#!/bin/sh\n\
             case \"$1\" in --version) echo 'Redis server v=0.0.0'; exit 0;; esac\n\
             sleep 300 &\n\
             echo $! >> '{}'\n\
             wait\n",
            pids.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = run(
        lockstorm().env("LOCKSTORM_REDIS_SERVER", &server),
        &results,
        &[
            "--config",
            "single",
            "--nemesis",
            "none",
            "--backend",
            "local",
        ],
    );
    let children: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !children.iter().all(|&pid| gone(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<u32> = children.iter().copied().filter(|&p| !gone(p)).collect();
    for &pid in &alive {
        // The test's own leftovers: the sleeps its wrapper started.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert_eq!(children.len(), 1, "the wrapper ran once: {children:?}");
    assert!(
        alive.is_empty(),
        "the node's child {alive:?} outlived the failed run"
    );
    assert_clean_failure(&f, 255, "no answer to PING", &results);
    assert!(f.stderr.contains("node n1 failed to start"), "{}", f.stderr);
}

/// A block another run holds (here: this test, by the same `flock` a run
/// takes) is refused before anything starts; without `--address-block`
/// the run would have taken a free one.
#[test]
fn an_address_block_another_run_holds_is_refused_naming_it() {
    use nix::fcntl::{Flock, FlockArg};
    let dir = std::env::temp_dir().join("lockstorm-blocks");
    std::fs::create_dir_all(&dir).unwrap();
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("block-233.lock"))
        .unwrap();
    let _held = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .expect("block 233 is free (runs take the lowest free blocks)");
    let tmp = crate::common::tmp();
    let results = tmp.path().join("results");
    let f = run(&mut lockstorm(), &results, &["--address-block", "233"]);
    assert_clean_failure(
        &f,
        254,
        "--address-block 233 is held by another lockstorm run",
        &results,
    );
}
