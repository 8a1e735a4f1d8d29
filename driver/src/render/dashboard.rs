//! The pages of `driver serve` that are not a run's report: the list of runs, newest first,
//! with links to each run's report and filters by matrix name and verdict. Pure: the server
//! reads the summaries and serves what this returns.

use super::html::{Band, Chart, STYLE, Series, esc, line_chart, percent};
use crate::report::diff::{Line, RunDiff};
use crate::report::failures::FailurePage;
use crate::report::summary::{RunFilter, RunSummary};
use std::collections::BTreeMap;
use std::fmt::Write as _;

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

fn timestamp(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

fn duration(run: &RunSummary) -> String {
    match run.finished_at_ms {
        Some(end) => {
            let s = (end - run.started_at_ms).max(0) / 1000;
            format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
        }
        None => "—".into(),
    }
}

/// A link to the list with `filter` (query parameters escaped).
fn list_link(filter: &RunFilter) -> String {
    let mut query = Vec::new();
    if let Some(n) = &filter.name {
        query.push(format!("name={}", percent(n)));
    }
    if let Some(v) = &filter.verdict {
        query.push(format!("verdict={}", percent(v)));
    }
    if query.is_empty() {
        "/".into()
    } else {
        format!("/?{}", query.join("&"))
    }
}

/// The start of a page: its head (styles inline, the CSP) and its title.
fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\
         <title>{} · triton-stress</title><style>{STYLE}{EXTRA_STYLE}</style></head><body>\n\
         <h1>{}</h1>\n",
        esc(title),
        esc(title),
        csp = csp()
    );
}

/// A matrix's history page.
fn matrix_link(name: &str) -> String {
    format!("/matrix/{}", percent(name))
}

/// The list of runs (already filtered, newest first) as a self-contained page.
pub fn run_list_page(runs: &[RunSummary], filter: &RunFilter) -> String {
    let mut out = String::new();
    let title = match &filter.name {
        Some(n) => format!("Runs of {n}"),
        None => "Runs".into(),
    };
    head(&mut out, &title);
    out.push_str("<nav>verdict: ");
    let all = RunFilter {
        verdict: None,
        ..filter.clone()
    };
    let _ = write!(out, "<a href=\"{}\">all</a>", esc(&list_link(&all)));
    for v in VERDICTS {
        let f = RunFilter {
            verdict: Some(v.into()),
            ..filter.clone()
        };
        let _ = write!(out, "<a href=\"{}\">{v}</a>", esc(&list_link(&f)));
    }
    if let Some(name) = &filter.name {
        let _ = write!(
            out,
            " · <a href=\"{}\">every matrix</a> · <a href=\"{}\">history of {}</a>",
            esc(&list_link(&RunFilter {
                name: None,
                ..filter.clone()
            })),
            esc(&matrix_link(name)),
            esc(name)
        );
    }
    out.push_str(" · <a href=\"/api/runs\">JSON</a></nav>\n");
    runs_table(&mut out, runs);
    out.push_str("</body></html>\n");
    out
}

