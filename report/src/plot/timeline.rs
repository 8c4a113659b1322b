//! `timeline.svg`: when each worker believed it held the lock, with its
//! fence, a red ✗ where the storage accepted an unsafe action, and the
//! nemesis faults as shaded bands: the picture of the source material.

use super::font::{self, FAMILY};
use super::scene::Scene;
use super::shared::{end_time, faults, secs, Setup, FAULT_ALPHA, FAULT_COLOR, FAULT_TEXT};
use checker::anomaly::{LOCK_OVERLAP, LOST_UPDATE, UNSAFE_ACTION};
use checker::{History, Results};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

pub const WIDTH: u32 = 1400;
/// About how wide the time axis is, less margins and row labels.
pub(super) const PLOT_PX: u32 = WIDTH - 130;
const ROW_PX: u32 = 30;
pub(super) const FOOTER_PX: u32 = 108;
pub(super) const HOLD_COLOR: RGBColor = RGBColor(62, 118, 180);
/// Holds the run ended during: their right edge is the end of the history,
/// not a release, so they are drawn paler.
pub(super) const OPEN_HOLD_COLOR: RGBColor = RGBColor(150, 180, 215);
pub(super) const OVERLAP_COLOR: RGBColor = RGBColor(200, 40, 120);
const UNSAFE_COLOR: RGBColor = RGBColor(220, 20, 20);
/// A lock stuck with no fault active: darker than a fault, so the two
/// bands read apart.
pub(super) const DEADLOCK_COLOR: RGBColor = RGBColor(90, 90, 90);
const DEADLOCK_ALPHA: f64 = 0.3;
/// Where a worker died.
pub(super) const CRASH_MARK: &str = "†";
/// Where an update was lost, in the unsafe row.
pub(super) const LOST_MARK: &str = "●";
const LOST_COLOR: RGBColor = RGBColor(232, 106, 26);
/// A key whose owner the observer could not name.
const KEY_UNKNOWN: RGBColor = RGBColor(120, 120, 120);

/// The key row's colour for the key of worker `row`: a fixed palette, so a
/// worker's keys look alike on every node, none of it like a hold's blue,
/// an overlap's magenta, a fault's lilac, the marks' red and orange or an
/// unknown owner's grey.
pub(super) fn owner_color(row: usize) -> RGBColor {
    const OWNERS: [RGBColor; 8] = [
        RGBColor(44, 160, 44),
        RGBColor(140, 86, 75),
        RGBColor(23, 170, 190),
        RGBColor(168, 169, 24),
        RGBColor(0, 110, 100),
        RGBColor(184, 134, 11),
        RGBColor(85, 107, 47),
        RGBColor(120, 60, 130),
    ];
    OWNERS[row % OWNERS.len()]
}
/// The storage's fence row: two greys, so neighbouring tokens stay apart.
const FENCE_A: RGBColor = RGBColor(110, 110, 110);
const FENCE_B: RGBColor = RGBColor(150, 150, 150);

/// Writes [`timeline_svg`] to `path`.
pub fn timeline(
    path: &Path,
    history: &History,
    results: &Results,
    setup: impl Into<Setup>,
) -> anyhow::Result<()> {
    std::fs::write(path, timeline_svg(history, results, setup)?)?;
    Ok(())
}

/// The timeline as SVG text, one row per worker.
pub fn timeline_svg(
    history: &History,
    results: &Results,
    setup: impl Into<Setup>,
) -> anyhow::Result<String> {
    font::ensure()?;
    let setup = setup.into();
    let mut scene = Scene::new(history, results, setup.workers, PLOT_PX);
    scene.lease = setup.lease.map(|l| l.as_nanos() as u64);
    let mut svg = String::new();
    {
        let size = (WIDTH, height(&scene));
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root, history, results, &scene)?;
    }
    Ok(svg)
}

