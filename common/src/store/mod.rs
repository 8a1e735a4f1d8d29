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
//! [`Store::open_read_only`] opens an existing store of this build's schema without migrating
//! or writing anything (SQLite `mode=ro`, read-only Postgres sessions).
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
//! | `runs` | `run_id` | `name`, `matrix_yaml`, `launcher`, `started_at_ms`, `finished_at_ms`?, `verdict`?, `lease_until_ms`?, `fingerprint`? | [`Store::create_run`], [`Store::finish_run`] |
//! | `members` | `run_id, member_id` | `role` (`SERVER`/`CLIENT`), `group_name`, `member_index`, `address`, `process_name`, `corr_id_base`?, `corr_id_block_size`?, `command` | [`Store::upsert_member`] |
//! | `events` | `id` (autoincrement / identity) | `run_id`, `member_id`, `at_ms`, `kind` (`STARTING`/`RUNNING`/`SUCCESS`/`FAILURE`), `details` | [`Store::record_event`] |
//! | `heartbeats` | `run_id, member_id` | `at_ms` | [`Store::heartbeat`], [`Store::record_snapshot`] |
//! | `qps_samples` | `id` | `run_id`, `member_id`, `at_ms`, `qps`, `total_requests`, `rss_bytes`? (the worker's own memory) | [`Store::record_snapshot`] (appends a snapshot that is a series point: one per series interval and the last, so ~[`crate::interval::SERIES_POINTS`] per worker) |
//! | `latest_qps` | `run_id, member_id` | `at_ms`, `qps`, `total_requests`, `deferred_clients` | [`Store::record_snapshot`] (replaces: every snapshot; the driver polls it) |
//! | `scenario_counts` | `run_id, member_id, scenario` | `tests`, `failures`, `requests`, `skipped`, `latency_histogram` (text), `send_lateness_histogram`? (open loop), `updated_at_ms` | [`Store::record_snapshot`] (replaces: the counts are cumulative) |
//! | `model_counts` | `run_id, member_id, scenario, model` | `tests`, `failures`, `requests`, `latency_histogram`, `stream`? (JSON of a decoupled model's `StreamCounts`), `updated_at_ms`, `uncounted_runs` | [`Store::record_snapshot`] (replaces) |
//! | `latency_intervals` | `id` | `run_id`, `member_id`, `scenario`, `model`, `start_ms`, `end_ms`, `requests`, `failures`, `latency_histogram` (the interval's own) | [`Store::record_snapshot`] (appends a snapshot's `intervals`) |
//! | `outages` | `id` | `run_id`, `member_id`, `server`, `last_ok_ms`, `first_failure_ms`?, `first_ok_ms`? (NULL: still out at the worker's end), `failed_tests`, `failed_sequences` | [`Store::record_snapshot`] (appends a snapshot's `outages`: see [`Outage`]) |
//! | `server_samples` | `id` | `run_id`, `member_id`, `at_ms`, `details` (JSON of a [`ServerSample`]: counter deltas, gauges, memory) | [`Store::record_server_sample`] (the driver, once per series interval) |
//! | `load_targets` | `run_id, member_id` | `concurrency`, `mix`?, `rate` (a spike's, 0: none), `count_unanswered` (0/1), `updated_at_ms` | [`Store::set_load_target`] (the capacity controller; the worker polls it) |
//! | `baselines` | `name` | `run_id`, `pinned_at_ms` | [`Store::pin_baseline`] (replaces: `driver baseline set`) |
//! | `failures` | `id` | `run_id`, `member_id`, `at_ms`, `scenario`, `server`, `model`, `correlation_id`?, `expected`, `actual`, `error_kind`?, `forensics`? (JSON of `status::Forensics`) | [`Store::record_failure`] (the first [`StoreOptions::failure_cap`] per member) |
//! | `signature_counts` | `run_id, member_id, signature_id` | `details` (JSON of a `signature::Signature`), `count`, `first_at_ms`, `last_at_ms` | [`Store::record_snapshot`] (replaces: cumulative) |
//! | `failure_totals` | `run_id, member_id` | `total`: every failure reported, kept or not | [`Store::record_failure`] |
//! | `documents` | `run_id, kind, doc_key` | `details` (JSON of a [`Document`] the writer's crate owns: the driver's diagnostics, trace summaries, capacity phases, SLO verdicts, baseline comparison, log excerpts), `updated_at_ms` | [`Store::save_document`], [`Store::replace_documents`] |
//! | `stress_schema_migrations` | `version` | `name`, `checksum`, `applied_at_ms` | [`Store::connect`] |
//!
//! The tables `diagnostics`, `trace_summaries`, `capacity_phases`, `slo_results`, `comparisons`
//! and `log_excerpts` are what builds before schema 14 wrote; migration 14 copied them into
//! `documents` and nothing writes them since.
//!
//! Indexes: `runs (started_at_ms)`, `events (run_id, id)`, `qps_samples (run_id, at_ms)`,
//! `failures (run_id, member_id, id)`, `latency_intervals (run_id, end_ms)`,
//! `server_samples (run_id, at_ms)`, `outages (run_id, id)`.
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