fn runs_table(out: &mut String, runs: &[RunSummary]) {
    if runs.is_empty() {
        out.push_str("<p class=\"muted\" id=\"no-runs\">no finished run found</p>\n");
        return;
    }
    out.push_str(
        "<table id=\"runs\"><thead><tr><th>run</th><th>matrix</th><th>started</th><th>duration</th>\
         <th>launcher</th><th>verdict</th><th>QPS</th><th>p99 ms</th><th>failures</th>\
         <th>signatures new / recurring / known</th><th>regressions</th><th>root cause</th><th></th></tr></thead><tbody>\n",
    );
    for r in runs {
        if r.finished_at_ms.is_none() {
            unfinished_row(out, r);
            continue;
        }
        if r.verdict == crate::report::summary::UNREADABLE {
            let _ = writeln!(
                out,
                "<tr data-run=\"{id}\"><td>{id}</td><td></td><td>{at}</td><td>—</td><td></td>\
                 <td class=\"{verdict}\">{verdict}</td><td colspan=\"6\"></td><td>{why}</td>\
                 <td></td></tr>",
                id = esc(&r.run_id),
                at = timestamp(r.started_at_ms),
                verdict = esc(&r.verdict),
                why = esc(r.root_cause.as_deref().unwrap_or("")),
            );
            continue;
        }
        let fingerprint = r
            .fingerprint
            .as_deref()
            .map(|f| f.chars().take(12).collect::<String>())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "<tr data-run=\"{id}\"><td><a href=\"/runs/{link}\">{id}</a></td>\
             <td><a href=\"{matrix}\">{name}</a> <span class=\"muted\" title=\"matrix fingerprint\">{fingerprint}</span></td>\
             <td>{started}</td><td>{duration}</td><td>{launcher}</td>\
             <td class=\"{verdict}\">{verdict}</td><td class=\"num\">{qps:.1}</td>\
             <td class=\"num\">{p99:.2}</td><td class=\"num\">{failures}</td>\
             <td class=\"num\">{new} / {recurring} / {known}</td><td class=\"num\">{regressions}</td>\
             <td>{cause}</td><td><a href=\"/runs/{link}/diff\">changes</a></td></tr>",
            id = esc(&r.run_id),
            link = esc(&percent(&r.run_id)),
            matrix = esc(&matrix_link(&r.name)),
            name = esc(&r.name),
            fingerprint = esc(&fingerprint),
            started = timestamp(r.started_at_ms),
            duration = duration(r),
            launcher = esc(&r.launcher),
            verdict = esc(&r.verdict),
            qps = r.qps,
            p99 = r.p99_ms,
            failures = r.failures,
            new = r.signatures_new,
            recurring = r.signatures_recurring,
            known = r.signatures_known,
            regressions = r.regressions,
            cause = esc(r.root_cause.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>\n");
}

/// A run not finished: no figures yet (its report, rebuilt from the store, has what there is).
fn unfinished_row(out: &mut String, r: &RunSummary) {
    let _ = writeln!(
        out,
        "<tr data-run=\"{id}\"><td><a href=\"/runs/{link}\">{id}</a></td>\
         <td><a href=\"{matrix}\">{name}</a></td><td>{started}</td><td>—</td><td>{launcher}</td>\
         <td class=\"{verdict}\">{verdict}</td><td class=\"num\">—</td><td class=\"num\">—</td>\
         <td class=\"num\">—</td><td class=\"num\">—</td><td class=\"num\">—</td><td></td><td></td></tr>",
        id = esc(&r.run_id),
        link = esc(&percent(&r.run_id)),
        matrix = esc(&matrix_link(&r.name)),
        name = esc(&r.name),
        started = timestamp(r.started_at_ms),
        launcher = esc(&r.launcher),
        verdict = esc(&r.verdict),
    );
}

/// One matrix's history (its runs, newest first): a verdict strip (oldest to newest, each a
/// link to its run), QPS, p99 and failures per run as plots, and the runs' table.
pub fn matrix_page(name: &str, runs: &[RunSummary]) -> String {
    let mut out = String::new();
    head(&mut out, &format!("History of {name}"));
    let _ = writeln!(
        out,
        "<nav><a href=\"/\">every run</a> · <a href=\"{}\">failed runs of {}</a> · \
         <a href=\"/api/matrix/{}/history\">JSON</a></nav>",
        esc(&list_link(&RunFilter {
            name: Some(name.into()),
            verdict: Some("FAIL".into()),
        })),
        esc(name),
        esc(&percent(name))
    );
    let oldest_first: Vec<&RunSummary> = runs.iter().rev().collect();
    // The plots have figures of finished runs only (a run under way has none yet).
    let finished: Vec<&RunSummary> = oldest_first
        .iter()
        .copied()
        .filter(|r| r.finished_at_ms.is_some())
        .collect();
    let passed = runs.iter().filter(|r| r.verdict == "PASS").count();
    let _ = writeln!(
        out,
        "<h2>Verdicts</h2><p>{passed} of {} runs passed (oldest left).</p><div class=\"strip\" id=\"verdicts\">",
        runs.len()
    );
    for r in &oldest_first {
        let _ = write!(
            out,
            "<a class=\"{verdict}\" href=\"/runs/{link}\" title=\"{id}: {verdict}, {started}\"></a>",
            verdict = esc(&r.verdict),
            link = esc(&percent(&r.run_id)),
            id = esc(&r.run_id),
            started = timestamp(r.started_at_ms),
        );
    }
    out.push_str("</div>\n<h2>Over the runs</h2><div class=\"plots-row\">\n");
    let at = |i: usize| i as f64 + 1.0;
    let mut bands: Vec<Band> = baseline_band(&finished).into_iter().collect();
    bands.extend(fault_bands(&finished));
    let plot = |out: &mut String, id, title, y_label, series: Vec<Series>, no_data: &str| {
        let chart = Chart {
            id,
            title,
            x_label: "run (oldest first)",
            y_label,
            series,
            reference: None,
            bands: bands.clone(),
        };
        out.push_str(&line_chart(&chart, no_data));
    };
    type Measure = fn(&RunSummary) -> f64;
    let totals: [(&str, &str, &str, Measure); 4] = [
        ("history-qps", "QPS per run", "QPS", |r| r.qps),
        ("history-p99", "p99 latency per run", "p99 ms", |r| r.p99_ms),
        ("history-failures", "Failures per run", "failures", |r| {
            r.failures as f64
        }),
        (
            "history-error-rate",
            "Failed tests per run (% of tests)",
            "% failed",
            |r| {
                if r.tests == 0 {
                    f64::NAN
                } else {
                    r.failures as f64 * 100.0 / r.tests as f64
                }
            },
        ),
    ];
    for (id, title, y_label, value) in totals {
        let series = vec![Series {
            name: y_label.into(),
            points: finished
                .iter()
                .enumerate()
                .map(|(i, r)| (at(i), value(r)))
                .collect(),
        }];
        plot(
            &mut out,
            id,
            title,
            y_label,
            series,
            "no finished run of this matrix",
        );
    }
    // Per name (scenario, server, capacity group): a series over the runs that have it.
    let named = |points: &dyn Fn(&RunSummary) -> Vec<(String, f64)>| -> Vec<Series> {
        let mut by_name: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for (i, r) in finished.iter().enumerate() {
            for (name, y) in points(r) {
                by_name.entry(name).or_default().push((at(i), y));
            }
        }
        by_name
            .into_iter()
            .map(|(name, points)| Series { name, points })
            .collect()
    };
    plot(
        &mut out,
        "history-p99-scenarios",
        "p99 latency per scenario",
        "p99 ms",
        named(&|r| {
            r.scenarios
                .iter()
                .map(|s| (s.scenario.clone(), s.p99_ms))
                .collect()
        }),
        "no run recorded per-scenario figures",
    );
    plot(
        &mut out,
        "history-memory-slope",
        "Server memory slope after warm-up per run",
        "MiB/min",
        named(&|r| {
            r.server_memory
                .iter()
                .map(|m| (m.server.clone(), m.slope_mib_per_min))
                .collect()
        }),
        "no run judged its servers' memory (too short, or no memory readings)",
    );
    if finished.iter().any(|r| !r.capacity.is_empty()) {
        plot(
            &mut out,
            "history-capacity",
            "Capacity at the p99 target per run",
            "max QPS",
            named(&|r| {
                r.capacity
                    .iter()
                    .map(|c| (format!("{} ({})", c.group, c.phase), c.max_qps))
                    .collect()
            }),
            "no capacity answer",
        );
    }
    if finished.iter().any(|r| r.sweep.is_some()) {
        plot(
            &mut out,
            "history-sweep",
            "Sweep: the best variant's capacity per run",
            "max QPS",
            named(&|r| {
                r.sweep
                    .iter()
                    .filter_map(|s| Some((s.server_group.clone(), s.best_qps?)))
                    .collect()
            }),
            "no sweep found a variant that met its target",
        );
    }
    out.push_str("</div>\n");
    if let Some(band) = bands.iter().find(|b| b.baseline) {
        let _ = writeln!(
            out,
            "<p class=\"muted\">Shaded blue: {}.</p>",
            esc(&band.label)
        );
    }
    if bands.iter().any(|b| !b.baseline) {
        out.push_str(
            "<p class=\"muted\">Shaded red: runs that injected faults on purpose (hover for \
             each fault and its verdict); their failures inside a fault's window did not \
             count against them.</p>\n",
        );
    }
    sweep_table(&mut out, &finished);
    out.push_str("<h2>Failure signatures</h2>\n");
    signature_table(&mut out, &oldest_first);
    out.push_str("<h2>Runs</h2>\n");
    runs_table(&mut out, runs);
    out.push_str("</body></html>\n");
    out
}

/// The newest finished run's baseline window (the runs it was compared with) over the x axis
/// of a history plot (run i at x = i + 1, oldest first); None when it was compared with none
/// of the runs shown.
fn baseline_band(finished: &[&RunSummary]) -> Option<Band> {
    let newest = finished.last()?;
    let xs: Vec<f64> = finished
        .iter()
        .enumerate()
        .filter(|(_, r)| newest.baseline_window.contains(&r.run_id))
        .map(|(i, _)| i as f64 + 1.0)
        .collect();
    let from = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let to = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (!xs.is_empty()).then(|| Band {
        label: format!(
            "the baseline window of the newest run {}: {} of its {} baseline run(s)",
            newest.run_id,
            xs.len(),
            newest.baseline_window.len()
        ),
        from: from - 0.5,
        to: to + 0.5,
        baseline: true,
    })
}

/// Each finished run that injected faults, shaded over its x (run i at x = i + 1, oldest
/// first), its faults and their verdicts in the band's title.
fn fault_bands(finished: &[&RunSummary]) -> Vec<Band> {
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
            let x = i as f64 + 1.0;
            Band {
                label: format!("{}: {}", r.run_id, faults.join("; ")),
                from: x - 0.4,
                to: x + 0.4,
                baseline: false,
            }
        })
        .collect()
}

