//! What one node's observer stream means for the lock key: pure, no
//! sockets. The stream interleaves two things on one RESP3 connection, in
//! the order the node produced them: keyspace notifications for the lock
//! key (`set`, `expire`, `del`, `expired`: what a command *did*) and
//! `MONITOR` lines (what was sent, with the sender's address and the
//! arguments: the token, the TTL).
//!
//! Redis 7 feeds a command's `MONITOR` line *after* running it, so the
//! notifications a command raised come just before its line; a script's
//! `EVAL`/`EVALSHA` line comes *before* the script runs, and each command
//! the script runs follows as a `[0 lua]` line after its own notifications.
//! A command that changed nothing (a `SET NX` that lost, a compare that did
//! not match) raises no notification and is not reported. An `expired`
//! notification stands alone: Redis expired the key on access or in its
//! expire cycle, whoever's command happened to be running.

use checker::history::key;
use std::net::Ipv4Addr;

/// Who sent a `MONITOR` line's command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sender {
    /// A client connection, by source address.
    Client(Ipv4Addr),
    /// A command run by a script (`[0 lua]`): the script's caller sent it.
    Script,
    /// Anything else (a unix socket, an address we cannot read).
    Unknown,
}

/// One item of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A keyspace notification for the lock key: its event name.
    Notice(String),
    /// A `MONITOR` line.
    Command { sender: Sender, words: Vec<String> },
}

/// What the observer reports: one of [`checker::history::key`]'s events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub f: &'static str,
    /// The token the key held (set: the one written).
    pub token: Option<String>,
    /// Who sent the command, when the sender's address names a worker.
    pub by: Option<String>,
    pub ttl_ms: Option<u64>,
}

/// The lock key's life on one node, as far as the stream shows it.
pub struct Tracker {
    key: String,
    /// The token the key holds now, if the stream (or the `GET` made on
    /// connecting) showed it.
    current: Option<String>,
    /// Notifications raised by the command whose line has not come yet.
    pending: Vec<String>,
    /// The sender of the script running now (its `EVAL` line came first).
    caller: Sender,
    /// Senders whose commands change the key without being anyone's act
    /// here: a replica's primary, replaying what it already did.
    replaying: Vec<Ipv4Addr>,
}

impl Tracker {
    pub fn new(key: &str, current: Option<String>, replaying: Vec<Ipv4Addr>) -> Self {
        Tracker {
            key: key.to_string(),
            current,
            pending: Vec::new(),
            caller: Sender::Unknown,
            replaying,
        }
    }

    /// Feeds one item; returns what it shows, if anything. `who` names a
    /// sender's address (`worker-<i>`), or not.
    pub fn feed(&mut self, item: Item, who: impl Fn(Ipv4Addr) -> Option<String>) -> Option<Seen> {
        let (sender, words) = match item {
            Item::Notice(n) if n == "expired" => {
                return Some(Seen {
                    f: key::EXPIRED,
                    token: self.current.take(),
                    by: None,
                    ttl_ms: None,
                });
            }
            Item::Notice(n) => {
                self.pending.push(n);
                return None;
            }
            Item::Command { sender, words } => (sender, words),
        };
        let name = words.first()?.to_ascii_uppercase();
        if matches!(
            name.as_str(),
            "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO"
        ) {
            self.caller = sender;
            return None;
        }
        // Notifications belong to the command on the key that follows them;
        // one on another key (the fence counter) raised none of ours.
        if words.get(1) != Some(&self.key) {
            return None;
        }
        let did = std::mem::take(&mut self.pending);
        let sender = match sender {
            Sender::Script => self.caller.clone(),
            s => s,
        };
        let replayed = matches!(sender, Sender::Client(ip) if self.replaying.contains(&ip));
        let by = match sender {
            Sender::Client(ip) => who(ip),
            _ => None,
        };
        let has = |n: &str| did.iter().any(|d| d == n);
        let seen = if has("set") {
            let token = words.get(2).cloned();
            self.current.clone_from(&token);
            Seen {
                f: key::SET,
                token,
                by,
                ttl_ms: has("expire").then(|| ttl_ms(&words[2..])).flatten(),
            }
        } else if has("del") {
            Seen {
                f: key::DELETED,
                token: self.current.take(),
                by,
                ttl_ms: None,
            }
        } else if has("expire") && name.contains("EXPIRE") {
            Seen {
                f: key::RENEWED,
                token: self.current.clone(),
                by,
                ttl_ms: expiry_ms(&name, &words[2..]),
            }
        } else {
            return None;
        };
        (!replayed).then_some(seen)
    }
}

