//! The `index.html` page. Every piece of text from disk goes through [`esc`]
//! and every link through [`href`], both relative to the results root.

use super::scan::Run;
use super::{matrix, runs};
use checker::Validity;
use std::fmt::Write;

const STYLE: &str = include_str!("style.css");

pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A relative URL for a `/`-separated path under the root, percent-encoded
/// so odd folder names still resolve, then escaped for an attribute.
pub fn href(path: &str) -> String {
    let mut out = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    esc(&out)
}

/// An element id for a run folder, so matrices can link to their runs.
pub fn anchor(rel: &str) -> String {
    let id: String = rel
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("run-{id}")
}

/// The registry's anomalies first, in the order a reader scans for them;
/// others found in older or newer results follow alphabetically.
pub fn anomaly_names<'a>(seen: impl Iterator<Item = &'a str>) -> Vec<String> {
    let known: Vec<&str> = checker::anomalies().iter().map(|a| a.name).collect();
    let mut extra: Vec<String> = seen
        .filter(|n| !known.contains(n))
        .map(str::to_owned)
        .collect();
    extra.sort();
    extra.dedup();
    known.iter().map(|s| s.to_string()).chain(extra).collect()
}

/// A count cell: grey when zero, red when it breaks the promise, amber when
/// it occurred but the promise allows it.
pub fn count_cell(count: Option<u64>, counts: bool) -> String {
    match count {
        None => "<td class=\"num none\">–</td>".into(),
        Some(0) => "<td class=\"num zero\">0</td>".into(),
        Some(n) if counts => format!("<td class=\"num hit\">{n}</td>"),
        Some(n) => format!("<td class=\"num soft\" title=\"allowed by the promise\">{n}</td>"),
    }
}

pub fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |r| format!("{r:.1}"))
}

pub fn verdict(v: Option<Validity>) -> String {
    let (class, word) = match v {
        Some(v) => (
            match v {
                Validity::True => "valid",
                Validity::False => "invalid",
                Validity::Unknown => "unknown",
            },
            crate::summary::verdict_word(v),
        ),
        None => ("unread", "UNREADABLE"),
    };
    format!("<span class=\"verdict {class}\">{word}</span>")
}

pub fn page(runs: &[Run], matrices: &[super::scan::Matrix], problems: &[String]) -> String {
    let mut o = String::new();
    let count = |v: Validity| {
        runs.iter()
            .filter(|r| r.results.as_ref().map(|r| r.valid) == Some(v))
            .count()
    };
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>lockstorm results</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n\
         <header><h1>lockstorm results</h1>\n<p class=\"meta\">{} run(s): \
         <span class=\"c-valid\">{} valid</span> · <span class=\"c-invalid\">{} invalid</span> · \
         <span class=\"c-unknown\">{} unknown</span> · {} matri{} · generated {}</p>\n\
         <nav><a href=\"#runs\">Runs</a> · <a href=\"#pictures\">Pictures</a> · \
         <a href=\"#matrices\">Matrices</a>{}</nav></header>\n",
        runs.len(),
        count(Validity::True),
        count(Validity::False),
        count(Validity::Unknown),
        matrices.len(),
        if matrices.len() == 1 { "x" } else { "ces" },
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        if problems.is_empty() {
            ""
        } else {
            " · <a href=\"#problems\" class=\"c-invalid\">Problems</a>"
        },
    );
    if !problems.is_empty() {
        o.push_str("<section id=\"problems\" class=\"problems\"><h2>Problems</h2>\n<ul>\n");
        for p in problems {
            let _ = writeln!(o, "<li>{}</li>", esc(p));
        }
        o.push_str("</ul></section>\n");
    }
    runs::table(&mut o, runs);
    runs::pictures(&mut o, runs);
    matrix::sections(&mut o, matrices, runs);
    o.push_str("</body>\n</html>\n");
    o
}
