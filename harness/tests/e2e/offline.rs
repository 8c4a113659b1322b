//! The shipped adapters where the package registries cannot be reached:
//! the set-up says so in one line with the way out, within a bound; a
//! registry that answers but lacks a version keeps its own message; and
//! environments the user prepared (`LOCKSTORM_PYTHON`,
//! `LOCKSTORM_NODE_MODULES`) run the adapters with nothing installed, or
//! are refused in one line when they lack a pin. All on loopback.

use crate::common::{assert_no_process_left, lockstorm_at, lockstorm_refused_at, Run};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A closed port on loopback (discard: nothing listens there).
const CLOSED_INDEX: &str = "http://127.0.0.1:9/simple";
const CLOSED_REGISTRY: &str = "http://127.0.0.1:9/";

/// `lockstorm` from `root` with a fresh cache inside it, pip and npm
/// pointed at `index` and `registry`, and no cache of pip's or npm's that
/// could serve the pins without the registry; and how long it took. No
/// process of it may be left.
fn offline(
    root: &Path,
    args: &[&str],
    index: &str,
    registry: &str,
    env: &[(&str, &str)],
) -> (Run, Duration) {
    offline_as(root, args, index, registry, env, false)
}

/// [`offline`]; `refused`: the command is expected refused before it
/// starts anything, so it holds no run slot meanwhile.
fn offline_as(
    root: &Path,
    args: &[&str],
    index: &str,
    registry: &str,
    env: &[(&str, &str)],
    refused: bool,
) -> (Run, Duration) {
    let cache = root.join("cache");
    let links = root.join("no-wheels");
    std::fs::create_dir_all(&links).unwrap();
    let npm_cache = root.join("npm-cache");
    let mut all = vec![
        ("LOCKSTORM_CACHE", cache.to_str().unwrap()),
        ("PIP_INDEX_URL", index),
        ("PIP_FIND_LINKS", links.to_str().unwrap()),
        ("PIP_NO_CACHE_DIR", "1"),
        ("npm_config_registry", registry),
        ("npm_config_cache", npm_cache.to_str().unwrap()),
    ];
    all.extend_from_slice(env);
    let started = Instant::now();
    let run = match refused {
        true => lockstorm_refused_at(Some(root), args, &all),
        false => lockstorm_at(Some(root), args, &all),
    };
    let took = started.elapsed();
    assert_no_process_left(root);
    (run, took)
}

/// The harness's one line on stderr (progress lines start `lockstorm:
/// setting up`).
fn the_line(run: &Run) -> &str {
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| !l.starts_with("lockstorm: setting up"))
        .collect();
    assert_eq!(lines.len(), 1, "one line:\n{}", run.stderr);
    lines[0]
}

/// `clients setup` offline is refused: exit 254 and one line that says
/// each of `said`; and how long it took.
fn setup_refused(
    root: &Path,
    registries: (&str, &str),
    env: &[(&str, &str)],
    said: &[&str],
) -> Duration {
    let (index, registry) = registries;
    let (run, took) = offline(root, &["clients", "setup"], index, registry, env);
    assert_eq!(run.code, 254, "{}", run.stderr);
    let line = the_line(&run);
    for said in said {
        assert!(line.contains(said), "{said:?} in: {line}");
    }
    took
}

/// The environments of the default cache, set up by `clients setup` (as
/// other tests of the shipped adapters do on first use): the venv's Python
/// and the `node_modules` folder.
fn prepared() -> (PathBuf, PathBuf) {
    let run = crate::common::lockstorm(&["clients", "setup"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let dir = |family: &str| {
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{family}: ")))
            .unwrap_or_else(|| panic!("a {family} line: {}", run.stdout));
        let dir = line
            .split(" in ")
            .nth(1)
            .unwrap()
            .split(" (")
            .next()
            .unwrap();
        PathBuf::from(dir)
    };
    (
        dir("python").join("python/venv/bin/python"),
        dir("node").join("node/node_modules"),
    )
}

/// The tools' own retries, bounded (one retry each), end in tens of
/// seconds where their defaults take minutes (npm waits 10 s, then 60 s,
/// between tries); a venv made meanwhile on a loaded machine adds more
/// (62 s was seen in the whole suite on 2 cores, 10 s alone).
const REFUSED_WITHIN: Duration = Duration::from_secs(90);

#[test]
fn an_unreachable_registry_is_said_in_one_line_with_the_way_out() {
    let root = crate::common::tmp();
    let closed = (CLOSED_INDEX, CLOSED_REGISTRY);
    let took = setup_refused(
        root.path(),
        closed,
        &[],
        &[
            "the package registry http://127.0.0.1:9/simple cannot be reached (connection refused)",
            "run `lockstorm clients setup` where it can be",
            "LOCKSTORM_PYTHON",
        ],
    );
    assert!(took < REFUSED_WITHIN, "took {took:?}");

    // The Node adapters the same, once the Python ones have theirs.
    let (python, _) = prepared();
    let env = [("LOCKSTORM_PYTHON", python.to_str().unwrap())];
    let took = setup_refused(
        root.path(),
        closed,
        &env,
        &[
            "the package registry http://127.0.0.1:9/ cannot be reached (connection refused)",
            "run `lockstorm clients setup` where it can be",
            "LOCKSTORM_NODE_MODULES",
        ],
    );
    assert!(took < REFUSED_WITHIN, "took {took:?}");

    // A run that needs them says the same, before it starts anything.
    let args = ["client-test", "--client", "redis-py", "--results", "r"];
    let (run, _) = offline_as(root.path(), &args, CLOSED_INDEX, CLOSED_REGISTRY, &[], true);
    assert_eq!(run.code, 254, "{}", run.stderr);
    let line = the_line(&run);
    assert!(line.contains("cannot be reached"), "{line}");
}

/// Answers every request with an empty page: a package index that is
/// there but has none of the pins.
fn empty_index() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request);
            let body = "<!DOCTYPE html><html><body></body></html>";
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://127.0.0.1:{port}/simple")
}

