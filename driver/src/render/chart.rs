//! Charts drawn by plotters as SVG inside the pages: no script, so the pages'
//! Content-Security-Policy stays as it is.
//! - [`run_chart`]: over runs (a matrix's history: one point per run). The axis is discrete, a run
//!   a slot labelled by its start; a point's 95% interval is a whisker; a change point is a dashed
//!   line before the run it starts with.
//! - [`xy_chart`]: over a continuous x (report.html's plots over time: seconds since the start, a
//!   check's number), with an optional dashed reference line (a target).
//!
//! Each series has its name written by its last point, in its colour (an x-y chart's right of the
//! plot, at its last point's height); shaded bands mark faults (red) and baselines (blue).
//! plotters has no hover, so on top of its drawing each point gets a transparent target and each
//! shaded band a rectangle, both with a `<title>` (the browser's tooltip), placed by the chart's
//! own coordinate mapping.

use maud::{Markup, PreEscaped, html};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const WIDTH: u32 = 640;
const HEIGHT: u32 = 300;
const FONT: &str = "sans-serif";

/// The series' colours, in order.
pub const PALETTE: [&str; 10] = [
    "#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#e16f24", "#6e7781",
    "#bf3989", "#4d2d00",
];

/// A run's slot on the axis: its id and the label under it (when it started).
#[derive(Debug, Clone, PartialEq)]
pub struct RunTick {
    pub run_id: String,
    pub label: String,
}

/// A value of one run, with its 95% interval when the run measured one (absolute bounds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunPoint {
    pub run: usize,
    pub value: f64,
    pub interval: Option<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunSeries {
    pub name: String,
    pub points: Vec<RunPoint>,
}

/// Runs `from..=to` shaded, `label` their tooltip.
#[derive(Debug, Clone, PartialEq)]
pub struct RunBand {
    pub label: String,
    pub from: usize,
    pub to: usize,
    /// A baseline window (blue) rather than runs with faults (red).
    pub baseline: bool,
}

/// A change starting with run `run`, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMark {
    pub run: usize,
    pub label: String,
}

pub struct RunChart<'a> {
    /// The figure's `data-plot`.
    pub id: &'a str,
    pub title: &'a str,
    pub y_label: &'a str,
    pub runs: &'a [RunTick],
    pub series: Vec<RunSeries>,
    pub bands: Vec<RunBand>,
    pub marks: Vec<RunMark>,
}

/// The chart as a figure, or "no data: `no_data`" when no series has a finite point.
pub fn run_chart(chart: &RunChart, no_data: &str) -> Markup {
    let series: Vec<RunSeries> = chart
        .series
        .iter()
        .map(|s| RunSeries {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .copied()
                .filter(|p| p.value.is_finite() && p.run < chart.runs.len())
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let drawn = (!series.is_empty()).then(|| svg(chart, &series));
    figure(chart.id, chart.title, no_data, drawn)
}

/// A chart's figure: its caption, and its drawing or, when there is nothing to draw (None),
/// "no data: `no_data`".
fn figure(id: &str, title: &str, no_data: &str, drawn: Option<String>) -> Markup {
    html! {
        figure.plot data-plot=(id) {
            figcaption { (title) }
            @match drawn {
                Some(svg) => (PreEscaped(svg)),
                None => p.no-data { "no data: " (no_data) },
            }
        }
        "\n"
    }
}

/// The y range: every value and interval bound, with a margin.
fn y_range(series: &[RunSeries]) -> (f64, f64) {
    let bounds = series.iter().flat_map(|s| &s.points).flat_map(|p| {
        let (lo, hi) = p.interval.unwrap_or((p.value, p.value));
        [p.value, lo, hi]
    });
    let (lo, hi) = bounds
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    let pad = if hi > lo {
        (hi - lo) * 0.08
    } else {
        lo.abs().max(1.0) * 0.1
    };
    let low = if lo >= 0.0 {
        (lo - pad).max(0.0)
    } else {
        lo - pad
    };
    (low, hi + pad)
}

/// x: run i at i (its slot from i − 0.5 to i + 0.5); y: the values.
type Coord =
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>;

/// The SVG: plotters' drawing, then the tooltip targets before its end tag.
fn svg(chart: &RunChart, series: &[RunSeries]) -> String {
    inline_svg(chart.id, chart.title, (WIDTH, HEIGHT), |root| {
        draw(root, chart, series)
    })
}

/// What `draw` draws with plotters as an SVG that scales with the page (class `chart`: the
/// page's style leaves its text alone), with the overlay `draw` returns before its end tag.
fn inline_svg(
    id: &str,
    title: &str,
    (width, height): (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<String, Box<dyn std::error::Error>>,
) -> String {
    let mut out = String::new();
    let overlay = {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        draw(&root).unwrap_or_else(|e| {
            tracing::warn!("chart {id} not drawn: {e}");
            String::new()
        })
    };
    // plotters writes a fixed size; a viewBox alone lets the page scale it.
    let body = out
        .split_once('>')
        .map_or(String::new(), |(_, rest)| rest.to_string());
    let body = body.trim_end().trim_end_matches("</svg>");
    // Inline in HTML, the SVG needs no namespace (and the report has no "://" in it).
    format!(
        "<svg viewBox=\"0 0 {width} {height}\" class=\"chart\" role=\"img\" \
         aria-label=\"{}\">{body}{overlay}</svg>",
        maud::html! { (title) }.into_string()
    )
}

/// Draws the chart; returns the overlay (bands and point targets) in the drawing's pixels.
fn draw(
    root: &DrawingArea<SVGBackend, Shift>,
    chart: &RunChart,
    series: &[RunSeries],
) -> Result<String, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (y0, y1) = y_range(series);
    let n = chart.runs.len() as f64;
    let mut ctx = ChartBuilder::on(root)
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, y0..y1)?;
    // Counts (failures) get whole ticks only.
    let counts = series
        .iter()
        .flat_map(|s| &s.points)
        .all(|p| p.value.fract() == 0.0 && p.interval.is_none());
    // At most n ticks over a width of n runs: whole runs only; every k-th one labelled.
    let every = chart.runs.len().div_ceil(5).max(1);
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(chart.runs.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            match chart.runs.get(i as usize) {
                Some(r) if (x - i).abs() < 1e-6 && (i as usize).is_multiple_of(every) => {
                    r.label.clone()
                }
                _ => String::new(),
            }
        })
        .y_label_formatter(&|y| tick(*y, counts))
        .y_desc(chart.y_label)
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for mark in &chart.marks {
        mark_change(&mut ctx, mark, (y0, y1))?;
    }
    for (i, s) in series.iter().enumerate() {
        draw_series(&mut ctx, s, colour(i))?;
    }
    Ok(overlay(&ctx, chart, series, (y0, y1)))
}

fn colour(i: usize) -> RGBColor {
    let hex = PALETTE[i % PALETTE.len()].trim_start_matches('#');
    let byte = |at: usize| u8::from_str_radix(&hex[at..at + 2], 16).unwrap_or(0);
    RGBColor(byte(0), byte(2), byte(4))
}

