//! Per-run pictures, stored in the run folder: `timeline.svg`,
//! `latency.png` and `rate.png`, drawn from a stored history and its verdict.
//!
//! Everything here reads only the history and `results.json`, so
//! `lockstorm report` can redraw any stored run.

mod comparison;
mod explained;
mod font;
mod keys;
mod latency;
mod marks;
mod scene;
mod shared;
mod timeline;

pub use comparison::{comparison, PNG as COMPARISON_PNG, SVG as COMPARISON_SVG};
pub use latency::{latency, rate};
pub use shared::Setup;
pub use timeline::{timeline, timeline_svg};

use checker::{History, Results};
use std::path::Path;

pub const TIMELINE: &str = "timeline.svg";
pub const LATENCY: &str = "latency.png";
pub const RATE: &str = "rate.png";
/// Every anomaly example told, when the run found any.
pub const EXPLAIN: &str = "explain.html";

/// Writes `timeline.svg`, `latency.png` and `rate.png` into `dir`, and
/// `explain.html` when the run found anything (else removes a stale one),
/// headed by `heading` (`redlock × pause (seed 1)`).
pub fn render(
    dir: &Path,
    history: &History,
    results: &Results,
    setup: impl Into<Setup>,
    heading: &str,
) -> anyhow::Result<()> {
    let setup = setup.into();
    timeline(&dir.join(TIMELINE), history, results, setup)?;
    match explained::explain_page(history, results, setup, heading) {
        Some(page) => std::fs::write(dir.join(EXPLAIN), page)?,
        None => {
            let _ = std::fs::remove_file(dir.join(EXPLAIN));
        }
    }
    latency(&dir.join(LATENCY), history)?;
    rate(&dir.join(RATE), history)?;
    Ok(())
}

#[cfg(test)]
mod tests;
