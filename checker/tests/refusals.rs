//! Refused releases of a correct lock, written by hand as another tool
//! would write them, in lockstorm's JSONL and in Jepsen's EDN: each
//! history is read as text by the public readers, so a wrong reading of
//! either format fails here (docs/formats.md, "What an op means").

use checker::{check, check_jsonl, from_edn, Promise, Results, Settings, Validity};

/// One op: process, type, f, and the error or token it carries.
struct Op {
    process: u64,
    kind: &'static str,
    f: &'static str,
    error: Option<&'static str>,
    token: Option<&'static str>,
}

fn op(process: u64, kind: &'static str, f: &'static str) -> Op {
    Op {
        process,
        kind,
        f,
        error: None,
        token: None,
    }
}

impl Op {
    fn error(self, error: &'static str) -> Op {
        Op {
            error: Some(error),
            ..self
        }
    }

    fn token(self, token: &'static str) -> Op {
        Op {
            token: Some(token),
            ..self
        }
    }
}

/// Each op's invocation and completion, one ms apart, in order.
fn jsonl(ops: &[(Op, Op)]) -> String {
    let mut out = String::new();
    for (i, e) in ops.iter().flat_map(|(a, b)| [a, b]).enumerate() {
        let mut line = format!(
            r#"{{"index":{i},"time":{},"process":{},"type":"{}","f":"{}""#,
            (i + 1) * 1_000_000,
            e.process,
            e.kind,
            e.f
        );
        if let Some(error) = e.error {
            line += &format!(r#","error":"{error}""#);
        }
        if let Some(token) = e.token {
            line += &format!(r#","token":"{token}""#);
        }
        out += &line;
        out += "}\n";
    }
    out
}

fn edn(ops: &[(Op, Op)]) -> String {
    let mut out = String::new();
    for (i, e) in ops.iter().flat_map(|(a, b)| [a, b]).enumerate() {
        let mut line = format!(
            "{{:type :{}, :f :{}, :process {}, :time {}, :index {i}",
            e.kind,
            e.f,
            e.process,
            (i + 1) * 1_000_000
        );
        if let Some(error) = e.error {
            line += &format!(", :error :{error}");
        }
        if let Some(token) = e.token {
            line += &format!(", :token \"{token}\"");
        }
        out += &line;
        out += "}\n";
    }
    out
}

fn settings() -> Settings {
    Settings::new(Promise::MutualExclusion)
}

/// The verdict of both formats, each explained if it is not `expected`.
fn assert_both(name: &str, ops: &[(Op, Op)], expected: Validity) {
    let text = jsonl(ops);
    let (results, _) =
        check_jsonl(text.as_bytes(), settings(), 1_000_000_000u64, true).expect("the JSONL reads");
    explain(name, "JSONL", &text, &results, expected);
    let text = edn(ops);
    let history = from_edn(text.as_bytes()).expect("the EDN reads");
    let results = check(&history, settings().knossos_fail());
    explain(name, "EDN", &text, &results, expected);
}

fn explain(name: &str, format: &str, text: &str, results: &Results, expected: Validity) {
    let found: Vec<String> = results
        .anomalies
        .iter()
        .filter(|(_, a)| a.count > 0)
        .map(|(k, a)| format!("{k} {} {:?}", a.count, a.examples))
        .collect();
    assert_eq!(
        results.valid, expected,
        "{name}, as {format}: {found:?}, notes {:?}\n{text}",
        results.notes
    );
}

fn acquire(p: u64) -> (Op, Op) {
    (op(p, "invoke", "acquire"), op(p, "ok", "acquire"))
}

fn release(p: u64) -> (Op, Op) {
    (op(p, "invoke", "release"), op(p, "ok", "release"))
}

fn refused(p: u64, f: &'static str, error: &'static str) -> (Op, Op) {
    (op(p, "invoke", f), op(p, "fail", f).error(error))
}

fn with_token((a, b): (Op, Op), token: &'static str) -> (Op, Op) {
    (a.token(token), b.token(token))
}

#[test]
fn a_second_release_refused_not_held_is_valid() {
    let ops = [acquire(0), release(0), refused(0, "release", "not-held")];
    assert_both("double release", &ops, Validity::True);
}

#[test]
fn a_release_after_a_refused_acquire_is_valid() {
    let ops = [
        acquire(0),
        release(0),
        refused(0, "acquire", "lock-busy"),
        refused(0, "release", "not-held"),
    ];
    assert_both("release after a refused acquire", &ops, Validity::True);
}

#[test]
fn the_same_token_released_twice_is_valid() {
    let ops = [
        with_token(acquire(0), "t1"),
        with_token(release(0), "t1"),
        with_token(refused(0, "release", "not-held"), "t1"),
    ];
    assert_both("a token released twice", &ops, Validity::True);
}

#[test]
fn a_lone_refused_release_is_valid() {
    let ops = [refused(0, "release", "not-held")];
    assert_both("a lone refused release", &ops, Validity::True);
}

/// Refusals of other processes around a hold: each says nothing of it.
#[test]
fn refusals_around_another_s_hold_are_valid() {
    let ops = [
        refused(1, "release", "not-held"),
        acquire(0),
        refused(1, "acquire", "lock-busy"),
        refused(1, "release", "not-held"),
        release(0),
        refused(0, "release", "not-held"),
        acquire(1),
        release(1),
    ];
    assert_both("refusals around a hold", &ops, Validity::True);
}

/// The controls: what a correct lock never answers is still caught.
#[test]
fn a_second_release_answered_ok_or_a_second_holder_is_invalid() {
    let ops = [acquire(0), release(0), release(0)];
    assert_both("a hold released twice", &ops, Validity::False);
    let ops = [
        acquire(0),
        release(0),
        refused(0, "acquire", "lock-busy"),
        release(0),
    ];
    assert_both(
        "a release ok after a refused acquire",
        &ops,
        Validity::False,
    );
    let ops = [
        acquire(0),
        refused(0, "release", "not-held"),
        refused(0, "release", "not-held"),
        acquire(1),
        acquire(0),
    ];
    assert_both("two holders after the refusals", &ops, Validity::False);
}