/// The TTL a `SET`'s options give (`PX ms`, `EX s`); `None` for an absolute
/// expiry or none.
fn ttl_ms(options: &[String]) -> Option<u64> {
    let at = |i: usize| options.get(i + 1)?.parse::<u64>().ok();
    options
        .iter()
        .enumerate()
        .find_map(|(i, o)| match o.to_ascii_uppercase().as_str() {
            "PX" => at(i),
            "EX" => at(i).map(|s| s * 1000),
            _ => None,
        })
}

/// The TTL a `PEXPIRE`/`EXPIRE` sets.
fn expiry_ms(name: &str, args: &[String]) -> Option<u64> {
    let n = args.first()?.parse::<u64>().ok()?;
    match name {
        "PEXPIRE" => Some(n),
        "EXPIRE" => Some(n * 1000),
        _ => None,
    }
}

/// Reads a `MONITOR` line: `<unix time> [<db> <addr>|lua] "word" "word" …`,
/// each word quoted as Redis's `sdscatrepr` quotes it.
pub fn monitor_line(line: &str) -> Option<Item> {
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let sender = match line[open + 1..close].split_once(' ')?.1 {
        "lua" => Sender::Script,
        addr => match addr.rsplit_once(':').map(|(ip, _)| ip.parse()) {
            Some(Ok(ip)) => Sender::Client(ip),
            _ => Sender::Unknown,
        },
    };
    Some(Item::Command {
        sender,
        words: unquote_words(&line[close + 1..])?,
    })
}

