//! Client adapters end to end: the shipped libraries, the protocol page's
//! example adapter, a broken one written from the protocol page alone, and
//! adapters that break the protocol, hang, or outlive a killed harness.

use crate::common;

use checker::{Results, Validity};
use common::{assert_no_process_left, assert_valid, count, events, lockstorm_at, run_at, wait_for};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A test's folder: the harness runs in it (so its adapters do), and its
/// runs go to `results/` inside.
fn root() -> tempfile::TempDir {
    common::tmp()
}

fn results(root: &Path) -> PathBuf {
    root.join("results")
}

/// `lockstorm run` from `root` with a client, into a results folder of its
/// own (`results/<n>`, one per run); no process of it may be left.
fn run_client(root: &Path, args: &[&str]) -> (Results, PathBuf) {
    let parent = results(root);
    std::fs::create_dir_all(&parent).unwrap();
    let n = std::fs::read_dir(&parent).unwrap().count();
    let results = parent.join(n.to_string());
    std::fs::create_dir_all(&results).unwrap();
    let (_, r, dir) = run_at(Some(root), &results, args);
    assert_no_process_left(root);
    (r, dir)
}

/// `lockstorm client-test`: its exit code and report.
fn client_test(root: &Path, client: &[&str]) -> (i32, String) {
    let mut args = vec!["client-test", "--results", "client-tests"];
    args.extend_from_slice(client);
    let out = lockstorm_at(Some(root), &args, &[]);
    assert_no_process_left(root);
    (out.code, format!("{}{}", out.stdout, out.stderr))
}

