//! The workspace's own rules, ARCHITECTURE.md's "keeping this page true":
//! here, what `cargo metadata` says (which crate may depend on which, each
//! crate's description saying what it must not; the pure crates' lack of
//! I/O crates; the minimum Rust version); in the modules below, what the
//! sources and the page say. None of them needs a server.

mod imports;
mod lengths;
mod page;
mod rules;
mod source;

use serde_json::Value;
use std::collections::BTreeMap;

/// What `cargo <args>` prints, run at the workspace's root.
fn cargo(args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap_or_else(|e| panic!("cargo {args:?} cannot start: {e}"));
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn metadata() -> Value {
    serde_json::from_slice(&cargo(&["metadata", "--format-version", "1", "--locked"]))
        .expect("cargo metadata prints JSON")
}

/// Each workspace crate and the workspace crates it depends on (normal
/// dependencies: what its code may use). Not `workspace-hack`: every crate
/// depends on it for its dependencies' features, and it has no code.
fn workspace_edges(meta: &Value) -> BTreeMap<String, Vec<String>> {
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let packages = meta["packages"].as_array().unwrap();
    let ours: Vec<&Value> = packages
        .iter()
        .filter(|p| members.contains(&p["id"].as_str().unwrap()))
        .filter(|p| p["name"] != "workspace-hack")
        .collect();
    let names: Vec<&str> = ours.iter().map(|p| p["name"].as_str().unwrap()).collect();
    ours.iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap())
                .filter(|d| names.contains(d))
                .map(String::from)
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn no_crate_depends_on_one_it_must_not() {
    let edges = workspace_edges(&metadata());
    // What each crate may use of the workspace; the harness may use all.
    let allowed: [(&str, &[&str]); 12] = [
        ("history", &[]),
        ("checker", &["history"]),
        ("story", &["checker"]),
        ("process", &[]),
        ("proxy", &[]),
        ("workloads", &["checker", "process"]),
        ("nemesis", &["checker", "process", "proxy"]),
        ("store", &["checker"]),
        ("backend", &["nemesis", "process", "store", "workloads"]),
        ("report", &["checker", "store", "story"]),
        ("deployment", &["checker", "nemesis", "store", "workloads"]),
        ("testkit", &[]),
    ];
    for (krate, may) in allowed {
        let deps = edges
            .get(krate)
            .unwrap_or_else(|| panic!("no workspace crate {krate}: {edges:?}"));
        let forbidden: Vec<&String> = deps.iter().filter(|d| !may.contains(&d.as_str())).collect();
        assert!(
            forbidden.is_empty(),
            "{krate} depends on {forbidden:?}; it may use only {may:?} of the workspace (see ARCHITECTURE.md)"
        );
    }
}

#[test]
fn the_pure_crates_use_no_io_crate() {
    // What makes a stored run re-checkable and these crates' tests fast:
    // no runtime, no server client, no system calls of their own.
    let io = [
        "tokio",
        "redis",
        "postgres",
        "nix",
        "libc",
        "hyper",
        "bollard",
        "testcontainers",
        "socket2",
    ];
    let meta = metadata();
    for krate in ["checker", "store", "report"] {
        let package = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == krate)
            .unwrap_or_else(|| panic!("no package {krate}"));
        let used: Vec<&str> = package["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().unwrap())
            .filter(|d| io.contains(d))
            .collect();
        assert!(
            used.is_empty(),
            "{krate} depends on {used:?}; it must stay pure (see ARCHITECTURE.md)"
        );
    }
}

#[test]
fn the_test_servers_are_for_tests_only() {
    let edges = workspace_edges(&metadata());
    let users: Vec<&String> = edges
        .iter()
        .filter(|(_, deps)| deps.iter().any(|d| d == "testkit"))
        .map(|(krate, _)| krate)
        .collect();
    assert!(
        users.is_empty(),
        "{users:?} depend on testkit outside their tests; make it a dev-dependency"
    );
}

#[test]
fn the_declared_minimum_rust_version_covers_every_dependency() {
    let meta = metadata();
    // `1.88` is `1.88.0`: compare as three numbers.
    let version = |v: &str| -> Vec<u64> {
        let mut parts: Vec<u64> = v.split('.').map(|p| p.parse().unwrap()).collect();
        parts.resize(3, 0);
        parts
    };
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml")).unwrap();
    let declared = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace declares rust-version")
        .trim_matches('"');
    let newer: Vec<String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            (version(needs) > version(declared)).then(|| {
                format!(
                    "{} {} needs {needs}",
                    p["name"].as_str().unwrap_or("?"),
                    p["version"].as_str().unwrap_or("?")
                )
            })
        })
        .collect();
    assert!(
        newer.is_empty(),
        "rust-version {declared} is older than dependencies need: {newer:?}; raise it in Cargo.toml"
    );
    let toolchain = String::from_utf8(
        std::process::Command::new("rustc")
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let running = version(
        toolchain
            .split_whitespace()
            .nth(1)
            .unwrap()
            .split('-')
            .next()
            .unwrap(),
    );
    assert!(
        running >= version(declared),
        "{toolchain} is older than the declared {declared}"
    );
}

