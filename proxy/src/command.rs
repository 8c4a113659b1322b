//! What a request is for the lock: the proxy holds or drops *one named
//! command*, so it must tell an acquire from a release, a storage write from
//! a read. Pure: words in, a [`Class`] out.
//!
//! Plain commands are judged by name and key (`SET <lock> … NX` acquires,
//! `DEL <lock>` releases). A script is judged by what it calls on a key that
//! names the lock: `del`/`unlink` release, `set`-family calls acquire,
//! `expire`-family calls extend, in that order (a reentrant release script
//! may also decrement a hash; an acquire script seldom deletes). An
//! `EVALSHA` is read through the bodies the proxy saw in `EVAL` or
//! `SCRIPT LOAD` on any connection; a hash it never saw is `Other`. Library
//! keys may carry a prefix, so a key *containing* the lock key names it.

use serde::Serialize;
use std::collections::HashMap;
use std::sync::Mutex;

/// The role of the upstream a connection goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// A node that holds the lock (a Redlock node, a primary, a replica).
    Lock,
    /// A Sentinel: its replies naming nodes are rewritten.
    Sentinel,
    /// lockstorm's own counter node.
    Storage,
}

/// What a request does to the lock or the counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    Acquire,
    Release,
    Extend,
    /// The counter's write (`SET`, or the fenced script asked to write).
    Write,
    /// The counter's read.
    Read,
    Other,
}

/// The keys that tell the classes apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    pub lock: String,
    pub counter: String,
    /// A script on the counter writes when this argument says so; any other
    /// script on it reads. The storage client owns the layout and passes it.
    pub write_arg: WriteArg,
}

/// `ARGV[index]` (0-based) equal to `value` marks a script call as a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteArg {
    pub index: usize,
    pub value: String,
}

/// Script bodies by their SHA-1 (lowercase hex), as seen on the wire.
#[derive(Default, Debug)]
pub struct Scripts(Mutex<HashMap<String, Vec<u8>>>);

impl Scripts {
    pub fn learn(&self, body: &[u8]) {
        let sha = sha1_smol::Sha1::from(body).digest().to_string();
        self.lock().entry(sha).or_insert_with(|| body.to_vec());
    }
    fn body(&self, sha: &[u8]) -> Option<Vec<u8>> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.lock().get(&sha).cloned()
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The command's name, upper case.
pub fn name(words: &[Vec<u8>]) -> String {
    words
        .first()
        .map(|w| String::from_utf8_lossy(w).to_ascii_uppercase())
        .unwrap_or_default()
}

/// Learns the script bodies a request carries (`EVAL`, `SCRIPT LOAD`).
pub fn learn(words: &[Vec<u8>], scripts: &Scripts) {
    match name(words).as_str() {
        "EVAL" | "EVAL_RO" if words.len() > 1 => scripts.learn(&words[1]),
        "SCRIPT" if words.len() > 2 && words[1].eq_ignore_ascii_case(b"LOAD") => {
            scripts.learn(&words[2])
        }
        _ => {}
    }
}

pub fn classify(words: &[Vec<u8>], role: Role, keys: &Keys, scripts: &Scripts) -> Class {
    let name = name(words);
    let has = |w: &[u8], key: &str| contains(w, key.as_bytes());
    let key_is = |key: &str| words.get(1).is_some_and(|w| has(w, key));
    match role {
        Role::Sentinel => Class::Other,
        Role::Lock => match name.as_str() {
            "SET"
                if key_is(&keys.lock)
                    && words[2..].iter().any(|w| w.eq_ignore_ascii_case(b"NX")) =>
            {
                Class::Acquire
            }
            "SETNX" if key_is(&keys.lock) => Class::Acquire,
            "DEL" | "UNLINK" if words[1..].iter().any(|w| has(w, &keys.lock)) => Class::Release,
            "PEXPIRE" | "EXPIRE" | "PEXPIREAT" | "EXPIREAT" if key_is(&keys.lock) => Class::Extend,
            _ => match script(words, scripts) {
                Some((body, script_keys, _)) if script_keys.iter().any(|k| has(k, &keys.lock)) => {
                    script_class(&body)
                }
                _ => Class::Other,
            },
        },
        Role::Storage => match name.as_str() {
            "SET" | "PSETEX" | "INCR" | "INCRBY" if key_is(&keys.counter) => Class::Write,
            "GET" if key_is(&keys.counter) => Class::Read,
            _ => match script(words, scripts) {
                Some((_, script_keys, argv))
                    if script_keys.iter().any(|k| has(k, &keys.counter)) =>
                {
                    let mark = &keys.write_arg;
                    match argv.get(mark.index) {
                        Some(arg) if arg == mark.value.as_bytes() => Class::Write,
                        _ => Class::Read,
                    }
                }
                _ => Class::Other,
            },
        },
    }
}

/// A script call: its body (seen, or learnt by hash), keys and arguments.
type Call<'a> = (Vec<u8>, &'a [Vec<u8>], &'a [Vec<u8>]);

fn script<'a>(words: &'a [Vec<u8>], scripts: &Scripts) -> Option<Call<'a>> {
    let body = match name(words).as_str() {
        "EVAL" | "EVAL_RO" => words.get(1)?.clone(),
        "EVALSHA" | "EVALSHA_RO" => scripts.body(words.get(1)?)?,
        _ => return None,
    };
    let n: usize = std::str::from_utf8(words.get(2)?).ok()?.parse().ok()?;
    let keys = words.get(3..3 + n)?;
    Some((body, keys, &words[3 + n..]))
}