/// `client-test` passes, and with no fault the run is valid, with enough
/// lock cycles to mean something.
fn passes_client_test_and_is_valid_without_faults(client: &str, config: &str) {
    let root = root();
    let (code, report) = client_test(root.path(), &["--client", client]);
    assert_eq!(code, 0, "client-test {client} failed:\n{report}");
    assert!(report.contains(" 0 failed"), "{report}");

    // Three workers contend as five do, for less of a busy machine's time.
    let args = [
        "--config",
        config,
        "--client",
        client,
        "--seed",
        "1",
        "--workers",
        "3",
    ];
    let (r, dir) = run_client(root.path(), &[&args[..], &["--time-limit", "6"]].concat());
    assert_valid(&r, &dir);
    assert!(
        r.stats.acquired >= 15,
        "only {} locks granted in 6 s: too few cycles to mean anything ({})",
        r.stats.acquired,
        dir.display()
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert!(
        record["client"]["library"]
            .as_str()
            .is_some_and(|l| !l.is_empty()),
        "run.json names the library: {}",
        record["client"]
    );
    // Every shipped adapter gives its library a bound on each command, and
    // says so: what a finding depends on besides the library.
    let options = record["client"]["options"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(
        options.keys().any(|k| k.contains("imeout")),
        "run.json names the adapter's settings: {}",
        record["client"]
    );
    // The observer watches the key the library really uses (some prefix
    // the run's), and the timeline draws who held it.
    assert!(
        !events(&dir, "key-set").is_empty(),
        "the observer saw none of {client}'s keys (run.json: {})",
        record["client"]
    );
    let svg = std::fs::read_to_string(dir.join("timeline.svg")).unwrap();
    assert!(svg.contains("key on n1"), "no key row in {}", dir.display());
}

/// Under `pause` (after the lease check, the default): the holder's lease
/// expires while it is frozen and its write lands stale.
fn caught_under_pause(client: &str, config: &str) {
    caught_under_pause_in(root().path(), client, config, &[]);
}

/// `caught_under_pause` in `root`, with the run's own `extra` arguments;
/// the run's folder.
fn caught_under_pause_in(root: &Path, client: &str, config: &str, extra: &[&str]) -> PathBuf {
    let args = ["--config", config, "--client", client, "--seed", "1"];
    // 8 s fits one pause past the TTL, which is enough to catch it: the
    // faults wait until every adapter is ready. Three workers contend as
    // five do, for less of a busy machine's time.
    let pause = ["--nemesis", "pause", "--nemesis-interval-ms", "2000"];
    let limit: &[&str] = match extra.contains(&"--time-limit") {
        true => &[],
        false => &["--time-limit", "8"],
    };
    let workers: &[&str] = match extra.contains(&"--workers") {
        true => &[],
        false => &["--workers", "3"],
    };
    let (r, dir) = run_client(root, &[&args[..], &pause, limit, workers, extra].concat());
    assert_eq!(
        r.valid,
        Validity::False,
        "{client} under pause: {}\nnotes: {:#?}\nstalls: {}",
        dir.display(),
        r.notes,
        common::events(&dir, "stall").len()
    );
    assert!(count(&r, "lock-overlap") > 0, "{}", dir.display());
    dir
}

/// The later adapters get one test each, for the suite's time: `client-test`
/// passes and a run under `pause` is caught.
fn passes_client_test_and_is_caught_under_pause(client: &str, config: &str, extra: &[&str]) {
    let root = root();
    let (code, report) = client_test(root.path(), &["--client", client]);
    assert_eq!(code, 0, "client-test {client} failed:\n{report}");
    assert!(report.contains(" 0 failed"), "{report}");
    caught_under_pause_in(root.path(), client, config, extra);
}

#[test]
fn redis_py_passes_client_test_and_is_valid_without_faults() {
    passes_client_test_and_is_valid_without_faults("redis-py", "single");
}

/// redis-py retries inside one acquire call: its grant is dated from the
/// key's observed SET, never from the call's start, so no chain has a lease
/// run out before the grant it began with.
#[test]
fn redis_py_is_caught_under_pause_and_no_lease_ends_before_its_grant() {
    let root = root();
    let dir = caught_under_pause_in(root.path(), "redis-py", "single", &[]);
    let told = lockstorm_at(None, &["explain", "--json", dir.to_str().unwrap()], &[]);
    let told: Vec<serde_json::Value> = serde_json::from_str(&told.stdout).expect("JSON");
    let steps: Vec<&serde_json::Value> = told
        .iter()
        .flat_map(|e| e["steps"].as_array().unwrap())
        .collect();
    // The observer's word on the library's own key values names its holder.
    let named = |s: &&serde_json::Value| s["text"].as_str().unwrap().contains("'s key ");
    assert!(steps.iter().any(named), "{}", dir.display());
    for step in steps {
        let text = step["text"].as_str().unwrap();
        let Some((_, granted)) = text.split_once("lease ran out (granted at ") else {
            continue;
        };
        let granted: f64 = granted.trim_end_matches(" s)").parse().unwrap();
        let at = step["time"].as_u64().unwrap() as f64 / 1e9;
        assert!(at >= granted - 0.005, "{text} at {at:.2} s");
    }
}

#[test]
fn pottery_passes_client_test_and_is_valid_without_faults() {
    passes_client_test_and_is_valid_without_faults("pottery", "redlock");
}

/// pottery stores the lock under "redlock:<key>": the observer watches that
/// key, so the key rows are drawn under faults too.
#[test]
fn pottery_is_caught_under_pause_and_its_own_key_is_observed() {
    let root = root();
    let dir = caught_under_pause_in(root.path(), "pottery", "redlock", &[]);
    assert!(!events(&dir, "key-set").is_empty(), "{}", dir.display());
    let svg = std::fs::read_to_string(dir.join("timeline.svg")).unwrap();
    assert!(svg.contains("key on n1"), "no key row in {}", dir.display());
}

#[test]
fn python_redis_lock_passes_client_test_and_is_valid_without_faults() {
    passes_client_test_and_is_valid_without_faults("python-redis-lock", "single");
}

#[test]
fn python_redis_lock_is_caught_under_pause() {
    caught_under_pause("python-redis-lock", "single");
}

#[test]
fn node_redlock_passes_client_test_and_is_valid_without_faults() {
    passes_client_test_and_is_valid_without_faults("node-redlock", "single");
}

#[test]
fn redis_semaphore_passes_client_test_and_is_valid_without_faults() {
    passes_client_test_and_is_valid_without_faults("redis-semaphore", "single");
}

#[test]
fn redis_semaphore_is_caught_under_pause() {
    caught_under_pause("redis-semaphore", "single");
}

#[test]
fn sesamecare_redlock_passes_client_test_and_is_caught_under_pause() {
    passes_client_test_and_is_caught_under_pause("sesamecare-redlock", "single", &[]);
}

#[test]
fn aioredlock_passes_client_test_and_is_caught_under_pause() {
    // Its watchdog extends the lease, but not while the process is frozen.
    passes_client_test_and_is_caught_under_pause("aioredlock", "redlock", &[]);
}

/// kazoo's recipe on lockstorm's own ZooKeeper ensemble: `client-test` on
/// the ensemble, and a holder frozen past its session's timeout overlaps
/// the next (its connection state still CONNECTED when it wakes). 12 s: the
/// faults wait for three JVMs and three interpreters to be ready, and 8 s
/// left a loaded machine no pause.
#[test]
fn kazoo_passes_client_test_on_an_ensemble_and_is_caught_under_pause() {
    passes_client_test_and_is_caught_under_pause("kazoo", "zookeeper", &["--time-limit", "12"]);
}

/// Curator's `InterProcessMutex` in Java, as kazoo's recipe: its check
/// follows Curator's documented rule (a SUSPENDED connection is a lost
/// lock), and a holder frozen past its session's timeout still wakes
/// CONNECTED, so it overlaps the next.
#[test]
fn curator_passes_client_test_on_an_ensemble_and_is_caught_under_pause() {
    passes_client_test_and_is_caught_under_pause("curator", "zookeeper", &["--time-limit", "12"]);
}

/// portalocker's lock is a subscription with no TTL: a contender whose probe
/// goes unanswered for 1 s kills the silent holder's connection, but only if
/// the channel's subscriber count held still meanwhile. With five workers,
/// waiters joining and leaving keep the probes inconclusive, so a frozen
/// holder goes unreaped and nobody gets the lock until it wakes (no overlap,
/// but no service); with two, the one waiter reaps it and the woken holder's
/// write lands under the new holder.
#[test]
fn portalocker_passes_client_test_and_is_caught_under_pause_with_two_workers() {
    passes_client_test_and_is_caught_under_pause("portalocker", "single", &["--workers", "2"]);
}

/// node-redlock frozen mid-acquisition is caught, and every strike says
/// which side of the library's decision it landed on (its reply begun or
/// not when the adapter froze), with the lock value that froze it, and the
/// stats count them so. Which side a strike lands on is a race with the
/// library's reply, so the test holds the record, not a count of either.
/// A strike before the decision may be refused by node-redlock's own
/// validity check, harmlessly: a run whose every strike was (seen once in
/// a 15 s run with two strikes) is valid, so up to three seeds, each with
/// a 1 s lease so that three or four strikes fit in 10 s.
#[test]
fn node_redlock_frozen_mid_acquisition_is_caught_and_each_strike_says_if_it_had_decided() {
    let root = root();
    for seed in ["1", "2", "3"] {
        let args = [
            "--config",
            "single",
            "--client",
            "node-redlock",
            "--nemesis",
            "pause",
            "--at",
            "acquiring",
            "--time-limit",
            "10",
            "--ttl-ms",
            "1000",
            "--nemesis-interval-ms",
            "2000",
            "--seed",
            seed,
        ];
        let (r, dir) = run_client(root.path(), &args);
        strikes_say_if_the_library_had_decided(&r, &dir);
        // A frozen holder that had its grant outlives its TTL: caught.
        if r.valid == Validity::False {
            assert!(count(&r, "lock-overlap") > 0, "{}", dir.display());
            return;
        }
        assert_eq!(r.valid, Validity::True, "{}", dir.display());
    }
    panic!("node-redlock frozen mid-acquisition was never caught in three seeds");
}

/// Every strike says which side of the library's decision it landed on,
/// with the lock value that froze it, and the stats count them so.
fn strikes_say_if_the_library_had_decided(r: &Results, dir: &Path) {
    let strikes = events(dir, "start-pause");
    assert!(!strikes.is_empty(), "no strike in {}", dir.display());
    let mut before = 0;
    for strike in &strikes {
        let value = &strike["value"];
        assert_eq!(value["at"], "acquiring", "{strike}");
        match value["decided"].as_bool() {
            Some(false) => {
                before += 1;
                assert!(value["seen"].is_string(), "{strike}");
            }
            Some(true) => {}
            None => panic!("a strike that does not say if the library had decided: {strike}"),
        }
    }
    let counted = &r.stats.acquiring_strikes;
    assert_eq!(
        (counted.before_decision, counted.after_decision),
        (before, strikes.len() as u64 - before),
        "{}",
        dir.display()
    );
    assert!(counted.granted() + counted.refused <= counted.before_decision);
}

/// The protocol page's complete example adapter, as a newcomer would copy it.
pub(crate) fn protocol_example(dir: &Path) -> PathBuf {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))
        .unwrap();
    let (_, after) = page
        .split_once("<!-- example-adapter -->\n```python\n")
        .expect("docs/protocol.md has the marked example adapter");
    let (code, _) = after.split_once("```").expect("the example block ends");
    let path = dir.join("example_adapter.py");
    std::fs::write(&path, code).unwrap();
    path
}

