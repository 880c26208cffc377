//! PNG charts of YCSB results: renders [`RunReport`]s (one phase, or a matrix of runs) to PNG files.
//!
//! Owns: chart layout, titles and axis units, colours (one per target), line and marker styles (one per
//! workload), and text: Noto Sans embedded from the `notosans` crate and laid out with `ab_glyph`, so no system
//! font or font library is needed. plotters draws into memory; the `png` crate encodes the file.
//!
//! Must not: measure, compute statistics beyond picking values out of reports, print, read files, or do any I/O
//! other than writing the PNG files it names. Odd data (empty timeline, one point, zero or non-finite values, one
//! target, many targets) gives a readable chart or a [`ChartError`], never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::fs::File;
use std::io::BufWriter;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::{CoordTranslate, Shift};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind, FontStyle};

use super::stats::{OpStats, RunReport, TimelinePoint};

mod canvas;
use canvas::{Canvas, prepare, render};

/// Every chart's size in pixels.
const SIZE: (u32, u32) = (1000, 600);
/// Width of the legend panel on the right of every chart.
const LEGEND_W: u32 = 240;
/// Font family asked of plotters; [`Canvas`] draws all text in Noto Sans whatever the family.
const FONT: &str = "sans-serif";
/// Colour of the average line and of notes.
const GREY: RGBColor = RGBColor(100, 100, 100);
/// Percentiles of the per-phase latency chart.
const PERCENTILES: [Percentile; 4] = [
    ("p50", |o| o.p50_us, 0.3),
    ("p95", |o| o.p95_us, 0.55),
    ("p99", |o| o.p99_us, 0.8),
    ("p99.9", |o| o.p999_us, 1.0),
];

/// A percentile's label, its value in an [`OpStats`], and how strongly its bar is coloured.
type Percentile = (&'static str, fn(&OpStats) -> u64, f64);
/// Pixels of rendered text: x, y, coverage.
type GlyphPixels = Vec<(i32, i32, f32)>;
type Area<'a> = DrawingArea<Canvas<'a>, Shift>;
type DrawResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;
type BackendResult<T = ()> = Result<T, DrawingErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>>;
/// Matrix series: (target, workload key) to (threads, value) points.
type Series = BTreeMap<(String, (bool, String)), Vec<(f64, f64)>>;

/// Why a chart could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("the embedded chart font could not be loaded")]
    Font,
    #[error("chart directory {} does not exist or is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("chart file stem {0:?} must be non-empty and must not contain a path separator")]
    InvalidStem(String),
    #[error("could not render chart {}", path.display())]
    Render { path: PathBuf, source: Box<dyn Error + Send + Sync> },
}

/// Charts for one phase: `<dir>/<stem>-throughput.png` (ops/s over time, from report.timeline) and
/// `<dir>/<stem>-latency.png` (grouped bars: p50/p95/p99/p99.9 per operation type, log-scale µs axis).
/// Returns the paths written.
pub fn run_charts(report: &RunReport, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, ChartError> {
    let faces = prepare(dir)?;
    if stem.is_empty() || stem.contains(['/', '\\']) {
        return Err(ChartError::InvalidStem(stem.to_string()));
    }
    let color = family_color(&report.target).unwrap_or(OTHERS[0]);
    let throughput = render(dir.join(format!("{stem}-throughput.png")), faces, |a| draw_timeline(a, report, color))?;
    let latency = render(dir.join(format!("{stem}-latency.png")), faces, |a| draw_latency(a, report, color))?;
    Ok(vec![throughput, latency])
}

/// Charts for a matrix of runs (targets × workloads × record sizes × threads): per record size, a throughput
/// chart and a p99 latency chart (x = client threads, one line per target and workload), written to
/// `<dir>/matrix-<record_bytes>B-throughput.png` and `<dir>/matrix-<record_bytes>B-p99.png`. A load phase's p99
/// is INSERT's; a run phase's the worst of READ's and UPDATE's (of all its operations if it has neither).
/// Returns the paths written: none for no reports.
pub fn matrix_charts(reports: &[RunReport], dir: &Path) -> Result<Vec<PathBuf>, ChartError> {
    let faces = prepare(dir)?;
    let styles = SeriesStyles::new(reports);
    let mut written = Vec::new();
    for size in reports.iter().map(|r| r.record_bytes).collect::<BTreeSet<_>>() {
        let subset: Vec<&RunReport> = reports.iter().filter(|r| r.record_bytes == size).collect();
        for p99 in [false, true] {
            let path = dir.join(format!("matrix-{size}B-{}.png", if p99 { "p99" } else { "throughput" }));
            written.push(render(path, faces, |a| draw_matrix(a, &subset, &styles, p99, size))?);
        }
    }
    Ok(written)
}

/// Draws the title and splits the rest into the plot area and the legend panel.
fn frame<'a>(root: &Area<'a>, title: &str) -> DrawResult<(Area<'a>, Area<'a>)> {
    let (title, style) = fit(root, title, (20.0, 14.0), FontStyle::Bold, SIZE.0 - 20)?;
    let body = root.titled(&title, style)?;
    Ok(body.split_horizontally(SIZE.0 - LEGEND_W))
}