fn draw_series(
    ctx: &mut ChartContext<SVGBackend, Coord>,
    s: &RunSeries,
    colour: RGBColor,
) -> Result<(), Box<dyn std::error::Error>> {
    let at = |p: &RunPoint| (p.run as f64, p.value);
    ctx.draw_series(LineSeries::new(
        s.points.iter().map(at),
        colour.stroke_width(2),
    ))?;
    ctx.draw_series(s.points.iter().filter_map(|p| {
        let (lo, hi) = p.interval?;
        Some(ErrorBar::new_vertical(
            p.run as f64,
            lo,
            p.value,
            hi,
            colour.filled(),
            8,
        ))
    }))?;
    ctx.draw_series(
        s.points
            .iter()
            .map(|p| Circle::new(at(p), 3, colour.filled())),
    )?;
    if let Some(last) = s.points.last() {
        let style = TextStyle::from((FONT, 16).into_font())
            .color(&colour)
            .pos(Pos::new(HPos::Right, VPos::Bottom));
        ctx.draw_series(std::iter::once(Text::new(s.name.clone(), at(last), style)))?;
    }
    Ok(())
}

/// A dashed line at the start of run `mark.run`'s slot, its label at the top.
fn mark_change(
    ctx: &mut ChartContext<SVGBackend, Coord>,
    mark: &RunMark,
    (y0, y1): (f64, f64),
) -> Result<(), Box<dyn std::error::Error>> {
    let x = mark.run as f64 - 0.5;
    let colour = RGBColor(130, 80, 223);
    ctx.draw_series(DashedLineSeries::new(
        [(x, y0), (x, y1)],
        6,
        4,
        colour.stroke_width(2),
    ))?;
    let style = TextStyle::from((FONT, 16).into_font()).color(&colour);
    ctx.draw_series(std::iter::once(Text::new(
        mark.label.clone(),
        (x, y1),
        style,
    )))?;
    Ok(())
}

/// The bands and one transparent target per point, each with its tooltip, in the chart's pixels.
fn overlay(
    ctx: &ChartContext<SVGBackend, Coord>,
    chart: &RunChart,
    series: &[RunSeries],
    (y0, y1): (f64, f64),
) -> String {
    let escape = |s: &str| maud::html! { (s) }.into_string();
    let pixel = |x: f64, y: f64| ctx.backend_coord(&(x, y));
    let mut out = String::new();
    for band in &chart.bands {
        let (left, top) = pixel(band.from as f64 - 0.5, y1);
        let (right, bottom) = pixel(band.to as f64 + 0.5, y0);
        out.push_str(&format!(
            "<rect class=\"band{}\" x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" \
             fill=\"{}\" fill-opacity=\"0.12\"><title>{}</title></rect>",
            if band.baseline { " baseline" } else { "" },
            right - left,
            bottom - top,
            if band.baseline { "#0969da" } else { "#cf222e" },
            escape(&band.label)
        ));
    }
    for s in series {
        for p in &s.points {
            let (x, y) = pixel(p.run as f64, p.value);
            let run = &chart.runs[p.run];
            let interval = p
                .interval
                .map(|(lo, hi)| format!(" [{}, {}]", value(lo), value(hi)))
                .unwrap_or_default();
            out.push_str(&format!(
                "<circle class=\"point\" cx=\"{x}\" cy=\"{y}\" r=\"7\" fill-opacity=\"0\">\
                 <title>{} ({}): {} {}{interval}</title></circle>",
                escape(&run.run_id),
                escape(&run.label),
                escape(&s.name),
                value(p.value)
            ));
        }
    }
    out
}

/// A y tick's label: none between whole numbers of a count.
fn tick(y: f64, counts: bool) -> String {
    match (counts, (y - y.round()).abs() < 1e-9) {
        (true, false) => String::new(),
        (true, true) => format!("{:.0}", y.round()),
        _ => value(y),
    }
}

fn value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

// x-y charts. What the page and its tests read of one: each point's target is a `circle.pt`
// (its tooltip "NAME: x, y") inside its series' `g.series` (`data-series`, and `data-points`:
// the series' count of finite points).

/// At most this many ticks on an axis.
const XY_TICKS: usize = 10;
/// A series' name by its last point: at most this many characters (the tooltips have it all).
const XY_NAME_CHARS: usize = 28;

