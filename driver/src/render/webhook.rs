//! Results export: the run's summary POSTed as JSON to the matrix's `report.webhook` at the
//! end, so results reach a tracking page or a chat without a plugin per product. [`summary`]
//! is pure; [`deliver`] retries within the time limit and never changes the run's verdict.

use crate::judge::verdicts::Status;
use crate::report::Report;
use serde_json::{Value, json};
use std::time::Duration;
use stress_common::retry::{RetryPolicy, retry};

/// The summary a webhook receives: what a person wants in a notification, and where the rest
/// is.
pub fn summary(report: &Report, run_dir: &std::path::Path) -> Value {
    let total = report.scenarios.iter().find(|r| r.scenario == "TOTAL");
    json!({
        "run_id": report.run_id,
        "name": report.name,
        "verdict": report.verdict,
        "launcher": report.launcher,
        "started_at_ms": report.started_at_ms,
        "finished_at_ms": report.finished_at_ms,
        "load_seconds": report.load_seconds,
        "requests": total.map(|t| t.requests),
        "tests": total.map(|t| t.tests),
        "failures": total.map(|t| t.failures),
        "qps": total.map(|t| t.qps),
        "p99_ms": total.map(|t| t.p99_us as f64 / 1000.0),
        "failure_records": report.failure_count,
        "root_cause": report.analysis.root_cause.as_ref().map(|r| json!({
            "member": r.member_id,
            "role": r.role,
            "reason": r.reason,
            "caused": r.caused_members,
            "signature": r.signature.as_ref().map(|s| &s.signature),
            "class": r.class,
        })),
        // New signatures are what a morning reader acts on; the rest is counted.
        "signatures": {
            "new": report.signatures.iter()
                .filter(|s| s.status == Status::New)
                .map(|s| json!({
                    "signature": s.signature,
                    "class": s.class,
                    "count": s.count,
                    "fails": s.fails.is_some(),
                    "text": format!("{} {} [{}]: {}", s.scenario, s.model, s.error_kind, s.message),
                }))
                .collect::<Vec<_>>(),
            "recurring": report.signatures.iter().filter(|s| s.status == Status::Recurring).count(),
            "known": report.signatures.iter().filter(|s| s.status == Status::Known).count(),
        },
        "slo": report.slo.iter().map(|o| json!({
            "rule": o.rule,
            "observed": o.observed,
            "ok": o.ok,
        })).collect::<Vec<_>>(),
        "regressions": report.regressions.len(),
        "baseline": report.baseline.as_ref().map(|b| &b.baseline_run).filter(|r| !r.is_empty()),
        "reports": {
            "text": run_dir.join("report.txt"),
            "json": run_dir.join("report.json"),
            "html": run_dir.join("report.html"),
            "junit": run_dir.join("junit.xml"),
        },
    })
}

/// The URL without its path and query, for logs: a chat webhook's path is its secret.
pub fn shown(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or(rest);
    let scheme = url.split_once("://").map_or("http", |(s, _)| s);
    format!("{scheme}://{host}/…")
}

/// POSTs `body` to `url`: 3 attempts, 1 s then 2 s apart, all within `limit`; an answer
/// other than 2xx is a failed attempt. Returns the HTTP status of the delivery; the error
/// says how many attempts were made and why the last failed (the URL's path, its secret,
/// left out).
pub async fn deliver(
    url: &str,
    body: &Value,
    limit: Duration,
) -> Result<u16, stress_common::retry::RetryError> {
    let policy = RetryPolicy {
        attempts: 3,
        first_pause: Duration::from_secs(1),
        budget: limit,
    };
    let what = format!("the webhook at {}", shown(url));
    retry(&what, policy, || async {
        let r = stress_common::http::post_json(url, body, limit)
            .await
            .map_err(|e| e.to_string().replace(url, &shown(url)))?;
        if r.is_ok() {
            Ok(r.status)
        } else {
            Err(format!("answered HTTP {}", r.status))
        }
    })
    .await
}

#[cfg(test)]
// Tests build a report field by field, the way each case reads best.
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    /// A local receiver: answers each POST with the next status of `statuses` (then 200) and
    /// keeps the bodies.
    async fn receiver(
        statuses: Vec<u16>,
    ) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
        use axum::http::StatusCode;
        use std::sync::{Arc, Mutex};
        let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
        let statuses = Arc::new(Mutex::new(statuses.into_iter()));
        let kept = bodies.clone();
        let app = axum::Router::new().route(
            "/hook/SECRET",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let kept = kept.clone();
                let statuses = statuses.clone();
                async move {
                    kept.lock().unwrap().push(body);
                    let status = statuses.lock().unwrap().next().unwrap_or(200);
                    StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{address}/hook/SECRET"), bodies)
    }

    #[tokio::test]
    async fn a_failed_attempt_is_retried_and_the_summary_arrives() {
        let (url, bodies) = receiver(vec![503]).await;
        let body = json!({"verdict": "PASS"});
        let status = deliver(&url, &body, Duration::from_secs(10)).await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(
            *bodies.lock().unwrap(),
            [body.clone(), body],
            "503, then delivered"
        );
    }

    #[tokio::test]
    async fn a_receiver_that_is_down_fails_within_the_limit_without_its_secret() {
        // A port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/hook/SECRET");
        let started = std::time::Instant::now();
        let e = deliver(&url, &json!({}), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(6), "{e}");
        assert_eq!(e.attempts, 3, "{e}");
        let e = e.to_string();
        assert!(e.contains("3 attempt(s)"), "{e}");
        assert!(!e.contains("SECRET"), "the URL's path stays out: {e}");
        // One that always refuses: every attempt made, then the last status.
        let (url, bodies) = receiver(vec![500, 500, 500]).await;
        let e = deliver(&url, &json!({}), Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(e.last, "answered HTTP 500", "{e}");
        assert_eq!(bodies.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_webhook_secret_stays_out_of_the_logs() {
        assert_eq!(
            shown("https://hooks.example.com/services/T000/B000/SECRET?x=1"),
            "https://hooks.example.com/…"
        );
        assert_eq!(shown("http://127.0.0.1:9000"), "http://127.0.0.1:9000/…");
    }

    #[test]
    fn the_summary_names_the_verdict_the_root_cause_and_the_reports() {
        let mut r = Report::default();
        r.run_id = "r1".into();
        r.verdict = "FAIL".into();
        r.analysis.root_cause = Some(crate::judge::rootcause::RootCause {
            member_id: "triton-0".into(),
            role: "SERVER".into(),
            at_ms: 1,
            reason: "killed by signal 9".into(),
            caused_members: vec!["clients-0".into()],
            signature: None,
            class: Some(stress_common::signature::FailureClass::Server),
            evidence: Some("the server ended".into()),
        });
        let s = summary(&r, std::path::Path::new("runs/r1"));
        assert_eq!(s["verdict"], "FAIL");
        assert_eq!(s["root_cause"]["member"], "triton-0");
        assert_eq!(s["root_cause"]["caused"][0], "clients-0");
        assert_eq!(s["root_cause"]["class"], "server");
        assert_eq!(s["reports"]["html"], "runs/r1/report.html");
        assert!(s["requests"].is_null(), "no TOTAL row: no counts");
    }
}
