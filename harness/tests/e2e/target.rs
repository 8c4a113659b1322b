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

/// With `--storage-target` the counter lives on a node of the user's too:
/// the lost update is seen through it, and it is left as found.
#[test]
fn a_paused_holder_breaks_the_lock_on_a_deployment_and_the_run_leaves_only_its_owners_keys() {
    let (server, storage) = (deployment(), deployment());
    let tmp = common::tmp();
    let (url, on) = (target(&server), target(&storage));
    let args = [
        "--target",
        &url,
        "--storage-target",
        &on,
        "--nemesis",
        "pause",
    ];
    let args = [&args[..], &["--time-limit", "7", "--seed", "31"]].concat();
    let (out, results, dir) = run(tmp.path(), &args);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    // Named as a run against a deployment: its header, and a folder (and
    // `latest`) of its own beside the local runs'.
    assert!(
        out.stdout
            .starts_with(&format!("single × pause against {url} (seed 31): INVALID")),
        "{}",
        out.stdout
    );
    let folder = dir.parent().unwrap().file_name().unwrap();
    assert_eq!(folder, "target-single-pause", "{}", dir.display());
    assert!(
        !out.stdout.contains("documented:"),
        "the file documents lockstorm's own nodes"
    );
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert_all_caused(&results, "lock-overlap");
    assert!(count(&results, "lost-update") > 0, "{}", out.stdout);
    assert_eq!(keys(&storage), ["owner:key"], "the counter was left behind");
    assert_eq!(
        keys(&server),
        ["owner:key"],
        "the run left a key, or took one"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(record["options"]["target"]["kind"], "single", "{record}");
    assert_eq!(
        record["options"]["keys"]["prefix"],
        "lockstorm:single-pause:31:"
    );
    assert!(
        record["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["role"] == "target" && n["pid"] == 0),
        "{record}"
    );
    let version = &record["target_servers"][server.addr().to_string()];
    assert!(
        version.as_str().is_some_and(|v| v.starts_with("redis ")),
        "{record}"
    );
    // Its audit, read before the first write: the node keeps nothing.
    let audit: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("audit.json")).unwrap()).unwrap();
    let persistence = audit["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "persistence")
        .cloned();
    assert_eq!(
        persistence.map(|f| f["severity"].clone()),
        Some("risk".into())
    );
    // The report shows it beside the run.
    let report = lockstorm(&["report", tmp.path().to_str().unwrap()]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let page = std::fs::read_to_string(tmp.path().join("index.html")).unwrap();
    assert!(
        page.contains("at risk: persistence"),
        "no audit beside the run"
    );
}

/// A client adapter on a deployment goes through the fault proxy like
/// any other run, and a write delayed there breaks it.
/// A client adapter on a deployment with a password goes through the fault
/// proxy like any other run, and a write delayed there breaks it; the
/// password reaches the adapter and is written nowhere.
#[test]
fn a_client_adapter_on_a_deployment_with_a_password_is_broken_by_a_delayed_write() {
    const PASSWORD: &str = "pw-3f9a1c";
    let server = Builder::redis().password(PASSWORD).start();
    redis::cmd("SET")
        .arg("owner:key")
        .arg("keep")
        .query::<()>(&mut server.client())
        .unwrap();
    let tmp = common::tmp();
    let url = target(&server);
    let args = [
        "--target",
        &url,
        "--client",
        "redis-py",
        "--workers",
        "3",
        "--nemesis",
        "delay",
        "--time-limit",
        "10",
        "--seed",
        "32",
    ];
    let env = [("LOCKSTORM_REDIS_PASSWORD", PASSWORD)];
    let (out, results, dir) = common::run_with_env(None, tmp.path(), &args, &env);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let leaked: Vec<_> = walk(tmp.path())
        .into_iter()
        .filter(|f| {
            let bytes = std::fs::read(f).unwrap_or_default();
            bytes
                .windows(PASSWORD.len())
                .any(|w| w == PASSWORD.as_bytes())
        })
        .collect();
    assert!(leaked.is_empty(), "the password is written in {leaked:?}");
    // The held write lands behind the next holder's: taken after another's
    // grant (unsafe-action), and mostly over its increment (lost-update).
    let landed = count(&results, "unsafe-action") + count(&results, "lost-update");
    assert!(landed > 0, "{}", out.stdout);
    assert_all_caused(&results, "unsafe-action");
    // The held write's value, read off the command (not its expiry, which
    // a deployment's counter write also carries).
    for stop in common::events(&dir, "stop-delay") {
        if let Some(v) = stop["value"]["delivered_write"].as_i64() {
            assert!(
                v < 10_000,
                "a counter of {v}: the expiry was read as the value"
            );
        }
    }
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert!(record["proxied_requests"].as_u64() > Some(0), "{record}");
    assert_eq!(keys(&server), ["owner:key"]);
}

#[test]
fn a_key_of_the_runs_prefix_already_there_refuses_the_run_and_stays() {
    let server = deployment();
    redis::cmd("SET")
        .arg("lockstorm:single-pause:33:lock")
        .arg("another run's")
        .query::<()>(&mut server.client())
        .unwrap();
    let tmp = common::tmp();
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
        line.contains("lockstorm:single-pause:33:lock") && line.contains("--seed"),
        "{line}"
    );
    assert_eq!(
        keys(&server),
        ["lockstorm:single-pause:33:lock", "owner:key"]
    );
}

#[test]
fn a_replica_given_as_the_target_is_refused_before_any_write() {
    let primary = Builder::redis().start();
    let replica = Builder::redis()
        .args(["--replicaof", "127.0.0.1", &primary.port().to_string()])
        .start();
    let tmp = common::tmp();
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
    assert!(
        out.stderr.contains("not writable: a replica"),
        "{}",
        out.stderr
    );
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

/// The fault's events of kind `f`, each one's value: at least one.
fn fault_events(dir: &std::path::Path, f: &str) -> Vec<serde_json::Value> {
    let found: Vec<_> = common::events(dir, f)
        .into_iter()
        .map(|e| e["value"].clone())
        .collect();
    assert!(!found.is_empty(), "no {f}");
    found
}

/// A kill by the user's command: the script kills the node by the pid it
/// reports and starts a new one on its port (its pid in `dir`, so the test
/// stops it), as `systemctl kill` with a restart policy would.
fn kill_and_restart_script(dir: &std::path::Path) -> std::path::PathBuf {
    let script = dir.join("kill-and-restart");
    let d = dir.display();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nset -e\nport=${{LOCKSTORM_NODE_ADDR##*:}}\n\
             pid=$(redis-cli -p \"$port\" info server | sed -n 's/^process_id:\\([0-9]*\\).*/\\1/p')\n\
             kill -9 \"$pid\"\n\
             while redis-cli -p \"$port\" ping >/dev/null 2>&1; do sleep 0.05; done\n\
             redis-server --port \"$port\" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
             --dir {d} --pidfile {d}/restarted.pid --logfile {d}/restarted.log\n\
             echo killed \"$pid\"\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[test]
fn a_kill_by_the_users_command_is_verified_by_the_nodes_new_run_id() {
    let server = deployment();
    let tmp = common::tmp();
    let script = kill_and_restart_script(tmp.path());
    let url = target(&server);
    let cmd = format!("kill={}", script.display());
    let args = [
        "--target",
        &url,
        "--nemesis",
        "kill",
        "--fault-cmd",
        &cmd,
        "--ttl-ms",
        "1000",
        "--time-limit",
        "6",
        "--seed",
        "34",
    ];
    let results = tmp.path().join("results");
    let (out, _, dir) = run(&results, &args);
    // Ours, started by the script: stopped by the pid it wrote.
    let restarted = std::fs::read_to_string(tmp.path().join("restarted.pid")).unwrap_or_default();
    if let Ok(pid) = restarted.trim().parse::<i32>() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert_ne!(out.code, 2, "the kill was not verified: {}", out.stdout);
    for stop in fault_events(&dir, "stop-kill") {
        let seen = &stop["verified"];
        assert!(
            seen["new_run_id"].is_string() && seen["new_run_id"] != seen["old_run_id"],
            "{stop}"
        );
    }
    assert!(
        restarted.trim().parse::<i32>().is_ok(),
        "the script never ran"
    );
}

#[test]
fn a_fault_command_whose_effect_is_never_seen_makes_the_run_unknown() {
    let server = deployment();
    let tmp = common::tmp();
    let url = target(&server);
    let args = [
        "--target",
        &url,
        "--nemesis",
        "kill",
        "--fault-cmd",
        "kill=true",
        "--fault-cmd-wait-ms",
        "2000",
        "--ttl-ms",
        "1000",
        "--time-limit",
        "6",
        "--seed",
        "35",
    ];
    let (out, results, dir) = run(tmp.path(), &args);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert_eq!(results.valid, checker::Validity::Unknown);
    for stop in fault_events(&dir, "stop-kill") {
        let why = stop["unverified"].as_str().unwrap_or_default();
        assert!(why.contains("new run_id"), "{stop}");
    }
}

/// A primary, its replica and a Sentinel watching them as `mm`, the
/// Sentinel ready to fail over (it knows the replica).
fn sentinel_set() -> (Server, Server, Server) {
    let primary = Builder::redis().start();
    let replica = Builder::redis()
        .args(["--replicaof", "127.0.0.1", &primary.port().to_string()])
        .start();
    let sentinel = testkit::sentinel_of(primary.port(), "sentinel failover-timeout mm 3000");
    (primary, replica, sentinel)
}

#[test]
fn a_failover_by_the_users_command_is_verified_by_the_sentinels_new_primary() {
    let (primary, replica, sentinel) = sentinel_set();
    let tmp = common::tmp();
    let url = format!("sentinel://{}/mm", sentinel.addr());
    let cmd = format!(
        "failover=redis-cli -p {} SENTINEL FAILOVER mm",
        sentinel.port()
    );
    let args = [
        "--target",
        &url,
        "--config",
        "replicated",
        "--nemesis",
        "failover",
        "--fault-cmd",
        &cmd,
        "--ttl-ms",
        "1000",
        "--time-limit",
        "10",
        "--seed",
        "36",
    ];
    let (out, _, dir) = run(tmp.path(), &args);
    assert_ne!(out.code, 2, "the failover was not verified: {}", out.stdout);
    let start = &fault_events(&dir, "start-failover")[0];
    assert_eq!(start["verified"]["command"], "exited 0", "{start}");
    let stop = &fault_events(&dir, "stop-failover")[0];
    assert_eq!(stop["verified"]["primary"], "n2", "{stop}");
    // It lasts until the old primary is one no more, or says it still was.
    let old = &stop["old_primary"];
    assert!(
        old["demoted_after_ms"].is_u64() || old["still_primary_after_ms"].is_u64(),
        "{stop}"
    );
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut replica.client()).unwrap();
    assert_eq!(role[0], redis::Value::BulkString(b"master".to_vec()));
    drop(primary);
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        match path.is_dir() {
            true => files.extend(walk(&path)),
            false => files.push(path),
        }
    }
    files
}

/// With `--storage-target`, the counter and its highest fence live on the
/// user's node too: a killed harness leaves every key of the run, on both,
/// with a TTL.
#[test]
fn a_killed_harness_leaves_only_keys_that_expire() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let _slot = common::e2e_slot();
    let (server, storage) = (deployment(), deployment());
    let tmp = common::tmp();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lockstorm"))
        .args(["--target", &target(&server), "--config", "fenced"])
        .args(["--storage-target", &target(&storage)])
        .args(["--nemesis", "none", "--time-limit", "60", "--seed", "38"])
        .args(["--results", tmp.path().to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Once the lock, the fence counter and the counter all exist, mid-run.
    let prefix = "lockstorm:fenced-none:38:";
    let has = |server: &Server, names: &[&str]| {
        let keys = keys(server);
        names
            .iter()
            .all(|n| keys.iter().any(|k| *k == format!("{prefix}{n}")))
    };
    common::wait_for("the run's keys", || {
        (has(&server, &["lock", "fence"]) && has(&storage, &["counter", "highest-fence"]))
            .then_some(())
    });
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    for node in [&server, &storage] {
        let mut con = node.client();
        for key in keys(node).iter().filter(|k| k.starts_with(prefix)) {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
            assert!(
                pttl > 0,
                "{key} has no TTL ({pttl}): it would outlive the run"
            );
        }
    }
    common::wait_for("the run's processes to die", || {
        common::leftover_processes(tmp.path())
            .is_empty()
            .then_some(())
    });
}

/// A CA and a certificate for `localhost` it signed, made with `openssl`,
/// in `dir`: (ca.pem, server.pem, server.key).
fn certificates(dir: &std::path::Path, ca_name: &str) -> [std::path::PathBuf; 3] {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl must be installed (apt-get install -y openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ca = format!("{ca_name}.pem");
    let ca_key = format!("{ca_name}.key");
    let subject = format!("/CN={ca_name}");
    run(&[
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &ca_key, "-out", &ca, "-days",
        "1", "-subj", &subject,
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ]);
    [dir.join(ca), dir.join("server.pem"), dir.join("server.key")]
}

/// A node that speaks TLS on a port of its own (its plain port is the
/// test's, to look at it), and that port.
fn tls_node(certs: &[std::path::PathBuf; 3]) -> (Server, u16) {
    let tls_port = testkit::free_port(std::net::Ipv4Addr::LOCALHOST);
    let [ca, cert, key] = certs.each_ref().map(|p| p.display().to_string());
    let server = Builder::redis()
        .args([
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &cert,
        ])
        .args([
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
        ])
        .start();
    (server, tls_port)
}

#[test]
fn a_tls_deployment_is_tested_through_lockstorms_bridge_and_left_clean() {
    let tmp = common::tmp();
    let certs = certificates(tmp.path(), "lockstorm-test-ca");
    let (server, tls_port) = tls_node(&certs);
    let url = format!("rediss://localhost:{tls_port}");
    let ca = certs[0].display().to_string();
    let results = tmp.path().join("results");
    let args = [
        "--target",
        &url,
        "--tls-ca",
        &ca,
        "--nemesis",
        "pause",
        "--time-limit",
        "7",
        "--seed",
        "40",
    ];
    let (out, results, dir) = run(&results, &args);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    assert!(count(&results, "lock-overlap") > 0, "{}", out.stdout);
    assert!(
        dir.join("audit.json").is_file(),
        "no audit through the bridge"
    );
    assert!(keys(&server).is_empty(), "left behind: {:?}", keys(&server));
}

/// A `--tls-ca` file with no certificate in it is named as such, before
/// anything is contacted (it was a TLS `UnknownIssuer` from the server).
#[test]
fn a_tls_ca_file_without_a_certificate_is_said_to_hold_none() {
    let tmp = common::tmp();
    let empty = tmp.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let out = lockstorm(&[
        "run",
        "--results",
        tmp.path().to_str().unwrap(),
        "--target",
        "rediss://127.0.0.1:1",
        "--tls-ca",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 254, "{}\n{}", out.stdout, out.stderr);
    let line = out.stderr.trim();
    assert!(
        !line.contains('\n') && line.contains("holds no certificate"),
        "{line}"
    );
}

#[test]
fn a_certificate_the_ca_did_not_sign_is_refused_in_one_line() {
    let tmp = common::tmp();
    let certs = certificates(tmp.path(), "lockstorm-test-ca");
    let (_server, tls_port) = tls_node(&certs);
    let other = common::tmp();
    let [stranger, _, _] = certificates(other.path(), "another-ca");
    let url = format!("rediss://localhost:{tls_port}");
    let out = lockstorm(&[
        "audit",
        "--target",
        &url,
        "--tls-ca",
        stranger.to_str().unwrap(),
        "--output",
        tmp.path().join("audit").to_str().unwrap(),
    ]);
    assert_eq!(out.code, 254, "{}\n{}", out.stdout, out.stderr);
    let line = out.stderr.trim();
    assert!(!line.contains('\n') && line.contains("--tls-ca"), "{line}");
    // With the right CA the audit reads it, and finds it keeps nothing.
    let out = lockstorm(&[
        "audit",
        "--target",
        &url,
        "--tls-ca",
        certs[0].to_str().unwrap(),
        "--output",
        tmp.path().join("audit").to_str().unwrap(),
    ]);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("persistence"), "{}", out.stdout);
}

#[test]
fn a_crashed_holder_on_a_deployment_does_not_stick_the_lock() {
    let server = deployment();
    let tmp = common::tmp();
    let url = target(&server);
    let args = [
        "--target",
        &url,
        "--nemesis",
        "crash",
        "--time-limit",
        "7",
        "--seed",
        "41",
    ];
    let (out, results, dir) = run(tmp.path(), &args);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(
        !common::events(&dir, "crash").is_empty(),
        "no holder crashed"
    );
    assert_eq!(count(&results, "deadlock"), 0, "{}", out.stdout);
    assert_eq!(keys(&server), ["owner:key"]);
}

#[test]
fn ctrl_c_on_a_deployment_removes_the_runs_keys() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let _slot = common::e2e_slot();
    let server = deployment();
    let tmp = common::tmp();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_lockstorm"))
        .args(["--target", &target(&server), "--config", "fenced"])
        .args(["--nemesis", "none", "--time-limit", "60", "--seed", "42"])
        .args(["--results", tmp.path().to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for("the run's fence counter", || {
        keys(&server)
            .iter()
            .any(|k| k == "lockstorm:fenced-none:42:fence")
            .then_some(())
    });
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        keys(&server),
        ["owner:key"],
        "the run left keys after Ctrl-C"
    );
}