#[test]
fn the_protocol_example_adapter_passes_client_test_and_is_valid_without_faults() {
    let root = root();
    let example = protocol_example(root.path());
    let cmd = format!("python3 {}", example.display());
    let (code, report) = client_test(root.path(), &["--client-cmd", &cmd]);
    assert_eq!(code, 0, "{report}");
    let (r, dir) = run_client(
        root.path(),
        &["--client-cmd", &cmd, "--time-limit", "6", "--seed", "2"],
    );
    assert_valid(&r, &dir);
    assert!(r.stats.acquired >= 20, "{}", dir.display());
    // Named after the library the adapter named at init, not `custom`.
    let group = dir.parent().unwrap().file_name().unwrap();
    assert_eq!(group, "single.example-1.0-none", "{}", dir.display());
}

/// An adapter that takes 4 s to answer `init` (an interpreter importing its
/// library on a busy machine): the schedule's only pause, due within 2 s,
/// and the time limit wait for every worker, so the pause still finds a holder
/// and the run is caught, where a clock started with the workers found no
/// one to strike and tested nothing.
#[test]
fn an_adapter_slow_to_start_is_struck_once_every_worker_is_ready() {
    let root = root();
    let slow = root.path().join("slow_adapter.py");
    let example = std::fs::read_to_string(protocol_example(root.path())).unwrap();
    std::fs::write(&slow, format!("import time\ntime.sleep(4)\n{example}")).unwrap();
    let cmd = format!("python3 {}", slow.display());
    let args = ["--client-cmd", &cmd, "--nemesis", "pause", "--seed", "1"];
    let timing = ["--time-limit", "7", "--nemesis-interval-ms", "2000"];
    let (r, dir) = run_client(root.path(), &[&args[..], &timing].concat());
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let ready_ms = record["workers_ready_ms"]
        .as_u64()
        .expect("run.json has workers_ready_ms");
    assert!(
        ready_ms >= 4_000,
        "ready at {ready_ms} ms, before the adapters' 4 s: {}",
        dir.display()
    );
    let first_fault = r.stats.first_fault_time.expect("a fault started") / 1_000_000;
    assert!(
        first_fault >= ready_ms,
        "the first fault at {first_fault} ms came before the workers were ready at {ready_ms} ms: {}",
        dir.display()
    );
    assert_eq!(
        r.valid,
        Validity::False,
        "{:#?}\n{}",
        r.notes,
        dir.display()
    );
    assert!(count(&r, "lock-overlap") > 0, "{}", dir.display());
}

/// Written from the protocol page's table alone: SET NX PX, and a plain
/// `DEL` for release, which deletes whoever's key is there.
const PLAIN_DEL: &str = r#"
import json, socket, sys, time, uuid
def cmd(*a):
    s.sendall(("*%d\r\n" % len(a) + "".join("$%d\r\n%s\r\n" % (len(str(x)), x) for x in a)).encode())
    return r.readline().decode().strip()