/// `"a" "b\x00\"c"` → `["a", "b\0\"c"]`.
fn unquote_words(s: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        match chars.next() {
            None => return Some(words),
            Some('"') => {}
            Some(_) => return None,
        }
        let mut bytes = Vec::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => bytes.push(b'\n'),
                    'r' => bytes.push(b'\r'),
                    't' => bytes.push(b'\t'),
                    'a' => bytes.push(7),
                    'b' => bytes.push(8),
                    'x' => {
                        let hex: String = [chars.next()?, chars.next()?].iter().collect();
                        bytes.push(u8::from_str_radix(&hex, 16).ok()?);
                    }
                    c => bytes.extend(c.to_string().bytes()),
                },
                c => bytes.extend(c.to_string().bytes()),
            }
        }
        words.push(String::from_utf8_lossy(&bytes).into_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "lockstorm:lock";

    fn worker(ip: Ipv4Addr) -> Option<String> {
        (ip.octets()[3] >= 100).then(|| format!("worker-{}", ip.octets()[3] - 100))
    }

    fn run(tracker: &mut Tracker, items: &[&str]) -> Vec<Seen> {
        items
            .iter()
            .filter_map(|s| {
                let item = match s.strip_prefix("notice ") {
                    Some(n) => Item::Notice(n.to_string()),
                    None => monitor_line(s).expect("a monitor line"),
                };
                tracker.feed(item, worker)
            })
            .collect()
    }

    /// An event in brief: `f`, token, by, ttl_ms.
    type Brief<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<u64>);

    fn brief(seen: &[Seen]) -> Vec<Brief<'_>> {
        seen.iter()
            .map(|s| (s.f, s.token.as_deref(), s.by.as_deref(), s.ttl_ms))
            .collect()
    }

    #[test]
    fn reads_a_monitor_line_with_its_sender_and_quoted_words() {
        let line =
            r#"1796253063.126493 [0 127.0.5.102:56359] "SET" "lockstorm:lock" "a\"b\x41" "NX""#;
        let Some(Item::Command { sender, words }) = monitor_line(line) else {
            panic!("not read");
        };
        assert_eq!(sender, Sender::Client(Ipv4Addr::new(127, 0, 5, 102)));
        assert_eq!(words, ["SET", KEY, "a\"bA", "NX"]);
        let lua = monitor_line(r#"1.0 [0 lua] "del" "lockstorm:lock""#);
        assert!(matches!(
            lua,
            Some(Item::Command {
                sender: Sender::Script,
                ..
            })
        ));
        assert!(monitor_line("OK").is_none());
    }

    /// The stream as Redis 7.0 wrote it for a lock's life (captured from a
    /// real server, addresses shortened).
    #[test]
    fn a_lock_is_set_renewed_by_script_deleted_by_script_and_expires() {
        let mut t = Tracker::new(KEY, None, Vec::new());
        let seen = run(
            &mut t,
            &[
                "notice set",
                "notice expire",
                r#"1.0 [0 127.0.5.100:1] "SET" "lockstorm:lock" "A" "NX" "PX" "300""#,
                // Lost: no notification, nothing to report.
                r#"1.1 [0 127.0.5.101:2] "SET" "lockstorm:lock" "B" "NX" "PX" "300""#,
                r#"1.2 [0 127.0.5.100:1] "EVALSHA" "abc" "1" "lockstorm:lock" "A" "300""#,
                r#"1.2 [0 lua] "get" "lockstorm:lock""#,
                "notice expire",
                r#"1.2 [0 lua] "pexpire" "lockstorm:lock" "300""#,
                r#"1.3 [0 127.0.5.100:1] "EVALSHA" "def" "1" "lockstorm:lock" "A""#,
                r#"1.3 [0 lua] "get" "lockstorm:lock""#,
                "notice del",
                r#"1.3 [0 lua] "del" "lockstorm:lock""#,
                // A fenced grant: the counter's INCR is another key.
                r#"1.4 [0 127.0.5.101:2] "EVALSHA" "f" "2" "lockstorm:lock" "lockstorm:fence" "C" "200""#,
                "notice set",
                "notice expire",
                r#"1.4 [0 lua] "SET" "lockstorm:lock" "C" "NX" "PX" "200""#,
                r#"1.4 [0 lua] "INCR" "lockstorm:fence""#,
                "notice expired",
            ],
        );
        assert_eq!(
            brief(&seen),
            [
                ("key-set", Some("A"), Some("worker-0"), Some(300)),
                ("key-renewed", Some("A"), Some("worker-0"), Some(300)),
                ("key-deleted", Some("A"), Some("worker-0"), None),
                ("key-set", Some("C"), Some("worker-1"), Some(200)),
                ("key-expired", Some("C"), None, None),
            ]
        );
    }

    #[test]
    fn a_plain_del_from_another_worker_deletes_the_holder_token() {
        let mut t = Tracker::new(KEY, Some("A".into()), Vec::new());
        let seen = run(
            &mut t,
            &[
                "notice del",
                r#"1.0 [0 127.0.5.103:9] "DEL" "lockstorm:lock""#,
                // Expired on access: the expiry comes first, then the new set.
                "notice set",
                "notice expire",
                r#"1.1 [0 127.0.5.2:9] "SET" "lockstorm:lock" "B" "PX" "100""#,
                "notice expired",
                "notice set",
                r#"1.2 [0 127.0.5.101:9] "SETNX" "lockstorm:lock" "C""#,
                "notice expire",
                r#"1.2 [0 127.0.5.101:9] "PEXPIRE" "lockstorm:lock" "500""#,
            ],
        );
        assert_eq!(
            brief(&seen),
            [
                ("key-deleted", Some("A"), Some("worker-3"), None),
                ("key-set", Some("B"), None, Some(100)),
                ("key-expired", Some("B"), None, None),
                ("key-set", Some("C"), Some("worker-1"), None),
                ("key-renewed", Some("C"), Some("worker-1"), Some(500)),
            ]
        );
    }

    #[test]
    fn a_replica_replaying_its_primary_reports_nothing_but_follows_the_key() {
        let primary = Ipv4Addr::new(127, 0, 5, 11);
        let mut t = Tracker::new(KEY, None, vec![primary]);
        let seen = run(
            &mut t,
            &[
                // As a Redis 7.0 replica shows its primary's stream: the
                // primary's expiry arrives as a DEL.
                "notice set",
                "notice expire",
                r#"1.0 [0 127.0.5.11:6379] "SET" "lockstorm:lock" "A" "PXAT" "99""#,
                "notice expire",
                r#"1.1 [0 127.0.5.11:6379] "PEXPIREAT" "lockstorm:lock" "199""#,
                "notice del",
                r#"1.2 [0 127.0.5.11:6379] "DEL" "lockstorm:lock""#,
                "notice set",
                r#"1.3 [0 127.0.5.11:6379] "SET" "lockstorm:lock" "B" "PXAT" "299""#,
                // Promoted: the key's expiry is this node's own act.
                "notice expired",
            ],
        );
        assert_eq!(brief(&seen), [("key-expired", Some("B"), None, None)]);
    }
}