/// `text` in black at the largest size in `sizes` (from, down to) whose width fits `max_w` pixels; cut short
/// with "…" if it does not fit even at the smallest.
fn fit(
    area: &Area<'_>,
    text: &str,
    sizes: (f64, f64),
    style: FontStyle,
    max_w: u32,
) -> DrawResult<(String, TextStyle<'static>)> {
    let font = |size: f64| (FONT, size).into_font().style(style).color(&BLACK);
    let fits =
        |t: &str, size: f64| Ok::<_, Box<dyn Error + Send + Sync>>(area.estimate_text_size(t, &font(size))?.0 <= max_w);
    let mut size = sizes.0;
    while size > sizes.1 && !fits(text, size)? {
        size -= 1.0;
    }
    let chars: Vec<char> = text.chars().collect();
    let mut shown = text.to_string();
    for keep in (0..chars.len()).rev() {
        if fits(&shown, size)? {
            break;
        }
        shown = chars[..keep].iter().chain(['…'].iter()).collect();
    }
    Ok((shown, font(size)))
}

/// What a legend entry shows next to its label.
enum Swatch {
    /// A line in `dash` style with a marker of kind `marker`, if any.
    Line { color: RGBColor, dash: usize, marker: Option<usize> },
    /// A filled box, for bars.
    Bar(RGBColor),
}

/// Draws the legend panel: a heading, one row per entry, then grey notes.
fn draw_legend(area: &Area<'_>, heading: &str, entries: &[(String, Swatch)], notes: &[String]) -> DrawResult {
    let (heading, style) = fit(area, heading, (15.0, 12.0), FontStyle::Bold, LEGEND_W - 20)?;
    area.draw_text(&heading, &style, (10, 18))?;
    let rows = (area.dim_in_pixel().1 as usize).saturating_sub(90 + 19 * notes.len()) / 26;
    let shown = if entries.len() > rows { rows.saturating_sub(1) } else { entries.len() };
    let hidden = entries.len() - shown;
    let mut y = 58;
    for (label, swatch) in &entries[..shown] {
        match *swatch {
            Swatch::Line { color, dash, marker } => {
                draw_line(area, vec![(10, y), (50, y)], dash, color)?;
                marker.map_or(Ok(()), |kind| draw_marker(area, (30, y), kind, color))?;
            }
            Swatch::Bar(color) => area.draw(&Rectangle::new([(18, y - 7), (42, y + 7)], color.filled()))?,
        }
        let (label, style) = fit(area, label, (14.0, 11.0), FontStyle::Normal, LEGEND_W - 68)?;
        area.draw_text(&label, &style.pos(Pos::new(HPos::Left, VPos::Center)), (58, y))?;
        y += 26;
    }
    if hidden > 0 {
        area.draw_text(&format!("… and {hidden} more"), &(FONT, 14).into_font().color(&GREY), (58, y - 8))?;
        y += 26;
    }
    for (i, note) in notes.iter().enumerate() {
        let (note, style) = fit(area, note, (13.0, 10.0), FontStyle::Normal, LEGEND_W - 20)?;
        area.draw_text(&note, &style.color(&GREY), (10, y + 8 + 19 * i as i32))?;
    }
    Ok(())
}

/// Writes `msg` in the middle of `area`, for charts with nothing to plot.
fn no_data(area: &Area<'_>, msg: &str) -> DrawResult {
    let (w, h) = area.dim_in_pixel();
    let style = (FONT, 20).into_font().color(&GREY).pos(Pos::new(HPos::Center, VPos::Center));
    Ok(area.draw_text(msg, &style, (w as i32 / 2, h as i32 / 2))?)
}

