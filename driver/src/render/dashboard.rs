//! The pages of `driver serve` that are not a run's report: the list of runs, newest first,
//! with links to each run's report and filters by matrix name and verdict; a matrix's history;
//! a run against the previous one; a run's failure records. Pure: the server reads the
//! summaries and serves what this returns.
//!
//! Every page is a maud template: whatever a run wrote (names, messages, matrix text) is
//! escaped where it is inserted; only the page's own style goes in raw.

use super::chart::{RunBand, RunChart, RunMark, RunPoint, RunSeries, RunTick, run_chart};
use super::html::{STYLE, head_metas};
use crate::report::diff::{Line, RunDiff};
use crate::report::failures::FailurePage;
use crate::report::history::ChangePoints;
use crate::report::summary::{RunFilter, RunSummary, SignatureSeen};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use std::collections::BTreeMap;
use stress_common::http::percent_encode;

/// The dashboard's pages fetch nothing and run no script: their one inline style element,
/// by its hash, and nothing else.
pub fn csp() -> &'static str {
    static CSP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "default-src 'none'; style-src {}",
            super::html::inline_hash(&format!("{STYLE}{EXTRA_STYLE}"))
        )
    });
    &CSP
}

/// The verdicts a run can have, in the order the filter links show them.
const VERDICTS: [&str; 6] = [
    "PASS",
    "FAIL",
    "ABANDONED",
    "INCOMPLETE",
    "RUNNING",
    crate::report::summary::UNREADABLE,
];

/// What the dashboard adds to the report's styles.
const EXTRA_STYLE: &str = "td{white-space:nowrap}.PASS{color:#1a7f37;font-weight:600}\
.FAIL{color:#cf222e;font-weight:600}.ABANDONED,.INCOMPLETE,.UNREADABLE{color:#9a6700;font-weight:600}\
.RUNNING{color:#0969da;font-weight:600}.removed{background:#ffebe9}.added{background:#dafbe1}\
nav a{margin-right:.8em}.muted{color:#57606a}\
.strip{display:flex;flex-wrap:wrap;gap:2px;margin:.5em 0}.strip a{display:block;width:14px;height:22px;\
border-radius:2px;background:#9a6700}.strip a.PASS{background:#1a7f37}.strip a.FAIL{background:#cf222e}";

/// How often a list with a run under way reloads itself (its figures so far move).
const LIVE_RELOAD_S: u32 = 5;

fn timestamp(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

fn clock(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A link to the list with `filter` (query parameters escaped).
fn list_link(filter: &RunFilter) -> String {
    let mut query = Vec::new();
    if let Some(n) = &filter.name {
        query.push(format!("name={}", percent_encode(n)));
    }
    if let Some(v) = &filter.verdict {
        query.push(format!("verdict={}", percent_encode(v)));
    }
    if query.is_empty() {
        "/".into()
    } else {
        format!("/?{}", query.join("&"))
    }
}

/// A matrix's history page.
fn matrix_link(name: &str) -> String {
    format!("/matrix/{}", percent_encode(name))
}

fn run_link(run_id: &str) -> String {
    format!("/runs/{}", percent_encode(run_id))
}

/// A whole page: its head (styles inline, the CSP, a reload when `reload_s` is set), its title
/// as the heading, then `body`.
fn page(title: &str, reload_s: Option<u32>, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                (head_metas(csp(), reload_s))
                title { (title) " · triton-stress" }
                // The page's own constants: the CSP allows exactly this text by its hash.
                style { (PreEscaped(STYLE)) (PreEscaped(EXTRA_STYLE)) }
            }
            body {
                h1 { (title) }
                (body)
            }
        }
    }
    .into_string()
}

/// The list of runs (already filtered, newest first) as a self-contained page. It reloads
/// itself while one of them is under way.
pub fn run_list_page(runs: &[RunSummary], filter: &RunFilter) -> String {
    let title = match &filter.name {
        Some(n) => format!("Runs of {n}"),
        None => "Runs".into(),
    };
    let with_verdict = |verdict: Option<&str>| {
        list_link(&RunFilter {
            verdict: verdict.map(Into::into),
            ..filter.clone()
        })
    };
    let under_way = runs
        .iter()
        .any(|r| r.verdict == stress_common::store::RUNNING);
    let body = html! {
        nav {
            "verdict: "
            a href=(with_verdict(None)) { "all" }
            @for v in VERDICTS {
                a href=(with_verdict(Some(v))) { (v) }
            }
            @if let Some(name) = &filter.name {
                " · "
                a href=(list_link(&RunFilter { name: None, ..filter.clone() })) { "every matrix" }
                " · "
                a href=(matrix_link(name)) { "history of " (name) }
            }
            " · "
            a href="/api/runs" { "JSON" }
        }
        (runs_table(runs))
    };
    page(&title, under_way.then_some(LIVE_RELOAD_S), body)
}

fn runs_table(runs: &[RunSummary]) -> Markup {
    if runs.is_empty() {
        return html! { p.muted #no-runs { "no finished run found" } };
    }
    html! {
        table #runs {
            thead { tr {
                th { "run" } th { "matrix" } th { "started" } th { "duration" }
                th { "launcher" } th { "verdict" } th { "QPS" } th { "p99 ms" } th { "failures" }
                th { "signatures new / recurring / known" } th { "regressions" }
                th { "root cause" } th {}
            } }
            tbody {
                @for r in runs {
                    @if r.finished_at_ms.is_none() {
                        (unfinished_row(r))
                    } @else if r.verdict == crate::report::summary::UNREADABLE {
                        (unreadable_row(r))
                    } @else {
                        (finished_row(r))
                    }
                }
            }
        }
    }
}