/// The rows, top to bottom: the faults, each worker (who believed it held
/// the lock), each observed lock node (who held the key in Redis), the
/// storage's fence (fenced runs), and the unsafe row.
pub(super) struct Layout {
    pub workers: usize,
    pub fence: Option<usize>,
    pub unsafe_row: usize,
}

impl Layout {
    pub fn of(scene: &Scene) -> Self {
        let workers = scene.rows.len();
        let keys = scene.key_nodes.len();
        let fence = (!scene.fences.is_empty()).then_some(1 + workers + keys);
        let unsafe_row = 1 + workers + keys + usize::from(fence.is_some());
        Layout {
            workers,
            fence,
            unsafe_row,
        }
    }

    pub fn rows(&self) -> usize {
        self.unsafe_row + 1
    }

    pub fn key_row(&self, node: usize) -> usize {
        1 + self.workers + node
    }
}

/// Where the time axis lies in the picture (px): right of the row labels
/// (the chart's 14 px margin and 100 px label area), to the right margin.
pub(super) const PLOT_LEFT: f64 = 114.0;
const PLOT_RIGHT: f64 = (WIDTH - 14) as f64;

/// The picture's x range (px) that shows `from_s`..`to_s` of a run `end_s`
/// long, with a little time either side: for an SVG view of one story.
pub(super) fn slice(from_s: f64, to_s: f64, end_s: f64) -> (f64, f64) {
    let pad = ((to_s - from_s) * 0.1).max(0.5);
    let px =
        |t: f64| PLOT_LEFT + (t.clamp(0.0, end_s) / end_s.max(1e-9)) * (PLOT_RIGHT - PLOT_LEFT);
    let (x0, x1) = (px(from_s - pad), px(to_s + pad));
    (x0, (x1 - x0).max(1.0))
}

/// The height of the picture [`timeline_svg`] draws for this run.
pub(super) fn svg_height(history: &History, results: &Results, setup: Setup) -> u32 {
    height(&Scene::new(history, results, setup.workers, PLOT_PX))
}

/// Grows with the row count so rows keep a readable height.
pub(super) fn height(scene: &Scene) -> u32 {
    130 + FOOTER_PX + ROW_PX * Layout::of(scene).rows() as u32
}

/// Draws on any backend, so a test can look at the same picture as a PNG.
pub(super) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    history: &History,
    results: &Results,
    scene: &Scene,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (main, footer) = root.split_vertically(root.dim_in_pixel().1 - FOOTER_PX);
    let layout = Layout::of(scene);
    let rows = Rows(layout.rows());
    let end_s = secs(end_time(history));
    let mut chart = ChartBuilder::on(&main)
        .caption(title(scene, results), (FAMILY, 24))
        .margin(14)
        .x_label_area_size(50)
        .y_label_area_size(100)
        .build_cartesian_2d(0.0..end_s, 0.0..rows.0 as f64)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .light_line_style(RGBColor(245, 245, 245))
        .label_style((FAMILY, 15))
        .x_desc("time since run start (s)")
        .draw()?;
    let grid = RGBColor(220, 220, 220);
    let lines =
        (1..rows.0).map(|r| PathElement::new([(0.0, rows.top(r)), (end_s, rows.top(r))], grid));
    chart.draw_series(lines)?;
    draw_bands(&mut chart, history, scene, rows)?;
    let (x0, x1) = (
        chart.backend_coord(&(0.0, 0.0)).0,
        chart.backend_coord(&(end_s, 0.0)).0,
    );
    let scale = Scale::of(f64::from((x1 - x0).max(1)) / end_s);
    draw_holds(&mut chart, scene, rows, scale)?;
    if let Some(r) = layout.fence {
        draw_fences(&mut chart, scene, rows, r, scale)?;
    }
    draw_keys(&mut chart, scene, &layout, rows, scale)?;
    draw_marks(root, &chart, scene, rows.center(layout.unsafe_row), scale)?;
    let dagger = (FAMILY, 22)
        .into_font()
        .style(FontStyle::Bold)
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Center));
    chart.draw_series(
        scene.crashes.iter().map(|&(t, row)| {
            Text::new(CRASH_MARK, (secs(t), rows.center(row + 1)), dagger.clone())
        }),
    )?;
    draw_row_labels(root, &chart, scene, &layout, rows)?;
    draw_footer(&footer, &Legend::of(scene, history), &scene.notes)?;
    root.present()?;
    Ok(())
}