/// One named line of an x-y chart.
#[derive(Debug, Clone, PartialEq)]
pub struct XySeries {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A span of an x-y chart's x axis, shaded, `label` its tooltip.
#[derive(Debug, Clone, PartialEq)]
pub struct XyBand {
    pub label: String,
    pub from: f64,
    pub to: f64,
    /// A baseline window (blue) rather than a fault's (red).
    pub baseline: bool,
}

/// An x-y chart: its id (`data-plot`), title, axis labels, series, an optional horizontal
/// reference line (a target: its label and y) and shaded spans of x.
pub struct XyChart<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<XySeries>,
    pub reference: Option<(&'a str, f64)>,
    pub bands: Vec<XyBand>,
}

/// The chart as a figure, or "no data: `no_data`" when no series has a finite point.
pub fn xy_chart(chart: &XyChart, no_data: &str) -> Markup {
    // Only finite points are drawn (and counted); a series keeps its colour by its place.
    let series: Vec<XySeries> = chart
        .series
        .iter()
        .map(|s| XySeries {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
        })
        .collect();
    let drawn = series.iter().any(|s| !s.points.is_empty()).then(|| {
        inline_svg(chart.id, chart.title, (WIDTH, HEIGHT), |root| {
            draw_xy(root, chart, &series)
        })
    });
    figure(chart.id, chart.title, no_data, drawn)
}

/// The ranges an x-y chart shows, and whether an axis has whole numbers only.
struct XyFrame {
    x: (f64, f64),
    y: (f64, f64),
    x_whole: bool,
    y_whole: bool,
}

impl XyFrame {
    /// x over the data (a run's load starts seconds after its start: from 0, a short run's plot
    /// would be half blank); y from 0 unless data is below, covering the reference line too,
    /// with a margin above.
    fn new(series: &[XySeries], reference: Option<f64>) -> XyFrame {
        let points = || series.iter().flat_map(|s| s.points.iter().copied());
        let whole = |v: f64| v.fract() == 0.0;
        let span = |from: f64, values: &mut dyn Iterator<Item = f64>| {
            let (lo, hi) = values.fold((from, f64::NEG_INFINITY), |(lo, hi), v| {
                (f64::min(lo, v), f64::max(hi, v))
            });
            if hi > lo { (lo, hi) } else { (lo, lo + 1.0) }
        };
        let x = span(f64::INFINITY, &mut points().map(|p| p.0));
        let (y0, y1) = span(0.0, &mut points().map(|p| p.1).chain(reference));
        XyFrame {
            x,
            y: (y0, y1 + (y1 - y0) * 0.06),
            x_whole: points().all(|p| whole(p.0)),
            y_whole: points().all(|p| whole(p.1)) && reference.is_none_or(whole),
        }
    }
}

/// How many ticks plotters may put on an axis over `lo..hi`: on whole numbers only, no more than
/// there are whole numbers in it, so that its round steps are 1, 2, 5, 10...
fn tick_count((lo, hi): (f64, f64), whole: bool) -> usize {
    if whole {
        ((hi - lo).floor() as usize + 1).clamp(2, XY_TICKS)
    } else {
        XY_TICKS
    }
}

/// A tick's label: a whole number on an axis of whole numbers (none between them), else the
/// value with its trailing zeros dropped.
fn xy_tick(v: f64, whole: bool) -> String {
    if (v - v.round()).abs() < 1e-9 {
        // + 0.0: no "-0".
        format!("{:.0}", v.round() + 0.0)
    } else if whole {
        String::new()
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A value in a tooltip, without trailing zeros.
fn number(v: f64) -> String {
    let s = value(v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn xy_font(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font())
}

/// The names written by the series' last points, shortened to fit.
fn series_names(series: &[XySeries]) -> Vec<String> {
    series
        .iter()
        .map(|s| match s.name.char_indices().nth(XY_NAME_CHARS - 1) {
            Some((at, _)) if s.name.chars().count() > XY_NAME_CHARS => {
                format!("{}…", &s.name[..at])
            }
            _ => s.name.clone(),
        })
        .collect()
}

/// Draws the x-y chart; returns the overlay (tooltip targets) in the drawing's pixels.
fn draw_xy(
    root: &DrawingArea<SVGBackend, Shift>,
    chart: &XyChart,
    series: &[XySeries],
) -> Result<String, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let frame = XyFrame::new(series, reference(chart).map(|r| r.1));
    let names = series_names(series);
    // Room on the right for the series' names.
    let mut right = 0;
    for (s, name) in series.iter().zip(&names) {
        if !s.points.is_empty() {
            right = right.max(root.estimate_text_size(name, &xy_font(16))?.0 + 10);
        }
    }
    let mut ctx = ChartBuilder::on(root)
        .margin(14)
        .margin_right(14 + right)
        .x_label_area_size(46)
        .y_label_area_size(76)
        .build_cartesian_2d(frame.x.0..frame.x.1, frame.y.0..frame.y.1)?;
    ctx.configure_mesh()
        .x_labels(tick_count(frame.x, frame.x_whole))
        .y_labels(tick_count(frame.y, frame.y_whole))
        .max_light_lines(0)
        .x_label_formatter(&|x| xy_tick(*x, frame.x_whole))
        .y_label_formatter(&|y| xy_tick(*y, frame.y_whole))
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 16))
        .bold_line_style(RGBColor(234, 238, 242))
        .axis_style(RGBColor(87, 96, 106))
        .draw()?;
    for band in &chart.bands {
        if let Some((from, to)) = band_span(band, &frame) {
            // Blue or red.
            let fill = if band.baseline { colour(0) } else { colour(1) };
            ctx.draw_series(std::iter::once(Rectangle::new(
                [(from, frame.y.1), (to, frame.y.0)],
                fill.mix(0.12).filled(),
            )))?;
        }
    }
    if let Some((label, y)) = reference(chart) {
        draw_reference(&mut ctx, label, y, frame.x)?;
    }
    for (i, s) in series
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.points.is_empty())
    {
        ctx.draw_series(LineSeries::new(
            s.points.iter().copied(),
            colour(i).stroke_width(2),
        ))?;
        let r = if s.points.len() > 120 { 2 } else { 3 };
        ctx.draw_series(
            s.points
                .iter()
                .map(|&p| Circle::new(p, r, colour(i).filled())),
        )?;
    }
    name_series(root, &ctx, series, &names)?;
    Ok(xy_overlay(&ctx, chart, series, &frame).into_string())
}

/// The chart's reference line, if its y is a number.
fn reference<'a>(chart: &XyChart<'a>) -> Option<(&'a str, f64)> {
    chart.reference.filter(|(_, y)| y.is_finite())
}

/// The part of `band` that the chart shows, if any.
fn band_span(band: &XyBand, frame: &XyFrame) -> Option<(f64, f64)> {
    let (from, to) = (band.from.max(frame.x.0), band.to.min(frame.x.1));
    (from < to).then_some((from, to))
}

/// The reference line, dashed across the chart, its label and value above its left end (where
/// the series are usually below a target: the first checks, at low load).
fn draw_reference(
    ctx: &mut ChartContext<SVGBackend, Coord>,
    label: &str,
    y: f64,
    (x0, x1): (f64, f64),
) -> Result<(), Box<dyn std::error::Error>> {
    let red = colour(1);
    ctx.draw_series(DashedLineSeries::new(
        [(x0, y), (x1, y)],
        6,
        4,
        red.stroke_width(2),
    ))?;
    let style = xy_font(16)
        .color(&red)
        .pos(Pos::new(HPos::Left, VPos::Bottom));
    ctx.draw_series(std::iter::once(
        EmptyElement::at((x0, y)) + Text::new(format!("{label} {}", number(y)), (6, -2), style),
    ))?;
    Ok(())
}

/// Each series' name at the height of its last point, in its colour, right of the plot (so that
/// no name covers a line); names that would overlap are moved apart.
fn name_series(
    root: &DrawingArea<SVGBackend, Shift>,
    ctx: &ChartContext<SVGBackend, Coord>,
    series: &[XySeries],
    names: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let ends: Vec<(usize, i32)> = series
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, ctx.backend_coord(s.points.last()?).1)))
        .collect();
    let (x, y) = ctx.plotting_area().get_pixel_range();
    let ys: Vec<i32> = ends.iter().map(|(_, y)| *y).collect();
    for ((i, _), y) in ends.iter().zip(spread(&ys, 16, (y.start, y.end))) {
        let colour = colour(*i);
        let style = xy_font(16)
            .color(&colour)
            .pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(names[*i].clone(), (x.end + 6, y), style))?;
    }
    Ok(())
}

/// Label centres `ys` moved apart to at least `gap` pixels between neighbours, in their order,
/// and back within `top..=bottom` where there is room.
fn spread(ys: &[i32], gap: i32, (top, bottom): (i32, i32)) -> Vec<i32> {
    let mut order: Vec<usize> = (0..ys.len()).collect();
    order.sort_by_key(|&i| ys[i]);
    let mut out = ys.to_vec();
    let mut above: Option<i32> = None;
    for &i in &order {
        out[i] = out[i].max(top).max(above.map_or(i32::MIN, |a| a + gap));
        above = Some(out[i]);
    }
    let mut below: Option<i32> = None;
    for &i in order.iter().rev() {
        out[i] = out[i].min(bottom).min(below.map_or(i32::MAX, |b| b - gap));
        below = Some(out[i]);
    }
    out
}

