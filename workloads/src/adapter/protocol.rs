//! The adapter protocol's messages, and the one place a reply line is judged:
//! pure, so every way an adapter can break the protocol is tested without
//! starting one. The protocol itself is docs/protocol.md, whose examples
//! these types are held to (`harness/tests/e2e/protocol.rs` for the lock
//! adapters', `harness/tests/e2e/storage_cmd.rs` for the storage adapters').
//!
//! An answer is never upgraded: `ok: null` is `info`, and only what the
//! library reports becomes `ok` or `fail` (a release it cannot confirm must
//! not read as one, or the checker would find a `foreign-release`).

use serde::{Serialize, Serializer};
use serde_json::Value;

/// What the worker (or the harness) asks; `id` is added by [`Request`].
/// A lock adapter is asked `init`, `acquire`, `check` and `release`; a
/// storage adapter `init` ([`Op::StorageInit`]), `reset`, `read` and `write`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    Init(Init),
    Acquire {
        timeout_ms: u64,
    },
    Check,
    Release,
    /// A storage adapter's `init`.
    #[serde(rename = "init")]
    StorageInit(StorageInit),
    /// The counter to 0, every fence seen forgotten (the harness's, once).
    Reset,
    Read {
        #[serde(skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    Write {
        value: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Init(_) | Op::StorageInit(_) => "init",
            Op::Acquire { .. } => "acquire",
            Op::Check => "check",
            Op::Release => "release",
            Op::Reset => "reset",
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
        }
    }
}

/// Where a storage adapter keeps the counter, and whose it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StorageInit {
    /// The worker's index; `null` for the harness's own instance.
    pub worker: Option<u64>,
    /// The run's counter key.
    pub key: String,
    /// lockstorm's own storage node for the run (Redis or PostgreSQL), which
    /// the adapter may keep its data on or ignore.
    pub node: String,
    /// Whether this instance's reads and writes carry fences.
    pub fenced: bool,
}

/// A fence as a request carries it, by the rule a reply's fence follows: a
/// JSON integer up to 2^53, which every JSON reader takes exactly, and a
/// string of decimal digits past it (a JavaScript Number would round it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence(pub u64);

/// The largest integer a JavaScript Number (an IEEE double) holds exactly.
pub const EXACT_IN_JSON: u64 = 1 << 53;

impl Serialize for Fence {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 <= EXACT_IN_JSON {
            true => s.serialize_u64(self.0),
            false => s.serialize_str(&self.0.to_string()),
        }
    }
}

/// Where the lock lives and how long its leases are.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Init {
    pub topology: String,
    pub nodes: Vec<String>,
    /// Only for `replicated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinels: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// The database to select on every data-node connection, when not 0
    /// (a `--target redis://host:port/5`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db: Option<u32>,
    pub key: String,
    pub ttl_ms: u64,
    pub acquire_timeout_ms: u64,
    pub worker: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Request {
    pub id: u64,
    #[serde(flatten)]
    pub op: Op,
}

impl Request {
    /// One line, newline included.
    pub fn line(&self) -> String {
        let mut line = serde_json::to_string(self).expect("requests always serialise");
        line.push('\n');
        line
    }
}

/// A reply's `ok`: the history's `ok`, `fail` or `info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    Unknown,
}

/// A reply that keeps the protocol, its fields as the op needs them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    pub answer: Option<Answer>,
    pub error: Option<String>,
    pub token: Option<String>,
    pub fence: Option<u64>,
    /// `check`: the client's own view.
    pub valid: Option<bool>,
    /// `init`: the library and its version, and the features it offers.
    pub client: Option<String>,
    pub features: Vec<String>,
    /// `init`: the library settings the adapter chose over the library's
    /// defaults, name → value as written (recorded in `run.json`).
    pub options: std::collections::BTreeMap<String, String>,
    /// `init`: the key the library stores the lock under, when it is not
    /// init's `key` (a library that prefixes it).
    pub key: Option<String>,
    /// A storage adapter's `init`: the storage and its version.
    pub storage: Option<String>,
    /// A storage adapter's `read`: the counter.
    pub value: Option<i64>,
}

