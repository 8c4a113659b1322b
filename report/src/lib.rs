//! Views of stored runs, read only through `store`: the pictures of a run
//! and of a matrix ([`plot`]), and `lockstorm report` ([`build`]), which
//! redraws every stored run's pictures, merges the shards of a matrix into
//! one ([`merge`]), and writes one static `index.html` over a results folder
//! (laid out as `store` says).
//!
//! The page has no scripts and no external resources, and links only
//! relatively, so a copied results folder still browses from `file://`.
//!
//! A run's plan is the harness's type: the report reads records of any
//! [`Plan`], and asks of it only what that trait says.

#![forbid(unsafe_code)]

mod error;
mod folder;
mod html;
mod matrix;
mod merge;
mod page;
pub mod plot;
mod runs;
mod scan;

pub use error::Error;
pub use folder::write_matrix;

use std::path::{Path, PathBuf};
use store::Plan;

pub const INDEX: &str = "index.html";

/// What [`build`] did.
#[derive(Debug)]
pub struct Report {
    pub index: PathBuf,
    /// Run folders listed, readable or not.
    pub runs: usize,
    pub matrices: usize,
    /// Runs whose pictures were drawn again.
    pub redrawn: usize,
    /// One line per thing that could not be read or drawn, prefixed by the
    /// folder it concerns, and one per set of shards that was not merged.
    /// These are on the page too.
    pub problems: Vec<String>,
}

/// Rebuilds every run's pictures and writes `<root>/index.html`; the runs'
/// plans are `P`s.
pub fn build<P: Plan>(root: &Path) -> Result<Report, Error> {
    let (run_dirs, mut matrix_dirs) = scan::find(root).map_err(|source| Error::Read {
        path: root.into(),
        source,
    })?;
    // The shards of a matrix run on several machines, gathered here: one
    // matrix again.
    let (merged, unmerged) = merge::merge(root, &matrix_dirs)?;
    for merged in merged {
        if !matrix_dirs.contains(&merged) {
            matrix_dirs.push(merged);
        }
    }

    let mut runs = Vec::with_capacity(run_dirs.len());
    let mut redrawn = 0;
    for rel in &run_dirs {
        // The history is dropped after each run: a long one can be large.
        let (mut run, history, setup) = scan::read_run::<P>(root, rel);
        if let (Some(history), Some(results)) = (&history, &run.results) {
            let seed = run.seed.map_or(String::new(), |s| format!(" (seed {s})"));
            let heading = format!("{} × {}{seed}", run.config, run.nemesis);
            match plot::render(&root.join(rel), history, results, setup, &heading) {
                Ok(()) => redrawn += 1,
                Err(e) => run.problems.push(format!("drawing pictures: {e:#}")),
            }
        }
        let dir = root.join(rel);
        run.pictures = [plot::TIMELINE, plot::LATENCY, plot::RATE]
            .into_iter()
            .filter(|p| dir.join(p).is_file())
            .collect();
        // Each anomaly told, linked from the run's row.
        if dir.join(plot::EXPLAIN).is_file() {
            run.files.push(plot::EXPLAIN);
        }
        runs.push(run);
    }
    // Newest first; the folder stamp sorts as time, the path breaks ties.
    runs.sort_by(|a, b| (&b.stamp, &b.rel).cmp(&(&a.stamp, &a.rel)));

    let mut matrices: Vec<scan::Matrix> = matrix_dirs
        .iter()
        .map(|rel| scan::read_matrix(root, rel))
        .collect();
    matrices.sort_by(|a, b| b.rel.cmp(&a.rel));

    let problems: Vec<String> = runs
        .iter()
        .flat_map(|r| r.problems.iter().map(move |p| format!("{}: {p}", r.rel)))
        .chain(
            matrices
                .iter()
                .flat_map(|m| m.problems.iter().map(move |p| format!("{}: {p}", m.rel))),
        )
        // A set of shards that did not merge is a problem like an unreadable
        // folder (exit 254 once the page is written): the input lacks or
        // confuses a shard, and a lost shard must fail the nightly, not
        // vanish from it. What did merge is on the page all the same.
        .chain(unmerged.iter().map(ToString::to_string))
        .collect();

    let page = page::page(&runs, &matrices, &problems);
    let index = root.join(INDEX);
    // Written aside and renamed so a browser never sees half a page.
    let tmp = root.join(format!(".{INDEX}.{}", std::process::id()));
    let writing = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Write { path, source }
    };
    std::fs::write(&tmp, page).map_err(writing(&tmp))?;
    std::fs::rename(&tmp, &index).map_err(writing(&index))?;

    Ok(Report {
        index,
        runs: runs.len(),
        matrices: matrices.len(),
        redrawn,
        problems,
    })
}

#[cfg(test)]
mod tests;
