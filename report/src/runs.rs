//! The runs table and each run's pictures.

use super::html::{anchor, anomaly_names, count_cell, esc, href, rate, verdict};
use super::scan::Run;
use std::fmt::Write;

pub fn table(o: &mut String, runs: &[Run]) {
    let names = anomaly_names(
        runs.iter()
            .filter_map(|r| r.results.as_ref())
            .flat_map(|r| r.anomalies.keys().map(String::as_str)),
    );
    o.push_str("<section id=\"runs\"><h2>Runs</h2>\n");
    if runs.is_empty() {
        o.push_str("<p class=\"meta\">No runs stored here yet.</p></section>\n");
        return;
    }
    o.push_str(
        "<table class=\"runs\">\n<thead><tr><th>Started</th><th>Config</th><th>Nemesis</th>\
         <th>Seed</th><th>Verdict</th>",
    );
    for n in &names {
        let _ = write!(o, "<th class=\"anom\">{}</th>", esc(n));
    }
    o.push_str("<th>ops/s</th><th>Files</th><th>Notes</th></tr></thead>\n<tbody>\n");
    for r in runs {
        let _ = write!(
            o,
            "<tr><td class=\"when\"><a href=\"#{}\" title=\"{}\">{}</a></td>\
             <td class=\"cfg\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td>",
            anchor(&r.rel),
            esc(&r.rel),
            esc(&r.started),
            esc(&r.config),
            esc(&r.nemesis),
            r.seed.map_or_else(|| "–".into(), |s| s.to_string()),
            verdict(r.results.as_ref().map(|x| x.valid)),
        );
        let told = r.files.contains(&crate::plot::EXPLAIN);
        for n in &names {
            let mut cell = match &r.results {
                Some(x) => count_cell(x.anomalies.get(n).map(|a| a.count), x.promise.counts(n)),
                None => count_cell(None, true),
            };
            // A count found links to its first example, told.
            let found = r.results.as_ref().and_then(|x| x.anomalies.get(n));
            if told && found.is_some_and(|a| !a.examples.is_empty()) {
                let page = href(&format!("{}/{}", r.rel, crate::plot::EXPLAIN));
                cell = link_count(&cell, &format!("{page}#{}-1", esc(n)));
            }
            o.push_str(&cell);
        }
        let files: Vec<String> = r
            .files
            .iter()
            .map(|f| {
                format!(
                    "<a href=\"{}\" title=\"{f}\">{}</a>",
                    href(&format!("{}/{f}", r.rel)),
                    file_label(f)
                )
            })
            .collect();
        let notes: Vec<String> = r
            .notes
            .iter()
            .map(|n| esc(n))
            .chain(
                r.problems
                    .iter()
                    .map(|p| format!("<span class=\"c-invalid\">{}</span>", esc(p))),
            )
            .collect();
        let _ = writeln!(
            o,
            "<td class=\"num\">{}</td><td class=\"files\">{}</td><td class=\"notes\">{}</td></tr>",
            rate(r.results.as_ref().map(|x| x.stats.ops_per_s)),
            files.join(" "),
            notes.join("<br>"),
        );
    }
    o.push_str("</tbody></table></section>\n");
}

/// A count cell whose number links to `target` (an escaped URL).
fn link_count(cell: &str, target: &str) -> String {
    let Some(open_end) = cell.find('>') else {
        return cell.to_string();
    };
    let Some(close) = cell.rfind("</td>") else {
        return cell.to_string();
    };
    format!(
        "{}<a href=\"{target}\">{}</a></td>",
        &cell[..=open_end],
        &cell[open_end + 1..close]
    )
}

/// Short link text keeps the table's rows one line high; the title says
/// the file's name.
fn file_label(file: &str) -> &str {
    match file {
        "harness.log" => "log",
        f => f.split('.').next().unwrap_or(f),
    }
}

/// One collapsible block per run; only the newest starts open so the page
/// stays short and loads few images.
pub fn pictures(o: &mut String, runs: &[Run]) {
    o.push_str("<section id=\"pictures\"><h2>Pictures</h2>\n");
    for (i, r) in runs.iter().enumerate() {
        let _ = write!(
            o,
            "<details id=\"{}\"{}><summary>{} <b>{}</b> / {} <span class=\"meta\">{} · <code>{}</code></span></summary>\n<div class=\"body\">\n",
            anchor(&r.rel),
            if i == 0 { " open" } else { "" },
            verdict(r.results.as_ref().map(|x| x.valid)),
            esc(&r.config),
            esc(&r.nemesis),
            esc(&r.started),
            esc(&r.rel),
        );
        let _ = writeln!(o, "<p class=\"meta\">{}</p>", esc(&describe(r)));
        if let Some(notes) = r
            .results
            .as_ref()
            .map(|x| &x.notes)
            .filter(|n| !n.is_empty())
        {
            o.push_str("<ul class=\"notes\">");
            for n in notes {
                let _ = write!(o, "<li>{}</li>", esc(n));
            }
            o.push_str("</ul>\n");
        }
        if r.pictures.is_empty() {
            o.push_str("<p class=\"meta\">No pictures: the run could not be read.</p>\n");
        }
        let lazy = if i == 0 { "" } else { " loading=\"lazy\"" };
        o.push_str("<div class=\"pics\">\n");
        for p in &r.pictures {
            let src = href(&format!("{}/{p}", r.rel));
            let _ = writeln!(
                o,
                "<figure class=\"{}\"><a href=\"{src}\"><img src=\"{src}\" alt=\"{} of {}\"{lazy}></a></figure>",
                p.split('.').next().unwrap_or(p),
                esc(p),
                esc(&r.rel),
            );
        }
        o.push_str("</div></div></details>\n");
    }
    o.push_str("</section>\n");
}

/// The run's setup in one line, from whatever `run.json` has.
fn describe(r: &Run) -> String {
    use super::scan::text;
    let m = &r.shown;
    let o = m.options();
    let mut parts = Vec::new();
    if let Some(p) = r
        .results
        .as_ref()
        .map(|x| x.promise.to_string())
        .or_else(|| text(&m.promise))
    {
        parts.push(format!("promise {p}"));
    }
    if let Some(w) = text(&o.workers) {
        parts.push(format!("{w} workers"));
    }
    if let Some(t) = text(&o.time_limit) {
        parts.push(format!("{t} s"));
    }
    if let Some(t) = text(&o.ttl_ms) {
        parts.push(format!("ttl {t} ms"));
    }
    if let Some(v) = m.redis.as_str() {
        let version = v
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or(v);
        parts.push(format!("Redis {version}"));
    }
    if let Some(s) = r.results.as_ref().map(|x| &x.stats) {
        parts.push(format!(
            "{} ops ({} ok, {} fail, {} info) in {:.1} s",
            s.ops, s.ok, s.fail, s.info, s.duration_s
        ));
    }
    if let Some(faults) = m.schedule.as_array() {
        parts.push(format!("{} scheduled fault(s)", faults.len()));
    }
    parts.join(" · ")
}
