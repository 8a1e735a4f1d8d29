//! The status store: one API over SQLite (the default, a file in the run directory) and Postgres
//! (a cluster), through sqlx's Any driver. Every query uses `$N` placeholders, which both backends
//! accept, so the same SQL runs on both; only the migrations differ per backend.
//!
//! Modelled on gRPC's stress test framework (an event table and a QPS table) plus what the L0
//! report needs. The driver creates the run and its members and polls events; every worker writes
//! its events, heartbeats, snapshots and failures through a [`StoreSink`].
//!
//! # Connecting
//!
//! [`Store::connect`] takes `sqlite://PATH` ([`Store::sqlite_url`] builds one; the file and its
//! directory are created when missing) or `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`. It installs
//! sqlx's default Any drivers, opens a small pool (2 connections), and applies the embedded
//! migrations (`common/migrations/{sqlite,postgres}`, see [`migrate`](self#migrations)); a second
//! connect changes nothing.
//!
//! On SQLite the file is switched to WAL (a persistent setting) and every connection gets
//! `busy_timeout` (30 s by default) and `synchronous = FULL`; every write transaction starts with
//! `BEGIN IMMEDIATE`, so it takes the write lock up front and waits for it instead of failing with
//! "database is locked" when a driver and several worker processes write the same file at once.
//!
//! # Schema
//!
//! All times are ms since the Unix epoch ([`crate::now_ms`]). u64 values are stored bit-for-bit as
//! i64 (`INTEGER`/`BIGINT`): they round-trip exactly, though values ≥ 2^63 (e.g. a correlation id
//! of `u64::MAX`) read as negative numbers in plain SQL. There are no foreign keys on purpose: a
//! write is never refused because another row is missing.
//!
//! | table | key | columns | written by |
//! |---|---|---|---|
//! | `runs` | `run_id` | `name`, `matrix_yaml`, `launcher`, `started_at_ms`, `finished_at_ms`?, `verdict`? | [`Store::create_run`], [`Store::finish_run`] |
//! | `members` | `run_id, member_id` | `role` (`SERVER`/`CLIENT`), `group_name`, `member_index`, `address`, `process_name`, `corr_id_base`?, `corr_id_block_size`?, `command` | [`Store::upsert_member`] |
//! | `events` | `id` (autoincrement / identity) | `run_id`, `member_id`, `at_ms`, `kind` (`STARTING`/`RUNNING`/`SUCCESS`/`FAILURE`), `details` | [`Store::record_event`] |
//! | `heartbeats` | `run_id, member_id` | `at_ms` | [`Store::heartbeat`], [`Store::record_snapshot`] |
//! | `qps_samples` | `id` | `run_id`, `member_id`, `at_ms`, `qps`, `total_requests` | [`Store::record_snapshot`] (appends a snapshot that is a series point: one per series interval and the last, so ~[`crate::interval::SERIES_POINTS`] per worker) |
//! | `latest_qps` | `run_id, member_id` | `at_ms`, `qps`, `total_requests` | [`Store::record_snapshot`] (replaces: every snapshot; the driver polls it) |
//! | `scenario_counts` | `run_id, member_id, scenario` | `tests`, `failures`, `requests`, `skipped`, `latency_histogram` (text), `send_lateness_histogram`? (open loop), `updated_at_ms` | [`Store::record_snapshot`] (replaces: the counts are cumulative) |
//! | `model_counts` | `run_id, member_id, scenario, model` | `tests`, `failures`, `requests`, `latency_histogram`, `stream`? (JSON of a decoupled model's `StreamCounts`), `updated_at_ms`, `uncounted_runs` | [`Store::record_snapshot`] (replaces) |
//! | `latency_intervals` | `id` | `run_id`, `member_id`, `scenario`, `model`, `start_ms`, `end_ms`, `requests`, `failures`, `latency_histogram` (the interval's own) | [`Store::record_snapshot`] (appends a snapshot's `intervals`) |
//! | `server_samples` | `id` | `run_id`, `member_id`, `at_ms`, `details` (JSON of a [`ServerSample`]: counter deltas, gauges, memory) | [`Store::record_server_sample`] (the driver, once per series interval) |
//! | `load_targets` | `run_id, member_id` | `concurrency`, `mix`?, `rate` (a spike's, 0: none), `count_unanswered` (0/1), `updated_at_ms` | [`Store::set_load_target`] (the capacity controller; the worker polls it) |
//! | `capacity_phases` | `run_id, group_name, phase` | `details` (JSON: trace and result), `updated_at_ms` | [`Store::save_capacity_phase`] (replaces) |
//! | `slo_results` | `run_id, position` | `details` (JSON: the rule, observed value, ok, window), `updated_at_ms` | [`Store::save_slo_results`] (replaces the run's) |
//! | `baselines` | `name` | `run_id`, `pinned_at_ms` | [`Store::pin_baseline`] (replaces: `driver baseline set`) |
//! | `comparisons` | `run_id` | `details` (JSON: baseline, threshold, findings), `updated_at_ms` | [`Store::save_comparison`] (replaces) |
//! | `log_excerpts` | `run_id, member_id, from_ms` | `to_ms`, `lines` (JSON array: a server's log lines around a failure) | [`Store::save_log_excerpt`] (replaces) |
//! | `trace_summaries` | `run_id, member_id` | `details` (JSON: a server's trace summary) | [`Store::save_trace_summary`] (replaces) |
//! | `failures` | `id` | `run_id`, `member_id`, `at_ms`, `scenario`, `server`, `model`, `correlation_id`?, `expected`, `actual`, `forensics`? (JSON of `status::Forensics`) | [`Store::record_failure`] (the first [`StoreOptions::failure_cap`] per member) |
//! | `failure_totals` | `run_id, member_id` | `total`: every failure reported, kept or not | [`Store::record_failure`] |
//! | `diagnostics` | `run_id, member_id` | `details` (JSON text), `updated_at_ms` | [`Store::save_diagnostics`] (replaces) |
//! | `stress_schema_migrations` | `version` | `name`, `checksum`, `applied_at_ms` | [`Store::connect`] |
//!
//! Indexes: `runs (started_at_ms)`, `events (run_id, id)`, `qps_samples (run_id, at_ms)`,
//! `failures (run_id, member_id, id)`, `latency_intervals (run_id, end_ms)`,
//! `server_samples (run_id, at_ms)`.
//!
//! # Guarantees
//!
//! * Every write is committed before the call returns (no batching, no buffering); a snapshot's QPS
//!   sample, counts and heartbeat go in one transaction. Nothing is ever deleted or overwritten
//!   except the rows that are replaced by design (member, heartbeat, counts, diagnostics, the
//!   run's verdict).
//! * Event ids ascend in commit order within a run, so a poller that asks for `events(run,
//!   last_seen_id)` misses nothing. SQLite has one writer at a time; on Postgres, where ids from a
//!   sequence can commit out of order, `record_event` holds a per-run advisory lock
//!   (`pg_advisory_xact_lock`) until its insert commits.
//! * Failure records are capped per member ([`DEFAULT_FAILURE_CAP`] = 1000, see
//!   [`StoreOptions::failure_cap`]): beyond the cap only `failure_totals` grows, so a runaway
//!   failure loop cannot fill the disk. The per-scenario `failures` counts in `scenario_counts`
//!   stay exact either way.
//! * Non-finite QPS values (NaN, ±inf: SQLite cannot store NaN) are stored as 0.
//!
//! # Migrations
//!
//! Embedded SQL per version and backend, applied in one write transaction under the write lock
//! (`BEGIN IMMEDIATE` / a Postgres advisory lock) and recorded with a checksum in
//! `stress_schema_migrations`; additive only. See `migrate.rs`.

mod error;
mod migrate;
mod sink;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::{Result, StoreError, mask_url};
pub use sink::StoreSink;

use crate::qps::{QpsSample, QpsSummary};
use crate::status::{
    DRIVER_MEMBER, EventKind, FailureRecord, IntervalCounts, LoadTarget, ModelCounts, Role,
    ScenarioCounts, Stopping, WorkerSnapshot,
};
use crate::triton_metrics::ServerSample;
use sqlx::any::AnyPoolOptions;
use sqlx::{Any, AnyPool, ConnectOptions, Connection, Executor, Row, Transaction};
use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Failure records kept per member of a run; the rest are only counted.
pub const DEFAULT_FAILURE_CAP: u64 = 1000;

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend of a URL, from its scheme.
    pub fn from_url(url: &str) -> Option<Backend> {
        let scheme = url.split_once(':')?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Some(Backend::Sqlite),
            "postgres" | "postgresql" => Some(Backend::Postgres),
            _ => None,
        }
    }
}

