//! A fast path for the history line the harness writes: flat, compact JSON
//! whose strings need no unescaping and whose `value` is `null` or a whole
//! number. Parsing it field by field is several times quicker than serde's
//! derived `Event` deserializer, which reads a 1 M-event history in about
//! half the time the whole check takes.
//!
//! It accepts only what serde would parse to the same [`Event`]; anything
//! else (whitespace between tokens, escapes, other values, unknown or
//! repeated keys, a missing field) gives `None`, and the caller parses the
//! line with serde, which also gives the error a bad line deserves.

use crate::{Event, OpType, Process};
use serde_json::Value;

/// The event on `line` (its newline may follow), if it has the common shape.
pub fn event(line: &[u8]) -> Option<Event> {
    let mut s = Scanner { line, at: 0 };
    s.byte(b'{')?;
    let mut fields = Fields::default();
    if s.peek()? != b'}' {
        loop {
            let key = s.raw()?;
            s.byte(b':')?;
            fields.read(key, &mut s)?;
            match s.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
    } else {
        s.at += 1;
    }
    // serde allows only whitespace after the object.
    let rest = &line[s.at..];
    if !rest
        .iter()
        .all(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
    {
        return None;
    }
    fields.event()
}

/// Each field seen so far; `Some` once read (so a repeated key is noticed,
/// as serde refuses it). Optional ones read as `null` are `Some(None)`.
#[derive(Default)]
struct Fields {
    index: Option<u64>,
    time: Option<u64>,
    process: Option<Process>,
    kind: Option<OpType>,
    f: Option<String>,
    value: Option<Value>,
    token: Option<Option<String>>,
    fence: Option<Option<u64>>,
    error: Option<Option<String>>,
    node: Option<Option<String>>,
}

impl Fields {
    fn read(&mut self, key: &[u8], s: &mut Scanner) -> Option<()> {
        match key {
            b"index" => once(&mut self.index, s.number()?),
            b"time" => once(&mut self.time, s.number()?),
            b"process" => once(&mut self.process, s.process()?),
            b"type" => once(&mut self.kind, s.kind()?),
            b"f" => once(&mut self.f, s.owned()?),
            b"value" => once(&mut self.value, s.value()?),
            b"token" => once(&mut self.token, s.nullable(Scanner::owned)?),
            b"fence" => once(&mut self.fence, s.nullable(Scanner::number)?),
            b"error" => once(&mut self.error, s.nullable(Scanner::owned)?),
            b"node" => once(&mut self.node, s.nullable(Scanner::owned)?),
            _ => None,
        }
    }

    fn event(self) -> Option<Event> {
        Some(Event {
            index: self.index.unwrap_or_default(),
            time: self.time?,
            process: self.process?,
            kind: self.kind?,
            f: self.f?,
            value: self.value.unwrap_or_default(),
            token: self.token.flatten(),
            fence: self.fence.flatten(),
            error: self.error.flatten(),
            node: self.node.flatten(),
        })
    }
}

/// Sets a field not yet seen.
fn once<T>(field: &mut Option<T>, value: T) -> Option<()> {
    match field {
        Some(_) => None,
        None => {
            *field = Some(value);
            Some(())
        }
    }
}

struct Scanner<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.line.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// The bytes of a string with no escapes and no control characters.
    fn raw(&mut self) -> Option<&'a [u8]> {
        self.byte(b'"')?;
        let rest = &self.line[self.at..];
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        self.at += len + 1;
        Some(&rest[..len])
    }

    /// Such a string, if it is valid UTF-8.
    fn string(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.raw()?).ok()
    }

    fn owned(&mut self) -> Option<String> {
        self.string().map(str::to_owned)
    }

    /// A JSON number that is a whole, non-negative `u64`: digits, no
    /// leading zero, no fraction or exponent.
    fn number(&mut self) -> Option<u64> {
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        let leading_zero = digits > 1 && self.line[start] == b'0';
        let more = matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        (digits > 0 && !leading_zero && !more).then_some(n)
    }

    fn null(&mut self) -> Option<()> {
        let rest = self.line.get(self.at..self.at + 4)?;
        (rest == b"null").then(|| self.at += 4)
    }

    fn nullable<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.peek()? {
            b'n' => self.null().map(|()| None),
            _ => read(self).map(Some),
        }
    }

    fn process(&mut self) -> Option<Process> {
        match self.peek()? {
            b'"' => self.owned().map(Process::Named),
            _ => self.number().map(Process::Client),
        }
    }

    fn kind(&mut self) -> Option<OpType> {
        match self.raw()? {
            b"invoke" => Some(OpType::Invoke),
            b"ok" => Some(OpType::Ok),
            b"fail" => Some(OpType::Fail),
            b"info" => Some(OpType::Info),
            _ => None,
        }
    }

    /// `null` or a whole non-negative number: what a lock op or a counter
    /// op carries.
    fn value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'n' => self.null().map(|()| Value::Null),
            _ => self.number().map(Value::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::valid_history;
    use proptest::prelude::*;

    /// What serde makes of `line`, as the fast path must.
    fn serde(line: &str) -> Option<Event> {
        serde_json::from_str(line).ok()
    }

    #[test]
    fn every_line_the_harness_writes_is_read_as_serde_reads_it() {
        let mut h = valid_history(3, 5, 200, 100);
        h.events[3].error = Some("connection-lost: reset ünïcode".into());
        h.events[4].node = Some("n1".into());
        h.events[5].value = u64::MAX.into();
        for e in &h.events {
            let line = serde_json::to_string(e).unwrap();
            assert_eq!(event(line.as_bytes()).as_ref(), Some(e), "{line}");
        }
    }

    #[test]
    fn what_it_does_not_read_is_left_to_serde() {
        for line in [
            r#"{"index":1,"time":2,"process":"nemesis","type":"info","f":"start-pause","value":{"pid":1}}"#,
            r#"{"time":2, "process":1,"type":"ok","f":"read"}"#,
            r#"{"time":2,"process":1,"type":"ok","f":"re\"ad"}"#,
            r#"{"time":2,"process":1,"type":"ok","f":"read","value":-1}"#,
            r#"{"time":2,"process":1,"type":"ok","f":"read","value":1.5}"#,
            r#"{"time":2,"process":1,"type":"ok","f":"read","extra":1}"#,
        ] {
            assert_eq!(event(line.as_bytes()), None, "{line}");
            assert!(serde(line).is_some(), "{line}");
        }
        for bad in [
            r#"{"time":2,"process":1,"type":"ok"}"#,
            r#"{"time":2,"time":3,"process":1,"type":"ok","f":"read"}"#,
            r#"{"time":02,"process":1,"type":"ok","f":"read"}"#,
            r#"{"time":18446744073709551616,"process":1,"type":"ok","f":"read"}"#,
            r#"{"time":2,"process":1,"type":"done","f":"read"}"#,
            r#"{"time":2,"process":1,"type":"ok","f":"read"} x"#,
            r#"{"time":2,"process":1,"type":"ok","f":"read","index":null}"#,
            "{\"time\":2,\"process\":1,\"type\":\"ok\",\"f\":\"re\tad\"}",
            r#"{"time":2,"process":1,"type":"ok","f":"read""#,
            "",
        ] {
            assert_eq!(event(bad.as_bytes()), None, "{bad}");
            assert_eq!(serde(bad), None, "{bad}");
        }
    }

    fn events() -> impl Strategy<Value = Event> {
        let process = prop_oneof![
            any::<u64>().prop_map(Process::Client),
            "[a-z]{1,8}".prop_map(Process::Named),
        ];
        let kind =
            prop::sample::select(vec![OpType::Invoke, OpType::Ok, OpType::Fail, OpType::Info]);
        let value = prop_oneof![Just(Value::Null), any::<u64>().prop_map(Value::from)];
        let text = || prop::option::of("[ -~é]{0,12}");
        (
            (any::<u64>(), any::<u64>(), process, kind, "[a-z-]{1,8}"),
            (
                value,
                text(),
                prop::option::of(any::<u64>()),
                text(),
                text(),
            ),
        )
            .prop_map(|((index, time, process, kind, f), rest)| {
                let (value, token, fence, error, node) = rest;
                Event {
                    index,
                    time,
                    process,
                    kind,
                    f,
                    value,
                    token,
                    fence,
                    error,
                    node,
                }
            })
    }

    proptest! {
        /// What the harness writes is read as written, unless a string
        /// needs escapes; and whatever line the fast path reads, even one
        /// with a byte changed, serde reads the same.
        #[test]
        fn it_never_disagrees_with_serde(
            e in events(),
            at in any::<prop::sample::Index>(),
            byte in prop::sample::select(b"\"\\ 0-}n,1e.:{\xc3\n".to_vec()),
            edit in 0..4u8,
        ) {
            let line = serde_json::to_vec(&e).unwrap();
            if !line.contains(&b'\\') {
                prop_assert_eq!(event(&line), Some(e.clone()));
            }
            let mut line = line;
            let at = at.index(line.len());
            match edit {
                0 => line[at] = byte,
                1 => line.insert(at, byte),
                2 => {
                    line.remove(at);
                }
                _ => {}
            }
            if let Some(scanned) = event(&line) {
                let serde = serde_json::from_slice::<Event>(&line).ok();
                prop_assert_eq!(serde, Some(scanned), "{}", String::from_utf8_lossy(&line));
            }
        }
    }
}
