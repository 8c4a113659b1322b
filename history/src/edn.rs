//! Jepsen EDN histories: besides its own `history.jsonl`, `lockstorm check`
//! reads Jepsen's EDN histories (`--format edn`).
//!
//! [`from_edn`] accepts either one op map per line (Jepsen's `history.edn`) or
//! the whole history wrapped in `[ … ]`, with ops possibly spanning several
//! lines. Each op map such as
//! `{:type :invoke, :f :acquire, :process 3, :time 1532000123, :index 7, :value nil}`
//! becomes one [`Event`].
//!
//! The reader is a small, strict recursive-descent EDN parser written here
//! rather than a crates.io dependency: it must report the line each op starts
//! on, which the available crates do not give for the elements of a vector,
//! and it keeps the checker crate free of extra dependencies.
//!
//! Mapping:
//! - `:type` is one of `:invoke :ok :fail :info`; `:f` a keyword (or string),
//!   kept without the colon; `:process` an integer, or a keyword/string for a
//!   named actor (`:nemesis` → `Process::Named("nemesis")`); `:time` a
//!   non-negative integer (ns). These four are required.
//! - `:index` is optional; when missing (or `nil`) the op's 0-based position
//!   in the file is used.
//! - `:value` may be any EDN: `nil` → `null`; keywords, symbols and characters
//!   → strings (keywords without the colon); vectors, lists and sets → arrays;
//!   maps → objects whose keys are the keyword/string/symbol name, or the
//!   compact JSON text of any other key. Tagged literals (`#inst "…"`,
//!   `#jepsen.history.Op{…}`) keep only the inner value. `##NaN`/`##Inf`
//!   become `null` (JSON has no such numbers), integers beyond 64 bits become
//!   floats.
//! - `:error`: a keyword or string as is (`:timeout` → `"timeout"`); a vector
//!   or list has its elements rendered (keywords without colon, strings
//!   unquoted, anything else as compact JSON) and joined with single spaces
//!   (`[:not-held "x"]` → `"not-held x"`); any other value as compact JSON.
//! - `:node` (string or keyword), `:token` (string, keyword or integer) and
//!   `:fence` (non-negative integer) fill the matching fields; `nil` means
//!   absent. Every other key is ignored.
//!
//! Unlike [`History::from_jsonl`], a cut-off EDN file is an error (naming the
//! line where the unfinished op starts), not a silently truncated history.

use crate::{Event, History, OpType, ParseError, Process};
use serde_json::{Map, Number, Value};
use std::io::BufRead;

/// Deeper nesting than this is rejected instead of risking a stack overflow.
const MAX_DEPTH: usize = 200;