#[test]
fn a_registry_that_answers_without_the_pin_keeps_its_own_message() {
    let root = crate::common::tmp();
    let index = empty_index();
    let (run, _) = offline(
        root.path(),
        &["clients", "setup"],
        &index,
        CLOSED_REGISTRY,
        &[],
    );
    assert_eq!(run.code, 255, "{}", run.stderr);
    let line = the_line(&run);
    assert!(
        line.contains(&format!(
            "No matching distribution found for {}",
            first_python_pin()
        )),
        "{line}"
    );
    assert!(!line.contains("cannot be reached"), "{line}");
}

#[test]
fn a_registry_that_never_answers_is_stopped_at_the_deadline() {
    let root = crate::common::tmp();
    // Connections complete in the kernel's backlog; no request is answered.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let registry = format!("http://{}/", silent.local_addr().unwrap());
    let (python, _) = prepared();
    let env = [
        ("LOCKSTORM_PYTHON", python.to_str().unwrap()),
        ("LOCKSTORM_SETUP_TIMEOUT", "3"),
    ];
    let (run, took) = offline(
        root.path(),
        &["clients", "setup"],
        CLOSED_INDEX,
        &registry,
        &env,
    );
    assert_eq!(run.code, 254, "{}", run.stderr);
    let line = the_line(&run);
    assert!(
        line.contains("was still running after 3 s and was stopped (LOCKSTORM_SETUP_TIMEOUT)"),
        "{line}"
    );
    assert!(line.contains(&registry), "{line}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    drop(silent);
}

/// Nothing installed in the fresh cache: no venv, no `node_modules`, no
/// set-up log.
fn assert_nothing_installed(root: &Path) {
    for entry in std::fs::read_dir(root.join("cache/clients")).unwrap() {
        let dir = entry.unwrap().path();
        for made in ["python/venv", "node/node_modules", "setup.log", ".ready"] {
            assert!(
                !dir.join(made).exists(),
                "{} was made",
                dir.join(made).display()
            );
        }
    }
}

fn client_test_passes(root: &Path, client: &str, env: &[(&str, &str)]) {
    let args = ["client-test", "--client", client, "--results", "r"];
    let (run, _) = offline(root, &args, CLOSED_INDEX, CLOSED_REGISTRY, env);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains(" 0 failed"), "{}", run.stdout);
    assert_nothing_installed(root);
}

#[test]
fn a_prepared_python_runs_the_python_adapters_with_nothing_installed() {
    let root = crate::common::tmp();
    let (python, _) = prepared();
    client_test_passes(
        root.path(),
        "redis-py",
        &[("LOCKSTORM_PYTHON", python.to_str().unwrap())],
    );
}

#[test]
fn prepared_node_modules_run_the_node_adapters_with_nothing_installed() {
    let root = crate::common::tmp();
    let (_, modules) = prepared();
    let env = [("LOCKSTORM_NODE_MODULES", modules.to_str().unwrap())];
    client_test_passes(root.path(), "node-redlock", &env);
}

#[test]
fn a_prepared_environment_without_the_pins_is_refused_in_one_line() {
    let root = crate::common::tmp();
    // A Python with none of the packages.
    let bare = root.path().join("bare");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&bare)
        .status()
        .unwrap();
    assert!(made.success());
    let python = bare.join("bin/python");
    let closed = (CLOSED_INDEX, CLOSED_REGISTRY);
    let env = [("LOCKSTORM_PYTHON", python.to_str().unwrap())];
    let said = [
        "lacks the pinned packages",
        &format!("{} (missing)", first_python_pin()),
        "-m pip install -r ",
    ];
    setup_refused(root.path(), closed, &env, &said);

    // An empty node_modules.
    let (python, _) = prepared();
    let empty = root.path().join("node_modules");
    std::fs::create_dir_all(&empty).unwrap();
    let env = [
        ("LOCKSTORM_PYTHON", python.to_str().unwrap()),
        ("LOCKSTORM_NODE_MODULES", empty.to_str().unwrap()),
    ];
    let said = [
        "lacks the pinned packages",
        &format!("{} (missing)", first_node_pin()),
        "npm ci --omit=dev",
    ];
    setup_refused(root.path(), closed, &env, &said);
    assert_nothing_installed(root.path());
}

/// The first pin of the Python adapters' requirements: the one pip names
/// first when none can be had, and the first a missing-pins line lists.
fn first_python_pin() -> String {
    let pins = include_str!("../../../workloads/clients/python/requirements.txt");
    let first = pins
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty());
    first
        .expect("requirements.txt pins something")
        .trim()
        .to_string()
}

/// The first package of the Node adapters' lockfile by name, as
/// `name@version`: the first a missing-pins line lists.
fn first_node_pin() -> String {
    let lock = include_str!("../../../workloads/clients/node/package-lock.json");
    let lock: serde_json::Value = serde_json::from_str(lock).unwrap();
    let mut pins: Vec<String> = lock["packages"]
        .as_object()
        .expect("a lockfile v2+ has packages")
        .iter()
        .filter_map(|(path, p)| {
            let name = path.rsplit_once("node_modules/")?.1;
            Some(format!("{name}@{}", p["version"].as_str()?))
        })
        .collect();
    pins.sort();
    pins.into_iter()
        .next()
        .expect("the lockfile pins something")
}