/// The verdict of a run whose driver vanished (its lease ran out without a verdict).
pub const ABANDONED: &str = "ABANDONED";

/// A store call that answers within `limit` or counts as failed. Every wait of a long-running
/// process on the store goes through it: a store that is paused or behind a black hole keeps a
/// connection open and never answers, and no socket timeout notices that.
pub async fn within<T, E: std::fmt::Display>(
    limit: Duration,
    call: impl std::future::Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<T, String> {
    match tokio::time::timeout(limit, call).await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err(format!("the status store did not answer within {limit:?}")),
    }
}

/// Knobs of [`Store::connect_with`]; [`Store::connect`] uses the defaults.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Connections in the pool (default 2: a worker needs 1–2).
    pub max_connections: u32,
    /// Failure records kept per member (default [`DEFAULT_FAILURE_CAP`]).
    pub failure_cap: u64,
    /// How long a SQLite write waits for another process's write lock (default 30 s).
    pub busy_timeout: Duration,
    /// How long getting a connection may take (default 60 s), including retrying a server that
    /// refuses connections (e.g. a Postgres that is still starting): a bad URL fails only then.
    pub acquire_timeout: Duration,
    /// A statement slower than this is logged as a warning (default 1 s, sqlx's own). Reading
    /// a whole finished run for its report may take longer without anything being wrong.
    pub slow_statement: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 2,
            failure_cap: DEFAULT_FAILURE_CAP,
            busy_timeout: Duration::from_secs(30),
            acquire_timeout: Duration::from_secs(60),
            slow_statement: Duration::from_secs(1),
        }
    }
}

/// A new run, for [`Store::create_run`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub run_id: String,
    pub name: String,
    /// The test matrix the run was started with, verbatim.
    pub matrix_yaml: String,
    /// How the members were launched (e.g. `local`, `kubernetes`).
    pub launcher: String,
    pub started_at_ms: i64,
}

/// A server's log lines over a time window (see [`Store::save_log_excerpt`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LogExcerpt {
    pub member_id: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub lines: Vec<String>,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub run_id: String,
    pub name: String,
    pub matrix_yaml: String,
    pub launcher: String,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    /// `None` while the run has not finished.
    pub verdict: Option<String>,
    /// Until when the run's driver holds it (see [`Store::renew_lease`]); None: no lease
    /// (a run from before leases).
    pub lease_until_ms: Option<i64>,
}

/// A member of a run: one Triton server or one stress worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub run_id: String,
    pub member_id: String,
    pub role: Role,
    /// The matrix group the member belongs to.
    pub group_name: String,
    /// Its index within the group.
    pub index: u32,
    /// Where it listens (servers) or what it targets (clients).
    pub address: String,
    pub process_name: String,
    /// The first correlation id of this client's block, if it has one.
    pub corr_id_base: Option<u64>,
    pub corr_id_block_size: Option<u64>,
    /// The command line that launched it (to reproduce it by hand).
    pub command: String,
}

/// One row of the event log.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub id: i64,
    pub member_id: String,
    pub at_ms: i64,
    pub kind: EventKind,
    pub details: String,
}

impl EventRow {
    /// The driver's stop this event records ([`Stopping`]); None for any other event. The
    /// same rule as [`Store::stopping`]'s query.
    pub fn stopping(&self) -> Option<Stopping> {
        if self.member_id != DRIVER_MEMBER || self.kind != EventKind::Running {
            return None;
        }
        Stopping::parse(&self.details)
    }
}

/// The status store. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// The URL with any password masked: for messages only.
    url: Arc<str>,
    /// Postgres: the URL as given (with its password), for the event listener's own
    /// connection ([`Store::event_notices`]). Never printed.
    listen_url: Option<Arc<str>>,
    failure_cap: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.url)
            .field("backend", &self.backend)
            .field("failure_cap", &self.failure_cap)
            .finish()
    }
}

/// u64 → BIGINT, bit for bit (values ≥ 2^63 become negative and come back unchanged).
fn to_db(value: u64) -> i64 {
    value as i64
}

fn from_db(value: i64) -> u64 {
    value as u64
}

fn finite_or_zero(value: f64) -> f64 {
    if value.is_finite() { value } else { 0.0 }
}

fn is_busy(error: &sqlx::Error) -> bool {
    match error.as_database_error() {
        Some(db) => {
            let code = db.code();
            matches!(code.as_deref(), Some("5") | Some("6"))
                || db.message().contains("database is locked")
                || db.message().contains("database table is locked")
        }
        None => false,
    }
}

/// The file of a `sqlite:` URL (percent-decoded), unless it is an in-memory database.
fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, params) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" || params.split('&').any(|p| p == "mode=memory") {
        return None;
    }
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            decoded.push(hi << 4 | lo);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    Some(std::path::PathBuf::from(String::from_utf8(decoded).ok()?))
}

impl Store {
    /// `sqlite://PATH?mode=rwc` for a file (created when missing). `?`, `#`, `%` and spaces in
    /// the path are percent-encoded.
    pub fn sqlite_url(path: &Path) -> String {
        let mut encoded = String::new();
        for c in path.to_string_lossy().chars() {
            match c {
                '%' | '?' | '#' | ' ' => encoded.push_str(&format!("%{:02X}", c as u32)),
                _ => encoded.push(c),
            }
        }
        format!("sqlite://{encoded}?mode=rwc")
    }

    /// Connects with [`StoreOptions::default`] and applies the migrations.
    pub async fn connect(url: &str) -> Result<Store> {
        Self::connect_with(url, &StoreOptions::default()).await
    }

    /// Connects and applies the migrations (a no-op when they already are).
    pub async fn connect_with(url: &str, options: &StoreOptions) -> Result<Store> {
        let masked = mask_url(url);
        let backend = Backend::from_url(url).ok_or_else(|| StoreError::UnsupportedUrl {
            url: masked.clone(),
        })?;
        let db = |op: &'static str| {
            let url = masked.clone();
            move |error| StoreError::Database { op, url, error }
        };
        sqlx::any::install_default_drivers();