/// The tooltip targets: each band, the reference line, and each point (in its series' group).
fn xy_overlay(
    ctx: &ChartContext<SVGBackend, Coord>,
    chart: &XyChart,
    series: &[XySeries],
    frame: &XyFrame,
) -> Markup {
    let pixel = |x: f64, y: f64| ctx.backend_coord(&(x, y));
    html! {
        @for band in &chart.bands {
            @if let Some((from, to)) = band_span(band, frame) {
                @let (left, top) = pixel(from, frame.y.1);
                @let (right, bottom) = pixel(to, frame.y.0);
                rect.band.baseline[band.baseline] x=(left) y=(top) width=(right - left)
                    height=(bottom - top) fill-opacity="0"
                {
                    title { (band.label) }
                }
            }
        }
        @if let Some((label, y)) = reference(chart) {
            @let (x1, y1) = pixel(frame.x.0, y);
            @let (x2, _) = pixel(frame.x.1, y);
            line.reference x1=(x1) y1=(y1) x2=(x2) y2=(y1) stroke="#cf222e" stroke-opacity="0"
                stroke-width="8"
            {
                title { (label) ": " (number(y)) }
            }
        }
        @for s in series.iter().filter(|s| !s.points.is_empty()) {
            g.series data-series=(s.name) data-points=(s.points.len()) {
                @for &(x, y) in &s.points {
                    @let (cx, cy) = pixel(x, y);
                    circle.pt cx=(cx) cy=(cy) r="6" fill-opacity="0" {
                        title { (s.name) ": " (number(x)) ", " (number(y)) }
                    }
                }
            }
        }
    }
}

// Bar charts. What the page and its tests read of one: each drawn bar's target is a `rect.bar`
// (`rect.bar.front` where highlighted) exactly over the bar, its tooltip "LABEL: VALUE UNIT
// [LOW, HIGH]"; a row without a bar has a `rect.missing` target, and each row's label a
// `rect.label` one with its full label.

const BAR_WIDTH: u32 = 760;
/// A row's height, and the bar's within it (in rows).
const BAR_ROW: u32 = 28;
const BAR_THICKNESS: f64 = 0.64;
const BAR_FONT: u32 = 16;
/// The labels' column is at most this wide; a longer label is shortened in its middle.
const BAR_LABEL_MAX: u32 = 340;
const BAR_GREY: RGBColor = RGBColor(140, 149, 159);
const BAR_GREEN: RGBColor = RGBColor(26, 127, 55);
const BAR_INK: RGBColor = RGBColor(36, 41, 47);
const BAR_RED: RGBColor = RGBColor(207, 34, 46);

/// A bar's value with its 95% interval (absolute bounds), or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub enum BarValue {
    Value {
        value: f64,
        interval: Option<(f64, f64)>,
    },
    /// No bar: these words are written in its place, in red.
    Missing(String),
}

/// One row of a bar chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// The row's label in full: its tooltips'.
    pub label: String,
    /// What is written left of the bar (shortened further when it does not fit).
    pub short_label: String,
    pub value: BarValue,
    /// Drawn green rather than grey.
    pub highlight: bool,
    /// Written after the value, in brackets, and in the tooltip (e.g. "tied").
    pub note: Option<String>,
}

/// Horizontal bars from 0, a row each in order, labels on the left and values at the bars' ends;
/// an interval is a whisker over its bar. `unit` follows values in tooltips.
pub struct BarChart<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub x_label: &'a str,
    pub unit: &'a str,
    pub bars: Vec<Bar>,
}

/// The chart as a figure, or "no data: `no_data`" when it has no row.
pub fn bar_chart(chart: &BarChart, no_data: &str) -> Markup {
    // A value that is no number is no bar either.
    let bars: Vec<Bar> = chart
        .bars
        .iter()
        .cloned()
        .map(|mut b| {
            if let BarValue::Value { value, interval } = &mut b.value {
                if !value.is_finite() {
                    b.value = BarValue::Missing("no value".into());
                } else if interval.is_some_and(|(lo, hi)| !(lo.is_finite() && hi.is_finite())) {
                    *interval = None;
                }
            }
            b
        })
        .collect();
    let height = BAR_ROW * bars.len() as u32 + 60;
    let drawn = (!bars.is_empty()).then(|| {
        inline_svg(chart.id, chart.title, (BAR_WIDTH, height), |root| {
            draw_bars(root, chart, &bars)
        })
    });
    figure(chart.id, chart.title, no_data, drawn)
}

/// A bar's value as written: one decimal.
fn bar_value(v: f64) -> String {
    format!("{v:.1}")
}

/// What is written at a bar's end: its value, and its note.
fn bar_end(value: f64, note: Option<&str>) -> String {
    match note {
        Some(note) => format!("{} ({note})", bar_value(value)),
        None => bar_value(value),
    }
}

/// About how wide a character is, in pixels, in plotters' text of `size` (which its SVG writes
/// as `size / 1.24`): sans-serif's average, on the wide side so that text fits.
fn char_px(size: u32) -> f64 {
    size as f64 / 1.24 * 0.58
}

/// About how wide `text` is in pixels at `size`.
fn text_px(text: &str, size: u32) -> u32 {
    (text.chars().count() as f64 * char_px(size)).ceil() as u32
}

/// `text` shortened to at most `px` pixels wide: its middle (`middle`) or its end replaced by "…".
fn fit(text: &str, px: u32, size: u32, middle: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let room = (px as f64 / char_px(size)).floor() as usize;
    if chars.len() <= room {
        return text.to_string();
    }
    let keep = room.saturating_sub(1);
    let (head, tail) = if middle {
        (keep.div_ceil(2), keep / 2)
    } else {
        (keep, 0)
    };
    let head: String = chars[..head].iter().collect();
    let tail: String = chars[chars.len() - tail..].iter().collect();
    format!("{head}…{tail}")
}

/// The x axis's end: the largest value or interval bound, with a margin (1 when there is none).
fn bar_top(bars: &[Bar]) -> f64 {
    let top = bars
        .iter()
        .flat_map(|b| match b.value {
            BarValue::Value { value, interval } => {
                let (_, hi) = interval.unwrap_or((value, value));
                vec![value, hi]
            }
            BarValue::Missing(_) => Vec::new(),
        })
        .fold(0.0, f64::max);
    if top > 0.0 { top * 1.04 } else { 1.0 }
}

