//! A matrix's `comparison.svg` and `comparison.png`: a grid of config (rows)
//! × nemesis (columns). Each cell is coloured by the verdicts of its runs and
//! lists the anomalies they found, so configs compare side by side under the
//! same fault.

use super::font::{self, FAMILY};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use store::matrix::{Row, Summary};

pub const SVG: &str = "comparison.svg";
pub const PNG: &str = "comparison.png";

const CELL_W: i32 = 150;
const CELL_H: i32 = 84;
const LABEL_W: i32 = 130;
const HEADER_H: i32 = 90;
const FOOTER_H: i32 = 67;

const VALID: RGBColor = RGBColor(200, 235, 205);
const INVALID: RGBColor = RGBColor(245, 190, 185);
const MIXED: RGBColor = RGBColor(250, 225, 170);
const UNKNOWN: RGBColor = RGBColor(220, 220, 220);
const EMPTY: RGBColor = RGBColor(248, 248, 248);

/// Writes both pictures into `dir`.
pub fn comparison(dir: &Path, summary: &Summary) -> anyhow::Result<()> {
    font::ensure()?;
    let grid = Grid::new(summary);
    let size = grid.size();
    let (svg, png) = (dir.join(SVG), dir.join(PNG));
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        draw(&root, summary, &grid)?;
        root.present()?;
    }
    let root = BitMapBackend::new(&png, size).into_drawing_area();
    draw(&root, summary, &grid)?;
    root.present()?;
    Ok(())
}

struct Grid {
    configs: Vec<String>,
    nemeses: Vec<String>,
    /// Wide enough for the longest row name (`single.redis-semaphore`).
    label_w: i32,
}

impl Grid {
    /// Rows and columns in the order the matrix ran them.
    fn new(summary: &Summary) -> Self {
        let mut grid = Grid {
            configs: Vec::new(),
            nemeses: Vec::new(),
            label_w: LABEL_W,
        };
        let pairs = summary.rows.iter().map(|r| (&r.config, &r.nemesis));
        let skipped = summary.skipped.iter().map(|s| (&s.config, &s.nemesis));
        for (c, n) in pairs.chain(skipped) {
            if !grid.configs.contains(c) {
                grid.configs.push(c.clone());
            }
            if !grid.nemeses.contains(n) {
                grid.nemeses.push(n.clone());
            }
        }
        // About 9 px per character at the labels' 15 px, plus margins.
        let longest = grid.configs.iter().map(|c| c.chars().count()).max();
        grid.label_w = LABEL_W.max(longest.unwrap_or(0) as i32 * 9 + 20);
        grid
    }

    fn size(&self) -> (u32, u32) {
        let w = self.label_w + CELL_W * self.nemeses.len().max(1) as i32 + 20;
        let h = HEADER_H + CELL_H * self.configs.len().max(1) as i32 + FOOTER_H;
        (w.max(600) as u32, h as u32)
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    summary: &Summary,
    grid: &Grid,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let title = format!("lockstorm matrix {}", summary.started);
    root.draw(&Text::new(title, (10, 10), (FAMILY, 20).into_font()))?;
    let subtitle = format!(
        "verdict and anomaly counts per config × nemesis; {} run(s) of {} s each",
        summary.runs_per_pair, summary.time_limit_s
    );
    root.draw(&Text::new(subtitle, (10, 36), (FAMILY, 14).into_font()))?;
    let centered = |size: u32| {
        (FAMILY, size)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Center))
    };
    for (j, n) in grid.nemeses.iter().enumerate() {
        let x = grid.label_w + CELL_W * j as i32 + CELL_W / 2;
        root.draw(&Text::new(n.clone(), (x, HEADER_H - 18), centered(15)))?;
    }
    for (i, c) in grid.configs.iter().enumerate() {
        let y = HEADER_H + CELL_H * i as i32 + CELL_H / 2;
        let left = (FAMILY, 15)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(c.clone(), (10, y), left))?;
        for (j, n) in grid.nemeses.iter().enumerate() {
            let x = grid.label_w + CELL_W * j as i32;
            let y = HEADER_H + CELL_H * i as i32;
            let row = summary
                .rows
                .iter()
                .find(|r| &r.config == c && &r.nemesis == n);
            cell(root, (x, y), row)?;
        }
    }
    let legend = [
        "green: every run valid · red: every run invalid · amber: runs disagree",
        "grey: unknown · n/a: does not apply · ✓ / ✗: expectation met or not",
        "1st in: median time from a run's first fault to its first anomaly · /min: anomalies per minute",
    ];
    let y = HEADER_H + CELL_H * grid.configs.len() as i32 + 8;
    for (k, line) in legend.into_iter().enumerate() {
        root.draw(&Text::new(
            line,
            (10, y + 17 * k as i32),
            (FAMILY, 13).into_font(),
        ))?;
    }
    Ok(())
}

