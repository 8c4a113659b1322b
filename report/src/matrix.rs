//! One page section per `matrix-<timestamp>/` folder, from its
//! `summary.json` read typed through `store` (a summary older than a field
//! reads it as its default); a folder whose summary cannot be read shows its
//! problem and its files.

use super::html::{anchor, anomaly_names, esc, href, rate};
use super::scan::{Matrix, Run, COMPARISON_PNG, COMPARISON_SVG};
use std::fmt::Write;
use store::matrix::{Row, Summary};

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

fn section(o: &mut String, m: &Matrix, runs: &[Run]) {
    let badge = match m.summary.as_ref().and_then(|s| s.ok) {
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
    let meta = m.summary.as_ref().map_or_else(Vec::new, meta);
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

    if let Some(s) = &m.summary {
        if !s.rows.is_empty() {
            table(o, &s.rows, runs);
        }
        if !s.skipped.is_empty() {
            o.push_str("<p class=\"meta\">Skipped:</p><ul class=\"notes\">");
            for k in &s.skipped {
                let _ = write!(
                    o,
                    "<li>{} / {}: {}</li>",
                    esc(&k.config),
                    esc(&k.nemesis),
                    esc(&k.reason)
                );
            }
            o.push_str("</ul>\n");
        }
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

/// The matrix's wall time, run length, runs per pair and expectations file.
fn meta(s: &Summary) -> Vec<String> {
    let mut meta = vec![
        format!("{:.0} s wall time", s.wall_s),
        format!("{} s per run", s.time_limit_s),
        format!("{} run(s) per pair", s.runs_per_pair),
    ];
    if let Some(e) = &s.expect {
        meta.push(format!("expectations from {e}"));
    }
    meta
}

fn table(o: &mut String, rows: &[Row], runs: &[Run]) {
    let names = anomaly_names(
        rows.iter()
            .flat_map(|r| r.anomalies.keys().map(String::as_str)),
    );
    o.push_str(
        "<table class=\"runs\">\n<thead><tr><th>Config</th><th>Nemesis</th><th>Runs</th>\
         <th>Valid</th><th>Invalid</th><th>Unknown</th><th>Expected</th><th>Match</th>",
    );
    for n in &names {
        let _ = write!(o, "<th class=\"anom\">{}</th>", esc(n));
    }
    o.push_str("<th>ops/s</th><th>lock cycles/s</th><th>acquire ms (median)</th><th>Run folders</th></tr></thead>\n<tbody>\n");
    for r in rows {
        let matches = match r.matches {
            Some(true) => "<td class=\"match yes\">✓</td>",
            Some(false) => "<td class=\"match no\">✗</td>",
            None => "<td class=\"none\">–</td>",
        };
        let _ = write!(
            o,
            "<tr><td class=\"cfg\">{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num c-valid\">{}</td><td class=\"num c-invalid\">{}</td>\
             <td class=\"num c-unknown\">{}</td><td>{}</td>{matches}",
            esc(&r.config),
            esc(&r.nemesis),
            r.runs,
            r.valid,
            r.invalid,
            r.unknown,
            r.expected.map_or_else(|| "–".into(), |e| e.to_string()),
        );
        for n in &names {
            // Whether a count breaks the promise depends on the config, which
            // the row does not say; non-zero counts are only made to stand out.
            let _ = match r.anomalies.get(n).copied() {
                None => write!(o, "<td class=\"num none\">–</td>"),
                Some(0) => write!(o, "<td class=\"num zero\">0</td>"),
                Some(c) => write!(o, "<td class=\"num nz\">{c}</td>"),
            };
        }
        let dirs: Vec<String> = r.run_dirs.iter().map(|d| run_link(d, runs)).collect();
        // Runs that ended without a verdict say why here.
        let errors: String = r
            .errors
            .iter()
            .map(|e| format!("<br><span class=\"c-invalid\">{}</span>", esc(e)))
            .collect();
        let _ = writeln!(
            o,
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"dirs\">{}{errors}</td></tr>",
            rate(Some(r.ops_per_s)),
            rate(Some(r.cycles_per_s)),
            r.acquire_median_ms().map_or("–".into(), |ms| format!("{ms:.2}")),
            dirs.join(" ")
        );
    }
    o.push_str("</tbody></table>\n");
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