/// The runs that swept configurations: each one's best variant, newest first.
fn sweep_table(out: &mut String, finished: &[&RunSummary]) {
    let swept: Vec<&&RunSummary> = finished
        .iter()
        .rev()
        .filter(|r| r.sweep.is_some())
        .collect();
    if swept.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Sweep answers</h2>\n<table id=\"sweeps\"><tr><th>run</th><th>server group</th>\
         <th>best variant</th><th>max QPS</th><th>variants measured</th></tr>\n",
    );
    for r in swept {
        let Some(s) = &r.sweep else { continue };
        let _ = writeln!(
            out,
            "<tr><td><a href=\"/runs/{}\">{}</a></td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{} of {}</td></tr>",
            esc(&percent(&r.run_id)),
            esc(&r.run_id),
            esc(&s.server_group),
            esc(s.best.as_deref().unwrap_or("none met the target")),
            s.best_qps
                .map_or_else(|| "—".to_string(), |q| format!("{q:.1}")),
            s.measured,
            s.grid_size
        );
    }
    out.push_str("</table>\n");
}

/// Every signature the runs judged: first and last seen, in how many runs, and its status in
/// the last run it was seen in. `runs` oldest first.
fn signature_table(out: &mut String, runs: &[&RunSummary]) {
    struct Seen<'a> {
        first: &'a RunSummary,
        last: &'a RunSummary,
        runs: usize,
        failures: u64,
        sig: &'a crate::report::summary::SignatureSeen,
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
        out.push_str("<p class=\"muted\">No failure signature in these runs.</p>\n");
        return;
    }
    let mut rows: Vec<&Seen> = seen.values().collect();
    // What the last runs saw leads.
    rows.sort_by_key(|s| std::cmp::Reverse((s.last.started_at_ms, s.runs)));
    out.push_str(
        "<table id=\"signatures\"><tr><th>signature</th><th>scenario / model</th><th>failure</th>\
         <th>status (last seen)</th><th>first seen</th><th>last seen</th><th>runs</th>\
         <th>failures</th></tr>\n",
    );
    for s in rows {
        let run_link = |r: &RunSummary| {
            format!(
                "<a href=\"/runs/{}\">{}</a> <span class=\"muted\">{}</span>",
                esc(&percent(&r.run_id)),
                esc(&r.run_id),
                timestamp(r.started_at_ms)
            )
        };
        let _ = writeln!(
            out,
            "<tr><td><code>{}</code></td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td class=\"num\">{} of {}</td><td class=\"num\">{}</td></tr>",
            esc(&s.sig.signature),
            esc(&s.sig.scenario),
            esc(&s.sig.model),
            esc(&s.sig.message),
            s.sig.status.as_str(),
            run_link(s.first),
            run_link(s.last),
            s.runs,
            runs.len(),
            s.failures
        );
    }
    out.push_str("</table>\n");
}

