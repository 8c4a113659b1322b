//! RESP frames, as much of RESP2 and RESP3 as a proxy needs: where a frame
//! ends (so pipelined requests and replies are taken one at a time, in
//! order), a request's words, whether a reply grants, and a reply as a tree
//! for the few replies the proxy rewrites. Pure: no sockets here.

/// Frames nest no deeper than this; deeper input is treated as garbage
/// rather than risking the stack.
const MAX_DEPTH: usize = 32;

/// Bytes that are not RESP: the proxy stops parsing that connection and
/// forwards it as raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Garbage(pub String);

/// The length of the first complete frame in `buf`, `None` if more bytes
/// are needed. A request may also be an inline command (a line of words).
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, Garbage> {
    match buf.first() {
        None => Ok(None),
        Some(b) if is_type(*b) => skip(buf, 0, 0),
        // Inline command: everything up to the newline.
        Some(_) => Ok(memchr(b'\n', buf).map(|i| i + 1)),
    }
}

fn is_type(b: u8) -> bool {
    matches!(
        b,
        b'+' | b'-'
            | b':'
            | b','
            | b'_'
            | b'#'
            | b'('
            | b'$'
            | b'!'
            | b'='
            | b'*'
            | b'~'
            | b'>'
            | b'%'
            | b'|'
    )
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|b| *b == needle)
}

/// The end of the `\r\n`-terminated line starting at `at`: (content end, next).
fn line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
    let nl = memchr(b'\n', &buf[at..])? + at;
    let end = if nl > at && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    Some((end, nl + 1))
}

fn number(bytes: &[u8]) -> Result<i64, Garbage> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Garbage(format!("bad length {:?}", String::from_utf8_lossy(bytes))))
}

/// The position right after the frame that starts at `at`.
fn skip(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, Garbage> {
    if depth > MAX_DEPTH {
        return Err(Garbage("frames nested too deep".into()));
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    if !is_type(kind) {
        return Err(Garbage(format!("unknown frame type {:?}", kind as char)));
    }
    let Some((end, next)) = line(buf, at + 1) else {
        return Ok(None);
    };
    match kind {
        b'$' | b'!' | b'=' => {
            let n = number(&buf[at + 1..end])?;
            if n < 0 {
                return Ok(Some(next));
            }
            let after = next + n as usize + 2;
            Ok((buf.len() >= after).then_some(after))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number(&buf[at + 1..end])?;
            if n < 0 {
                return Ok(Some(next));
            }
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut pos = next;
            for _ in 0..items {
                match skip(buf, pos, depth + 1)? {
                    Some(p) => pos = p,
                    None => return Ok(None),
                }
            }
            // An attribute annotates the frame that follows it.
            if kind == b'|' {
                return skip(buf, pos, depth + 1);
            }
            Ok(Some(pos))
        }
        _ => Ok(Some(next)),
    }
}

/// A complete frame as a tree (for rewriting and judging replies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `+ - : , _ # (`: the type byte and the line.
    Line(u8, Vec<u8>),
    /// `$ ! =`: the type byte and the bytes (`None`: null).
    Bulk(u8, Option<Vec<u8>>),
    /// `* ~ > % |`: the type byte and the items (a map's keys and values
    /// alternate; `None`: null). An attribute is followed by its frame.
    Items(u8, Option<Vec<Value>>),
}

/// Parses one complete frame (as found by [`frame_len`]).
pub fn parse(frame: &[u8]) -> Result<Value, Garbage> {
    let (v, _) = value(frame, 0, 0)?;
    Ok(v)
}

fn value(buf: &[u8], at: usize, depth: usize) -> Result<(Value, usize), Garbage> {
    let short = || Garbage("frame cut short".into());
    if depth > MAX_DEPTH {
        return Err(Garbage("frames nested too deep".into()));
    }
    let kind = *buf.get(at).ok_or_else(short)?;
    let (end, next) = line(buf, at + 1).ok_or_else(short)?;
    match kind {
        b'$' | b'!' | b'=' => {
            let n = number(&buf[at + 1..end])?;
            if n < 0 {
                return Ok((Value::Bulk(kind, None), next));
            }
            let stop = next + n as usize;
            let bytes = buf.get(next..stop).ok_or_else(short)?.to_vec();
            Ok((Value::Bulk(kind, Some(bytes)), stop + 2))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number(&buf[at + 1..end])?;
            if n < 0 {
                return Ok((Value::Items(kind, None), next));
            }
            let count = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut items = Vec::with_capacity(count.min(1024) as usize);
            let mut pos = next;
            for _ in 0..count {
                let (v, p) = value(buf, pos, depth + 1)?;
                items.push(v);
                pos = p;
            }
            if kind == b'|' {
                let (v, p) = value(buf, pos, depth + 1)?;
                items.push(v);
                pos = p;
            }
            Ok((Value::Items(kind, Some(items)), pos))
        }
        k if is_type(k) => Ok((Value::Line(kind, buf[at + 1..end].to_vec()), next)),
        k => Err(Garbage(format!("unknown frame type {:?}", k as char))),
    }
}

impl Value {
    /// The frame's bytes on the wire.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Line(k, line) => {
                out.push(*k);
                out.extend_from_slice(line);
                out.extend_from_slice(b"\r\n");
            }
            Value::Bulk(k, None) | Value::Items(k, None) => {
                out.push(*k);
                out.extend_from_slice(b"-1\r\n");
            }
            Value::Bulk(k, Some(bytes)) => {
                out.push(*k);
                out.extend_from_slice(format!("{}\r\n", bytes.len()).as_bytes());
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            Value::Items(k, Some(items)) => {
                let mut n = items.len();
                if matches!(k, b'%' | b'|') {
                    // An attribute's last item is the frame it annotates.
                    n = if *k == b'|' { n - 1 } else { n } / 2;
                }
                out.push(*k);
                out.extend_from_slice(format!("{n}\r\n").as_bytes());
                items.iter().for_each(|v| v.encode(out));
            }
        }
    }

    /// The bytes of a string-like value (bulk, simple, verbatim).
    pub fn text(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(_, Some(b)) => Some(b),
            Value::Line(b'+', b) => Some(b),
            _ => None,
        }
    }
}