held = False
for line in sys.stdin:
    q = json.loads(line)
    out = {"id": q["id"], "ok": True}
    if q["op"] == "init":
        h, p = q["nodes"][0].rsplit(":", 1)
        s = socket.create_connection((h, int(p))); r = s.makefile("rb")
        key, ttl = q["key"], q["ttl_ms"]
        out.update(client="plain-del 0", features=[])
    elif q["op"] == "acquire":
        end = time.time() + q["timeout_ms"] / 1000
        while not cmd("SET", key, uuid.uuid4().hex, "NX", "PX", ttl).startswith("+OK"):
            if time.time() > end:
                out = {"id": q["id"], "ok": False, "error": "lock-busy"}; break
            time.sleep(0.01)
        held = out["ok"]
    elif q["op"] == "release":
        cmd("DEL", key)
        out["ok"], held = held, False
        if not out["ok"]: out["error"] = "not-held"
    print(json.dumps(out), flush=True)
"#;

#[test]
fn a_plain_del_adapter_from_the_protocol_page_is_caught_as_foreign_release() {
    let root = root();
    let script = root.path().join("plain_del.py");
    std::fs::write(&script, PLAIN_DEL).unwrap();
    let cmd = format!("python3 {}", script.display());
    let args = [
        "--client-cmd",
        &cmd,
        "--nemesis",
        "pause",
        // The first pause, about 3 s in, releases the next holder's lock.
        "--time-limit",
        "11",
        "--nemesis-interval-ms",
        "2000",
        "--seed",
        "1",
    ];
    let (r, dir) = run_client(root.path(), &args);
    assert_eq!(r.valid, Validity::False, "{}", dir.display());
    assert!(
        count(&r, "foreign-release") > 0,
        "a plain DEL released another's lock unseen: {:?} ({})",
        r.anomalies,
        dir.display()
    );
}

