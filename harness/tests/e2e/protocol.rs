//! The adapter protocol's one home is docs/protocol.md: its examples are
//! what the worker writes and accepts (`Request::line`, `parse_reply`), and
//! what the shipped Python and Node helpers answer.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use workloads::adapter::protocol::{parse_reply, Init, Op, Request};

const MARK: &str = "<!-- protocol-example:";

/// One example block: who is held to it (`python`, `node`, or `broken`: every
/// reply breaks the protocol), and its request and reply lines.
struct Example {
    tags: Vec<String>,
    pairs: Vec<(String, String)>,
}

fn examples() -> Vec<Example> {
    crate::common::page_examples(MARK)
        .into_iter()
        .map(|(tags, pairs)| Example {
            tags: tags.split_whitespace().map(String::from).collect(),
            pairs,
        })
        .collect()
}

fn held_to(tag: &str) -> Vec<Example> {
    examples()
        .into_iter()
        .filter(|e| e.tags.iter().any(|t| t == tag))
        .collect()
}

/// The request a line of the page stands for, built as the worker builds it.
fn request(line: &str) -> Request {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    let text = |k: &str| {
        v[k].as_str()
            .unwrap_or_else(|| panic!("{k}: {line}"))
            .to_string()
    };
    let number = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {line}"));
    let texts = |k: &str| {
        v.get(k).map(|list| {
            let list = list.as_array().unwrap_or_else(|| panic!("{k}: {line}"));
            list.iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        })
    };
    let op = match v["op"].as_str() {
        Some("init") => Op::Init(Init {
            topology: text("topology"),
            nodes: texts("nodes").expect("nodes"),
            sentinels: texts("sentinels"),
            master: v.get("master").map(|_| text("master")),
            db: v.get("db").map(|_| number("db") as u32),
            key: text("key"),
            ttl_ms: number("ttl_ms"),
            acquire_timeout_ms: number("acquire_timeout_ms"),
            worker: number("worker"),
        }),
        Some("acquire") => Op::Acquire {
            timeout_ms: number("timeout_ms"),
        },
        Some("check") => Op::Check,
        Some("release") => Op::Release,
        other => panic!("unknown op {other:?}: {line}"),
    };
    Request {
        id: number("id"),
        op,
    }
}