/// The features an adapter may offer.
pub const FEATURES: [&str; 4] = ["check", "token", "fence", "no-ttl"];

/// The longest `token`, `error` or `client` a reply may carry: each goes
/// into a history line, which must stay under the 1 MiB a reader takes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// A reply line as an error message quotes it: whole if short, else its
/// start and its length, so one bad line cannot flood the run's notes.
fn quoted(line: &str) -> String {
    const SHOWN: usize = 200;
    match line.char_indices().nth(SHOWN) {
        None => format!("{line:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &line[..cut], line.len()),
    }
}

/// Judges one line of the adapter's stdout as the reply to `expected`.
/// The error names the line and what is wrong with it.
pub fn parse_reply(line: &str, expected: &Request) -> Result<Reply, String> {
    judge(line, expected)
        .map_err(|why| format!("{why}, in reply to {}: {}", brief(expected), quoted(line)))
}

/// [`parse_reply`]'s verdict, the error saying only what is wrong.
fn judge(line: &str, expected: &Request) -> Result<Reply, String> {
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return Err("a line that is not JSON".into());
    };
    let Value::Object(map) = value else {
        return Err("a reply that is not a JSON object".into());
    };
    match map.get("id").and_then(Value::as_u64) {
        Some(id) if id == expected.id => {}
        Some(id) => return Err(format!("a reply with id {id}, not {}", expected.id)),
        None => return Err("a reply without a numeric \"id\"".into()),
    }
    let answer = match map.get("ok") {
        Some(Value::Bool(true)) => Answer::Yes,
        Some(Value::Bool(false)) => Answer::No,
        Some(Value::Null) => Answer::Unknown,
        _ => return Err("a reply whose \"ok\" is not true, false or null".into()),
    };
    let reply = fields(&Fields(&map), answer)?;
    if answer == Answer::Yes {
        if let Some(why) = missing(&reply, &expected.op) {
            return Err(why);
        }
    }
    Ok(reply)
}

/// A reply's fields. Every known field has one type; a `null` is the
/// field left out. A field of another type is the adapter's bug, never to
/// be read as absent (a fence dropped so would test a fenced client as
/// unfenced).
struct Fields<'a>(&'a serde_json::Map<String, Value>);

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn text(&self, key: &str) -> Result<Option<String>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if s.len() > MAX_TEXT_BYTES => Err(format!(
                "a reply whose {key:?} is {} bytes long, more than {MAX_TEXT_BYTES}",
                s.len()
            )),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("a reply whose {key:?} is not a string")),
        }
    }

    fn fence(&self) -> Result<Option<u64>, String> {
        self.get("fence")
            .map(|v| {
                fence(v).ok_or_else(|| {
                    format!(
                        "a reply whose \"fence\" is not an integer from 0 to {} \
                         (a JSON integer, or a string of decimal digits)",
                        u64::MAX
                    )
                })
            })
            .transpose()
    }

    fn valid(&self) -> Result<Option<bool>, String> {
        match self.get("valid") {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err("a reply whose \"valid\" is not true or false".into()),
        }
    }

    fn features(&self) -> Result<Vec<String>, String> {
        const NOT_STRINGS: &str = "a reply whose \"features\" is not a list of strings";
        match self.get("features") {
            None => Ok(Vec::new()),
            Some(Value::Array(f)) => f
                .iter()
                .map(|f| f.as_str().map(String::from))
                .collect::<Option<_>>()
                .ok_or(NOT_STRINGS.into()),
            Some(_) => Err(NOT_STRINGS.into()),
        }
    }

    fn options(&self) -> Result<std::collections::BTreeMap<String, String>, String> {
        match self.get("options") {
            None => Ok(Default::default()),
            Some(Value::Object(o)) => o
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Some((k.clone(), s.clone())),
                    Value::Number(_) | Value::Bool(_) => Some((k.clone(), v.to_string())),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or(
                    "a reply whose \"options\" has a value that is not a string, number or boolean"
                        .into(),
                ),
            Some(_) => Err("a reply whose \"options\" is not an object".into()),
        }
    }

    fn value(&self) -> Result<Option<i64>, String> {
        self.get("value")
            .map(|v| {
                v.as_i64().ok_or_else(|| {
                    format!(
                        "a reply whose \"value\" is not an integer from {} to {}",
                        i64::MIN,
                        i64::MAX
                    )
                })
            })
            .transpose()
    }
}

