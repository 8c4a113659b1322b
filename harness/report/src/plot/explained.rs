//! `explain.html`: every anomaly example of a run told as a chain of events
//! (`checker::explain`), each with a link to its slice of the timeline.
//! Written beside `timeline.svg` when the run found anything.

use super::shared::{end_time, secs, Setup};
use super::timeline::{slice, svg_height};
use crate::html::esc;
use checker::{History, Known, Results};
use std::fmt::Write;

/// The page, or `None` when there is nothing to explain.
pub fn explain_page(history: &History, results: &Results, setup: Setup) -> Option<String> {
    let known = Known {
        workers: (setup.workers > 0).then_some(setup.workers),
        lease_ns: setup
            .lease
            .map(|l| l.as_nanos().try_into().unwrap_or(u64::MAX)),
    };
    let told = checker::explain(history, results, known);
    if told.is_empty() {
        return None;
    }
    let end = secs(end_time(history));
    let height = svg_height(history, results, setup);
    let mut o = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>lockstorm: why</title>\n<style>body{font-family:sans-serif;max-width:72em;margin:1em auto}\
         td{padding:0 1em 0 0;vertical-align:top}td.t{text-align:right;white-space:nowrap;color:#555}\
         .c{font-weight:bold}</style>\n</head>\n<body>\n",
    );
    let _ = writeln!(
        o,
        "<h1>Why: {} anomaly example(s), each told</h1>\n<p>Times are seconds since the run began. \
         <a href=\"timeline.svg\">The whole timeline</a>.</p>",
        told.len()
    );
    for e in &told {
        let id = format!("{}-{}", e.anomaly, e.example);
        let (from, to) = e.span();
        let (x, w) = slice(secs(from), secs(to), end);
        let cause = e
            .cause
            .as_deref()
            .map(|c| format!(", put down to {}", esc(c)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "<section id=\"{id}\"><h2>{} #{}{cause}</h2>\n<p><a href=\"timeline.svg#svgView(viewBox({x:.0},0,{w:.0},{height}))\">its slice of the timeline</a> ({:.2}–{:.2} s)</p>\n<table>",
            esc(&e.anomaly),
            e.example,
            secs(from),
            secs(to)
        );
        for step in &e.steps {
            let _ = writeln!(
                o,
                "<tr><td class=\"t\">{:.2} s</td><td>{}</td></tr>",
                secs(step.time),
                esc(&step.text)
            );
        }
        let _ = writeln!(
            o,
            "</table>\n<p class=\"c\">⇒ {}</p></section>",
            esc(&e.conclusion)
        );
    }
    o.push_str("</body>\n</html>\n");
    Some(o)
}
