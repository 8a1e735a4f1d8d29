//! Versioned, embedded migrations, one SQL file per version and backend under
//! `common/migrations/{sqlite,postgres}/`.
//!
//! Applied versions are recorded in `stress_schema_migrations` (version, name, checksum,
//! applied_at_ms). [`migrate`] first reads that table outside any transaction: when every known
//! version is there (the usual case of a second connect) it changes nothing. Otherwise it applies
//! the missing versions in ONE write transaction that first takes the database's write lock
//! (`BEGIN IMMEDIATE` on SQLite, a transaction-scoped advisory lock on Postgres), so several
//! processes connecting to a fresh database at once apply each migration exactly once. DDL is
//! transactional on both backends: a migration is applied completely or not at all.
//!
//! Why not sqlx's own migrator (`sqlx::migrate!`): on SQLite its lock is a no-op (sqlx-sqlite
//! 0.9, `Migrate::lock` returns at once), so the driver and its workers opening a new status file
//! together would each apply the first migration, and all but one fail; the store's tests race
//! four processes on a new file (`sqlite_concurrent_processes`). Its table (`_sqlx_migrations`)
//! would also leave every existing store's `stress_schema_migrations` to be carried over.
//!
//! Rules for new migrations: add a file per backend with the next version and append it to
//! [`MIGRATIONS`]; never edit an applied one (the checksum check refuses the database then), and
//! never drop or rewrite data, since a run must keep what it recorded.

use super::{Backend, Result, StoreError};
use sqlx::AnyPool;

pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

impl Migration {
    fn sql(&self, backend: Backend) -> &'static str {
        match backend {
            Backend::Sqlite => self.sqlite,
            Backend::Postgres => self.postgres,
        }
    }
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sqlite: include_str!("../../migrations/sqlite/0001_initial.sql"),
        postgres: include_str!("../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "model_counts",
        sqlite: include_str!("../../migrations/sqlite/0002_model_counts.sql"),
        postgres: include_str!("../../migrations/postgres/0002_model_counts.sql"),
    },
    Migration {
        version: 3,
        name: "capacity",
        sqlite: include_str!("../../migrations/sqlite/0003_capacity.sql"),
        postgres: include_str!("../../migrations/postgres/0003_capacity.sql"),
    },
    Migration {
        version: 4,
        name: "spike_rate",
        sqlite: include_str!("../../migrations/sqlite/0004_spike_rate.sql"),
        postgres: include_str!("../../migrations/postgres/0004_spike_rate.sql"),
    },
    Migration {
        version: 5,
        name: "slo_results",
        sqlite: include_str!("../../migrations/sqlite/0005_slo_results.sql"),
        postgres: include_str!("../../migrations/postgres/0005_slo_results.sql"),
    },
    Migration {
        version: 6,
        name: "baselines",
        sqlite: include_str!("../../migrations/sqlite/0006_baselines.sql"),
        postgres: include_str!("../../migrations/postgres/0006_baselines.sql"),
    },
    Migration {
        version: 7,
        name: "series",
        sqlite: include_str!("../../migrations/sqlite/0007_series.sql"),
        postgres: include_str!("../../migrations/postgres/0007_series.sql"),
    },
    Migration {
        version: 8,
        name: "trace_summaries",
        sqlite: include_str!("../../migrations/sqlite/0008_trace_summaries.sql"),
        postgres: include_str!("../../migrations/postgres/0008_trace_summaries.sql"),
    },
    Migration {
        version: 9,
        name: "failure_forensics",
        sqlite: include_str!("../../migrations/sqlite/0009_failure_forensics.sql"),
        postgres: include_str!("../../migrations/postgres/0009_failure_forensics.sql"),
    },
    Migration {
        version: 10,
        name: "log_excerpts",
        sqlite: include_str!("../../migrations/sqlite/0010_log_excerpts.sql"),
        postgres: include_str!("../../migrations/postgres/0010_log_excerpts.sql"),
    },
    Migration {
        version: 11,
        name: "run_leases",
        sqlite: include_str!("../../migrations/sqlite/0011_run_leases.sql"),
        postgres: include_str!("../../migrations/postgres/0011_run_leases.sql"),
    },
    Migration {
        version: 12,
        name: "send_lateness",
        sqlite: include_str!("../../migrations/sqlite/0012_send_lateness.sql"),
        postgres: include_str!("../../migrations/postgres/0012_send_lateness.sql"),
    },
    Migration {
        version: 13,
        name: "uncounted_runs",
        sqlite: include_str!("../../migrations/sqlite/0013_uncounted_runs.sql"),
        postgres: include_str!("../../migrations/postgres/0013_uncounted_runs.sql"),
    },
    Migration {
        version: 14,
        name: "documents",
        sqlite: include_str!("../../migrations/sqlite/0014_documents.sql"),
        postgres: include_str!("../../migrations/postgres/0014_documents.sql"),
    },
    Migration {
        version: 15,
        name: "run_fingerprints",
        sqlite: include_str!("../../migrations/sqlite/0015_run_fingerprints.sql"),
        postgres: include_str!("../../migrations/postgres/0015_run_fingerprints.sql"),
    },
    Migration {
        version: 16,
        name: "signature_counts",
        sqlite: include_str!("../../migrations/sqlite/0016_signature_counts.sql"),
        postgres: include_str!("../../migrations/postgres/0016_signature_counts.sql"),
    },
    Migration {
        version: 17,
        name: "failure_error_kind",
        sqlite: include_str!("../../migrations/sqlite/0017_failure_error_kind.sql"),
        postgres: include_str!("../../migrations/postgres/0017_failure_error_kind.sql"),
    },
    Migration {
        version: 18,
        name: "outages",
        sqlite: include_str!("../../migrations/sqlite/0018_outages.sql"),
        postgres: include_str!("../../migrations/postgres/0018_outages.sql"),
    },
    Migration {
        version: 19,
        name: "worker_rss",
        sqlite: include_str!("../../migrations/sqlite/0019_worker_rss.sql"),
        postgres: include_str!("../../migrations/postgres/0019_worker_rss.sql"),
    },
    Migration {
        version: 20,
        name: "deferred_clients",
        sqlite: include_str!("../../migrations/sqlite/0020_deferred_clients.sql"),
        postgres: include_str!("../../migrations/postgres/0020_deferred_clients.sql"),
    },
    Migration {
        version: 21,
        name: "unanswered_calls",
        sqlite: include_str!("../../migrations/sqlite/0021_unanswered_calls.sql"),
        postgres: include_str!("../../migrations/postgres/0021_unanswered_calls.sql"),
    },
    Migration {
        version: 22,
        name: "spans",
        sqlite: include_str!("../../migrations/sqlite/0022_spans.sql"),
        postgres: include_str!("../../migrations/postgres/0022_spans.sql"),
    },
    Migration {
        version: 23,
        name: "span_received",
        sqlite: include_str!("../../migrations/sqlite/0023_span_received.sql"),
        postgres: include_str!("../../migrations/postgres/0023_span_received.sql"),
    },
];

