//! etcd's v3 API through its JSON gateway: every etcd request lockstorm
//! makes lives here, as every SQL statement lives in `pg.rs`. Each request is
//! one HTTP/1.1 `POST /v3/<service>/<method>` with a JSON body, keys and
//! values base64, int64s as strings: a reader can replay any of them with
//! `curl`. The gateway rather than a gRPC client: the worker is synchronous
//! (one small runtime per client does), hyper is already in the build, and
//! no `protoc` is needed to build lockstorm.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{json, Value};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why a request has no answer to act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Nothing reached etcd (no connection): the request took no effect.
    NotSent(String),
    /// Sent, and no answer came, or etcd said it may have applied it
    /// (`Unavailable`, a timed-out proposal): it may have taken effect.
    Unknown(String),
    /// etcd answered with an error that applied nothing (a lease not
    /// found, an invalid request).
    Refused { code: i64, message: String },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotSent(why) => write!(f, "not sent: {why}"),
            Failure::Unknown(why) => write!(f, "no answer: {why}"),
            Failure::Refused { code, message } => {
                write!(f, "etcd refused (code {code}): {message}")
            }
        }
    }
}

/// gRPC codes after which a write may still have been applied: the
/// proposal was made, and its outcome is unknown.
const MAYBE_APPLIED: [i64; 4] = [
    1,  // Canceled
    2,  // Unknown
    4,  // DeadlineExceeded ("etcdserver: request timed out")
    14, // Unavailable (leader changed, no leader)
];

/// A client of the gateway: requests leave from `source` (a worker's own
/// loopback address, so a partition can single it out) and each has
/// `timeout` to be answered.
pub struct Gateway {
    runtime: tokio::runtime::Runtime,
    source: Option<Ipv4Addr>,
    timeout: Duration,
}

impl Gateway {
    pub fn new(source: Option<Ipv4Addr>, timeout: Duration) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Gateway {
            runtime,
            source,
            timeout,
        })
    }

    /// `POST /v3/<path>` to the member at `member` (`ip:port`), on a new
    /// connection: the answer's JSON, or why there is none.
    pub fn post(&self, member: &str, path: &str, body: &Value) -> Result<Value, Failure> {
        let answered = self.send(member, &format!("/v3/{path}"), Some(body))?;
        answer(member, path, answered.status, &answered.bytes)
    }

    /// `GET <path>` (`/health`, `/metrics`): the status and the text.
    pub fn get(&self, member: &str, path: &str) -> Result<(u16, String), Failure> {
        let answered = self.send(member, path, None)?;
        let text = String::from_utf8_lossy(&answered.bytes).into_owned();
        Ok((answered.status, text))
    }

    /// `GET <path>`'s `Date` (the member's wall clock as it answered, in
    /// whole seconds), in ns since the epoch.
    pub fn date(&self, member: &str, path: &str) -> Result<i64, Failure> {
        let date = self
            .send(member, path, None)?
            .date
            .ok_or_else(|| Failure::Unknown(format!("{path} from {member}: no Date")))?;
        let at = httpdate::parse_http_date(&date)
            .map_err(|e| Failure::Unknown(format!("{path} from {member}: Date {date:?}: {e}")))?;
        let secs = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| Failure::Unknown(format!("{path} from {member}: Date {date:?}: {e}")))?
            .as_secs();
        Ok(secs as i64 * 1_000_000_000)
    }

    fn send(&self, member: &str, path: &str, body: Option<&Value>) -> Result<Answer, Failure> {
        let sent = Arc::new(AtomicBool::new(false));
        let request = self.request(member, path, body, sent.clone());
        match self
            .runtime
            .block_on(async { tokio::time::timeout(self.timeout, request).await })
        {
            Ok(answer) => answer,
            Err(_) if sent.load(Ordering::SeqCst) => Err(Failure::Unknown(format!(
                "{path}: no answer from {member} within {:?}",
                self.timeout
            ))),
            Err(_) => Err(Failure::NotSent(format!(
                "{path}: could not reach {member} within {:?}",
                self.timeout
            ))),
        }
    }

    async fn request(
        &self,
        member: &str,
        path: &str,
        body: Option<&Value>,
        sent: Arc<AtomicBool>,
    ) -> Result<Answer, Failure> {
        let not_sent =
            |e: &dyn std::fmt::Display| Failure::NotSent(format!("{path} to {member}: {e}"));
        let unknown =
            |e: &dyn std::fmt::Display| Failure::Unknown(format!("{path} to {member}: {e}"));
        let addr: SocketAddr = member.parse().map_err(|e| not_sent(&e))?;
        let socket = tokio::net::TcpSocket::new_v4().map_err(|e| not_sent(&e))?;
        if let Some(ip) = self.source {
            socket
                .bind(SocketAddr::from((ip, 0)))
                .map_err(|e| not_sent(&e))?;
        }
        let stream = socket.connect(addr).await.map_err(|e| not_sent(&e))?;
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| not_sent(&e))?;
        tokio::spawn(connection);
        let request = match body {
            Some(body) => hyper::Request::post(path)
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .header(hyper::header::HOST, member)
                .body(Full::new(Bytes::from(body.to_string()))),
            None => hyper::Request::get(path)
                .header(hyper::header::HOST, member)
                .body(Full::new(Bytes::new())),
        }
        .map_err(|e| not_sent(&e))?;
        sent.store(true, Ordering::SeqCst);
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| unknown(&e))?;
        let status = response.status().as_u16();
        let date = response
            .headers()
            .get(hyper::header::DATE)
            .and_then(|d| d.to_str().ok())
            .map(str::to_string);
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unknown(&e))?
            .to_bytes();
        Ok(Answer {
            status,
            date,
            bytes,
        })
    }
}

