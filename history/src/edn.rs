//! Jepsen EDN histories: besides its own `history.jsonl`, `lockstorm check`
//! reads Jepsen's EDN histories (`--format edn`).
//!
//! [`read_edn`] streams one: it accepts either one op map per line (Jepsen's
//! `history.edn`) or the whole history wrapped in `[ … ]`, with ops possibly
//! spanning several lines, and hands each op to its caller as soon as the op
//! is read. [`from_edn`] collects them into a [`History`]. Each op map such as
//! `{:type :invoke, :f :acquire, :process 3, :time 1532000123, :index 7, :value nil}`
//! becomes one [`Event`].
//!
//! The reader is a small, strict recursive-descent EDN parser written here
//! rather than a crates.io dependency: it must report the line each op starts
//! on, which the available crates do not give for the elements of a vector,
//! and it keeps the checker crate free of extra dependencies. It pulls its
//! input a line at a time and holds only the line it is on (at most
//! [`MAX_LINE_BYTES`](crate::MAX_LINE_BYTES)) and what it has parsed of the
//! current op, so a history of any length is read in bounded memory. The
//! common op, a flat map on one line, takes a fast path that gives what the
//! full parser would, or leaves the op to it.
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
pub fn from_edn(reader: impl BufRead) -> Result<History, ParseError> {
    let mut events = Vec::new();
    read_edn(reader, |e| events.push(e))?;
    Ok(History::new(events))
}

/// Reads a Jepsen EDN history op by op, handing each [`Event`] to `each` in
/// file order as soon as its op is read, holding only the current line and
/// op. Accepts and rejects exactly what [`from_edn`] does, with the same
/// errors; on an error the ops before it have already been handed on.
pub fn read_edn(reader: impl BufRead, mut each: impl FnMut(Event)) -> Result<(), ParseError> {
    let mut p = Parser::new(reader);
    let read = read_ops(&mut p, &mut each);
    // A failed read ends the input early: that, not what the parser made of
    // the early end, is the error.
    match p.failed.take() {
        Some(e) => Err(e),
        None => read,
    }
}

/// The ops at the top level: a bare sequence of them, or one vector.
fn read_ops<R: BufRead>(p: &mut Parser<R>, each: &mut impl FnMut(Event)) -> Result<(), ParseError> {
    p.skip(0).map_err(|e| e.here())?;
    if p.peek() != Some(b'[') {
        while p.peek().is_some() {
            read_op(p, each)?;
            p.skip(0).map_err(|e| e.here())?;
        }
        return Ok(());
    }
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
            Some(_) => read_op(p, each)?,
        }
    }
    p.skip(0).map_err(|e| e.here())?;
    if p.peek().is_some() {
        return Err(ParseError::Line {
            line: p.line,
            message: format!("unexpected input after the `]` that closed line {open}'s `[`"),
        });
    }
    Ok(())
}

/// Parses the form at the cursor as an op and hands it on.
fn read_op<R: BufRead>(p: &mut Parser<R>, each: &mut impl FnMut(Event)) -> Result<(), ParseError> {
    let start = p.line;
    let event = match p.flat_op() {
        Some(fields) => event_of(fields, p.ops),
        None => {
            let form = p.form(0).map_err(|e| e.op_error(start))?;
            to_event(form, p.ops)
        }
    };
    let event = event.map_err(|message| ParseError::Line {
        line: start,
        message,
    })?;
    p.ops += 1;
    each(event);
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
    let mut fields = Fields::default();
    for (k, v) in pairs {
        let Edn::Keyword(name) = &k else { continue };
        let Some(slot) = slot(name) else {
            continue;
        };
        if fields[slot].is_some() {
            return Err(format!("duplicate key :{name}"));
        }
        fields[slot] = Some(v);
    }
    event_of(fields, position)
}

/// The keys an op map's values are taken from, in [`Fields`] order.
const KEYS: [&str; 10] = [
    "type", "f", "process", "time", "index", "value", "error", "node", "token", "fence",
];

/// An op map's value for each of [`KEYS`], if it has one.
type Fields = [Option<Edn>; 10];

fn slot(name: &str) -> Option<usize> {
    KEYS.iter().position(|key| *key == name)
}