/// Draws the bars; returns the overlay (their tooltip targets) in the drawing's pixels.
fn draw_bars(
    root: &DrawingArea<SVGBackend, Shift>,
    chart: &BarChart,
    bars: &[Bar],
) -> Result<String, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let labels: Vec<String> = bars
        .iter()
        .map(|b| fit(&b.short_label, BAR_LABEL_MAX, BAR_FONT, true))
        .collect();
    let label_w = labels
        .iter()
        .map(|l| text_px(l, BAR_FONT))
        .max()
        .unwrap_or(0);
    // Room right of the plot for the longest bar's value.
    let right = bars
        .iter()
        .filter_map(|b| match b.value {
            BarValue::Value { value, .. } => Some(text_px(&bar_end(value, b.note.as_deref()), 15)),
            BarValue::Missing(_) => None,
        })
        .max()
        .unwrap_or(0)
        + 16;
    let top = bar_top(bars);
    let rows = bars.len() as f64;
    let mut ctx = row_chart(root, (10, right), label_w, (top, rows), chart.x_label)?;
    // The words in place of a bar have the plot's width and the values' margin.
    let plot = ctx.plotting_area().get_pixel_range().0;
    let room = (plot.end - plot.start).max(0) as u32 + right - 12;
    for (i, bar) in bars.iter().enumerate() {
        draw_bar(&mut ctx, bar, rows - i as f64 - 0.5, room)?;
    }
    draw_row_labels(root, &ctx, &labels)?;
    Ok(bar_overlay(&ctx, chart, bars, (label_w + 20) as i32).into_string())
}

/// A chart of horizontal rows (bars, waterfalls) over `extent` (x up to its first, one row
/// per unit of its second), with `margins` (top, right) and a label column `label_w` wide.
fn row_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    margins: (u32, u32),
    label_w: u32,
    extent: (f64, f64),
    x_label: &str,
) -> Result<ChartContext<'a, SVGBackend<'b>, Coord>, Box<dyn std::error::Error>> {
    let mut ctx = ChartBuilder::on(root)
        .margin_top(margins.0)
        .margin_bottom(4)
        .margin_left(6)
        .margin_right(margins.1)
        .x_label_area_size(46)
        .y_label_area_size(label_w + 14)
        .build_cartesian_2d(0.0..extent.0, 0.0..extent.1)?;
    ctx.configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(8)
        .max_light_lines(0)
        .x_label_formatter(&|x| xy_tick(*x, false))
        .x_desc(x_label)
        .label_style((FONT, BAR_FONT))
        .axis_desc_style((FONT, BAR_FONT))
        .bold_line_style(RGBColor(234, 238, 242))
        .axis_style(RGBColor(87, 96, 106))
        .draw()?;
    Ok(ctx)
}

/// The rows' labels, left-aligned in their column, the first at the top.
fn draw_row_labels(
    root: &DrawingArea<SVGBackend, Shift>,
    ctx: &ChartContext<SVGBackend, Coord>,
    labels: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let rows = labels.len() as f64;
    for (i, label) in labels.iter().enumerate() {
        let (_, y) = ctx.backend_coord(&(0.0, rows - i as f64 - 0.5));
        let style = xy_font(BAR_FONT)
            .color(&BAR_INK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(label.clone(), (6, y), style))?;
    }
    Ok(())
}

/// Row `bar` centred at `y`: its bar, whisker and value, or why it has none (in at most `room`
/// pixels).
fn draw_bar(
    ctx: &mut ChartContext<SVGBackend, Coord>,
    bar: &Bar,
    y: f64,
    room: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let half = BAR_THICKNESS / 2.0;
    match &bar.value {
        BarValue::Value { value, interval } => {
            let fill = if bar.highlight { BAR_GREEN } else { BAR_GREY };
            ctx.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + half), (*value, y - half)],
                fill.filled(),
            )))?;
            let mut end = *value;
            if let Some((lo, hi)) = *interval {
                let ink = BAR_INK.stroke_width(2);
                let cap = half * 0.6;
                ctx.draw_series([
                    PathElement::new(vec![(lo, y), (hi, y)], ink),
                    PathElement::new(vec![(lo, y - cap), (lo, y + cap)], ink),
                    PathElement::new(vec![(hi, y - cap), (hi, y + cap)], ink),
                ])?;
                end = end.max(hi);
            }
            let style = xy_font(15)
                .color(&BAR_INK)
                .pos(Pos::new(HPos::Left, VPos::Center));
            ctx.draw_series(std::iter::once(
                EmptyElement::at((end, y))
                    + Text::new(bar_end(*value, bar.note.as_deref()), (6, 0), style),
            ))?;
        }
        BarValue::Missing(why) => {
            let style = xy_font(15)
                .color(&BAR_RED)
                .pos(Pos::new(HPos::Left, VPos::Center));
            ctx.draw_series(std::iter::once(
                EmptyElement::at((0.0, y)) + Text::new(fit(why, room, 15, false), (6, 0), style),
            ))?;
        }
    }
    Ok(())
}

/// The tooltip targets: each row's label, and its bar (or the words in its place).
fn bar_overlay(
    ctx: &ChartContext<SVGBackend, Coord>,
    chart: &BarChart,
    bars: &[Bar],
    label_w: i32,
) -> Markup {
    let rows = bars.len() as f64;
    let half = BAR_THICKNESS / 2.0;
    let x_end = ctx.plotting_area().get_pixel_range().0.end;
    html! {
        @for (i, bar) in bars.iter().enumerate() {
            @let y = rows - i as f64 - 0.5;
            @let (x0, row_top) = ctx.backend_coord(&(0.0, y + 0.5));
            @let (_, row_bottom) = ctx.backend_coord(&(0.0, y - 0.5));
            rect.label x="0" y=(row_top) width=(label_w) height=(row_bottom - row_top)
                fill-opacity="0"
            {
                title { (bar.label) }
            }
            @match &bar.value {
                BarValue::Value { value, interval } => {
                    @let (left, bar_top) = ctx.backend_coord(&(0.0, y + half));
                    @let (right, bar_bottom) = ctx.backend_coord(&(*value, y - half));
                    rect.bar.front[bar.highlight] x=(left) y=(bar_top) width=(right - left)
                        height=(bar_bottom - bar_top) fill-opacity="0"
                    {
                        title {
                            (bar.label) ": " (bar_value(*value)) " " (chart.unit)
                            @if let Some((lo, hi)) = interval {
                                " [" (bar_value(*lo)) ", " (bar_value(*hi)) "]"
                            }
                            @if let Some(note) = &bar.note { " (" (note) ")" }
                        }
                    }
                }
                BarValue::Missing(why) => {
                    rect.missing x=(x0) y=(row_top) width=(x_end - x0)
                        height=(row_bottom - row_top) fill-opacity="0"
                    {
                        title { (bar.label) ": " (why) }
                    }
                }
            }
        }
    }
}

// ---- Waterfalls: a request's time as horizontal stacked bars, one row per request, from its
// start; one colour per part (`PALETTE` in the parts' order), named in a legend above the plot.
// Each stretch has a `rect.segment` target whose tooltip says its part, length and start; a row
// without stretches is a grey bar of its whole length with its note (`rect.unsplit`).

/// One row of a waterfall chart.
#[derive(Debug, Clone, PartialEq)]
pub struct WaterfallRow {
    /// The row's label in full: its tooltips'.
    pub label: String,
    /// What is written left of the bar (shortened further when it does not fit).
    pub short_label: String,
    /// Its stretches: (part, as an index into the chart's `parts`; start; length).
    pub segments: Vec<(usize, f64, f64)>,
    /// Its whole length, written at its end.
    pub total: f64,
    /// Written after the total (e.g. why it has no stretches).
    pub note: Option<String>,
}

