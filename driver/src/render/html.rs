//! The report as one self-contained HTML page (`report.html` beside report.json; `driver report
//! --format html`), for the person who opens a run the morning after:
//! - the verdict and, when the run failed, the root cause first: the earliest failed member and
//!   its reason, the others listed after it as "also failed";
//! - tables per scenario, client group, model and server, the SLO verdicts, the regressions
//!   against the baseline and capacity mode's answers;
//! - plots drawn here as inline SVG ([`line_chart`]): QPS per client group, latency percentiles
//!   per scenario, the servers' queue vs compute time per model and their memory, capacity
//!   mode's controller; a plot without data says "no data" and why;
//! - the failures, and every failed member's diagnostics in a collapsible `<details>`.
//!
//! Nothing is loaded from anywhere: inline CSS, inline SVG, a few lines of inline script, and a
//! Content-Security-Policy that forbids any fetch, so the page opens the same on an air-gapped
//! cluster and as a CI artifact. Every string that comes from the report (model names, log
//! tails, failure messages) is escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::report::{FailedMember, Report, format_time};

/// The page as one string.
pub fn render(report: &Report) -> String {
    render_page(report, None, false)
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
pub fn percent(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A run's page as `driver serve` shows it (`reload_s`: a run still going, whose page the
/// browser reloads, with what it has done so far on top): the report with links to the same
/// run's other documents on top (JSON, JUnit, its diff, every failure record, its matrix's
/// history), which a report file on disk has no server for.
pub fn render_served(report: &Report, reload_s: Option<u32>) -> String {
    render_page(report, reload_s, true)
}

/// The served run's links to its other documents.
fn run_links(out: &mut String, report: &Report) {
    let run = esc(&percent(&report.run_id));
    let _ = writeln!(
        out,
        "<nav id=\"run-links\"><a href=\"/\">all runs</a> · <a href=\"/matrix/{}\">{} history</a> · \
         <a href=\"/runs/{run}/diff\">diff with the previous run</a> · \
         <a href=\"/runs/{run}/failures\">every failure record</a> · \
         <a href=\"/runs/{run}/report.json\">report.json</a> · \
         <a href=\"/runs/{run}/junit.xml\">junit.xml</a></nav>",
        esc(&percent(&report.name)),
        esc(&report.name)
    );
}

fn render_page(report: &Report, reload_s: Option<u32>, served: bool) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let title = format!("{} {}: {}", report.name, report.run_id, report.verdict);
    let reload = reload_s
        .map(|s| format!("<meta http-equiv=\"refresh\" content=\"{s}\">\n"))
        .unwrap_or_default();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n{reload}\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        esc(&title),
        csp = csp()
    );
    if served {
        run_links(&mut out, report);
    }
    header(&mut out, report);
    if let Some(s) = reload_s {
        live(&mut out, report, s);
    }
    root_cause(&mut out, report);
    faults(&mut out, report);
    tables(&mut out, report);
    server_side(&mut out, report);
    plots(&mut out, report);
    failures(&mut out, report);
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body>\n</html>\n");
    out
}

/// A run under way: how long it has run, and per client group its workers, tests, failures
/// and QPS so far.
fn live(out: &mut String, r: &Report, reload_s: u32) {
    let elapsed = stress_common::now_ms() - r.started_at_ms;
    let _ = writeln!(
        out,
        "<p class=\"live\">Running for {}: the report so far (this page reloads every {reload_s} s).</p>",
        duration(elapsed)
    );
    let rows: Vec<(String, String)> = r
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
                if total.failures > 0 { "bad" } else { "" }.to_string(),
                [
                    td(group),
                    num(count),
                    num(total.tests),
                    num(total.failures),
                    num(format!("{qps:.1}")),
                ]
                .concat(),
            )
        })
        .collect();
    table(
        out,
        "live",
        &["Client group", "Workers", "Tests", "Failures", "QPS now"],
        &rows,
    );
}