/// The key of the advisory lock that serialises migrations on Postgres ("stressmg" in ASCII).
const PG_MIGRATION_LOCK: i64 = 0x7374_7265_7373_6d67;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS stress_schema_migrations (
    version       BIGINT NOT NULL PRIMARY KEY,
    name          TEXT   NOT NULL,
    checksum      BIGINT NOT NULL,
    applied_at_ms BIGINT NOT NULL
)";

/// FNV-1a (64 bit) of the SQL text: stable across builds and platforms, enough to notice an edit.
fn checksum(sql: &str) -> i64 {
    let mut hash = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut hash, sql.as_bytes());
    std::hash::Hasher::finish(&hash) as i64
}

/// The highest applied version, 0 for an empty database.
pub(crate) async fn schema_version(pool: &AnyPool) -> std::result::Result<i64, sqlx::Error> {
    let applied: Vec<(i64, i64)> =
        sqlx::query_as("SELECT version, checksum FROM stress_schema_migrations")
            .fetch_all(pool)
            .await?;
    Ok(applied.iter().map(|(v, _)| *v).max().unwrap_or(0))
}

/// The newest migration this build knows.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Whether `applied` holds every known migration up to `up_to`; an error when one differs from
/// this build.
fn check_applied(applied: &[(i64, i64)], backend: Backend, url: &str, up_to: i64) -> Result<bool> {
    let mut complete = true;
    for migration in MIGRATIONS.iter().filter(|m| m.version <= up_to) {
        match applied.iter().find(|(v, _)| *v == migration.version) {
            Some((_, sum)) if *sum != checksum(migration.sql(backend)) => {
                return Err(StoreError::Migration {
                    url: url.to_string(),
                    message: format!(
                        "migration {} ({}) in the database differs from this build's; \
                         applied migrations must never be edited",
                        migration.version, migration.name
                    ),
                });
            }
            Some(_) => {}
            None => complete = false,
        }
    }
    if let Some(newest) = applied.iter().map(|(v, _)| *v).max() {
        let known = MIGRATIONS.iter().map(|m| m.version).max().unwrap_or(0);
        if newest > known {
            tracing::warn!(
                url,
                newest,
                known,
                "the status store was migrated by a newer build; using it as it is"
            );
        }
    }
    Ok(complete)
}

