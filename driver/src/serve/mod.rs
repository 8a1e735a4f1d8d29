//! `driver serve`: the runs of a store, or of the run directories under a runs directory, in a
//! browser and as JSON, read-only (every store is opened with `Store::open_read_only`: no
//! migration, no write). Pages:
//! - `/`: the runs, newest first, filtered by `?name=` (matrix) and `?verdict=`: finished ones
//!   from their summaries, unfinished ones as RUNNING (lease held) or ABANDONED (lease expired,
//!   said without recording it);
//! - `/matrix/NAME`: that matrix's history (verdict strip, QPS, p99 and failures per run, its
//!   runs), `/api/matrix/NAME/history` as JSON (`history.csv`: its series for Apache Otava);
//! - `/runs/ID`: the run's report.html, rebuilt from its store by the same renderer as
//!   `driver report` (not a copy on disk); `/runs/ID/report.json`, `/runs/ID/junit.xml`;
//! - `/runs/ID/diff` (and `/api/runs/ID/diff`): what changed since the previous run of the same
//!   matrix name (verdict, signatures new and gone, QPS and p99 per scenario, the matrix text);
//! - `/api/runs` (the list as JSON, same filters), `/api/runs/ID/report.json`;
//! - `/metrics`: OpenMetrics for alerting (runs by verdict, the age of each matrix's last run,
//!   its signatures by status);
//! - `/healthz`.
//!
//! With a token, every page but `/healthz` wants `Authorization: Bearer TOKEN`.

use crate::render;
use crate::report::Report;
use crate::report::diff::RunDiff;
use crate::report::failures::{FailurePage, ListedFailure};
use crate::report::summary::{self, RunFilter, RunSource, RunSummary};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use stress_common::contract::RunId;
use stress_common::store::Store;

/// How many runs a list reads at most (the newest).
pub const LIST_LIMIT: u32 = 200;

/// Where the runs are.
#[derive(Debug, Clone)]
pub enum Source {
    /// One store (a cluster's Postgres holds every night).
    Store(String),
    /// The run directories under this directory, each with its SQLite store.
    RunsDir(PathBuf),
}

#[derive(Debug)]
struct Served {
    source: Source,
    token: Option<String>,
    /// With a runs directory: its stores' runs, each store read again only when it changed.
    index: summary::SummaryIndex,
}

/// The dashboard's routes over `source`.
pub fn router(source: Source, token: Option<String>) -> Router {
    let served = Arc::new(Served {
        source,
        token,
        index: Default::default(),
    });
    Router::new()
        .route("/", get(index))
        .route("/api/runs", get(api_runs))
        .route("/matrix/{name}", get(matrix_page))
        .route("/api/matrix/{name}/history", get(api_matrix_history))
        .route(
            "/api/matrix/{name}/history.csv",
            get(api_matrix_history_csv),
        )
        .route("/runs/{id}", get(run_page))
        .route("/runs/{id}/report.json", get(run_json))
        .route("/api/runs/{id}/report.json", get(run_json))
        .route("/runs/{id}/junit.xml", get(run_junit))
        .route("/runs/{id}/diff", get(diff_page))
        .route("/runs/{id}/failures", get(failures_html))
        .route("/api/runs/{id}/failures", get(failures_json))
        .route("/api/runs/{id}/diff", get(api_diff))
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn_with_state(
            served.clone(),
            authorize,
        ))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(served)
}

/// Serves until `cancel`; `on_listening` hears the bound address first (a port of 0 is
/// chosen by the system).
pub async fn serve(
    source: Source,
    token: Option<String>,
    listen: std::net::SocketAddr,
    cancel: tokio_util::sync::CancellationToken,
    on_listening: impl FnOnce(std::net::SocketAddr),
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    on_listening(listener.local_addr()?);
    axum::serve(listener, router(source, token))
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await
}

async fn authorize(State(served): State<Arc<Served>>, request: Request, next: Next) -> Response {
    if let Some(token) = &served.token {
        let expected = format!("Bearer {token}");
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        if given != Some(expected.as_bytes()) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token is needed\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Seconds after which a page the store could not answer is tried again.
const STORE_RETRY_S: u32 = 10;

/// What a page could not do: not found (a run that is not there) or the store failing (said
/// in the log in full; the page says only that, since a store's URL may hold a password).
enum PageError {
    NotFound(String),
    Store(String),
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            PageError::NotFound(what) => {
                (StatusCode::NOT_FOUND, format!("{what}\n")).into_response()
            }
            PageError::Store(detail) => {
                tracing::warn!("serve: {detail}");
                // Unavailable, not broken: a store restarting or unreachable comes back, and
                // the page (and a client honouring Retry-After) tries again.
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [
                        (header::RETRY_AFTER, HeaderValue::from(STORE_RETRY_S)),
                        (
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("text/html; charset=utf-8"),
                        ),
                        (
                            header::CONTENT_SECURITY_POLICY,
                            HeaderValue::from_static(render::dashboard::csp()),
                        ),
                    ],
                    render::dashboard::store_unavailable_page(STORE_RETRY_S),
                )
                    .into_response()
            }
        }
    }
}

