//! The report as one self-contained HTML page (`report.html` beside report.json; `driver report
//! --format html`), for the person who opens a run the morning after:
//! - the verdict and, when the run failed, the root cause first: the earliest failed member and
//!   its reason, the others listed after it as "also failed";
//! - tables per scenario, client group, model and server, the SLO verdicts, the regressions
//!   against the baseline and capacity mode's answers;
//! - plots over time, drawn by plotters as inline SVG ([`xy_chart`]): QPS per client group,
//!   latency percentiles per scenario, the servers' queue vs compute time per model and their
//!   memory, capacity mode's controller; a plot without data says "no data" and why;
//! - the failures, and every failed member's diagnostics in a collapsible `<details>`.
//!
//! Nothing is loaded from anywhere: inline CSS, inline SVG, a few lines of inline script, and a
//! Content-Security-Policy that forbids any fetch, so the page opens the same on an air-gapped
//! cluster and as a CI artifact. The page is built with maud's `html!`, which escapes every
//! value it inserts (model names, log tails, failure messages, in text and in attributes);
//! only this module's own style and script, and the charts' SVG (which escapes what it writes),
//! go in unescaped ([`PreEscaped`]).

use crate::judge::change::Call;
use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::chart::{
    Bar, BarChart, BarValue, WaterfallChart, WaterfallRow, XyBand, XyChart, XySeries, bar_chart,
    waterfall_chart, xy_chart,
};
use crate::report::spans::{Part, TraceJoin};
use crate::report::{FailedMember, Report, format_time};
use stress_common::http::percent_encode;

/// The page as one string.
pub fn render(report: &Report) -> String {
    render_page(report, None, false)
}

/// A run's page as `driver serve` shows it (`reload_s`: a run still going, whose page the
/// browser reloads, with what it has done so far on top): the report with links to the same
/// run's other documents on top (JSON, JUnit, its diff, every failure record, its matrix's
/// history), which a report file on disk has no server for.
pub fn render_served(report: &Report, reload_s: Option<u32>) -> String {
    render_page(report, reload_s, true)
}

/// The served run's links to its other documents.
fn run_links(report: &Report) -> Markup {
    let run = percent_encode(&report.run_id);
    html! {
        nav #run-links {
            a href="/" { "all runs" } " · "
            a href=(format!("/matrix/{}", percent_encode(&report.name))) { (report.name) " history" } " · "
            a href=(format!("/runs/{run}/diff")) { "diff with the previous run" } " · "
            a href=(format!("/runs/{run}/failures")) { "every failure record" } " · "
            a href=(format!("/runs/{run}/report.json")) { "report.json" } " · "
            a href=(format!("/runs/{run}/junit.xml")) { "junit.xml" }
        }
        // The nav's own line: the served page is report.html once `<nav ...>...</nav>\n` is
        // taken out (driver/tests/html.rs compares them so).
        "\n"
    }
}

/// A page's first `<head>` elements: its charset, its Content-Security-Policy `csp` and, when
/// `reload_s` is set, a reload every so many seconds (the dashboard's pages share them).
pub(super) fn head_metas(csp: &str, reload_s: Option<u32>) -> Markup {
    html! {
        meta charset="utf-8";
        meta http-equiv="Content-Security-Policy" content=(csp);
        @if let Some(s) = reload_s {
            meta http-equiv="refresh" content=(s);
        }
    }
}

fn render_page(report: &Report, reload_s: Option<u32>, served: bool) -> String {
    let title = format!("{} {}: {}", report.name, report.run_id, report.verdict);
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                (head_metas(csp(), reload_s))
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                // Byte for byte the text csp() hashes.
                style { (PreEscaped(STYLE)) }
            }
            "\n"
            body {
                @if served {
                    (run_links(report))
                }
                (header(report))
                @if let Some(s) = reload_s {
                    (live(report, s))
                }
                (root_cause(report))
                (faults(report))
                (tables(report))
                (server_side(report))
                @if let Some(join) = &report.traced_tail {
                    (traced_tail(join))
                }
                (plots(report))
                (failures(report))
                script { (PreEscaped(SCRIPT)) }
            }
        }
        "\n"
    };
    page.into_string()
}

/// A run under way: how long it has run, and per client group its workers, tests, failures
/// and QPS so far.
fn live(r: &Report, reload_s: u32) -> Markup {
    let elapsed = stress_common::now_ms() - r.started_at_ms;
    let rows: Vec<Row> = r
        .tables
        .1
        .iter()
        .map(|(group, table)| {
            let workers = r.workers.iter().filter(|w| &w.group == group);
            let (count, qps) = workers.fold((0, 0.0), |(n, q), w| {
                (n + 1, q + w.series.last().map_or(0.0, |p| p.1))
            });
            let total = table.total();
            (
                if total.failures > 0 { "bad" } else { "" },
                html! {
                    (td(group))
                    (num(count))
                    (num(total.tests))
                    (num(total.failures))
                    (num(format!("{qps:.1}")))
                },
            )
        })
        .collect();
    html! {
        p.live {
            "Running for " (duration(elapsed))
            ": the report so far (this page reloads every " (reload_s) " s)."
        }
        (table("live", &["Client group", "Workers", "Tests", "Failures", "QPS now"], &rows))
    }
}

/// What the servers say: each model's successes against the workers' OK answers, memory
/// findings, and the trace summaries of traced servers.
fn server_side(r: &Report) -> Markup {
    html! {
        @if !r.reconciliation.is_empty() {
            (reconciliation(r))
        }
        @for s in &r.timeline.servers {
            @if let Some(f) = &s.memory_finding {
                p.finding { "Finding: " (s.member_id) ": " (f) }
            }
        }
        @for w in &r.workers {
            @if let Some(f) = &w.memory_finding {
                p.finding { "Finding: worker " (w.member_id) ": " (f) }
            }
        }
        @for (server, summary) in &r.traces {
            h2 { "Traces of " (server) }
            @for row in &summary.rows {
                h3 {
                    (row.model) " (version " (row.version) ") over " (row.protocol) ": "
                    (row.traces) " traces"
                }
                (trace_stages(row))
            }
        }
    }
}

/// Each model's successes on the servers against its workers' answers.
fn reconciliation(r: &Report) -> Markup {
    let rows: Vec<Row> = r
        .reconciliation
        .iter()
        .map(|x| {
            let verdict = serde_json::to_value(x.verdict)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            (
                if verdict == "mismatch" { "fail" } else { "" },
                html! {
                    (td(&x.model))
                    (num(x.server_success))
                    (num(x.client_ok))
                    (num(x.client_not_ok))
                    (num(x.client_unseen))
                    (num(x.gap))
                    (td(&verdict))
                    (td(&x.explanation))
                },
            )
        })
        .collect();
    html! {
        h2 #reconciliation { "Servers vs workers" }
        (table(
            "reconciliation",
            &["Model", "Server ok", "Worker ok", "Not ok", "Unseen", "Gap", "Verdict", "Why"],
            &rows,
        ))
    }
}

/// Where the tail's time went: a row per scenario and model with each part's share, the
/// servers' clock offsets, and each one's slowest requests as a waterfall.
fn traced_tail(join: &TraceJoin) -> Markup {
    let mut head = vec![
        "Scenario", "Model", "Traced", "Tail", "Split", "No spans", "Partial",
    ];
    head.extend(Part::ALL.iter().map(|&p| p.as_str()));
    head.push("Mean ms");
    let rows: Vec<Row> = join
        .rows
        .iter()
        .map(|r| {
            let share = |p: Part| {
                r.shares
                    .map_or_else(|| "-".into(), |s| format!("{:.1}%", s.get(p) * 100.0))
            };
            let mean = r
                .mean_total_us
                .map_or_else(|| "-".into(), |us| format!("{:.2}", us / 1e3));
            (
                if r.no_spans + r.partial > 0 {
                    "bad"
                } else {
                    ""
                },
                html! {
                    (td(&r.scenario))
                    (td(&r.model))
                    (num(r.traced))
                    (num(r.tail))
                    (num(r.split))
                    (num(r.no_spans))
                    (num(r.partial))
                    @for p in Part::ALL { (num(share(p))) }
                    (num(mean))
                },
            )
        })
        .collect();
    let parts = Part::ALL.map(Part::as_str);
    html! {
        h2 #traced-tail {
            "Where the tail's time went (traced requests above "
            (super::text::tail_percentile(join.tail_share)) ")"
        }
        @if !join.server_spans_received {
            p.finding {
                "Server spans not received: no span of the tail's traces came from a server, "
                "so their time is not split."
            }
        }
        @if let Some(r) = &join.receiver {
            p.receiver { (r.line()) }
        }
        (table("traced-tail", &head, &rows))
        @if !join.clocks.is_empty() {
            p.clocks { (super::text::clock_line(&join.clocks)) }
        }
        @for (i, r) in join.rows.iter().enumerate().filter(|(_, r)| !r.slowest.is_empty()) {
            @let id = format!("waterfall-{i}");
            @let title = format!("Slowest traced requests of {}/{}", r.scenario, r.model);
            (waterfall_chart(&waterfall(r, &id, &title, &parts), "no traced request"))
        }
    }
}

/// A row's slowest requests as a waterfall chart, in ms from each one's intended send.
fn waterfall<'a>(
    r: &crate::report::spans::TailRow,
    id: &'a str,
    title: &'a str,
    parts: &'a [&'a str],
) -> WaterfallChart<'a> {
    let rows = r
        .slowest
        .iter()
        .map(|w| WaterfallRow {
            label: format!(
                "trace {} on {} ({})",
                w.trace_id,
                w.server,
                if w.ok { "ok" } else { "failed" }
            ),
            short_label: format!(
                "{}… {}",
                w.trace_id.chars().take(8).collect::<String>(),
                w.server
            ),
            segments: w
                .segments
                .iter()
                .map(|s| {
                    let part = Part::ALL.iter().position(|&p| p == s.part).unwrap_or(0);
                    (part, s.start_us / 1e3, s.length_us / 1e3)
                })
                .collect(),
            total: w.total_us / 1e3,
            note: w.unsplit.clone(),
        })
        .collect();
    WaterfallChart {
        id,
        title,
        x_label: "ms from the intended send",
        unit: "ms",
        parts,
        rows,
    }
}

/// One traced model's time per stage.
fn trace_stages(row: &crate::report::trace::TraceRow) -> Markup {
    let rows: Vec<Row> = row
        .stages
        .iter()
        .map(|(stage, t)| {
            (
                "",
                html! {
                    (td(stage))
                    (num(t.count))
                    (num(format!("{:.1}", t.avg_us)))
                    (num(t.p50_us))
                    (num(t.p90_us))
                    (num(t.p99_us))
                },
            )
        })
        .collect();
    table(
        "trace",
        &["Stage", "Count", "Avg µs", "p50 µs", "p90 µs", "p99 µs"],
        &rows,
    )
}