/// A run against the previous run of its matrix.
pub fn diff_page(d: &RunDiff) -> String {
    let mut out = String::new();
    head(
        &mut out,
        &format!("{} against {}", d.run.run_id, d.previous.run_id),
    );
    let _ = writeln!(
        out,
        "<nav><a href=\"/runs/{}\">this run</a> · <a href=\"/runs/{}\">the previous run</a> · \
         <a href=\"/api/runs/{}/diff\">JSON</a></nav>",
        esc(&percent(&d.run.run_id)),
        esc(&percent(&d.previous.run_id)),
        esc(&percent(&d.run.run_id))
    );
    let _ = writeln!(
        out,
        "<h2>Verdict</h2><p id=\"verdict-change\"><span class=\"{b}\">{b}</span> ({before}) → \
         <span class=\"{a}\">{a}</span> ({after})</p>",
        b = esc(&d.previous.verdict),
        a = esc(&d.run.verdict),
        before = timestamp(d.previous.started_at_ms),
        after = timestamp(d.run.started_at_ms),
    );
    for (id, title, list) in [
        (
            "signatures-new",
            "Signatures new since the previous run",
            &d.signatures_new,
        ),
        (
            "signatures-gone",
            "Signatures gone since the previous run",
            &d.signatures_gone,
        ),
    ] {
        let _ = writeln!(out, "<h2>{title}</h2>");
        if list.is_empty() {
            let _ = writeln!(out, "<p class=\"muted\" id=\"{id}\">none</p>");
            continue;
        }
        let _ = writeln!(
            out,
            "<table id=\"{id}\"><thead><tr><th>signature</th><th>scenario</th><th>model</th>\
             <th>failures</th><th>message</th></tr></thead><tbody>"
        );
        for s in list {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&s.signature),
                esc(&s.scenario),
                esc(&s.model),
                s.count,
                esc(&s.message)
            );
        }
        out.push_str("</tbody></table>\n");
    }
    out.push_str(
        "<h2>Per scenario</h2><table id=\"scenarios\"><thead><tr><th>scenario</th>\
         <th>QPS before</th><th>QPS now</th><th>p99 ms before</th><th>p99 ms now</th>\
         <th>failures before</th><th>failures now</th></tr></thead><tbody>\n",
    );
    let f =
        |v: Option<f64>, digits: usize| v.map_or("—".to_string(), |v| format!("{v:.digits$}"));
    let n = |v: Option<u64>| v.map_or("—".to_string(), |v| v.to_string());
    for s in &d.scenarios {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            esc(&s.scenario),
            f(s.qps.0, 1),
            f(s.qps.1, 1),
            f(s.p99_ms.0, 2),
            f(s.p99_ms.1, 2),
            n(s.failures.0),
            n(s.failures.1)
        );
    }
    out.push_str("</tbody></table>\n<h2>Servers</h2>\n");
    if d.servers.is_empty() {
        out.push_str("<p class=\"muted\" id=\"servers\">no server in either run</p>\n");
    } else {
        out.push_str(
            "<table id=\"servers\"><thead><tr><th>server</th><th>version before</th>\
             <th>version now</th></tr></thead><tbody>\n",
        );
        for s in &d.servers {
            let v = |v: &Option<String>| v.as_deref().map_or("—".to_string(), esc);
            let _ = writeln!(
                out,
                "<tr{}><td>{}</td><td>{}</td><td>{}</td></tr>",
                if s.changed() { " class=\"bad\"" } else { "" },
                esc(&s.server),
                v(&s.version.0),
                v(&s.version.1)
            );
        }
        out.push_str("</tbody></table>\n");
    }
    out.push_str("<h2>Matrix</h2>\n");
    if d.matrix.is_empty() {
        out.push_str("<p class=\"muted\" id=\"matrix-same\">the same text</p>\n");
    } else {
        out.push_str("<pre id=\"matrix-diff\">");
        for line in &d.matrix {
            let (mark, text, style) = match line {
                Line::Same(t) => (' ', t, ""),
                Line::Removed(t) => ('-', t, " class=\"removed\""),
                Line::Added(t) => ('+', t, " class=\"added\""),
            };
            let _ = writeln!(out, "<span{style}>{mark} {}</span>", esc(text));
        }
        out.push_str("</pre>\n");
    }
    out.push_str("</body></html>\n");
    out
}