/// Stacked horizontal bars from 0, a row each in order, labels on the left.
pub struct WaterfallChart<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub x_label: &'a str,
    /// Follows values in tooltips.
    pub unit: &'a str,
    /// The parts' names, in the legend's order; part `i` is drawn in `PALETTE[i]`.
    pub parts: &'a [&'a str],
    pub rows: Vec<WaterfallRow>,
}

/// The legend's swatch and gap, and its text's size.
const LEGEND_FONT: u32 = 14;
const LEGEND_SWATCH: i32 = 12;
const LEGEND_LINE: i32 = 20;

/// The chart as a figure, or "no data: `no_data`" when it has no row.
pub fn waterfall_chart(chart: &WaterfallChart, no_data: &str) -> Markup {
    let rows: Vec<WaterfallRow> = chart
        .rows
        .iter()
        .cloned()
        .map(|mut r| {
            r.segments
                .retain(|&(_, start, len)| start.is_finite() && len.is_finite() && len > 0.0);
            if !r.total.is_finite() {
                r.total = 0.0;
            }
            r
        })
        .collect();
    let legend = legend_places(chart.parts, BAR_WIDTH as i32 - 12);
    let legend_h = legend.last().map_or(0, |&(_, y)| y + LEGEND_LINE);
    let height = BAR_ROW * rows.len() as u32 + 60 + legend_h as u32;
    let drawn = (!rows.is_empty()).then(|| {
        inline_svg(chart.id, chart.title, (BAR_WIDTH, height), |root| {
            draw_waterfall(root, chart, &rows, &legend)
        })
    });
    figure(chart.id, chart.title, no_data, drawn)
}

/// Where each part's swatch goes in the legend (its left and top, from the chart's top left):
/// in order, left to right, on a new line when the next would pass `width`.
fn legend_places(parts: &[&str], width: i32) -> Vec<(i32, i32)> {
    let (mut x, mut y) = (6, 6);
    parts
        .iter()
        .map(|name| {
            let w = LEGEND_SWATCH + 6 + text_px(name, LEGEND_FONT) as i32 + 18;
            if x > 6 && x + w > width {
                (x, y) = (6, y + LEGEND_LINE);
            }
            let at = (x, y);
            x += w;
            at
        })
        .collect()
}

/// What is written at a row's end: its total, and its note.
fn waterfall_end(row: &WaterfallRow) -> String {
    bar_end(row.total, row.note.as_deref())
}

/// Draws the legend, the rows and their labels; returns the overlay (tooltip targets).
fn draw_waterfall(
    root: &DrawingArea<SVGBackend, Shift>,
    chart: &WaterfallChart,
    rows: &[WaterfallRow],
    legend: &[(i32, i32)],
) -> Result<String, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    for (i, (name, &(x, y))) in chart.parts.iter().zip(legend).enumerate() {
        root.draw(&Rectangle::new(
            [(x, y), (x + LEGEND_SWATCH, y + LEGEND_SWATCH)],
            colour(i).filled(),
        ))?;
        let style = xy_font(LEGEND_FONT)
            .color(&BAR_INK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(
            name.to_string(),
            (x + LEGEND_SWATCH + 6, y + LEGEND_SWATCH / 2),
            style,
        ))?;
    }
    let legend_h = legend.last().map_or(0, |&(_, y)| y + LEGEND_LINE);
    let labels: Vec<String> = rows
        .iter()
        .map(|r| fit(&r.short_label, BAR_LABEL_MAX, BAR_FONT, true))
        .collect();
    let label_w = labels
        .iter()
        .map(|l| text_px(l, BAR_FONT))
        .max()
        .unwrap_or(0);
    let right = rows
        .iter()
        .map(|r| text_px(&waterfall_end(r), 15))
        .max()
        .unwrap_or(0)
        + 16;
    let top = rows.iter().map(|r| r.total).fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.04 } else { 1.0 };
    let n = rows.len() as f64;
    let margins = (10 + legend_h as u32, right);
    let mut ctx = row_chart(root, margins, label_w, (top, n), chart.x_label)?;
    for (i, row) in rows.iter().enumerate() {
        draw_waterfall_row(&mut ctx, row, n - i as f64 - 0.5)?;
    }
    draw_row_labels(root, &ctx, &labels)?;
    Ok(waterfall_overlay(&ctx, chart, rows, (label_w + 20) as i32).into_string())
}

/// Row `row` centred at `y`: its stretches (or a grey bar of its total) and its end's words.
fn draw_waterfall_row(
    ctx: &mut ChartContext<SVGBackend, Coord>,
    row: &WaterfallRow,
    y: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let half = BAR_THICKNESS / 2.0;
    if row.segments.is_empty() {
        ctx.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y + half), (row.total, y - half)],
            BAR_GREY.filled(),
        )))?;
    }
    ctx.draw_series(row.segments.iter().map(|&(part, start, len)| {
        Rectangle::new(
            [(start, y + half), (start + len, y - half)],
            colour(part).filled(),
        )
    }))?;
    let ink = if row.segments.is_empty() {
        BAR_RED
    } else {
        BAR_INK
    };
    let style = xy_font(15)
        .color(&ink)
        .pos(Pos::new(HPos::Left, VPos::Center));
    ctx.draw_series(std::iter::once(
        EmptyElement::at((row.total, y)) + Text::new(waterfall_end(row), (6, 0), style),
    ))?;
    Ok(())
}