fn finished_row(r: &RunSummary) -> Markup {
    let fingerprint: String = r
        .fingerprint
        .as_deref()
        .map(|f| f.chars().take(12).collect())
        .unwrap_or_default();
    let duration = r
        .finished_at_ms
        .map_or_else(|| "—".to_string(), |end| clock(end - r.started_at_ms));
    html! {
        tr data-run=(r.run_id) {
            td { a href=(run_link(&r.run_id)) { (r.run_id) } }
            td {
                a href=(matrix_link(&r.name)) { (r.name) }
                " "
                span.muted title="matrix fingerprint" { (fingerprint) }
            }
            td { (timestamp(r.started_at_ms)) }
            td { (duration) }
            td { (r.launcher) }
            td class=(r.verdict) { (r.verdict) }
            td.num { (format!("{:.1}", r.qps)) }
            td.num { (format!("{:.2}", r.p99_ms)) }
            td.num { (r.failures) }
            td.num { (r.signatures_new) " / " (r.signatures_recurring) " / " (r.signatures_known) }
            td.num { (r.regressions) }
            td { (r.root_cause.as_deref().unwrap_or("")) }
            td { a href={ (run_link(&r.run_id)) "/diff" } { "changes" } }
        }
    }
}

/// A run whose store could not be read: why, and no link to a report that cannot be built.
fn unreadable_row(r: &RunSummary) -> Markup {
    html! {
        tr data-run=(r.run_id) {
            td { (r.run_id) }
            td {}
            td { (timestamp(r.started_at_ms)) }
            td { "—" }
            td {}
            td class=(r.verdict) { (r.verdict) }
            td colspan="6" {}
            td { (r.root_cause.as_deref().unwrap_or("")) }
            td {}
        }
    }
}

/// A run not finished: its figures so far, as of its workers' last write (none before their
/// first), and how long it had run then.
fn unfinished_row(r: &RunSummary) -> Markup {
    let none = html! { td.num { "—" } };
    html! {
        tr data-run=(r.run_id) {
            td { a href=(run_link(&r.run_id)) { (r.run_id) } }
            td { a href=(matrix_link(&r.name)) { (r.name) } }
            td { (timestamp(r.started_at_ms)) }
            @match r.live_at_ms {
                Some(at) => {
                    td title={ "as of " (timestamp(at)) } { (clock(at - r.started_at_ms)) " so far" }
                    td { (r.launcher) }
                    td class=(r.verdict) { (r.verdict) }
                    td.num { (format!("{:.1}", r.qps)) }
                    td.num { (format!("{:.2}", r.p99_ms)) }
                    td.num { (r.failures) }
                }
                None => {
                    td { "—" }
                    td { (r.launcher) }
                    td class=(r.verdict) { (r.verdict) }
                    (none) (none) (none)
                }
            }
            (none) (none)
            td {}
            td {}
        }
    }
}

/// One matrix's history (its runs, newest first): a verdict strip (oldest to newest, each a
/// link to its run), QPS, p99 and failures per run as plots, and the runs' table.
pub fn matrix_page(name: &str, runs: &[RunSummary]) -> String {
    let oldest_first: Vec<&RunSummary> = runs.iter().rev().collect();
    // The plots have figures of finished runs only (a run under way has none yet).
    let finished: Vec<&RunSummary> = oldest_first
        .iter()
        .copied()
        .filter(|r| r.finished_at_ms.is_some())
        .collect();
    let passed = runs.iter().filter(|r| r.verdict == "PASS").count();
    let mut bands: Vec<RunBand> = baseline_band(&finished).into_iter().collect();
    bands.extend(fault_bands(&finished));
    let found = change_points_of(name, runs);
    let failed_runs = list_link(&RunFilter {
        name: Some(name.into()),
        verdict: Some("FAIL".into()),
    });
    let body = html! {
        nav {
            a href="/" { "every run" }
            " · "
            a href=(failed_runs) { "failed runs of " (name) }
            " · "
            a href={ "/api/matrix/" (percent_encode(name)) "/history" } { "JSON" }
        }
        h2 { "Verdicts" }
        p { (passed) " of " (runs.len()) " runs passed (oldest left)." }
        div.strip #verdicts {
            @for r in &oldest_first {
                a class=(r.verdict) href=(run_link(&r.run_id))
                    title={ (r.run_id) ": " (r.verdict) ", " (timestamp(r.started_at_ms)) } {}
            }
        }
        h2 { "Over the runs" }
        div.plots-row.runs { (history_plots(&finished, &bands, &found)) }
        @if let Some(band) = bands.iter().find(|b| b.baseline) {
            p.muted { "Shaded blue: " (band.label) "." }
        }
        @if bands.iter().any(|b| !b.baseline) {
            p.muted {
                "Shaded red: runs that injected faults on purpose (hover for each fault and \
                 its verdict); their failures inside a fault's window did not count against them."
            }
        }
        (change_point_list(name, &found))
        (sweep_table(&finished))
        h2 { "Failure signatures" }
        (signature_table(&oldest_first))
        h2 { "Runs" }
        (runs_table(runs))
    };
    page(&format!("History of {name}"), None, body)
}

/// The change points over the matrix's last runs (its newest run's fingerprint), at the
/// defaults of `regression:`, or why there are none.
fn change_points_of(name: &str, runs: &[RunSummary]) -> Result<ChangePoints, String> {
    use crate::report::history;
    let settings = crate::matrix::RegressionSettings::default();
    history::of_matrix(runs, name, settings.change_point_window)
        .map(|of| history::change_points(&of, settings.min_effect))
}