/// Builds a chart in `area` with room for tick labels and axis descriptions.
fn chart_on<'a, 'b, X: Ranged, Y: Ranged>(
    area: &'a Area<'b>,
    x: X,
    y: Y,
) -> DrawResult<ChartContext<'a, Canvas<'b>, Cartesian2d<X, Y>>> {
    Ok(ChartBuilder::on(area)
        .margin(15)
        .margin_right(25)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x, y)?)
}

/// Draws grid, ticks and axis descriptions; `x_grid` false leaves out the vertical grid lines.
fn draw_mesh<X, Y>(
    chart: &mut ChartContext<'_, Canvas<'_>, Cartesian2d<X, Y>>,
    (x_desc, y_desc): (&str, &str),
    x_fmt: &dyn Fn(&f64) -> String,
    y_fmt: &dyn Fn(&f64) -> String,
    x_grid: bool,
) -> DrawResult
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_desc).y_desc(y_desc).x_label_formatter(x_fmt).y_label_formatter(y_fmt);
    mesh.label_style((FONT, 13)).axis_desc_style((FONT, 15)).x_labels(12).y_labels(11);
    mesh.bold_line_style(RGBColor(220, 220, 220)).light_line_style(RGBColor(244, 244, 244));
    if !x_grid {
        mesh.disable_x_mesh();
    }
    Ok(mesh.draw()?)
}

/// Ops/s over time for one phase, with the phase average as a dashed line.
fn draw_timeline(root: &Area<'_>, r: &RunReport, color: RGBColor) -> DrawResult {
    let (plot, legend) = frame(root, &format!("{}: throughput (ops/s) over time", describe(r)))?;
    let points: Vec<(f64, f64)> = r.timeline.iter().filter_map(clean_point).collect();
    let avg = Some(r.throughput).filter(|t| t.is_finite()).map(|t| t.max(0.0));
    let avg_label = avg.map_or_else(|| "n/a".to_string(), |a| format!("{} ops/s", fmt_count(a)));
    let entries = [
        ("ops/s in each second".to_string(), Swatch::Line { color, dash: 0, marker: Some(0) }),
        (format!("phase average: {avg_label}"), Swatch::Line { color: GREY, dash: 1, marker: None }),
    ];
    draw_legend(&legend, &format!("target: {}", r.target), &entries, &run_notes(r))?;
    if points.is_empty() {
        return no_data(&plot, "no timeline samples recorded");
    }
    let last = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let x_max = last + (last * 0.02).max(1.0);
    let y_max = nice_max(points.iter().map(|p| p.1).fold(avg.unwrap_or(0.0), f64::max));
    let mut chart = chart_on(&plot, RangedCoordf64::from(0.0..x_max), RangedCoordf64::from(0.0..y_max))?;
    let axes = ("time since phase start (s)", "throughput (ops/s)");
    draw_mesh(&mut chart, axes, &|v| trim(*v), &|v| fmt_count(*v), true)?;
    let area = chart.plotting_area();
    avg.map_or(Ok(()), |a| draw_line(area, vec![(0.0, a), (x_max, a)], 1, GREY))?;
    draw_line(area, points.clone(), 0, color)?;
    for &p in points.iter().filter(|_| points.len() <= 120) {
        draw_marker(area, p, 0, color)?;
    }
    Ok(())
}

/// One timeline sample as a point, or `None` if it is not finite; negatives become 0.
fn clean_point(p: &TimelinePoint) -> Option<(f64, f64)> {
    (p.t_s.is_finite() && p.ops_per_sec.is_finite()).then(|| (p.t_s.max(0.0), p.ops_per_sec.max(0.0)))
}