fn cell<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    row: Option<&Row>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let colour = match row {
        None => EMPTY,
        Some(r) if r.runs > 0 && r.valid == r.runs => VALID,
        Some(r) if r.runs > 0 && r.invalid == r.runs => INVALID,
        Some(r) if r.valid + r.invalid > 0 => MIXED,
        Some(_) => UNKNOWN,
    };
    let inner = [(x + 2, y + 2), (x + CELL_W - 2, y + CELL_H - 2)];
    root.draw(&Rectangle::new(inner, colour.filled()))?;
    let Some(row) = row else {
        let text = (FAMILY, 13).into_font().color(&RGBColor(150, 150, 150));
        root.draw(&Text::new("n/a", (x + 8, y + 8), text))?;
        return Ok(());
    };
    let bold = (FAMILY, 14).into_font().style(FontStyle::Bold);
    root.draw(&Text::new(row.verdicts(), (x + 8, y + 7), bold))?;
    if let Some(matched) = row.matches {
        let (mark, colour) = match matched {
            true => ("✓", RGBColor(20, 120, 40)),
            false => ("✗", RGBColor(200, 20, 20)),
        };
        let font = (FAMILY, 20).into_font().color(&colour);
        root.draw(&Text::new(mark, (x + CELL_W - 24, y + 4), font))?;
    }
    // The anomalies with a short name, to fit, in the reader's order.
    let found: Vec<String> = checker::anomalies()
        .iter()
        .filter_map(|a| {
            let short = a.short?;
            let n = *row.anomalies.get(a.name)?;
            (n > 0).then(|| format!("{short} {n}"))
        })
        .collect();
    let lines = match found.is_empty() {
        true => vec!["no anomaly".to_string()],
        false => found.chunks(2).map(|pair| pair.join(", ")).collect(),
    };
    // The detection rate takes the last line when there is one.
    let detection = detection(row);
    let room = if detection.is_some() { 2 } else { 3 };
    for (k, line) in lines.iter().take(room).enumerate() {
        let font = (FAMILY, 13).into_font();
        root.draw(&Text::new(
            line.clone(),
            (x + 8, y + 28 + 17 * k as i32),
            font,
        ))?;
    }
    if let Some(line) = detection {
        let font = (FAMILY, 12).into_font().color(&RGBColor(60, 60, 60));
        root.draw(&Text::new(line, (x + 8, y + 28 + 17 * 2), font))?;
    }
    Ok(())
}

/// `1st in 2.1 s · 6.0/min`: the median time from a run's first fault to its
/// first anomaly, and anomalies per minute; none for a cell that found nothing.
fn detection(row: &Row) -> Option<String> {
    if row.counted_anomalies == 0 {
        return None;
    }
    let rate = format!("{:.1}/min", row.anomalies_per_min());
    Some(match row.median_detection_s() {
        Some(s) => format!("1st in {s:.1} s · {rate}"),
        None => rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::matrix::Skipped;

    fn row(config: &str, nemesis: &str, valid: u32, invalid: u32, overlaps: u64) -> Row {
        let mut r = Row::new(config, nemesis);
        r.runs = valid + invalid;
        r.valid = valid;
        r.invalid = invalid;
        r.anomalies.insert("lock-overlap".into(), overlaps);
        r.anomalies.insert("lost-update".into(), 0);
        r
    }

    #[test]
    fn the_grid_has_a_cell_per_pair_with_its_verdict_and_counts() {
        let mut summary = Summary {
            started: "20261129T120000".into(),
            runs_per_pair: 1,
            time_limit_s: 15,
            ..Summary::default()
        };
        summary.rows = vec![
            row("single", "pause", 0, 1, 5),
            row("fenced", "pause", 1, 0, 5),
            row("single", "kill", 1, 1, 2),
        ];
        summary.rows[0].matches = Some(true);
        summary.rows[0].counted_anomalies = 5;
        summary.rows[0].duration_s = 30.0;
        summary.rows[0].detection_s = vec![2.25];
        summary.rows[1].matches = Some(false);
        summary.skipped.push(Skipped {
            config: "fenced".into(),
            nemesis: "failover".into(),
            reason: "needs replicas".into(),
        });
        let tmp = tempfile::tempdir().unwrap();
        comparison(tmp.path(), &summary).unwrap();
        let svg = std::fs::read_to_string(tmp.path().join(SVG)).unwrap();
        for text in [
            "single",
            "fenced",
            "pause",
            "kill",
            "failover",
            "INVALID",
            "overlap 5",
            "1 VALID, 1 INVALID",
            "n/a",
            "✓",
            "✗",
            "1st in 2.2 s · 10.0/min",
        ] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
        assert!(!svg.contains("lost 0"), "zero counts are left out");
        let png = std::fs::read(tmp.path().join(PNG)).unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        // 3 nemeses, 2 configs.
        assert_eq!(Grid::new(&summary).size(), (600, 90 + 2 * 84 + 67));
    }
}