impl Source {
    fn runs(&self) -> RunSource<'_> {
        match self {
            Source::Store(url) => RunSource::Store(url),
            Source::RunsDir(dir) => RunSource::RunsDir(dir),
        }
    }
}

async fn runs(served: &Served, filter: &RunFilter) -> Result<Vec<RunSummary>, PageError> {
    let all = summary::list_all(
        served.source.runs(),
        LIST_LIMIT,
        stress_common::now_ms(),
        Some(&served.index),
    )
    .await
    .map_err(|e| PageError::Store(e.to_string()))?;
    Ok(all.into_iter().filter(|r| filter.matches(r)).collect())
}

fn html(body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, render::dashboard::csp()),
        ],
        body,
    )
        .into_response()
}

async fn index(
    State(served): State<Arc<Served>>,
    Query(filter): Query<RunFilter>,
) -> Result<Response, PageError> {
    let runs = runs(&served, &filter).await?;
    Ok(html(render::dashboard::run_list_page(&runs, &filter)))
}

async fn api_runs(
    State(served): State<Arc<Served>>,
    Query(filter): Query<RunFilter>,
) -> Result<Json<Vec<RunSummary>>, PageError> {
    Ok(Json(runs(&served, &filter).await?))
}

/// Every run of the matrix named `name`, newest first.
async fn matrix_runs(served: &Served, name: &str) -> Result<Vec<RunSummary>, PageError> {
    let filter = RunFilter {
        name: Some(name.to_string()),
        verdict: None,
    };
    runs(served, &filter).await
}

async fn matrix_page(
    State(served): State<Arc<Served>>,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    let runs = matrix_runs(&served, &name).await?;
    Ok(html(render::dashboard::matrix_page(&name, &runs)))
}

async fn api_matrix_history(
    State(served): State<Arc<Served>>,
    Path(name): Path<String>,
) -> Result<Json<Vec<RunSummary>>, PageError> {
    Ok(Json(matrix_runs(&served, &name).await?))
}

/// The matrix's history as CSV for Apache Otava (`driver history --format csv`).
async fn api_matrix_history_csv(
    State(served): State<Arc<Served>>,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    let runs = matrix_runs(&served, &name).await?;
    let window = crate::matrix::RegressionSettings::default().change_point_window;
    let of =
        crate::report::history::of_matrix(&runs, &name, window).map_err(PageError::NotFound)?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "text/csv; charset=utf-8")],
        crate::report::history::otava_csv(&of),
    )
        .into_response())
}

/// A run's id as a path may carry it: a run directory's name, nothing that walks elsewhere.
fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

async fn report_of(served: &Served, id: &str) -> Result<Report, PageError> {
    Ok(load(served, id).await?.0)
}

/// The store that holds run `id`, opened read-only.
async fn store_of(served: &Served, id: &str) -> Result<Store, PageError> {
    let not_found = || PageError::NotFound(format!("no run {id}"));
    if !valid_run_id(id) {
        return Err(not_found());
    }
    let url = match &served.source {
        Source::Store(url) => url.clone(),
        Source::RunsDir(dir) => {
            let file = dir.join(id).join("store.sqlite");
            if !file.is_file() {
                return Err(not_found());
            }
            Store::sqlite_url(&file)
        }
    };
    Store::open_read_only(&url, &stress_common::store::StoreOptions::reading())
        .await
        .map_err(|e| PageError::Store(e.to_string()))
}

/// A run's report and the matrix text it recorded.
async fn load(served: &Served, id: &str) -> Result<(Report, String), PageError> {
    let not_found = || PageError::NotFound(format!("no run {id}"));
    let store = store_of(served, id).await?;
    let run_id = RunId::new(id);
    let report = Report::from_store(&store, &run_id).await;
    let run = store.run(&run_id).await;
    store.close().await;
    let report = report.map_err(|e| match e {
        crate::report::ReportError::NoRun(_) => not_found(),
        e => PageError::Store(format!("run {id}: {e}")),
    })?;
    let matrix = run
        .map_err(|e| PageError::Store(format!("run {id}: {e}")))?
        // Env values may hold credentials; the pages show others the matrix.
        .map(|r| crate::matrix::redact_env(&r.matrix_yaml))
        .unwrap_or_default();
    Ok((report, matrix))
}