/// p50/p95/p99/p99.9 bars per operation type on a log µs axis, each bar labelled with its value.
fn draw_latency(root: &Area<'_>, r: &RunReport, color: RGBColor) -> DrawResult {
    let (plot, legend) = frame(root, &format!("{}: latency percentiles per operation", describe(r)))?;
    let entries: Vec<_> =
        PERCENTILES.iter().map(|(name, _, t)| (name.to_string(), Swatch::Bar(shade(color, *t)))).collect();
    draw_legend(&legend, &format!("target: {}", r.target), &entries, &run_notes(r))?;
    let ops = &r.operations;
    if ops.is_empty() {
        return no_data(&plot, "no operations recorded");
    }
    let value = |o: &OpStats, j: usize| PERCENTILES[j].1(o).max(1) as f64;
    let values = || ops.iter().flat_map(|o| (0..4).map(move |j| value(o, j)));
    let y = log_us(values().fold(f64::MAX, f64::min), values().fold(1.0, f64::max));
    let bottom = y.range().start;
    let x = Ticked {
        inner: RangedCoordf64::from(-0.5..ops.len() as f64 - 0.5),
        ticks: (0..ops.len()).map(|i| i as f64).collect(),
    };
    let mut chart = chart_on(&plot, x, y)?;
    let axes = ("operation (operations completed)", "latency (log scale)");
    draw_mesh(&mut chart, axes, &|x| op_label(ops, *x), &|v| fmt_us(*v), false)?;
    let font =
        (FONT, if ops.len() <= 3 { 12 } else { 9 }).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (j, (_, _, strength)) in PERCENTILES.iter().enumerate() {
        let left = |i: usize| i as f64 - 0.4 + 0.2 * j as f64;
        let fill = shade(color, *strength).filled();
        chart.draw_series(
            ops.iter()
                .enumerate()
                .map(|(i, o)| Rectangle::new([(left(i), bottom), (left(i) + 0.18, value(o, j))], fill)),
        )?;
        let label =
            |(i, o): (usize, &OpStats)| Text::new(fmt_us(value(o, j)), (left(i) + 0.09, value(o, j)), font.clone());
        chart.draw_series(ops.iter().enumerate().map(label))?;
    }
    Ok(())
}

/// The x label of operation number `x`: its name and how many completed.
fn op_label(ops: &[OpStats], x: f64) -> String {
    let op = if x >= 0.0 { ops.get(x.round() as usize) } else { None };
    op.map_or_else(String::new, |o| format!("{} ({})", o.operation, fmt_count(o.operations as f64)))
}

/// A log µs axis over `lo..hi` (at least 1 µs) widened to whole decades, ticked at 1, 2 and 5 times
/// each power of ten, or only at powers of ten if it spans more than two decades.
fn log_us(lo: f64, hi: f64) -> Ticked<LogCoord<f64>> {
    let hi = hi.max(1.0);
    let bottom = 10f64.powf(lo.clamp(1.0, hi).log10().floor());
    let top = 10f64.powf((hi * 1.3).log10().ceil()).max(bottom * 10.0);
    let steps: &[f64] = if top / bottom > 100.5 { &[1.0] } else { &[1.0, 2.0, 5.0] };
    let every = ((top / bottom).log10().round() as usize).div_ceil(10).max(1);
    let decades = (0..25).step_by(every).map(|e| bottom * 10f64.powi(e)).take_while(|d| *d <= top * 1.001);
    let ticks = decades.flat_map(|d| steps.iter().map(move |s| d * s)).filter(|t| *t <= top * 1.001).collect();
    Ticked { inner: (bottom..top).log_scale().into(), ticks }
}

/// An axis ticked and gridded only at `ticks`. (plotters' `with_key_points` on an f64 axis cannot take a label
/// formatter.)
struct Ticked<R> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

/// "YCSB run 50/50 on shoal, 1000-byte records, 64 threads" ("YCSB load on ..." for workload `load`).
fn describe(r: &RunReport) -> String {
    let phase = if r.phase.eq_ignore_ascii_case(&r.workload) { String::new() } else { format!(" {}", r.phase) };
    let (w, t, b, n) = (&r.workload, &r.target, r.record_bytes, r.threads);
    format!("YCSB{phase} {w} on {t}, {b}-byte records, {n} thread{}", if n == 1 { "" } else { "s" })
}

/// Facts about one phase for under its legend.
fn run_notes(r: &RunReport) -> Vec<String> {
    let (errors, not_found) = r.operations.iter().fold((0, 0), |(e, n), o| (e + o.errors, n + o.not_found));
    vec![
        format!("records: {}", fmt_count(r.records as f64)),
        format!("runtime: {} s", trim(r.runtime_ms as f64 / 1000.0)),
        format!("errors: {errors}, not found: {not_found}"),
    ]
}

/// p99 of the phase's main operations: INSERT for a load, the worst of READ and UPDATE for a run, else all.
fn main_p99(r: &RunReport) -> Option<u64> {
    let worst = |names: &[&str]| {
        let main = r.operations.iter().filter(|o| names.is_empty() || names.contains(&o.operation.as_str()));
        main.map(|o| o.p99_us).max()
    };
    let load = r.phase.eq_ignore_ascii_case("load");
    if load { worst(&["INSERT"]) } else { worst(&["READ", "UPDATE"]) }.or_else(|| worst(&[]))
}

