//! A fault must show that it took effect, and a node must be the process we
//! started: otherwise the run cannot vouch for what it tested.

use crate::common;

use backend::local::{find_redis_server, Local};
use backend::node::Persistence;
use backend::node::{NodeSpec, RedisNode, Role};
use backend::Server;
use checker::Validity;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server that runs under the time shim but reads a decoy control
/// file: the clock nemesis moves a file the node never reads, so no jump
/// happens, though the shim is loaded (which the start-up check sees).
#[test]
fn a_clock_jump_that_the_node_does_not_see_makes_the_run_unknown() {
    let tmp = common::tmp();
    let server = find_redis_server().unwrap();
    let wrapper = tmp.path().join("redis-server-with-a-decoy-clock");
    let script = format!(
        "#!/bin/sh\ncp \"$LOCKSTORM_TIME_CONTROL\" \"$LOCKSTORM_TIME_CONTROL.decoy\"\n\
         export LOCKSTORM_TIME_CONTROL=\"$LOCKSTORM_TIME_CONTROL.decoy\"\n\
         exec '{}' \"$@\"\n",
        server.display()
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let results = tmp.path().join("results");
    let args = [
        "run",
        "--results",
        results.to_str().unwrap(),
        "--config",
        "single",
        "--nemesis",
        "clock",
        "--time-limit",
        "10",
        "--seed",
        "1",
    ];
    let out = common::lockstorm_with(
        &args,
        &[("LOCKSTORM_REDIS_SERVER", wrapper.to_str().unwrap())],
    );
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("UNKNOWN"), "{}", out.stdout);
    assert!(
        out.stdout.contains("fault not verified: start-clock") && out.stdout.contains("TIME"),
        "the note does not name the fault and the reason: {}",
        out.stdout
    );
    let dir = results.join("single-clock/latest");
    let jump = &common::events(&dir, "start-clock")[0]["value"];
    assert!(jump["unverified"].is_string(), "{jump}");
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let verdict: checker::Results = serde_json::from_str(&text).unwrap();
    assert_eq!(verdict.valid, Validity::Unknown);
}

fn answers_ping(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

/// Something else takes a killed node's address before it restarts: the
/// restart fails naming the intruder instead of adopting it as the node.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_answered_by_a_foreign_server_is_an_error_naming_it() {
    let tmp = common::tmp();
    let server = find_redis_server().unwrap();
    let spec = NodeSpec {
        name: "n1".into(),
        role: Role::Lock,
        ip: Ipv4Addr::new(127, 0, 0, 61),
        persistence: Persistence::None,
        clock: None,
    };
    let local = std::sync::Arc::new(Local::find(false).unwrap());
    let mut node = RedisNode::start(spec, tmp.path(), local).await.unwrap();
    assert_eq!(node.node_ref().pid, node.pid());
    assert!(!node.node_ref().run_id.is_empty(), "no run id kept");
    node.kill().await.expect("it was running");

    let addr = node.addr();
    let (ip, port) = addr.split_once(':').expect("an ip:port address");
    let intruder_dir = tmp.path().join("intruder");
    std::fs::create_dir_all(&intruder_dir).unwrap();
    let mut intruder = Command::new(&server)
        .args([
            "--bind",
            ip,
            "--port",
            port,
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--protected-mode", "no"])
        .current_dir(&intruder_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !answers_ping(&node.addr()) {
        assert!(Instant::now() < deadline, "the intruder never answered");
        std::thread::sleep(Duration::from_millis(20));
    }

    let restarted = node.restart().await;
    let intruder_pid = intruder.id();
    intruder.kill().unwrap();
    intruder.wait().unwrap();
    let err = restarted
        .expect_err("the intruder was adopted as n1")
        .to_string();
    assert!(
        err.contains(&format!("pid {intruder_pid}")),
        "the error does not name the intruder (pid {intruder_pid}): {err}"
    );
    assert_eq!(
        node.pid(),
        0,
        "our failed child is still counted as the node"
    );
}
