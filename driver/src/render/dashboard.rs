//! The pages of `driver serve` that are not a run's report: the list of runs, newest first,
//! with links to each run's report and filters by matrix name and verdict. Pure: the server
//! reads the summaries and serves what this returns.

use super::html::esc;
use crate::report::summary::{RunFilter, RunSummary};
use std::fmt::Write as _;

/// The dashboard's pages fetch nothing and run no script: styles inline, nothing else.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";

/// The verdicts a run can have, in the order the filter links show them.
const VERDICTS: [&str; 5] = ["PASS", "FAIL", "ABANDONED", "INCOMPLETE", "RUNNING"];

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;font-size:14px}th,td{padding:4px 8px;border-bottom:1px solid #ddd;\
text-align:left;white-space:nowrap}td.num{text-align:right}.PASS{color:#1a7f37;font-weight:600}\
.FAIL{color:#c62828;font-weight:600}.ABANDONED,.INCOMPLETE{color:#b26a00;font-weight:600}\
nav a{margin-right:.8em}.muted{color:#777}";

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

/// The list of runs (already filtered, newest first) as a self-contained page.
pub fn run_list_page(runs: &[RunSummary], filter: &RunFilter) -> String {
    let mut out = String::new();
    let title = match &filter.name {
        Some(n) => format!("Runs of {n}"),
        None => "Runs".into(),
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
         <title>{} · triton-stress</title><style>{STYLE}</style></head><body>\n\
         <h1>{}</h1>\n<nav>verdict: ",
        esc(&title),
        esc(&title)
    );
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
    if filter.name.is_some() {
        let _ = write!(
            out,
            " · <a href=\"{}\">every matrix</a>",
            esc(&list_link(&RunFilter {
                name: None,
                ..filter.clone()
            }))
        );
    }
    out.push_str(" · <a href=\"/api/runs\">JSON</a></nav>\n");
    if runs.is_empty() {
        out.push_str(
            "<p class=\"muted\" id=\"no-runs\">no finished run found</p>\n</body></html>\n",
        );
        return out;
    }
    out.push_str(
        "<table id=\"runs\"><thead><tr><th>run</th><th>matrix</th><th>started</th><th>duration</th>\
         <th>launcher</th><th>verdict</th><th>QPS</th><th>p99 ms</th><th>failures</th>\
         <th>signatures new / recurring / known</th><th>regressions</th><th>root cause</th></tr></thead><tbody>\n",
    );
    for r in runs {
        let matrix = RunFilter {
            name: Some(r.name.clone()),
            verdict: None,
        };
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
             <td>{cause}</td></tr>",
            id = esc(&r.run_id),
            link = esc(&percent(&r.run_id)),
            matrix = esc(&list_link(&matrix)),
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
    out.push_str("</tbody></table>\n</body></html>\n");
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
            page.contains("href=\"/?name=nightly%20%3Csoak%3E\""),
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
        let empty = run_list_page(&[], &RunFilter::default());
        assert!(empty.contains("no finished run found"));
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
    }
}
