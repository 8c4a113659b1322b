//! `--storage-cmd`: the counter kept by the user's own storage adapter. The
//! protocol page's storage examples are what the harness writes and accepts;
//! the page's example adapter (docs/examples/storage_postgres.py, PostgreSQL
//! through `psql`) keeps a fenced run valid by refusing stale fences, and the
//! same adapter without its write's fence check is caught. Each run starts
//! lockstorm in its test's folder, so the adapters (and their `psql`s) run
//! there, where the leftover check looks.

use crate::common;

use checker::{Results, Validity};
use serde_json::Value;
use std::path::{Path, PathBuf};
use workloads::adapter::protocol::{parse_reply, Fence, Op, Request, StorageInit};

const MARK: &str = "<!-- storage-example";
const ADAPTER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../docs/examples/storage_postgres.py"
);

/// The page's storage examples: whether each breaks the protocol, and its
/// request and reply lines.
fn examples() -> Vec<(bool, Vec<(String, String)>)> {
    common::page_examples(MARK)
        .into_iter()
        .map(|(tags, pairs)| (tags.contains("broken"), pairs))
        .collect()
}

/// The request a line of the page stands for, built as the harness builds it.
fn request(line: &str) -> Request {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    let fence = v.get("fence").map(|f| match f {
        Value::String(s) => Fence(s.parse().unwrap()),
        f => Fence(f.as_u64().unwrap()),
    });
    let op = match v["op"].as_str() {
        Some("init") => Op::StorageInit(StorageInit {
            worker: v["worker"].as_u64(),
            key: v["key"].as_str().unwrap().into(),
            node: v["node"].as_str().unwrap().into(),
            fenced: v["fenced"].as_bool().unwrap(),
        }),
        Some("reset") => Op::Reset,
        Some("read") => Op::Read { fence },
        Some("write") => Op::Write {
            value: v["value"].as_i64().unwrap(),
            fence,
        },
        other => panic!("not a storage op {other:?}: {line}"),
    };
    Request {
        id: v["id"].as_u64().unwrap(),
        op,
    }
}

#[test]
fn the_protocol_page_storage_examples_are_what_the_harness_writes_and_accepts() {
    let examples = examples();
    let (broken, good): (Vec<_>, Vec<_>) = examples.iter().partition(|(broken, _)| *broken);
    assert!(
        good.len() >= 2 && !broken.is_empty(),
        "the page lost its examples"
    );
    let mut ops = std::collections::BTreeSet::new();
    let mut answers = std::collections::BTreeSet::new();
    for (q, a) in good.iter().flat_map(|(_, pairs)| pairs) {
        let request = request(q);
        assert_eq!(request.line(), format!("{q}\n"), "the harness writes it so");
        let reply = parse_reply(a, &request).unwrap_or_else(|e| panic!("{a}: {e}"));
        let v: Value = serde_json::from_str(a).unwrap();
        let answer = common::answer_of(&v);
        assert_eq!(reply.answer, Some(answer), "{a}");
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        assert_eq!(reply.storage, text("storage"), "{a}");
        assert_eq!(reply.error, text("error"), "{a}");
        assert_eq!(reply.value, v.get("value").and_then(Value::as_i64), "{a}");
        ops.insert(request.op.name());
        answers.insert(format!("{answer:?}"));
    }
    assert_eq!(ops.len(), 4, "every op has an example: {ops:?}");
    assert_eq!(answers.len(), 3, "ok true, false and null: {answers:?}");
    for (q, a) in broken.iter().flat_map(|(_, pairs)| pairs) {
        let err = parse_reply(a, &request(q)).expect_err(a);
        assert!(err.contains(&format!("{a:?}")), "names the line: {err}");
    }
}

/// `lockstorm run --config fenced --storage postgres --nemesis pause` for
/// 8 s, seeded, its counter kept by `adapter`; started in the test's folder.
/// The holder is paused after its check, so its write comes after the next
/// holder's, with an older fence.
fn fenced_run(tmp: &Path, adapter: &Path) -> (Results, PathBuf, Value) {
    let cmd = format!("python3 {}", adapter.display());
    let results = tmp.join("results");
    std::fs::create_dir(&results).unwrap();
    let args = [
        "--config",
        "fenced",
        "--nemesis",
        "pause",
        "--at",
        "checked",
        "--time-limit",
        "8",
        "--nemesis-interval-ms",
        "2000",
        "--seed",
        "29",
        "--storage",
        "postgres",
        "--storage-cmd",
        &cmd,
    ];
    let (_, results, dir) = common::run_at(Some(tmp), &results, &args);
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    (results, dir, serde_json::from_str(&text).unwrap())
}