/// The tooltip targets: each row's label, and each stretch (or the grey bar in their place).
fn waterfall_overlay(
    ctx: &ChartContext<SVGBackend, Coord>,
    chart: &WaterfallChart,
    rows: &[WaterfallRow],
    label_w: i32,
) -> Markup {
    let n = rows.len() as f64;
    let half = BAR_THICKNESS / 2.0;
    let part = |i: usize| chart.parts.get(i).copied().unwrap_or("?");
    html! {
        @for (i, row) in rows.iter().enumerate() {
            @let y = n - i as f64 - 0.5;
            @let (_, row_top) = ctx.backend_coord(&(0.0, y + 0.5));
            @let (_, row_bottom) = ctx.backend_coord(&(0.0, y - 0.5));
            rect.label x="0" y=(row_top) width=(label_w) height=(row_bottom - row_top)
                fill-opacity="0"
            {
                title { (row.label) }
            }
            @for &(p, start, len) in &row.segments {
                @let (left, top) = ctx.backend_coord(&(start, y + half));
                @let (right, bottom) = ctx.backend_coord(&(start + len, y - half));
                rect.segment data-part=(part(p)) x=(left) y=(top) width=((right - left).max(1))
                    height=(bottom - top) fill-opacity="0"
                {
                    title {
                        (row.label) ": " (part(p)) " " (number(len)) " " (chart.unit)
                        " (from " (number(start)) ")"
                    }
                }
            }
            @if row.segments.is_empty() {
                @let (left, top) = ctx.backend_coord(&(0.0, y + half));
                @let (right, bottom) = ctx.backend_coord(&(row.total, y - half));
                rect.unsplit x=(left) y=(top) width=((right - left).max(1)) height=(bottom - top)
                    fill-opacity="0"
                {
                    title {
                        (row.label) ": " (number(row.total)) " " (chart.unit)
                        @if let Some(note) = &row.note { " (" (note) ")" }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, points: &[(f64, f64)]) -> XySeries {
        XySeries {
            name: name.into(),
            points: points.to_vec(),
        }
    }

    fn chart<'a>(series: Vec<XySeries>) -> XyChart<'a> {
        XyChart {
            id: "t",
            title: "t",
            x_label: "seconds since the start",
            y_label: "ms",
            series,
            reference: None,
            bands: Vec::new(),
        }
    }

    /// The texts plotters wrote (tick labels, axis labels, series names), in order.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .map(|t| {
                let body = &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()];
                body.trim().to_string()
            })
            .collect()
    }

    #[test]
    fn an_xy_chart_has_one_point_element_per_finite_point() {
        let mut c = chart(vec![
            series("a", &[(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)]),
            // A non-finite point is not drawn, nor counted.
            series("b", &[(0.5, 10.0), (1.5, f64::NAN)]),
            series("c", &[(f64::INFINITY, 1.0)]),
        ]);
        c.reference = Some(("target", 5.0));
        let svg = xy_chart(&c, "unused").into_string();
        assert_eq!(svg.matches("<circle class=\"pt\"").count(), 4, "{svg}");
        assert!(svg.contains("data-series=\"a\" data-points=\"3\""), "{svg}");
        assert!(svg.contains("data-series=\"b\" data-points=\"1\""), "{svg}");
        assert!(!svg.contains("data-series=\"c\""), "{svg}");
        assert!(!svg.contains("no data"), "{svg}");
        assert!(svg.contains("<title>a: 1, 3</title>"), "{svg}");
        assert!(svg.contains("<title>b: 0.5, 10</title>"), "{svg}");
        // The reference line: drawn with its label, and a tooltip.
        let texts = texts(&svg);
        assert!(texts.iter().any(|t| t == "target 5"), "{texts:?}");
        assert!(svg.contains("class=\"reference\""), "{svg}");
        assert!(svg.contains("<title>target: 5</title>"), "{svg}");
        // The series' names, and the axes' labels.
        for name in ["a", "b", "seconds since the start", "ms"] {
            assert!(texts.iter().any(|t| t == name), "{name}: {texts:?}");
        }
        // The ticks cover the data: x 0..2, y 0..10.
        for tick in ["0", "2", "10"] {
            assert!(texts.iter().any(|t| t == tick), "{tick}: {texts:?}");
        }
        // Scales with the page; no fixed size, no script.
        assert!(svg.contains("<svg viewBox=\"0 0 640 300\""), "{svg}");
        assert!(!svg.contains("<script"), "{svg}");
    }

    #[test]
    fn an_xy_chart_without_a_finite_point_says_why() {
        let c = chart(vec![series("a", &[(1.0, f64::NAN)]), series("b", &[])]);
        let html = xy_chart(&c, "nothing measured").into_string();
        assert!(
            html.contains("<p class=\"no-data\">no data: nothing measured</p>"),
            "{html}"
        );
        assert!(!html.contains("<svg"), "{html}");
        assert!(
            html.starts_with("<figure class=\"plot\" data-plot=\"t\"><figcaption>t</figcaption>")
        );
    }

    /// Checks and concurrencies are whole numbers: their axes have no ticks between them.
    #[test]
    fn whole_number_axes_have_whole_ticks() {
        let mut c = chart(vec![series(
            "concurrency",
            &[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 2.0)],
        )]);
        c.x_label = "check";
        c.y_label = "concurrency";
        let svg = xy_chart(&c, "unused").into_string();
        let ticks: Vec<String> = texts(&svg)
            .into_iter()
            .filter(|t| t.parse::<f64>().is_ok())
            .collect();
        assert!(!ticks.is_empty(), "{svg}");
        for t in &ticks {
            assert!(t.parse::<i64>().is_ok(), "a fractional tick {t}: {ticks:?}");
        }
        for t in ["0", "1", "2", "3", "4"] {
            assert!(ticks.iter().any(|x| x == t), "{t}: {ticks:?}");
        }
        assert!(svg.contains("<title>concurrency: 3, 3</title>"), "{svg}");
        // Many checks: round steps, still whole.
        assert_eq!(tick_count((0.0, 3.2), true), 4);
        assert_eq!(tick_count((0.0, 400.0), true), XY_TICKS);
        assert_eq!(tick_count((0.0, 0.5), false), XY_TICKS);
        assert_eq!(xy_tick(2.5, true), "");
        assert_eq!(xy_tick(3.0, true), "3");
        assert_eq!(xy_tick(0.30000000000000004, false), "0.3");
        assert_eq!(xy_tick(1500.0, false), "1500");
        assert_eq!(xy_tick(-0.0, false), "0");
    }

    #[test]
    fn bands_are_shaded_within_the_chart_with_their_tooltips() {
        let mut c = chart(vec![series("a", &[(0.0, 1.0), (10.0, 2.0)])]);
        c.bands = vec![
            XyBand {
                label: "fault <crash>".into(),
                from: 4.0,
                // Not recovered: to the end of the chart.
                to: f64::INFINITY,
                baseline: false,
            },
            XyBand {
                label: "baseline".into(),
                from: 1.0,
                to: 2.0,
                baseline: true,
            },
            XyBand {
                label: "after the chart".into(),
                from: 20.0,
                to: 30.0,
                baseline: false,
            },
        ];
        let svg = xy_chart(&c, "unused").into_string();
        assert_eq!(svg.matches("<rect class=\"band\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("<rect class=\"band baseline\"").count(), 1);
        assert!(svg.contains("<title>fault &lt;crash&gt;</title>"), "{svg}");
        assert!(!svg.contains("after the chart"), "{svg}");
        // The fault's band ends where the x axis does: at the last point's x.
        let band = &svg[svg.find("<rect class=\"band\"").unwrap()..];
        let attr = |name: &str| -> i32 {
            let at = band.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            band[at..at + band[at..].find('"').unwrap()]
                .parse()
                .unwrap()
        };
        let last = &svg[svg.find("<title>a: 10, 2</title>").unwrap() - 80..];
        let cx = &last[last.find("cx=\"").unwrap() + 4..];
        let cx: i32 = cx[..cx.find('"').unwrap()].parse().unwrap();
        assert_eq!(attr("x") + attr("width"), cx, "{band}");
    }

    #[test]
    fn names_that_would_overlap_are_moved_apart() {
        // In order, at least 16 apart, within 0..=100.
        assert_eq!(spread(&[50, 50, 50], 16, (0, 100)), [50, 66, 82]);
        assert_eq!(spread(&[100, 95, 10], 16, (0, 100)), [100, 84, 10]);
        assert_eq!(spread(&[-5, 40], 16, (0, 100)), [0, 40]);
        // Long names are shortened where they are written, not in their tooltips.
        let long = "x".repeat(40);
        let names = series_names(&[series(&long, &[(1.0, 1.0)])]);
        assert_eq!(names[0].chars().count(), XY_NAME_CHARS);
        assert!(names[0].ends_with('…'));
    }

    fn bar(label: &str, value: BarValue) -> Bar {
        Bar {
            label: label.into(),
            short_label: label.into(),
            value,
            highlight: false,
            note: None,
        }
    }

    #[test]
    fn a_bar_chart_draws_a_target_per_bar_and_says_why_a_row_has_none() {
        let long = format!("#3 {}=8", "x".repeat(80));
        let c = BarChart {
            id: "b",
            title: "bars",
            x_label: "QPS",
            unit: "QPS",
            bars: vec![
                Bar {
                    highlight: true,
                    note: Some("tied".into()),
                    ..bar(
                        "a <1>",
                        BarValue::Value {
                            value: 30.0,
                            interval: Some((27.0, 33.0)),
                        },
                    )
                },
                bar(
                    &long,
                    BarValue::Value {
                        value: 10.0,
                        interval: None,
                    },
                ),
                bar(
                    "nan",
                    BarValue::Value {
                        value: f64::NAN,
                        interval: None,
                    },
                ),
                bar("gone", BarValue::Missing("failed: <oom>".into())),
            ],
        };
        let svg = bar_chart(&c, "unused").into_string();
        assert_eq!(svg.matches("<rect class=\"bar").count(), 2, "{svg}");
        assert_eq!(svg.matches("<rect class=\"bar front\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("<rect class=\"missing\"").count(), 2, "{svg}");
        assert_eq!(svg.matches("<rect class=\"label\"").count(), 4, "{svg}");
        assert!(
            svg.contains("<title>a &lt;1&gt;: 30.0 QPS [27.0, 33.0] (tied)</title>"),
            "{svg}"
        );
        assert!(
            svg.contains("<title>gone: failed: &lt;oom&gt;</title>"),
            "{svg}"
        );
        assert!(svg.contains("<title>nan: no value</title>"), "{svg}");
        // The long label: shortened in its middle where it is written, whole in its tooltip.
        let texts = texts(&svg);
        assert!(
            texts.iter().any(|t| t == "failed: &lt;oom&gt;"),
            "{texts:?}"
        );
        assert!(texts.iter().any(|t| t == "30.0 (tied)"), "{texts:?}");
        let written = texts.iter().find(|t| t.starts_with("#3 x")).unwrap();
        assert!(
            written.contains('…') && written.ends_with("x=8"),
            "{written}"
        );
        assert!(text_px(written, BAR_FONT) <= BAR_LABEL_MAX, "{written}");
        assert!(svg.contains(&format!("<title>{long}</title>")), "{svg}");
        assert!(svg.contains("<svg viewBox=\"0 0 760 "), "{svg}");
        assert!(!svg.contains("<script"), "{svg}");
        // No row: no chart.
        let empty = BarChart {
            bars: Vec::new(),
            ..c
        };
        let html = bar_chart(&empty, "no variant").into_string();
        assert!(
            html.contains("no data: no variant") && !html.contains("<svg"),
            "{html}"
        );
    }

    fn waterfall_rows() -> Vec<WaterfallRow> {
        vec![
            WaterfallRow {
                label: "trace <a> on triton-0".into(),
                short_label: "<a> triton-0".into(),
                segments: vec![
                    (0, 0.0, 0.5),
                    (3, 0.5, 20.0),
                    (5, 20.5, 1.5),
                    (1, 22.0, 0.0),
                ],
                total: 22.0,
                note: None,
            },
            WaterfallRow {
                label: "trace b".into(),
                short_label: "b".into(),
                segments: Vec::new(),
                total: 30.0,
                note: Some("server spans not received".into()),
            },
        ]
    }

    #[test]
    fn a_waterfall_stacks_each_rows_stretches_in_their_parts_colours_with_a_legend() {
        let parts = ["client", "transport", "handling", "queue", "input", "infer"];
        let c = WaterfallChart {
            id: "w",
            title: "slowest",
            x_label: "ms since the intended send",
            unit: "ms",
            parts: &parts,
            rows: waterfall_rows(),
        };
        let svg = waterfall_chart(&c, "unused").into_string();
        // Three stretches of some length (the empty one is not drawn), one unsplit row.
        assert_eq!(svg.matches("<rect class=\"segment\"").count(), 3, "{svg}");
        assert_eq!(svg.matches("<rect class=\"unsplit\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("<rect class=\"label\"").count(), 2, "{svg}");
        assert!(svg.contains("data-part=\"queue\""), "{svg}");
        assert!(
            svg.contains("<title>trace &lt;a&gt; on triton-0: queue 20 ms (from 0.5)</title>"),
            "{svg}"
        );
        assert!(
            svg.contains("<title>trace b: 30 ms (server spans not received)</title>"),
            "{svg}"
        );
        // The legend names every part; each drawn stretch is filled in its part's colour.
        let texts = texts(&svg);
        for p in parts {
            assert!(texts.iter().any(|t| t == p), "{p}: {texts:?}");
        }
        for i in [0, 3, 5] {
            let fill = format!("fill=\"{}\"", PALETTE[i]);
            // Its legend swatch and its stretch.
            assert!(
                svg.to_lowercase().matches(&fill).count() >= 2,
                "{fill}: {svg}"
            );
        }
        assert!(
            texts
                .iter()
                .any(|t| t == "30.0 (server spans not received)"),
            "{texts:?}"
        );
        let empty = WaterfallChart {
            rows: Vec::new(),
            ..c
        };
        let html = waterfall_chart(&empty, "no request").into_string();
        assert!(
            html.contains("no data: no request") && !html.contains("<svg"),
            "{html}"
        );
    }

    #[test]
    fn a_legend_wider_than_the_chart_goes_on_to_a_new_line() {
        let names = ["a long part name"; 12];
        let places = legend_places(&names, 400);
        assert_eq!(places[0], (6, 6));
        assert!(places.iter().all(|&(x, _)| x < 400), "{places:?}");
        assert!(places.last().unwrap().1 > 6, "{places:?}");
    }

    #[test]
    fn text_is_shortened_to_fit() {
        assert_eq!(fit("short", 200, 16, true), "short");
        let cut = fit(&"a".repeat(100), 100, 16, true);
        assert!(
            cut.starts_with('a') && cut.ends_with('a') && cut.contains('…'),
            "{cut}"
        );
        assert!(text_px(&cut, 16) <= 100, "{cut}");
        let cut = fit(&"b".repeat(100), 100, 16, false);
        assert!(cut.ends_with('…') && text_px(&cut, 16) <= 100, "{cut}");
    }
}