        let mut url = url.to_string();
        let mut pool_options = AnyPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .min_connections(0)
            .acquire_timeout(options.acquire_timeout);
        let mut file = None;
        if backend == Backend::Sqlite {
            file = sqlite_file(&url);
            if let Some(file) = &file {
                if !url.contains("mode=") {
                    url.push(if url.contains('?') { '&' } else { '?' });
                    url.push_str("mode=rwc");
                }
                if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty())
                    && !url.contains("mode=ro")
                {
                    std::fs::create_dir_all(dir).map_err(|e| StoreError::Other {
                        op: "connect",
                        url: masked.clone(),
                        message: format!("creating {}: {e}", dir.display()),
                    })?;
                }
            }
            let busy_ms = options.busy_timeout.as_millis();
            pool_options = pool_options.after_connect(move |conn, _meta| {
                Box::pin(async move {
                    conn.execute(sqlx::AssertSqlSafe(format!(
                        "PRAGMA busy_timeout = {busy_ms}; PRAGMA synchronous = FULL;"
                    )))
                    .await?;
                    Ok(())
                })
            });
        }
        let connect_options = sqlx::any::AnyConnectOptions::from_str(&url)
            .map_err(db("connect"))?
            .log_slow_statements(log::LevelFilter::Warn, options.slow_statement);
        let pool = match pool_options.connect_with(connect_options).await {
            Ok(pool) => pool,
            // sqlx retries until the acquire timeout and then keeps only "timed out"; one more
            // direct attempt says why (connection refused, authentication, unknown database).
            Err(sqlx::Error::PoolTimedOut) => {
                let cause = match tokio::time::timeout(
                    Duration::from_secs(5),
                    sqlx::AnyConnection::connect(&url),
                )
                .await
                {
                    Ok(Err(e)) => e.to_string(),
                    Ok(Ok(_)) => "it answered a later attempt".to_string(),
                    Err(_) => "a further attempt got no answer within 5 s".to_string(),
                };
                return Err(StoreError::Other {
                    op: "connect",
                    url: masked,
                    message: format!(
                        "no connection within {:?}: {cause}",
                        options.acquire_timeout
                    ),
                });
            }
            Err(e) => return Err(db("connect")(e)),
        };

        let store = Store {
            pool,
            backend,
            url: masked.as_str().into(),
            listen_url: (backend == Backend::Postgres).then(|| url.as_str().into()),
            failure_cap: options.failure_cap,
        };
        if file.is_some() {
            store.enable_wal(options.busy_timeout).await?;
        }
        migrate::migrate(&store.pool, backend, &masked).await?;
        Ok(store)
    }

    /// Switches a SQLite file to WAL. That needs an exclusive lock that `busy_timeout` does not
    /// wait for, so retry while other connections hold the file (only on a brand-new file: WAL is
    /// persistent and the check is a plain read afterwards).
    async fn enable_wal(&self, patience: Duration) -> Result<()> {
        let deadline = std::time::Instant::now() + patience;
        loop {
            let result: std::result::Result<String, sqlx::Error> = async {
                let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                    .fetch_one(&self.pool)
                    .await?;
                if mode.eq_ignore_ascii_case("wal") {
                    return Ok(mode);
                }
                sqlx::query_scalar("PRAGMA journal_mode = WAL")
                    .fetch_one(&self.pool)
                    .await
            }
            .await;
            match result {
                Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
                Ok(mode) if std::time::Instant::now() >= deadline => {
                    return Err(StoreError::Other {
                        op: "enable WAL",
                        url: self.url.to_string(),
                        message: format!("journal_mode stays {mode:?}"),
                    });
                }
                Err(error) if !is_busy(&error) || std::time::Instant::now() >= deadline => {
                    return Err(self.db("enable WAL")(error));
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    fn db(&self, op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
        move |error| StoreError::Database {
            op,
            url: self.url.to_string(),
            error,
        }
    }

    fn corrupt(&self, op: &'static str, message: String) -> StoreError {
        StoreError::Corrupt {
            op,
            url: self.url.to_string(),
            message,
        }
    }

    /// A transaction that holds the write lock from its start (SQLite: `BEGIN IMMEDIATE`, which
    /// waits up to `busy_timeout` for it; Postgres takes row locks as it goes).
    async fn begin_write(&self, op: &'static str) -> Result<Transaction<'static, Any>> {
        match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
        .map_err(self.db(op))
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL, password masked.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Failure records kept per member.
    pub fn failure_cap(&self) -> u64 {
        self.failure_cap
    }

    /// The highest migration version applied to the database.
    pub async fn schema_version(&self) -> Result<i64> {
        migrate::schema_version(&self.pool)
            .await
            .map_err(self.db("schema_version"))
    }

    /// Closes the pool (waits for connections in use to come back). Everything written is
    /// already committed; this only lets SQLite checkpoint and remove its WAL file.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A [`crate::status::StatusSink`] that writes as `member_id` of `run_id`.
    pub fn sink(&self, run_id: impl Into<String>, member_id: impl Into<String>) -> StoreSink {
        StoreSink {
            store: self.clone(),
            run_id: run_id.into(),
            member_id: member_id.into(),
        }
    }

    // ---- runs ------------------------------------------------------------------------------

    pub async fn create_run(&self, run: &NewRun) -> Result<()> {
        sqlx::query(
            // A driver restarted with the same run id continues that run: nothing recorded
            // is replaced.
            "INSERT INTO runs (run_id, name, matrix_yaml, launcher, started_at_ms)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id) DO NOTHING",
        )
        .bind(&run.run_id)
        .bind(&run.name)
        .bind(&run.matrix_yaml)
        .bind(&run.launcher)
        .bind(run.started_at_ms)
        .execute(&self.pool)
        .await
        .map_err(self.db("create_run"))?;
        Ok(())
    }

    /// Records the verdict; an error when the run does not exist.
    pub async fn finish_run(&self, run_id: &str, verdict: &str, finished_at_ms: i64) -> Result<()> {
        let done =
            sqlx::query("UPDATE runs SET verdict = $2, finished_at_ms = $3 WHERE run_id = $1")
                .bind(run_id)
                .bind(verdict)
                .bind(finished_at_ms)
                .execute(&self.pool)
                .await
                .map_err(self.db("finish_run"))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                op: "finish_run",
                url: self.url.to_string(),
                what: format!("run {run_id:?}"),
            });
        }
        Ok(())
    }

    /// The driver holds its run until `until_ms` (a finished run is left alone). The driver
    /// renews it while it lives; see [`Store::abandon_expired`].
    pub async fn renew_lease(&self, run_id: &str, until_ms: i64) -> Result<()> {
        sqlx::query("UPDATE runs SET lease_until_ms = $2 WHERE run_id = $1 AND verdict IS NULL")
            .bind(run_id)
            .bind(until_ms)
            .execute(&self.pool)
            .await
            .map_err(self.db("renew_lease"))
            .map(drop)
    }

    /// Every run without a verdict whose lease ran out before `now_ms` lost its driver: it
    /// becomes [`ABANDONED`], finished when its lease ended, with the driver's FAILURE event
    /// saying so. Returns those runs.
    pub async fn abandon_expired(&self, now_ms: i64) -> Result<Vec<RunRow>> {
        const OP: &str = "abandon_expired";
        let sql = format!(
            "SELECT {} FROM runs WHERE verdict IS NULL AND lease_until_ms IS NOT NULL
             AND lease_until_ms < $1 ORDER BY started_at_ms",
            Self::RUN_COLUMNS
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(now_ms)
            .fetch_all(&self.pool)
            .await
            .map_err(self.db(OP))?;
        let expired = rows
            .iter()
            .map(Self::run_row)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(self.db(OP))?;
        let mut abandoned = Vec::new();
        for mut run in expired {
            let ended = run.lease_until_ms.unwrap_or(now_ms);
            // Only if still without a verdict: its driver may have just come back.
            let done = sqlx::query(
                "UPDATE runs SET verdict = $2, finished_at_ms = $3
                 WHERE run_id = $1 AND verdict IS NULL",
            )
            .bind(&run.run_id)
            .bind(ABANDONED)
            .bind(ended)
            .execute(&self.pool)
            .await
            .map_err(self.db(OP))?;
            if done.rows_affected() == 0 {
                continue;
            }
            self.record_event(
                &run.run_id,
                "driver",
                EventKind::Failure,
                &format!(
                    "{ABANDONED}: the driver's lease ran out without a verdict (it was killed or \
                     lost its node); `driver cleanup --run {}` removes what it left",
                    run.run_id
                ),
            )
            .await?;
            run.verdict = Some(ABANDONED.into());
            run.finished_at_ms = Some(ended);
            abandoned.push(run);
        }
        Ok(abandoned)
    }

    const RUN_COLUMNS: &str = "run_id, name, matrix_yaml, launcher, started_at_ms, finished_at_ms, verdict, lease_until_ms";

    fn run_row(row: &sqlx::any::AnyRow) -> std::result::Result<RunRow, sqlx::Error> {
        Ok(RunRow {
            run_id: row.try_get(0)?,
            name: row.try_get(1)?,
            matrix_yaml: row.try_get(2)?,
            launcher: row.try_get(3)?,
            started_at_ms: row.try_get(4)?,
            finished_at_ms: row.try_get(5)?,
            verdict: row.try_get(6)?,
            lease_until_ms: row.try_get(7)?,
        })
    }

    pub async fn run(&self, run_id: &str) -> Result<Option<RunRow>> {
        let sql = format!("SELECT {} FROM runs WHERE run_id = $1", Self::RUN_COLUMNS);
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.db("run"))?;
        row.as_ref()
            .map(Self::run_row)
            .transpose()
            .map_err(self.db("run"))
    }

    /// Every run, newest (by `started_at_ms`) first.
    pub async fn runs(&self) -> Result<Vec<RunRow>> {
        let sql = format!(
            "SELECT {} FROM runs ORDER BY started_at_ms DESC, run_id DESC",
            Self::RUN_COLUMNS
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(self.db("runs"))?;
        rows.iter()
            .map(Self::run_row)
            .collect::<std::result::Result<_, _>>()
            .map_err(self.db("runs"))
    }

    /// The newest run's id.
    pub async fn latest_run_id(&self) -> Result<Option<String>> {
        sqlx::query_scalar(
            "SELECT run_id FROM runs ORDER BY started_at_ms DESC, run_id DESC LIMIT 1",
        )
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db("latest_run_id"))
    }

    // ---- members ---------------------------------------------------------------------------

    /// Inserts the member or replaces every field of it.
    pub async fn upsert_member(&self, member: &Member) -> Result<()> {
        sqlx::query(
            "INSERT INTO members (run_id, member_id, role, group_name, member_index, address,
                                  process_name, corr_id_base, corr_id_block_size, command)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (run_id, member_id) DO UPDATE SET
                 role = excluded.role,
                 group_name = excluded.group_name,
                 member_index = excluded.member_index,
                 address = excluded.address,
                 process_name = excluded.process_name,
                 corr_id_base = excluded.corr_id_base,
                 corr_id_block_size = excluded.corr_id_block_size,
                 command = excluded.command",
        )
        .bind(&member.run_id)
        .bind(&member.member_id)
        .bind(member.role.as_str())
        .bind(&member.group_name)
        .bind(i64::from(member.index))
        .bind(&member.address)
        .bind(&member.process_name)
        .bind(member.corr_id_base.map(to_db))
        .bind(member.corr_id_block_size.map(to_db))
        .bind(&member.command)
        .execute(&self.pool)
        .await
        .map_err(self.db("upsert_member"))?;
        Ok(())
    }

    /// The members of a run, by group, index and id.
    pub async fn members(&self, run_id: &str) -> Result<Vec<Member>> {
        type Columns = (
            String,
            String,
            String,
            i64,
            String,
            String,
            Option<i64>,
            Option<i64>,
            String,
        );
        let rows: Vec<Columns> = sqlx::query_as(
            "SELECT member_id, role, group_name, member_index, address, process_name,
                    corr_id_base, corr_id_block_size, command
             FROM members WHERE run_id = $1
             ORDER BY group_name, member_index, member_id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("members"))?;
        rows.into_iter()
            .map(
                |(
                    member_id,
                    role,
                    group_name,
                    index,
                    address,
                    process_name,
                    base,
                    size,
                    command,
                )| {
                    let role = Role::parse(&role).ok_or_else(|| {
                        self.corrupt(
                            "members",
                            format!("member {member_id:?} has unknown role {role:?}"),
                        )
                    })?;
                    let index = u32::try_from(index).map_err(|_| {
                        self.corrupt("members", format!("member {member_id:?} has index {index}"))
                    })?;
                    Ok(Member {
                        run_id: run_id.to_string(),
                        member_id,
                        role,
                        group_name,
                        index,
                        address,
                        process_name,
                        corr_id_base: base.map(from_db),
                        corr_id_block_size: size.map(from_db),
                        command,
                    })
                },
            )
            .collect()
    }

    // ---- events ----------------------------------------------------------------------------

    /// Appends an event (at [`crate::now_ms`]) and returns its id.
    pub async fn record_event(
        &self,
        run_id: &str,
        member_id: &str,
        kind: EventKind,
        details: &str,
    ) -> Result<i64> {
        const INSERT: &str = "INSERT INTO events (run_id, member_id, at_ms, kind, details)
                              VALUES ($1, $2, $3, $4, $5) RETURNING id";
        let at_ms = crate::now_ms();
        let insert = || {
            sqlx::query_scalar::<_, i64>(INSERT)
                .bind(run_id)
                .bind(member_id)
                .bind(at_ms)
                .bind(kind.as_str())
                .bind(details)
        };
        match self.backend {
            Backend::Sqlite => insert()
                .fetch_one(&self.pool)
                .await
                .map_err(self.db("record_event")),
            Backend::Postgres => {
                // Serialise the inserts of one run so that its ids become visible in order.
                let mut tx = self.begin_write("record_event").await?;
                sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
                    .bind(EVENT_LOCK_CLASS)
                    .bind(run_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db("record_event"))?;
                let id = insert()
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(self.db("record_event"))?;
                // Delivered at the commit, when the event is visible: a listening driver
                // reads it at once instead of at its next poll.
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(EVENT_CHANNEL)
                    .bind(run_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db("record_event"))?;
                tx.commit().await.map_err(self.db("record_event"))?;
                Ok(id)
            }
        }
    }

    fn event_row(&self, op: &'static str, row: &sqlx::any::AnyRow) -> Result<EventRow> {
        let get = || -> std::result::Result<(i64, String, i64, String, String), sqlx::Error> {
            Ok((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
                row.try_get(4)?,
            ))
        };
        let (id, member_id, at_ms, kind, details) = get().map_err(self.db(op))?;
        let kind = EventKind::parse(&kind)
            .ok_or_else(|| self.corrupt(op, format!("event {id} has unknown kind {kind:?}")))?;
        Ok(EventRow {
            id,
            member_id,
            at_ms,
            kind,
            details,
        })
    }

    /// Wakes its holder when `run_id` records an event, on Postgres (LISTEN on its own
    /// connection; each event insert NOTIFYs at its commit); None on SQLite, which has no such
    /// thing (poll [`Self::events`]). Best effort: a notice lost while the connection is down
    /// is made up by one wake at the reconnect, and the caller still polls as a fallback.
    pub async fn event_notices(&self, run_id: &str) -> Result<Option<EventNotices>> {
        let Some(url) = &self.listen_url else {
            return Ok(None);
        };
        let mut listener = sqlx::postgres::PgListener::connect(url)
            .await
            .map_err(self.db("event_notices"))?;
        listener
            .listen(EVENT_CHANNEL)
            .await
            .map_err(self.db("event_notices"))?;
        let woken = Arc::new(tokio::sync::Notify::new());
        let wake = woken.clone();
        let run_id = run_id.to_string();
        let masked = self.url.clone();
        let task = tokio::spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(notice)) if notice.payload() == run_id => wake.notify_one(),
                    Ok(Some(_)) => {}
                    // The connection dropped (and reconnects on the next call): what was
                    // said meanwhile is lost, so look once.
                    Ok(None) => wake.notify_one(),
                    Err(e) => {
                        tracing::debug!("event notices from {masked}: {e}; retrying in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(Some(EventNotices { woken, task }))
    }

    /// The events of a run with an id above `after_id` (0 for all), ascending. Poll with the
    /// last id seen.
    pub async fn events(&self, run_id: &str, after_id: i64) -> Result<Vec<EventRow>> {
        let rows = sqlx::query(
            "SELECT id, member_id, at_ms, kind, details FROM events
             WHERE run_id = $1 AND id > $2 ORDER BY id",
        )
        .bind(run_id)
        .bind(after_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("events"))?;
        rows.iter()
            .map(|row| self.event_row("events", row))
            .collect()
    }

    /// How the driver is stopping `run_id`: its first stop event ([`Stopping`]), None before.
    pub async fn stopping(&self, run_id: &str) -> Result<Option<Stopping>> {
        let details: Option<String> = sqlx::query_scalar(
            "SELECT details FROM events
             WHERE run_id = $1 AND member_id = $2 AND kind = $3 AND details LIKE $4
             ORDER BY id LIMIT 1",
        )
        .bind(run_id)
        .bind(DRIVER_MEMBER)
        .bind(EventKind::Running.as_str())
        .bind(format!("{}%", Stopping::PREFIX))
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db("stopping"))?;
        Ok(details.as_deref().and_then(Stopping::parse))
    }

    /// The run's first FAILURE event.
    pub async fn first_failure(&self, run_id: &str) -> Result<Option<EventRow>> {
        let row = sqlx::query(
            "SELECT id, member_id, at_ms, kind, details FROM events
             WHERE run_id = $1 AND kind = $2 ORDER BY id LIMIT 1",
        )
        .bind(run_id)
        .bind(EventKind::Failure.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db("first_failure"))?;
        row.map(|row| self.event_row("first_failure", &row))
            .transpose()
    }

    // ---- heartbeats ------------------------------------------------------------------------

    const HEARTBEAT: &str = "INSERT INTO heartbeats (run_id, member_id, at_ms) VALUES ($1, $2, $3)
                             ON CONFLICT (run_id, member_id) DO UPDATE SET at_ms = excluded.at_ms";

    /// Sets the member's last heartbeat.
    pub async fn heartbeat(&self, run_id: &str, member_id: &str, at_ms: i64) -> Result<()> {
        sqlx::query(Self::HEARTBEAT)
            .bind(run_id)
            .bind(member_id)
            .bind(at_ms)
            .execute(&self.pool)
            .await
            .map_err(self.db("heartbeat"))?;
        Ok(())
    }

    /// (member_id, last heartbeat ms) of every member that sent one, by member id.
    pub async fn heartbeats(&self, run_id: &str) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(
            "SELECT member_id, at_ms FROM heartbeats WHERE run_id = $1 ORDER BY member_id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("heartbeats"))
    }

    // ---- snapshots -------------------------------------------------------------------------

    /// In one transaction: replaces the member's latest QPS sample (and appends it to the
    /// series when `snapshot.series_point`), replaces its cumulative per-scenario counts,
    /// appends the latency intervals it closes, and sets its heartbeat (all at
    /// `snapshot.at_ms`, or now when that is 0).
    pub async fn record_snapshot(
        &self,
        run_id: &str,
        member_id: &str,
        snapshot: &WorkerSnapshot,
    ) -> Result<()> {
        const OP: &str = "record_snapshot";
        let at_ms = if snapshot.at_ms > 0 {
            snapshot.at_ms
        } else {
            crate::now_ms()
        };
        let mut tx = self.begin_write(OP).await?;
        // The sample replaces the member's latest (what the driver polls), and joins the
        // series when it is one of its points (one per series interval, and the last).
        const SERIES: &str =
            "INSERT INTO qps_samples (run_id, member_id, at_ms, qps, total_requests)
             VALUES ($1, $2, $3, $4, $5)";
        const LATEST: &str =
            "INSERT INTO latest_qps (run_id, member_id, at_ms, qps, total_requests)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, member_id) DO UPDATE SET
                 at_ms = excluded.at_ms, qps = excluded.qps,
                 total_requests = excluded.total_requests";
        let statements: &[&'static str] = if snapshot.series_point {
            &[SERIES, LATEST]
        } else {
            &[LATEST]
        };
        for &sql in statements {
            sqlx::query(sql)
                .bind(run_id)
                .bind(member_id)
                .bind(at_ms)
                .bind(finite_or_zero(snapshot.qps))
                .bind(to_db(snapshot.total_requests))
                .execute(&mut *tx)
                .await
                .map_err(self.db(OP))?;
        }
        for counts in &snapshot.scenarios {
            sqlx::query(
                "INSERT INTO scenario_counts (run_id, member_id, scenario, tests, failures,
                                              requests, skipped, latency_histogram, updated_at_ms,
                                              send_lateness_histogram)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (run_id, member_id, scenario) DO UPDATE SET
                     tests = excluded.tests,
                     failures = excluded.failures,
                     requests = excluded.requests,
                     skipped = excluded.skipped,
                     latency_histogram = excluded.latency_histogram,
                     updated_at_ms = excluded.updated_at_ms,
                     send_lateness_histogram = excluded.send_lateness_histogram",
            )
            .bind(run_id)
            .bind(member_id)
            .bind(&counts.scenario)
            .bind(to_db(counts.tests))
            .bind(to_db(counts.failures))
            .bind(to_db(counts.requests))
            .bind(to_db(counts.skipped))
            .bind(&counts.latency_histogram)
            .bind(at_ms)
            .bind(Some(&counts.send_lateness_histogram).filter(|h| !h.is_empty()))
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        }
        for counts in &snapshot.models {
            let stream = counts
                .stream
                .as_ref()
                .map(|s| serde_json::to_string(s).expect("plain data serialises"));
            sqlx::query(
                "INSERT INTO model_counts (run_id, member_id, scenario, model, tests, failures,
                                           requests, latency_histogram, stream, updated_at_ms,
                                           uncounted_runs)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                 ON CONFLICT (run_id, member_id, scenario, model) DO UPDATE SET
                     tests = excluded.tests,
                     failures = excluded.failures,
                     requests = excluded.requests,
                     latency_histogram = excluded.latency_histogram,
                     stream = excluded.stream,
                     updated_at_ms = excluded.updated_at_ms,
                     uncounted_runs = excluded.uncounted_runs",
            )
            .bind(run_id)
            .bind(member_id)
            .bind(&counts.scenario)
            .bind(&counts.model)
            .bind(to_db(counts.tests))
            .bind(to_db(counts.failures))
            .bind(to_db(counts.requests))
            .bind(&counts.latency_histogram)
            .bind(stream)
            .bind(at_ms)
            .bind(to_db(counts.uncounted_runs))
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        }
        for i in &snapshot.intervals {
            sqlx::query(
                "INSERT INTO latency_intervals (run_id, member_id, scenario, model, start_ms,
                                                end_ms, requests, failures, latency_histogram)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(run_id)
            .bind(member_id)
            .bind(&i.scenario)
            .bind(&i.model)
            .bind(i.start_ms)
            .bind(i.end_ms)
            .bind(to_db(i.requests))
            .bind(to_db(i.failures))
            .bind(&i.latency_histogram)
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        }
        sqlx::query(Self::HEARTBEAT)
            .bind(run_id)
            .bind(member_id)
            .bind(at_ms)
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        tx.commit().await.map_err(self.db(OP))
    }

    /// The run's latency intervals ending in `[from_ms, to_ms]` (every worker, scenario and
    /// model), by end time: merge their histograms for exact percentiles over the window.
    pub async fn latency_intervals(
        &self,
        run_id: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<(String, IntervalCounts)>> {
        let mut out = Vec::new();
        self.for_each_latency_interval(run_id, from_ms, to_ms, |member, i| out.push((member, i)))
            .await?;
        Ok(out)
    }

    /// The median length of the run's latency intervals (those longer than zero), the width of
    /// the report's latency buckets; None without one. Workers' intervals are all about one
    /// length, the last of each shorter.
    pub async fn latency_interval_width(&self, run_id: &str) -> Result<Option<i64>> {
        const OP: &str = "latency_interval_width";
        let (n,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM latency_intervals WHERE run_id = $1 AND end_ms > start_ms",
        )
        .bind(run_id)
        .fetch_one(&self.pool)
        .await
        .map_err(self.db(OP))?;
        if n == 0 {
            return Ok(None);
        }
        let width: Option<(i64,)> = sqlx::query_as(
            "SELECT end_ms - start_ms FROM latency_intervals
             WHERE run_id = $1 AND end_ms > start_ms ORDER BY 1 LIMIT 1 OFFSET $2",
        )
        .bind(run_id)
        .bind(n / 2)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db(OP))?;
        Ok(width.map(|(w,)| w))
    }

    /// Hands each of [`Store::latency_intervals`] to `visit` in its order, streamed from the
    /// database: memory stays bounded by what `visit` keeps.
    pub async fn for_each_latency_interval(
        &self,
        run_id: &str,
        from_ms: i64,
        to_ms: i64,
        mut visit: impl FnMut(String, IntervalCounts),
    ) -> Result<()> {
        use futures::TryStreamExt;
        type Row = (String, String, String, i64, i64, i64, i64, String);
        let mut rows = sqlx::query_as::<_, Row>(
            "SELECT member_id, scenario, model, start_ms, end_ms, requests, failures,
                    latency_histogram
             FROM latency_intervals WHERE run_id = $1 AND end_ms >= $2 AND end_ms <= $3
             ORDER BY end_ms, id",
        )
        .bind(run_id)
        .bind(from_ms)
        .bind(to_ms)
        .fetch(&self.pool);
        while let Some((
            member_id,
            scenario,
            model,
            start_ms,
            end_ms,
            requests,
            failures,
            latency,
        )) = rows
            .try_next()
            .await
            .map_err(self.db("latency_intervals"))?
        {
            visit(
                member_id,
                IntervalCounts {
                    scenario,
                    model,
                    start_ms,
                    end_ms,
                    requests: from_db(requests),
                    failures: from_db(failures),
                    latency_histogram: latency,
                },
            );
        }
        Ok(())
    }

    // ---- server samples --------------------------------------------------------------------

    /// Appends one server's sample (its metrics over an interval).
    pub async fn record_server_sample(
        &self,
        run_id: &str,
        member_id: &str,
        sample: &ServerSample,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO server_samples (run_id, member_id, at_ms, details) VALUES ($1, $2, $3, $4)",
        )
        .bind(run_id)
        .bind(member_id)
        .bind(sample.at_ms)
        .bind(serde_json::to_string(sample).expect("plain data serialises"))
        .execute(&self.pool)
        .await
        .map_err(self.db("record_server_sample"))?;
        Ok(())
    }

    /// Every server sample of the run, by time.
    pub async fn server_samples(&self, run_id: &str) -> Result<Vec<(String, ServerSample)>> {
        self.member_json(
            "server_samples",
            "SELECT member_id, details FROM server_samples WHERE run_id = $1 ORDER BY at_ms, id",
            run_id,
        )
        .await
    }

    /// Every QPS sample of the run, by time (then insertion).
    pub async fn qps_samples(&self, run_id: &str) -> Result<Vec<QpsSample>> {
        self.fetch_qps(
            "qps_samples",
            "SELECT member_id, at_ms, qps, total_requests FROM qps_samples
             WHERE run_id = $1 ORDER BY at_ms, id",
            run_id,
        )
        .await
    }

    /// What [`crate::qps::load_seconds`] needs of the run's QPS samples, aggregated in the
    /// database: the same answer as `QpsSpan::of(&store.qps_samples(run))`, in three small
    /// queries whatever the run's length.
    pub async fn qps_span(&self, run_id: &str) -> Result<crate::qps::QpsSpan> {
        const OP: &str = "qps_span";
        let (first_ms, last_ms): (Option<i64>, Option<i64>) =
            sqlx::query_as("SELECT MIN(at_ms), MAX(at_ms) FROM qps_samples WHERE run_id = $1")
                .bind(run_id)
                .fetch_one(&self.pool)
                .await
                .map_err(self.db(OP))?;
        let first_with_two: Option<(String,)> = sqlx::query_as(
            "SELECT member_id FROM qps_samples WHERE run_id = $1
             GROUP BY member_id HAVING COUNT(*) >= 2 ORDER BY member_id LIMIT 1",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db(OP))?;
        let interval_ms = match first_with_two {
            Some((member_id,)) => {
                let at: Vec<(i64,)> = sqlx::query_as(
                    "SELECT at_ms FROM qps_samples WHERE run_id = $1 AND member_id = $2
                     ORDER BY at_ms LIMIT 2",
                )
                .bind(run_id)
                .bind(&member_id)
                .fetch_all(&self.pool)
                .await
                .map_err(self.db(OP))?;
                (at.len() == 2).then(|| at[1].0 - at[0].0)
            }
            None => None,
        };
        Ok(crate::qps::QpsSpan {
            first_ms,
            last_ms,
            interval_ms,
        })
    }

    /// Each member's QPS series summarised in the database, by member id: its statistics and
    /// at most `points` points ([`QpsSummary`]). One scan of the run's series and a grouping
    /// (no join, so no plan that rescans the series per member), whatever its length; what
    /// comes back is bounded by members × `points`.
    /// `span`: the run's [`Store::qps_span`], which the caller has read already.
    pub async fn qps_summaries(
        &self,
        run_id: &str,
        span: &crate::qps::QpsSpan,
        points: usize,
    ) -> Result<Vec<QpsSummary>> {
        use crate::qps::QpsStats;
        const OP: &str = "qps_summaries";
        let (Some(first_ms), Some(last_ms)) = (span.first_ms, span.last_ms) else {
            return Ok(Vec::new());
        };
        // A worker's last snapshot, which the statistics leave out when it reports 0.
        let latest: BTreeMap<String, f64> = self
            .latest_qps(run_id)
            .await?
            .into_iter()
            .map(|q| (q.member_id, q.qps))
            .collect();
        // member, span, samples, Σ at_ms, Σ qps, max, least above 0, zeros. The sums of at_ms
        // stay exact in a double (< 2^53 for any run).
        type SpanRow = (String, i64, i64, f64, f64, f64, Option<f64>, i64);
        let mut rows: Vec<SpanRow> = sqlx::query_as(
            "SELECT member_id, (at_ms - $2) * $3 / $4 AS span, COUNT(*),
                    SUM(CAST(at_ms AS DOUBLE PRECISION)), SUM(qps), MAX(qps),
                    MIN(CASE WHEN qps > 0 THEN qps END),
                    SUM(CASE WHEN qps = 0 THEN 1 ELSE 0 END)
             FROM qps_samples WHERE run_id = $1
             GROUP BY member_id, span",
        )
        .bind(run_id)
        .bind(first_ms)
        .bind(points.max(1) as i64)
        .bind(last_ms - first_ms + 1)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;

        // Ordered here: an ORDER BY made Postgres sort the whole series to group it (1.4 s for
        // 2.88 M rows) where it hashes without one (1.1 s).
        rows.sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        // Per member: its points, in time order, and their total.
        type Spans = (Vec<(f64, f64)>, QpsStats);
        let mut members: BTreeMap<String, Spans> = BTreeMap::new();
        for (member_id, _span, n, sum_at, sum_qps, max, min_positive, zeros) in rows {
            let n = n.max(1);
            let (points, total) = members.entry(member_id).or_default();
            points.push((sum_at / n as f64, sum_qps / n as f64));
            total.add(&QpsStats {
                samples: n as u64,
                sum: sum_qps,
                max,
                min_positive,
                zeros: zeros.max(0) as u64,
            });
        }
        Ok(members
            .into_iter()
            .map(|(member_id, (points, total))| {
                let (min, avg, max) = total.live(latest.get(&member_id) == Some(&0.0));
                QpsSummary {
                    samples: total.samples,
                    min,
                    avg,
                    max,
                    points,
                    member_id,
                }
            })
            .collect())
    }

    /// The most recent QPS sample of every member that has one: what the driver polls, without
    /// reading the whole series.
    pub async fn latest_qps(&self, run_id: &str) -> Result<Vec<QpsSample>> {
        self.fetch_qps(
            "latest_qps",
            "SELECT member_id, at_ms, qps, total_requests FROM latest_qps
             WHERE run_id = $1 ORDER BY member_id",
            run_id,
        )
        .await
    }

    /// Runs a query selecting (member_id, at_ms, qps, total_requests) for one run.
    async fn fetch_qps(
        &self,
        op: &'static str,
        sql: &'static str,
        run_id: &str,
    ) -> Result<Vec<QpsSample>> {
        let rows: Vec<(String, i64, f64, i64)> = sqlx::query_as(sql)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(self.db(op))?;
        Ok(rows
            .into_iter()
            .map(|(member_id, at_ms, qps, total_requests)| QpsSample {
                member_id,
                at_ms,
                qps,
                total_requests: from_db(total_requests),
            })
            .collect())
    }

    /// The latest cumulative counts of every (member, scenario), by member then scenario.
    pub async fn scenario_counts(&self, run_id: &str) -> Result<Vec<(String, ScenarioCounts)>> {
        type Row = (String, String, i64, i64, i64, i64, String, Option<String>);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT member_id, scenario, tests, failures, requests, skipped, latency_histogram,
                    send_lateness_histogram
             FROM scenario_counts WHERE run_id = $1 ORDER BY member_id, scenario",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("scenario_counts"))?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    member_id,
                    scenario,
                    tests,
                    failures,
                    requests,
                    skipped,
                    latency_histogram,
                    send_lateness,
                )| {
                    (
                        member_id,
                        ScenarioCounts {
                            scenario,
                            tests: from_db(tests),
                            failures: from_db(failures),
                            requests: from_db(requests),
                            skipped: from_db(skipped),
                            latency_histogram,
                            send_lateness_histogram: send_lateness.unwrap_or_default(),
                        },
                    )
                },
            )
            .collect())
    }

    /// The latest cumulative counts of every (member, scenario, model), by member, scenario,
    /// model, each with the time of the snapshot that wrote it.
    pub async fn model_counts(&self, run_id: &str) -> Result<Vec<(String, i64, ModelCounts)>> {
        const OP: &str = "model_counts";
        type Row = (
            String,
            String,
            String,
            i64,
            i64,
            i64,
            String,
            Option<String>,
            i64,
            i64,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT member_id, scenario, model, tests, failures, requests, latency_histogram,
                    stream, updated_at_ms, uncounted_runs
             FROM model_counts WHERE run_id = $1 ORDER BY member_id, scenario, model",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;
        rows.into_iter()
            .map(|row| {
                let (
                    member_id,
                    scenario,
                    model,
                    tests,
                    failures,
                    requests,
                    latency,
                    stream,
                    at,
                    uncounted_runs,
                ) = row;
                let stream = stream
                    .map(|s| serde_json::from_str(&s))
                    .transpose()
                    .map_err(|e| {
                        self.corrupt(OP, format!("model_counts.stream of {member_id}: {e}"))
                    })?;
                Ok((
                    member_id,
                    at,
                    ModelCounts {
                        scenario,
                        model,
                        tests: from_db(tests),
                        failures: from_db(failures),
                        requests: from_db(requests),
                        latency_histogram: latency,
                        stream,
                        uncounted_runs: from_db(uncounted_runs),
                    },
                ))
            })
            .collect()
    }

    // ---- failures --------------------------------------------------------------------------

    /// Counts the failure and keeps its record while the member has fewer than
    /// [`Store::failure_cap`] records; returns whether it was kept.
    pub async fn record_failure(
        &self,
        run_id: &str,
        member_id: &str,
        failure: &FailureRecord,
    ) -> Result<bool> {
        const OP: &str = "record_failure";
        let mut tx = self.begin_write(OP).await?;
        let total: i64 = sqlx::query_scalar(
            "INSERT INTO failure_totals (run_id, member_id, total) VALUES ($1, $2, 1)
             ON CONFLICT (run_id, member_id) DO UPDATE SET total = failure_totals.total + 1
             RETURNING total",
        )
        .bind(run_id)
        .bind(member_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(self.db(OP))?;
        let keep = from_db(total) <= self.failure_cap;
        if keep {
            sqlx::query(
                "INSERT INTO failures (run_id, member_id, at_ms, scenario, server, model,
                                       correlation_id, expected, actual, forensics)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(run_id)
            .bind(member_id)
            .bind(failure.at_ms)
            .bind(&failure.scenario)
            .bind(&failure.server)
            .bind(&failure.model)
            .bind(failure.correlation_id.map(to_db))
            .bind(&failure.expected)
            .bind(&failure.actual)
            .bind(
                failure
                    .forensics
                    .as_ref()
                    .map(|f| serde_json::to_string(f).expect("plain data serialises")),
            )
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        }
        tx.commit().await.map_err(self.db(OP))?;
        Ok(keep)
    }

    /// The kept failure records of the run, in the order they were recorded.
    pub async fn failures(&self, run_id: &str) -> Result<Vec<(String, FailureRecord)>> {
        const OP: &str = "failures";
        type Row = (
            String,
            i64,
            String,
            String,
            String,
            Option<i64>,
            String,
            String,
            Option<String>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT member_id, at_ms, scenario, server, model, correlation_id, expected, actual,
                    forensics
             FROM failures WHERE run_id = $1 ORDER BY id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;
        rows.into_iter()
            .map(|row| {
                let (member_id, at_ms, scenario, server, model, corr, expected, actual, forensics) =
                    row;
                let forensics = forensics
                    .map(|f| serde_json::from_str(&f))
                    .transpose()
                    .map_err(|e| self.corrupt(OP, format!("forensics of a failure: {e}")))?;
                Ok((
                    member_id,
                    FailureRecord {
                        at_ms,
                        scenario,
                        server,
                        model,
                        correlation_id: corr.map(from_db),
                        expected,
                        actual,
                        forensics,
                    },
                ))
            })
            .collect()
    }

    /// (member_id, failures reported) per member, kept or not, by member id. A member reported
    /// `total - kept` more failures than [`Store::failures`] shows.
    pub async fn failure_totals(&self, run_id: &str) -> Result<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT member_id, total FROM failure_totals WHERE run_id = $1 ORDER BY member_id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("failure_totals"))?;
        Ok(rows.into_iter().map(|(m, t)| (m, from_db(t))).collect())
    }

    // ---- diagnostics -----------------------------------------------------------------------

    /// Sets (replaces) the member's diagnostics: exit code or signal, log tail, reproduce
    /// command, pod details... Stored as JSON text.
    pub async fn save_diagnostics(
        &self,
        run_id: &str,
        member_id: &str,
        details: &serde_json::Value,
    ) -> Result<()> {
        self.save_member_json(
            "save_diagnostics",
            "INSERT INTO diagnostics (run_id, member_id, details, updated_at_ms)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id, member_id) DO UPDATE SET
                 details = excluded.details, updated_at_ms = excluded.updated_at_ms",
            run_id,
            member_id,
            details,
        )
        .await
    }

    /// Runs `sql`, which upserts (run_id, member_id, JSON details, updated_at_ms), with now.
    async fn save_member_json(
        &self,
        op: &'static str,
        sql: &'static str,
        run_id: &str,
        member_id: &str,
        details: &serde_json::Value,
    ) -> Result<()> {
        sqlx::query(sql)
            .bind(run_id)
            .bind(member_id)
            .bind(details.to_string())
            .bind(crate::now_ms())
            .execute(&self.pool)
            .await
            .map_err(self.db(op))?;
        Ok(())
    }

    /// (member_id, diagnostics) of every member that has some, by member id.
    pub async fn diagnostics(&self, run_id: &str) -> Result<Vec<(String, serde_json::Value)>> {
        self.member_json(
            "diagnostics",
            "SELECT member_id, details FROM diagnostics WHERE run_id = $1 ORDER BY member_id",
            run_id,
        )
        .await
    }

    /// Runs `sql`, which selects (member_id, a JSON text) of one run, and parses each JSON.
    async fn member_json<T: serde::de::DeserializeOwned>(
        &self,
        op: &'static str,
        sql: &'static str,
        run_id: &str,
    ) -> Result<Vec<(String, T)>> {
        let rows: Vec<(String, String)> = sqlx::query_as(sql)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(self.db(op))?;
        rows.into_iter()
            .map(|(member_id, text)| {
                let value = serde_json::from_str(&text).map_err(|e| {
                    self.corrupt(op, format!("{op} of {member_id:?} are not JSON: {e}"))
                })?;
                Ok((member_id, value))
            })
            .collect()
    }

    // ---- capacity mode ---------------------------------------------------------------------

    /// Sets the load the capacity controller asks of a worker (replaces).
    pub async fn set_load_target(
        &self,
        run_id: &str,
        member_id: &str,
        target: &LoadTarget,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO load_targets
                 (run_id, member_id, concurrency, mix, rate, count_unanswered, updated_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (run_id, member_id) DO UPDATE SET
                 concurrency = excluded.concurrency, mix = excluded.mix, rate = excluded.rate,
                 count_unanswered = excluded.count_unanswered,
                 updated_at_ms = excluded.updated_at_ms",
        )
        .bind(run_id)
        .bind(member_id)
        .bind(i64::from(target.concurrency))
        .bind(target.mix.clone())
        // 0 for none: a NULL float does not bind through the Any driver on Postgres.
        .bind(target.rate.map_or(0.0, finite_or_zero))
        .bind(i64::from(target.count_unanswered))
        .bind(crate::now_ms())
        .execute(&self.pool)
        .await
        .map_err(self.db("set_load_target"))?;
        Ok(())
    }

    /// The load asked of a worker, if any.
    pub async fn load_target(&self, run_id: &str, member_id: &str) -> Result<Option<LoadTarget>> {
        let row: Option<(i64, Option<String>, f64, i64)> = sqlx::query_as(
            "SELECT concurrency, mix, rate, count_unanswered FROM load_targets
             WHERE run_id = $1 AND member_id = $2",
        )
        .bind(run_id)
        .bind(member_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db("load_target"))?;
        row.map(|(c, mix, rate, count_unanswered)| {
            let concurrency = u32::try_from(c).map_err(|_| {
                self.corrupt("load_target", format!("concurrency {c} of {member_id}"))
            })?;
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(self.corrupt("load_target", format!("rate {rate} of {member_id}")));
            }
            Ok(LoadTarget {
                concurrency,
                mix,
                rate: (rate > 0.0).then_some(rate),
                count_unanswered: count_unanswered != 0,
            })
        })
        .transpose()
    }

    /// Saves a client group's capacity phase (the controller's trace and result, replaced).
    pub async fn save_capacity_phase(
        &self,
        run_id: &str,
        group: &str,
        phase: &str,
        details: &serde_json::Value,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO capacity_phases (run_id, group_name, phase, details, updated_at_ms)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, group_name, phase) DO UPDATE SET
                 details = excluded.details, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(run_id)
        .bind(group)
        .bind(phase)
        .bind(details.to_string())
        .bind(crate::now_ms())
        .execute(&self.pool)
        .await
        .map_err(self.db("save_capacity_phase"))?;
        Ok(())
    }

    /// (group, phase, details) of every capacity phase of the run, in the order they were
    /// first saved.
    pub async fn capacity_phases(
        &self,
        run_id: &str,
    ) -> Result<Vec<(String, String, serde_json::Value)>> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT group_name, phase, details FROM capacity_phases WHERE run_id = $1
             ORDER BY group_name, phase",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("capacity_phases"))?;
        rows.into_iter()
            .map(|(group, phase, text)| {
                let value = serde_json::from_str(&text).map_err(|e| {
                    self.corrupt(
                        "capacity_phases",
                        format!("capacity phase {group}/{phase} is not JSON: {e}"),
                    )
                })?;
                Ok((group, phase, value))
            })
            .collect()
    }

    // ---- baselines and regressions -----------------------------------------------------------

    /// Pins `run_id` as the baseline of runs named `name` (replaces an earlier pin).
    pub async fn pin_baseline(&self, name: &str, run_id: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO baselines (name, run_id, pinned_at_ms) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET
                 run_id = excluded.run_id, pinned_at_ms = excluded.pinned_at_ms",
        )
        .bind(name)
        .bind(run_id)
        .bind(crate::now_ms())
        .execute(&self.pool)
        .await
        .map_err(self.db("pin_baseline"))?;
        Ok(())
    }

    /// Every pin: (name, run id, when pinned).
    pub async fn baselines(&self) -> Result<Vec<(String, String, i64)>> {
        sqlx::query_as("SELECT name, run_id, pinned_at_ms FROM baselines ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(self.db("baselines"))
    }

    /// Replaces the run's comparison with its baseline.
    pub async fn save_comparison(&self, run_id: &str, details: &serde_json::Value) -> Result<()> {
        sqlx::query(
            "INSERT INTO comparisons (run_id, details, updated_at_ms) VALUES ($1, $2, $3)
             ON CONFLICT (run_id) DO UPDATE SET
                 details = excluded.details, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(run_id)
        .bind(details.to_string())
        .bind(crate::now_ms())
        .execute(&self.pool)
        .await
        .map_err(self.db("save_comparison"))?;
        Ok(())
    }

    /// The run's comparison with its baseline, if it was compared.
    pub async fn comparison(&self, run_id: &str) -> Result<Option<serde_json::Value>> {
        let text: Option<String> =
            sqlx::query_scalar("SELECT details FROM comparisons WHERE run_id = $1")
                .bind(run_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(self.db("comparison"))?;
        text.map(|t| {
            serde_json::from_str(&t)
                .map_err(|e| self.corrupt("comparison", format!("not JSON: {e}")))
        })
        .transpose()
    }

    // ---- log excerpts ----------------------------------------------------------------------

    /// Saves (replaces) a server's log lines of `[from_ms, to_ms]`.
    pub async fn save_log_excerpt(
        &self,
        run_id: &str,
        member_id: &str,
        from_ms: i64,
        to_ms: i64,
        lines: &[String],
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO log_excerpts (run_id, member_id, from_ms, to_ms, lines)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, member_id, from_ms) DO UPDATE SET
                 to_ms = excluded.to_ms, lines = excluded.lines",
        )
        .bind(run_id)
        .bind(member_id)
        .bind(from_ms)
        .bind(to_ms)
        .bind(serde_json::to_string(lines).expect("strings serialise"))
        .execute(&self.pool)
        .await
        .map_err(self.db("save_log_excerpt"))?;
        Ok(())
    }

    /// The run's log excerpts: (member, from_ms, to_ms, lines), by member and time.
    pub async fn log_excerpts(&self, run_id: &str) -> Result<Vec<LogExcerpt>> {
        const OP: &str = "log_excerpts";
        let rows: Vec<(String, i64, i64, String)> = sqlx::query_as(
            "SELECT member_id, from_ms, to_ms, lines FROM log_excerpts WHERE run_id = $1
             ORDER BY member_id, from_ms",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;
        rows.into_iter()
            .map(|(member_id, from_ms, to_ms, lines)| {
                let lines = serde_json::from_str(&lines)
                    .map_err(|e| self.corrupt(OP, format!("an excerpt of {member_id}: {e}")))?;
                Ok(LogExcerpt {
                    member_id,
                    from_ms,
                    to_ms,
                    lines,
                })
            })
            .collect()
    }

    // ---- trace summaries -------------------------------------------------------------------

    /// Replaces a server's trace summary (JSON).
    pub async fn save_trace_summary(
        &self,
        run_id: &str,
        member_id: &str,
        details: &serde_json::Value,
    ) -> Result<()> {
        self.save_member_json(
            "save_trace_summary",
            "INSERT INTO trace_summaries (run_id, member_id, details, updated_at_ms)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id, member_id) DO UPDATE SET
                 details = excluded.details, updated_at_ms = excluded.updated_at_ms",
            run_id,
            member_id,
            details,
        )
        .await
    }

    /// Every server's trace summary of the run, by member.
    pub async fn trace_summaries(&self, run_id: &str) -> Result<Vec<(String, serde_json::Value)>> {
        self.member_json(
            "trace_summaries",
            "SELECT member_id, details FROM trace_summaries WHERE run_id = $1 ORDER BY member_id",
            run_id,
        )
        .await
    }

    // ---- SLO verdicts -----------------------------------------------------------------------

    /// Replaces the run's SLO verdicts (one JSON document per rule, in the matrix's order).
    pub async fn save_slo_results(
        &self,
        run_id: &str,
        results: &[serde_json::Value],
    ) -> Result<()> {
        let mut tx = self.begin_write("save_slo_results").await?;
        sqlx::query("DELETE FROM slo_results WHERE run_id = $1")
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(self.db("save_slo_results"))?;
        for (position, details) in results.iter().enumerate() {
            sqlx::query(
                "INSERT INTO slo_results (run_id, position, details, updated_at_ms)
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(run_id)
            .bind(position as i64)
            .bind(details.to_string())
            .bind(crate::now_ms())
            .execute(&mut *tx)
            .await
            .map_err(self.db("save_slo_results"))?;
        }
        tx.commit().await.map_err(self.db("save_slo_results"))?;
        Ok(())
    }

    /// The run's SLO verdicts in the matrix's order.
    pub async fn slo_results(&self, run_id: &str) -> Result<Vec<serde_json::Value>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT details FROM slo_results WHERE run_id = $1 ORDER BY position")
                .bind(run_id)
                .fetch_all(&self.pool)
                .await
                .map_err(self.db("slo_results"))?;
        rows.into_iter()
            .map(|(text,)| {
                serde_json::from_str(&text).map_err(|e| {
                    self.corrupt("slo_results", format!("an SLO result is not JSON: {e}"))
                })
            })
            .collect()
    }
}

/// The class (first key) of the Postgres advisory locks that order a run's events ("ev").
const EVENT_LOCK_CLASS: i32 = 0x6576;

/// The Postgres NOTIFY channel of event inserts; the payload is the run id.
const EVENT_CHANNEL: &str = "triton_stress_events";

/// See [`Store::event_notices`]; dropping it stops listening.
pub struct EventNotices {
    woken: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl EventNotices {
    /// Returns when the run has recorded an event since the last return (notices in between
    /// are coalesced into one). Cancel-safe.
    pub async fn recorded(&self) {
        self.woken.notified().await
    }
}

impl Drop for EventNotices {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_from_urls() {
        assert_eq!(Backend::from_url("sqlite:///tmp/x"), Some(Backend::Sqlite));
        assert_eq!(Backend::from_url("sqlite::memory:"), Some(Backend::Sqlite));
        assert_eq!(
            Backend::from_url("postgres://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::from_url("postgresql://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::from_url("mysql://u@h/db"), None);
        assert_eq!(Backend::from_url("/tmp/x.sqlite"), None);
    }

    #[test]
    fn sqlite_urls_round_trip_paths() {
        let path = Path::new("/tmp/a dir/run?1#%/status.sqlite");
        let url = Store::sqlite_url(path);
        assert_eq!(
            url,
            "sqlite:///tmp/a%20dir/run%3F1%23%25/status.sqlite?mode=rwc"
        );
        assert_eq!(sqlite_file(&url).as_deref(), Some(path));
        assert_eq!(
            sqlite_file("sqlite:runs/x.sqlite").as_deref(),
            Some(Path::new("runs/x.sqlite"))
        );
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("sqlite://x?mode=memory"), None);
    }

    #[test]
    fn u64_round_trips_through_i64() {
        for v in [0, 1, u64::MAX, i64::MAX as u64, i64::MAX as u64 + 1] {
            assert_eq!(from_db(to_db(v)), v);
        }
        assert_eq!(finite_or_zero(f64::NAN), 0.0);
        assert_eq!(finite_or_zero(1.5), 1.5);
    }
}