/// The CSP `source` that allows exactly one inline `<style>` or `<script>` element, by the
/// SHA-256 of its text: no `'unsafe-inline'`, so nothing injected into a page could style or
/// run (and no `style=` attribute is allowed, so the pages use none).
pub fn inline_hash(text: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// Nothing may be fetched: only the page's own inline style and script run, by their hashes.
fn csp() -> &'static str {
    static CSP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "default-src 'none'; style-src {}; script-src {}",
            inline_hash(STYLE),
            inline_hash(SCRIPT)
        )
    });
    &CSP
}

/// The report's styles (the dashboard's pages share them).
pub const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#1b1f24}
h1{font-size:1.5em;margin:.2em 0}h2{border-bottom:1px solid #ccd;padding-bottom:.2em;margin-top:1.6em}
h3{margin:1.2em 0 .4em}
.verdict{padding:.1em .5em;border-radius:4px;color:#fff;font-weight:bold}
.verdict.pass{background:#1a7f37}.verdict.fail{background:#cf222e}.verdict.other{background:#9a6700}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:.1em 1em;margin:.6em 0}
dl.meta dt{font-weight:bold}dl.meta dd{margin:0}
.root-cause{border:2px solid #cf222e;background:#fff5f5;border-radius:6px;padding:.6em 1em;margin:1em 0}
.root-cause h2{border:none;margin:.2em 0;color:#cf222e}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:13px}
th,td{border:1px solid #d0d7de;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fff0f0}tr.total td{font-weight:bold}
td.ok{color:#1a7f37;font-weight:bold}td.fail{color:#cf222e;font-weight:bold}
svg.regbar{vertical-align:middle}svg.regbar rect{fill:#cf222e}
figure.plot{margin:1em 0;border:1px solid #d0d7de;border-radius:6px;padding:.5em}
figure.plot figcaption{font-weight:bold;margin-bottom:.3em}
figure.plot svg{width:100%;max-width:760px;height:auto;display:block}
svg:not(.chart) text{font:11px sans-serif;fill:#57606a}
p.no-data{color:#57606a;font-style:italic;margin:.3em 0}
details.failed-member{border:1px solid #d0d7de;border-radius:6px;margin:.5em 0;padding:.3em .8em}
details.failed-member summary{cursor:pointer;font-weight:bold}
pre{background:#f6f8fa;padding:.5em;overflow-x:auto;font-size:12px;white-space:pre-wrap;word-break:break-all}
.plots-row{display:flex;flex-wrap:wrap;gap:1em}.plots-row figure{flex:1 1 360px}.plots-row.runs figure{flex:1 1 560px}
";

/// Expand or collapse every failed member's section; open the one a link (`#member-...`) names.
const SCRIPT: &str = "
document.querySelectorAll('button[data-details]').forEach(function(b){
  b.addEventListener('click',function(){
    var open=b.getAttribute('data-details')==='open';
    document.querySelectorAll('details.failed-member').forEach(function(d){d.open=open;});
  });
});
function openNamed(){
  var d=document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if(d&&d.tagName==='DETAILS'){d.open=true;}
}
window.addEventListener('hashchange',openNamed);openNamed();
";

/// A duration for people: `12.3 s`, `4 min 05 s`, `2 h 03 min`.
fn duration(ms: i64) -> String {
    let s = ms as f64 / 1000.0;
    if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{} min {:02} s", ms / 60_000, ms / 1000 % 60)
    } else {
        format!("{} h {:02} min", ms / 3_600_000, ms / 60_000 % 60)
    }
}

/// A latency percentile in ms; "-" when nothing was measured (a histogram records at least 1 µs).
fn ms(us: u64) -> String {
    if us == 0 {
        "-".into()
    } else {
        format!("{:.2}", us as f64 / 1000.0)
    }
}

/// A table row: its class ("" for none) and its cells.
type Row = (&'static str, Markup);

fn td(s: &str) -> Markup {
    html! { td { (s) } }
}

fn num(v: impl std::fmt::Display) -> Markup {
    html! { td.num { (maud::display(v)) } }
}

fn table(class: &str, head: &[&str], rows: &[Row]) -> Markup {
    html! {
        table class=(class) {
            thead { tr { @for h in head { th { (h) } } } }
            tbody {
                @for (row_class, cells) in rows {
                    tr class=[(!row_class.is_empty()).then_some(row_class)] { (cells) }
                }
            }
        }
    }
}

/// The injected faults: a row each with its timeline, recovery against what is allowed, and
/// what it cost; a failed one is marked.
fn faults(r: &Report) -> Markup {
    if r.faults.is_empty() {
        return html! {};
    }
    let since =
        |ms: Option<i64>| ms.map_or_else(|| "-".to_string(), |t| duration(t - r.started_at_ms));
    let rows: Vec<Row> = r
        .faults
        .iter()
        .map(|f| {
            let server_back = f.back_ms();
            let recovery = f
                .recovery_s
                .map_or_else(|| "-".to_string(), |s| format!("{s:.1} s"));
            (
                if f.ok || !f.reached { "" } else { "fail" },
                html! {
                    (td(&f.name))
                    (td(f.kind.as_str()))
                    (td(&f.target))
                    (td(&since(f.injected_at_ms)))
                    (td(&since(f.first_error_ms)))
                    (td(&since(server_back)))
                    (td(&since(f.recovered_at_ms)))
                    (td(&recovery))
                    (td(&format!("{} s", f.recover_within_s)))
                    (num(f.lost_requests))
                    (num(f.sequences_cut))
                    (td(&f.verdict))
                },
            )
        })
        .collect();
    html! {
        h2 #faults { "Injected faults" }
        (table(
            "faults",
            &[
                "fault",
                "kind",
                "server",
                "injected",
                "first client error",
                "server back",
                "recovered",
                "recovery",
                "allowed",
                "tests lost",
                "sequences cut",
                "verdict",
            ],
            &rows,
        ))
    }
}

fn verdict_class(verdict: &str) -> &'static str {
    match verdict {
        "PASS" => "pass",
        "FAIL" => "fail",
        _ => "other",
    }
}

fn header(r: &Report) -> Markup {
    let took = r.finished_at_ms.map_or_else(
        || "still running".to_string(),
        |f| duration(f - r.started_at_ms),
    );
    let finished = r
        .finished_at_ms
        .map_or_else(|| "-".to_string(), format_time);
    let meta = [
        ("Run id", r.run_id.clone()),
        ("Launcher", r.launcher.clone()),
        ("Started", format_time(r.started_at_ms)),
        ("Finished", finished),
        ("Duration", took),
        ("Load phase", r.load_phase()),
        ("Failures", r.failure_count.to_string()),
    ];
    html! {
        header {
            h1 { (r.name) " " span.verdict.(verdict_class(&r.verdict)) #verdict { (r.verdict) } }
            dl.meta {
                @for (k, v) in meta { dt { (k) } dd { (v) } }
            }
        }
    }
}

/// Failed members, the earliest first (ties keep the store's order).
pub fn by_failure_time(members: &[FailedMember]) -> Vec<&FailedMember> {
    let mut sorted: Vec<&FailedMember> = members.iter().collect();
    sorted.sort_by_key(|m| m.failed_at_ms);
    sorted
}

fn member_anchor(m: &FailedMember) -> String {
    format!("member-{}", m.member_id)
}

/// A failed member in a line, linking to its diagnostics.
fn member_line(r: &Report, m: &FailedMember) -> Markup {
    html! {
        a href=(format!("#{}", member_anchor(m))) { (m.role) " " (m.member_id) }
        " (group " (m.group) ") at " (format_time(m.failed_at_ms))
        " (+" (duration(m.failed_at_ms - r.started_at_ms)) "): " (m.reason)
    }
}

fn root_cause(r: &Report) -> Markup {
    if r.verdict == "PASS" {
        return html! {};
    }
    if let Some(root) = &r.analysis.root_cause
        && let Some(first) = r
            .failed_members
            .iter()
            .find(|m| m.member_id == root.member_id)
    {
        return analysed_root_cause(r, root, first);
    }
    let sorted = by_failure_time(&r.failed_members);
    let Some((first, rest)) = sorted.split_first() else {
        return html! {
            @if r.verdict == "FAIL" {
                section.root-cause #root-cause {
                    h2 { "Root cause" }
                    p { "No member failed: see the SLO verdicts, regressions and failures below." }
                }
            }
        };
    };
    html! {
        section.root-cause #root-cause {
            (root_cause_head(r, first))
            @if !rest.is_empty() {
                p { "Also failed:" }
                ul.also-failed {
                    @for m in rest { li { (member_line(r, m)) } }
                }
            }
        }
    }
}

/// The root-cause section's heading, its server-bug line and its first failed member.
fn root_cause_head(r: &Report, first: &FailedMember) -> Markup {
    html! {
        h2 { "Root cause" }
        @if let Some(server) = super::server_bug(r) {
            p.server-bug { b { "SERVER BUG on " (server) } ", seen by:" }
        }
        p.first-failure { (member_line(r, first)) }
    }
}

/// The analysis's root cause (a killed server before the clients that saw it die first),
/// and the members it caused apart from the independent ones.
fn analysed_root_cause(
    r: &Report,
    root: &crate::judge::rootcause::RootCause,
    first: &FailedMember,
) -> Markup {
    let members = |ids: &[String]| -> Vec<&FailedMember> {
        ids.iter()
            .filter_map(|id| r.failed_members.iter().find(|m| &m.member_id == id))
            .collect()
    };
    let lists = [
        ("Caused by it:", "caused", members(&root.caused_members)),
        (
            "Also failed (independently):",
            "also-failed",
            members(&r.analysis.independent_members),
        ),
    ];
    html! {
        section.root-cause #root-cause {
            (root_cause_head(r, first))
            @if let Some(s) = &root.signature {
                p.root-signature {
                    "Signature " b { (s.signature) } " (" (s.status.as_str())
                    ", class " b { (s.class.as_str()) } "): " (s.evidence)
                }
            } @else if let (Some(class), Some(evidence)) = (root.class, &root.evidence) {
                p.root-signature { "Class " b { (class.as_str()) } ": " (evidence) }
            }
            @for (title, class, listed) in &lists {
                @if !listed.is_empty() {
                    p { (title) }
                    ul class=(class) {
                        @for m in listed { li { (member_line(r, m)) } }
                    }
                }
            }
            p.failure-split {
                "Failure records: " (r.analysis.caused_failures) " caused by it, "
                (r.analysis.shutdown_failures) " during the driver's stop, "
                (r.analysis.independent_failures) " independent."
            }
        }
    }
}

fn scenario_rows(rows: &[stress_common::report::RowJson]) -> Vec<Row> {
    rows.iter()
        .map(|row| {
            let class = if row.scenario == "TOTAL" {
                "total"
            } else if row.failures > 0 {
                "bad"
            } else {
                ""
            };
            let cells = html! {
                (td(&row.scenario))
                (num(row.failures))
                (num(row.tests))
                (num(row.requests))
                (num(row.skipped))
                (num(format!("{:.1}", row.qps)))
                (num(ms(row.p50_us)))
                (num(ms(row.p90_us)))
                (num(ms(row.p99_us)))
                (num(ms(row.max_us)))
                (td(&row.description))
            };
            (class, cells)
        })
        .collect()
}

const SCENARIO_HEAD: [&str; 11] = [
    "Scenario",
    "Failures",
    "Tests",
    "Requests",
    "Skipped",
    "QPS",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "max ms",
    "Description",
];

fn tables(r: &Report) -> Markup {
    html! {
        h2 #scenarios { "Scenarios, all workers" }
        (table("scenarios", &SCENARIO_HEAD, &scenario_rows(&r.scenarios)))
        (send_lateness(r))
        (groups(r))
        @if let Some(g) = &r.grid {
            (grid(g))
        }
        (models(r))
        (servers(r))
        (slo(r))
        h2 #regressions { "Change vs baseline" }
        (regressions(r))
        @if let Some(points) = &r.change_points {
            h2 #change-points {
                "Change points over the last " (points.runs.len()) " run(s) of this matrix"
            }
            p.no-data { (points.method()) }
            ul {
                @for line in points.lines() { li { (line) } }
            }
        }
        @if let Some(s) = &r.sweep {
            (sweep(s))
        }
        @if let Some(c) = &r.capacity {
            (capacity(c))
        }
    }
}

/// Open loop: how late requests left against their intended send time.
fn send_lateness(r: &Report) -> Markup {
    let lateness: Vec<String> = r
        .scenarios
        .iter()
        .filter(|row| row.scenario != "TOTAL")
        .filter_map(|row| Some(row.send_lateness.as_ref()?.line(&row.scenario)))
        .collect();
    html! {
        @if !lateness.is_empty() {
            p #send-lateness {
                "Open-loop send lateness (actual − intended send time; the latencies count from \
                 the intended time):"
            }
            ul {
                @for line in &lateness { li { (line) } }
            }
        }
    }
}

fn groups(r: &Report) -> Markup {
    html! {
        h2 #groups { "Client groups" }
        @if r.groups.is_empty() {
            p.no-data { "no data: no worker reported counts" }
        }
        @if let [(group, _)] = r.groups.iter().collect::<Vec<_>>()[..] {
            p { "One client group, " (group) ": its rows are the table above." }
        }
        @for (group, rows) in r.groups.iter().filter(|_| r.groups.len() > 1) {
            h3 { "Client group " (group) }
            (table("group", &SCENARIO_HEAD, &scenario_rows(rows)))
        }
    }
}

/// Client templates × server groups: each cell's verdict, QPS, p99 and new signatures.
fn grid(g: &crate::report::grid::Grid) -> Markup {
    html! {
        h2 #grid { "Clients × servers" }
        table.grid {
            thead { tr { th { "client \\ server" } @for s in &g.servers { th { (s) } } } }
            tbody {
                @for c in &g.clients {
                    tr {
                        th { (c) }
                        @for s in &g.servers {
                            @match g.cells.iter().find(|x| x.client == *c && x.server == *s) {
                                None => td.no-data { "-" },
                                Some(cell) => td.(if cell.verdict == "FAIL" { "fail" } else { "ok" }) {
                                    strong { (cell.verdict) } " " (format!("{:.1}/s", cell.qps))
                                    @if let Some(us) = cell.p99_us {
                                        " p99 " (format!("{:.2} ms", us as f64 / 1000.0))
                                    }
                                    @if !cell.new_signatures.is_empty() {
                                        br; (cell.new_signatures.len()) " new: "
                                        (cell.new_signatures.join(", "))
                                    }
                                    @if !cell.programs.is_empty() {
                                        br; small { (cell.programs.join(", ")) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn models(r: &Report) -> Markup {
    if r.models.is_empty() {
        return html! {
            h2 #models { "Models, all workers" }
            p.no-data { "no data: no per-model counts" }
        };
    }
    let streams = r.models.iter().any(|m| m.stream.is_some());
    let mut head = vec![
        "Model", "Scenario", "Failures", "Tests", "Requests", "QPS", "p50 ms", "p90 ms", "p99 ms",
        "max ms",
    ];
    if streams {
        head.extend([
            "Streams",
            "Responses",
            "Responses/request",
            "First response p50 ms",
            "First response p99 ms",
            "Between responses p50 ms",
            "Between responses p99 ms",
        ]);
    }
    let rows: Vec<Row> = r
        .models
        .iter()
        .map(|m| {
            let cells = html! {
                (td(&m.model))
                (td(&m.scenario))
                (num(m.failures))
                (num(m.tests))
                (num(m.requests))
                (num(format!("{:.1}", m.qps)))
                (num(ms(m.p50_us)))
                (num(ms(m.p90_us)))
                (num(ms(m.p99_us)))
                (num(ms(m.max_us)))
                @if streams {
                    @if let Some(s) = &m.stream {
                        (num(s.streams))
                        (num(s.responses))
                        (num(format!("{:.2}", s.responses_per_request)))
                        (num(ms(s.first_response_p50_us)))
                        (num(ms(s.first_response_p99_us)))
                        (num(ms(s.inter_response_p50_us)))
                        (num(ms(s.inter_response_p99_us)))
                    } @else {
                        @for _ in 0..7 { td {} }
                    }
                }
            };
            (if m.failures > 0 { "bad" } else { "" }, cells)
        })
        .collect();
    html! {
        h2 #models { "Models, all workers" }
        (table("models", &head, &rows))
    }
}

/// The servers, and what each one's /metrics said per model at the end.
fn servers(r: &Report) -> Markup {
    let rows: Vec<Row> = r
        .servers
        .iter()
        .map(|s| {
            (
                "",
                html! {
                    (td(&s.member_id))
                    (td(&s.group))
                    (td(if s.external { "external" } else { "launched" }))
                    (td(s.version.as_deref().unwrap_or("")))
                    (td(&s.address))
                    (td(&s.metrics))
                },
            )
        })
        .collect();
    html! {
        h2 #servers { "Servers" }
        @if rows.is_empty() {
            p.no-data { "no data: the run recorded no server" }
        } @else {
            (table(
                "servers",
                &["Server", "Group", "Started by", "Version", "Address", "Triton /metrics"],
                &rows,
            ))
        }
        @for (server, models) in &r.server_metrics {
            h3 { "Server-side metrics of " (server) " (Triton /metrics at the end)" }
            (server_metrics(models))
        }
    }
}

fn server_metrics(models: &[stress_common::triton_metrics::ModelMetrics]) -> Markup {
    let rows: Vec<Row> = models
        .iter()
        .map(|m| {
            (
                if m.failure > 0.0 { "bad" } else { "" },
                html! {
                    (td(&m.model))
                    (td(&m.version))
                    (num(m.success))
                    (num(m.failure))
                    (num(m.inferences))
                    (num(m.executions))
                    (num(m.pending))
                    (num(format!("{:.1}", m.avg_request_us())))
                    (num(format!("{:.1}", m.avg_queue_us())))
                    (num(format!("{:.1}", m.avg_compute_us())))
                },
            )
        })
        .collect();
    table(
        "server-metrics",
        &[
            "Model",
            "Version",
            "Success",
            "Failure",
            "Inferences",
            "Executions",
            "Pending",
            "Request µs",
            "Queue µs",
            "Compute µs",
        ],
        &rows,
    )
}

fn slo(r: &Report) -> Markup {
    let rows: Vec<Row> = r
        .slo
        .iter()
        .map(|o| {
            let observed = o.observed.map_or_else(
                || "nothing measured".into(),
                |v| format!("{v:.4} {}", o.unit),
            );
            let window_s = (o.window_end_ms - o.window_start_ms) as f64 / 1000.0;
            (
                if o.ok { "" } else { "bad" },
                html! {
                    @if o.ok { td.ok { "ok" } } @else { td.fail { "FAIL" } }
                    (td(&o.rule))
                    (td(o.group.as_deref().unwrap_or("all")))
                    (td(&o.metric))
                    (num(observed.trim_end()))
                    (num(format!("{window_s:.1}")))
                },
            )
        })
        .collect();
    html! {
        h2 #slo { "SLO verdicts" }
        @if rows.is_empty() {
            p.no-data {
                "no data: no SLO verdict (the matrix sets no rule, or the run ended before they \
                 were judged)"
            }
        } @else {
            (table("slo", &["Verdict", "Rule", "Group", "Metric", "Observed", "Window s"], &rows))
        }
    }
}

/// The comparison with the baseline run, or why there is none.
fn regressions(r: &Report) -> Markup {
    let b = match &r.baseline {
        None => {
            return html! {
                p.no-data {
                    "no data: no baseline run (no earlier passing or pinned run of this matrix, "
                    (r.name) ")"
                }
            };
        }
        Some(b) if b.baseline_run.is_empty() => {
            return html! { p.no-data { "not compared: " (b.basis()) } };
        }
        Some(b) => b,
    };
    // Every change called (regressions first), with bars relative to the largest, so the worst
    // stands out; "~" metrics are counted, not listed.
    let called: Vec<&crate::judge::change::Finding> =
        [Call::Regression, Call::Improvement, Call::Provisional]
            .into_iter()
            .flat_map(|call| b.called(call))
            .collect();
    let largest = called.iter().map(|f| f.change.abs()).fold(0.0, f64::max);
    let rows: Vec<Row> = called
        .iter()
        .map(|f| {
            let width = if largest > 0.0 {
                (f.change.abs() / largest * 200.0).round()
            } else {
                0.0
            };
            let (class, word) = match f.call {
                Call::Regression => ("bad", "regression"),
                Call::Improvement => ("ok", "improvement"),
                _ => ("", "provisional"),
            };
            (
                class,
                html! {
                    (td(&f.metric))
                    (td(word))
                    (num(format!("{:.3}", f.baseline)))
                    (num(format!("{:.3}", f.current)))
                    (num(format!("{:+.1}%", f.change * 100.0)))
                    (num(format!("[{:+.1}%, {:+.1}%]", f.low * 100.0, f.high * 100.0)))
                    (num(format!("{:.3}", f.q_value)))
                    td {
                        svg.regbar width=(width) height="10" aria-hidden="true" {
                            rect width=(width) height="10" {}
                        }
                    }
                },
            )
        })
        .collect();
    html! {
        @for change in &b.version_changes {
            p { "Changed since: " (change) }
        }
        p {
            "Compared with " (b.basis()) ": " (b.tally()) " of " (b.compared) " metrics compared"
            @if b.fail && !r.regressions.is_empty() { " (regression.fail: the run fails)" }
            "."
        }
        @if !rows.is_empty() {
            (table("regressions", &["Metric", "Call", "Baseline", "Current", "Change", "95% interval", "q", ""], &rows))
        }
        @if !b.not_judged.is_empty() {
            details {
                summary { (b.not_judged.len()) " metrics not judged" }
                ul { @for n in &b.not_judged { li { (n.metric) ": " (n.why) } } }
            }
        }
    }
}

/// Capacity mode's answers per group and phase, and the autoscaler's verdicts.
fn capacity(c: &crate::report::CapacityReport) -> Markup {
    let rows: Vec<Row> = c
        .results
        .iter()
        .map(|x| {
            let safe = match x.target_rps {
                Some(_) => "-".to_string(),
                None => format!("{:.1}", x.safe_rate_qps),
            };
            let concurrency = x
                .concurrency
                .map_or_else(|| "-".to_string(), |c| c.to_string());
            let ending = x
                .ending
                .map_or("running", crate::capacity::controller::Ending::as_str);
            (
                if x.concurrency.is_none() { "bad" } else { "" },
                html! {
                    (td(&x.group))
                    (td(&x.phase))
                    (td(&x.model))
                    (num(concurrency))
                    (num(format!("{:.1}", x.max_qps)))
                    (num(format!("{:.2}", x.p99_ms)))
                    (num(format!("{:.2}", x.target_p99_ms)))
                    (num(safe))
                    (td(ending))
                },
            )
        })
        .collect();
    html! {
        h2 #capacity { "Capacity" }
        (table(
            "capacity",
            &[
                "Group",
                "Phase",
                "Model",
                "Concurrency",
                "Max QPS",
                "p99 ms",
                "Target p99 ms",
                "Safe QPS",
                "Ending",
            ],
            &rows,
        ))
        @for a in &c.autoscaler {
            h3 { "Autoscaler, " (a.group) " / " (a.phase) }
            pre.autoscaler { (super::text::autoscaler(&a.autoscaler)) }
        }
    }
}

/// A sweep: a bar of capacity per variant (best first; failed and skipped variants named
/// with why), its table, and the best variant's config change.
fn sweep(s: &crate::capacity::sweep::SweepAnswer) -> Markup {
    html! {
        h2 #sweep { "Sweep of server group " (s.server_group) }
        p {
            (s.measured) " of " (s.grid_size) " variants run (" (s.search) "), target p99 "
            (s.target_p99_ms) " ms."
        }
        (sweep_bars(s))
        (sweep_table(s))
        @if let Some(b) = &s.best {
            p.best {
                "Best: variant " (b.index) " at " (format!("{:.1}", b.max_qps)) " QPS"
                @if let Some(q) = b.confirmed_qps {
                    " (measured again: " (format!("{q:.1}")) " QPS)"
                }
                "."
                @if !s.tied_with_best.is_empty() {
                    " Tied with variant" @if s.tied_with_best.len() > 1 { "s" } " "
                    (s.tied_with_best.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "))
                    ": their capacities' 95% intervals overlap the best's (~ no significant \
                     difference); choose among them by cost."
                }
            }
            @for (model, diff) in &b.config_diffs {
                h3 { (model) "/config.pbtxt against the original" }
                pre.config-diff { (diff) }
            }
        }
    }
}

fn variant_label(
    s: &crate::capacity::sweep::SweepAnswer,
    v: &crate::capacity::sweep::VariantResult,
) -> String {
    format!("#{} {}", v.index, s.variant_label(v))
}

/// A variant's label as its bar is written: each parameter named by the shortest end of its path
/// that no other parameter of the sweep ends with (`count=4` for
/// `server.models.m.instance_group.count=4`), then its release where its label has one.
fn short_variant_label(
    s: &crate::capacity::sweep::SweepAnswer,
    v: &crate::capacity::sweep::VariantResult,
) -> String {
    let paths: std::collections::BTreeSet<&str> = s
        .variants
        .iter()
        .flat_map(|v| v.parameters.keys())
        .map(String::as_str)
        .collect();
    let unique = |end: &str| {
        let dotted = format!(".{end}");
        paths
            .iter()
            .filter(|p| **p == end || p.ends_with(&dotted))
            .count()
            == 1
    };
    let short = |path: &str| {
        path.rmatch_indices('.')
            .map(|(at, _)| path[at + 1..].to_string())
            .find(|end| unique(end))
            .unwrap_or_else(|| path.to_string())
    };
    let parameters = v
        .parameters
        .iter()
        .map(|(p, value)| format!("{}={value}", short(p)))
        .collect::<Vec<_>>()
        .join(", ");
    let full = s.variant_label(v);
    let release = full
        .strip_prefix(&crate::capacity::sweep::parameters_label(&v.parameters))
        .unwrap_or("");
    format!("#{} {parameters}{release}", v.index)
}

/// One bar per variant: its capacity with its 95% interval, best first, the Pareto front green,
/// the variants tied with the best marked; a variant without a bar is named with why.
fn sweep_bars(s: &crate::capacity::sweep::SweepAnswer) -> Markup {
    use crate::capacity::sweep::VariantStatus;
    let bars: Vec<Bar> = s
        .variants
        .iter()
        .map(|v| {
            let why = v.why.as_deref().unwrap_or("");
            let value = match (v.status, v.max_qps) {
                (VariantStatus::Measured, Some(value)) => BarValue::Value {
                    value,
                    interval: v.qps_interval,
                },
                (VariantStatus::Measured, None) => {
                    BarValue::Missing("no answer within the target".into())
                }
                (VariantStatus::Failed, _) => BarValue::Missing(format!("failed: {why}")),
                (VariantStatus::Skipped, _) => BarValue::Missing(format!("skipped: {why}")),
                // Measured, but never a bar: a constraint it cannot be shown to keep.
                (VariantStatus::Excluded, _) => BarValue::Missing(format!("excluded: {why}")),
            };
            Bar {
                label: variant_label(s, v),
                short_label: short_variant_label(s, v),
                highlight: matches!(value, BarValue::Value { .. }) && s.pareto.contains(&v.index),
                value,
                note: s.tied_with_best.contains(&v.index).then(|| "tied".into()),
            }
        })
        .collect();
    let mut title =
        "Capacity per variant (QPS within the target; green: on the Pareto front".to_string();
    if s.variants.iter().any(|v| v.qps_interval.is_some()) {
        title.push_str("; whisker: its 95% interval");
    }
    if !s.tied_with_best.is_empty() {
        title.push_str("; tied: not told apart from the best");
    }
    title.push(')');
    bar_chart(
        &BarChart {
            id: "sweep",
            title: &title,
            x_label: &format!("QPS within p99 {} ms", s.target_p99_ms),
            unit: "QPS",
            bars,
        },
        "no variant",
    )
}

fn sweep_table(s: &crate::capacity::sweep::SweepAnswer) -> Markup {
    use crate::capacity::sweep::VariantStatus;
    let dash = || "-".to_string();
    let rows: Vec<Row> = s
        .variants
        .iter()
        .map(|v| {
            let ending = match v.status {
                VariantStatus::Measured => v.ending.clone().unwrap_or_else(dash),
                VariantStatus::Failed => format!("failed: {}", v.why.as_deref().unwrap_or("")),
                VariantStatus::Skipped => format!("skipped: {}", v.why.as_deref().unwrap_or("")),
                VariantStatus::Excluded => {
                    format!("excluded: {}", v.why.as_deref().unwrap_or(""))
                }
            };
            let memory_mib = v
                .server_memory_bytes
                .map_or_else(dash, |b| format!("{:.0}", b / 1048576.0));
            (
                if v.status == VariantStatus::Measured && v.max_qps.is_some() {
                    ""
                } else {
                    "bad"
                },
                html! {
                    (num(v.index))
                    (td(&s.variant_label(v)))
                    (num(v.max_qps.map_or_else(dash, |q| format!("{q:.1}"))))
                    (num(v.qps_interval.map_or_else(dash, |(lo, hi)| format!("[{lo:.1}, {hi:.1}]"))))
                    (num(v.p99_ms.map_or_else(dash, |p| format!("{p:.2}"))))
                    (num(v.concurrency.map_or_else(dash, |c| c.to_string())))
                    (num(v.model_instances.map_or_else(dash, |c| c.to_string())))
                    (num(memory_mib))
                    (td(if s.pareto.contains(&v.index) { "yes" } else { "" }))
                    (td(&ending))
                },
            )
        })
        .collect();
    table(
        "sweep",
        &[
            "#",
            "Parameters",
            "Max QPS",
            "95% interval",
            "p99 ms",
            "Concurrency",
            "Instances",
            "Memory MiB",
            "Pareto",
            "Ending",
        ],
        &rows,
    )
}

/// Each injected fault's window on the time plots: from its injection to its clients'
/// recovery (not recovered: to the end of the plot), in seconds since the run's start.
fn fault_bands(r: &Report) -> Vec<XyBand> {
    r.faults
        .iter()
        .filter_map(|f| {
            let from = f.injected_at_ms?;
            Some(XyBand {
                label: format!(
                    "fault {} ({} of {}): {}",
                    f.name,
                    f.kind.as_str(),
                    f.target,
                    f.verdict
                ),
                from: (from - r.started_at_ms) as f64 / 1000.0,
                to: f
                    .recovered_at_ms
                    .map_or(f64::INFINITY, |t| (t - r.started_at_ms) as f64 / 1000.0),
                baseline: false,
            })
        })
        .collect()
}

/// QPS per client group: each worker's samples averaged per bucket (whole seconds since the
/// start, wider when the run is long, so at most 600 buckets), then summed over the group's
/// workers. A worker's last sample is left out when it is 0: its final snapshot reports 0 by
/// design.
pub fn group_qps(workers: &[crate::report::WorkerQps]) -> Vec<XySeries> {
    let last_t = workers
        .iter()
        .flat_map(|w| w.series.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let bucket = (last_t / 600.0).ceil().max(1.0);
    let mut groups: BTreeMap<&str, BTreeMap<i64, f64>> = BTreeMap::new();
    for w in workers {
        let live = match w.series.split_last() {
            Some((last, rest)) if last.1 == 0.0 && !rest.is_empty() => rest,
            _ => &w.series[..],
        };
        let mut mine: BTreeMap<i64, (f64, u32)> = BTreeMap::new();
        for (t, qps) in live {
            let slot = mine.entry((t / bucket).floor() as i64).or_default();
            slot.0 += qps;
            slot.1 += 1;
        }
        let group = groups.entry(w.group.as_str()).or_default();
        for (b, (sum, n)) in mine {
            *group.entry(b).or_default() += sum / f64::from(n);
        }
    }
    groups
        .into_iter()
        .map(|(g, buckets)| XySeries {
            name: g.to_string(),
            points: buckets
                .into_iter()
                .map(|(b, qps)| (b as f64 * bucket, qps))
                .collect(),
        })
        .collect()
}

fn plots(r: &Report) -> Markup {
    let whole: Vec<&crate::report::timeline::LatencySeries> = r
        .timeline
        .latency
        .iter()
        .filter(|s| s.model.is_none())
        .collect();
    let with_models: Vec<&crate::report::timeline::ServerSeries> = r
        .timeline
        .servers
        .iter()
        .filter(|s| s.models.iter().any(|m| !m.points.is_empty()))
        .collect();
    html! {
        h2 #plots { "Over time" }
        (xy_chart(
            &XyChart {
                id: "qps-groups",
                title: "QPS per client group",
                x_label: "seconds since the start",
                y_label: "requests/s",
                series: group_qps(&r.workers),
                reference: None,
                bands: fault_bands(r),
            },
            "no worker reported a QPS sample",
        ))
        @if whole.iter().all(|s| s.points.is_empty()) {
            (xy_chart(
                &empty_chart("latency", "Latency percentiles per scenario"),
                "the run's timeline has no latency intervals",
            ))
        }
        @for s in whole.iter().filter(|s| !s.points.is_empty()) {
            (latency_plot(r, s))
        }
        @if with_models.is_empty() {
            (xy_chart(
                &empty_chart("server-time", "Server queue vs compute time per request"),
                "the run's timeline has no per-model server samples",
            ))
        }
        @for s in with_models {
            (server_time_plot(r, s))
        }
        (memory_plot(r))
        (capacity_plots(r))
    }
}

/// A scenario's p50, p90 and p99 over time.
fn latency_plot(r: &Report, s: &crate::report::timeline::LatencySeries) -> Markup {
    let pick = |f: fn(&crate::report::timeline::LatencyPoint) -> f64| -> Vec<(f64, f64)> {
        s.points.iter().map(|p| (p.t_s, f(p))).collect()
    };
    let id = format!("latency-{}", s.scenario);
    let title = format!("Latency percentiles of {}", s.scenario);
    xy_chart(
        &XyChart {
            id: &id,
            title: &title,
            x_label: "seconds since the start",
            y_label: "ms",
            series: vec![
                XySeries {
                    name: "p50".into(),
                    points: pick(|p| p.p50_ms),
                },
                XySeries {
                    name: "p90".into(),
                    points: pick(|p| p.p90_ms),
                },
                XySeries {
                    name: "p99".into(),
                    points: pick(|p| p.p99_ms),
                },
            ],
            reference: None,
            bands: fault_bands(r),
        },
        "no interval of this scenario",
    )
}

/// A server's queue and compute time per request, per model, over time.
fn server_time_plot(r: &Report, s: &crate::report::timeline::ServerSeries) -> Markup {
    let mut series = Vec::new();
    for m in s.models.iter().filter(|m| !m.points.is_empty()) {
        series.push(XySeries {
            name: format!("{} queue", m.model),
            points: m.points.iter().map(|p| (p.t_s, p.queue_us)).collect(),
        });
        series.push(XySeries {
            name: format!("{} compute", m.model),
            points: m
                .points
                .iter()
                .map(|p| {
                    (
                        p.t_s,
                        p.compute_input_us + p.compute_infer_us + p.compute_output_us,
                    )
                })
                .collect(),
        });
    }
    let id = format!("server-time-{}", s.member_id);
    let title = format!(
        "Queue vs compute time per request on {} (per model)",
        s.member_id
    );
    xy_chart(
        &XyChart {
            id: &id,
            title: &title,
            x_label: "seconds since the start",
            y_label: "µs per request",
            series,
            reference: None,
            bands: fault_bands(r),
        },
        "no sample",
    )
}

/// Every server's memory over time.
fn memory_plot(r: &Report) -> Markup {
    let memory: Vec<XySeries> = r
        .timeline
        .servers
        .iter()
        .map(|s| XySeries {
            name: s.member_id.clone(),
            points: s
                .points
                .iter()
                .filter_map(|p| {
                    let bytes = p.rss_bytes.or(p.cpu_memory_used_bytes)?;
                    Some((p.t_s, bytes / (1024.0 * 1024.0)))
                })
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    xy_chart(
        &XyChart {
            id: "server-memory",
            title: "Server memory (resident set, else Triton's CPU memory gauge)",
            x_label: "seconds since the start",
            y_label: "MiB",
            series: memory,
            reference: None,
            bands: fault_bands(r),
        },
        "the run's timeline has no server memory readings",
    )
}

fn empty_chart<'a>(id: &'a str, title: &'a str) -> XyChart<'a> {
    XyChart {
        id,
        title,
        x_label: "",
        y_label: "",
        series: Vec::new(),
        reference: None,
        bands: Vec::new(),
    }
}

/// Per phase: the controller's concurrency per check, and p99 per check against the target
/// (a spike phase: achieved QPS per window instead of concurrency).
fn capacity_plots(r: &Report) -> Markup {
    let Some(c) = &r.capacity else {
        return xy_chart(
            &empty_chart("capacity", "Capacity controller"),
            "not a capacity-mode run",
        );
    };
    html! {
        @for p in &c.phases {
            (phase_plots(p))
        }
    }
}

fn phase_plots(p: &crate::capacity::phase::PhaseRecord) -> Markup {
    let windows: Vec<(u32, &crate::capacity::controller::Window)> = match &p.spike {
        Some(s) => s.trace.iter().map(|c| (0, &c.window)).collect(),
        None => p
            .checks
            .iter()
            .map(|c| (c.concurrency, &c.window))
            .collect(),
    };
    let at = |i: usize| i as f64 + 1.0;
    let (first_id, first_title, first) = match &p.spike {
        Some(_) => (
            format!("capacity-qps-{}-{}", p.group, p.key),
            format!("Spike {}/{}: achieved QPS per window", p.group, p.key),
            XySeries {
                name: "QPS".into(),
                points: windows
                    .iter()
                    .enumerate()
                    .map(|(i, (_, w))| (at(i), w.qps))
                    .collect(),
            },
        ),
        None => (
            format!("capacity-concurrency-{}-{}", p.group, p.key),
            format!("Controller {}/{}: concurrency per check", p.group, p.key),
            XySeries {
                name: "concurrency".into(),
                points: windows
                    .iter()
                    .enumerate()
                    .map(|(i, (c, _))| (at(i), f64::from(*c)))
                    .collect(),
            },
        ),
    };
    let p99_id = format!("capacity-p99-{}-{}", p.group, p.key);
    let p99_title = format!("{}/{}: p99 per check against the target", p.group, p.key);
    html! {
        div.plots-row {
            (xy_chart(
                &XyChart {
                    id: &first_id,
                    title: &first_title,
                    x_label: "check",
                    y_label: if p.spike.is_some() { "requests/s" } else { "concurrency" },
                    series: vec![first],
                    reference: None,
                    bands: Vec::new(),
                },
                "no check yet",
            ))
            (xy_chart(
                &XyChart {
                    id: &p99_id,
                    title: &p99_title,
                    x_label: "check",
                    y_label: "p99 ms",
                    series: vec![XySeries {
                        name: "p99".into(),
                        points: windows
                            .iter()
                            .enumerate()
                            .map(|(i, (_, w))| (at(i), w.p99_us as f64 / 1000.0))
                            .collect(),
                    }],
                    reference: Some(("target", p.target_p99_ms)),
                    bands: Vec::new(),
                },
                "no check yet",
            ))
        }
    }
}

/// The listed failures' requests on the wire, each in a collapsible section.
fn forensics(r: &Report) -> Markup {
    html! {
        @for (i, (member, f)) in r.failures.iter().enumerate() {
            @if let Some(fx) = &f.forensics {
                (wire(i, member, f, fx))
            }
        }
    }
}

/// One failure's steps on the wire, and the previous use of its correlation id.
fn wire(
    i: usize,
    member: &str,
    f: &stress_common::status::FailureRecord,
    fx: &stress_common::status::Forensics,
) -> Markup {
    let rows: Vec<Row> = fx
        .steps
        .iter()
        .enumerate()
        .map(|(k, st)| {
            let correlation_id = st
                .correlation_id
                .map_or_else(String::new, |c| c.to_string());
            (
                if st.outcome == "ok" { "" } else { "fail" },
                html! {
                    (num(k + 1))
                    (td(&st.flags))
                    (td(&format_time(st.sent_us.div_euclid(1000))))
                    (num(format!("{:.3}", (st.received_us - st.sent_us) as f64 / 1000.0)))
                    (td(&st.server))
                    (td(&st.model))
                    (num(correlation_id))
                    (td(&st.input_digest))
                    (td(&st.outcome))
                },
            )
        })
        .collect();
    html! {
        details.forensics id=(format!("forensics-{i}")) {
            summary {
                "On the wire: " (member) " " (f.scenario) " at " (format_time(f.at_ms))
                " (" (fx.steps.len()) " steps)"
            }
            @if let Some(prev) = &fx.previous_use {
                p {
                    "Previous use of correlation id "
                    (f.correlation_id.map_or_else(String::new, |c| c.to_string()))
                    ": " (prev.scenario) " on " (prev.model) " from " (format_time(prev.started_ms))
                    " to " (format_time(prev.ended_ms)) ", " (prev.outcome)
                    @if !prev.left_open.is_empty() {
                        ", left a sequence open on " (prev.left_open.join(", "))
                    }
                    "."
                }
            } @else if f.correlation_id.is_some() {
                p { "No previous use of its correlation id by this worker." }
            }
            (table(
                "wire",
                &["Step", "Flags", "Sent", "ms", "Server", "Model", "Id", "Inputs", "Outcome"],
                &rows,
            ))
            @if fx.steps_left_out > 0 {
                p { (fx.steps_left_out) " more steps not kept." }
            }
            @if !fx.server_log.is_empty() {
                p { "The server's log around it:" }
                pre.log { (fx.server_log.join("\n")) }
            }
        }
        "\n"
    }
}

/// The failures grouped by signature, and the known issues.
fn signatures(r: &Report) -> Markup {
    if r.signatures.is_empty() {
        return html! {};
    }
    let rows: Vec<Row> = r
        .signatures
        .iter()
        .map(|s| {
            let status = match &s.known_issue {
                Some(id) => format!("known: {id}"),
                None => s.status.as_str().to_string(),
            };
            let history = s.history.map_or_else(
                || "no history".to_string(),
                |h| format!("{} of the last {}", h.seen_in, h.of_last),
            );
            (
                if s.fails.is_some() { "bad" } else { "" },
                html! {
                    (td(&status))
                    (td(s.class.as_str()))
                    (num(s.count))
                    (td(&s.signature))
                    (td(&s.scenario))
                    (td(&s.model))
                    (td(s.error_kind.as_str()))
                    (td(&s.message))
                    (td(&s.evidence))
                    (td(&history))
                },
            )
        })
        .collect();
    html! {
        h2 #signatures { "Failure signatures" }
        @if let Some(note) = &r.signature_history {
            p.no-data { (note) }
        }
        (table(
            "signatures",
            &[
                "Status",
                "Class",
                "Count",
                "Signature",
                "Scenario",
                "Model",
                "Kind",
                "Message",
                "Evidence",
                "History",
            ],
            &rows,
        ))
        @if !r.known_issues.is_empty() {
            (known_issues(r))
        }
    }
}

fn known_issues(r: &Report) -> Markup {
    let rows: Vec<Row> = r
        .known_issues
        .iter()
        .map(|k| {
            (
                "",
                html! {
                    (td(&k.status))
                    (td(&k.id))
                    (num(k.count))
                    (td(&k.reason))
                    (td(k.link.as_deref().unwrap_or_default()))
                },
            )
        })
        .collect();
    html! {
        h3 #known-issues { "Known issues" }
        (table(
            "known-issues",
            &["Status", "Known issue", "Matched", "Reason", "Link"],
            &rows,
        ))
    }
}

fn failures(r: &Report) -> Markup {
    html! {
        (signatures(r))
        h2 #failures { "Failures" }
        @if r.failures.is_empty() {
            p { "No failure was recorded." }
        } @else {
            p { "The first " (r.failures.len()) " of " (r.failure_count) " recorded failures:" }
            (failures_table(r))
            (forensics(r))
        }
        @if !r.failed_members.is_empty() {
            h2 #failed-members { "Failed members" }
            p {
                button type="button" data-details="open" { "Open all" }
                " "
                button type="button" data-details="close" { "Close all" }
            }
            @for m in by_failure_time(&r.failed_members) {
                (failed_member(r, m))
            }
        }
    }
}

fn failures_table(r: &Report) -> Markup {
    let rows: Vec<Row> = r
        .failures
        .iter()
        .map(|(member, f)| {
            let correlation_id = f
                .correlation_id
                .map_or_else(String::new, |id| id.to_string());
            (
                "",
                html! {
                    (td(&format_time(f.at_ms)))
                    (td(member))
                    (td(&f.scenario))
                    (td(&f.server))
                    (td(&f.model))
                    (num(correlation_id))
                    (td(&f.expected))
                    (td(&f.actual))
                },
            )
        })
        .collect();
    table(
        "failures",
        &[
            "Time",
            "Member",
            "Scenario",
            "Server",
            "Model",
            "Correlation id",
            "Expected",
            "Actual",
        ],
        &rows,
    )
}

/// A failed member's diagnostics, collapsed: what is known of it, then its logs and how to
/// dig further.
fn failed_member(r: &Report, m: &FailedMember) -> Markup {
    let d = &m.diagnostics;
    let mut fields: Vec<(&str, Option<String>)> = vec![
        ("reason", Some(m.reason.clone())),
        ("exit", d.exit.as_ref().map(|e| e.description.clone())),
    ];
    if let Some(p) = &d.pod {
        fields.extend([
            ("pod", Some(format!("{}/{}", p.namespace, p.name))),
            ("phase", p.phase.clone()),
            ("status reason", p.status_reason.clone()),
            ("summary", p.summary.clone()),
            ("node", p.node.clone()),
            ("pod IP", p.ip.clone()),
            ("restarts", Some(p.restarts.to_string())),
        ]);
    } else {
        fields.push(("where", d.location.clone()));
    }
    fields.push(("log file", d.log_file.clone()));

    // (title, class, lines)
    let mut blocks: Vec<(&str, &str, Vec<String>)> = Vec::new();
    if let Some(c) = &d.command {
        blocks.push(("Reproduce", "reproduce", vec![c.clone()]));
    }
    if let Some(p) = &d.pod {
        let containers = p.containers.iter().map(ToString::to_string).collect();
        let events = p.events.iter().map(ToString::to_string).collect();
        blocks.push(("Containers", "containers", containers));
        blocks.push(("Events", "events", events));
    }
    blocks.push(("Log tail", "log-tail", d.log_tail.clone()));
    if let Some(p) = &d.pod {
        blocks.push((
            "Log tail of the previous container",
            "log-tail",
            p.previous_log_tail.clone(),
        ));
        blocks.push(("Dig further", "kubectl", p.kubectl.clone()));
    }
    html! {
        details.failed-member id=(member_anchor(m)) {
            summary {
                (m.role) " " (m.member_id) " (group " (m.group) ") failed at "
                (format_time(m.failed_at_ms)) " (+" (duration(m.failed_at_ms - r.started_at_ms))
                "): " (m.reason)
            }
            div.diagnostics {
                dl.meta {
                    @for (k, v) in &fields {
                        @if let Some(v) = v { dt { (k) } dd { (v) } }
                    }
                }
                @for (title, class, lines) in &blocks {
                    @if !lines.is_empty() {
                        h4 { (title) }
                        pre class=(class) { (lines.join("\n")) }
                    }
                }
            }
        }
        "\n"
    }
}

#[cfg(test)]
// Tests build a report field by field, the way each case reads best.
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;
    use crate::launcher::MemberDiagnostics;
    use crate::report::WorkerQps;

    fn failed(member: &str, at_ms: i64, reason: &str) -> FailedMember {
        FailedMember {
            member_id: member.into(),
            role: "CLIENT".into(),
            group: "g".into(),
            failed_at_ms: at_ms,
            reason: reason.into(),
            diagnostics: MemberDiagnostics::default(),
        }
    }

    fn worker(member: &str, group: &str, series: &[(f64, f64)]) -> WorkerQps {
        WorkerQps {
            member_id: member.into(),
            group: group.into(),
            samples: series.len(),
            min: 0.0,
            avg: 0.0,
            max: 0.0,
            series: series.to_vec(),
            rss: Vec::new(),
            memory_growth_bytes: None,
            memory_finding: None,
        }
    }

    /// A models-table row of one test and request, with `failures` failures.
    fn model_row(model: &str, failures: u64) -> stress_common::report::ModelRowJson {
        stress_common::report::ModelRowJson {
            model: model.into(),
            scenario: "Infer".into(),
            failures,
            tests: 1,
            requests: 1,
            qps: 1.0,
            p50_us: 1,
            p90_us: 1,
            p99_us: 1,
            max_us: 1,
            stream: None,
        }
    }

    /// The `<figure data-plot=ID>` element of the page.
    /// The `rect.bar` targets' x, width, y and height, in order.
    fn bar_rects(figure: &str) -> Vec<(i32, i32, i32, i32)> {
        figure
            .split("<rect class=\"bar")
            .skip(1)
            .map(|r| {
                let attr = |name: &str| -> i32 {
                    let at = r.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
                    r[at..at + r[at..].find('"').unwrap()].parse().unwrap()
                };
                (attr("x"), attr("width"), attr("y"), attr("height"))
            })
            .collect()
    }

    fn figure<'a>(html: &'a str, id: &str) -> &'a str {
        let start = html
            .find(&format!("data-plot=\"{id}\""))
            .unwrap_or_else(|| panic!("no plot {id} in:\n{html}"));
        let end = start + html[start..].find("</figure>").unwrap();
        &html[start..end]
    }

    #[test]
    fn strings_from_the_report_are_escaped() {
        let evil = "<script>alert(1)</script>";
        let mut r = Report::default();
        r.name = evil.into();
        r.verdict = "FAIL".into();
        r.models = vec![model_row(evil, 0)];
        let mut m = failed("c-0", 5, "\"quoted\" & <b>bold</b>");
        m.diagnostics.log_tail = vec![evil.into()];
        r.failed_members = vec![m];
        r.workers = vec![worker(evil, evil, &[(1.0, 2.0)])];
        let html = render(&r);
        assert!(!html.contains(evil), "{html}");
        assert!(!html.contains("<b>bold"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&quot;quoted&quot; &amp; &lt;b&gt;"),
            "{html}"
        );
        // The page's own script is the only one.
        assert_eq!(html.matches("<script>").count(), 1, "{html}");
    }

    /// maud escapes every value it inserts, in text and in attributes: markup in a failure
    /// message, a model name, a server log line, a member id or a group name stays text (any of
    /// them inserted unescaped would put an `<img` on the page).
    #[test]
    fn markup_in_report_values_is_text_in_content_and_attributes() {
        use stress_common::status::{FailureRecord, Forensics};
        let img = "<img src=x onerror=alert(1)>";
        let escaped = "&lt;img src=x onerror=alert(1)&gt;";
        // Closes an attribute's quotes, then the tag.
        let breakout = format!("\"{img}");
        let mut r = Report::default();
        r.verdict = "FAIL".into();
        r.name = format!("matrix{breakout}");
        r.run_id = format!("run{breakout}");
        r.models = vec![model_row(img, 1)];
        r.failures = vec![(
            "c-0".into(),
            FailureRecord {
                model: img.into(),
                actual: format!("expected \"1\", got {img}"),
                forensics: Some(Forensics {
                    server_log: vec![format!("E0101 {img}")],
                    ..Default::default()
                }),
                ..Default::default()
            },
        )];
        r.failed_members = vec![failed(&format!("c-0{breakout}"), 5, img)];
        r.workers = vec![worker("w-0", &breakout, &[(1.0, 2.0)])];
        let page = render_served(&r, None);
        assert!(!page.contains("<img"), "{page}");
        // The model, in the models and the failures tables.
        assert_eq!(
            page.matches(&format!("<td>{escaped}</td>")).count(),
            2,
            "{page}"
        );
        for (text, what) in [
            (
                format!("<td>expected &quot;1&quot;, got {escaped}</td>"),
                "the failure message",
            ),
            (
                format!("<pre class=\"log\">E0101 {escaped}</pre>"),
                "the server's log",
            ),
            (
                format!("data-series=\"&quot;{escaped}\""),
                "the group, in an attribute",
            ),
            (
                format!("id=\"member-c-0&quot;{escaped}\""),
                "the member, in its section's id",
            ),
            (
                format!(">matrix&quot;{escaped} history</a>"),
                "the matrix's name, in the served page's links",
            ),
        ] {
            assert!(page.contains(&text), "{what}: {page}");
        }
    }

    #[test]
    fn the_page_loads_nothing_from_anywhere() {
        let mut r = Report::default();
        r.verdict = "PASS".into();
        r.workers = vec![worker("c-0", "g", &[(1.0, 2.0), (2.0, 3.0)])];
        let html = render(&r);
        assert!(!html.contains("://"), "{html}");
        assert!(!html.contains(" src="), "{html}");
        assert!(html.contains("content=\"default-src 'none';"), "{html}");
    }

    #[test]
    fn a_sweep_draws_a_bar_per_answer_names_the_failed_and_escapes_parameters() {
        use crate::capacity::sweep::{SweepAnswer, VariantResult, VariantStatus};
        let variant = |index: usize, status, qps: Option<f64>, why: Option<&str>| VariantResult {
            index,
            parameters: indexmap::IndexMap::from([(
                "server.env.X".to_string(),
                serde_json::json!(format!("<v{index}>")),
            )]),
            status,
            run_id: None,
            max_qps: qps,
            qps_interval: None,
            p99_ms: qps.map(|_| 100.0),
            concurrency: qps.map(|_| 4),
            ending: qps.map(|_| "converged".to_string()),
            model_instances: Some(1),
            gpus: 0,
            server_memory_bytes: None,
            gpu_memory_bytes: None,
            server_cpu_utilization: None,
            server_versions: Vec::new(),
            why: why.map(str::to_string),
        };
        let mut r = Report::default();
        r.sweep = Some(SweepAnswer {
            server_group: "triton".into(),
            search: "grid".into(),
            target_p99_ms: 125.0,
            grid_size: 4,
            measured: 3,
            variants: vec![
                variant(2, VariantStatus::Measured, Some(40.0), None),
                variant(1, VariantStatus::Measured, Some(20.0), None),
                variant(
                    3,
                    VariantStatus::Failed,
                    None,
                    Some("FAIL: triton-0: <exited>"),
                ),
                variant(4, VariantStatus::Skipped, None, Some("over the limit")),
                // Measured, but never a bar: a constraint it cannot be shown to keep.
                variant(
                    5,
                    VariantStatus::Excluded,
                    Some(80.0),
                    Some(
                        "gpu_memory not measured: the servers exported no nv_gpu_memory_used_bytes",
                    ),
                ),
            ],
            pareto: vec![2],
            best: None,
            tied_with_best: Vec::new(),
        });
        let html = render(&r);
        let f = figure(&html, "sweep");
        assert_eq!(f.matches("<rect class=\"bar").count(), 2, "{f}");
        assert_eq!(f.matches("<rect class=\"bar front\"").count(), 1, "{f}");
        // Scaled to the best: the second bar is half as long, both from the axis's 0.
        let bars = bar_rects(f);
        assert_eq!(bars.len(), 2, "{f}");
        assert_eq!(bars[0].0, bars[1].0, "{bars:?}");
        assert!(bars[0].1 > 100, "{bars:?}");
        assert!((bars[0].1 - 2 * bars[1].1).abs() <= 1, "{bars:?}");
        // Best first, each with its tooltip; the front green.
        assert!(bars[0].2 < bars[1].2, "{bars:?}");
        assert!(
            f.contains("<title>#2 server.env.X=&quot;&lt;v2&gt;&quot;: 40.0 QPS</title>"),
            "{f}"
        );
        assert!(f.contains("fill=\"#1A7F37\""), "{f}");
        assert!(f.contains("failed: FAIL: triton-0: &lt;exited&gt;"), "{f}");
        assert!(f.contains("skipped: over the limit"), "{f}");
        assert!(
            f.contains("excluded: gpu_memory not measured: the servers exported no nv_gpu_memory_used_bytes"),
            "{f}"
        );
        assert!(!html.contains("<v1>"), "parameters are escaped");
        // Written by the end of its path that tells it apart; whole in the tooltip.
        assert!(f.contains(">\n#2 X=&quot;&lt;v2&gt;&quot;\n</text>"), "{f}");
        let sweep = r.sweep.as_mut().unwrap();
        sweep.variants[1].parameters = indexmap::IndexMap::from([
            (
                "server.models.a.instance_group.count".into(),
                serde_json::json!(1),
            ),
            (
                "server.models.b.instance_group.count".into(),
                serde_json::json!(2),
            ),
            ("server.env.X".into(), serde_json::json!("y")),
        ]);
        assert_eq!(
            short_variant_label(sweep, &sweep.variants[1]),
            "#1 a.instance_group.count=1, b.instance_group.count=2, X=\"y\""
        );

        // The best with its interval, and a variant tied with it.
        let sweep = r.sweep.as_mut().unwrap();
        sweep.variants[0].qps_interval = Some((36.5, 43.8));
        sweep.tied_with_best = vec![1];
        sweep.best = Some(crate::capacity::sweep::BestVariant {
            index: 2,
            parameters: Default::default(),
            max_qps: 40.0,
            confirmed_qps: None,
            confirm_run_id: None,
            configs: Default::default(),
            config_diffs: Default::default(),
            model_repository: None,
        });
        let html = render(&r);
        assert!(html.contains("[36.5, 43.8]"), "{html}");
        let f = figure(&html, "sweep");
        assert!(
            f.contains(": 40.0 QPS [36.5, 43.8]</title>")
                && f.contains(": 20.0 QPS (tied)</title>"),
            "{f}"
        );
        assert!(f.contains("whisker: its 95% interval"), "{f}");
        // The whisker: a line from the low to the high bound through the first bar, its ends
        // where 36.5 and 43.8 are on a bar of 40 from 0.
        let bars = bar_rects(f);
        let (x, width, y, height) = bars[0];
        let at = |v: f64| x + (width as f64 * v / 40.0).round() as i32;
        let whisker = f
            .split("<polyline ")
            .filter(|l| l.contains("stroke=\"#24292F\" stroke-width=\"2\""))
            .map(|l| {
                let points = &l[l.find("points=\"").unwrap() + 8..];
                let points: Vec<(i32, i32)> = points[..points.find('"').unwrap()]
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect();
                points
            })
            .find(|p| p.len() == 2 && p[0].1 == p[1].1)
            .unwrap_or_else(|| panic!("no whisker in {f}"));
        assert!((whisker[0].0 - at(36.5)).abs() <= 1, "{whisker:?} {bars:?}");
        assert!((whisker[1].0 - at(43.8)).abs() <= 1, "{whisker:?} {bars:?}");
        assert!(
            whisker[0].1 > y && whisker[0].1 < y + height,
            "{whisker:?} {bars:?}"
        );
        // The tied variant's value says so.
        assert!(
            f.split("<text")
                .any(|t| t.contains(">\n20.0 (tied)\n</text>")),
            "{f}"
        );
        assert!(
            html.contains("Tied with variant 1: their capacities"),
            "{html}"
        );
    }

    /// The page's CSP allows its one style and one script element by their hashes, nothing
    /// inline beyond them: no `'unsafe-inline'`, and no `style=` attribute (which a hash cannot
    /// allow) in the page.
    #[test]
    fn the_csp_allows_the_pages_own_style_and_script_by_hash_only() {
        let page = render_served(&Report::default(), Some(5));
        assert!(!csp().contains("unsafe-inline"), "{}", csp());
        assert!(page.contains(&format!("content=\"{}\"", csp())));
        assert!(page.contains(&format!("<style>{STYLE}</style>")));
        assert!(page.contains(&format!("<script>{SCRIPT}</script>")));
        assert!(csp().contains(&inline_hash(STYLE)) && csp().contains(&inline_hash(SCRIPT)));
        assert_ne!(inline_hash(STYLE), inline_hash(&format!("{STYLE} ")));
        assert!(!page.contains(" style="), "{page}");
        // The RFC 4648 base64 of SHA-256, as browsers compare it.
        assert_eq!(
            inline_hash("abc"),
            "'sha256-ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0='"
        );
    }

    #[test]
    fn a_live_page_reloads_and_a_finished_one_does_not() {
        let mut r = Report::default();
        r.verdict = "RUNNING".into();
        r.started_at_ms = stress_common::now_ms() - 90_000;
        r.workers = vec![worker("w-0", "clients", &[(1.0, 10.0), (2.0, 12.5)])];
        r.tables.1.insert("clients".into(), Default::default());
        let live = render_served(&r, Some(5));
        assert!(
            live.contains("<meta http-equiv=\"refresh\" content=\"5\">"),
            "{live}"
        );
        assert!(live.contains("<p class=\"live\">Running for 90."), "{live}");
        assert!(
            live.contains("<td>clients</td><td class=\"num\">1</td>"),
            "one worker in the group: {live}"
        );
        assert!(live.contains("12.5"), "its QPS now: {live}");
        let still = render(&r);
        assert!(!still.contains("http-equiv=\"refresh\""));
        assert!(!still.contains("class=\"live\""));
    }

    #[test]
    fn plots_without_data_say_so() {
        let mut r = Report::default();
        r.verdict = "PASS".into();
        let html = render(&r);
        for (id, why) in [
            ("qps-groups", "no worker reported a QPS sample"),
            ("latency", "the run's timeline has no latency intervals"),
            (
                "server-time",
                "the run's timeline has no per-model server samples",
            ),
            (
                "server-memory",
                "the run's timeline has no server memory readings",
            ),
            ("capacity", "not a capacity-mode run"),
        ] {
            let f = figure(&html, id);
            assert!(
                f.contains(&format!("<p class=\"no-data\">no data: {why}</p>")),
                "{f}"
            );
            assert!(!f.contains("<svg"), "{f}");
        }
        // The baseline deltas are the regressions table's bars: without a baseline, it says so.
        assert!(
            html.contains("<p class=\"no-data\">no data: no baseline run (no earlier"),
            "{html}"
        );
    }

    /// The plots the timeline and capacity mode feed: one point element per point, per plot.
    #[test]
    fn timeline_and_capacity_plots_count_their_points() {
        use crate::report::timeline::{
            LatencyPoint, LatencySeries, ServerModelPoint, ServerModelSeries, ServerPoint,
            ServerSeries, Timeline,
        };
        let mut r = Report::default();
        r.verdict = "PASS".into();
        let latency = |t_s: f64| LatencyPoint {
            t_s,
            p50_ms: 1.0,
            p90_ms: 2.0,
            p99_ms: 3.0,
            ..Default::default()
        };
        r.timeline = Timeline {
            interval_s: 1.0,
            latency: vec![
                LatencySeries {
                    scenario: "Infer".into(),
                    model: None,
                    points: vec![latency(1.0), latency(2.0), latency(3.0)],
                },
                // Per model: not plotted (the scenario's plot has all its models).
                LatencySeries {
                    scenario: "Infer".into(),
                    model: Some("add_sub".into()),
                    points: vec![latency(1.0)],
                },
            ],
            servers: vec![ServerSeries {
                member_id: "triton-0".into(),
                group: "triton".into(),
                memory_slope_bytes_per_s: None,
                points: vec![
                    ServerPoint {
                        t_s: 1.0,
                        rss_bytes: Some(1e8),
                        ..Default::default()
                    },
                    ServerPoint {
                        t_s: 2.0,
                        cpu_memory_used_bytes: Some(2e8),
                        ..Default::default()
                    },
                    // No memory reading: no point.
                    ServerPoint {
                        t_s: 3.0,
                        ..Default::default()
                    },
                ],
                memory_growth_bytes: None,
                memory_finding: None,
                memory_not_judged: None,
                memory_limit_bytes: None,
                models: vec![ServerModelSeries {
                    model: "add_sub".into(),
                    version: "1".into(),
                    points: vec![
                        ServerModelPoint {
                            t_s: 1.0,
                            queue_us: 10.0,
                            compute_infer_us: 50.0,
                            ..Default::default()
                        },
                        ServerModelPoint {
                            t_s: 2.0,
                            queue_us: 20.0,
                            compute_infer_us: 60.0,
                            ..Default::default()
                        },
                    ],
                }],
            }],
        };
        let check = |concurrency: u32, p99_us: u64| {
            serde_json::json!({
                "concurrency": concurrency,
                "window": {"start_ms": 0, "end_ms": 1000, "requests": 100, "failures": 0,
                           "qps": 100.0, "p50_us": 500, "p99_us": p99_us, "models": []},
                "judgement": "under",
                "next_concurrency": concurrency + 1,
            })
        };
        let phase: crate::capacity::phase::PhaseRecord =
            serde_json::from_value(serde_json::json!({
                "group": "g", "phase": "production", "key": "production", "model": "mix",
                "mix": null, "target_p99_ms": 5.0,
                "result": {"ending": "converged", "concurrency": 2, "windows": 1, "max_qps": 100.0,
                           "p99_ms": 4.0, "safe_rate_qps": 80.0, "window_start_ms": 0,
                           "window_end_ms": 1000, "models": []},
                "checks": [check(1, 1000), check(2, 4000), check(3, 9000), check(2, 4500)],
            }))
            .unwrap();
        r.capacity = Some(crate::report::CapacityReport {
            results: Vec::new(),
            autoscaler: Vec::new(),
            phases: vec![phase],
        });
        let html = render(&r);
        for (id, points) in [
            ("latency-Infer", 9),
            ("server-time-triton-0", 4),
            ("server-memory", 2),
            ("capacity-concurrency-g-production", 4),
            ("capacity-p99-g-production", 4),
        ] {
            let f = figure(&html, id);
            assert_eq!(
                f.matches("<circle class=\"pt\"").count(),
                points,
                "{id}: {f}"
            );
            assert!(!f.contains("no data"), "{f}");
        }
        assert!(figure(&html, "capacity-p99-g-production").contains("class=\"reference\""));
        assert!(figure(&html, "server-time-triton-0").contains("data-series=\"add_sub compute\""));
        assert!(!html.contains("data-plot=\"latency\""), "{html}");
        assert!(!html.contains("data-plot=\"capacity\""), "{html}");
    }

    #[test]
    fn qps_is_summed_per_group_on_whole_seconds() {
        let workers = [
            // The final 0 is the worker's last snapshot: left out.
            worker("a-0", "a", &[(1.2, 10.0), (2.2, 12.0), (3.2, 0.0)]),
            worker("a-1", "a", &[(1.7, 5.0), (2.6, 6.0), (2.9, 8.0)]),
            worker("b-0", "b", &[(0.5, 0.0)]),
        ];
        assert_eq!(
            group_qps(&workers),
            [
                XySeries {
                    name: "a".into(),
                    // Second 2: 12 + the mean of a-1's two samples there.
                    points: vec![(1.0, 15.0), (2.0, 19.0)],
                },
                XySeries {
                    name: "b".into(),
                    points: vec![(0.0, 0.0)],
                },
            ]
        );
        // A long run: buckets widen so that there are at most 600.
        let long: Vec<(f64, f64)> = (0..1200).map(|i| (f64::from(i), 1.0)).collect();
        let series = group_qps(&[worker("a-0", "a", &long)]);
        assert_eq!(series[0].points.len(), 600);
        assert_eq!(series[0].points[1], (2.0, 1.0));
    }

    #[test]
    fn the_root_cause_is_the_earliest_failed_member() {
        let mut r = Report::default();
        r.verdict = "FAIL".into();
        r.started_at_ms = 1_000;
        // In the store's order the later failure comes first.
        r.failed_members = vec![
            failed("clients-0", 9_000, "connection refused"),
            failed("triton-0", 4_000, "killed by signal 9 (SIGKILL)"),
            failed("clients-1", 9_500, "connection reset"),
        ];
        let html = render(&r);
        let start = html.find("<section class=\"root-cause\"").expect(&html);
        let section = &html[start..start + html[start..].find("</section>").unwrap()];
        let first = section.split("<p class=\"first-failure\">").nth(1).unwrap();
        let first = &first[..first.find("</p>").unwrap()];
        assert!(
            first.contains("triton-0</a>") && first.contains("killed by signal 9 (SIGKILL)"),
            "{section}"
        );
        assert!(first.contains("(+3.0 s)"), "{first}");
        let also = section.split("Also failed:").nth(1).expect(section);
        let c0 = also.find("clients-0</a>").expect(also);
        let c1 = also.find("clients-1</a>").expect(also);
        assert!(c0 < c1, "{also}");
        // The root cause leads the page: before the tables.
        assert!(start < html.find("id=\"scenarios\"").unwrap());
        // The failed members' sections follow the same order, and link targets exist.
        let sections: Vec<usize> = ["triton-0", "clients-0", "clients-1"]
            .iter()
            .map(|m| {
                html.find(&format!(
                    "<details class=\"failed-member\" id=\"member-{m}\""
                ))
                .unwrap_or_else(|| panic!("no section of {m}"))
            })
            .collect();
        assert!(sections.windows(2).all(|w| w[0] < w[1]), "{sections:?}");
    }

    #[test]
    fn the_analysis_root_cause_leads_with_what_it_caused_and_server_side_tables_escape() {
        let mut r = Report::default();
        r.verdict = "FAIL".into();
        r.failed_members = vec![
            failed("clients-0", 4_000, "connection refused"),
            failed("triton-0", 4_500, "killed by signal 9 (SIGKILL)"),
            failed("clients-1", 9_500, "wrong answer"),
        ];
        r.analysis = crate::judge::rootcause::Analysis {
            root_cause: Some(crate::judge::rootcause::RootCause {
                member_id: "triton-0".into(),
                role: "SERVER".into(),
                at_ms: 4_500,
                reason: "killed".into(),
                caused_members: vec!["clients-0".into()],
                signature: None,
                class: Some(stress_common::signature::FailureClass::Server),
                evidence: Some("the server <i>ended</i>".into()),
            }),
            independent_members: vec!["clients-1".into()],
            caused_failures: 7,
            shutdown_failures: 2,
            independent_failures: 1,
        };
        r.reconciliation = vec![crate::judge::reconcile::Reconciliation {
            model: "<b>m</b>".into(),
            server_success: 10,
            server_failure: 0,
            client_ok: 7,
            client_not_ok: 0,
            client_unseen: 0,
            uncounted_runs: 0,
            server_unscraped: 0,
            gap: 3,
            verdict: crate::judge::reconcile::Verdict::Mismatch,
            explanation: "3 server-side successes no worker counted".into(),
        }];
        let html = render(&r);
        let first = html.split("<p class=\"first-failure\">").nth(1).unwrap();
        assert!(first[..first.find("</p>").unwrap()].contains("triton-0</a>"));
        let caused = html.split("<ul class=\"caused\">").nth(1).expect(&html);
        assert!(caused[..caused.find("</ul>").unwrap()].contains("clients-0</a>"));
        let also = html
            .split("<ul class=\"also-failed\">")
            .nth(1)
            .expect(&html);
        assert!(also[..also.find("</ul>").unwrap()].contains("clients-1</a>"));
        assert!(html.contains("7 caused by it, 2 during the driver's stop, 1 independent"));
        assert!(html.contains("Class <b>server</b>: the server &lt;i&gt;ended&lt;/i&gt;"));
        assert!(html.contains("<td>&lt;b&gt;m&lt;/b&gt;</td>"), "{html}");
        assert!(
            html.contains("<tr class=\"fail\"><td>&lt;b&gt;m"),
            "a mismatch is marked"
        );
    }

    #[test]
    fn a_failure_s_steps_on_the_wire_are_a_collapsed_escaped_table() {
        use stress_common::status::{FailureRecord, Forensics, WireStep};
        let mut r = Report::default();
        let step = |outcome: &str| WireStep {
            sent_us: 1_000_000,
            received_us: 1_002_500,
            server: "s:1".into(),
            model: "seq".into(),
            correlation_id: Some(7),
            flags: "START".into(),
            input_digest: "0123456789abcdef".into(),
            outcome: outcome.into(),
        };
        r.failures = vec![(
            "c-0".into(),
            FailureRecord {
                correlation_id: Some(7),
                forensics: Some(Forensics {
                    steps: vec![step("ok"), step("<b>must specify the START flag</b>")],
                    steps_left_out: 0,
                    previous_use: None,
                    server_log: Vec::new(),
                    sequence_idle_us: None,
                    test_started_ms: None,
                }),
                ..Default::default()
            },
        )];
        let html = render(&r);
        let section = html
            .split("<details class=\"forensics\"")
            .nth(1)
            .expect(&html);
        assert!(section.contains("(2 steps)"), "{section}");
        assert!(
            section.contains("No previous use of its correlation id"),
            "{section}"
        );
        assert!(
            section.contains("<td class=\"num\">2.500</td>"),
            "{section}"
        );
        assert!(
            section.contains("<tr class=\"fail\"><td class=\"num\">2</td>"),
            "the failed step is marked: {section}"
        );
        assert!(section.contains("&lt;b&gt;must specify"), "{section}");
    }

    #[test]
    fn a_passing_run_has_no_root_cause_box() {
        let mut r = Report::default();
        r.verdict = "PASS".into();
        let html = render(&r);
        assert!(!html.contains("class=\"root-cause\""), "{html}");
        assert!(html.contains("<span class=\"verdict pass\""), "{html}");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(12_340), "12.3 s");
        assert_eq!(duration(245_000), "4 min 05 s");
        assert_eq!(duration(7_380_000), "2 h 03 min");
    }
}