/// The lockfile picks idna's unicode-rs back end (`idna_adapter` 1.1), as
/// its maintainers document for a shorter build: ICU4X's default (1.2)
/// adds two dozen crates, a tenth of the first `cargo run`, for host names
/// lockstorm only ever reads from a `--target` URL.
#[test]
fn the_lockfile_keeps_the_light_idna_back_end() {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"idna_adapter\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .expect("idna_adapter is in the lockfile");
    assert!(
        version.trim_matches('"').starts_with("1.1."),
        "idna_adapter {version}: run `cargo update -p idna_adapter --precise 1.1.0`"
    );
}

/// Each dependency in a build and the features it is built with, from
/// `cargo tree` (`name version` → `[features]`).
fn built_features(args: &[&str]) -> BTreeMap<String, String> {
    let tree = ["tree", "--locked", "--prefix", "none", "-f", "{p} [{f}]"];
    String::from_utf8(cargo(&[&tree[..], args].concat()))
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (package, features) = line.trim_end_matches(" (*)").split_once(" [")?;
            Some((package.to_string(), features.to_string()))
        })
        .collect()
}

/// The README's `cargo test --workspace` after the first `cargo run`
/// compiles the workspace's crates and the test-only ones, not the
/// dependencies again: every dependency both builds share is resolved with
/// the same features. A dev-dependency that asks a shared crate for more
/// (criterion's serde `alloc` and zerocopy `derive` did) rebuilds everything
/// above it, about two minutes on 2 cores.
#[test]
fn the_tests_build_reuses_every_dependency_the_cli_build_compiled() {
    let cli = built_features(&["-p", "lockstorm", "-e", "normal,build"]);
    let tests = built_features(&["--workspace", "-e", "normal,build,dev"]);
    let differ: Vec<String> = cli
        .iter()
        .filter_map(|(package, features)| {
            let other = tests.get(package)?;
            (other != features)
                .then(|| format!("{package}: [{features} in the CLI's, [{other} in the tests'"))
        })
        .collect();
    assert!(cli.len() > 100, "cargo tree listed {} packages", cli.len());
    assert!(
        differ.is_empty(),
        "the tests' build would rebuild these with other features (give the CLI's dependency the feature, or keep the dev-dependency that asks for it out of `cargo test`): {differ:#?}"
    );
}

/// CI's second build, the opt-in features' (the Docker backend, the
/// criterion benches), compiles what only they use and the workspace's
/// crates whose features they change, not the dependencies the tests'
/// build compiled: `workspace-hack` (kept by `cargo hakari`) gives every
/// shared dependency the union of its features. Without it testcontainers'
/// syn `full` and criterion's serde `alloc` rebuilt every proc macro and
/// all above them, 286 s of CI's 935.
#[test]
fn the_opt_in_build_reuses_every_dependency_the_tests_build_compiled() {
    let tests = built_features(&["--workspace", "-e", "normal,build,dev"]);
    let opt_in = built_features(&[
        "-p",
        "lockstorm",
        "-p",
        "backend",
        "-p",
        "checker",
        "-p",
        "proxy",
        "--features",
        "lockstorm/docker,checker/bench,proxy/bench",
        "-e",
        "normal,build,dev",
    ]);
    let member = |package: &str| package.contains(" (/");
    let differ: Vec<String> = opt_in
        .iter()
        .filter(|(package, _)| !member(package))
        .filter_map(|(package, features)| {
            let other = tests.get(package)?;
            (other != features)
                .then(|| format!("{package}: [{other} in the tests', [{features} in the opt-in's"))
        })
        .collect();
    assert!(
        opt_in.len() > tests.len(),
        "the opt-in build lists {} packages, the tests' {}: are the features still there?",
        opt_in.len(),
        tests.len()
    );
    assert!(
        differ.is_empty(),
        "the opt-in build would rebuild these with other features: run `cargo hakari generate` (cargo install cargo-hakari --locked): {differ:#?}"
    );
}