/// Turns an op map's values into an event; `position` is its 0-based place
/// in the file.
fn event_of(fields: Fields, position: u64) -> Result<Event, String> {
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

/// [`Parser::flat_op`] on `line` from the op's `{` on: its fields and its
/// length, up to and with its `}`.
fn flat_map(line: &str) -> Option<(Fields, usize)> {
    let text = line.as_bytes();
    // Bytes a keyword or number read fast may hold: none is a delimiter.
    let plain =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'?' | b'!' | b'*');
    let mut fields = Fields::default();
    let mut at = 1;
    let word = |at: usize| {
        let len = text[at..].iter().take_while(|b| plain(**b)).count();
        let end = at + len;
        // What ends it must be a delimiter: read fast, it is one of these.
        matches!(text.get(end)?, b' ' | b'\t' | b',' | b'}' | b'\n').then_some(end)
    };
    let skip = |mut at: usize| {
        while matches!(text.get(at), Some(b' ' | b'\t' | b',')) {
            at += 1;
        }
        at
    };
    if text.first() != Some(&b'{') {
        return None;
    }
    loop {
        at = skip(at);
        match text.get(at)? {
            b'}' => return Some((fields, at + 1)),
            b':' => {}
            _ => return None,
        }
        let end = word(at + 1)?;
        let key = line.get(at + 1..end)?;
        if !key.as_bytes().first()?.is_ascii_alphabetic() {
            return None;
        }
        at = skip(end);
        let start = at;
        let value = match text.get(at)? {
            b':' => {
                at = word(at + 1)?;
                let name = line.get(start + 1..at)?;
                if name.is_empty() {
                    return None;
                }
                Edn::Keyword(name.to_owned())
            }
            b'"' => {
                let len = text[at + 1..]
                    .iter()
                    .position(|b| matches!(b, b'"' | b'\\' | b'\n'))?;
                at += len + 2;
                if text[at - 1] != b'"' {
                    return None;
                }
                Edn::Str(line.get(start + 1..at - 1)?.to_owned())
            }
            _ => {
                at = word(at)?;
                match &text[start..at] {
                    b"nil" => Edn::Nil,
                    b"true" => Edn::Bool(true),
                    b"false" => Edn::Bool(false),
                    digits => Edn::Int(flat_int(digits)?.into()),
                }
            }
        };
        if let Some(slot) = slot(key) {
            if fields[slot].replace(value).is_some() {
                return None;
            }
        }
    }
}

/// An integer of up to 18 digits, maybe negative, as [`Parser::atom`]
/// reads it.
fn flat_int(digits: &[u8]) -> Option<i64> {
    let magnitude = digits.strip_prefix(b"-").unwrap_or(digits);
    if magnitude.is_empty() || magnitude.len() > 18 || !magnitude.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // 18 digits never overflow.
    let n = magnitude
        .iter()
        .fold(0, |n, d| n * 10 + i64::from(d - b'0'));
    Some(if magnitude.len() < digits.len() {
        -n
    } else {
        n
    })
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

/// The parser's cursor over its input, which it reads a line at a time:
/// `line` (1-based) is the line of the byte at `pos` in `buf`, the line
/// being read.
struct Parser<R> {
    reader: R,
    /// The line being read, invalid UTF-8 replaced, with its newline.
    buf: String,
    /// The bytes of a line as read: a buffer `buf` trades places with.
    raw: Vec<u8>,
    pos: usize,
    line: usize,
    /// Lines read so far.
    read: usize,
    /// Ops read so far: the next one's position.
    ops: u64,
    /// No more input: the end, or `failed`.
    done: bool,
    /// Why reading stopped early, if it did.
    failed: Option<ParseError>,
    /// The most bytes of input held at once.
    held: usize,
}

fn is_delimiter(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b',' | b'(' | b')' | b'[' | b']' | b'{' | b'}' | b'"' | b';'
        )
}

impl<R: BufRead> Parser<R> {
    fn new(reader: R) -> Self {
        Parser {
            reader,
            buf: String::new(),
            raw: Vec::new(),
            pos: 0,
            line: 1,
            read: 0,
            ops: 0,
            done: false,
            failed: None,
            held: 0,
        }
    }

    /// The byte at the cursor, reading the next line when this one is done;
    /// `None` at the end of the input (or when reading failed).
    fn peek(&mut self) -> Option<u8> {
        if self.pos == self.buf.len() && !self.next_line() {
            return None;
        }
        self.buf.as_bytes().get(self.pos).copied()
    }

