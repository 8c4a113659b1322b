//! `explain.html`: every anomaly example of a run told as a chain of events
//! (`checker::explain`), under a header that says which run it is and a list
//! of contents, each chain with its slice of the timeline drawn beside it.
//! Written beside `timeline.svg` when the run found anything.

use super::shared::{end_time, secs, Setup};
use super::timeline::{slice, svg_height, FOOTER_PX, PLOT_LEFT, WIDTH};
use crate::html::esc;
use checker::{History, Results};
use std::fmt::Write;
use story::{Explanation, Known};

/// How wide a slice is drawn on the page (px): a few seconds of a long run
/// are magnified up to [`MAX_ZOOM`] times, never shrunk.
const SLICE_PX: f64 = 720.0;
const MAX_ZOOM: f64 = 2.0;

const STYLE: &str = "body{font-family:sans-serif;max-width:72em;margin:1em auto}\
header{border-bottom:1px solid #ccc;margin-bottom:1em}header p{color:#444}\
nav li{margin:.15em 0}td{padding:0 1em 0 0;vertical-align:top}\
td.t{text-align:right;white-space:nowrap;color:#555}.c{font-weight:bold}\
.note{color:#555;font-style:italic}svg.slice{border:1px solid #ddd;display:block;margin:.5em 0}";

/// The page, or `None` when there is nothing to explain. `heading` names
/// the run (`redlock × pause (seed 1)`).
pub fn explain_page(
    history: &History,
    results: &Results,
    setup: Setup,
    heading: &str,
) -> Option<String> {
    let known = Known {
        workers: (setup.workers > 0).then_some(setup.workers),
        lease_ns: setup
            .lease
            .map(|l| l.as_nanos().try_into().unwrap_or(u64::MAX)),
    };
    let told = story::explain(history, results, known);
    if told.is_empty() {
        return None;
    }
    let mut o = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{}: why</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        esc(heading)
    );
    header(&mut o, heading, results, told.len());
    contents(&mut o, &told, results);
    let end = secs(end_time(history));
    let height = f64::from(svg_height(history, results, setup));
    // Worst first, as the contents list them.
    let order = story::digest(told.clone(), results.promise);
    for (kind, _) in &order {
        for e in told.iter().filter(|e| e.anomaly == kind.anomaly) {
            section(&mut o, e, end, height);
        }
    }
    o.push_str("</body>\n</html>\n");
    Some(o)
}

/// Which run, its verdict, and what the times mean.
fn header(o: &mut String, heading: &str, results: &Results, examples: usize) {
    let _ = writeln!(
        o,
        "<header><h1>{}: {} (promise: {})</h1>\n<p>lockstorm {} · {examples} anomaly example(s), each told as the chain of events that proves it · times are seconds since the run began · <a href=\"timeline.svg\">the whole timeline</a></p></header>",
        esc(heading),
        store::summary::verdict_word(results.valid),
        results.promise,
        env!("CARGO_PKG_VERSION"),
    );
}

/// Each kind, worst first (as `lockstorm explain` orders them), with a link
/// to each of its examples.
fn contents(o: &mut String, told: &[Explanation], results: &Results) {
    let kinds = story::digest(told.to_vec(), results.promise);
    o.push_str("<nav><h2>Contents</h2>\n<ul>\n");
    for (first, _) in &kinds {
        let links: Vec<String> = told
            .iter()
            .filter(|e| e.anomaly == first.anomaly)
            .map(|e| format!("<a href=\"#{}\">#{}</a>", id(e), e.example))
            .collect();
        let breaks = match results.promise.counts(&first.anomaly) {
            true => "",
            false => " (the promise allows it)",
        };
        let _ = writeln!(
            o,
            "<li>{}{breaks}: {}</li>",
            esc(&first.anomaly),
            links.join(" ")
        );
    }
    o.push_str("</ul></nav>\n");
}

fn id(e: &Explanation) -> String {
    format!("{}-{}", e.anomaly, e.example)
}

/// The timeline's caption, above its rows (px), left out of a slice.
const CAPTION_PX: f64 = 44.0;

/// A slice of `timeline.svg` as inline SVG, which every browser draws (a
/// `#svgView` link is ignored by Chromium on a top-level SVG): its row
/// names, then `x`..`x + w` of its rows, `zoom` times their size.
fn slice_view(x: f64, w: f64, height: f64, zoom: f64, label: &str) -> String {
    let rows = height - f64::from(FOOTER_PX) - CAPTION_PX;
    let part = |at: f64, from: f64, width: f64| {
        format!(
            "<svg x=\"{at:.0}\" width=\"{width:.0}\" height=\"{rows:.0}\" viewBox=\"{from:.0} {CAPTION_PX} {width:.0} {rows:.0}\">\
             <image href=\"timeline.svg\" width=\"{WIDTH}\" height=\"{height:.0}\"/></svg>"
        )
    };
    format!(
        "<svg class=\"slice\" viewBox=\"0 0 {:.0} {rows:.0}\" width=\"{:.0}\" height=\"{:.0}\" role=\"img\" aria-label=\"{label}\">{}{}</svg>",
        PLOT_LEFT + w,
        (PLOT_LEFT + w) * zoom,
        rows * zoom,
        part(0.0, 0.0, PLOT_LEFT),
        part(PLOT_LEFT, x, w),
    )
}

/// One example: its chain, and its slice of the timeline.
fn section(o: &mut String, e: &Explanation, end: f64, height: f64) {
    let (from, to) = e.span();
    let (x, w) = slice(secs(from), secs(to), end);
    let zoom = (SLICE_PX / (PLOT_LEFT + w)).clamp(1.0, MAX_ZOOM);
    let cause = e
        .cause
        .as_deref()
        .map(|c| format!(", put down to {}", esc(c)))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "<section id=\"{}\"><h2>{} #{}{cause}</h2>",
        id(e),
        esc(&e.anomaly),
        e.example
    );
    if let Some(note) = &e.note {
        let _ = writeln!(o, "<p class=\"note\">{}</p>", esc(note));
    }
    let label = format!("the timeline from {:.2} to {:.2} s", secs(from), secs(to));
    let _ = writeln!(
        o,
        "<p>Its slice of the timeline, {:.2}–{:.2} s (<a href=\"timeline.svg\">the whole timeline</a>):</p>\n{}\n<table>",
        secs(from),
        secs(to),
        slice_view(x, w, height, zoom, &label),
    );
    for step in &e.steps {
        let _ = writeln!(
            o,
            "<tr><td class=\"t\">{:.2} s</td><td>{}</td></tr>",
            secs(step.time),
            esc(&step.text)
        );
    }
    let _ = writeln!(o, "</table>");
    if e.left_out > 0 {
        let _ = writeln!(
            o,
            "<p class=\"note\">{} lesser step(s) left out: the slice above has them.</p>",
            e.left_out
        );
    }
    let _ = writeln!(o, "<p class=\"c\">⇒ {}</p></section>", esc(&e.conclusion));
}
