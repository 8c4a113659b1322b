//! `--target`: a deployment lockstorm did not start, here real servers the
//! tests start themselves on 127.0.0.1 (`testkit`). A run there finds what a
//! run on lockstorm's own nodes finds, touches no key but its own, leaves
//! none behind, refuses a replica and a prefix already taken before any
//! write, and refuses faults that would act on the deployment's nodes.

use crate::common;

use common::{assert_all_caused, count, lockstorm, run};
use testkit::{Builder, Server};

/// Every key of the server, sorted.
fn keys(server: &Server) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.client())
        .unwrap();
    keys.sort();
    keys
}

/// A server holding one key of its owner's, which no run may touch.
fn deployment() -> Server {
    let server = Builder::redis().start();
    redis::cmd("SET")
        .arg("owner:key")
        .arg("keep")
        .query::<()>(&mut server.client())
        .unwrap();
    server
}

fn target(server: &Server) -> String {
    format!("redis://{}", server.addr())
}

#[test]
fn a_paused_holder_breaks_the_lock_on_a_deployment_and_the_run_leaves_only_its_owners_keys() {
    let server = deployment();
    let tmp = tempfile::tempdir().unwrap();
    let url = target(&server);
    let args = ["--target", &url, "--nemesis", "pause", "--time-limit", "8"];
    let (out, results, dir) = run(tmp.path(), &[&args[..], &["--seed", "31"]].concat());
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert_all_caused(&results, "lock-overlap");
    assert_eq!(
        keys(&server),
        ["owner:key"],
        "the run left a key, or took one"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(record["options"]["target"]["kind"], "single", "{record}");
    assert_eq!(record["options"]["keys"]["prefix"], "lockstorm:31:");
    assert!(
        record["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["role"] == "target" && n["pid"] == 0),
        "{record}"
    );
}

/// A client adapter on a deployment goes through the fault proxy like
/// any other run, and a write delayed there breaks it.
#[test]
fn a_client_adapter_on_a_deployment_is_broken_by_a_delayed_write() {
    let server = deployment();
    let tmp = tempfile::tempdir().unwrap();
    let url = target(&server);
    let args = [
        "--target",
        &url,
        "--client",
        "redis-py",
        "--nemesis",
        "delay",
        "--time-limit",
        "10",
        "--seed",
        "32",
    ];
    let (out, results, dir) = run(tmp.path(), &args);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    assert!(count(&results, "lost-update") > 0, "{}", out.stdout);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert!(record["proxied_requests"].as_u64() > Some(0), "{record}");
    assert_eq!(keys(&server), ["owner:key"]);
}

#[test]
fn a_key_of_the_runs_prefix_already_there_refuses_the_run_and_stays() {
    let server = deployment();
    redis::cmd("SET")
        .arg("lockstorm:33:lock")
        .arg("another run's")
        .query::<()>(&mut server.client())
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let url = target(&server);
    let results = tmp.path().to_str().unwrap();
    let out = lockstorm(&[
        "run",
        "--results",
        results,
        "--target",
        &url,
        "--nemesis",
        "pause",
        "--time-limit",
        "8",
        "--seed",
        "33",
    ]);
    assert_eq!(out.code, 254, "{}\n{}", out.stdout, out.stderr);
    let line = out.stderr.trim();
    assert!(!line.contains('\n'), "{line}");
    assert!(
        line.contains("lockstorm:33:lock") && line.contains("--seed"),
        "{line}"
    );
    assert_eq!(keys(&server), ["lockstorm:33:lock", "owner:key"]);
}

#[test]
fn a_replica_given_as_the_target_is_refused_before_any_write() {
    let primary = Builder::redis().start();
    let replica = Builder::redis()
        .args(["--replicaof", "127.0.0.1", &primary.port().to_string()])
        .start();
    let tmp = tempfile::tempdir().unwrap();
    let url = target(&replica);
    let results = tmp.path().to_str().unwrap();
    let out = lockstorm(&[
        "run",
        "--results",
        results,
        "--target",
        &url,
        "--nemesis",
        "none",
        "--time-limit",
        "3",
    ]);
    assert_eq!(out.code, 254, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("is a replica"), "{}", out.stderr);
    assert!(
        keys(&primary).is_empty(),
        "something was written: {:?}",
        keys(&primary)
    );
}

#[test]
fn faults_on_the_deployments_nodes_are_refused_in_one_line() {
    // Refused while the options are read: nothing is contacted.
    for fault in ["kill", "pause-node", "clock"] {
        let out = lockstorm(&[
            "run",
            "--target",
            "redis://127.0.0.1:1",
            "--nemesis",
            fault,
            "--time-limit",
            "20",
        ]);
        assert_eq!(out.code, 254, "{fault}: {}\n{}", out.stdout, out.stderr);
        let line = out.stderr.trim();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("did not start this deployment"), "{line}");
    }
    let out = lockstorm(&["run", "--target", "redis://u:secret@127.0.0.1:1"]);
    assert_eq!(out.code, 254);
    assert!(
        out.stderr.contains("LOCKSTORM_REDIS_PASSWORD"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("secret"), "{}", out.stderr);
}