/// The diff of run `id` with the previous run of its matrix name (None: it has none).
async fn diff_of(served: &Served, id: &str) -> Result<(Report, Option<RunDiff>), PageError> {
    let (report, matrix) = load(served, id).await?;
    let filter = RunFilter {
        name: Some(report.name.clone()),
        verdict: None,
    };
    // Newest first: the first finished run started before this one.
    let previous = runs(served, &filter).await?.into_iter().find(|r| {
        r.run_id != report.run_id
            && r.started_at_ms < report.started_at_ms
            && r.finished_at_ms.is_some()
    });
    let Some(previous) = previous else {
        return Ok((report, None));
    };
    let (before, before_matrix) = load(served, &previous.run_id).await?;
    let diff = crate::report::diff::diff(&report, &matrix, &before, &before_matrix);
    Ok((report, Some(diff)))
}

async fn diff_page(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let (report, diff) = diff_of(&served, &id).await?;
    Ok(html(match diff {
        Some(d) => render::dashboard::diff_page(&d),
        None => render::dashboard::no_previous_page(&report.run_id, &report.name),
    }))
}

async fn api_diff(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
) -> Result<Json<RunDiff>, PageError> {
    match diff_of(&served, &id).await? {
        (_, Some(d)) => Ok(Json(d)),
        (r, None) => Err(PageError::NotFound(format!(
            "run {id} has no earlier run of {}",
            r.name
        ))),
    }
}

/// Failure records on one page, and the most a script may ask for at once.
const FAILURES_PER_PAGE: i64 = 200;
const MAX_FAILURES_PER_PAGE: i64 = 5000;

#[derive(Debug, serde::Deserialize)]
struct FailureQuery {
    after: Option<i64>,
    limit: Option<i64>,
}

/// One page of run `id`'s failure records: those after `query.after`, at most its limit.
async fn failure_page(
    served: &Served,
    id: &str,
    query: &FailureQuery,
) -> Result<FailurePage, PageError> {
    let store = store_of(served, id).await?;
    let run_id = RunId::new(id);
    let after = query.after.unwrap_or(0).max(0);
    let limit = query
        .limit
        .unwrap_or(FAILURES_PER_PAGE)
        .clamp(1, MAX_FAILURES_PER_PAGE);
    let page = async {
        if store.run(&run_id).await?.is_none() {
            return Ok(None);
        }
        // One more than the page: whether there is a next one.
        let mut rows = store.failures_page(&run_id, after, limit + 1).await?;
        let more = rows.len() as i64 > limit;
        rows.truncate(limit as usize);
        let counted = store
            .failure_totals(&run_id)
            .await?
            .iter()
            .map(|(_, n)| n)
            .sum();
        Ok::<_, stress_common::store::StoreError>(Some((rows, more, counted)))
    }
    .await;
    store.close().await;
    let Some((rows, more, counted)) =
        page.map_err(|e| PageError::Store(format!("run {id}: {e}")))?
    else {
        return Err(PageError::NotFound(format!("no run {id}")));
    };
    Ok(FailurePage {
        run_id: id.to_string(),
        after,
        limit,
        next_after: more.then(|| rows.last().map(|(id, _, _)| *id)).flatten(),
        failures: rows
            .into_iter()
            .map(|(id, member_id, record)| ListedFailure {
                id,
                member_id,
                record,
            })
            .collect(),
        counted,
    })
}

async fn failures_html(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
    Query(query): Query<FailureQuery>,
) -> Result<Response, PageError> {
    let page = failure_page(&served, &id, &query).await?;
    Ok(html(render::dashboard::failures_page(&page)))
}

async fn failures_json(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
    Query(query): Query<FailureQuery>,
) -> Result<Json<FailurePage>, PageError> {
    Ok(Json(failure_page(&served, &id, &query).await?))
}

/// How often the page of a run under way reloads itself.
const LIVE_RELOAD_S: u32 = 5;

async fn run_page(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let report = report_of(&served, &id).await?;
    // A run under way: its report so far, which the browser reloads.
    let running = report.verdict == stress_common::store::RUNNING;
    let page = render::html::render_served(&report, running.then_some(LIVE_RELOAD_S));
    // The report's own Content-Security-Policy is in the page (it runs its inline script).
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response())
}

async fn run_json(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
) -> Result<Json<Report>, PageError> {
    Ok(Json(report_of(&served, &id).await?))
}

