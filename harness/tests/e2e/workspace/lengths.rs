//! No function of a crate's own code runs past a screenful or two: a long
//! one is a chain of steps that wants names (the run's phases, a picture's
//! layers). Tests are left alone: a test reads best as one story.

use super::source::{self, Source};

/// The most lines a function may span, its signature to its closing brace.
const MOST: usize = 120;

/// Each non-test function of a file: its name, first line and length.
fn functions(source: &Source) -> Vec<(String, usize, usize)> {
    let code = source.code.as_bytes();
    let line_of = |at: usize| source.code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &source.code[i..];
        if rest.starts_with("#[cfg(test)]") {
            i = source::skip_item(code, i + "#[cfg(test)]".len());
            continue;
        }
        let starts_word = i == 0 || !(code[i - 1].is_ascii_alphanumeric() || code[i - 1] == b'_');
        if starts_word && rest.starts_with("fn ") {
            let name: String = rest[3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // The body: the first `{` before any `;` (a trait's declaration has none).
            let body = rest.find('{');
            let end_decl = rest.find(';');
            if let Some(open) = body.filter(|b| end_decl.is_none_or(|e| *b < e)) {
                let end = source::skip_item(code, i + open);
                out.push((
                    name,
                    line_of(i),
                    line_of(end.saturating_sub(1)) - line_of(i) + 1,
                ));
            }
        }
        i += 1;
    }
    out
}

#[test]
fn no_function_is_longer_than_a_screenful_or_two() {
    let mut long = Vec::new();
    let mut seen = 0;
    for krate in source::CRATES.iter().filter(|k| **k != "testkit") {
        let sources = source::files(krate);
        let tests = source::test_only(&sources);
        for s in sources.iter().filter(|s| !tests.contains(&s.path)) {
            for (name, line, lines) in functions(s) {
                seen += 1;
                if lines > MOST {
                    long.push(format!("{}:{line}: fn {name}, {lines} lines", s.path));
                }
            }
        }
    }
    assert!(seen > 1000, "read {seen} functions: the reader finds none");
    assert!(
        long.is_empty(),
        "functions over {MOST} lines (name their steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_reader_counts_bodies_and_skips_tests() {
    let text = "fn a() {\n    let x = 1;\n}\n#[cfg(test)]\nmod t {\n    fn b() {\n    }\n}\n\
                trait T { fn c(&self); }\nfn d() { }\n";
    let (code, strings) = source::lex(text);
    let s = Source {
        path: "x.rs".into(),
        raw: text.into(),
        code,
        strings,
    };
    let found: Vec<(String, usize)> = functions(&s).into_iter().map(|(n, _, l)| (n, l)).collect();
    assert_eq!(found, [("a".to_string(), 3), ("d".to_string(), 1)]);
}
