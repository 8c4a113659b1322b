//! The `index.html` page: its header and problems, then the sections
//! `runs.rs` and `matrix.rs` write with the pieces of `html.rs`.

use super::html::esc;
use super::scan::{Matrix, Run};
use super::{matrix, runs};
use checker::Validity;
use std::fmt::Write;

const STYLE: &str = include_str!("style.css");

pub fn page(runs: &[Run], matrices: &[Matrix], problems: &[String]) -> String {
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
