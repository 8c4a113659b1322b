//! Sentinel replies name nodes by address; a client that follows them must
//! stay behind the proxy, so every address of a proxied upstream is swapped
//! for this worker's proxy address for it. Pure.
//!
//! Three shapes carry an address: a pair `[ip, port]`
//! (`SENTINEL get-master-addr-by-name`), a field list with `ip` and `port`
//! (`SENTINEL masters`, `master`, `replicas`, `sentinels`, RESP2 flat or
//! RESP3 map), and a message line with `ip port` among its words
//! (`+switch-master <name> <old ip> <old port> <new ip> <new port>`).

use crate::resp::Value;
use std::collections::HashMap;

/// Upstream `(ip, port)` → the proxy's `(ip, port)` for it, as text.
pub type Addresses = HashMap<(String, String), (String, String)>;

/// Rewrites every address in `v` that `map` knows; says whether it did.
pub fn rewrite(v: &mut Value, map: &Addresses) -> bool {
    match v {
        Value::Items(_, Some(items)) => {
            let mut changed = pair(items, map) || fields(items, map);
            for item in items.iter_mut() {
                changed |= rewrite(item, map);
            }
            changed
        }
        Value::Bulk(_, Some(bytes)) | Value::Line(b'+', bytes) => words(bytes, map),
        _ => false,
    }
}

fn text(v: &Value) -> Option<String> {
    v.text().map(|b| String::from_utf8_lossy(b).into_owned())
}

fn set(v: &mut Value, s: &str) {
    match v {
        Value::Bulk(_, b) => *b = Some(s.as_bytes().to_vec()),
        Value::Line(_, b) => *b = s.as_bytes().to_vec(),
        Value::Items(..) => {}
    }
}

/// `[ip, port]`.
fn pair(items: &mut [Value], map: &Addresses) -> bool {
    let [ip, port] = items else { return false };
    let (Some(i), Some(p)) = (text(ip), text(port)) else {
        return false;
    };
    match map.get(&(i, p)) {
        Some((ni, np)) => {
            set(ip, ni);
            set(port, np);
            true
        }
        None => false,
    }
}

/// `[…, "ip", ip, …, "port", port, …]`.
fn fields(items: &mut [Value], map: &Addresses) -> bool {
    if !items.len().is_multiple_of(2) {
        return false;
    }
    let find = |items: &[Value], name: &str| {
        (0..items.len())
            .step_by(2)
            .find(|i| text(&items[*i]).as_deref() == Some(name))
            .map(|i| i + 1)
    };
    let (Some(ip), Some(port)) = (find(items, "ip"), find(items, "port")) else {
        return false;
    };
    let (Some(i), Some(p)) = (text(&items[ip]), text(&items[port])) else {
        return false;
    };
    match map.get(&(i, p)) {
        Some((ni, np)) => {
            set(&mut items[ip], ni);
            set(&mut items[port], np);
            true
        }
        None => false,
    }
}

/// `… ip port …` inside one line of words (pub/sub messages).
fn words(bytes: &mut Vec<u8>, map: &Addresses) -> bool {
    let line = String::from_utf8_lossy(bytes).into_owned();
    let mut words: Vec<String> = line.split(' ').map(str::to_string).collect();
    if words.len() < 3 {
        return false;
    }
    let mut changed = false;
    for i in 0..words.len() - 1 {
        if let Some((ni, np)) = map.get(&(words[i].clone(), words[i + 1].clone())) {
            words[i] = ni.clone();
            words[i + 1] = np.clone();
            changed = true;
        }
    }
    if changed {
        *bytes = words.join(" ").into_bytes();
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::parse;

    fn map() -> Addresses {
        [(
            ("127.0.0.11".into(), "6379".into()),
            ("127.0.0.51".into(), "40001".into()),
        )]
        .into()
    }

    fn rewritten(frame: &[u8]) -> Vec<u8> {
        let mut v = parse(frame).unwrap();
        rewrite(&mut v, &map());
        let mut out = Vec::new();
        v.encode(&mut out);
        out
    }

    #[test]
    fn the_primary_s_address_points_at_the_proxy() {
        assert_eq!(
            rewritten(b"*2\r\n$10\r\n127.0.0.11\r\n$4\r\n6379\r\n"),
            b"*2\r\n$10\r\n127.0.0.51\r\n$5\r\n40001\r\n"
        );
    }

    #[test]
    fn field_lists_and_switch_messages_are_rewritten_too() {
        let masters = b"*1\r\n*6\r\n$4\r\nname\r\n$2\r\nmm\r\n$2\r\nip\r\n$10\r\n127.0.0.11\r\n$4\r\nport\r\n$4\r\n6379\r\n";
        let out = String::from_utf8(rewritten(masters)).unwrap();
        assert!(out.contains("127.0.0.51") && out.contains("40001"), "{out}");
        let switch = b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$40\r\nmm 127.0.0.12 6380 127.0.0.11 6379 extra\r\n";
        let out = String::from_utf8(rewritten(switch)).unwrap();
        assert!(
            out.contains("mm 127.0.0.12 6380 127.0.0.51 40001 extra"),
            "{out}"
        );
    }

    #[test]
    fn an_unknown_address_is_left_alone() {
        let frame = b"*2\r\n$9\r\n127.0.0.9\r\n$4\r\n6379\r\n";
        assert_eq!(rewritten(frame), frame);
    }
}
