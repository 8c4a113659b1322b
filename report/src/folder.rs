//! A matrix folder's files, as the matrix and the merge of its shards
//! write them: the summary through `store`, and its picture.

use crate::plot;
use std::path::Path;
use store::matrix::Summary;

/// Writes a matrix folder's `summary.json` and `summary.md`, and draws its
/// comparison picture (a view of the table: a failure to draw is logged).
pub fn write_matrix(dir: &Path, summary: &Summary) -> store::Result<()> {
    summary.write(dir)?;
    if let Err(e) = plot::comparison(dir, summary) {
        tracing::warn!("drawing comparison.svg failed: {e:#}");
    }
    Ok(())
}
