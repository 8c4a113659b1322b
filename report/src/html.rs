//! The pieces of `index.html` every section uses (the page itself is
//! `page.rs`). Every piece of text from disk goes through [`esc`] and every
//! link through [`href`], both relative to the results root.

use checker::Validity;
use std::fmt::Write;

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
            store::summary::verdict_word(v),
        ),
        None => ("unread", "UNREADABLE"),
    };
    format!("<span class=\"verdict {class}\">{word}</span>")
}