/// The timeline's chart: seconds across, one unit of height per row.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The caption: what the picture shows, and the run's anomaly counts.
fn title(scene: &Scene, results: &Results) -> String {
    let count = |name: &str| results.anomalies.get(name).map_or(0, |a| a.count);
    format!(
        "who believed it held the lock, who held the key, what went wrong: {} holds, {} lock-overlap, {} unsafe-action, {} lost-update",
        scene.total,
        count(LOCK_OVERLAP),
        count(UNSAFE_ACTION),
        count(LOST_UPDATE)
    )
}

/// The chart's rows, by count: row `r` (0 = faults) spans y in
/// [top(r) - 1, top(r)], top row first.
#[derive(Clone, Copy)]
struct Rows(usize);

impl Rows {
    fn top(self, r: usize) -> f64 {
        (self.0 - r) as f64
    }

    fn center(self, r: usize) -> f64 {
        self.top(r) - 0.5
    }

    /// Where a bar in row `r` lies (y): most of the row, a gap either side.
    fn bar(self, r: usize) -> (f64, f64) {
        (self.top(r) - 0.85, self.top(r) - 0.15)
    }
}

/// How time maps to the picture's pixels.
#[derive(Clone, Copy)]
struct Scale {
    px_per_s: f64,
    /// A bar narrower than a pixel would vanish from the picture.
    min_width_s: f64,
}

impl Scale {
    fn of(px_per_s: f64) -> Self {
        Scale {
            px_per_s,
            min_width_s: 1.5 / px_per_s,
        }
    }

    /// `start`..`end` (ns) in seconds, at least `min_width_s` wide.
    fn span(self, start: u64, end: u64) -> (f64, f64) {
        (secs(start), secs(end).max(secs(start) + self.min_width_s))
    }

    /// Whether `label` fits inside a bar `s`..`e` (s): only there is it
    /// drawn; elsewhere it is clutter.
    fn fits(self, label: &str, s: f64, e: f64) -> bool {
        (e - s) * self.px_per_s >= 8.0 * label.len() as f64 + 6.0
    }
}

/// A number or name written white in the middle of its bar.
fn bar_font() -> TextStyle<'static> {
    (FAMILY, 14)
        .into_font()
        .color(&WHITE)
        .pos(Pos::new(HPos::Center, VPos::Center))
}

/// The fault bands, then the deadlock bands, each named in the fault row.
fn draw_bands<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    history: &History,
    scene: &Scene,
    rows: Rows,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let height = rows.0 as f64;
    let band = FAULT_COLOR.mix(FAULT_ALPHA).filled();
    let fault_font = (FAMILY, 16)
        .into_font()
        .color(&FAULT_TEXT)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for f in faults(history) {
        let (s, e) = (secs(f.start), secs(f.end));
        chart.draw_series([Rectangle::new([(s, 0.0), (e, height)], band)])?;
        chart
            .draw_series([EmptyElement::at((s, rows.center(0)))
                + Text::new(f.name, (3, 0), fault_font.clone())])?;
    }
    let stuck = DEADLOCK_COLOR.mix(DEADLOCK_ALPHA).filled();
    let stuck_font = fault_font.color(&DEADLOCK_COLOR);
    for &(start, end) in &scene.stuck {
        let (s, e) = (secs(start), secs(end));
        chart.draw_series([Rectangle::new([(s, 0.0), (e, height)], stuck)])?;
        chart.draw_series([EmptyElement::at((s, rows.center(0)))
            + Text::new("deadlock", (3, 0), stuck_font.clone())])?;
    }
    Ok(())
}