/// A request's words: an array of bulk strings, or an inline command.
/// `None` for anything else (a client may send garbage; Redis answers it).
pub fn words(frame: &[u8]) -> Option<Vec<Vec<u8>>> {
    if frame.first() != Some(&b'*') {
        let text = frame.strip_suffix(b"\n").unwrap_or(frame);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        return Some(
            text.split(|b| b.is_ascii_whitespace())
                .filter(|w| !w.is_empty())
                .map(<[u8]>::to_vec)
                .collect(),
        );
    }
    match parse(frame).ok()? {
        Value::Items(b'*', Some(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::Bulk(b'$', Some(b)) => Some(b),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Whether a reply says the command took the lock: not an error, not a
/// null, not a zero or false (`SET … NX` answers `+OK` or null, `SETNX` 1
/// or 0, and lock scripts a value or null/0).
pub fn grants(frame: &[u8]) -> bool {
    match parse(frame) {
        Ok(Value::Line(b'-', _)) | Ok(Value::Line(b'_', _)) => false,
        Ok(Value::Line(b':', n)) => n != b"0",
        Ok(Value::Line(b'#', b)) => b == b"t",
        Ok(Value::Bulk(b'!', _)) => false,
        Ok(Value::Bulk(_, b)) => b.is_some(),
        Ok(Value::Items(_, items)) => items.is_some_and(|i| !i.is_empty()),
        Ok(Value::Line(..)) => true,
        Err(_) => false,
    }
}

/// Whether a reply says the node did what was asked: as [`grants`], but an
/// array answers by its first item (the fenced storage script answers
/// `{1, value}` when it wrote and `{0, highest}` when it refused).
pub fn accepts(frame: &[u8]) -> bool {
    match parse(frame) {
        Ok(Value::Items(b'*', Some(items))) => match items.first() {
            Some(Value::Line(b':', n)) => n != b"0",
            _ => !items.is_empty(),
        },
        _ => grants(frame),
    }
}

/// A reply as one short line, for evidence.
pub fn brief(frame: &[u8]) -> String {
    const MAX: usize = 60;
    let text = String::from_utf8_lossy(frame).replace("\r\n", " ");
    let text = text.trim_end();
    match text.chars().count() > MAX {
        true => text.chars().take(MAX).collect::<String>() + "…",
        false => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pipelined_frames_are_split_one_at_a_time() {
        let buf = b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPI";
        assert_eq!(frame_len(buf), Ok(Some(14)));
        assert_eq!(frame_len(&buf[14..]), Ok(Some(20)));
        assert_eq!(frame_len(&buf[34..]), Ok(None), "a cut frame waits");
    }

    #[test]
    fn every_reply_type_has_an_end() {
        for (frame, len) in [
            (&b"+OK\r\n"[..], 5),
            (b"$-1\r\n", 5),
            (b"_\r\n", 3),
            (b":12\r\n", 5),
            (b"*-1\r\n", 5),
            (b"%1\r\n+a\r\n:1\r\n", 12),
            (b"|1\r\n+k\r\n+v\r\n:7\r\n", 16),
            (b">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n", 24),
            (b"=7\r\ntxt:abc\r\n", 13),
        ] {
            assert_eq!(frame_len(frame), Ok(Some(len)), "{frame:?}");
            let mut back = Vec::new();
            parse(frame).unwrap().encode(&mut back);
            assert_eq!(back, frame, "re-encodes as it came");
        }
    }

    #[test]
    fn a_request_is_its_words_arrays_and_inline_alike() {
        let set =
            b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n2000\r\n";
        let words = words(set).unwrap();
        assert_eq!(words[0], b"SET");
        assert_eq!(words.len(), 6);
        assert_eq!(
            super::words(b"PING now\r\n").unwrap(),
            vec![b"PING".to_vec(), b"now".to_vec()]
        );
    }

    #[test]
    fn grants_reads_every_lock_reply_shape() {
        assert!(grants(b"+OK\r\n"));
        assert!(!grants(b"$-1\r\n"));
        assert!(!grants(b"_\r\n"));
        assert!(grants(b":1\r\n"));
        assert!(!grants(b":0\r\n"));
        assert!(grants(b":17\r\n"), "a fenced grant is its fence");
        assert!(!grants(b"-ERR nope\r\n"));
        assert!(!grants(b"*-1\r\n"));
    }

    #[test]
    fn the_fenced_script_accepts_by_its_first_item() {
        assert!(accepts(b"*2\r\n:1\r\n:9\r\n"));
        assert!(!accepts(b"*2\r\n:0\r\n:34\r\n"), "a refused stale fence");
        assert!(accepts(b"+OK\r\n"));
        assert!(!accepts(b"-ERR x\r\n"));
        assert_eq!(brief(b"*2\r\n:0\r\n:34\r\n"), "*2 :0 :34");
    }

    #[test]
    fn garbage_is_named_not_looped_on() {
        assert!(frame_len(b"$x\r\n").is_err());
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert!(frame_len(deep.as_bytes()).is_err());
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            "[a-z0-9 ]{0,8}".prop_map(|s| Value::Line(b'+', s.into_bytes())),
            any::<i32>().prop_map(|n| Value::Line(b':', n.to_string().into_bytes())),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20))
                .prop_map(|b| Value::Bulk(b'$', b)),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            proptest::collection::vec(inner, 0..4).prop_map(|v| Value::Items(b'*', Some(v)))
        })
    }

    proptest! {
        #[test]
        fn any_stream_of_frames_splits_back_into_them(values in proptest::collection::vec(arb_value(), 1..6), cut in 0usize..200) {
            let frames: Vec<Vec<u8>> = values.iter().map(|v| { let mut b = Vec::new(); v.encode(&mut b); b }).collect();
            let stream: Vec<u8> = frames.concat();
            let mut at = 0;
            for (f, v) in frames.iter().zip(&values) {
                prop_assert_eq!(frame_len(&stream[at..]), Ok(Some(f.len())));
                prop_assert_eq!(&parse(&stream[at..at + f.len()]).unwrap(), v);
                at += f.len();
            }
            // Any prefix that ends inside a frame asks for more, never errs.
            let cut = cut % stream.len();
            let first = frames[0].len();
            if cut < first {
                prop_assert_eq!(frame_len(&stream[..cut]), Ok(None));
            }
        }
    }
}