/// Reads a Jepsen EDN history (see the module docs for the accepted shape).
///
/// Errors are [`ParseError::Line`] naming the 1-based line where the offending
/// op starts (if the syntax error itself is on a later line, the message says
/// which), or [`ParseError::Io`]. Never panics on malformed input.
pub fn from_edn(mut reader: impl BufRead) -> Result<History, ParseError> {
    let (mut bytes, mut line, mut n) = (Vec::new(), Vec::new(), 0);
    while crate::next_line(&mut reader, &mut line, n + 1)? {
        n += 1;
        bytes.extend_from_slice(&line);
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut p = Parser {
        text: &text,
        src: text.as_bytes(),
        pos: 0,
        line: 1,
    };
    let mut events = Vec::new();

    p.skip(0).map_err(|e| e.here())?;
    if p.peek() == Some(b'[') {
        let open = p.line;
        p.pos += 1;
        loop {
            p.skip(0).map_err(|e| e.here())?;
            match p.peek() {
                None => {
                    return Err(ParseError::Line {
                        line: p.line,
                        message: format!(
                            "unexpected end of input: the `[` opened on line {open} is never \
                             closed (truncated file?)"
                        ),
                    })
                }
                Some(b']') => {
                    p.pos += 1;
                    break;
                }
                Some(_) => read_op(&mut p, &mut events)?,
            }
        }
        p.skip(0).map_err(|e| e.here())?;
        if p.peek().is_some() {
            return Err(ParseError::Line {
                line: p.line,
                message: format!("unexpected input after the `]` that closed line {open}'s `[`"),
            });
        }
    } else {
        while p.peek().is_some() {
            read_op(&mut p, &mut events)?;
            p.skip(0).map_err(|e| e.here())?;
        }
    }
    Ok(History::new(events))
}

/// Parses the form at the cursor as an op and appends it.
fn read_op(p: &mut Parser<'_>, events: &mut Vec<Event>) -> Result<(), ParseError> {
    let start = p.line;
    let form = p.form(0).map_err(|e| e.op_error(start))?;
    let event = to_event(form, events.len() as u64).map_err(|message| ParseError::Line {
        line: start,
        message,
    })?;
    events.push(event);
    Ok(())
}

/// A parsed EDN value (tagged literals already reduced to their inner value).
#[derive(Clone, Debug, PartialEq)]
enum Edn {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Keyword(String),
    Symbol(String),
    Char(char),
    Vector(Vec<Edn>),
    List(Vec<Edn>),
    Set(Vec<Edn>),
    Map(Vec<(Edn, Edn)>),
}

impl Edn {
    fn describe(&self) -> String {
        match self {
            Edn::Nil => "nil".into(),
            Edn::Bool(b) => b.to_string(),
            Edn::Int(n) => format!("the number {n}"),
            Edn::Float(x) => format!("the number {x}"),
            Edn::Str(s) => format!("the string {s:?}"),
            Edn::Keyword(k) => format!("the keyword :{k}"),
            Edn::Symbol(s) => format!("the symbol `{s}`"),
            Edn::Char(c) => format!("the character {c:?}"),
            Edn::Vector(_) => "a vector".into(),
            Edn::List(_) => "a list".into(),
            Edn::Set(_) => "a set".into(),
            Edn::Map(_) => "a map".into(),
        }
    }

    /// The name of a keyword, string or symbol.
    fn name(&self) -> Option<&str> {
        match self {
            Edn::Str(s) | Edn::Keyword(s) | Edn::Symbol(s) => Some(s),
            _ => None,
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match self {
            Edn::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        }
    }

    /// Names unquoted, anything else as compact JSON.
    fn text(&self) -> String {
        match self.name() {
            Some(s) => s.to_owned(),
            None => to_json(self).to_string(),
        }
    }
}

fn to_json(e: &Edn) -> Value {
    match e {
        Edn::Nil => Value::Null,
        Edn::Bool(b) => Value::Bool(*b),
        Edn::Int(n) => {
            if let Ok(i) = i64::try_from(*n) {
                Value::from(i)
            } else if let Ok(u) = u64::try_from(*n) {
                Value::from(u)
            } else {
                float(*n as f64)
            }
        }
        Edn::Float(x) => float(*x),
        Edn::Str(s) | Edn::Keyword(s) | Edn::Symbol(s) => Value::String(s.clone()),
        Edn::Char(c) => Value::String(c.to_string()),
        Edn::Vector(items) | Edn::List(items) | Edn::Set(items) => {
            Value::Array(items.iter().map(to_json).collect())
        }
        Edn::Map(pairs) => Value::Object(
            pairs
                .iter()
                .map(|(k, v)| (k.text(), to_json(v)))
                .collect::<Map<_, _>>(),
        ),
    }
}

fn float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// Turns one op map into an event; `position` is its 0-based place in the file.
fn to_event(form: Edn, position: u64) -> Result<Event, String> {
    let Edn::Map(pairs) = form else {
        return Err(format!(
            "expected an op map like {{:type :invoke, :f :acquire, …}}, found {}",
            form.describe()
        ));
    };
    const KEYS: [&str; 10] = [
        "type", "f", "process", "time", "index", "value", "error", "node", "token", "fence",
    ];
    let mut fields: [Option<Edn>; 10] = Default::default();
    for (k, v) in pairs {
        let Edn::Keyword(name) = &k else { continue };
        let Some(slot) = KEYS.iter().position(|key| key == name) else {
            continue;
        };
        if fields[slot].is_some() {
            return Err(format!("duplicate key :{name}"));
        }
        fields[slot] = Some(v);
    }
    let [kind, f, process, time, index, value, error, node, token, fence] = fields;
    let present = |v: Option<Edn>| v.filter(|v| *v != Edn::Nil);

    let kind = match present(kind).as_ref().map(|v| (v.name(), v)) {
        None => return Err("missing :type".into()),
        Some((Some("invoke"), _)) => OpType::Invoke,
        Some((Some("ok"), _)) => OpType::Ok,
        Some((Some("fail"), _)) => OpType::Fail,
        Some((Some("info"), _)) => OpType::Info,
        Some((_, v)) => {
            return Err(format!(
                ":type must be :invoke, :ok, :fail or :info, found {}",
                v.describe()
            ))
        }
    };
    let f = match present(f) {
        None => return Err("missing :f".into()),
        Some(v) => match v.name() {
            Some(name) => name.to_owned(),
            None => return Err(format!(":f must be a keyword, found {}", v.describe())),
        },
    };
    let process = match present(process) {
        None => return Err("missing :process".into()),
        Some(v) => match (v.as_u64(), v.name()) {
            (Some(id), _) => Process::Client(id),
            (_, Some(name)) => Process::Named(name.to_owned()),
            _ => {
                return Err(format!(
                    ":process must be a non-negative integer or a keyword, found {}",
                    v.describe()
                ))
            }
        },
    };
    let time = match present(time) {
        None => return Err("missing :time".into()),
        Some(v) => v.as_u64().ok_or_else(|| {
            format!(
                ":time must be a non-negative integer (ns), found {}",
                v.describe()
            )
        })?,
    };
    let index = match present(index) {
        None => position,
        Some(v) => v.as_u64().ok_or_else(|| {
            format!(
                ":index must be a non-negative integer, found {}",
                v.describe()
            )
        })?,
    };
    let mut event = Event::new(time, process, kind, f);
    event.index = index;
    event.value = value.as_ref().map_or(Value::Null, to_json);
    event.error = present(error).map(|v| match v {
        Edn::Vector(items) | Edn::List(items) => {
            items.iter().map(Edn::text).collect::<Vec<_>>().join(" ")
        }
        other => other.text(),
    });
    event.node =
        match present(node) {
            None => None,
            Some(v) => Some(v.name().map(str::to_owned).ok_or_else(|| {
                format!(":node must be a string or keyword, found {}", v.describe())
            })?),
        };
    event.token = match present(token) {
        None => None,
        Some(v @ Edn::Int(_)) => Some(v.text()),
        Some(v) => Some(
            v.name()
                .map(str::to_owned)
                .ok_or_else(|| format!(":token must be a string, found {}", v.describe()))?,
        ),
    };
    event.fence = match present(fence) {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            format!(
                ":fence must be a non-negative integer, found {}",
                v.describe()
            )
        })?),
    };
    Ok(event)
}

