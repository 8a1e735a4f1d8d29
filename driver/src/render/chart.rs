//! Charts over runs (a matrix's history: one point per run), drawn by plotters as SVG inside the
//! page: no script, so the pages' Content-Security-Policy stays as it is. The axis is discrete,
//! a run a slot labelled by its start; each series has its name written at its last point; a
//! point's 95% interval is a whisker; a change point is a dashed line before the run it starts
//! with. plotters has no hover, so on top of its drawing each point gets a transparent target and
//! each shaded band a rectangle, both with a `<title>` (the browser's tooltip), placed by the
//! chart's own coordinate mapping.

use maud::{Markup, PreEscaped, html};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::html::PALETTE;

const WIDTH: u32 = 640;
const HEIGHT: u32 = 300;
const FONT: &str = "sans-serif";

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
    html! {
        figure.plot data-plot=(chart.id) {
            figcaption { (chart.title) }
            @if series.is_empty() {
                p.no-data { "no data: " (no_data) }
            } @else {
                (PreEscaped(svg(chart, &series)))
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
    let mut out = String::new();
    let overlay = {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart, series).unwrap_or_else(|e| {
            tracing::warn!("chart {} not drawn: {e}", chart.id);
            String::new()
        })
    };
    // plotters writes a fixed size; a viewBox alone lets the page scale it.
    let body = out
        .split_once('>')
        .map_or(String::new(), |(_, rest)| rest.to_string());
    let body = body.trim_end().trim_end_matches("</svg>");
    format!(
        "<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\" \
         xmlns=\"http://www.w3.org/2000/svg\">{body}{overlay}</svg>",
        maud::html! { (chart.title) }.into_string()
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
        let style = TextStyle::from((FONT, 16).into_font()).color(&colour).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Right,
                plotters::style::text_anchor::VPos::Bottom,
            ),
        );
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