    /// A byte further on the line being read. Every line but the last ends
    /// in its newline, so this never needs the next line for a byte that
    /// is not a newline.
    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.buf.as_bytes().get(self.pos + ahead).copied()
    }

    /// Replaces the line read, all of it consumed, by the next one.
    fn next_line(&mut self) -> bool {
        if self.done {
            return false;
        }
        match crate::next_line(&mut self.reader, &mut self.raw, self.read + 1) {
            Ok(true) => {
                self.read += 1;
                // The two buffers trade places, so neither is copied.
                let raw = std::mem::take(&mut self.raw);
                self.raw = std::mem::take(&mut self.buf).into_bytes();
                self.buf = match String::from_utf8(raw) {
                    Ok(line) => line,
                    Err(bad) => String::from_utf8_lossy(bad.as_bytes()).into_owned(),
                };
                self.pos = 0;
                self.held = self.held.max(self.buf.len() + self.raw.len());
                true
            }
            Ok(false) => {
                self.done = true;
                false
            }
            Err(e) => {
                self.failed = Some(e);
                self.done = true;
                false
            }
        }
    }

    /// The common op, read fast: a map on one line of keyword keys, each
    /// with a keyword, `nil`, `true`, `false`, an integer of up to 18 digits
    /// or a string without escapes, no key twice. Reads it and gives its
    /// [`Fields`] if the op at the cursor is one (as [`Parser::form`] and
    /// [`to_event`] would read it); `None`, reading nothing, if not.
    fn flat_op(&mut self) -> Option<Fields> {
        let rest = self.buf.get(self.pos..)?;
        let (fields, len) = flat_map(rest)?;
        self.pos += len;
        Some(fields)
    }

    /// The text `token` returned.
    fn text(&self, range: std::ops::Range<usize>) -> &str {
        self.buf.get(range).unwrap_or("")
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

    /// Where the text up to the next delimiter lies in `buf` (see `text`).
    /// A newline ends it, so it lies on the line being read.
    fn token(&mut self) -> std::ops::Range<usize> {
        let start = self.pos;
        while self.peek_at(0).is_some_and(|b| !is_delimiter(b)) {
            self.pos += 1;
        }
        // Delimiters are ASCII, so both ends are char boundaries.
        start..self.pos
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
                let name = self.text(name);
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
                let token = self.text(token);
                if token.is_empty() {
                    return self.err(format!("unexpected character `{}`", b as char));
                }
                self.atom(token)
            }
        }
    }

    /// The forms up to `close`; the cursor is on the opening bracket.
    fn seq(&mut self, close: u8, depth: usize) -> Result<Vec<Edn>, SyntaxError> {
        let (open, line) = (self.buf.as_bytes()[self.pos] as char, self.line);
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
                            let hex = self.buf.as_bytes().get(self.pos + 1..self.pos + 5);
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
        self.peek();
        let rest = self.buf.get(self.pos..).unwrap_or("");
        let Some(first) = rest.chars().next() else {
            return self.err("unexpected end of input after `\\`");
        };
        self.pos += first.len_utf8();
        if first == '\n' {
            self.line += 1;
        }
        let more = if first.is_ascii() && is_delimiter(first as u8) {
            self.pos..self.pos
        } else {
            self.token()
        };
        let more = self.text(more);
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
                let symbol = self.token();
                match self.text(symbol) {
                    "Inf" => Ok(Edn::Float(f64::INFINITY)),
                    "-Inf" => Ok(Edn::Float(f64::NEG_INFINITY)),
                    "NaN" => Ok(Edn::Float(f64::NAN)),
                    other => self.err(format!("unknown symbolic value `##{other}`")),
                }
            }
            Some(b) if b.is_ascii_alphabetic() => {
                self.pos += 1;
                let tag = self.token();
                let tag = self.text(tag).to_owned();
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

    /// Every op `read_edn` hands on, then how it ended.
    fn streamed(text: &str, capacity: usize) -> (Vec<Event>, Result<(), String>) {
        let mut events = Vec::new();
        let reader = std::io::BufReader::with_capacity(capacity, text.as_bytes());
        let end = read_edn(reader, |e| events.push(e)).map_err(|e| e.to_string());
        (events, end)
    }

    #[test]
    fn streaming_gives_the_events_from_edn_gives() {
        let mixed = format!("{LINES}{{:type :ok,\n :f :read, :process 1,\n :time 9}}\n");
        for text in [LINES, WRAPPED, &mixed, "[]", ""] {
            let whole = parse(text).unwrap().events;
            // However the reader hands out its bytes.
            for capacity in [1, 7, 8192] {
                assert_eq!(
                    streamed(text, capacity),
                    (whole.clone(), Ok(())),
                    "{text:?}"
                );
            }
        }
    }

    /// The messages a cut-off, unclosed or overlong file gives, word for word,
    /// and the ops before the error are handed on.
    #[test]
    fn a_streamed_read_fails_where_and_as_from_edn_does() {
        let cut = &LINES[..LINES.find(":token").unwrap()];
        let unclosed = WRAPPED.trim_end().trim_end_matches(']');
        let after = format!("{}\n]", WRAPPED.trim_end());
        let cases = [
            (
                cut,
                1,
                "history line 2: unexpected end of input: `{` opened on line 2 is never \
                 closed (truncated file?); fix or remove that line",
            ),
            (
                unclosed,
                5,
                "history line 14: unexpected end of input: the `[` opened on line 2 is never \
                 closed (truncated file?); fix or remove that line",
            ),
            (
                &after,
                5,
                "history line 15: unexpected input after the `]` that closed line 2's `[`; \
                 fix or remove that line",
            ),
        ];
        for (text, before, message) in cases {
            let (events, end) = streamed(text, 8192);
            assert_eq!((events.len(), end), (before, Err(message.to_string())));
            assert_eq!(parse(text).unwrap_err().to_string(), message);
        }
        let long = format!("{LINES}{}\n", "0".repeat(crate::MAX_LINE_BYTES + 1));
        let (events, end) = streamed(&long, 8192);
        assert_eq!(events.len(), 5);
        assert!(end
            .unwrap_err()
            .starts_with("history line 6: longer than 1 MiB"));
    }

    /// A reader that counts the bytes taken from it.
    struct Counted<'a> {
        bytes: &'a [u8],
        taken: std::rc::Rc<std::cell::Cell<usize>>,
    }

    impl std::io::Read for Counted<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.bytes.read(out)?;
            self.taken.set(self.taken.get() + n);
            Ok(n)
        }
    }

    /// 200 000 lines in both shapes: each op is handed on before the reader
    /// reads more than a buffer past it, and the parser never holds more than
    /// the line it is on (twice: as read and as text).
    #[test]
    fn a_long_history_is_read_a_line_at_a_time() {
        let op = |i: usize| {
            let kind = ["invoke", "ok"][i % 2];
            format!(
                "{{:type :{kind}, :f :acquire, :process {}, :time {i}, :index {i}}}",
                i % 20
            )
        };
        let lines: String = (0..200_000).map(|i| op(i) + "\n").collect();
        // Each op spread over two lines, all in one vector.
        let wrapped: String = (0..100_000)
            .map(|i| op(i).replacen(", :process", "\n  :process", 1) + "\n")
            .collect();
        let wrapped = format!("[{wrapped}]\n");
        for (text, ops) in [(lines, 200_000), (wrapped, 100_000)] {
            let longest = text.lines().map(str::len).max().unwrap() + 1;
            let ends: Vec<usize> = text.match_indices('}').map(|(at, _)| at + 1).collect();
            let taken = std::rc::Rc::new(std::cell::Cell::new(0));
            let reader = Counted {
                bytes: text.as_bytes(),
                taken: taken.clone(),
            };
            let mut p = Parser::new(std::io::BufReader::with_capacity(4096, reader));
            let mut n = 0;
            read_ops(&mut p, &mut |e: Event| {
                assert_eq!(e.index, n as u64);
                // Read up to its op's line, and a buffer more at most.
                assert!(taken.get() <= ends[n] + longest + 4096, "op {n}");
                n += 1;
            })
            .unwrap();
            assert_eq!((n, p.failed.is_none()), (ops, true));
            assert!(p.held <= 2 * longest, "held {} bytes", p.held);
        }
    }

    /// The fast read of a flat op ([`Parser::flat_op`]) gives what the full
    /// parser does, or leaves the op to it: on Jepsen's common ops, and on
    /// them spliced with bytes that make it step aside.
    #[test]
    fn the_fast_read_of_a_flat_op_is_the_full_parsers() {
        let full = |line: &str| {
            let mut p = Parser::new(line.as_bytes());
            p.form(0).ok().map(|form| to_event(form, 0))
        };
        let fast = |line: &str| flat_map(line).map(|(fields, _)| event_of(fields, 0));
        let common = [
            "{:type :invoke, :f :acquire, :process 3, :time 1532000123, :index 7, :value nil}",
            "{:type :fail, :f :acquire, :process 12, :time 5, :error :lock-busy}",
            "{:type :ok :f \"read\" :process :nemesis :time 0 :value -42 :extra true}",
            "{:type :ok, :f :acquire, :token \"3-9f2c41\", :fence 34, :node \"n1\", :process 1, :time 9}",
            "{:type :info, :f :release, :process 1, :time 9, :token 17, :value false}",
            "{:type :ok, :f :acquire, :process 1}",
            "{:type :ok, :type :ok, :f :acquire, :process 1, :time 2}",
        ];
        for line in &common[..6] {
            assert!(fast(line).is_some(), "{line}");
        }
        assert!(
            fast(common[6]).is_none(),
            "a duplicate key is the full parser's"
        );
        let splices = [
            "",
            "}",
            "{",
            "\"",
            "\\",
            "#_",
            ":",
            "::",
            ";",
            "é",
            "5N",
            "1.5",
            "-",
            "+1",
            "\n",
            ",",
            " ",
            "nil",
            "[1]",
            "#inst ",
            "1234567890123456789",
            "sym",
        ];
        let mut checked = 0;
        for line in common {
            for (i, _) in line.char_indices() {
                for t in splices {
                    let text = format!("{}{t}{}", &line[..i], &line[i..]);
                    if let Some(read) = fast(&text) {
                        assert_eq!(Some(read), full(&text), "{text}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }
}