/// The worker rows: the spans, then each hold in its colour, thin past
/// its lease, with its fence inside where it fits.
fn draw_holds<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    scene: &Scene,
    rows: Rows,
    scale: Scale,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    for span in &scene.spans {
        let (s, e) = scale.span(span.start, span.end);
        let (y0, y1) = rows.bar(span.row + 1);
        chart.draw_series([Rectangle::new([(s, y0), (e, y1)], HOLD_COLOR.filled())])?;
    }
    let fence_font = bar_font();
    for h in &scene.holds {
        let Some(row) = scene.rows.of(&h.process) else {
            continue;
        };
        let color = if scene.overlapping.contains(&h.start_index) {
            OVERLAP_COLOR
        } else if h.released || h.end_index.is_some() {
            // Ended by a release or by its holder's crash: not held at run end.
            HOLD_COLOR
        } else {
            OPEN_HOLD_COLOR
        };
        let (s, e) = scale.span(h.start, h.end);
        // A worker's next hold often starts within a pixel of the last one
        // ending; a sliver of white keeps them two bars.
        let e = if (e - s) * scale.px_per_s > 4.0 {
            e - 1.0 / scale.px_per_s
        } else {
            e
        };
        let (y0, y1) = rows.bar(row + 1);
        // Past the TTL after its grant the key had expired for certain:
        // from there on the worker only believed it held the lock, so that
        // part is drawn thin.
        let past = scene
            .lease
            .filter(|&l| h.end > h.start + l)
            .map(|l| secs(h.start + l));
        let full_until = past.unwrap_or(e);
        chart.draw_series([Rectangle::new([(s, y0), (full_until, y1)], color.filled())])?;
        if let Some(past) = past {
            let (t0, t1) = (rows.center(row + 1) - 0.1, rows.center(row + 1) + 0.1);
            chart.draw_series([Rectangle::new([(past, t0), (e, t1)], color.filled())])?;
        }
        let Some(fence) = h.fence else { continue };
        let label = fence.to_string();
        if scale.fits(&label, s, full_until) {
            let at = ((s + full_until) / 2.0, rows.center(row + 1));
            chart.draw_series([Text::new(label, at, fence_font.clone())])?;
        }
    }
    Ok(())
}

/// The storage's fence row, `r`: each accepted fence while it was the
/// highest.
fn draw_fences<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    scene: &Scene,
    rows: Rows,
    r: usize,
    scale: Scale,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let fence_font = bar_font();
    for (k, f) in scene.fences.iter().enumerate() {
        let (s, e) = scale.span(f.start, f.end);
        // Alternating shades keep neighbouring tokens apart.
        let shade = if k % 2 == 0 { FENCE_A } else { FENCE_B };
        let (y0, y1) = rows.bar(r);
        chart.draw_series([Rectangle::new([(s, y0), (e, y1)], shade.filled())])?;
        let label = f.fence.to_string();
        if scale.fits(&label, s, e) {
            let at = ((s + e) / 2.0, rows.center(r));
            chart.draw_series([Text::new(label, at, fence_font.clone())])?;
        }
    }
    Ok(())
}

/// The key rows: who held the key on each observed node, by owner colour.
fn draw_keys<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    scene: &Scene,
    layout: &Layout,
    rows: Rows,
    scale: Scale,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let owner_font = bar_font();
    for span in &scene.keys {
        let r = layout.key_row(span.node);
        let (s, e) = scale.span(span.start, span.end);
        let color = span.owner.map_or(KEY_UNKNOWN, owner_color);
        let (y0, y1) = rows.bar(r);
        chart.draw_series([Rectangle::new([(s, y0), (e, y1)], color.filled())])?;
        if let Some(owner) = span.owner {
            let label = format!("w{owner}");
            if scale.fits(&label, s, e) {
                let at = ((s + e) / 2.0, rows.center(r));
                chart.draw_series([Text::new(label, at, owner_font.clone())])?;
            }
        }
    }
    Ok(())
}