/// Whether the store has its migrations table (a new one has not).
async fn has_migrations_table(
    pool: &AnyPool,
    backend: Backend,
) -> std::result::Result<bool, sqlx::Error> {
    // A BIGINT on both: SQLite has no boolean type for the Any driver to decode.
    let query = match backend {
        Backend::Postgres => "SELECT count(to_regclass('stress_schema_migrations'))",
        Backend::Sqlite => {
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'stress_schema_migrations')"
        }
    };
    let found: i64 = sqlx::query_scalar(query).fetch_one(pool).await?;
    Ok(found != 0)
}

/// Applies the migrations this build knows up to version `up_to` (all: [`latest_version`]).
pub(crate) async fn migrate(pool: &AnyPool, backend: Backend, url: &str, up_to: i64) -> Result<()> {
    let db = |error| StoreError::Database {
        op: "migrate",
        url: url.to_string(),
        error,
    };

    // Fast path: nothing to do, so take no write lock at all. A new store has no table yet:
    // asked first, so that its server logs no error for every store a test or run creates.
    if has_migrations_table(pool, backend).await.unwrap_or(true)
        && let Ok(applied) = sqlx::query_as::<_, (i64, i64)>(
            "SELECT version, checksum FROM stress_schema_migrations",
        )
        .fetch_all(pool)
        .await
        && check_applied(&applied, backend, url, up_to)?
    {
        return Ok(());
    }

    let mut tx = match backend {
        Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await,
        Backend::Postgres => pool.begin().await,
    }
    .map_err(db)?;
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PG_MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
    }
    sqlx::raw_sql(CREATE_TABLE)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    let applied: Vec<(i64, i64)> =
        sqlx::query_as("SELECT version, checksum FROM stress_schema_migrations")
            .fetch_all(&mut *tx)
            .await
            .map_err(db)?;
    if check_applied(&applied, backend, url, up_to)? {
        // Another process got here first.
        return tx.commit().await.map_err(db);
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version <= up_to) {
        if applied.iter().any(|(v, _)| *v == migration.version) {
            continue;
        }
        let sql = migration.sql(backend);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .map_err(|error| StoreError::Migration {
                url: url.to_string(),
                message: format!(
                    "applying migration {} ({}): {error}",
                    migration.version, migration.name
                ),
            })?;
        sqlx::query(
            "INSERT INTO stress_schema_migrations (version, name, checksum, applied_at_ms)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(migration.version)
        .bind(migration.name)
        .bind(checksum(sql))
        .bind(crate::now_ms())
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tracing::info!(
            url,
            version = migration.version,
            name = migration.name,
            "applied status store migration"
        );
    }
    tx.commit().await.map_err(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new store is asked whether it has the table (no error for its server to log), and
    /// a migrated one has it.
    #[tokio::test]
    async fn a_new_store_has_no_migrations_table_and_a_migrated_one_has() {
        sqlx::any::install_default_drivers();
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        let has = || has_migrations_table(&pool, Backend::Sqlite);
        assert!(!has().await.unwrap());
        migrate(&pool, Backend::Sqlite, "sqlite::memory:", latest_version())
            .await
            .unwrap();
        assert!(has().await.unwrap());
    }

    #[test]
    fn versions_ascend_and_both_backends_have_sql() {
        let mut last = 0;
        for m in MIGRATIONS {
            assert!(m.version > last, "migration versions must ascend");
            last = m.version;
            assert!(!m.sqlite.trim().is_empty() && !m.postgres.trim().is_empty());
        }
    }

    #[test]
    fn checksum_is_stable() {
        // FNV-1a test vectors.
        assert_eq!(checksum("") as u64, 0xcbf2_9ce4_8422_2325);
        assert_eq!(checksum("a") as u64, 0xaf63_dc4c_8601_ec8c);
    }
}