/// The change points, each with the run it starts with linked.
fn change_point_list(name: &str, found: &Result<ChangePoints, String>) -> Markup {
    html! {
        h2 #change-points { "Change points" }
        @match found {
            Err(why) => p.muted { (why) },
            Ok(points) => {
                p.muted {
                    (points.method()) " (Apache Otava's method) over the last "
                    (points.runs.len()) " runs that measured their load in full; "
                    a href={ "/api/matrix/" (percent_encode(name)) "/history.csv" } { "CSV for Otava" }
                    "."
                }
                @if points.shifts.is_empty() {
                    p { "No change point." }
                }
                @for (run, shifts) in points.by_run() {
                    h3 { "From run " a href=(run_link(run)) { (run) } }
                    @for d in &shifts[0].differs { p { "Differs: " (d) } }
                    ul {
                        @for s in &shifts {
                            li class=(if s.worse { "worse" } else { "better" }) {
                                (s.describe()) @if s.worse { " (worse)" } @else { " (better)" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The history's plots over the finished runs (oldest first, run i in slot i), each with the
/// bands (baseline window, runs with faults), its metric's change points, and the run's 95%
/// interval where its summary has one.
fn history_plots(
    finished: &[&RunSummary],
    bands: &[RunBand],
    found: &Result<ChangePoints, String>,
) -> Markup {
    let ticks: Vec<RunTick> = finished
        .iter()
        .map(|r| RunTick {
            run_id: r.run_id.clone(),
            label: short_date(r.started_at_ms),
        })
        .collect();
    let marks = change_marks(finished, found);
    html! {
        @for p in history_plot_specs(finished) {
            (run_chart(
                &RunChart {
                    id: p.id,
                    title: p.title,
                    y_label: p.y_label,
                    runs: &ticks,
                    series: p.series,
                    bands: bands.to_vec(),
                    marks: marks
                        .iter()
                        .filter(|(m, _)| (p.marks)(m))
                        .map(|(_, mark)| mark.clone())
                        .collect(),
                },
                p.no_data,
            ))
        }
    }
}

/// One plot of a matrix's history: what it shows, and the metrics whose change points it marks.
struct HistoryPlot {
    id: &'static str,
    title: &'static str,
    y_label: &'static str,
    series: Vec<RunSeries>,
    marks: fn(&str) -> bool,
    no_data: &'static str,
}

impl HistoryPlot {
    fn new(
        id: &'static str,
        title: &'static str,
        y_label: &'static str,
        series: Vec<RunSeries>,
        marks: fn(&str) -> bool,
        no_data: &'static str,
    ) -> Self {
        HistoryPlot {
            id,
            title,
            y_label,
            series,
            marks,
            no_data,
        }
    }
}

/// The history's plots, in page order: the whole run's figures, then per scenario, memory, and
/// (where runs have them) capacity and sweep answers.
fn history_plot_specs(finished: &[&RunSummary]) -> Vec<HistoryPlot> {
    const NO_RUN: &str = "no finished run of this matrix";
    let named = |points: &dyn Fn(&RunSummary) -> Named| named_series(finished, points);
    let none = |_: &str| false;
    let total = |metric: &'static str, value: f64| -> Named {
        vec![("all scenarios".into(), value, Some(metric))]
    };
    let plot = HistoryPlot::new;
    let error_rate = |r: &RunSummary| -> Named {
        let share = if r.tests == 0 {
            f64::NAN
        } else {
            r.failures as f64 * 100.0 / r.tests as f64
        };
        vec![("% failed".to_string(), share, None)]
    };
    let mut plots = vec![
        plot(
            "history-qps",
            "QPS per run",
            "QPS",
            named(&|r| total("qps TOTAL", r.qps)),
            |m| m == "qps TOTAL",
            NO_RUN,
        ),
        plot(
            "history-p99",
            "p99 latency per run",
            "p99 ms",
            named(&|r| total("p99_ms TOTAL", r.p99_ms)),
            |m| m == "p99_ms TOTAL",
            NO_RUN,
        ),
        plot(
            "history-failures",
            "Failures per run",
            "failures",
            named(&|r| vec![("failures".into(), r.failures as f64, None)]),
            none,
            NO_RUN,
        ),
        plot(
            "history-error-rate",
            "Failed tests per run (% of tests)",
            "% failed",
            named(&error_rate),
            none,
            NO_RUN,
        ),
        plot(
            "history-p99-scenarios",
            "p99 latency per scenario",
            "p99 ms",
            named(&|r| {
                r.scenarios
                    .iter()
                    .map(|s| (s.scenario.clone(), s.p99_ms, None))
                    .collect()
            }),
            |m| m.starts_with("p99_ms ") && m != "p99_ms TOTAL" && !m.contains('/'),
            "no run recorded per-scenario figures",
        ),
        plot(
            "history-memory-slope",
            "Server memory slope after warm-up per run",
            "MiB/min",
            named(&|r| {
                r.server_memory
                    .iter()
                    .map(|m| (m.server.clone(), m.slope_mib_per_min, None))
                    .collect()
            }),
            none,
            "no run judged its servers' memory (too short, or no memory readings)",
        ),
    ];
    plots.extend(answer_plots(finished));
    plots
}

/// The plots of what capacity runs and sweeps answered, where the history has any.
fn answer_plots(finished: &[&RunSummary]) -> Vec<HistoryPlot> {
    let named = |points: &dyn Fn(&RunSummary) -> Named| named_series(finished, points);
    let (plot, none) = (HistoryPlot::new, |_: &str| false);
    let mut plots = Vec::new();
    if finished.iter().any(|r| !r.capacity.is_empty()) {
        plots.push(plot(
            "history-capacity",
            "Capacity at the p99 target per run",
            "max QPS",
            named(&|r| {
                r.capacity
                    .iter()
                    .map(|c| (format!("{} ({})", c.group, c.phase), c.max_qps, None))
                    .collect()
            }),
            |m| m.starts_with("capacity_qps "),
            "no capacity answer",
        ));
    }
    if finished.iter().any(|r| r.sweep.is_some()) {
        plots.push(plot(
            "history-sweep",
            "Sweep: the best variant's capacity per run",
            "max QPS",
            named(&|r| {
                r.sweep
                    .iter()
                    .filter_map(|s| Some((s.server_group.clone(), s.best_qps?, None)))
                    .collect()
            }),
            none,
            "no sweep found a variant that met its target",
        ));
    }
    plots
}

/// A run's values on a plot: per series, its name, the value and the metric of the run's
/// estimates whose interval it carries (if any).
type Named = Vec<(String, f64, Option<&'static str>)>;

/// `12-04 18:20`: a run's start, short enough to sit under its slot.
fn short_date(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%m-%d %H:%M").to_string())
        .unwrap_or_default()
}

/// Per name (scenario, server, capacity group): a series over the runs that have it; a point's
/// interval from the run's estimate of `metric` (its third field), when it has one.
fn named_series(finished: &[&RunSummary], points: &dyn Fn(&RunSummary) -> Named) -> Vec<RunSeries> {
    let mut by_name: BTreeMap<String, Vec<RunPoint>> = BTreeMap::new();
    for (i, r) in finished.iter().enumerate() {
        for (name, value, metric) in points(r) {
            let estimate = metric.and_then(|m| r.estimates.iter().find(|e| e.metric == m));
            let interval =
                estimate.and_then(|e| Some((e.value * (1.0 + e.low?), e.value * (1.0 + e.high?))));
            by_name.entry(name).or_default().push(RunPoint {
                run: i,
                value,
                interval,
            });
        }
    }
    by_name
        .into_iter()
        .map(|(name, points)| RunSeries { name, points })
        .collect()
}

/// The change points of the matrix's history, by metric, at the slot of the run each starts
/// with (a run not plotted has none).
fn change_marks(
    finished: &[&RunSummary],
    found: &Result<ChangePoints, String>,
) -> Vec<(String, RunMark)> {
    let Ok(found) = found else {
        return Vec::new();
    };
    found
        .shifts
        .iter()
        .filter_map(|s| {
            let run = finished.iter().position(|r| r.run_id == s.run_id)?;
            Some((
                s.metric.clone(),
                RunMark {
                    run,
                    label: format!("{:+.0}%", s.change * 100.0),
                },
            ))
        })
        .collect()
}

/// The newest finished run's baseline window (the runs it was compared with), in slots;
/// None when it was compared with none of the runs shown.
fn baseline_band(finished: &[&RunSummary]) -> Option<RunBand> {
    let newest = finished.last()?;
    let slots: Vec<usize> = finished
        .iter()
        .enumerate()
        .filter(|(_, r)| newest.baseline_window.contains(&r.run_id))
        .map(|(i, _)| i)
        .collect();
    Some(RunBand {
        label: format!(
            "the baseline window of the newest run {}: {} of its {} baseline run(s)",
            newest.run_id,
            slots.len(),
            newest.baseline_window.len()
        ),
        from: *slots.iter().min()?,
        to: *slots.iter().max()?,
        baseline: true,
    })
}

/// Each finished run that injected faults, shaded over its slot, its faults and their
/// verdicts in the band's title.
fn fault_bands(finished: &[&RunSummary]) -> Vec<RunBand> {
    finished
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.faults.is_empty())
        .map(|(i, r)| {
            let faults: Vec<String> = r
                .faults
                .iter()
                .map(|f| {
                    format!(
                        "{} ({} of {}): {}",
                        f.name,
                        f.kind,
                        f.target,
                        match (f.ok, f.recovery_s) {
                            (true, Some(s)) => format!("recovered in {s:.1} s"),
                            (true, None) => "recovered".to_string(),
                            (false, _) => "FAILED".to_string(),
                        }
                    )
                })
                .collect();
            RunBand {
                label: format!("{}: {}", r.run_id, faults.join("; ")),
                from: i,
                to: i,
                baseline: false,
            }
        })
        .collect()
}

/// The runs that swept configurations: each one's best variant, newest first.
fn sweep_table(finished: &[&RunSummary]) -> Markup {
    let swept: Vec<(&RunSummary, &crate::report::summary::SweepPoint)> = finished
        .iter()
        .rev()
        .filter_map(|r| Some((*r, r.sweep.as_ref()?)))
        .collect();
    if swept.is_empty() {
        return html! {};
    }
    html! {
        h2 { "Sweep answers" }
        table #sweeps {
            tr {
                th { "run" } th { "server group" } th { "best variant" } th { "max QPS" }
                th { "variants measured" }
            }
            @for (r, s) in swept {
                tr {
                    td { a href=(run_link(&r.run_id)) { (r.run_id) } }
                    td { (s.server_group) }
                    td { (s.best.as_deref().unwrap_or("none met the target")) }
                    td.num { (s.best_qps.map_or_else(|| "—".to_string(), |q| format!("{q:.1}"))) }
                    td.num { (s.measured) " of " (s.grid_size) }
                }
            }
        }
    }
}

/// Every signature the runs judged: first and last seen, in how many runs, and its status in
/// the last run it was seen in. `runs` oldest first.
fn signature_table(runs: &[&RunSummary]) -> Markup {
    struct Seen<'a> {
        first: &'a RunSummary,
        last: &'a RunSummary,
        runs: usize,
        failures: u64,
        sig: &'a SignatureSeen,
    }
    let mut seen: BTreeMap<&str, Seen> = BTreeMap::new();
    for r in runs {
        for sig in &r.signatures {
            let e = seen.entry(sig.signature.as_str()).or_insert(Seen {
                first: r,
                last: r,
                runs: 0,
                failures: 0,
                sig,
            });
            (e.last, e.sig) = (r, sig);
            e.runs += 1;
            e.failures += sig.count;
        }
    }
    if seen.is_empty() {
        return html! { p.muted { "No failure signature in these runs." } };
    }
    let mut rows: Vec<&Seen> = seen.values().collect();
    // What the last runs saw leads.
    rows.sort_by_key(|s| std::cmp::Reverse((s.last.started_at_ms, s.runs)));
    let seen_in = |r: &RunSummary| {
        html! {
            a href=(run_link(&r.run_id)) { (r.run_id) }
            " "
            span.muted { (timestamp(r.started_at_ms)) }
        }
    };
    html! {
        table #signatures {
            tr {
                th { "signature" } th { "scenario / model" } th { "failure" }
                th { "status (last seen)" } th { "first seen" } th { "last seen" } th { "runs" }
                th { "failures" }
            }
            @for s in rows {
                tr {
                    td { code { (s.sig.signature) } }
                    td { (s.sig.scenario) " / " (s.sig.model) }
                    td { (s.sig.message) }
                    td { (s.sig.status.as_str()) }
                    td { (seen_in(s.first)) }
                    td { (seen_in(s.last)) }
                    td.num { (s.runs) " of " (runs.len()) }
                    td.num { (s.failures) }
                }
            }
        }
    }
}

/// A run against the previous run of its matrix.
pub fn diff_page(d: &RunDiff) -> String {
    let optional = |v: Option<String>| v.unwrap_or_else(|| "—".to_string());
    let f = |v: Option<f64>, digits: usize| optional(v.map(|v| format!("{v:.digits$}")));
    let n = |v: Option<u64>| optional(v.map(|v| v.to_string()));
    let body = html! {
        nav {
            a href=(run_link(&d.run.run_id)) { "this run" }
            " · "
            a href=(run_link(&d.previous.run_id)) { "the previous run" }
            " · "
            a href={ "/api/runs/" (percent_encode(&d.run.run_id)) "/diff" } { "JSON" }
        }
        h2 { "Verdict" }
        p #verdict-change {
            span class=(d.previous.verdict) { (d.previous.verdict) }
            " (" (timestamp(d.previous.started_at_ms)) ") → "
            span class=(d.run.verdict) { (d.run.verdict) }
            " (" (timestamp(d.run.started_at_ms)) ")"
        }
        @for (id, title, list) in [
            ("signatures-new", "Signatures new since the previous run", &d.signatures_new),
            ("signatures-gone", "Signatures gone since the previous run", &d.signatures_gone),
        ] {
            h2 { (title) }
            @if list.is_empty() {
                p.muted id=(id) { "none" }
            } @else {
                table id=(id) {
                    thead { tr {
                        th { "signature" } th { "scenario" } th { "model" } th { "failures" }
                        th { "message" }
                    } }
                    tbody {
                        @for s in list {
                            tr {
                                td { (s.signature) } td { (s.scenario) } td { (s.model) }
                                td.num { (s.count) } td { (s.message) }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Per scenario" }
        table #scenarios {
            thead { tr {
                th { "scenario" } th { "QPS before" } th { "QPS now" } th { "p99 ms before" }
                th { "p99 ms now" } th { "failures before" } th { "failures now" }
            } }
            tbody {
                @for s in &d.scenarios {
                    tr {
                        td { (s.scenario) }
                        td.num { (f(s.qps.0, 1)) } td.num { (f(s.qps.1, 1)) }
                        td.num { (f(s.p99_ms.0, 2)) } td.num { (f(s.p99_ms.1, 2)) }
                        td.num { (n(s.failures.0)) } td.num { (n(s.failures.1)) }
                    }
                }
            }
        }
        h2 { "Servers" }
        @if d.servers.is_empty() {
            p.muted #servers { "no server in either run" }
        } @else {
            table #servers {
                thead { tr { th { "server" } th { "version before" } th { "version now" } } }
                tbody {
                    @for s in &d.servers {
                        tr class=[s.changed().then_some("bad")] {
                            td { (s.server) }
                            td { (optional(s.version.0.clone())) }
                            td { (optional(s.version.1.clone())) }
                        }
                    }
                }
            }
        }
        h2 { "Matrix" }
        @if d.matrix.is_empty() {
            p.muted #matrix-same { "the same text" }
        } @else {
            pre #matrix-diff {
                @for line in &d.matrix {
                    @match line {
                        Line::Same(t) => { span { "  " (t) } "\n" }
                        Line::Removed(t) => { span.removed { "- " (t) } "\n" }
                        Line::Added(t) => { span.added { "+ " (t) } "\n" }
                    }
                }
            }
        }
    };
    page(
        &format!("{} against {}", d.run.run_id, d.previous.run_id),
        None,
        body,
    )
}

/// A run's failure records, one page.
pub fn failures_page(page_of: &FailurePage) -> String {
    let p = page_of;
    let run = percent_encode(&p.run_id);
    let body = html! {
        nav {
            a href={ "/runs/" (run) } { "the run" }
            " · "
            a href={ "/runs/" (run) "/failures" } { "first page" }
            " · "
            a href={ "/api/runs/" (run) "/failures?after=" (p.after) } { "JSON" }
        }
        p #failure-count {
            (p.counted) " failures counted; the workers keep the records of their first ones. \
             This page: " (p.failures.len()) " records after id " (p.after) "."
        }
        @if !p.failures.is_empty() {
            table #failures {
                thead { tr {
                    th { "id" } th { "time" } th { "member" } th { "scenario" } th { "server" }
                    th { "model" } th { "kind" } th { "expected" } th { "actual" }
                } }
                tbody {
                    @for f in &p.failures {
                        @let r = &f.record;
                        tr {
                            td.num { (f.id) }
                            td { (timestamp(r.at_ms)) }
                            td { (f.member_id) }
                            td { (r.scenario) }
                            td { (r.server) }
                            td { (r.model) }
                            td { (r.error_kind.map(|k| format!("{k:?}")).unwrap_or_default()) }
                            td { (r.expected) }
                            td { (r.actual) }
                        }
                    }
                }
            }
        }
        @match p.next_after {
            Some(next) => p {
                a #next-page href={ "/runs/" (run) "/failures?after=" (next) "&limit=" (p.limit) } {
                    "next page"
                }
            },
            None => p.muted #last-page { "the last page" },
        }
    };
    page(&format!("{}: failures", p.run_id), None, body)
}

/// A run without an earlier run of its matrix name.
pub fn no_previous_page(run_id: &str, name: &str) -> String {
    let body = html! {
        p #no-previous {
            "No earlier run of " (name) " is in this store. "
            a href=(run_link(run_id)) { "The run" }
            " · "
            a href=(matrix_link(name)) { "its matrix's history" }
        }
    };
    page(&format!("{run_id}: nothing to compare with"), None, body)
}

/// What a page says while its store cannot be read: so, and that it tries again.
pub fn store_unavailable_page(retry_s: u32) -> String {
    let body = html! {
        p #store-unavailable {
            "The store could not be read (the server's log says why). This page tries again \
             every " (retry_s) " s."
        }
    };
    page("store unavailable", Some(retry_s), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, name: &str, verdict: &str) -> RunSummary {
        RunSummary {
            run_id: id.into(),
            name: name.into(),
            fingerprint: Some("0123456789abcdef".into()),
            launcher: "local".into(),
            verdict: verdict.into(),
            started_at_ms: 1_764_000_000_000,
            finished_at_ms: Some(1_764_000_000_000 + 3_723_000),
            load_seconds: 3600.0,
            requests: 10,
            tests: 5,
            failures: 1,
            qps: 12.34,
            p99_ms: 5.678,
            root_cause: Some("grpc-0: <killed> & gone".into()),
            signatures_new: 1,
            signatures_recurring: 2,
            signatures_known: 3,
            regressions: 0,
            ..Default::default()
        }
    }

    #[test]
    fn the_list_links_each_run_and_escapes_what_the_runs_wrote() {
        let page = run_list_page(
            &[run("nightly-1", "nightly <soak>", "FAIL")],
            &RunFilter::default(),
        );
        assert!(
            page.contains("<a href=\"/runs/nightly-1\">nightly-1</a>"),
            "{page}"
        );
        assert!(page.contains("nightly &lt;soak&gt;"));
        assert!(
            page.contains("href=\"/matrix/nightly%20%3Csoak%3E\""),
            "{page}"
        );
        assert!(page.contains("grpc-0: &lt;killed&gt; &amp; gone"));
        assert!(page.contains("<td class=\"FAIL\">FAIL</td>"));
        assert!(page.contains("1:02:03"), "the duration: {page}");
        assert!(page.contains("1 / 2 / 3"));
        assert!(
            page.contains(">0123456789ab</span>"),
            "the fingerprint's start"
        );
        assert!(
            !page.contains("http-equiv=\"refresh\""),
            "nothing under way"
        );
        let mut running = run("nightly-2", "nightly", "RUNNING");
        running.finished_at_ms = None;
        let page = run_list_page(&[running.clone()], &RunFilter::default());
        assert!(
            page.contains("<td class=\"RUNNING\">RUNNING</td><td class=\"num\">—</td>"),
            "no figures before its workers wrote any: {page}"
        );
        assert!(page.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
        running.live_at_ms = Some(running.started_at_ms + 65_000);
        let page = run_list_page(&[running], &RunFilter::default());
        assert!(
            page.contains(
                "0:01:05 so far</td><td>local</td><td class=\"RUNNING\">RUNNING</td>\
                 <td class=\"num\">12.3</td><td class=\"num\">5.68</td><td class=\"num\">1</td>"
            ),
            "its figures so far: {page}"
        );
        let empty = run_list_page(&[], &RunFilter::default());
        assert!(empty.contains("no finished run found"));
        let mut bad = run("old-run", "", crate::report::summary::UNREADABLE);
        bad.root_cause = Some("schema version 3 <old>".into());
        let page = run_list_page(&[bad], &RunFilter::default());
        assert!(
            page.contains("<td class=\"UNREADABLE\">UNREADABLE</td>")
                && page.contains("schema version 3 &lt;old&gt;")
                && !page.contains("href=\"/runs/old-run\""),
            "why, and no link to a report that cannot be built: {page}"
        );
    }

    /// What a hostile server or matrix could put in any string a page shows.
    const HOSTILE: &str = "<img src=x onerror=alert(1)>\"'&<script>alert(2)</script>";

    /// No element from `HOSTILE` in `page`, and its text shown (escaped) `times` or more.
    fn shown_as_text(page: &str, times: usize) {
        assert!(
            !page.contains("<img") && !page.contains("<script"),
            "{page}"
        );
        let text =
            "&lt;img src=x onerror=alert(1)&gt;&quot;'&amp;&lt;script&gt;alert(2)&lt;/script&gt;";
        assert!(page.matches(text).count() >= times, "{page}");
    }

    #[test]
    fn every_page_shows_what_runs_wrote_as_text() {
        use crate::report::diff::{ScenarioChange, ServerChange, Side, SignatureChange};
        use crate::report::failures::ListedFailure;
        let h = || HOSTILE.to_string();
        let mut hostile = run(HOSTILE, HOSTILE, "FAIL");
        hostile.launcher = h();
        hostile.fingerprint = None;
        hostile.root_cause = Some(h());
        hostile.signatures = vec![SignatureSeen {
            signature: h(),
            scenario: h(),
            model: h(),
            message: h(),
            status: crate::judge::verdicts::Status::New,
            count: 1,
        }];
        hostile.sweep = Some(crate::report::summary::SweepPoint {
            server_group: h(),
            best: Some(h()),
            best_qps: Some(1.0),
            measured: 1,
            grid_size: 2,
        });
        let filter = RunFilter {
            name: Some(h()),
            verdict: None,
        };
        // Run id, matrix name, launcher, root cause (and the filter's name in the list).
        shown_as_text(&run_list_page(&[hostile.clone()], &filter), 6);
        let mut going = hostile.clone();
        going.finished_at_ms = None;
        shown_as_text(&run_list_page(&[going], &RunFilter::default()), 2);
        // Besides the table: the title, the signature's four strings, the sweep's two.
        shown_as_text(&matrix_page(HOSTILE, &[hostile]), 12);
        let side = Side {
            run_id: h(),
            verdict: h(),
            started_at_ms: 0,
        };
        let change = SignatureChange {
            signature: h(),
            scenario: h(),
            model: h(),
            message: h(),
            count: 1,
        };
        let d = RunDiff {
            run: side.clone(),
            previous: side,
            signatures_new: vec![change.clone()],
            signatures_gone: vec![change],
            scenarios: vec![ScenarioChange {
                scenario: h(),
                qps: (None, None),
                p99_ms: (None, None),
                failures: (None, None),
            }],
            servers: vec![ServerChange {
                server: h(),
                version: (Some(h()), None),
            }],
            matrix: vec![Line::Same(h()), Line::Removed(h()), Line::Added(h())],
        };
        shown_as_text(&diff_page(&d), 16);
        let record = stress_common::status::FailureRecord {
            scenario: h(),
            server: h(),
            model: h(),
            expected: h(),
            actual: h(),
            ..Default::default()
        };
        let failures = FailurePage {
            run_id: h(),
            after: 0,
            limit: 10,
            failures: vec![ListedFailure {
                id: 1,
                member_id: h(),
                record,
            }],
            next_after: Some(1),
            counted: 1,
        };
        shown_as_text(&failures_page(&failures), 7);
        shown_as_text(&no_previous_page(HOSTILE, HOSTILE), 2);
    }

    #[test]
    fn filters_match_exactly_and_verdicts_in_any_case() {
        let r = run("a", "soak", "PASS");
        let f = |name: Option<&str>, verdict: Option<&str>| RunFilter {
            name: name.map(String::from),
            verdict: verdict.map(String::from),
        };
        assert!(f(None, None).matches(&r));
        assert!(f(Some("soak"), Some("pass")).matches(&r));
        assert!(!f(Some("soa"), None).matches(&r));
        assert!(!f(None, Some("FAIL")).matches(&r));
        let page = run_list_page(&[], &f(Some("soak"), None));
        assert!(
            page.contains("href=\"/?name=soak&amp;verdict=FAIL\""),
            "{page}"
        );
        assert!(page.contains("every matrix"));
        assert!(page.contains("href=\"/matrix/soak\""), "{page}");
    }

    #[test]
    fn a_matrix_history_plots_its_runs_oldest_first() {
        let mut older = run("soak-1", "soak", "PASS");
        older.qps = 100.0;
        let mut newer = run("soak-2", "soak", "FAIL");
        newer.qps = 50.0;
        let page = matrix_page("soak", &[newer, older]);
        let strip = &page[page.find("id=\"verdicts\"").unwrap()..];
        let (first, second) = (
            strip.find("/runs/soak-1").unwrap(),
            strip.find("/runs/soak-2").unwrap(),
        );
        assert!(first < second, "oldest left: {strip}");
        assert!(page.contains("1 of 2 runs passed"));
        for plot in ["history-qps", "history-p99", "history-failures"] {
            assert!(page.contains(&format!("data-plot=\"{plot}\"")), "{plot}");
        }
        assert!(
            !page.contains("no data: no finished run"),
            "the totals have points: {page}"
        );
        assert!(
            page.contains("no data: no run recorded per-scenario figures"),
            "summaries written before them have none: {page}"
        );
        let empty = matrix_page("none", &[]);
        assert!(empty.contains("no data: no finished run of this matrix"));
    }

    #[test]
    fn a_matrix_history_plots_scenarios_memory_capacity_the_baseline_band_and_signatures() {
        use crate::judge::verdicts::Status;
        use crate::report::summary::{
            CapacityPoint, ScenarioPoint, ServerMemoryPoint, SignatureSeen,
        };
        let sig = |id: &str, status: Status, count: u64| SignatureSeen {
            signature: id.into(),
            scenario: "sequence".into(),
            model: "<seq>".into(),
            message: "expected 1, got 2".into(),
            status,
            count,
        };
        let night = |i: i64, signatures: Vec<SignatureSeen>, window: &[&str]| {
            let mut r = run(&format!("soak-{i}"), "soak", "PASS");
            r.started_at_ms += i * 86_400_000;
            r.finished_at_ms = Some(r.started_at_ms + 1000);
            r.scenarios = vec![ScenarioPoint {
                scenario: "infer".into(),
                qps: 10.0,
                p99_ms: 5.0 + i as f64,
                tests: 10,
                failures: 0,
            }];
            r.server_memory = vec![ServerMemoryPoint {
                server: "triton-0".into(),
                slope_mib_per_min: 0.1 * i as f64,
                growing: false,
            }];
            r.capacity = vec![CapacityPoint {
                group: "grpc".into(),
                phase: "production".into(),
                concurrency: Some(4),
                max_qps: 40.0,
                p99_ms: 100.0,
            }];
            r.signatures = signatures;
            r.baseline_window = window.iter().map(|s| s.to_string()).collect();
            r
        };
        let runs = [
            night(
                4,
                vec![sig("sig1-b", Status::New, 1)],
                &["soak-3", "soak-2"],
            ),
            night(3, vec![sig("sig1-a", Status::Recurring, 2)], &[]),
            night(2, vec![sig("sig1-a", Status::Recurring, 3)], &[]),
            night(1, vec![sig("sig1-a", Status::New, 4)], &[]),
        ];
        let page = matrix_page("soak", &runs);
        for plot in [
            "history-p99-scenarios",
            "history-memory-slope",
            "history-capacity",
            "history-error-rate",
        ] {
            assert!(page.contains(&format!("data-plot=\"{plot}\"")), "{plot}");
        }
        assert!(!page.contains("no data:"), "every plot has points: {page}");
        // Runs 2 and 3 (x = 2, 3) are the newest run's baseline window: shaded on each plot.
        assert_eq!(page.matches("class=\"band baseline\"").count(), 7, "{page}");
        assert!(page.contains("the baseline window of the newest run soak-4: 2 of its 2"));
        let table = &page[page.find("id=\"signatures\"").expect("a signature table")..];
        let (b, a) = (table.find("sig1-b").unwrap(), table.find("sig1-a").unwrap());
        assert!(b < a, "the latest seen first");
        let a_row = &table[a..];
        let a_row = &a_row[..a_row.find("</tr>").unwrap()];
        assert!(
            a_row.contains(">recurring<")
                && a_row.find("soak-1").unwrap() < a_row.find("soak-3").unwrap(),
            "status as last seen, first seen soak-1, last seen soak-3: {a_row}"
        );
        assert!(
            a_row.contains(">3 of 4<") && a_row.contains(">9<"),
            "{a_row}"
        );
        assert!(a_row.contains("&lt;seq&gt;"), "escaped: {a_row}");
        let none = matrix_page("soak", &[run("x", "soak", "PASS")]);
        assert!(none.contains("No failure signature"));
        assert!(!none.contains("band baseline") && !none.contains("history-capacity"));
        assert!(!none.contains("class=\"band\"") && !none.contains("Shaded red"));
        assert!(!none.contains("history-sweep") && !none.contains("Sweep answers"));
    }

    #[test]
    fn a_matrix_history_names_its_change_points_with_the_run_they_start_with() {
        let estimate = |value| crate::judge::change::Estimate::bare("p99_ms Load", value, false);
        // Twelve nights, the p99 `step` times higher from night 6 on.
        let nights = |step: f64| -> Vec<RunSummary> {
            (0..12i64)
                .rev()
                .map(|i| RunSummary {
                    run_id: format!("soak-{i:02}"),
                    started_at_ms: 1_764_000_000_000 + i * 86_400_000,
                    estimates: vec![estimate(
                        if i < 6 { 10.0 } else { 10.0 * step } * [1.0, 1.01, 0.99][i as usize % 3],
                    )],
                    ..run("", "soak", "PASS")
                })
                .collect()
        };
        let page = matrix_page("soak", &nights(1.2));
        let section = &page[page.find("id=\"change-points\"").unwrap()..];
        assert!(section.contains("href=\"/runs/soak-06\""), "{section}");
        assert!(section.contains("p99_ms Load: +20.0%"), "{section}");
        assert!(section.contains("/api/matrix/soak/history.csv"));
        let flat = nights(1.0);
        assert!(matrix_page("soak", &flat).contains("No change point."));
    }

    #[test]
    fn a_matrix_history_shades_runs_with_faults_and_plots_sweep_answers() {
        use crate::report::summary::{FaultPoint, SweepPoint};
        let mut plain = run("soak-1", "soak", "PASS");
        plain.started_at_ms -= 86_400_000;
        let mut faulted = run("soak-2", "soak", "FAIL");
        faulted.faults = vec![
            FaultPoint {
                name: "crash".into(),
                kind: "kill".into(),
                target: "triton-0".into(),
                ok: true,
                recovery_s: Some(3.3),
            },
            FaultPoint {
                name: "<slow>".into(),
                kind: "network".into(),
                target: "triton-0".into(),
                ok: false,
                recovery_s: None,
            },
        ];
        faulted.sweep = Some(SweepPoint {
            server_group: "triton".into(),
            best: Some("models.add_sub.instance_group[0].count=2".into()),
            best_qps: Some(812.5),
            measured: 3,
            grid_size: 4,
        });
        let page = matrix_page("soak", &[faulted, plain]);
        // One red band per plot drawn, over the second run (x = 2) only.
        let drawn = page.matches("<svg viewBox").count();
        assert!(drawn >= 5, "{page}");
        assert_eq!(
            page.matches("<rect class=\"band\"").count(),
            drawn,
            "{page}"
        );
        assert!(
            page.contains(
                "<title>soak-2: crash (kill of triton-0): recovered in 3.3 s; &lt;slow&gt; \
                 (network of triton-0): FAILED</title>"
            ),
            "{page}"
        );
        assert!(page.contains("Shaded red: runs that injected faults"));
        assert!(page.contains("data-plot=\"history-sweep\""), "{page}");
        let table = &page[page.find("id=\"sweeps\"").expect("the sweep table")..];
        assert!(
            table.contains("models.add_sub.instance_group[0].count=2")
                && table.contains(">812.5<")
                && table.contains(">3 of 4<"),
            "{table}"
        );
    }

    #[test]
    fn a_diff_marks_a_server_whose_version_changed() {
        use crate::report::diff::{ServerChange, Side};
        let side = |id: &str| Side {
            run_id: id.into(),
            verdict: "PASS".into(),
            started_at_ms: 0,
        };
        let d = RunDiff {
            run: side("b"),
            previous: side("a"),
            signatures_new: vec![],
            signatures_gone: vec![],
            scenarios: vec![],
            servers: vec![
                ServerChange {
                    server: "triton-0".into(),
                    version: (Some("triton 2.51.0".into()), Some("triton 2.52.0".into())),
                },
                ServerChange {
                    server: "triton-1".into(),
                    version: (Some("triton 2.51.0".into()), Some("triton 2.51.0".into())),
                },
                ServerChange {
                    server: "triton-2".into(),
                    version: (None, Some("<new>".into())),
                },
            ],
            matrix: vec![],
        };
        let page = diff_page(&d);
        assert!(
            page.contains(
                "<tr class=\"bad\"><td>triton-0</td><td>triton 2.51.0</td><td>triton 2.52.0</td>"
            ),
            "{page}"
        );
        assert!(page.contains("<tr><td>triton-1</td>"), "unchanged: {page}");
        assert!(page.contains("<td>—</td><td>&lt;new&gt;</td>"), "{page}");
    }
}