async fn run_junit(
    State(served): State<Arc<Served>>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let report = report_of(&served, &id).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/xml; charset=utf-8")],
        render::junit::render(&report),
    )
        .into_response())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MatrixLabels {
    matrix: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignatureLabels {
    matrix: String,
    status: String,
}

/// The metrics of `runs` (newest first) at `now_ms`, as OpenMetrics text.
pub fn metrics_text(runs: &[RunSummary], now_ms: i64) -> String {
    let mut registry = Registry::with_prefix("triton_stress");
    let by_verdict = Family::<VerdictLabels, Gauge>::default();
    let age = Family::<MatrixLabels, Gauge<f64, AtomicU64>>::default();
    let signatures = Family::<SignatureLabels, Gauge>::default();
    let mut last: BTreeMap<&str, &RunSummary> = BTreeMap::new();
    let mut last_finished: BTreeMap<&str, &RunSummary> = BTreeMap::new();
    for r in runs {
        by_verdict
            .get_or_create(&VerdictLabels {
                verdict: r.verdict.clone(),
            })
            .inc();
        // Newest first: the first seen of a matrix is its last run.
        last.entry(r.name.as_str()).or_insert(r);
        if r.finished_at_ms.is_some() {
            last_finished.entry(r.name.as_str()).or_insert(r);
        }
    }
    for (matrix, r) in last {
        // A run under way counts from its start: the nightly did run.
        let ended = r.finished_at_ms.unwrap_or(r.started_at_ms);
        age.get_or_create(&MatrixLabels {
            matrix: matrix.into(),
        })
        .set((now_ms - ended).max(0) as f64 / 1000.0);
    }
    for (matrix, r) in last_finished {
        for (status, n) in [
            ("new", r.signatures_new),
            ("recurring", r.signatures_recurring),
            ("known", r.signatures_known),
        ] {
            signatures
                .get_or_create(&SignatureLabels {
                    matrix: matrix.into(),
                    status: status.into(),
                })
                .set(i64::from(n));
        }
    }
    registry.register(
        "runs",
        "Runs listed (unfinished ones and the newest finished, up to the list's limit) by verdict",
        by_verdict,
    );
    registry.register(
        "last_run_age_seconds",
        "Seconds since the last run of each matrix ended: alert when the nightly did not run",
        age,
    );
    registry.register(
        "last_run_signatures",
        "Failure signatures of each matrix's last finished run, by status",
        signatures,
    );
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("text encodes");
    out
}

async fn metrics(State(served): State<Arc<Served>>) -> Result<Response, PageError> {
    let runs = runs(&served, &RunFilter::default()).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics_text(&runs, stress_common::now_ms()),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_that_walk_out_of_the_runs_directory_are_refused() {
        assert!(valid_run_id("smoke-20261128-072421-d803"));
        for bad in ["", "..", "../etc", "a/b", ".hidden", "a b", "a%2F"] {
            assert!(!valid_run_id(bad), "{bad}");
        }
    }

    #[test]
    fn metrics_count_runs_by_verdict_and_age_each_matrix_s_last_run() {
        let run = |id: &str, name: &str, verdict: &str, end: i64, new: u32| RunSummary {
            run_id: id.into(),
            name: name.into(),
            fingerprint: None,
            launcher: "local".into(),
            verdict: verdict.into(),
            started_at_ms: end - 1000,
            finished_at_ms: Some(end),
            load_seconds: 1.0,
            requests: 0,
            tests: 0,
            failures: 0,
            qps: 0.0,
            p99_ms: 0.0,
            root_cause: None,
            signatures_new: new,
            signatures_recurring: 0,
            signatures_known: 0,
            regressions: 0,
            ..Default::default()
        };
        let mut running = run("n-3", "nightly", "RUNNING", 95_000, 0);
        running.finished_at_ms = None;
        let runs = [
            running,
            run("n-2", "nightly", "FAIL", 90_000, 2),
            run("s-1", "smoke", "PASS", 50_000, 0),
            run("n-1", "nightly", "PASS", 10_000, 0),
        ];
        let text = metrics_text(&runs, 100_000);
        assert!(
            text.contains("triton_stress_runs{verdict=\"PASS\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("triton_stress_runs{verdict=\"FAIL\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("triton_stress_last_run_age_seconds{matrix=\"nightly\"} 6.0"),
            "the nightly under way, from its start: {text}"
        );
        assert!(
            text.contains("triton_stress_runs{verdict=\"RUNNING\"} 1"),
            "{text}"
        );
        assert!(text.contains("triton_stress_last_run_age_seconds{matrix=\"smoke\"} 50.0"));
        assert!(
            text.contains("triton_stress_last_run_signatures{matrix=\"nightly\",status=\"new\"} 2")
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