fn example_adapter() -> PathBuf {
    Path::new(ADAPTER).canonicalize().unwrap()
}

#[test]
fn a_storage_adapter_over_postgres_refuses_the_stale_holder_and_the_run_is_valid() {
    let tmp = common::open_tmp();
    let (results, dir, json) = fenced_run(tmp.path(), &example_adapter());
    common::assert_valid(&results, &dir);
    common::assert_verified(&dir, "start-pause");
    let counter = &json["checkers"]["counter"];
    assert!(
        counter["stale_fence_rejected"]["writes"].as_u64() >= Some(1),
        "the adapter refused no stale write: {json}"
    );
    assert!(counter["acknowledged"].as_u64() > Some(0), "{json}");
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let recorded = &record["storage_adapter"];
    assert!(
        recorded["storage"]
            .as_str()
            .is_some_and(|s| s.starts_with("storage_postgres.py 1.0")),
        "{recorded}"
    );
    assert!(
        recorded["command"]
            .as_str()
            .is_some_and(|c| c.ends_with("storage_postgres.py")),
        "{recorded}"
    );
    for stderr in ["harness", "worker-0"] {
        let path = dir.join("storage").join(format!("{stderr}.stderr"));
        assert!(path.exists(), "no {}", path.display());
    }
    // The harness's: one for the reset, a fresh one for the final read.
    let harness = std::fs::read_to_string(dir.join("storage/harness.stderr")).unwrap();
    assert_eq!(
        harness.matches("--- lockstorm: starting").count(),
        2,
        "{harness}"
    );
}

#[test]
fn a_storage_that_takes_stale_writes_is_caught() {
    let tmp = common::open_tmp();
    let text = std::fs::read_to_string(example_adapter()).unwrap();
    // The write's fence check, and only it: the read keeps its own.
    let check = "WHERE id = 1 AND fence <= {fence}\"\n";
    assert_eq!(text.matches(check).count(), 1, "the fenced write changed");
    let careless = tmp.path().join("careless_storage.py");
    std::fs::write(&careless, text.replace(check, "WHERE id = 1\"\n")).unwrap();
    let (results, dir, _) = fenced_run(tmp.path(), &careless);
    assert_eq!(results.valid, Validity::False, "{}", dir.display());
    let caught =
        common::count(&results, "stale-fence-accepted") + common::count(&results, "lost-update");
    assert!(caught >= 1, "{:?}", results.anomalies);
}

#[test]
fn a_storage_adapter_that_breaks_the_protocol_ends_the_run_unknown() {
    let tmp = common::open_tmp();
    // Answers init and reset, then a read without its value.
    let broken = tmp.path().join("broken_storage.py");
    std::fs::write(
        &broken,
        "import json, sys\n\
         for line in sys.stdin:\n\
         \x20   req = json.loads(line)\n\
         \x20   reply = {'id': req['id'], 'ok': True}\n\
         \x20   if req['op'] == 'init':\n\
         \x20       reply['storage'] = 'broken 0.1'\n\
         \x20   print(json.dumps(reply), flush=True)\n",
    )
    .unwrap();
    let cmd = format!("python3 {}", broken.display());
    let results = tmp.path().join("results");
    std::fs::create_dir(&results).unwrap();
    let args = ["--config", "fenced", "--time-limit", "8", "--seed", "29"];
    let mut all = args.to_vec();
    all.extend(["--storage-cmd", &cmd]);
    let (_, results, dir) = common::run_at(Some(tmp.path()), &results, &all);
    assert_eq!(results.valid, Validity::Unknown, "{}", dir.display());
    assert!(
        results
            .notes
            .iter()
            .any(|n| n.contains("broke the protocol") && n.contains("without an integer \"value\"")),
        "{:?}",
        results.notes
    );
}

#[test]
fn a_storage_cmd_that_cannot_be_is_one_line_and_254() {
    let empty = common::lockstorm(&["run", "--storage-cmd", ""]);
    let line = common::one_line_254(&empty);
    assert!(line.contains("--storage-cmd is empty"), "{line}");
    let both = common::lockstorm(&[
        "run",
        "--storage-cmd",
        "python3 storage.py",
        "--target",
        "redis://127.0.0.1:1",
        "--storage-target",
        "redis://127.0.0.1:2",
    ]);
    let line = common::one_line_254(&both);
    assert!(
        line.contains("--storage-cmd") && line.contains("--storage-target"),
        "{line}"
    );
    let inside = common::lockstorm(&[
        "run",
        "--config",
        "pg-row-lock",
        "--storage-cmd",
        "python3 storage.py",
    ]);
    let line = common::one_line_254(&inside);
    assert!(line.contains("transaction"), "{line}");
}