/// Colour per target and line style per workload, the same in every chart of one matrix.
struct SeriesStyles {
    targets: Vec<String>,
    workloads: Vec<(bool, String)>,
}

impl SeriesStyles {
    fn new(reports: &[RunReport]) -> Self {
        let targets: BTreeSet<String> = reports.iter().map(|r| r.target.clone()).collect();
        let workloads: BTreeSet<(bool, String)> = reports.iter().map(workload_key).collect();
        Self { targets: targets.into_iter().collect(), workloads: workloads.into_iter().collect() }
    }

    /// The family colour for the first target of each family (in name order), further colours for the rest.
    fn color(&self, target: &str) -> RGBColor {
        let i = self.targets.iter().position(|t| t == target).unwrap_or(0);
        let family = family_color(target);
        match family {
            Some(c) if self.targets[..i].iter().all(|t| family_color(t) != family) => c,
            _ => OTHERS[i % OTHERS.len()],
        }
    }

    fn style(&self, key: &(bool, String)) -> usize {
        self.workloads.iter().position(|w| w == key).unwrap_or(0)
    }
}

/// Sort key and name of a report's workload: load phases first; "50/50", "50/50 load".
fn workload_key(r: &RunReport) -> (bool, String) {
    let load = r.phase.eq_ignore_ascii_case("load");
    let suffix = if load && !r.workload.eq_ignore_ascii_case("load") { " load" } else { "" };
    (!load, format!("{}{suffix}", r.workload))
}

/// The throughput or p99 chart of a matrix for one record size.
fn draw_matrix(root: &Area<'_>, reports: &[&RunReport], styles: &SeriesStyles, p99: bool, bytes: usize) -> DrawResult {
    let what = if p99 { "p99 latency (log scale)" } else { "throughput (ops/s)" };
    let (plot, legend) = frame(root, &format!("YCSB, {bytes}-byte records: {what} vs client threads"))?;
    let mut series = Series::new();
    for r in reports {
        let value =
            if p99 { main_p99(r).map(|us| us.max(1) as f64) } else { Some(r.throughput).filter(|t| t.is_finite()) };
        if let Some(v) = value {
            series.entry((r.target.clone(), workload_key(r))).or_default().push((r.threads as f64, v.max(0.0)));
        }
    }
    series.values_mut().for_each(|points| points.sort_by(|a, b| a.0.total_cmp(&b.0)));
    let entries: Vec<_> = (series.keys())
        .map(|(t, w)| {
            (
                format!("{t} · {}", w.1),
                Swatch::Line { color: styles.color(t), dash: styles.style(w), marker: Some(styles.style(w)) },
            )
        })
        .collect();
    let notes: Vec<String> = if p99 {
        vec!["p99 of the main operations:".into(), "load: INSERT".into(), "run: worst of READ, UPDATE".into()]
    } else {
        vec!["all operations per second".into()]
    };
    draw_legend(&legend, "target · workload", &entries, &notes)?;
    let all: Vec<(f64, f64)> = series.values().flatten().copied().collect();
    if all.is_empty() {
        return no_data(&plot, "no results to plot");
    }
    let threads: BTreeSet<u64> = all.iter().map(|p| p.0 as u64).collect();
    let (lo, hi) = (all.iter().map(|p| p.0).fold(f64::MAX, f64::min), all.iter().map(|p| p.0).fold(0.0, f64::max));
    let pad = ((hi - lo) * 0.05).max(1.0);
    let x = Ticked {
        inner: RangedCoordf64::from(lo - pad..hi + pad),
        ticks: threads.into_iter().map(|t| t as f64).collect(),
    };
    let (y_low, y_top) =
        (all.iter().map(|p| p.1).fold(f64::MAX, f64::min), all.iter().map(|p| p.1).fold(0.0, f64::max));
    let threads_fmt = |v: &f64| format!("{v:.0}");
    if p99 {
        let mut chart = chart_on(&plot, x, log_us(y_low, y_top))?;
        draw_mesh(&mut chart, ("client threads", what), &threads_fmt, &|v| fmt_us(*v), true)?;
        draw_series(chart.plotting_area(), &series, styles)
    } else {
        let mut chart = chart_on(&plot, x, RangedCoordf64::from(0.0..nice_max(y_top)))?;
        draw_mesh(&mut chart, ("client threads", what), &threads_fmt, &|v| fmt_count(*v), true)?;
        draw_series(chart.plotting_area(), &series, styles)
    }
}