/// The unsafe row, centred at `row_y`: a ● per lost update, then a ✗ per
/// unsafe action, each named by worker and fence while few.
fn draw_marks<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart<'_, DB>,
    scene: &Scene,
    row_y: f64,
    scale: Scale,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let cross = (FAMILY, 24)
        .into_font()
        .style(FontStyle::Bold)
        .color(&UNSAFE_COLOR)
        .pos(Pos::new(HPos::Center, VPos::Center));
    let lost = (FAMILY, 15)
        .into_font()
        .color(&LOST_COLOR)
        .pos(Pos::new(HPos::Center, VPos::Center));
    let who = (FAMILY, 11)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Top));
    // Names under the marks only while they cannot pile up.
    let named = scene.unsafe_actions.len() + scene.lost_updates.len() <= 40;
    // A loss usually lands with the unsafe write that made it: then the ●
    // sits just left of the ✗, and the two share the ✗'s label.
    let beside = |m: &super::marks::Mark| {
        scene
            .unsafe_actions
            .iter()
            .find(|a| (secs(a.time) - secs(m.time)).abs() * scale.px_per_s < 10.0)
            .map(|a| (a.worker, a.fence) == (m.worker, m.fence))
    };
    for (marks, glyph, font) in [
        (&scene.lost_updates, LOST_MARK, &lost),
        (&scene.unsafe_actions, "✗", &cross),
    ] {
        for m in marks {
            let (mut x, y) = chart.backend_coord(&(secs(m.time), row_y));
            let shared = match glyph {
                LOST_MARK => beside(m),
                _ => None,
            };
            if shared.is_some() {
                x -= 14;
            }
            root.draw(&Text::new(glyph, (x, y), font.clone()))?;
            let label = match (m.worker, m.fence) {
                (Some(w), Some(f)) => format!("w{w} f{f}"),
                (Some(w), None) => format!("w{w}"),
                (None, Some(f)) => format!("f{f}"),
                (None, None) => String::new(),
            };
            if named && !label.is_empty() && shared != Some(true) {
                root.draw(&Text::new(label, (x + 9, y + 4), who.clone()))?;
            }
        }
    }
    Ok(())
}

/// Each row's name, right-aligned left of the time axis.
fn draw_row_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart<'_, DB>,
    scene: &Scene,
    layout: &Layout,
    rows: Rows,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let row_font = (FAMILY, 16)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for r in 0..rows.0 {
        let (x, y) = chart.backend_coord(&(0.0, rows.center(r)));
        let label = match r {
            0 => "faults".to_string(),
            r if Some(r) == layout.fence => "storage fence".to_string(),
            r if r == layout.unsafe_row => "unsafe".to_string(),
            r if r > layout.workers => {
                format!("key on {}", scene.key_nodes[r - 1 - layout.workers])
            }
            _ => scene.rows.label(r - 1),
        };
        root.draw(&Text::new(label, (x - 8, y), row_font.clone()))?;
    }
    Ok(())
}

/// What the run's picture has, so the legend lists only that.
struct Legend {
    open: bool,
    overlap: bool,
    thin: bool,
    fences: bool,
    faults: bool,
    stuck: bool,
    crashes: bool,
    /// The worker rows whose keys the key rows show.
    key_owners: Vec<usize>,
    unknown_keys: bool,
    unsafe_actions: bool,
    lost: bool,
}