/// A run without an earlier run of its matrix name.
/// A run's failure records, one page.
pub fn failures_page(page: &FailurePage) -> String {
    let mut out = String::new();
    head(&mut out, &format!("{}: failures", page.run_id));
    let run = esc(&percent(&page.run_id));
    let _ = writeln!(
        out,
        "<nav><a href=\"/runs/{run}\">the run</a> · <a href=\"/runs/{run}/failures\">first \
         page</a> · <a href=\"/api/runs/{run}/failures?after={}\">JSON</a></nav>",
        page.after
    );
    let _ = writeln!(
        out,
        "<p id=\"failure-count\">{} failures counted; the workers keep the records of their \
         first ones. This page: {} records after id {}.</p>",
        page.counted,
        page.failures.len(),
        page.after
    );
    if !page.failures.is_empty() {
        out.push_str(
            "<table id=\"failures\"><thead><tr><th>id</th><th>time</th><th>member</th>\
             <th>scenario</th><th>server</th><th>model</th><th>kind</th><th>expected</th>\
             <th>actual</th></tr></thead><tbody>\n",
        );
        for f in &page.failures {
            let r = &f.record;
            let kind = r.error_kind.map(|k| format!("{k:?}")).unwrap_or_default();
            let _ = writeln!(
                out,
                "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f.id,
                timestamp(r.at_ms),
                esc(&f.member_id),
                esc(&r.scenario),
                esc(&r.server),
                esc(&r.model),
                esc(&kind),
                esc(&r.expected),
                esc(&r.actual)
            );
        }
        out.push_str("</tbody></table>\n");
    }
    match page.next_after {
        Some(next) => {
            let _ = writeln!(
                out,
                "<p><a id=\"next-page\" href=\"/runs/{run}/failures?after={next}&amp;limit={}\">next \
                 page</a></p>",
                page.limit
            );
        }
        None => out.push_str("<p class=\"muted\" id=\"last-page\">the last page</p>\n"),
    }
    out.push_str("</body></html>\n");
    out
}

pub fn no_previous_page(run_id: &str, name: &str) -> String {
    let mut out = String::new();
    head(&mut out, &format!("{run_id}: nothing to compare with"));
    let _ = writeln!(
        out,
        "<p id=\"no-previous\">No earlier run of {} is in this store. <a href=\"/runs/{}\">The run</a> · \
         <a href=\"{}\">its matrix's history</a></p></body></html>",
        esc(name),
        esc(&percent(run_id)),
        esc(&matrix_link(name))
    );
    out
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
        let mut running = run("nightly-2", "nightly", "RUNNING");
        running.finished_at_ms = None;
        let page = run_list_page(&[running], &RunFilter::default());
        assert!(
            page.contains("<td class=\"RUNNING\">RUNNING</td><td class=\"num\">—</td>"),
            "no figures for a run under way: {page}"
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