mod capacity;
mod documents;
mod error;
mod events;
mod failures;
mod migrate;
mod runs;
pub use runs::RUN_TABLES;
mod series;
mod sink;
mod spans;
pub use spans::{FASTEST_PER_SERVER, TracedCount, TracedTail};
#[cfg(feature = "testing")]
pub mod testing;

pub use documents::Document;
pub use error::{Result, StoreError, mask_url};
pub use events::EventNotices;
pub use sink::StoreSink;

use crate::qps::{QpsSample, QpsSummary};
use crate::status::{
    DRIVER_MEMBER, EventKind, FailureRecord, IntervalCounts, LoadTarget, ModelCounts, Outage, Role,
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

/// A member filter of the per-member reads that reads every member (member names are never
/// empty).
const ALL_MEMBERS: &str = "";

/// The verdict of a run whose driver vanished (its lease ran out without a verdict).
pub const ABANDONED: &str = "ABANDONED";

/// What a run without a verdict whose driver's lease holds is shown as: under way.
pub const RUNNING: &str = "RUNNING";

/// Why a store call made through [`within`] has no answer: it failed, or it did not answer in
/// time.
#[derive(Debug, thiserror::Error)]
pub enum WithinError<E = StoreError> {
    /// The call answered with its error.
    #[error(transparent)]
    Failed(E),
    /// The call did not answer within the limit.
    #[error("the status store did not answer within {0:?}")]
    NoAnswer(Duration),
}

/// A store call that answers within `limit` or counts as failed. Every wait of a long-running
/// process on the store goes through it: a store that is paused or behind a black hole keeps a
/// connection open and never answers, and no socket timeout notices that.
pub async fn within<T, E>(
    limit: Duration,
    call: impl std::future::Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<T, WithinError<E>> {
    match tokio::time::timeout(limit, call).await {
        Ok(answer) => answer.map_err(WithinError::Failed),
        Err(_) => Err(WithinError::NoAnswer(limit)),
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
    /// Postgres: the longest the server lets one of this store's statements run or wait on a
    /// lock (`statement_timeout`) and a transaction sit idle
    /// (`idle_in_transaction_session_timeout`). A caller that gives up on a call (a timeout)
    /// leaves its statement running on the server, and sqlx returns the connection to the pool
    /// only once that statement has ended: a write waiting on a lock that is never released
    /// would hold its place in the pool for good. None (the default): no limit, for readers
    /// of whole runs. Not used on SQLite, whose waits end at `busy_timeout`.
    pub server_wait_limit: Option<Duration>,
}

impl StoreOptions {
    /// For reading other runs' stores (lists, pages, baseline scans): a store that gives no
    /// connection within 5 s is given up on, rather than holding the page or the scan for the
    /// default minute (a file that is not a database fails every connection it is retried on).
    pub fn reading() -> Self {
        Self {
            acquire_timeout: Duration::from_secs(5),
            ..Self::default()
        }
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 2,
            failure_cap: DEFAULT_FAILURE_CAP,
            busy_timeout: Duration::from_secs(30),
            acquire_timeout: Duration::from_secs(60),
            slow_statement: Duration::from_secs(1),
            server_wait_limit: None,
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
    /// The matrix's fingerprint: runs with the same one are compared (None: not known).
    pub fingerprint: Option<String>,
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
    /// The matrix's fingerprint (None: a run recorded before fingerprints).
    pub fingerprint: Option<String>,
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

/// How [`Store::open`] treats the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Apply the migrations up to this version (reads and writes).
    Migrate(i64),
    /// Apply nothing and write nothing.
    ReadOnly,
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
    /// Opened by [`Store::open_read_only`]: nothing is written through it.
    read_only: bool,
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

/// A SQLite URL as [`Store::open`] connects to it, and its file (None: in memory). Read-only:
/// `mode=ro`, and the file must exist. Otherwise `mode=rwc` unless the URL gives a mode, and
/// the file's directory is created.
fn sqlite_open_url(
    url: &str,
    masked: &str,
    read_only: bool,
) -> Result<(String, Option<std::path::PathBuf>)> {
    let mut url = url.to_string();
    let file = sqlite_file(&url);
    if read_only {
        let file = file.as_ref().ok_or_else(|| StoreError::Other {
            op: "open read-only",
            url: masked.to_string(),
            message: "an in-memory database has nothing to read".into(),
        })?;
        if !file.is_file() {
            return Err(StoreError::Other {
                op: "open read-only",
                url: masked.to_string(),
                message: format!("{} does not exist", file.display()),
            });
        }
        url = url
            .replace("mode=rwc", "mode=ro")
            .replace("mode=rw", "mode=ro");
        if !url.contains("mode=") {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("mode=ro");
        }
    } else if let Some(file) = &file {
        if !url.contains("mode=") {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("mode=rwc");
        }
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty())
            && !url.contains("mode=ro")
        {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Other {
                op: "connect",
                url: masked.to_string(),
                message: format!("creating {}: {e}", dir.display()),
            })?;
        }
    }
    Ok((url, file))
}

/// The pool's options: its size, and each connection's set-up (SQLite: the busy timeout and
/// full sync; Postgres: read-only sessions for a read-only store, and the server's limits on
/// waits, [`StoreOptions::server_wait_limit`]).
fn pool_options(backend: Backend, options: &StoreOptions, read_only: bool) -> AnyPoolOptions {
    let pool_options = AnyPoolOptions::new()
        .max_connections(options.max_connections.max(1))
        .min_connections(0)
        .acquire_timeout(options.acquire_timeout);
    let set_up = session_set_up(backend, options, read_only);
    if set_up.is_empty() {
        return pool_options;
    }
    pool_options.after_connect(move |conn, _meta| {
        let set_up = set_up.clone();
        Box::pin(async move {
            conn.execute(sqlx::AssertSqlSafe(set_up)).await?;
            Ok(())
        })
    })
}

/// The statements each new connection runs first.
fn session_set_up(backend: Backend, options: &StoreOptions, read_only: bool) -> String {
    match backend {
        Backend::Sqlite => format!(
            "PRAGMA busy_timeout = {}; PRAGMA synchronous = FULL;",
            options.busy_timeout.as_millis()
        ),
        Backend::Postgres => {
            let mut set_up = String::new();
            if read_only {
                set_up.push_str("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY;");
            }
            if let Some(limit) = options.server_wait_limit {
                let ms = limit.as_millis().max(1);
                set_up.push_str(&format!(
                    "SET statement_timeout = {ms}; SET idle_in_transaction_session_timeout = {ms};"
                ));
            }
            set_up
        }
    }
}

/// The pool, connected to `url`.
async fn connect_pool(
    pool_options: AnyPoolOptions,
    url: &str,
    masked: &str,
    options: &StoreOptions,
) -> Result<AnyPool> {
    let db = |error| StoreError::Database {
        op: "connect",
        url: masked.to_string(),
        error,
    };
    let connect_options = sqlx::any::AnyConnectOptions::from_str(url)
        .map_err(db)?
        .log_slow_statements(log::LevelFilter::Warn, options.slow_statement);
    match pool_options.connect_with(connect_options).await {
        Ok(pool) => Ok(pool),
        // sqlx retries until the acquire timeout and then keeps only "timed out"; one more
        // direct attempt says why (connection refused, authentication, unknown database).
        Err(sqlx::Error::PoolTimedOut) => {
            let cause = match tokio::time::timeout(
                Duration::from_secs(5),
                sqlx::AnyConnection::connect(url),
            )
            .await
            {
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(_)) => "it answered a later attempt".to_string(),
                Err(_) => "a further attempt got no answer within 5 s".to_string(),
            };
            Err(StoreError::Other {
                op: "connect",
                url: masked.to_string(),
                message: format!(
                    "no connection within {:?}: {cause}",
                    options.acquire_timeout
                ),
            })
        }
        Err(e) => Err(db(e)),
    }
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
        Self::open(url, options, Access::Migrate(migrate::latest_version())).await
    }

    /// Opens an existing store to read it only: no migration, no write (SQLite opens the file
    /// read-only, Postgres sessions are read-only), so a dashboard or a report never changes
    /// what the runs recorded. The store must already have this build's schema (any command
    /// that writes migrates it).
    pub async fn open_read_only(url: &str, options: &StoreOptions) -> Result<Store> {
        Self::open(url, options, Access::ReadOnly).await
    }

    /// Connects and applies the migrations up to `version` only: a store as an older build
    /// left it (for migration tests).
    #[cfg(feature = "testing")]
    pub async fn connect_at_version(url: &str, version: i64) -> Result<Store> {
        Self::open(url, &StoreOptions::default(), Access::Migrate(version)).await
    }

    async fn open(url: &str, options: &StoreOptions, access: Access) -> Result<Store> {
        let masked = mask_url(url);
        let backend = Backend::from_url(url).ok_or_else(|| StoreError::UnsupportedUrl {
            url: masked.clone(),
        })?;
        sqlx::any::install_default_drivers();

        let read_only = access == Access::ReadOnly;
        let (url, file) = if backend == Backend::Sqlite {
            sqlite_open_url(url, &masked, read_only)?
        } else {
            (url.to_string(), None)
        };
        let pool_options = pool_options(backend, options, read_only);
        let pool = connect_pool(pool_options, &url, &masked, options).await?;

        let store = Store {
            pool,
            backend,
            url: masked.as_str().into(),
            listen_url: (backend == Backend::Postgres).then(|| url.as_str().into()),
            failure_cap: options.failure_cap,
            read_only,
        };
        match access {
            Access::Migrate(up_to) => {
                if file.is_some() {
                    store.enable_wal(options.busy_timeout).await?;
                }
                migrate::migrate(&store.pool, backend, &masked, up_to).await?;
            }
            Access::ReadOnly => store.check_readable().await?,
        }
        Ok(store)
    }

    /// A store opened read-only must have been written, with this build's schema: nothing
    /// here migrates it.
    async fn check_readable(&self) -> Result<()> {
        let version = match migrate::schema_version(&self.pool).await {
            Ok(v) => v,
            // No table of versions (Postgres 42P01 undefined_table, SQLite "no such
            // table"): nothing has written the store; anything else (permission
            // denied, a broken connection) is said as it is.
            Err(sqlx::Error::Database(db))
                if db.code().as_deref() == Some("42P01")
                    || db.message().contains("no such table") =>
            {
                return Err(StoreError::Unwritten {
                    url: self.url.to_string(),
                });
            }
            Err(e) => {
                return Err(StoreError::Other {
                    op: "open read-only",
                    url: self.url.to_string(),
                    message: format!("not a status store (no schema version): {e}"),
                });
            }
        };
        let needed = migrate::latest_version();
        if version < needed {
            return Err(StoreError::Other {
                op: "open read-only",
                url: self.url.to_string(),
                message: format!(
                    "the store has schema version {version} and this build reads \
                     {needed}: migrate it first (any command that writes it, e.g. \
                     `driver report`)"
                ),
            });
        }
        Ok(())
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

    /// The pool's connections: how many are open and how many of those idle ("2 open, 0
    /// idle, of 2": every one is taken, by a write in flight or by sqlx returning one).
    pub fn connections(&self) -> String {
        format!(
            "{} open, {} idle, of {}",
            self.pool.size(),
            self.pool.num_idle(),
            self.pool.options().get_max_connections()
        )
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL, password masked.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether it was opened to read only ([`Store::open_read_only`]): a reader that would
    /// save what it derived (a report's judgement) leaves it unsaved then.
    pub fn is_read_only(&self) -> bool {
        self.read_only
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
    pub fn sink(
        &self,
        run_id: impl Into<crate::contract::RunId>,
        member_id: impl Into<crate::contract::MemberName>,
    ) -> StoreSink {
        StoreSink {
            store: self.clone(),
            run_id: run_id.into(),
            member_id: member_id.into(),
        }
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

    #[tokio::test]
    async fn a_call_within_a_limit_fails_or_goes_unanswered() {
        let limit = Duration::from_millis(20);
        let failed = within(
            limit,
            std::future::ready(Err::<(), _>(StoreError::UnsupportedUrl {
                url: "mysql://h/db".into(),
            })),
        )
        .await
        .unwrap_err();
        assert!(matches!(
            &failed,
            WithinError::Failed(StoreError::UnsupportedUrl { url }) if url == "mysql://h/db"
        ));
        assert_eq!(
            failed.to_string(),
            StoreError::UnsupportedUrl {
                url: "mysql://h/db".into()
            }
            .to_string()
        );
        let hung = within(limit, std::future::pending::<Result<()>>())
            .await
            .unwrap_err();
        assert!(matches!(hung, WithinError::NoAnswer(l) if l == limit));
        assert_eq!(
            hung.to_string(),
            "the status store did not answer within 20ms"
        );
        assert_eq!(
            within(limit, std::future::ready(Ok::<_, StoreError>(7)))
                .await
                .unwrap(),
            7
        );
    }
}