/// What the servers say: each model's successes against the workers' OK answers, memory
/// findings, and the trace summaries of traced servers.
fn server_side(out: &mut String, r: &Report) {
    if !r.reconciliation.is_empty() {
        out.push_str("<h2 id=\"reconciliation\">Servers vs workers</h2>\n");
        let rows: Vec<(String, String)> = r
            .reconciliation
            .iter()
            .map(|x| {
                let verdict = serde_json::to_value(x.verdict)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                let class = if verdict == "mismatch" { "fail" } else { "" };
                (
                    class.to_string(),
                    [
                        td(&x.model),
                        num(x.server_success),
                        num(x.client_ok),
                        num(x.client_not_ok),
                        num(x.client_unseen),
                        num(x.gap),
                        td(&verdict),
                        td(&x.explanation),
                    ]
                    .concat(),
                )
            })
            .collect();
        table(
            out,
            "reconciliation",
            &[
                "Model",
                "Server ok",
                "Worker ok",
                "Not ok",
                "Unseen",
                "Gap",
                "Verdict",
                "Why",
            ],
            &rows,
        );
    }
    for s in &r.timeline.servers {
        if let Some(f) = &s.memory_finding {
            let _ = writeln!(
                out,
                "<p class=\"finding\">Finding: {}: {}</p>",
                esc(&s.member_id),
                esc(f)
            );
        }
    }
    for w in &r.workers {
        if let Some(f) = &w.memory_finding {
            let _ = writeln!(
                out,
                "<p class=\"finding\">Finding: worker {}: {}</p>",
                esc(&w.member_id),
                esc(f)
            );
        }
    }
    for (server, summary) in &r.traces {
        let _ = writeln!(out, "<h2>Traces of {}</h2>", esc(server));
        for row in &summary.rows {
            let _ = writeln!(
                out,
                "<h3>{} (version {}) over {}: {} traces</h3>",
                esc(&row.model),
                esc(&row.version),
                esc(&row.protocol),
                row.traces
            );
            let rows: Vec<(String, String)> = row
                .stages
                .iter()
                .map(|(stage, t)| {
                    (
                        String::new(),
                        [
                            td(stage),
                            num(t.count),
                            num(format!("{:.1}", t.avg_us)),
                            num(t.p50_us),
                            num(t.p90_us),
                            num(t.p99_us),
                        ]
                        .concat(),
                    )
                })
                .collect();
            table(
                out,
                "trace",
                &["Stage", "Count", "Avg µs", "p50 µs", "p90 µs", "p99 µs"],
                &rows,
            );
        }
    }
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
.bar{display:inline-block;height:.8em;background:#cf222e;vertical-align:middle}
svg.regbar{vertical-align:middle}svg.regbar rect{fill:#cf222e}
figure.plot{margin:1em 0;border:1px solid #d0d7de;border-radius:6px;padding:.5em}
figure.plot figcaption{font-weight:bold;margin-bottom:.3em}
figure.plot svg{width:100%;max-width:760px;height:auto;display:block}
.axis line,.axis path{stroke:#57606a}.grid line{stroke:#eaeef2}
svg text{font:11px sans-serif;fill:#57606a}
ul.legend{list-style:none;padding:0;margin:.3em 0;display:flex;flex-wrap:wrap;gap:.3em 1em}
.swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:middle}
p.no-data{color:#57606a;font-style:italic;margin:.3em 0}
details.failed-member{border:1px solid #d0d7de;border-radius:6px;margin:.5em 0;padding:.3em .8em}
details.failed-member summary{cursor:pointer;font-weight:bold}
pre{background:#f6f8fa;padding:.5em;overflow-x:auto;font-size:12px;white-space:pre-wrap;word-break:break-all}
.plots-row{display:flex;flex-wrap:wrap;gap:1em}.plots-row figure{flex:1 1 360px}
svg rect.bar{fill:#8c959f}svg rect.bar.front{fill:#1a7f37}svg text.bad{fill:#cf222e}
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

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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

fn td(s: &str) -> String {
    format!("<td>{}</td>", esc(s))
}

fn num(v: impl std::fmt::Display) -> String {
    format!("<td class=\"num\">{}</td>", esc(&v.to_string()))
}

fn table(out: &mut String, class: &str, head: &[&str], rows: &[(String, String)]) {
    let _ = write!(out, "<table class=\"{class}\"><thead><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for (row_class, cells) in rows {
        if row_class.is_empty() {
            let _ = writeln!(out, "<tr>{cells}</tr>");
        } else {
            let _ = writeln!(out, "<tr class=\"{row_class}\">{cells}</tr>");
        }
    }
    out.push_str("</tbody></table>\n");
}

/// The injected faults: a row each with its timeline, recovery against what is allowed, and
/// what it cost; a failed one is marked.
fn faults(out: &mut String, r: &Report) {
    if r.faults.is_empty() {
        return;
    }
    out.push_str("<h2 id=\"faults\">Injected faults</h2>\n");
    let since =
        |ms: Option<i64>| ms.map_or_else(|| "-".to_string(), |t| duration(t - r.started_at_ms));
    let rows: Vec<(String, String)> = r
        .faults
        .iter()
        .map(|f| {
            (
                if f.ok || !f.reached { "" } else { "fail" }.to_string(),
                [
                    td(&f.name),
                    td(f.kind.as_str()),
                    td(&f.target),
                    td(&since(f.injected_at_ms)),
                    td(&since(f.first_error_ms)),
                    td(&since(if f.kind.lasts() {
                        f.ended_at_ms
                    } else {
                        f.ready_at_ms
                    })),
                    td(&since(f.recovered_at_ms)),
                    td(&f
                        .recovery_s
                        .map_or_else(|| "-".to_string(), |s| format!("{s:.1} s"))),
                    td(&format!("{} s", f.recover_within_s)),
                    num(f.lost_requests),
                    num(f.sequences_cut),
                    td(&f.verdict),
                ]
                .concat(),
            )
        })
        .collect();
    table(
        out,
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
    );
}

fn verdict_class(verdict: &str) -> &'static str {
    match verdict {
        "PASS" => "pass",
        "FAIL" => "fail",
        _ => "other",
    }
}

fn header(out: &mut String, r: &Report) {
    let _ = write!(
        out,
        "<header><h1>{} <span class=\"verdict {}\" id=\"verdict\">{}</span></h1>\n<dl class=\"meta\">",
        esc(&r.name),
        verdict_class(&r.verdict),
        esc(&r.verdict)
    );
    let took = r.finished_at_ms.map_or_else(
        || "still running".to_string(),
        |f| duration(f - r.started_at_ms),
    );
    let finished = r
        .finished_at_ms
        .map_or_else(|| "-".to_string(), format_time);
    for (k, v) in [
        ("Run id", r.run_id.clone()),
        ("Launcher", r.launcher.clone()),
        ("Started", format_time(r.started_at_ms)),
        ("Finished", finished),
        ("Duration", took),
        ("Load phase", format!("{:.1} s", r.load_seconds)),
        ("Failures", r.failure_count.to_string()),
    ] {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
    }
    out.push_str("</dl></header>\n");
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

fn member_line(r: &Report, m: &FailedMember) -> String {
    format!(
        "<a href=\"#{}\">{} {}</a> (group {}) at {} (+{}): {}",
        esc(&member_anchor(m)),
        esc(&m.role),
        esc(&m.member_id),
        esc(&m.group),
        esc(&format_time(m.failed_at_ms)),
        esc(&duration(m.failed_at_ms - r.started_at_ms)),
        esc(&m.reason)
    )
}

fn root_cause(out: &mut String, r: &Report) {
    if r.verdict == "PASS" {
        return;
    }
    // The analysis's root cause (a killed server before the clients that saw it die first),
    // and the members it caused apart from the independent ones.
    if let Some(root) = &r.analysis.root_cause
        && let Some(first) = r
            .failed_members
            .iter()
            .find(|m| m.member_id == root.member_id)
    {
        let _ = write!(
            out,
            "<section class=\"root-cause\" id=\"root-cause\"><h2>Root cause</h2>\
             <p class=\"first-failure\">{}</p>",
            member_line(r, first)
        );
        if let Some(s) = &root.signature {
            let _ = write!(
                out,
                "<p class=\"root-signature\">Signature <b>{}</b> ({}, class <b>{}</b>): {}</p>",
                esc(&s.signature),
                esc(s.status.as_str()),
                esc(s.class.as_str()),
                esc(&s.evidence)
            );
        } else if let (Some(class), Some(evidence)) = (root.class, &root.evidence) {
            let _ = write!(
                out,
                "<p class=\"root-signature\">Class <b>{}</b>: {}</p>",
                esc(class.as_str()),
                esc(evidence)
            );
        }
        for (title, class, ids) in [
            ("Caused by it:", "caused", &root.caused_members),
            (
                "Also failed (independently):",
                "also-failed",
                &r.analysis.independent_members,
            ),
        ] {
            let members: Vec<&FailedMember> = ids
                .iter()
                .filter_map(|id| r.failed_members.iter().find(|m| &m.member_id == id))
                .collect();
            if !members.is_empty() {
                let _ = write!(out, "<p>{}</p><ul class=\"{class}\">", esc(title));
                for m in members {
                    let _ = write!(out, "<li>{}</li>", member_line(r, m));
                }
                out.push_str("</ul>");
            }
        }
        let _ = writeln!(
            out,
            "<p class=\"failure-split\">Failure records: {} caused by it, {} during the \
             driver's stop, {} independent.</p></section>",
            r.analysis.caused_failures,
            r.analysis.shutdown_failures,
            r.analysis.independent_failures
        );
        return;
    }
    let sorted = by_failure_time(&r.failed_members);
    let Some((first, rest)) = sorted.split_first() else {
        if r.verdict == "FAIL" {
            out.push_str(
                "<section class=\"root-cause\" id=\"root-cause\"><h2>Root cause</h2>\
                 <p>No member failed: see the SLO verdicts, regressions and failures below.</p></section>\n",
            );
        }
        return;
    };
    let _ = write!(
        out,
        "<section class=\"root-cause\" id=\"root-cause\"><h2>Root cause</h2>\
         <p class=\"first-failure\">{}</p>",
        member_line(r, first)
    );
    if !rest.is_empty() {
        out.push_str("<p>Also failed:</p><ul class=\"also-failed\">");
        for m in rest {
            let _ = write!(out, "<li>{}</li>", member_line(r, m));
        }
        out.push_str("</ul>");
    }
    out.push_str("</section>\n");
}

fn scenario_rows(rows: &[stress_common::report::RowJson]) -> Vec<(String, String)> {
    rows.iter()
        .map(|row| {
            let class = if row.scenario == "TOTAL" {
                "total"
            } else if row.failures > 0 {
                "bad"
            } else {
                ""
            };
            let cells = [
                td(&row.scenario),
                num(row.failures),
                num(row.tests),
                num(row.requests),
                num(row.skipped),
                num(format!("{:.1}", row.qps)),
                num(ms(row.p50_us)),
                num(ms(row.p90_us)),
                num(ms(row.p99_us)),
                num(ms(row.max_us)),
                td(&row.description),
            ]
            .concat();
            (class.to_string(), cells)
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

fn tables(out: &mut String, r: &Report) {
    out.push_str("<h2 id=\"scenarios\">Scenarios, all workers</h2>\n");
    table(
        out,
        "scenarios",
        &SCENARIO_HEAD,
        &scenario_rows(&r.scenarios),
    );
    let lateness: Vec<String> = r
        .scenarios
        .iter()
        .filter(|row| row.scenario != "TOTAL")
        .filter_map(|row| Some(row.send_lateness.as_ref()?.line(&row.scenario)))
        .collect();
    if !lateness.is_empty() {
        out.push_str(
            "<p id=\"send-lateness\">Open-loop send lateness (actual − intended send time; the latencies count from the intended time):</p>\n<ul>\n",
        );
        for line in lateness {
            let _ = writeln!(out, "<li>{}</li>", esc(&line));
        }
        out.push_str("</ul>\n");
    }

    out.push_str("<h2 id=\"groups\">Client groups</h2>\n");
    if r.groups.is_empty() {
        out.push_str("<p class=\"no-data\">no data: no worker reported counts</p>\n");
    }
    if let [(group, _)] = r.groups.iter().collect::<Vec<_>>()[..] {
        let _ = writeln!(
            out,
            "<p>One client group, {}: its rows are the table above.</p>",
            esc(group)
        );
    }
    for (group, rows) in r.groups.iter().filter(|_| r.groups.len() > 1) {
        let _ = writeln!(out, "<h3>Client group {}</h3>", esc(group));
        table(out, "group", &SCENARIO_HEAD, &scenario_rows(rows));
    }

    out.push_str("<h2 id=\"models\">Models, all workers</h2>\n");
    if r.models.is_empty() {
        out.push_str("<p class=\"no-data\">no data: no per-model counts</p>\n");
    } else {
        let streams = r.models.iter().any(|m| m.stream.is_some());
        let mut head = vec![
            "Model", "Scenario", "Failures", "Tests", "Requests", "QPS", "p50 ms", "p90 ms",
            "p99 ms", "max ms",
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
        let rows: Vec<(String, String)> = r
            .models
            .iter()
            .map(|m| {
                let mut cells = [
                    td(&m.model),
                    td(&m.scenario),
                    num(m.failures),
                    num(m.tests),
                    num(m.requests),
                    num(format!("{:.1}", m.qps)),
                    num(ms(m.p50_us)),
                    num(ms(m.p90_us)),
                    num(ms(m.p99_us)),
                    num(ms(m.max_us)),
                ]
                .concat();
                if streams {
                    cells.push_str(&match &m.stream {
                        Some(s) => [
                            num(s.streams),
                            num(s.responses),
                            num(format!("{:.2}", s.responses_per_request)),
                            num(ms(s.first_response_p50_us)),
                            num(ms(s.first_response_p99_us)),
                            num(ms(s.inter_response_p50_us)),
                            num(ms(s.inter_response_p99_us)),
                        ]
                        .concat(),
                        None => "<td></td>".repeat(7),
                    });
                }
                let class = if m.failures > 0 { "bad" } else { "" };
                (class.to_string(), cells)
            })
            .collect();
        table(out, "models", &head, &rows);
    }

    out.push_str("<h2 id=\"servers\">Servers</h2>\n");
    let rows: Vec<(String, String)> = r
        .servers
        .iter()
        .map(|s| {
            (
                String::new(),
                [
                    td(&s.member_id),
                    td(&s.group),
                    td(if s.external { "external" } else { "launched" }),
                    td(s.version.as_deref().unwrap_or("")),
                    td(&s.address),
                    td(&s.metrics),
                ]
                .concat(),
            )
        })
        .collect();
    if rows.is_empty() {
        out.push_str("<p class=\"no-data\">no data: the run recorded no server</p>\n");
    } else {
        table(
            out,
            "servers",
            &[
                "Server",
                "Group",
                "Started by",
                "Version",
                "Address",
                "Triton /metrics",
            ],
            &rows,
        );
    }
    for (server, models) in &r.server_metrics {
        let _ = writeln!(
            out,
            "<h3>Server-side metrics of {} (Triton /metrics at the end)</h3>",
            esc(server)
        );
        let rows: Vec<(String, String)> = models
            .iter()
            .map(|m| {
                let class = if m.failure > 0.0 { "bad" } else { "" };
                (
                    class.to_string(),
                    [
                        td(&m.model),
                        td(&m.version),
                        num(m.success),
                        num(m.failure),
                        num(m.inferences),
                        num(m.executions),
                        num(m.pending),
                        num(format!("{:.1}", m.avg_request_us())),
                        num(format!("{:.1}", m.avg_queue_us())),
                        num(format!("{:.1}", m.avg_compute_us())),
                    ]
                    .concat(),
                )
            })
            .collect();
        table(
            out,
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
        );
    }

    out.push_str("<h2 id=\"slo\">SLO verdicts</h2>\n");
    if r.slo.is_empty() {
        out.push_str("<p class=\"no-data\">no data: no SLO verdict (the matrix sets no rule, or the run ended \
             before they were judged)</p>\n");
    } else {
        let rows: Vec<(String, String)> = r
            .slo
            .iter()
            .map(|o| {
                let verdict = if o.ok {
                    "<td class=\"ok\">ok</td>".to_string()
                } else {
                    "<td class=\"fail\">FAIL</td>".to_string()
                };
                let observed = o.observed.map_or_else(
                    || "nothing measured".into(),
                    |v| format!("{v:.4} {}", o.unit),
                );
                (
                    if o.ok { "" } else { "bad" }.to_string(),
                    [
                        verdict,
                        td(&o.rule),
                        td(o.group.as_deref().unwrap_or("all")),
                        td(&o.metric),
                        num(observed.trim_end()),
                        num(format!(
                            "{:.1}",
                            (o.window_end_ms - o.window_start_ms) as f64 / 1000.0
                        )),
                    ]
                    .concat(),
                )
            })
            .collect();
        table(
            out,
            "slo",
            &["Verdict", "Rule", "Group", "Metric", "Observed", "Window s"],
            &rows,
        );
    }

    out.push_str("<h2 id=\"regressions\">Regressions vs baseline</h2>\n");
    match &r.baseline {
        None => {
            let _ = writeln!(
                out,
                "<p class=\"no-data\">no data: no baseline run (no earlier passing or pinned run of this matrix, {})</p>",
                esc(&r.name)
            );
        }
        Some(b) if b.baseline_run.is_empty() => {
            let _ = writeln!(
                out,
                "<p class=\"no-data\">not compared: {}</p>",
                esc(&b.basis())
            );
        }
        Some(b) => {
            for change in &b.version_changes {
                let _ = writeln!(out, "<p>Changed since: {}</p>", esc(change));
            }
            let _ = writeln!(
                out,
                "<p>Compared with {}: {} of {} compared metrics changed beyond it{}.</p>",
                esc(&b.basis()),
                r.regressions.len(),
                b.compared,
                if b.fail && !r.regressions.is_empty() {
                    " (regression.fail: the run fails)"
                } else {
                    ""
                }
            );
            if !r.regressions.is_empty() {
                // Bars relative to the largest change, so the worst stands out.
                let largest = r
                    .regressions
                    .iter()
                    .map(|f| f.change.abs())
                    .fold(0.0, f64::max);
                let rows: Vec<(String, String)> = r
                    .regressions
                    .iter()
                    .map(|f| {
                        let width = if largest > 0.0 {
                            (f.change.abs() / largest * 200.0).round()
                        } else {
                            0.0
                        };
                        (
                            "bad".to_string(),
                            [
                                td(&f.metric),
                                num(format!("{:.3}", f.baseline)),
                                num(format!("{:.3}", f.current)),
                                num(format!("{:+.1}%", f.change * 100.0)),
                                format!(
                                    "<td><svg class=\"regbar\" width=\"{width}\" height=\"10\" aria-hidden=\"true\">\
                                     <rect width=\"{width}\" height=\"10\"/></svg></td>"
                                ),
                            ]
                            .concat(),
                        )
                    })
                    .collect();
                table(
                    out,
                    "regressions",
                    &["Metric", "Baseline", "Current", "Change", ""],
                    &rows,
                );
            }
        }
    }

    if let Some(s) = &r.sweep {
        sweep(out, s);
    }
    if let Some(c) = &r.capacity {
        out.push_str("<h2 id=\"capacity\">Capacity</h2>\n");
        let rows: Vec<(String, String)> = c
            .results
            .iter()
            .map(|x| {
                let safe = match x.target_rps {
                    Some(_) => "-".to_string(),
                    None => format!("{:.1}", x.safe_rate_qps),
                };
                (
                    if x.concurrency.is_none() { "bad" } else { "" }.to_string(),
                    [
                        td(&x.group),
                        td(&x.phase),
                        td(&x.model),
                        num(x
                            .concurrency
                            .map_or_else(|| "-".to_string(), |c| c.to_string())),
                        num(format!("{:.1}", x.max_qps)),
                        num(format!("{:.2}", x.p99_ms)),
                        num(format!("{:.2}", x.target_p99_ms)),
                        num(safe),
                        td(x.ending
                            .map_or("running", crate::capacity::controller::Ending::as_str)),
                    ]
                    .concat(),
                )
            })
            .collect();
        table(
            out,
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
        );
        for a in &c.autoscaler {
            let _ = writeln!(
                out,
                "<h3>Autoscaler, {} / {}</h3>\n<pre class=\"autoscaler\">{}</pre>",
                esc(&a.group),
                esc(&a.phase),
                esc(&super::text::autoscaler(&a.autoscaler))
            );
        }
    }
}

/// A sweep: a bar of capacity per variant (best first; failed and skipped variants named
/// with why), its table, and the best variant's config change.
fn sweep(out: &mut String, s: &crate::capacity::sweep::SweepAnswer) {
    use crate::capacity::sweep::{VariantStatus, parameters_label};
    let _ = writeln!(
        out,
        "<h2 id=\"sweep\">Sweep of server group {}</h2>\n<p>{} of {} variants run ({}), target p99 {} ms.</p>",
        esc(&s.server_group),
        s.measured,
        s.grid_size,
        esc(&s.search),
        s.target_p99_ms
    );
    let label = |v: &crate::capacity::sweep::VariantResult| {
        format!("#{} {}", v.index, parameters_label(&v.parameters))
    };
    // Bars: one row each, scaled to the best capacity.
    let top = s
        .variants
        .iter()
        .filter_map(|v| v.max_qps)
        .fold(0.0, f64::max);
    let (row, label_w, bar_w) = (22.0, 360.0, 320.0);
    let height = row * s.variants.len() as f64 + 8.0;
    let _ = write!(
        out,
        "<figure class=\"plot\" data-plot=\"sweep\"><figcaption>Capacity per variant (QPS within the target; green: on the Pareto front)</figcaption>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {height}\" width=\"{w}\" height=\"{height}\" role=\"img\">",
        w = label_w + bar_w + 80.0
    );
    for (i, v) in s.variants.iter().enumerate() {
        let y = 4.0 + row * i as f64;
        let _ = write!(
            out,
            "<text x=\"0\" y=\"{}\" font-size=\"12\">{}</text>",
            y + 15.0,
            esc(&label(v))
        );
        match (v.status, v.max_qps) {
            (VariantStatus::Measured, Some(q)) if top > 0.0 => {
                let _ = write!(
                    out,
                    "<rect class=\"bar{}\" x=\"{label_w}\" y=\"{}\" width=\"{:.1}\" height=\"{}\"><title>{}: {q:.1} QPS</title></rect>\
                     <text x=\"{:.1}\" y=\"{}\" font-size=\"12\">{q:.1}</text>",
                    if s.pareto.contains(&v.index) {
                        " front"
                    } else {
                        ""
                    },
                    y + 3.0,
                    bar_w * q / top,
                    row - 6.0,
                    esc(&label(v)),
                    label_w + bar_w * q / top + 4.0,
                    y + 15.0
                );
            }
            _ => {
                let what = match v.status {
                    VariantStatus::Measured => "no answer within the target".to_string(),
                    VariantStatus::Failed => format!("failed: {}", v.why.as_deref().unwrap_or("")),
                    VariantStatus::Skipped => {
                        format!("skipped: {}", v.why.as_deref().unwrap_or(""))
                    }
                };
                let _ = write!(
                    out,
                    "<text class=\"bad\" x=\"{label_w}\" y=\"{}\" font-size=\"12\">{}</text>",
                    y + 15.0,
                    esc(&what)
                );
            }
        }
    }
    out.push_str("</svg></figure>\n");
    let dash = || "-".to_string();
    let rows: Vec<(String, String)> = s
        .variants
        .iter()
        .map(|v| {
            (
                if v.status == VariantStatus::Measured && v.max_qps.is_some() {
                    ""
                } else {
                    "bad"
                }
                .to_string(),
                [
                    num(v.index),
                    td(&parameters_label(&v.parameters)),
                    num(v.max_qps.map_or_else(dash, |q| format!("{q:.1}"))),
                    num(v.p99_ms.map_or_else(dash, |p| format!("{p:.2}"))),
                    num(v.concurrency.map_or_else(dash, |c| c.to_string())),
                    num(v.model_instances.map_or_else(dash, |c| c.to_string())),
                    num(v
                        .server_memory_bytes
                        .map_or_else(dash, |b| format!("{:.0}", b / 1048576.0))),
                    td(if s.pareto.contains(&v.index) {
                        "yes"
                    } else {
                        ""
                    }),
                    td(&match v.status {
                        VariantStatus::Measured => v.ending.clone().unwrap_or_else(dash),
                        _ => format!(
                            "{}: {}",
                            if v.status == VariantStatus::Failed {
                                "failed"
                            } else {
                                "skipped"
                            },
                            v.why.as_deref().unwrap_or("")
                        ),
                    }),
                ]
                .concat(),
            )
        })
        .collect();
    table(
        out,
        "sweep",
        &[
            "#",
            "Parameters",
            "Max QPS",
            "p99 ms",
            "Concurrency",
            "Instances",
            "Memory MiB",
            "Pareto",
            "Ending",
        ],
        &rows,
    );
    if let Some(b) = &s.best {
        let _ = writeln!(
            out,
            "<p class=\"best\">Best: variant {} at {:.1} QPS{}.</p>",
            b.index,
            b.max_qps,
            b.confirmed_qps
                .map(|q| format!(" (measured again: {q:.1} QPS)"))
                .unwrap_or_default()
        );
        for (model, diff) in &b.config_diffs {
            let _ = writeln!(
                out,
                "<h3>{}/config.pbtxt against the original</h3>\n<pre class=\"config-diff\">{}</pre>",
                esc(model),
                esc(diff)
            );
        }
    }
}

/// One named line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart: its id (`data-plot`), title, axis labels, series, and an optional horizontal
/// reference line (a target).
pub struct Chart<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<Series>,
    pub reference: Option<(&'a str, f64)>,
    /// Spans of time shaded behind the series (the injected faults' windows).
    pub bands: Vec<Band>,
}

/// A span of a time plot's x axis, shaded, its label as a tooltip.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    pub label: String,
    pub from: f64,
    pub to: f64,
    /// A baseline window (blue) rather than a fault's (red).
    pub baseline: bool,
}

/// Each injected fault's window on the time plots: from its injection to its clients'
/// recovery (not recovered: to the end of the plot), in seconds since the run's start.
fn fault_bands(r: &Report) -> Vec<Band> {
    r.faults
        .iter()
        .filter_map(|f| {
            let from = f.injected_at_ms?;
            Some(Band {
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

const PALETTE: [&str; 10] = [
    "#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#e16f24", "#6e7781",
    "#bf3989", "#4d2d00",
];

/// Evenly spaced round tick values covering `lo..=hi` (steps of 1, 2 or 5 × 10^k).
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo, lo + 1.0) };
    let raw = (hi - lo) / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = magnitude
        * match raw / magnitude {
            n if n < 1.5 => 1.0,
            n if n < 3.0 => 2.0,
            n if n < 7.0 => 5.0,
            _ => 10.0,
        };
    let first = (lo / step).floor() as i64;
    let last = (hi / step).ceil() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).clamp(0.0, 4.0) as usize;
    let s = format!("{v:.decimals$}");
    if s == "-0" { "0".into() } else { s }
}

/// The chart as a `<figure class="plot" data-plot=ID>`: an inline SVG with axes, ticks, labels and
/// one `<g class="series" data-points=N>` per series whose every point is a `<circle class="pt">`
/// (with its values as a tooltip); the legend below. Without any point, a "no data: WHY" line.
pub fn line_chart(chart: &Chart, no_data: &str) -> String {
    let mut out = format!(
        "<figure class=\"plot\" data-plot=\"{}\"><figcaption>{}</figcaption>",
        esc(chart.id),
        esc(chart.title)
    );
    // Only finite points are drawn (and counted).
    let series: Vec<Series> = chart
        .series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
        })
        .collect();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
    if all.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"no-data\">no data: {}</p></figure>",
            esc(no_data)
        );
        return out;
    }
    const W: f64 = 760.0;
    const H: f64 = 300.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 20.0;
    const TOP: f64 = 14.0;
    const BOTTOM: f64 = 46.0;
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);

    // Both axes start at 0 (time since the start, check numbers, counts) unless data is below.
    let x_min = all.iter().map(|p| p.0).fold(0.0, f64::min);
    let x_max = all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let mut y_min = all.iter().map(|p| p.1).fold(0.0, f64::min);
    let mut y_max = all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    if let Some((_, y)) = chart.reference.filter(|(_, y)| y.is_finite()) {
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    let x_ticks = ticks(x_min, x_max);
    let y_ticks = ticks(y_min, y_max);
    let (x_lo, x_hi) = (x_ticks[0], x_ticks[x_ticks.len() - 1]);
    let (y_lo, y_hi) = (y_ticks[0], y_ticks[y_ticks.len() - 1]);
    let sx = |x: f64| LEFT + (x - x_lo) / (x_hi - x_lo) * pw;
    let sy = |y: f64| TOP + ph - (y - y_lo) / (y_hi - y_lo) * ph;

    let _ = write!(
        out,
        "<svg viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\">",
        esc(chart.title)
    );
    // Grid and tick labels.
    out.push_str("<g class=\"grid\">");
    let x_step = x_ticks.get(1).map_or(1.0, |t| t - x_ticks[0]);
    let y_step = y_ticks.get(1).map_or(1.0, |t| t - y_ticks[0]);
    for &t in &y_ticks {
        let y = sy(t);
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            tick_label(t, y_step)
        );
    }
    for &t in &x_ticks {
        let x = sx(t);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            TOP + ph,
            TOP + ph + 16.0,
            tick_label(t, x_step)
        );
    }
    out.push_str("</g>");
    let _ = write!(
        out,
        "<g class=\"axis\"><line x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{TOP}\" y2=\"{:.1}\"/>\
         <line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/></g>\
         <text class=\"x-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text class=\"y-label\" transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        TOP + ph,
        LEFT + pw,
        TOP + ph,
        TOP + ph,
        LEFT + pw / 2.0,
        H - 8.0,
        esc(chart.x_label),
        TOP + ph / 2.0,
        esc(chart.y_label)
    );
    for band in &chart.bands {
        let (from, to) = (band.from.max(x_lo), band.to.min(x_hi));
        if from >= to {
            continue;
        }
        let _ = write!(
            out,
            "<rect class=\"band{}\" x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{ph:.1}\" \
             fill=\"{}\" fill-opacity=\"0.12\"><title>{}</title></rect>",
            if band.baseline { " baseline" } else { "" },
            sx(from),
            sx(to) - sx(from),
            if band.baseline { "#0969da" } else { "#cf222e" },
            esc(&band.label)
        );
    }
    if let Some((label, y)) = chart.reference.filter(|(_, y)| y.is_finite()) {
        let _ = write!(
            out,
            "<g class=\"reference\"><line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" \
             stroke=\"#cf222e\" stroke-dasharray=\"6 4\"/><text x=\"{:.1}\" y=\"{:.1}\" \
             text-anchor=\"end\">{} {}</text></g>",
            LEFT + pw,
            sy(y),
            sy(y),
            LEFT + pw - 4.0,
            sy(y) - 4.0,
            esc(label),
            tick_label(y, y_step / 10.0)
        );
    }
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let _ = write!(
            out,
            "<g class=\"series\" data-series=\"{}\" data-points=\"{}\">",
            esc(&s.name),
            s.points.len()
        );
        let path: Vec<String> = s
            .points
            .iter()
            .enumerate()
            .map(|(j, (x, y))| {
                format!(
                    "{}{:.1} {:.1}",
                    if j == 0 { 'M' } else { 'L' },
                    sx(*x),
                    sy(*y)
                )
            })
            .collect();
        let _ = write!(
            out,
            "<path d=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\"/>",
            path.join(" ")
        );
        for (x, y) in &s.points {
            let _ = write!(
                out,
                "<circle class=\"pt\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{color}\">\
                 <title>{}: {}, {}</title></circle>",
                sx(*x),
                sy(*y),
                esc(&s.name),
                tick_label(*x, x_step / 100.0),
                tick_label(*y, y_step / 100.0)
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg><ul class=\"legend\">");
    for (i, s) in series.iter().enumerate() {
        let _ = write!(
            out,
            "<li><svg class=\"swatch\" width=\"12\" height=\"12\" aria-hidden=\"true\">\
             <rect width=\"12\" height=\"12\" fill=\"{}\"/></svg>{} ({} points)</li>",
            PALETTE[i % PALETTE.len()],
            esc(&s.name),
            s.points.len()
        );
    }
    out.push_str("</ul></figure>\n");
    out
}

/// QPS per client group: each worker's samples averaged per bucket (whole seconds since the
/// start, wider when the run is long, so at most 600 buckets), then summed over the group's
/// workers. A worker's last sample is left out when it is 0: its final snapshot reports 0 by
/// design.
pub fn group_qps(workers: &[crate::report::WorkerQps]) -> Vec<Series> {
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
        .map(|(g, buckets)| Series {
            name: g.to_string(),
            points: buckets
                .into_iter()
                .map(|(b, qps)| (b as f64 * bucket, qps))
                .collect(),
        })
        .collect()
}

fn plots(out: &mut String, r: &Report) {
    out.push_str("<h2 id=\"plots\">Over time</h2>\n");
    out.push_str(&line_chart(
        &Chart {
            id: "qps-groups",
            title: "QPS per client group",
            x_label: "seconds since the start",
            y_label: "requests/s",
            series: group_qps(&r.workers),
            reference: None,
            bands: fault_bands(r),
        },
        "no worker reported a QPS sample",
    ));

    let whole: Vec<&crate::report::timeline::LatencySeries> = r
        .timeline
        .latency
        .iter()
        .filter(|s| s.model.is_none())
        .collect();
    if whole.iter().all(|s| s.points.is_empty()) {
        out.push_str(&line_chart(
            &empty_chart("latency", "Latency percentiles per scenario"),
            "the run's timeline has no latency intervals",
        ));
    }
    for s in whole.iter().filter(|s| !s.points.is_empty()) {
        let pick = |f: fn(&crate::report::timeline::LatencyPoint) -> f64| -> Vec<(f64, f64)> {
            s.points.iter().map(|p| (p.t_s, f(p))).collect()
        };
        let id = format!("latency-{}", s.scenario);
        let title = format!("Latency percentiles of {}", s.scenario);
        out.push_str(&line_chart(
            &Chart {
                id: &id,
                title: &title,
                x_label: "seconds since the start",
                y_label: "ms",
                series: vec![
                    Series {
                        name: "p50".into(),
                        points: pick(|p| p.p50_ms),
                    },
                    Series {
                        name: "p90".into(),
                        points: pick(|p| p.p90_ms),
                    },
                    Series {
                        name: "p99".into(),
                        points: pick(|p| p.p99_ms),
                    },
                ],
                reference: None,
                bands: fault_bands(r),
            },
            "no interval of this scenario",
        ));
    }

    let servers = &r.timeline.servers;
    let with_models: Vec<_> = servers
        .iter()
        .filter(|s| s.models.iter().any(|m| !m.points.is_empty()))
        .collect();
    if with_models.is_empty() {
        out.push_str(&line_chart(
            &empty_chart("server-time", "Server queue vs compute time per request"),
            "the run's timeline has no per-model server samples",
        ));
    }
    for s in with_models {
        let mut series = Vec::new();
        for m in s.models.iter().filter(|m| !m.points.is_empty()) {
            series.push(Series {
                name: format!("{} queue", m.model),
                points: m.points.iter().map(|p| (p.t_s, p.queue_us)).collect(),
            });
            series.push(Series {
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
        out.push_str(&line_chart(
            &Chart {
                id: &id,
                title: &title,
                x_label: "seconds since the start",
                y_label: "µs per request",
                series,
                reference: None,
                bands: fault_bands(r),
            },
            "no sample",
        ));
    }

    let memory: Vec<Series> = servers
        .iter()
        .map(|s| Series {
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
    out.push_str(&line_chart(
        &Chart {
            id: "server-memory",
            title: "Server memory (resident set, else Triton's CPU memory gauge)",
            x_label: "seconds since the start",
            y_label: "MiB",
            series: memory,
            reference: None,
            bands: fault_bands(r),
        },
        "the run's timeline has no server memory readings",
    ));

    capacity_plots(out, r);
}

fn empty_chart<'a>(id: &'a str, title: &'a str) -> Chart<'a> {
    Chart {
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
fn capacity_plots(out: &mut String, r: &Report) {
    let Some(c) = &r.capacity else {
        out.push_str(&line_chart(
            &empty_chart("capacity", "Capacity controller"),
            "not a capacity-mode run",
        ));
        return;
    };
    for p in &c.phases {
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
                Series {
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
                Series {
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
        out.push_str("<div class=\"plots-row\">");
        out.push_str(&line_chart(
            &Chart {
                id: &first_id,
                title: &first_title,
                x_label: "check",
                y_label: if p.spike.is_some() {
                    "requests/s"
                } else {
                    "concurrency"
                },
                series: vec![first],
                reference: None,
                bands: Vec::new(),
            },
            "no check yet",
        ));
        out.push_str(&line_chart(
            &Chart {
                id: &p99_id,
                title: &p99_title,
                x_label: "check",
                y_label: "p99 ms",
                series: vec![Series {
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
        ));
        out.push_str("</div>\n");
    }
}

/// The listed failures' requests on the wire, each in a collapsible section.
fn forensics(out: &mut String, r: &Report) {
    for (i, (member, f)) in r.failures.iter().enumerate() {
        let Some(fx) = &f.forensics else { continue };
        let _ = write!(
            out,
            "<details class=\"forensics\" id=\"forensics-{i}\"><summary>On the wire: {} {} \
             at {} ({} steps)</summary>",
            esc(member),
            esc(&f.scenario),
            esc(&format_time(f.at_ms)),
            fx.steps.len()
        );
        match &fx.previous_use {
            Some(p) => {
                let _ = write!(
                    out,
                    "<p>Previous use of correlation id {}: {} on {} from {} to {}, {}{}.</p>",
                    f.correlation_id.map_or_else(String::new, |c| c.to_string()),
                    esc(&p.scenario),
                    esc(&p.model),
                    esc(&format_time(p.started_ms)),
                    esc(&format_time(p.ended_ms)),
                    esc(&p.outcome),
                    if p.left_open.is_empty() {
                        String::new()
                    } else {
                        format!(", left a sequence open on {}", esc(&p.left_open.join(", ")))
                    }
                );
            }
            None if f.correlation_id.is_some() => {
                out.push_str("<p>No previous use of its correlation id by this worker.</p>");
            }
            None => {}
        }
        let rows: Vec<(String, String)> = fx
            .steps
            .iter()
            .enumerate()
            .map(|(k, st)| {
                (
                    if st.outcome == "ok" {
                        String::new()
                    } else {
                        "fail".into()
                    },
                    [
                        num(k + 1),
                        td(&st.flags),
                        td(&format_time(st.sent_us.div_euclid(1000))),
                        num(format!(
                            "{:.3}",
                            (st.received_us - st.sent_us) as f64 / 1000.0
                        )),
                        td(&st.server),
                        td(&st.model),
                        num(st
                            .correlation_id
                            .map_or_else(String::new, |c| c.to_string())),
                        td(&st.input_digest),
                        td(&st.outcome),
                    ]
                    .concat(),
                )
            })
            .collect();
        table(
            out,
            "wire",
            &[
                "Step", "Flags", "Sent", "ms", "Server", "Model", "Id", "Inputs", "Outcome",
            ],
            &rows,
        );
        if fx.steps_left_out > 0 {
            let _ = write!(out, "<p>{} more steps not kept.</p>", fx.steps_left_out);
        }
        if !fx.server_log.is_empty() {
            let _ = write!(
                out,
                "<p>The server's log around it:</p><pre class=\"log\">{}</pre>",
                esc(&fx.server_log.join("\n"))
            );
        }
        out.push_str("</details>\n");
    }
}

/// The failures grouped by signature, and the known issues.
fn signatures(out: &mut String, r: &Report) {
    if r.signatures.is_empty() {
        return;
    }
    out.push_str("<h2 id=\"signatures\">Failure signatures</h2>\n");
    if let Some(note) = &r.signature_history {
        let _ = writeln!(out, "<p class=\"no-data\">{}</p>", esc(note));
    }
    let rows: Vec<(String, String)> = r
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
                if s.fails.is_some() { "bad" } else { "" }.to_string(),
                [
                    td(&status),
                    td(s.class.as_str()),
                    num(s.count.to_string()),
                    td(&s.signature),
                    td(&s.scenario),
                    td(&s.model),
                    td(s.error_kind.as_str()),
                    td(&s.message),
                    td(&s.evidence),
                    td(&history),
                ]
                .concat(),
            )
        })
        .collect();
    table(
        out,
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
    );
    if !r.known_issues.is_empty() {
        out.push_str("<h3 id=\"known-issues\">Known issues</h3>\n");
        let rows: Vec<(String, String)> = r
            .known_issues
            .iter()
            .map(|k| {
                (
                    String::new(),
                    [
                        td(&k.status),
                        td(&k.id),
                        num(k.count.to_string()),
                        td(&k.reason),
                        td(k.link.as_deref().unwrap_or_default()),
                    ]
                    .concat(),
                )
            })
            .collect();
        table(
            out,
            "known-issues",
            &["Status", "Known issue", "Matched", "Reason", "Link"],
            &rows,
        );
    }
}

fn failures(out: &mut String, r: &Report) {
    signatures(out, r);
    out.push_str("<h2 id=\"failures\">Failures</h2>\n");
    if r.failures.is_empty() {
        out.push_str("<p>No failure was recorded.</p>\n");
    } else {
        let _ = writeln!(
            out,
            "<p>The first {} of {} recorded failures:</p>",
            r.failures.len(),
            r.failure_count
        );
        let rows: Vec<(String, String)> = r
            .failures
            .iter()
            .map(|(member, f)| {
                (
                    String::new(),
                    [
                        td(&format_time(f.at_ms)),
                        td(member),
                        td(&f.scenario),
                        td(&f.server),
                        td(&f.model),
                        num(f
                            .correlation_id
                            .map_or_else(String::new, |id| id.to_string())),
                        td(&f.expected),
                        td(&f.actual),
                    ]
                    .concat(),
                )
            })
            .collect();
        table(
            out,
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
        );
        forensics(out, r);
    }
    if r.failed_members.is_empty() {
        return;
    }
    out.push_str(
        "<h2 id=\"failed-members\">Failed members</h2>\n<p><button type=\"button\" \
         data-details=\"open\">Open all</button> <button type=\"button\" \
         data-details=\"close\">Close all</button></p>\n",
    );
    for m in by_failure_time(&r.failed_members) {
        failed_member(out, r, m);
    }
}

fn failed_member(out: &mut String, r: &Report, m: &FailedMember) {
    let _ = write!(
        out,
        "<details class=\"failed-member\" id=\"{}\"><summary>{} {} (group {}) failed at {} (+{}): {}</summary>\n<div class=\"diagnostics\"><dl class=\"meta\">",
        esc(&member_anchor(m)),
        esc(&m.role),
        esc(&m.member_id),
        esc(&m.group),
        esc(&format_time(m.failed_at_ms)),
        esc(&duration(m.failed_at_ms - r.started_at_ms)),
        esc(&m.reason)
    );
    let d = &m.diagnostics;
    let mut field = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
        }
    };
    field("reason", Some(m.reason.clone()));
    field("exit", d.exit.as_ref().map(|e| e.description.clone()));
    if let Some(p) = &d.pod {
        field("pod", Some(format!("{}/{}", p.namespace, p.name)));
        field("phase", p.phase.clone());
        field("status reason", p.status_reason.clone());
        field("summary", p.summary.clone());
        field("node", p.node.clone());
        field("pod IP", p.ip.clone());
        field("restarts", Some(p.restarts.to_string()));
    } else {
        field("where", d.location.clone());
    }
    field("log file", d.log_file.clone());
    out.push_str("</dl>\n");
    let mut block = |title: &str, class: &str, lines: &[String]| {
        if !lines.is_empty() {
            let _ = writeln!(
                out,
                "<h4>{}</h4><pre class=\"{class}\">{}</pre>",
                esc(title),
                esc(&lines.join("\n"))
            );
        }
    };
    if let Some(c) = &d.command {
        block("Reproduce", "reproduce", std::slice::from_ref(c));
    }
    if let Some(p) = &d.pod {
        let containers: Vec<String> = p.containers.iter().map(ToString::to_string).collect();
        let events: Vec<String> = p.events.iter().map(ToString::to_string).collect();
        block("Containers", "containers", &containers);
        block("Events", "events", &events);
    }
    block("Log tail", "log-tail", &d.log_tail);
    if let Some(p) = &d.pod {
        block(
            "Log tail of the previous container",
            "log-tail",
            &p.previous_log_tail,
        );
        block("Dig further", "kubectl", &p.kubectl);
    }
    out.push_str("</div></details>\n");
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

    /// The `<figure data-plot=ID>` element of the page.
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
        r.models = vec![stress_common::report::ModelRowJson {
            model: evil.into(),
            scenario: "Infer".into(),
            failures: 0,
            tests: 1,
            requests: 1,
            qps: 1.0,
            p50_us: 1,
            p90_us: 1,
            p99_us: 1,
            max_us: 1,
            stream: None,
        }];
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
        assert_eq!(esc("a'b"), "a&#39;b");
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
            p99_ms: qps.map(|_| 100.0),
            concurrency: qps.map(|_| 4),
            ending: qps.map(|_| "converged".to_string()),
            model_instances: Some(1),
            gpus: 0,
            server_memory_bytes: None,
            server_cpu_utilization: None,
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
            ],
            pareto: vec![2],
            best: None,
        });
        let html = render(&r);
        let f = figure(&html, "sweep");
        assert_eq!(f.matches("<rect class=\"bar").count(), 2, "{f}");
        assert_eq!(f.matches("<rect class=\"bar front\"").count(), 1, "{f}");
        // Scaled to the best: the second bar is half as long.
        assert!(
            f.contains("width=\"320.0\"") && f.contains("width=\"160.0\""),
            "{f}"
        );
        assert!(f.contains("failed: FAIL: triton-0: &lt;exited&gt;"), "{f}");
        assert!(f.contains("skipped: over the limit"), "{f}");
        assert!(!html.contains("<v1>"), "parameters are escaped");
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
                f.contains(&format!("<p class=\"no-data\">no data: {}</p>", esc(why))),
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

    #[test]
    fn a_line_chart_draws_one_point_element_per_data_point() {
        let chart = Chart {
            id: "t",
            title: "t",
            x_label: "x",
            y_label: "y",
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)],
                },
                Series {
                    name: "b".into(),
                    // A non-finite point is not drawn, nor counted.
                    points: vec![(0.5, 10.0), (1.5, f64::NAN)],
                },
            ],
            reference: Some(("target", 5.0)),
            bands: Vec::new(),
        };
        let svg = line_chart(&chart, "unused");
        assert_eq!(svg.matches("<circle class=\"pt\"").count(), 4, "{svg}");
        assert!(svg.contains("data-series=\"a\" data-points=\"3\""), "{svg}");
        assert!(svg.contains("data-series=\"b\" data-points=\"1\""), "{svg}");
        assert!(svg.contains("class=\"reference\""), "{svg}");
        assert!(!svg.contains("no data"), "{svg}");
        // Axis ticks cover the data: x 0..2, y 0..10.
        assert!(
            svg.contains(">2</text>") && svg.contains(">10</text>"),
            "{svg}"
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
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.0, 9.0), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        // One value: a range of 1 above it.
        let one = ticks(3.0, 3.0);
        assert_eq!(one.len(), 6, "{one:?}");
        assert!(
            (one[0] - 3.0).abs() < 1e-9 && (one[5] - 4.0).abs() < 1e-9,
            "{one:?}"
        );
        assert_eq!(
            ticks(0.0, 140.0),
            [0.0, 20.0, 40.0, 60.0, 80.0, 100.0, 120.0, 140.0]
        );
        assert_eq!(ticks(0.0, 180.0), [0.0, 50.0, 100.0, 150.0, 200.0]);
        assert_eq!(tick_label(0.30000000000000004, 0.1), "0.3");
        assert_eq!(tick_label(1500.0, 500.0), "1500");
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
                Series {
                    name: "a".into(),
                    // Second 2: 12 + the mean of a-1's two samples there.
                    points: vec![(1.0, 15.0), (2.0, 19.0)],
                },
                Series {
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