/// An HTTP answer: its status, its `Date` header and its body.
struct Answer {
    status: u16,
    date: Option<String>,
    bytes: Bytes,
}

/// A gateway answer's JSON, or the error etcd answered with.
fn answer(member: &str, path: &str, status: u16, bytes: &[u8]) -> Result<Value, Failure> {
    let answer: Value = serde_json::from_slice(bytes).map_err(|e| {
        Failure::Unknown(format!(
            "{path} to {member}: {e}: {}",
            String::from_utf8_lossy(bytes)
        ))
    })?;
    if (200..300).contains(&status) {
        return Ok(answer);
    }
    let code = answer["code"].as_i64().unwrap_or(2);
    let message = answer["error"]
        .as_str()
        .or(answer["message"].as_str())
        .unwrap_or("no message")
        .to_string();
    match MAYBE_APPLIED.contains(&code) {
        true => Err(Failure::Unknown(format!(
            "{path} to {member}: {message} (code {code})"
        ))),
        false => Err(Failure::Refused { code, message }),
    }
}

/// A member is healthy (`GET /health`): it has a leader and no alarm.
pub fn healthy(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|v| v["health"] == "true")
}

/// When the member's process started (`process_start_time_seconds` in
/// `GET /metrics`): a restarted member answers with another, as a Redis
/// node does with its `run_id`.
pub fn started(metrics: &str) -> Option<String> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("process_start_time_seconds "))
        .map(|v| v.trim().to_string())
}

/// Whether the member knows a leader (`etcd_server_has_leader` in `GET
/// /metrics`): one cut off from the majority loses it within an election
/// timeout, as a follower that hears no heartbeat or a leader that hears
/// no quorum (etcd checks quorum).
pub fn has_leader(metrics: &str) -> Option<bool> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("etcd_server_has_leader "))
        .map(|v| v.trim() == "1")
}

fn b64(s: &str) -> String {
    STANDARD.encode(s)
}

/// An int64 of a gateway answer: proto3 JSON writes them as strings, and
/// leaves out zeros.
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// `lease/grant`: a lease of `ttl_s` seconds (etcd may grant more: its
/// minimum is one and a half election timeouts).
pub const GRANT: &str = "lease/grant";
pub fn grant(ttl_s: i64) -> Value {
    json!({"TTL": ttl_s})
}
/// The granted lease's id and TTL (seconds).
pub fn granted(answer: &Value) -> Option<(i64, i64)> {
    let id = int(&answer["ID"]);
    (id != 0).then(|| (id, int(&answer["TTL"])))
}