fn script_class(body: &[u8]) -> Class {
    let body = String::from_utf8_lossy(body).to_ascii_lowercase();
    let calls = |names: &[&str]| {
        names
            .iter()
            .any(|n| body.contains(&format!("'{n}'")) || body.contains(&format!("\"{n}\"")))
    };
    if calls(&["del", "unlink"]) {
        Class::Release
    } else if calls(&[
        "set", "setnx", "psetex", "setex", "hset", "hsetnx", "hincrby",
    ]) {
        Class::Acquire
    } else if calls(&["pexpire", "expire", "pexpireat"]) {
        Class::Extend
    } else {
        Class::Other
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// A request as evidence: its words, each cut short, a script body shown by
/// its first line.
pub fn summary(words: &[Vec<u8>]) -> String {
    const WORD: usize = 40;
    const ALL: usize = 160;
    let mut out = String::new();
    for w in words {
        let text = String::from_utf8_lossy(w);
        let first = text.trim().lines().next().unwrap_or_default();
        let shown: String = first.chars().take(WORD).collect();
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&shown);
        if shown.len() < text.len() {
            out.push('…');
        }
        if out.len() > ALL {
            out.push_str(" …");
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<Vec<u8>> {
        s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    fn keys() -> Keys {
        Keys {
            lock: "lockstorm:lock".into(),
            counter: "lockstorm:counter".into(),
            write_arg: WriteArg {
                index: 1,
                value: "w".into(),
            },
        }
    }

    #[test]
    fn plain_lock_commands_are_named_by_what_they_do() {
        let s = Scripts::default();
        let c = |line: &str| classify(&w(line), Role::Lock, &keys(), &s);
        assert_eq!(c("SET lockstorm:lock t NX PX 2000"), Class::Acquire);
        assert_eq!(c("set prefix:lockstorm:lock t px 2000 nx"), Class::Acquire);
        assert_eq!(c("SETNX lockstorm:lock t"), Class::Acquire);
        assert_eq!(c("SET lockstorm:lock t XX"), Class::Other);
        assert_eq!(c("DEL lockstorm:lock"), Class::Release);
        assert_eq!(c("PEXPIRE lockstorm:lock 2000"), Class::Extend);
        assert_eq!(c("GET lockstorm:lock"), Class::Other);
        assert_eq!(
            c("SET other t NX"),
            Class::Other,
            "another key is not the lock"
        );
    }

    #[test]
    fn scripts_are_named_by_their_calls_also_by_hash() {
        let s = Scripts::default();
        let release =
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end";
        let acquire = "if redis.call(\"SET\", KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end";
        let eval = |body: &str| {
            vec![
                b"EVAL".to_vec(),
                body.as_bytes().to_vec(),
                b"1".to_vec(),
                b"lockstorm:lock".to_vec(),
                b"t".to_vec(),
            ]
        };
        assert_eq!(
            classify(&eval(release), Role::Lock, &keys(), &s),
            Class::Release
        );
        assert_eq!(
            classify(&eval(acquire), Role::Lock, &keys(), &s),
            Class::Acquire
        );
        let sha = sha1_smol::Sha1::from(release).digest().to_string();
        let evalsha = vec![
            b"EVALSHA".to_vec(),
            sha.to_uppercase().into_bytes(),
            b"1".to_vec(),
            b"lockstorm:lock".to_vec(),
        ];
        assert_eq!(
            classify(&evalsha, Role::Lock, &keys(), &s),
            Class::Other,
            "not seen yet"
        );
        learn(
            &[
                b"SCRIPT".to_vec(),
                b"LOAD".to_vec(),
                release.as_bytes().to_vec(),
            ],
            &s,
        );
        assert_eq!(classify(&evalsha, Role::Lock, &keys(), &s), Class::Release);
    }

    #[test]
    fn the_storage_write_is_told_from_its_read() {
        let s = Scripts::default();
        let c = |line: &str| classify(&w(line), Role::Storage, &keys(), &s);
        assert_eq!(c("SET lockstorm:counter 7"), Class::Write);
        assert_eq!(c("PSETEX lockstorm:counter 60000 7"), Class::Write);
        assert_eq!(c("GET lockstorm:counter"), Class::Read);
        let fenced = |op: &str| {
            vec![
                b"EVAL".to_vec(),
                b"redis.call('SET', KEYS[2], fence)".to_vec(),
                b"2".to_vec(),
                b"lockstorm:counter".to_vec(),
                b"lockstorm:highest-fence".to_vec(),
                b"34".to_vec(),
                op.as_bytes().to_vec(),
                b"8".to_vec(),
            ]
        };
        assert_eq!(
            classify(&fenced("w"), Role::Storage, &keys(), &s),
            Class::Write
        );
        assert_eq!(
            classify(&fenced("r"), Role::Storage, &keys(), &s),
            Class::Read
        );
    }

    #[test]
    fn a_summary_is_short_and_shows_a_script_by_its_first_line() {
        let words = vec![
            b"EVAL".to_vec(),
            b"\nif redis.call('get', KEYS[1]) == ARGV[1] then\n return 1 end".to_vec(),
            b"1".to_vec(),
        ];
        let s = summary(&words);
        assert!(
            s.starts_with("EVAL if redis.call('get', KEYS[1]) == ARGV"),
            "{s}"
        );
        assert!(s.len() < 200);
    }
}