/// Draws each (target, workload) series as a line in its workload's style with markers at the points.
fn draw_series<X, Y>(
    area: &DrawingArea<Canvas<'_>, Cartesian2d<X, Y>>,
    series: &Series,
    styles: &SeriesStyles,
) -> DrawResult
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for ((target, workload), points) in series {
        let (color, style) = (styles.color(target), styles.style(workload));
        draw_line(area, points.clone(), style, color)?;
        points.iter().try_for_each(|&p| draw_marker(area, p, style, color))?;
    }
    Ok(())
}

/// Draws a 2-px line through `points`: solid, dashed or dotted by `dash`.
fn draw_line<CT>(area: &DrawingArea<Canvas<'_>, CT>, points: Vec<CT::From>, dash: usize, color: RGBColor) -> DrawResult
where
    CT: CoordTranslate<From: Clone + 'static>,
{
    let style = color.stroke_width(2);
    match dash % 3 {
        0 => area.draw(&PathElement::new(points, style))?,
        1 => area.draw(&DashedPathElement::new(points, 10, 6, style))?,
        _ => area.draw(&DashedPathElement::new(points, 3, 4, style))?,
    }
    Ok(())
}

/// Draws a marker at `at`: filled circle, triangle, cross or ring by `kind`.
fn draw_marker<CT>(area: &DrawingArea<Canvas<'_>, CT>, at: CT::From, kind: usize, color: RGBColor) -> DrawResult
where
    CT: CoordTranslate<From: Clone + 'static>,
{
    match kind % 4 {
        0 => area.draw(&Circle::new(at, 5, color.filled()))?,
        1 => area.draw(&TriangleMarker::new(at, 7, color.filled()))?,
        2 => area.draw(&Cross::new(at, 5, color.stroke_width(3)))?,
        _ => area.draw(&Circle::new(at, 5, color.stroke_width(2)))?,
    }
    Ok(())
}

/// Colours for targets other than the first of each known family.
const OTHERS: [RGBColor; 6] = [
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(90, 90, 90),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Shoal blue, postgres orange-red, mongodb green, by name prefix; `None` for other targets.
fn family_color(target: &str) -> Option<RGBColor> {
    let t = target.to_ascii_lowercase();
    match () {
        _ if t.starts_with("shoal") => Some(RGBColor(31, 119, 180)),
        _ if t.starts_with("postgres") || t.starts_with("pg") => Some(RGBColor(230, 85, 13)),
        _ if t.starts_with("mongo") => Some(RGBColor(44, 160, 44)),
        _ => None,
    }
}

/// `color` blended towards white: `strength` 1 is the colour itself, 0 is white.
fn shade(color: RGBColor, strength: f64) -> RGBColor {
    let mix = |c: u8| (255.0 - (255.0 - f64::from(c)) * strength).round() as u8;
    RGBColor(mix(color.0), mix(color.1), mix(color.2))
}

/// A round upper bound for a linear axis from 0 that shows `max` with some headroom.
fn nice_max(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let step = 10f64.powf((max * 1.1).log10().floor()) / 2.0;
    ((max * 1.1) / step).ceil() * step
}

/// 950, 12.5k, 3.2M.
fn fmt_count(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{}G", trim(v / 1e9)),
        a if a >= 1e6 => format!("{}M", trim(v / 1e6)),
        a if a >= 1e3 => format!("{}k", trim(v / 1e3)),
        _ => trim(v),
    }
}

/// 850 µs, 1.5 ms, 2 s.
fn fmt_us(us: f64) -> String {
    match us {
        u if u >= 1e6 => format!("{} s", fmt_count(u / 1e6)),
        u if u >= 1e3 => format!("{} ms", trim(u / 1e3)),
        u => format!("{} µs", trim(u)),
    }
}

/// At most one decimal, none if it would be .0 or the number is 100 or more.
fn trim(v: f64) -> String {
    if v.abs() >= 100.0 || (v - v.round()).abs() < 0.05 { format!("{v:.0}") } else { format!("{v:.1}") }
}

#[cfg(test)]
mod tests;
