//! `latency.png` and `rate.png`: how the client ops fared over time, with
//! the fault periods shaded so a reader can see what each fault did.

use super::font;
use super::font::FAMILY;
use super::shared::{end_time, faults, ops, outcome_style, sample, secs, Fault, Op};
use super::shared::{FAULT_ALPHA, FAULT_COLOR, FAULT_TEXT};
use checker::{History, OpType};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 600;
/// Beyond this many points a scatter plot is a solid smear and slow to
/// encode; an even sample keeps the shape.
const MAX_POINTS: usize = 20_000;
/// Latencies are drawn on a log axis, which cannot show 0.
const MIN_MS: f64 = 0.001;
const OUTCOMES: [OpType; 3] = [OpType::Ok, OpType::Fail, OpType::Info];

/// Writes a scatter plot of every client op's latency (invoke → completion)
/// at its invocation time, coloured by outcome.
pub fn latency(path: &Path, history: &History) -> anyhow::Result<()> {
    font::ensure()?;
    let all = ops(history);
    let total = all.len();
    let shown = sample(all, MAX_POINTS);
    let ms = |op: &Op| ((op.completed - op.invoked) as f64 / 1e6).max(MIN_MS);
    let (lo, hi) = shown
        .iter()
        .map(ms)
        .fold(None, |r: Option<(f64, f64)>, v| {
            Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
        })
        .unwrap_or((0.1, 1_000.0));
    // Headroom, and at least one decade so the log axis gets labels.
    let (lo, hi) = (lo / 1.5, (hi * 1.5).max(lo * 10.0));

    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut caption = format!("op latency: {total} client ops");
    if shown.len() < total {
        caption += &format!(", {} shown (an even sample)", shown.len());
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..secs(end_time(history)) * 1.01, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(240, 240, 240))
        .label_style((FAMILY, 15))
        .y_label_formatter(&|ms| format!("{ms}"))
        .x_desc("time since run start (s)")
        .y_desc("latency (ms)")
        .draw()?;
    draw_faults(&mut chart, &faults(history), (lo, hi))?;
    for outcome in OUTCOMES {
        let (label, color) = outcome_style(outcome);
        let points: Vec<_> = shown.iter().filter(|op| op.outcome == outcome).collect();
        let n = points.len();
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|op| Circle::new((secs(op.invoked), ms(op)), 3, color.filled())),
            )?
            .label(format!("{label} ({n})"))
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
    }
    legend(&mut chart)?;
    root.present()?;
    Ok(())
}

/// Writes the completed ops per second, per outcome, in fixed buckets: 1 s,
/// or wider for long runs so the plot keeps about 300 of them.
pub fn rate(path: &Path, history: &History) -> anyhow::Result<()> {
    font::ensure()?;
    let end = end_time(history);
    let width_s = (secs(end) / 300.0).ceil().max(1.0);
    let buckets = (secs(end) / width_s).ceil().max(1.0) as usize;
    let mut counts = [vec![0u64; buckets], vec![0; buckets], vec![0; buckets]];
    let ops = ops(history);
    for op in &ops {
        let b = ((secs(op.completed) / width_s) as usize).min(buckets - 1);
        let row = OUTCOMES.iter().position(|o| *o == op.outcome).unwrap_or(2);
        counts[row][b] += 1;
    }
    let peak = counts.iter().flatten().copied().max().unwrap_or(0) as f64 / width_s;
    let hi = (peak * 1.15).max(1.0);

    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let caption = format!("throughput: {} client ops, {width_s} s buckets", ops.len());
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..buckets as f64 * width_s, 0.0..hi)?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(240, 240, 240))
        .label_style((FAMILY, 15))
        .x_desc("time since run start (s)")
        .y_desc("completed ops/s")
        .draw()?;
    draw_faults(&mut chart, &faults(history), (0.0, hi))?;
    for (outcome, counts) in OUTCOMES.iter().zip(&counts) {
        let (label, color) = outcome_style(*outcome);
        // Steps, not a polyline: each bucket is one average over its width.
        let line = counts.iter().enumerate().flat_map(|(b, &n)| {
            let r = n as f64 / width_s;
            [(b as f64 * width_s, r), ((b + 1) as f64 * width_s, r)]
        });
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(3)));
    }
    legend(&mut chart)?;
    root.present()?;
    Ok(())
}

type Chart<'a, 'b, Y> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

/// Shades each fault period over the whole height and names it at the top.
fn draw_faults<Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'_, '_, Y>,
    faults: &[Fault],
    (lo, hi): (f64, f64),
) -> anyhow::Result<()> {
    let band = FAULT_COLOR.mix(FAULT_ALPHA).filled();
    chart.draw_series(
        faults
            .iter()
            .map(|f| Rectangle::new([(secs(f.start), lo), (secs(f.end), hi)], band)),
    )?;
    let label = (FAMILY, 16).into_font().color(&FAULT_TEXT);
    chart.draw_series(faults.iter().map(|f| {
        EmptyElement::at((secs(f.start), hi)) + Text::new(f.name.clone(), (3, 3), label.clone())
    }))?;
    Ok(())
}

fn legend<'a, 'b: 'a, Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'a, 'b, Y>,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