/// The reply's fields, read in this order: the first that is wrong is the
/// one the error names.
fn fields(f: &Fields, answer: Answer) -> Result<Reply, String> {
    Ok(Reply {
        answer: Some(answer),
        error: f.text("error")?,
        token: f.text("token")?,
        fence: f.fence()?,
        valid: f.valid()?,
        client: f.text("client")?,
        features: f.features()?,
        options: f.options()?,
        key: f.text("key")?,
        storage: f.text("storage")?,
        value: f.value()?,
    })
}

/// What a `true` reply to `op` lacks that the op needs, if anything.
fn missing(reply: &Reply, op: &Op) -> Option<String> {
    match op {
        Op::Init(_) if reply.client.is_none() => Some("an init reply without \"client\"".into()),
        Op::Init(_) => reply
            .features
            .iter()
            .find(|f| !FEATURES.contains(&f.as_str()))
            .map(|f| format!("an unknown feature {f:?} (known: check, token, fence)")),
        Op::Check if reply.valid.is_none() => {
            Some("a check reply without a boolean \"valid\"".into())
        }
        Op::StorageInit(_) if reply.storage.is_none() => {
            Some("a storage init reply without \"storage\"".into())
        }
        Op::Read { .. } if reply.value.is_none() => {
            Some("a read reply without an integer \"value\"".into())
        }
        _ => None,
    }
}

/// A fence as JSON carries it, or as a string of decimal digits (a
/// JavaScript client's BigInt, or a Number past 2^53, goes as a string).
fn fence(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        // `u64::from_str` also takes a leading `+`.
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    }
}