impl Legend {
    fn of(scene: &Scene, history: &History) -> Self {
        let mut key_owners: Vec<usize> = scene.keys.iter().filter_map(|k| k.owner).collect();
        key_owners.sort_unstable();
        key_owners.dedup();
        Legend {
            open: scene
                .holds
                .iter()
                .any(|h| !h.released && h.end_index.is_none()),
            overlap: !scene.overlapping.is_empty(),
            thin: scene
                .lease
                .is_some_and(|l| scene.holds.iter().any(|h| h.end > h.start + l)),
            fences: !scene.fences.is_empty(),
            faults: !faults(history).is_empty(),
            stuck: !scene.stuck.is_empty(),
            crashes: !scene.crashes.is_empty(),
            key_owners,
            unknown_keys: scene.keys.iter().any(|k| k.owner.is_none()),
            unsafe_actions: !scene.unsafe_actions.is_empty(),
            lost: !scene.lost_updates.is_empty(),
        }
    }

    /// Three lines of swatches: what the lock did, what happened to it, and
    /// what Redis and the storage saw; each only where the run has it.
    fn lines(&self) -> [Vec<(String, ShapeStyle)>; 3] {
        let item = |label: &str, style: ShapeStyle| (label.to_string(), style);
        let when = |cond: bool, label: &str, style: ShapeStyle| cond.then(|| item(label, style));
        let lock = [
            Some(item("hold (acquire ok → release)", HOLD_COLOR.filled())),
            when(self.open, "held at run end", OPEN_HOLD_COLOR.filled()),
            when(self.overlap, "in a lock-overlap", OVERLAP_COLOR.filled()),
            when(
                self.thin,
                "thin: held past its lease (TTL)",
                HOLD_COLOR.filled(),
            ),
            when(self.fences, "numbers are fences", HOLD_COLOR.filled()),
        ];
        let struck = [
            when(
                self.faults,
                "fault",
                FAULT_COLOR.mix(FAULT_ALPHA * 2.0).filled(),
            ),
            when(
                self.stuck,
                "deadlock: acquires tried, none granted, no fault",
                DEADLOCK_COLOR.mix(DEADLOCK_ALPHA * 2.0).filled(),
            ),
            when(self.crashes, "† a worker died (crash)", BLACK.filled()),
        ];
        let mut seen: Vec<Option<(String, ShapeStyle)>> = Vec::new();
        if !self.key_owners.is_empty() || self.unknown_keys {
            seen.push(Some(item("key on a node, by owner:", WHITE.filled())));
            for &w in &self.key_owners {
                seen.push(Some(item(&format!("w{w}"), owner_color(w).filled())));
            }
            seen.push(when(self.unknown_keys, "unknown", KEY_UNKNOWN.filled()));
        }
        seen.push(when(
            self.unsafe_actions,
            "✗ unsafe action",
            UNSAFE_COLOR.filled(),
        ));
        seen.push(when(
            self.lost,
            "● lost update (f: the op's fence)",
            LOST_COLOR.filled(),
        ));
        let keep = |v: Vec<Option<(String, ShapeStyle)>>| v.into_iter().flatten().collect();
        [keep(lock.into()), keep(struck.into()), keep(seen)]
    }
}

/// The legend, and the notes.
fn draw_footer<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    legend: &Legend,
    notes: &[String],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let font = (FAMILY, 15)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let lines = legend.lines();
    let shown = lines.iter().filter(|items| !items.is_empty());
    for (line, items) in shown.enumerate() {
        let y = 17 + 24 * line as i32;
        let mut x = 114;
        for (label, style) in items.iter() {
            let (y0, y1) = match label.starts_with("thin") {
                true => (y - 2, y + 2),
                false => (y - 7, y + 7),
            };
            // A heading ("…:") has no swatch of its own.
            if !label.ends_with(':') {
                area.draw(&Rectangle::new([(x, y0), (x + 14, y1)], *style))?;
                x += 20;
            }
            area.draw(&Text::new(label.as_str(), (x, y), font.clone()))?;
            x += 20 + 8 * label.chars().count() as i32;
        }
    }
    let note_font = font.color(&RGBColor(90, 90, 90));
    area.draw(&Text::new(notes.join("; "), (114, 92), note_font))?;
    Ok(())
}