fn fence(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

#[test]
fn the_protocol_page_examples_are_what_the_worker_writes_and_accepts() {
    let examples = examples();
    let (broken, good): (Vec<&Example>, Vec<&Example>) = examples
        .iter()
        .partition(|e| e.tags.iter().any(|t| t == "broken"));
    assert!(
        good.len() >= 3 && !broken.is_empty(),
        "the page lost its examples"
    );
    let mut ops = std::collections::BTreeSet::new();
    let mut answers = std::collections::BTreeSet::new();
    for (q, a) in good.iter().flat_map(|e| &e.pairs) {
        let request = request(q);
        assert_eq!(request.line(), format!("{q}\n"), "the worker writes it so");
        let reply = parse_reply(a, &request).unwrap_or_else(|e| panic!("{a}: {e}"));
        let v: Value = serde_json::from_str(a).unwrap();
        let answer = crate::common::answer_of(&v);
        assert_eq!(reply.answer, Some(answer), "{a}");
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        assert_eq!(reply.token, text("token"), "{a}");
        assert_eq!(reply.error, text("error"), "{a}");
        assert_eq!(reply.client, text("client"), "{a}");
        assert_eq!(reply.valid, v.get("valid").and_then(Value::as_bool), "{a}");
        assert_eq!(reply.fence, v.get("fence").and_then(fence), "{a}");
        let features: Vec<String> = v
            .get("features")
            .map(|f| serde_json::from_value(f.clone()).unwrap())
            .unwrap_or_default();
        assert_eq!(reply.features, features, "{a}");
        ops.insert(request.op.name());
        answers.insert(format!("{answer:?}"));
    }
    assert_eq!(ops.len(), 4, "every op has an example: {ops:?}");
    assert_eq!(answers.len(), 3, "ok true, false and null: {answers:?}");
    for (q, a) in broken.iter().flat_map(|e| &e.pairs) {
        let err = parse_reply(a, &request(q)).expect_err(a);
        assert!(err.contains(&format!("{a:?}")), "names the line: {err}");
    }
}

/// A reply as the page has it: `id` and every field equal, except that an
/// `ok:null`'s error is compared by its kind (the detail is the library's).
fn same_reply(got: &str, want: &str) -> bool {
    let parse = |line: &str| -> Option<Value> {
        let mut v: Value = serde_json::from_str(line).ok()?;
        // An init reply's settings are each helper's own: the page's
        // examples show the fields every adapter gives.
        if let Some(o) = v.as_object_mut() {
            o.remove("options");
        }
        if v["ok"].is_null() {
            if let Some(Value::String(e)) = v.get_mut("error") {
                *e = e.split(':').next().unwrap().to_string();
            }
        }
        Some(v)
    };
    parse(got).is_some() && parse(got) == parse(want)
}

/// Runs a helper's driver on each example held to `tag`: the requests on its
/// stdin, a library that does what the example's replies say, and its
/// replies compared with the page's (and accepted by the worker).
fn answers_the_examples(tag: &str, start: impl Fn(&Path, &Path) -> Command) {
    let examples = held_to(tag);
    assert!(
        !examples.is_empty(),
        "no example on the page is held to {tag}"
    );
    let tmp = crate::common::tmp();
    for (n, example) in examples.iter().enumerate() {
        let pairs = tmp.path().join(format!("example-{n}.json"));
        std::fs::write(&pairs, serde_json::to_string(&example.pairs).unwrap()).unwrap();
        let mut child = start(tmp.path(), &pairs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {tag} helper's driver: {e}"));
        let mut stdin = child.stdin.take().unwrap();
        for (q, _) in &example.pairs {
            writeln!(stdin, "{q}").unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{tag}: {}\n{stderr}", out.status);
        let replies: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            replies.len(),
            example.pairs.len(),
            "{tag}:\n{stdout}\n{stderr}"
        );
        for ((q, want), got) in example.pairs.iter().zip(replies) {
            assert!(
                same_reply(got, want),
                "the {tag} helper answers {q}\nwith {got}\nnot  {want}\n{stderr}"
            );
            parse_reply(got, &request(q)).unwrap_or_else(|e| panic!("{tag}: {e}"));
        }
    }
}

fn clients_dir(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../workloads/clients")
        .join(family)
}

/// A library that does what the example's replies say, behind the Python
/// helper's `Adapter`: what the helper makes of each is under test.
const PYTHON_DRIVER: &str = r#"
import json, sys
pairs = json.load(open(sys.argv[1]))
expected = {json.loads(q)["id"]: json.loads(a) for q, a in pairs}
import protocol

class Reading:  # remembers the request being answered
    def __init__(self, stream):
        self.stream, self.current = stream, None
    def readline(self):
        line = self.stream.readline()
        if line.strip():
            self.current = json.loads(line)
        return line

reading = Reading(sys.stdin)
sys.stdin = reading

def outcome():
    return expected[reading.current["id"]]

def fail(reply):
    kind, _, detail = reply["error"].partition(": ")
    raise {"timeout": TimeoutError, "connection": ConnectionError}.get(kind, RuntimeError)(detail)

class NotHeld(Exception):
    pass

class Lock:
    def __init__(self, token):
        self.token = token

class Library(protocol.Adapter):
    NOT_HELD = (NotHeld,)
    def init(self, req):
        return outcome()["client"], outcome()["features"]
    def acquire(self, timeout_s):
        if timeout_s != reading.current["timeout_ms"] / 1000:
            raise ValueError(f"asked to wait {timeout_s} s")
        r = outcome()
        if r["ok"] is None:
            fail(r)
        return Lock(r.get("token")) if r["ok"] else None
    def token(self, lock):
        return lock.token
    def check(self, lock):
        return outcome()["valid"]
    def release(self, lock):
        r = outcome()
        if r["ok"] is None:
            fail(r)
        if r["ok"] is False:
            raise NotHeld()

protocol.serve(Library())
"#;

/// The same behind the Node helper's `serve`: a fence past 2^53 is a BigInt,
/// as a JavaScript library returns it.
const NODE_DRIVER: &str = r#"
const fs = require('fs');
const proto = require(process.argv[2]);
const pairs = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const expected = new Map(pairs.map(([q, a]) => [JSON.parse(q).id, JSON.parse(a)]));
function outcome(req) {
  const r = { ...expected.get(req.id) };
  delete r.id;
  if (typeof r.fence === 'string') r.fence = BigInt(r.fence);
  if (r.ok === null && r.error !== undefined) throw new Error(r.error.slice(r.error.indexOf(': ') + 2));
  return r;
}
const [init, hello] = pairs[0].map((line) => JSON.parse(line));
proto.serve({
  library: 'the example library',
  topologies: [init.topology],
  features: hello.features,
  async init(req) { return outcome(req); },
  async acquire(req) { return outcome(req); },
  async check(req) { return outcome(req); },
  async release(req) { return outcome(req); },
});
"#;

#[test]
fn the_python_helper_answers_the_protocol_page_examples() {
    // The helper imports redis-py: the shipped adapters' venv has it.
    let client = lockstorm::clients::Client::shipped("redis-py").unwrap();
    let prepared = lockstorm::clients::prepare(&client).unwrap_or_else(|e| {
        panic!("the Python helper needs python3 with venv (apt-get install -y python3-venv): {e}")
    });
    let python = prepared.argv[0].clone();
    answers_the_examples("python", |dir, pairs| {
        let driver = dir.join("driver.py");
        std::fs::write(&driver, PYTHON_DRIVER).unwrap();
        let mut cmd = Command::new(&python);
        cmd.arg(&driver)
            .arg(pairs)
            .env("PYTHONPATH", clients_dir("python"))
            .env("PYTHONDONTWRITEBYTECODE", "1");
        cmd
    });
}

#[test]
fn the_node_helper_answers_the_protocol_page_examples() {
    let version = Command::new("node").arg("--version").output();
    assert!(
        version.is_ok_and(|v| v.status.success()),
        "the Node helper needs node on PATH (apt-get install -y nodejs)"
    );
    answers_the_examples("node", |dir, pairs| {
        let driver = dir.join("driver.js");
        std::fs::write(&driver, NODE_DRIVER).unwrap();
        let mut cmd = Command::new("node");
        cmd.arg(&driver)
            .arg(clients_dir("node").join("protocol.js"))
            .arg(pairs);
        cmd
    });
}