/// `acquire #4`, for messages.
fn brief(request: &Request) -> String {
    format!("{} #{}", request.op.name(), request.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: u64, op: Op) -> Request {
        Request { id, op }
    }

    #[test]
    fn requests_are_the_documented_lines() {
        let init = Init {
            topology: "single".into(),
            nodes: vec!["127.0.0.11:41000".into()],
            sentinels: None,
            master: None,
            db: None,
            key: "lockstorm:lock".into(),
            ttl_ms: 2000,
            acquire_timeout_ms: 4000,
            worker: 3,
        };
        assert_eq!(
            request(0, Op::Init(init)).line(),
            "{\"id\":0,\"op\":\"init\",\"topology\":\"single\",\"nodes\":[\"127.0.0.11:41000\"],\
             \"key\":\"lockstorm:lock\",\"ttl_ms\":2000,\"acquire_timeout_ms\":4000,\"worker\":3}\n"
        );
        let acquire = request(1, Op::Acquire { timeout_ms: 4000 }).line();
        assert_eq!(
            acquire,
            "{\"id\":1,\"op\":\"acquire\",\"timeout_ms\":4000}\n"
        );
        assert_eq!(
            request(2, Op::Check).line(),
            "{\"id\":2,\"op\":\"check\"}\n"
        );
        assert_eq!(
            request(3, Op::Release).line(),
            "{\"id\":3,\"op\":\"release\"}\n"
        );
    }

    #[test]
    fn replies_map_ok_to_the_history_and_keep_their_fields() {
        let acquire = request(1, Op::Acquire { timeout_ms: 10 });
        let r = parse_reply(r#"{"id":1,"ok":true,"token":"t","fence":17}"#, &acquire).unwrap();
        assert_eq!(r.answer, Some(Answer::Yes));
        assert_eq!((r.token.as_deref(), r.fence), (Some("t"), Some(17)));
        let r = parse_reply(r#"{"id":1,"ok":false,"error":"lock-busy"}"#, &acquire).unwrap();
        assert_eq!(
            (r.answer, r.error.as_deref()),
            (Some(Answer::No), Some("lock-busy"))
        );
        let r = parse_reply(r#"{"id":1,"ok":null,"error":"timeout: 5 s"}"#, &acquire).unwrap();
        assert_eq!(r.answer, Some(Answer::Unknown));
        let check = request(2, Op::Check);
        let r = parse_reply(r#"{"id":2,"ok":true,"valid":false}"#, &check).unwrap();
        assert_eq!(r.valid, Some(false));
        let init = request(0, Op::Init(sample_init()));
        let r = parse_reply(
            r#"{"id":0,"ok":true,"client":"lib 1.0","features":["check","token"],"extra":1}"#,
            &init,
        )
        .unwrap();
        assert_eq!(r.client.as_deref(), Some("lib 1.0"));
        assert_eq!(r.features, ["check", "token"]);
        assert!(r.options.is_empty());
        let r = parse_reply(
            r#"{"id":0,"ok":true,"client":"lib 1.0","features":[],"options":{"socket_timeout":1.0,"retries":"none","offline_queue":false}}"#,
            &init,
        )
        .unwrap();
        let options: Vec<(&str, &str)> = r
            .options
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            options,
            [
                ("offline_queue", "false"),
                ("retries", "none"),
                ("socket_timeout", "1.0")
            ]
        );
        // A library that prefixes the key says which it uses.
        let r = parse_reply(
            r#"{"id":0,"ok":true,"client":"x","features":[],"key":"redlock:lockstorm:lock"}"#,
            &init,
        )
        .unwrap();
        assert_eq!(r.key.as_deref(), Some("redlock:lockstorm:lock"));
        let line = r#"{"id":0,"ok":true,"client":"x","features":[],"key":7}"#;
        let err = parse_reply(line, &init).unwrap_err();
        assert!(err.contains("\"key\" is not a string"), "{err}");
        for bad in [r#""options":[1]"#, r#""options":{"a":{"b":1}}"#] {
            let line = format!(r#"{{"id":0,"ok":true,"client":"x","features":[],{bad}}}"#);
            let err = parse_reply(&line, &init).unwrap_err();
            assert!(err.contains("\"options\""), "{err}");
        }
    }

    #[test]
    fn a_text_field_too_long_for_a_history_line_is_a_break_quoted_by_its_start() {
        let acquire = request(1, Op::Acquire { timeout_ms: 10 });
        let ok = format!(
            r#"{{"id":1,"ok":true,"token":"{}"}}"#,
            "t".repeat(MAX_TEXT_BYTES)
        );
        assert!(parse_reply(&ok, &acquire).is_ok());
        let long = format!(
            r#"{{"id":1,"ok":true,"token":"{}"}}"#,
            "t".repeat(MAX_TEXT_BYTES + 1)
        );
        let err = parse_reply(&long, &acquire).unwrap_err();
        assert!(err.contains("\"token\" is 65537 bytes long"), "{err}");
        assert!(
            err.len() < 400,
            "the whole line is quoted: {} bytes",
            err.len()
        );
        assert!(err.ends_with(&format!("({} bytes)", long.len())), "{err}");
        let long_error = format!(
            r#"{{"id":1,"ok":false,"error":"{}"}}"#,
            "e".repeat(MAX_TEXT_BYTES + 1)
        );
        assert!(parse_reply(&long_error, &acquire).is_err());
    }

    #[test]
    fn every_broken_reply_is_named_with_its_line() {
        let acquire = request(4, Op::Acquire { timeout_ms: 10 });
        let cases = [
            ("granted", "not JSON"),
            ("[1]", "not a JSON object"),
            (r#"{"id":5,"ok":true}"#, "id 5, not 4"),
            (r#"{"ok":true}"#, "without a numeric \"id\""),
            (r#"{"id":4,"ok":"yes"}"#, "not true, false or null"),
            (r#"{"id":4}"#, "not true, false or null"),
        ];
        for (line, why) in cases {
            let err = parse_reply(line, &acquire).unwrap_err();
            assert!(err.contains(why), "{line}: {err}");
            assert!(err.contains("acquire #4"), "{err}");
            assert!(err.contains(&format!("{line:?}")), "names the line: {err}");
        }
        let check = request(2, Op::Check);
        let err = parse_reply(r#"{"id":2,"ok":true}"#, &check).unwrap_err();
        assert!(err.contains("without a boolean \"valid\""), "{err}");
        let init = request(0, Op::Init(sample_init()));
        let err = parse_reply(r#"{"id":0,"ok":true,"features":[]}"#, &init).unwrap_err();
        assert!(err.contains("without \"client\""), "{err}");
        let err = parse_reply(
            r#"{"id":0,"ok":true,"client":"x","features":["lease"]}"#,
            &init,
        )
        .unwrap_err();
        assert!(err.contains("unknown feature \"lease\""), "{err}");
    }

    #[test]
    fn a_fence_is_a_json_integer_or_a_decimal_string_within_u64() {
        let acquire = request(1, Op::Acquire { timeout_ms: 10 });
        let fence = |f: &str| {
            parse_reply(&format!(r#"{{"id":1,"ok":true,"fence":{f}}}"#), &acquire).map(|r| r.fence)
        };
        assert_eq!(fence("17"), Ok(Some(17)));
        assert_eq!(fence(r#""17""#), Ok(Some(17)));
        assert_eq!(fence("0"), Ok(Some(0)));
        // What a JavaScript BigInt sends as a string: u64::MAX itself.
        assert_eq!(fence(r#""18446744073709551615""#), Ok(Some(u64::MAX)));
        assert_eq!(fence("18446744073709551615"), Ok(Some(u64::MAX)));
        assert_eq!(fence("null"), Ok(None));
        let r = parse_reply(r#"{"id":1,"ok":true,"token":null,"error":null}"#, &acquire);
        assert_eq!(r.map(|r| (r.token, r.error)), Ok((None, None)));
    }

    #[test]
    fn a_mistyped_field_is_a_protocol_break_naming_the_line() {
        let acquire = request(4, Op::Acquire { timeout_ms: 10 });
        let fence = "\"fence\" is not an integer from 0 to 18446744073709551615";
        let cases = [
            (r#"{"id":4,"ok":true,"fence":"abc"}"#, fence),
            (r#"{"id":4,"ok":true,"fence":-5}"#, fence),
            (r#"{"id":4,"ok":true,"fence":"-5"}"#, fence),
            (
                r#"{"id":4,"ok":true,"fence":1180591620717411303424}"#,
                fence,
            ),
            (
                r#"{"id":4,"ok":true,"fence":"1180591620717411303424"}"#,
                fence,
            ),
            (
                r#"{"id":4,"ok":true,"fence":"18446744073709551616"}"#,
                fence,
            ),
            (r#"{"id":4,"ok":true,"fence":17.5}"#, fence),
            (r#"{"id":4,"ok":true,"fence":17.0}"#, fence),
            (r#"{"id":4,"ok":true,"fence":1e3}"#, fence),
            (r#"{"id":4,"ok":true,"fence":""}"#, fence),
            (r#"{"id":4,"ok":true,"fence":"+5"}"#, fence),
            (r#"{"id":4,"ok":true,"fence":" 5"}"#, fence),
            (r#"{"id":4,"ok":true,"fence":"0x11"}"#, fence),
            (r#"{"id":4,"ok":true,"fence":true}"#, fence),
            (r#"{"id":4,"ok":true,"fence":[17]}"#, fence),
            (r#"{"id":4,"ok":true,"fence":{"a":1}}"#, fence),
            (
                r#"{"id":4,"ok":true,"token":{"a":1}}"#,
                "\"token\" is not a string",
            ),
            (
                r#"{"id":4,"ok":true,"token":17}"#,
                "\"token\" is not a string",
            ),
            (
                r#"{"id":4,"ok":false,"error":17}"#,
                "\"error\" is not a string",
            ),
            (
                r#"{"id":4,"ok":null,"error":{"kind":"timeout"}}"#,
                "\"error\" is not a string",
            ),
            (
                r#"{"id":4,"ok":true,"valid":"yes"}"#,
                "\"valid\" is not true or false",
            ),
            (
                r#"{"id":4,"ok":true,"client":["lib"]}"#,
                "\"client\" is not a string",
            ),
            (
                r#"{"id":4,"ok":true,"features":"check"}"#,
                "\"features\" is not a list of strings",
            ),
            (
                r#"{"id":4,"ok":true,"features":["check",1]}"#,
                "\"features\" is not a list of strings",
            ),
        ];
        for (line, why) in cases {
            let err = parse_reply(line, &acquire).unwrap_err();
            assert!(err.contains(why), "{line}: {err}");
            assert!(err.contains("acquire #4"), "{err}");
            assert!(err.contains(&format!("{line:?}")), "names the line: {err}");
        }
    }

    fn storage_init(worker: Option<u64>) -> Op {
        Op::StorageInit(StorageInit {
            worker,
            key: "lockstorm:counter".into(),
            node: "127.0.0.1:41234".into(),
            fenced: true,
        })
    }

    #[test]
    fn storage_requests_are_the_documented_lines() {
        assert_eq!(
            request(0, storage_init(Some(3))).line(),
            "{\"id\":0,\"op\":\"init\",\"worker\":3,\"key\":\"lockstorm:counter\",\
             \"node\":\"127.0.0.1:41234\",\"fenced\":true}\n"
        );
        // The harness's own instance is no worker.
        assert!(request(0, storage_init(None))
            .line()
            .contains("\"worker\":null"));
        assert_eq!(
            request(1, Op::Reset).line(),
            "{\"id\":1,\"op\":\"reset\"}\n"
        );
        assert_eq!(
            request(2, Op::Read { fence: None }).line(),
            "{\"id\":2,\"op\":\"read\"}\n"
        );
        let fence = Some(Fence(17));
        assert_eq!(
            request(3, Op::Read { fence }).line(),
            "{\"id\":3,\"op\":\"read\",\"fence\":17}\n"
        );
        assert_eq!(
            request(4, Op::Write { value: 6, fence }).line(),
            "{\"id\":4,\"op\":\"write\",\"value\":6,\"fence\":17}\n"
        );
        assert_eq!(
            request(
                5,
                Op::Write {
                    value: -1,
                    fence: None
                }
            )
            .line(),
            "{\"id\":5,\"op\":\"write\",\"value\":-1}\n"
        );
    }

    #[test]
    fn a_fence_past_2_53_goes_as_a_string_of_digits_as_a_reply_may_send_it() {
        let line = |f: u64| {
            request(
                1,
                Op::Read {
                    fence: Some(Fence(f)),
                },
            )
            .line()
        };
        assert!(line(EXACT_IN_JSON).contains("\"fence\":9007199254740992}"));
        assert!(line(EXACT_IN_JSON + 1).contains("\"fence\":\"9007199254740993\""));
        assert!(line(u64::MAX).contains("\"fence\":\"18446744073709551615\""));
    }

    #[test]
    fn storage_replies_keep_their_fields_and_map_ok_to_the_history() {
        let init = request(0, storage_init(Some(0)));
        let r = parse_reply(r#"{"id":0,"ok":true,"storage":"pg-row 1.0"}"#, &init).unwrap();
        assert_eq!(r.storage.as_deref(), Some("pg-row 1.0"));
        let read = request(
            1,
            Op::Read {
                fence: Some(Fence(3)),
            },
        );
        let r = parse_reply(r#"{"id":1,"ok":true,"value":5}"#, &read).unwrap();
        assert_eq!((r.answer, r.value), (Some(Answer::Yes), Some(5)));
        let r = parse_reply(r#"{"id":1,"ok":true,"value":-9223372036854775808}"#, &read);
        assert_eq!(r.map(|r| r.value), Ok(Some(i64::MIN)));
        let r = parse_reply(r#"{"id":1,"ok":false,"error":"stale-fence"}"#, &read).unwrap();
        assert_eq!(
            (r.answer, r.error.as_deref()),
            (Some(Answer::No), Some("stale-fence"))
        );
        let r = parse_reply(r#"{"id":1,"ok":null,"error":"timeout: 2 s"}"#, &read).unwrap();
        assert_eq!((r.answer, r.value), (Some(Answer::Unknown), None));
        let write = request(
            2,
            Op::Write {
                value: 6,
                fence: None,
            },
        );
        let r = parse_reply(r#"{"id":2,"ok":true}"#, &write).unwrap();
        assert_eq!(r.answer, Some(Answer::Yes));
        let r = parse_reply(r#"{"id":2,"ok":false,"error":"stale-fence"}"#, &write).unwrap();
        assert_eq!(r.answer, Some(Answer::No));
        let reset = request(3, Op::Reset);
        assert!(parse_reply(r#"{"id":3,"ok":true}"#, &reset).is_ok());
    }

    #[test]
    fn a_broken_storage_reply_is_named_with_its_line() {
        let init = request(0, storage_init(None));
        let read = request(4, Op::Read { fence: None });
        let write = request(
            5,
            Op::Write {
                value: 1,
                fence: None,
            },
        );
        let cases = [
            (
                &init,
                r#"{"id":0,"ok":true}"#,
                "storage init reply without \"storage\"",
            ),
            (
                &init,
                r#"{"id":0,"ok":true,"client":"x","features":[]}"#,
                "without \"storage\"",
            ),
            (
                &init,
                r#"{"id":0,"ok":true,"storage":5}"#,
                "\"storage\" is not a string",
            ),
            (
                &read,
                r#"{"id":4,"ok":true}"#,
                "read reply without an integer \"value\"",
            ),
            (
                &read,
                r#"{"id":4,"ok":true,"value":null}"#,
                "without an integer \"value\"",
            ),
            (
                &read,
                r#"{"id":4,"ok":true,"value":"5"}"#,
                "\"value\" is not an integer",
            ),
            (
                &read,
                r#"{"id":4,"ok":true,"value":5.5}"#,
                "\"value\" is not an integer",
            ),
            (
                &read,
                r#"{"id":4,"ok":true,"value":9223372036854775808}"#,
                "\"value\" is not an integer",
            ),
            (&read, r#"{"id":3,"ok":true,"value":5}"#, "id 3, not 4"),
            (&write, r#"{"id":5,"ok":"yes"}"#, "not true, false or null"),
            (
                &write,
                r#"{"id":5,"ok":false,"error":{"kind":"stale-fence"}}"#,
                "\"error\" is not a string",
            ),
            (
                &write,
                r#"{"id":5,"ok":true,"value":[1]}"#,
                "\"value\" is not an integer",
            ),
        ];
        for (request, line, why) in cases {
            let err = parse_reply(line, request).unwrap_err();
            assert!(err.contains(why), "{line}: {err}");
            assert!(err.contains(&brief(request)), "{err}");
            assert!(err.contains(&format!("{line:?}")), "names the line: {err}");
        }
    }

    fn sample_init() -> Init {
        Init {
            topology: "redlock".into(),
            nodes: vec![],
            sentinels: None,
            master: None,
            db: None,
            key: "k".into(),
            ttl_ms: 1,
            acquire_timeout_ms: 1,
            worker: 0,
        }
    }
}