/// `lease/keepalive`: one renewal of lease `id` (the gateway answers the
/// stream's first message and ends it).
pub const KEEP_ALIVE: &str = "lease/keepalive";
pub fn keep_alive(id: i64) -> Value {
    json!({"ID": id.to_string()})
}
/// The TTL the renewal gave the lease; `None` if the lease is gone
/// (expired or revoked: etcd answers TTL 0).
pub fn kept_alive(answer: &Value) -> Option<i64> {
    let ttl = int(&answer["result"]["TTL"]);
    (ttl > 0).then_some(ttl)
}

/// `lease/revoke`: ends lease `id` and deletes every key attached to it.
pub const REVOKE: &str = "lease/revoke";
pub fn revoke(id: i64) -> Value {
    json!({"ID": id.to_string()})
}

/// `kv/range`, a linearizable read (no raft write: etcd confirms it is
/// current with the leader) of how many keys `key` names: whether the lock
/// is held now.
pub const RANGE: &str = "kv/range";
pub fn count(key: &str) -> Value {
    json!({"key": b64(key), "count_only": true})
}
/// The keys a `count` found (proto3 JSON leaves out a zero).
pub fn counted(answer: &Value) -> i64 {
    int(&answer["count"])
}

/// `kv/txn`, the lock's acquisition: put `key` = `value` under `lease` only
/// if the key does not exist (its `create_revision` is 0), as etcd's own
/// `concurrency.Mutex` guards its key.
pub const TXN: &str = "kv/txn";
pub fn acquire(key: &str, value: &str, lease: i64) -> Value {
    json!({
        "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
        "success": [{"request_put": {"key": b64(key), "value": b64(value), "lease": lease.to_string()}}],
    })
}

/// Whether a transaction's compare held, and the revision it ran at: for
/// an acquisition that held, the key's `create_revision`, the fence.
pub fn committed(answer: &Value) -> (bool, u64) {
    let succeeded = answer["succeeded"].as_bool().unwrap_or(false);
    (succeeded, int(&answer["header"]["revision"]) as u64)
}

/// `kv/txn`, the release: delete `key` only if it is still the one this
/// holder created (its `create_revision` is `revision`), so a holder whose
/// lease ran out cannot delete the next holder's key.
pub fn release(key: &str, revision: u64) -> Value {
    json!({
        "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": revision.to_string()}],
        "success": [{"request_delete_range": {"key": b64(key)}}],
    })
}

/// A member's health, and its metrics.
pub const HEALTH: &str = "/health";
pub const METRICS: &str = "/metrics";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_asks_for_the_number_only_and_reads_a_left_out_zero_as_none() {
        assert_eq!(count("k"), json!({"key": "aw==", "count_only": true}));
        assert_eq!(counted(&json!({"header": {}, "count": "1"})), 1);
        assert_eq!(counted(&json!({"header": {}})), 0);
    }

    #[test]
    fn an_acquisition_is_guarded_by_create_revision_zero_and_puts_under_the_lease() {
        let txn = acquire("lockstorm:lock", "0-1-ab", 7587);
        assert_eq!(txn["compare"][0]["create_revision"], "0");
        assert_eq!(txn["compare"][0]["key"], b64("lockstorm:lock"));
        assert_eq!(txn["success"][0]["request_put"]["lease"], "7587");
        let release = release("lockstorm:lock", 42);
        assert_eq!(release["compare"][0]["create_revision"], "42");
    }

    #[test]
    fn answers_read_int64s_as_strings_and_missing_fields_as_zero() {
        let answer = json!({"header": {"revision": "12"}, "succeeded": true});
        assert_eq!(committed(&answer), (true, 12));
        assert_eq!(
            committed(&json!({"header": {"revision": "13"}})),
            (false, 13)
        );
        assert_eq!(granted(&json!({"ID": "7587", "TTL": "2"})), Some((7587, 2)));
        assert_eq!(granted(&json!({"error": "x"})), None);
        assert_eq!(
            kept_alive(&json!({"result": {"ID": "1", "TTL": "2"}})),
            Some(2)
        );
        assert_eq!(
            kept_alive(&json!({"result": {"ID": "1"}})),
            None,
            "TTL 0: gone"
        );
    }
}
