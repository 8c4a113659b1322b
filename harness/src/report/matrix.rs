//! One page section per `matrix-<timestamp>/` folder. `summary.json` is read
//! as loose JSON: its writer is newer than this code and older summaries
//! lack fields, so every missing value shows as a dash instead of failing.

use super::html::{anchor, anomaly_names, esc, href, rate};
use super::scan::{text, Matrix, Run, COMPARISON_PNG, COMPARISON_SVG};
use serde_json::Value;
use std::fmt::Write;

pub fn sections(o: &mut String, matrices: &[Matrix], runs: &[Run]) {
    o.push_str("<section id=\"matrices\"><h2>Matrices</h2>\n");
    if matrices.is_empty() {
        o.push_str("<p class=\"meta\">No matrix runs stored here.</p>\n");
    }
    for m in matrices {
        section(o, m, runs);
    }
    o.push_str("</section>\n");
}

fn dash(v: &Value) -> String {
    text(v).map_or_else(|| "–".into(), |s| esc(&s))
}

fn section(o: &mut String, m: &Matrix, runs: &[Run]) {
    let null = Value::Null;
    let s = m.summary.as_ref().unwrap_or(&null);
    let badge = match s["ok"].as_bool() {
        Some(true) => "<span class=\"verdict valid\">EXPECTED</span>",
        Some(false) => "<span class=\"verdict invalid\">UNEXPECTED</span>",
        None => "",
    };
    let _ = writeln!(
        o,
        "<div class=\"matrix\" id=\"{}\"><h3>{} {badge}</h3>",
        esc(&m.rel),
        esc(&m.rel)
    );
    let mut meta = Vec::new();
    if let Some(w) = s["wall_s"].as_f64() {
        meta.push(format!("{w:.0} s wall time"));
    }
    if let Some(t) = text(&s["time_limit_s"]) {
        meta.push(format!("{t} s per run"));
    }
    if let Some(n) = text(&s["runs_per_pair"]) {
        meta.push(format!("{n} run(s) per pair"));
    }
    if let Some(e) = text(&s["expect"]) {
        meta.push(format!("expectations from {e}"));
    }
    let links: Vec<String> = m
        .files
        .iter()
        .map(|f| {
            format!(
                "<a href=\"{}\">{}</a>",
                href(&format!("{}/{f}", m.rel)),
                esc(f)
            )
        })
        .collect();
    let _ = writeln!(
        o,
        "<p class=\"meta\">{} {}</p>",
        esc(&meta.join(" · ")),
        links.join(" ")
    );
    for p in &m.problems {
        let _ = writeln!(o, "<p class=\"c-invalid\">{}</p>", esc(p));
    }

    let rows = s["rows"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !rows.is_empty() {
        table(o, rows, runs);
    }
    if let Some(skipped) = s["skipped"].as_array().filter(|s| !s.is_empty()) {
        o.push_str("<p class=\"meta\">Skipped:</p><ul class=\"notes\">");
        for k in skipped {
            let _ = write!(
                o,
                "<li>{} / {}: {}</li>",
                dash(&k["config"]),
                dash(&k["nemesis"]),
                dash(&k["reason"])
            );
        }
        o.push_str("</ul>\n");
    }
    // The SVG scales crisply; the PNG is the fallback for older matrices.
    if let Some(pic) = [COMPARISON_SVG, COMPARISON_PNG]
        .into_iter()
        .find(|p| m.files.contains(p))
    {
        let src = href(&format!("{}/{pic}", m.rel));
        let _ = writeln!(
            o,
            "<figure class=\"comparison\"><a href=\"{src}\"><img src=\"{src}\" alt=\"comparison of {}\" loading=\"lazy\"></a></figure>",
            esc(&m.rel)
        );
    }
    o.push_str("</div>\n");
}

fn table(o: &mut String, rows: &[Value], runs: &[Run]) {
    let names = anomaly_names(
        rows.iter()
            .filter_map(|r| r["anomalies"].as_object())
            .flat_map(|a| a.keys().map(String::as_str)),
    );
    o.push_str(
        "<table class=\"runs\">\n<thead><tr><th>Config</th><th>Nemesis</th><th>Runs</th>\
         <th>Valid</th><th>Invalid</th><th>Unknown</th><th>Expected</th><th>Match</th>",
    );
    for n in &names {
        let _ = write!(o, "<th class=\"anom\">{}</th>", esc(n));
    }
    o.push_str("<th>ops/s</th><th>Run folders</th></tr></thead>\n<tbody>\n");
    for r in rows {
        let matches = match r["matches"].as_bool() {
            Some(true) => "<td class=\"match yes\">✓</td>",
            Some(false) => "<td class=\"match no\">✗</td>",
            None => "<td class=\"none\">–</td>",
        };
        let _ = write!(
            o,
            "<tr><td class=\"cfg\">{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num c-valid\">{}</td><td class=\"num c-invalid\">{}</td>\
             <td class=\"num c-unknown\">{}</td><td>{}</td>{matches}",
            dash(&r["config"]),
            dash(&r["nemesis"]),
            dash(&r["runs"]),
            dash(&r["valid"]),
            dash(&r["invalid"]),
            dash(&r["unknown"]),
            dash(&r["expected"]),
        );
        for n in &names {
            // Whether a count breaks the promise depends on the config, which
            // the row does not say; non-zero counts are only made to stand out.
            let _ = match r["anomalies"][n.as_str()].as_u64() {
                None => write!(o, "<td class=\"num none\">–</td>"),
                Some(0) => write!(o, "<td class=\"num zero\">0</td>"),
                Some(c) => write!(o, "<td class=\"num nz\">{c}</td>"),
            };
        }
        let dirs: Vec<String> = strings(&r["run_dirs"]).map(|d| run_link(d, runs)).collect();
        // Runs that ended without a verdict say why here.
        let errors: String = strings(&r["errors"])
            .map(|e| format!("<br><span class=\"c-invalid\">{}</span>", esc(e)))
            .collect();
        let _ = writeln!(
            o,
            "<td class=\"num\">{}</td><td class=\"dirs\">{}{errors}</td></tr>",
            rate(r["ops_per_s"].as_f64()),
            dirs.join(" ")
        );
    }
    o.push_str("</tbody></table>\n");
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
}

/// A link to the run's entry on this page; plain text when the folder is not
/// among the runs found, so no link points at nothing.
fn run_link(dir: &str, runs: &[Run]) -> String {
    let dir = dir.trim_end_matches('/');
    let label = esc(dir.rsplit('/').next().unwrap_or(dir));
    if runs.iter().any(|r| r.rel == dir) {
        format!(
            "<a href=\"#{}\" title=\"{}\">{label}</a>",
            anchor(dir),
            esc(dir)
        )
    } else {
        format!("<span title=\"{} (not found)\">{label}</span>", esc(dir))
    }
}