/// A lock with no TTL (`SET NX`, no `PX`) that says so (`no-ttl`): a
/// crashed holder's key stays for good, and the run says the lock is stuck
/// after the acquire timeout and 1 s, with no TTL in the threshold.
#[test]
fn a_no_ttl_adapter_is_held_to_a_deadlock_threshold_without_a_ttl() {
    let root = root();
    let script = root.path().join("no_ttl.py");
    let no_ttl = PLAIN_DEL
        .replace(r#""NX", "PX", ttl)"#, r#""NX")"#)
        .replace(
            r#"client="plain-del 0", features=[]"#,
            r#"client="no-ttl 0", features=["no-ttl"]"#,
        );
    assert!(!no_ttl.contains("\"PX\"") && no_ttl.contains(r#"["no-ttl"]"#));
    std::fs::write(&script, no_ttl).unwrap();
    let cmd = format!("python3 {}", script.display());
    let args = [
        "--client-cmd",
        &cmd,
        "--nemesis",
        "crash",
        "--time-limit",
        "7",
        "--nemesis-interval-ms",
        "2000",
        "--acquire-timeout-ms",
        "1000",
        "--seed",
        "1",
    ];
    let (r, dir) = run_client(root.path(), &args);
    let threshold = &r.checkers["deadlock"].details["threshold_ms"];
    assert_eq!(
        threshold,
        2000,
        "1 s acquire timeout and 1 s: {}",
        dir.display()
    );
    assert!(
        r.notes.iter().any(|n| n.contains("no TTL")),
        "{:?}",
        r.notes
    );
    assert_eq!(r.valid, Validity::False, "{}", dir.display());
    assert!(
        count(&r, "deadlock") > 0,
        "{:?} ({})",
        r.anomalies,
        dir.display()
    );
}

/// An adapter that answers `init` and then breaks the protocol its own way.
fn breaking(root: &Path, name: &str, acquire_reply: &str) -> String {
    let script = format!(
        r#"
import json, sys
for line in sys.stdin:
    q = json.loads(line)
    if q["op"] == "init":
        print(json.dumps({{"id": q["id"], "ok": True, "client": "{name} 0", "features": []}}), flush=True)
    else:
        print({acquire_reply}, flush=True)
"#
    );
    let path = root.join(format!("{name}.py"));
    std::fs::write(&path, script).unwrap();
    format!("python3 {}", path.display())
}

#[test]
fn an_adapter_that_breaks_the_protocol_ends_the_run_unknown_naming_the_line() {
    let cases = [
        ("bad-json", r#""granted!""#, "not JSON", "\"granted!\""),
        (
            "wrong-id",
            r#"json.dumps({"id": q["id"] + 7, "ok": True})"#,
            "id 8, not 1",
            r#"\"id\": 8"#,
        ),
    ];
    for (name, reply, why, line) in cases {
        let root = root();
        let cmd = breaking(root.path(), name, reply);
        let (r, dir) = run_client(root.path(), &["--client-cmd", &cmd, "--time-limit", "10"]);
        assert_eq!(r.valid, Validity::Unknown, "{name}: {}", dir.display());
        let notes = r.notes.join("\n");
        assert!(notes.contains("broke the protocol"), "{name}: {notes}");
        assert!(notes.contains(why), "{name}: {notes}");
        assert!(notes.contains(line), "{name} names the line: {notes}");
    }
}

#[test]
fn an_adapter_that_exits_at_init_is_one_clear_line_and_exit_254() {
    let root = root();
    let path = root.path().join("dies.py");
    std::fs::write(
        &path,
        "import sys\nsys.stderr.write('cannot load the lock library\\n')\nsys.exit(3)\n",
    )
    .unwrap();
    let cmd = format!("python3 {}", path.display());
    let out = lockstorm_at(
        Some(root.path()),
        &[
            "run",
            "--results",
            "results",
            "--client-cmd",
            &cmd,
            "--time-limit",
            "5",
        ],
        &[],
    );
    let line = common::one_line_254(&out);
    assert!(line.contains("exited"), "{line}");
    assert!(
        line.contains("cannot load the lock library"),
        "quotes its stderr: {line}"
    );
    assert_no_process_left(root.path());
    // Nothing ran: no run folder is left half made.
    let runs = std::fs::read_dir(results(root.path())).map_or(0, |d| d.count());
    assert_eq!(runs, 0, "no run folder for a run that never started");
}

/// The protocol page's example, made to hang forever on its `hang_on`-th request:
/// the first adapter process of the run to get there, and no other.
fn hanging(root: &Path, hang_on: u32) -> String {
    let example = std::fs::read_to_string(protocol_example(root)).unwrap();
    let flag = root.join("hung-once");
    let hang = format!(
        "import itertools\n_n = itertools.count(1)\nfor line in sys.stdin:\n    if next(_n) == {hang_on} and not os.path.exists({flag:?}):\n        open({flag:?}, 'x'); time.sleep(10**6)\n"
    );
    // The loop's first line gains a hang on the chosen request.
    let patched = example.replacen("for line in sys.stdin:", &hang, 1);
    assert_ne!(patched, example, "the example has its request loop");
    let path = root.join("hangs.py");
    std::fs::write(&path, patched).unwrap();
    format!("python3 {}", path.display())
}

#[test]
fn a_hung_adapter_leaves_its_op_info_and_is_restarted_under_a_new_process() {
    let root = root();
    let cmd = hanging(root.path(), 4);
    let args = [
        "--client-cmd",
        &cmd,
        "--time-limit",
        "12",
        "--ttl-ms",
        "1000",
        "--workers",
        "2",
        "--seed",
        "3",
    ];
    let (r, dir) = run_client(root.path(), &args);
    assert_ne!(
        r.valid,
        Validity::False,
        "a hang is not a violation: {}",
        dir.display()
    );
    let acquires = events(&dir, "acquire");
    let hung: Vec<_> = acquires
        .iter()
        .filter(|e| {
            e["type"] == "info"
                && e["error"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("adapter:"))
        })
        .collect();
    assert!(
        !hung.is_empty(),
        "no acquire completed info for a hung adapter ({})",
        dir.display()
    );
    // The worker goes on as process first + 2 (two workers), or, if that
    // adapter's start also failed on a busy machine, as a later one of its
    // own; its new adapter answers. A grant is not asked for: the other
    // worker releases and takes the lock again within a millisecond, and on
    // a busy machine every try of the new one met it held (CI, once), which
    // is a definite `lock-busy`, an answer all the same.
    let first = hung[0]["process"].as_u64().unwrap();
    let later_answered = acquires.iter().any(|e| {
        (e["type"] == "ok" || e["type"] == "fail")
            && e["process"]
                .as_u64()
                .is_some_and(|p| p > first && (p - first) % 2 == 0)
    });
    assert!(
        later_answered,
        "the worker of process {first} had no acquire answered under a later process ({})",
        dir.display()
    );
    let stderr = std::fs::read_to_string(dir.join("clients/worker-0.stderr")).unwrap_or_default()
        + &std::fs::read_to_string(dir.join("clients/worker-1.stderr")).unwrap_or_default();
    assert!(
        stderr.matches("--- lockstorm: starting").count() >= 3,
        "a restart is logged in the adapter's stderr:\n{stderr}"
    );
}

#[test]
fn no_adapter_outlives_a_harness_killed_mid_run() {
    let root = root();
    let example = protocol_example(root.path());
    let cmd = format!("python3 {}", example.display());
    // Every worker's adapter is up, and a worker (with its adapter) is frozen.
    let adapters = || {
        common::leftover_processes(root.path())
            .into_iter()
            .filter(|p| p.contains("(python3"))
            .collect::<Vec<_>>()
    };
    kill_harness_once("five adapters and a frozen one", root.path(), &cmd, || {
        let a = adapters();
        let frozen = a.iter().filter(|p| p.contains(") T ")).count();
        (a.len() >= 5 && frozen > 0)
            .then_some(())
            .ok_or(format!("{} adapters, {frozen} frozen", a.len()))
    });
}

/// Starts a run of `cmd` from `root` that pauses a holder for 5 s about
/// every 6 s (one long pause could find no holder yet, with the adapters
/// still starting on a busy machine, and leave nothing to see), waits until
/// `ready` (for as long as the run would last; its error says what was seen
/// last, with the run's record so far),
/// SIGKILLs the harness, and waits until no process of the run is left.
fn kill_harness_once(
    what: &str,
    root: &Path,
    cmd: &str,
    mut ready: impl FnMut() -> Result<(), String>,
) {
    let _slot = common::e2e_slot();
    let mut harness = std::process::Command::new(env!("CARGO_BIN_EXE_lockstorm"))
        .current_dir(root)
        .args(["run", "--results", "results", "--time-limit", "60"])
        .args(["--client-cmd", cmd, "--nemesis", "pause"])
        .args(["--nemesis-interval-ms", "1000", "--pause-ms", "5000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(seen) = ready() {
        if Instant::now() > deadline {
            let _ = harness.kill();
            let _ = harness.wait();
            panic!(
                "timed out after 60 s waiting for {what}; last seen: {seen}\n{}",
                run_so_far(&root.join("results"))
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(harness.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    harness.wait().unwrap();
    wait_for("every process of the run to go", || {
        common::leftover_processes(root).is_empty().then_some(())
    });
}

/// What a run under `results` recorded so far, for a test that gave up on
/// it: how many ops its history has, its nemesis's and harness's lines, and
/// the end of its harness.log.
fn run_so_far(results: &Path) -> String {
    let mut said = Vec::new();
    let mut dirs = vec![results.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            match path.file_name().and_then(|n| n.to_str()) {
                _ if path.is_dir() && !path.is_symlink() => dirs.push(path),
                Some("history.jsonl") => {
                    let history = std::fs::read_to_string(&path).unwrap_or_default();
                    let (theirs, ops): (Vec<&str>, Vec<&str>) =
                        history.lines().partition(|l| l.contains(r#""process":""#));
                    said.push(format!("{}: {} ops; the rest:", path.display(), ops.len()));
                    said.extend(theirs.iter().map(|l| l.to_string()));
                }
                Some("harness.log") => {
                    let log = std::fs::read_to_string(&path).unwrap_or_default();
                    let lines: Vec<&str> = log.lines().collect();
                    said.extend(
                        lines[lines.len().saturating_sub(20)..]
                            .iter()
                            .map(|l| l.to_string()),
                    );
                }
                _ => {}
            }
        }
    }
    said.join("\n")
}

/// client-test gives each reply what its request asks for: the expiry
/// step's acquire waits out a frozen holder's 21 s lease, longer than the
/// 20 s every reply used to get.
#[test]
fn a_correct_adapter_passes_client_test_with_a_lease_longer_than_20_s() {
    // Its checks wait out a 21 s lease: started late, it ended the suite alone.
    common::long_test();
    let root = root();
    let cmd = format!("python3 {}", protocol_example(root.path()).display());
    let (code, report) = client_test(root.path(), &["--client-cmd", &cmd, "--ttl-ms", "21000"]);
    assert_eq!(code, 0, "{report}");
    assert!(report.contains(" 0 failed"), "{report}");
}

/// An adapter whose client closes its connection for good on its first
/// timeout (as node-redis does with a one-second socket timeout and no
/// reconnect strategy) answers every op after the expiry step's freeze with
/// an error: client-test fails it, as the run would fail every op. It takes
/// a gap of more than 0.9 s between ops for the freeze (which lasts a 1 s
/// TTL), but not before its first op: that gap holds the second instance's
/// start, which a loaded machine can stretch past a second.
#[test]
fn an_adapter_that_cannot_reach_redis_after_a_freeze_fails_client_test() {
    let root = root();
    let example = std::fs::read_to_string(protocol_example(root.path())).unwrap();
    let head = "for line in sys.stdin:  # one request per line; when stdin closes, the loop ends\n    req = json.loads(line)\n";
    let gone = [
        "last, gone, started = time.monotonic(), False, False",
        head.trim_end(),
        "    gone = gone or (started and time.monotonic() - last > 0.9)  # frozen (past the 1 s TTL): closed for good",
        "    started = started or req[\"op\"] != \"init\"",
        "    last = time.monotonic()",
        "    if gone:",
        "        print(json.dumps({\"id\": req[\"id\"], \"ok\": None, \"error\": \"connection: closed\"}), flush=True)",
        "        continue",
        "",
    ]
    .join("\n");
    let closing = example.replacen(head, &gone, 1);
    assert!(closing.contains("closed for good"), "{closing}");
    let path = root.path().join("closing_adapter.py");
    std::fs::write(&path, closing).unwrap();
    let cmd = format!("python3 {}", path.display());
    let (code, report) = client_test(root.path(), &["--client-cmd", &cmd]);
    assert_eq!(code, 1, "{report}");
    assert!(
        report.contains("FAIL  the frozen holder, resumed, acquires again"),
        "{report}"
    );
    // Every step before the freeze passed: only the comeback fails.
    assert!(report.contains(" 1 failed"), "{report}");
}

/// `--client-cmd` runs without a shell: a variable is set with `env`, as
/// the protocol page says; written shell-style it is taken for the program.
#[test]
fn a_client_cmd_sets_its_variables_with_env_not_as_a_shell_would() {
    let root = root();
    let example = protocol_example(root.path());
    // The adapter reads the variable: it refuses to start without it.
    let guarded = root.path().join("guarded_adapter.py");
    let code = std::fs::read_to_string(&example).unwrap();
    let guard = "import os, sys\nif os.environ.get('ADAPTER_MODE') != 'test':\n    sys.exit('ADAPTER_MODE is not set')\n";
    std::fs::write(&guarded, format!("{guard}{code}")).unwrap();
    let with_env = format!("env ADAPTER_MODE=test python3 {}", guarded.display());
    let (code, report) = client_test(root.path(), &["--client-cmd", &with_env]);
    assert_eq!(code, 0, "{report}");
    let shell_style = format!("ADAPTER_MODE=test python3 {}", guarded.display());
    let (code, report) = client_test(root.path(), &["--client-cmd", &shell_style]);
    assert_eq!(code, 254, "{report}");
    assert!(
        report.contains("ADAPTER_MODE=test"),
        "names the program it tried: {report}"
    );
}

/// An adapter whose library declares `fence` gets the storage that checks
/// fences, as the `fenced` config does, in Redis or in PostgreSQL. This one counts its fences per
/// process, so the workers' tokens go backwards against each other: the
/// storage must refuse the stale ones (`stale-fence`), not take them and
/// leave the run `stale-fence-accepted`.
#[test]
fn an_adapter_that_declares_fence_gets_storage_that_refuses_stale_ones() {
    // Runs one after another: started early, it does not end the suite.
    common::long_test();
    let root = root();
    let example = std::fs::read_to_string(protocol_example(root.path())).unwrap();
    let fenced = example
        .replacen("token = None\n", "token, fences = None, 0\n", 1)
        .replace("features=[\"token\"]", "features=[\"token\", \"fence\"]")
        .replace(
            "            reply[\"token\"] = token\n",
            "            reply[\"token\"] = token\n            fences += 1\n            reply[\"fence\"] = fences\n",
        );
    assert!(
        fenced.contains("\"fence\"]") && fenced.contains("fences += 1"),
        "{fenced}"
    );
    let path = root.path().join("per_process_fences.py");
    std::fs::write(&path, fenced).unwrap();
    let cmd = format!("python3 {}", path.display());
    // The same whether the counter is a Redis key or a PostgreSQL row.
    for storage in ["redis", "postgres"] {
        let (r, dir) = run_client(
            root.path(),
            &[
                "--client-cmd",
                &cmd,
                "--time-limit",
                "5",
                "--seed",
                "2",
                "--storage",
                storage,
            ],
        );
        let accepted = r.anomalies["stale-fence-accepted"].count;
        assert_eq!(
            accepted,
            0,
            "{storage}: stale fences were taken: {}",
            dir.display()
        );
        let refused = r.stats.errors.get("stale-fence").copied().unwrap_or(0);
        assert!(
            refused > 0,
            "{storage}: no stale fence was refused: {:?} in {}",
            r.stats.errors,
            dir.display()
        );
    }
}

/// A team gates its CI on its own adapter: `matrix --client-cmd` with
/// `--expect`. Expecting the example's valid run to be invalid fails the
/// matrix, as a negative control that stopped being caught would.
#[test]
fn a_matrix_runs_your_own_adapter_and_holds_it_to_the_expectations() {
    let root = root();
    let cmd = format!("python3 {}", protocol_example(root.path()).display());
    let expect = root.path().join("expect.toml");
    std::fs::write(&expect, "[\"single.custom\"]\nnone = \"invalid\"\n").unwrap();
    let args = [
        "matrix",
        "--client-cmd",
        &cmd,
        "--configs",
        "single",
        "--nemeses",
        "none",
        "--time-limit",
        "8",
        "--results",
        "m",
        "--expect",
        expect.to_str().unwrap(),
    ];
    let out = lockstorm_at(Some(root.path()), &args, &[]);
    assert_no_process_left(root.path());
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let summary = common::matrix_summary(&root.path().join("m"));
    let row = &summary["rows"][0];
    assert_eq!(
        (
            row["config"].as_str(),
            row["valid"].as_u64(),
            row["matches"].as_bool()
        ),
        (Some("single.custom"), Some(1), Some(false)),
        "{summary}"
    );
}

/// A script with no `#!` line would be run by the shell, which would then
/// complain about Python syntax: lockstorm says what happened instead.
#[test]
fn a_script_without_a_shebang_is_refused_in_one_line_saying_to_add_one() {
    use std::os::unix::fs::PermissionsExt;
    let root = root();
    let example = protocol_example(root.path());
    let code = std::fs::read_to_string(&example).unwrap();
    let bare = root.path().join("bare_adapter.py");
    // The example as written, less its #! line if it has one.
    let body = match code.strip_prefix("#!") {
        Some(rest) => rest.split_once('\n').map_or("", |(_, body)| body),
        None => &code,
    };
    std::fs::write(&bare, body).unwrap();
    std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, report) = client_test(root.path(), &["--client-cmd", bare.to_str().unwrap()]);
    assert_eq!(code, 254, "{report}");
    assert!(
        report.contains("no #! line, so it would run as a shell script")
            && report.contains("#!/usr/bin/env python3"),
        "{report}"
    );
    assert_eq!(report.trim().lines().count(), 1, "{report}");
}

#[test]
fn client_test_of_a_missing_adapter_program_is_one_clear_line_and_exit_254() {
    let root = root();
    let args = ["client-test", "--results", "client-tests", "--client-cmd"];
    let out = lockstorm_at(
        Some(root.path()),
        &[&args[..], &["./no-such-adapter"]].concat(),
        &[],
    );
    let line = common::one_line_254(&out);
    assert!(
        line.contains("cannot start the adapter `./no-such-adapter`"),
        "{line}"
    );
    assert!(
        line.contains("check the program and its path"),
        "the fix: {line}"
    );
    assert_no_process_left(root.path());
}

/// The protocol page's example behind a wrapper that first forks a child which
/// ignores SIGTERM, SIGINT and SIGHUP (as a library's helper process might),
/// keeps the adapter's stdin, stdout and stderr, and appends its pid to
/// `children.pids` in `root` before the adapter starts. With `leave`, the
/// child first leaves the adapter's process group (`setsid`).
fn forking(root: &Path, leave: bool) -> (String, PathBuf) {
    let example = protocol_example(root);
    let pids = root.join("children.pids");
    let wrapper = root.join("forking.py");
    std::fs::write(
        &wrapper,
        r#"import os, signal, sys, time
ready_r, ready_w = os.pipe()
if os.fork() == 0:
    os.close(ready_r)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    if sys.argv[3] == "leave":
        os.setsid()
    with open(sys.argv[1], "a") as f:
        f.write("%d\n" % os.getpid())
    os.close(ready_w)
    while True:
        time.sleep(3600)
os.close(ready_w)
os.read(ready_r, 1)  # the child has written its pid
os.execvp(sys.executable, [sys.executable, sys.argv[2]])
"#,
    )
    .unwrap();
    let cmd = format!(
        "python3 {} {} {} {}",
        wrapper.display(),
        pids.display(),
        example.display(),
        if leave { "leave" } else { "stay" }
    );
    (cmd, pids)
}

fn child_pids(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// Gone: no such process, or a zombie (init reaps it).
fn gone(pid: u32) -> bool {
    nemesis::process::state(pid).is_none_or(|s| s == 'Z')
}

/// Every adapter's child is gone within 10 s.
fn assert_children_gone(pids: &Path, expected: usize) {
    let children = child_pids(pids);
    assert!(
        children.len() >= expected,
        "{} adapters forked, expected {expected} or more",
        children.len()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive: Vec<u32> = children.iter().copied().filter(|&p| !gone(p)).collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "adapter children outlived lockstorm: {alive:?} of {children:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_adapters_child_is_gone_after_a_valid_run() {
    let root = root();
    let (cmd, pids) = forking(root.path(), false);
    let results = results(root.path());
    // The time limit starts once every worker's adapter is ready, so six
    // interpreters slow to start on a busy machine do not shorten the
    // locking (a run that took no lock is unknown).
    let args = ["--client-cmd", &cmd, "--time-limit", "8", "--seed", "4"];
    let (_, r, dir) = run_at(Some(root.path()), &results, &args);
    assert_valid(&r, &dir);
    // The preflight's adapter and one for each of the five workers.
    assert_children_gone(&pids, 6);
    assert_no_process_left(root.path());
}

#[test]
fn an_adapters_child_is_gone_after_client_test() {
    let root = root();
    let (cmd, pids) = forking(root.path(), false);
    let args = [
        "client-test",
        "--results",
        "client-tests",
        "--client-cmd",
        &cmd,
    ];
    let out = lockstorm_at(Some(root.path()), &args, &[]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_children_gone(&pids, 2);
    assert_no_process_left(root.path());
}

/// A child that leaves the adapter's group is out of reach: each run and
/// client-test names it (every worker's, and the check's before the run).
#[test]
fn an_adapters_child_that_left_its_group_is_named_in_harness_log_and_client_test() {
    let root = root();
    let (cmd, pids) = forking(root.path(), true);
    let results = results(root.path());
    let args = ["--client-cmd", &cmd, "--time-limit", "3", "--seed", "5"];
    let (_, _, dir) = run_at(Some(root.path()), &results, &args);
    let log = std::fs::read_to_string(dir.join("harness.log")).unwrap();
    let args = [
        "client-test",
        "--results",
        "client-tests",
        "--client-cmd",
        &cmd,
    ];
    let out = lockstorm_at(Some(root.path()), &args, &[]);
    let children = child_pids(&pids);
    // Started by this test's adapters, and beyond lockstorm's reach.
    for &pid in &children {
        let _ = nemesis::process::kill_now(pid);
    }
    assert_eq!(
        children.len(),
        8,
        "the check, five workers, two in client-test"
    );
    // `the adapter left 17 (python3), 18 (python3) running outside …`
    let named = |text: &str, pid: u32| {
        text.lines()
            .any(|l| l.contains("the adapter left") && l.contains(&format!(" {pid} (")))
    };
    for &pid in &children[..6] {
        assert!(named(&log, pid), "{pid} not named in harness.log:\n{log}");
    }
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    for &pid in &children[6..] {
        assert!(named(&out.stdout, pid), "{pid}: {}", out.stdout);
    }
    assert!(
        out.stdout.contains("note  processes left behind"),
        "{}",
        out.stdout
    );
    assert_children_gone(&pids, 8);
}

/// The harness is killed while a worker and its adapter (and the adapter's
/// child) are frozen by a pause: the workers still take their whole
/// process groups with them.
#[test]
fn an_adapters_child_is_gone_after_the_harness_is_killed_with_a_worker_frozen() {
    let root = root();
    let (cmd, pids) = forking(root.path(), false);
    let what = "every worker's adapter to fork, and a frozen child";
    kill_harness_once(what, root.path(), &cmd, || {
        let children = child_pids(&pids);
        let frozen = children
            .iter()
            .filter(|&&p| nemesis::process::state(p) == Some('T'))
            .count();
        (children.len() >= 6 && frozen > 0)
            .then_some(())
            .ok_or(format!("{} children, {frozen} frozen", children.len()))
    });
    assert_children_gone(&pids, 6);
}

/// An adapter whose acquire reply is one 2 MiB line: a protocol break,
/// named by its first bytes, read no further than the cap.
#[test]
fn an_adapter_reply_longer_than_1_mib_ends_the_run_unknown_naming_its_start() {
    let root = root();
    let reply = r#"'{"id": %d, "ok": true, "token": "' % q["id"] + "x" * (2 << 20) + '"}'"#;
    let cmd = breaking(root.path(), "long-line", reply);
    let (r, dir) = run_client(root.path(), &["--client-cmd", &cmd, "--time-limit", "10"]);
    assert_eq!(r.valid, Validity::Unknown, "{}", dir.display());
    let notes = r.notes.join("\n");
    assert!(notes.contains("broke the protocol"), "{notes}");
    assert!(notes.contains("longer than 1 MiB"), "{notes}");
    assert!(
        notes.contains(r#"{\"id\": 1, \"ok\": true, \"token\": \"xxxx"#),
        "names the reply's start: {notes}"
    );
    assert!(
        notes.len() < 4096,
        "quotes only the start: {} bytes",
        notes.len()
    );
}