/// A syntax error at `line`.
struct SyntaxError {
    line: usize,
    message: String,
}

impl SyntaxError {
    /// Reported against its own line (outside any op).
    fn here(self) -> ParseError {
        let line = self.line;
        self.op_error(line)
    }

    /// Reported against the line where the op containing it starts.
    fn op_error(self, start: usize) -> ParseError {
        let message = if self.line == start {
            self.message
        } else {
            format!("{} (at line {})", self.message, self.line)
        };
        ParseError::Line {
            line: start,
            message,
        }
    }
}

struct Parser<'a> {
    text: &'a str,
    src: &'a [u8],
    pos: usize,
    line: usize,
}

fn is_delimiter(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b',' | b'(' | b')' | b'[' | b']' | b'{' | b'}' | b'"' | b';'
        )
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.src.get(self.pos + ahead).copied()
    }

    fn err<T>(&self, message: impl Into<String>) -> Result<T, SyntaxError> {
        Err(SyntaxError {
            line: self.line,
            message: message.into(),
        })
    }

    /// Skips whitespace, commas, `;` comments and `#_` discarded forms.
    fn skip(&mut self, depth: usize) -> Result<(), SyntaxError> {
        while let Some(b) = self.peek() {
            match b {
                b'\n' => {
                    self.line += 1;
                    self.pos += 1;
                }
                b',' => self.pos += 1,
                b if b.is_ascii_whitespace() => self.pos += 1,
                b';' => {
                    while !matches!(self.peek(), None | Some(b'\n')) {
                        self.pos += 1;
                    }
                }
                b'#' if self.peek_at(1) == Some(b'_') => {
                    self.pos += 2;
                    self.form(depth + 1)?;
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// The text up to the next delimiter.
    fn token(&mut self) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(|b| !is_delimiter(b)) {
            self.pos += 1;
        }
        // Delimiters are ASCII, so both ends are char boundaries.
        self.text.get(start..self.pos).unwrap_or("")
    }

    /// One form, after any skippable input.
    fn form(&mut self, depth: usize) -> Result<Edn, SyntaxError> {
        if depth > MAX_DEPTH {
            return self.err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        self.skip(depth)?;
        let Some(b) = self.peek() else {
            return self.err("unexpected end of input (truncated file?)");
        };
        match b {
            b'(' => Ok(Edn::List(self.seq(b')', depth)?)),
            b'[' => Ok(Edn::Vector(self.seq(b']', depth)?)),
            b'{' => {
                let line = self.line;
                let items = self.seq(b'}', depth)?;
                if items.len() % 2 != 0 {
                    return Err(SyntaxError {
                        line,
                        message: "map literal has an odd number of forms".into(),
                    });
                }
                let mut items = items.into_iter();
                let mut pairs = Vec::new();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
                Ok(Edn::Map(pairs))
            }
            b')' | b']' | b'}' => self.err(format!("unexpected `{}`", b as char)),
            b'"' => self.string(),
            b'\\' => self.character(),
            b'#' => self.dispatch(depth),
            b':' => {
                self.pos += 1;
                let name = self.token();
                if name.is_empty() || name.starts_with(':') {
                    return self.err(format!("invalid keyword `:{name}`"));
                }
                Ok(Edn::Keyword(name.to_owned()))
            }
            b'\'' | b'`' | b'~' | b'@' | b'^' => {
                self.err(format!("`{}` is not valid EDN", b as char))
            }
            _ => {
                let token = self.token();
                if token.is_empty() {
                    return self.err(format!("unexpected character `{}`", b as char));
                }
                self.atom(token)
            }
        }
    }

    /// The forms up to `close`; the cursor is on the opening bracket.
    fn seq(&mut self, close: u8, depth: usize) -> Result<Vec<Edn>, SyntaxError> {
        let (open, line) = (self.src[self.pos] as char, self.line);
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip(depth + 1)?;
            match self.peek() {
                None => {
                    return self.err(format!(
                        "unexpected end of input: `{open}` opened on line {line} is never \
                         closed (truncated file?)"
                    ))
                }
                Some(b) if b == close => {
                    self.pos += 1;
                    return Ok(items);
                }
                Some(b @ (b')' | b']' | b'}')) => {
                    return self.err(format!(
                        "`{}` does not match the `{open}` opened on line {line}",
                        b as char
                    ))
                }
                Some(_) => items.push(self.form(depth + 1)?),
            }
        }
    }

    fn string(&mut self) -> Result<Edn, SyntaxError> {
        let line = self.line;
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return self.err(format!(
                    "unterminated string starting on line {line} (truncated file?)"
                ));
            };
            self.pos += 1;
            match b {
                b'"' => break,
                b'\n' => {
                    self.line += 1;
                    out.push(b);
                }
                b'\\' => {
                    let c = match self.peek() {
                        Some(b'n') => '\n',
                        Some(b't') => '\t',
                        Some(b'r') => '\r',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'u') => {
                            let hex = self.src.get(self.pos + 1..self.pos + 5);
                            let c = hex
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .and_then(char::from_u32);
                            match c {
                                Some(c) => {
                                    self.pos += 4;
                                    c
                                }
                                None => return self.err("invalid \\u escape in string"),
                            }
                        }
                        Some(other) if other.is_ascii_graphic() => {
                            return self
                                .err(format!("invalid escape `\\{}` in string", other as char))
                        }
                        _ => return self.err("invalid escape in string"),
                    };
                    self.pos += 1;
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                _ => out.push(b),
            }
        }
        Ok(Edn::Str(String::from_utf8_lossy(&out).into_owned()))
    }

    /// `\c`, `\newline`, `\u0041`, …
    fn character(&mut self) -> Result<Edn, SyntaxError> {
        self.pos += 1;
        // The first character is taken even if it is a delimiter (`\(`, `\ `).
        let rest = self.text.get(self.pos..).unwrap_or("");
        let Some(first) = rest.chars().next() else {
            return self.err("unexpected end of input after `\\`");
        };
        self.pos += first.len_utf8();
        if first == '\n' {
            self.line += 1;
        }
        let more = if first.is_ascii() && is_delimiter(first as u8) {
            ""
        } else {
            self.token()
        };
        let c = match (first, more) {
            (c, "") => Some(c),
            ('n', "ewline") => Some('\n'),
            ('s', "pace") => Some(' '),
            ('t', "ab") => Some('\t'),
            ('r', "eturn") => Some('\r'),
            ('f', "ormfeed") => Some('\u{c}'),
            ('b', "ackspace") => Some('\u{8}'),
            ('u', hex) if hex.len() == 4 => {
                u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)
            }
            _ => None,
        };
        match c {
            Some(c) => Ok(Edn::Char(c)),
            None => self.err(format!("invalid character literal `\\{first}{more}`")),
        }
    }

    /// `#{…}` sets, `##Inf`-style values and `#tag form` tagged literals.
    fn dispatch(&mut self, depth: usize) -> Result<Edn, SyntaxError> {
        match self.peek_at(1) {
            Some(b'{') => {
                self.pos += 1;
                Ok(Edn::Set(self.seq(b'}', depth)?))
            }
            Some(b'#') => {
                self.pos += 2;
                match self.token() {
                    "Inf" => Ok(Edn::Float(f64::INFINITY)),
                    "-Inf" => Ok(Edn::Float(f64::NEG_INFINITY)),
                    "NaN" => Ok(Edn::Float(f64::NAN)),
                    other => self.err(format!("unknown symbolic value `##{other}`")),
                }
            }
            Some(b) if b.is_ascii_alphabetic() => {
                self.pos += 1;
                let tag = self.token();
                let line = self.line;
                self.skip(depth)?;
                if self.peek().is_none() {
                    return Err(SyntaxError {
                        line,
                        message: format!("tag `#{tag}` has no value (truncated file?)"),
                    });
                }
                // Only the inner value is kept: `#inst "…"` is its string.
                self.form(depth + 1)
            }
            _ => self.err("invalid `#` dispatch"),
        }
    }

    /// A number, `nil`, `true`, `false` or a symbol.
    fn atom(&self, token: &str) -> Result<Edn, SyntaxError> {
        let bytes = token.as_bytes();
        let numeric = bytes[0].is_ascii_digit()
            || (matches!(bytes[0], b'+' | b'-') && bytes.get(1).is_some_and(u8::is_ascii_digit));
        if !numeric {
            return Ok(match token {
                "nil" => Edn::Nil,
                "true" => Edn::Bool(true),
                "false" => Edn::Bool(false),
                _ => Edn::Symbol(token.to_owned()),
            });
        }
        let invalid = || SyntaxError {
            line: self.line,
            message: format!("invalid number `{token}`"),
        };
        let digits = token.strip_prefix('+').unwrap_or(token);
        if let Some(int) = digits.strip_suffix('N') {
            return int
                .parse::<i128>()
                .map(Edn::Int)
                .or_else(|_| int.parse::<f64>().map(Edn::Float))
                .map_err(|_| invalid());
        }
        if let Some(dec) = digits.strip_suffix('M') {
            return dec.parse::<f64>().map(Edn::Float).map_err(|_| invalid());
        }
        if let Some((n, d)) = digits.split_once('/') {
            let (n, d) = (n.parse::<f64>(), d.parse::<f64>());
            return match (n, d) {
                (Ok(n), Ok(d)) if d != 0.0 => Ok(Edn::Float(n / d)),
                _ => Err(invalid()),
            };
        }
        if digits.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
            if let Ok(n) = digits.parse::<i128>() {
                return Ok(Edn::Int(n));
            }
        }
        if digits.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
            || digits.bytes().all(|b| b.is_ascii_digit() || b == b'-')
        {
            // Floats, and integers too long even for i128.
            if let Ok(x) = digits.parse::<f64>() {
                if x.is_finite() {
                    return Ok(Edn::Float(x));
                }
            }
        }
        Err(invalid())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Result<History, ParseError> {
        from_edn(text.as_bytes())
    }

    fn err_line(text: &str) -> (usize, String) {
        match parse(text) {
            Err(ParseError::Line { line, message }) => (line, message),
            other => panic!("expected a line error for {text:?}, got {other:?}"),
        }
    }

    const LINES: &str = r#"{:type :invoke, :f :acquire, :process 3, :time 1532000123, :index 7, :value nil}
{:type :ok, :f :acquire, :process 3, :time 1532980044, :index 8, :value nil, :token "3-9f2c41", :fence 34, :node "n1"}
{:type :info, :f :start-pause, :process :nemesis, :time 1533100100, :index 9, :value {:target "worker-3", :pid 4242}}
{:type :invoke, :f :write, :process 3, :time 1533200000, :index 10, :value -5}
{:type :fail, :f :write, :process 3, :time 1533300000, :index 11, :value -5, :error :stale-fence}
"#;

    /// The same ops, wrapped in a vector, spread over lines, with comments,
    /// no commas, no `:index`, a `#inst` and extra keys Jepsen adds.
    const WRAPPED: &str = r#"; a Jepsen history
