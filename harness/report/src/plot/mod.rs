//! Per-run pictures, stored in the run folder: `timeline.svg`,
//! `latency.png` and `rate.png`, drawn from a stored history and its verdict.
//!
//! Everything here reads only the history and `results.json`, so
//! `lockstorm report` can redraw any stored run.

mod comparison;
mod font;
mod latency;
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

/// Writes `timeline.svg`, `latency.png` and `rate.png` into `dir`.
pub fn render(
    dir: &Path,
    history: &History,
    results: &Results,
    setup: impl Into<Setup>,
) -> anyhow::Result<()> {
    timeline(&dir.join(TIMELINE), history, results, setup)?;
    latency(&dir.join(LATENCY), history)?;
    rate(&dir.join(RATE), history)?;
    Ok(())
}

#[cfg(test)]
mod tests;