[{:type :invoke
  :f :acquire
  :process 3
  :time 1532000123
  :value nil}
 {:type :ok, :f :acquire, :process 3, :time 1532980044, :value nil,
  :token "3-9f2c41", :fence 34, :node "n1", :extra #{1 2}}
 {:type :info :f :start-pause :process :nemesis :time 1533100100
  :value {:target "worker-3" :pid 4242}} ; the fault
 #jepsen.history.Op{:type :invoke, :f :write, :process 3, :time 1533200000, :value -5}
 {:type :fail, :f :write, :process 3, :time 1533300000, :value -5, :error :stale-fence,
  :wall #inst "2018-07-19T11:35:23.000-00:00"}
]
"#;

    fn expected(first_index: u64) -> Vec<Event> {
        let mut events = vec![
            Event::new(1532000123, Process::Client(3), OpType::Invoke, "acquire"),
            Event::new(1532980044, Process::Client(3), OpType::Ok, "acquire")
                .with_token("3-9f2c41")
                .with_fence(Some(34))
                .with_node("n1"),
            Event::new(1533100100, Process::nemesis(), OpType::Info, "start-pause")
                .with_value(json!({"target": "worker-3", "pid": 4242})),
            Event::new(1533200000, Process::Client(3), OpType::Invoke, "write")
                .with_value(json!(-5)),
            Event::new(1533300000, Process::Client(3), OpType::Fail, "write")
                .with_value(json!(-5))
                .with_error("stale-fence"),
        ];
        for (i, e) in events.iter_mut().enumerate() {
            e.index = first_index + i as u64;
        }
        events
    }

    #[test]
    fn one_op_per_line_parses_to_events() {
        let h = parse(LINES).unwrap();
        assert_eq!(h.events, expected(7));
        assert!(!h.truncated);
        assert!(h.events[2].is_nemesis());
    }

    #[test]
    fn a_wrapped_multiline_history_parses_to_the_same_events() {
        let h = parse(WRAPPED).unwrap();
        // No `:index`: file order.
        assert_eq!(h.events, expected(0));
    }

    #[test]
    fn an_empty_vector_or_file_is_an_empty_history() {
        for text in ["[]", " [ ]\n", "", "; nothing\n", "[\n, ; c\n]"] {
            assert_eq!(parse(text).unwrap(), History::default(), "{text:?}");
        }
    }

    #[test]
    fn errors_become_strings() {
        let h = parse(
            r#"{:type :fail, :f :release, :process 1, :time 5, :error [:not-held "x"]}
{:type :info, :f :acquire, :process 2, :time 6, :error "connection reset"}
{:type :fail, :f :release, :process 1, :time 7, :error (:not-held 3 nil)}
{:type :ok, :f :read, :process 1, :time 8, :error nil}"#,
        )
        .unwrap();
        let errors: Vec<_> = h.events.iter().map(|e| e.error.as_deref()).collect();
        assert_eq!(
            errors,
            [
                Some("not-held x"),
                Some("connection reset"),
                Some("not-held 3 null"),
                None
            ]
        );
    }

    #[test]
    fn values_of_every_shape_become_json() {
        let h = parse(
            r#"{:type :ok :f :read :process 0 :time 1 :value
  {:kw :a, "s" "tab\there \"q\" \u00e9", :n [1 -2 3.5 -4e2 7N 1.5M], :l (nil true false),
   :set #{:x}, 5 sym, :c [\a \newline], :t #uuid "x", :big 99999999999999999999, #_ :gone
   :nested {[1 2] ##NaN}}}"#,
        )
        .unwrap();
        assert_eq!(
            h.events[0].value,
            json!({
                "kw": "a",
                "s": "tab\there \"q\" é",
                "n": [1, -2, 3.5, -400.0, 7, 1.5],
                "l": [null, true, false],
                "set": ["x"],
                "5": "sym",
                "c": ["a", "\n"],
                "t": "x",
                "big": 99999999999999999999.0,
                "nested": {"[1,2]": null},
            })
        );
    }

    #[test]
    fn a_truncated_file_names_the_line_of_the_unfinished_op() {
        let cut = &LINES[..LINES.find(":token").unwrap()];
        let (line, message) = err_line(cut);
        assert_eq!(line, 2, "{message}");
        assert!(message.contains("truncated"), "{message}");

        let cut = &WRAPPED[..WRAPPED.find(":value {:target").unwrap()];
        let (line, message) = err_line(cut);
        assert_eq!(line, 9, "{message}");

        // Every op complete but the closing `]` missing.
        let cut = WRAPPED.trim_end().trim_end_matches(']');
        let (line, message) = err_line(cut);
        assert_eq!(line, 14, "{message}"); // where the input ends
        assert!(message.contains("line 2"), "{message}");

        // Cut inside a string.
        let cut = &LINES[..LINES.find("9f2c41").unwrap()];
        assert_eq!(err_line(cut).0, 2);
    }

    #[test]
    fn garbage_in_the_middle_names_its_line() {
        let mut lines: Vec<&str> = LINES.lines().collect();
        lines.insert(2, "garbage!!");
        let (line, message) = err_line(&lines.join("\n"));
        assert_eq!(line, 3);
        assert!(message.contains("garbage!!"), "{message}");

        lines[2] = "{:type :ok, :f :read, :process 1, :time }";
        let (line, message) = err_line(&lines.join("\n"));
        assert_eq!((line, message.contains("odd")), (3, true), "{message}");

        lines[2] = "{:type :done, :f :read, :process 1, :time 4}";
        assert_eq!(err_line(&lines.join("\n")).0, 3);

        lines[2] = "{:type :ok, :f :read, :process -1, :time 4}";
        assert_eq!(err_line(&lines.join("\n")).0, 3);

        lines[2] = "{:type :ok, :f :read, :process 1}";
        assert!(err_line(&lines.join("\n")).1.contains(":time"));

        // A bad token inside a multi-line op: the op's first line is named.
        let bad = WRAPPED.replace(":value {:target", ":value @{:target");
        let (line, message) = err_line(&bad);
        assert_eq!(line, 9, "{message}");
        assert!(message.contains("line 10"), "{message}");

        let (line, _) = err_line(&format!("{}\n]", WRAPPED.trim_end()));
        assert_eq!(line, 15);
    }

    #[test]
    fn malformed_input_never_panics() {
        let samples = [
            LINES,
            WRAPPED,
            "{:a \"\\u12\"}",
            "#{\\",
            "[#_",
            "\\",
            "#",
            "##",
        ];
        for sample in samples {
            for end in 0..=sample.len() {
                if let Some(prefix) = sample.get(..end) {
                    let _ = parse(prefix);
                }
            }
        }
        // Garble: replace each char in turn by each of a set of troublemakers.
        let troublemakers = [
            "", "}", "]", "(", "\"", "\\", "#", "#_", ":", ";", "é", "1/0",
        ];
        for (i, _) in LINES.char_indices().step_by(3) {
            for t in troublemakers {
                let end = i + LINES[i..].chars().next().map_or(0, char::len_utf8);
                let text = format!("{}{t}{}", &LINES[..i], &LINES[end..]);
                let _ = parse(&text);
            }
        }
        assert!(parse(&"[".repeat(100_000)).is_err());
        assert!(parse(&"#_".repeat(100_000)).is_err());
        assert!(parse(&format!("{}{}", "[".repeat(50), "]".repeat(50))).is_err());
        assert!(from_edn(&[0xff, 0xfe, b'{'][..]).is_err());
    }
}
