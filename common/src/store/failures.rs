//! Failure records (capped per member) and their totals.

use super::*;
use crate::contract::{MemberName, RunId};
use crate::signature::{ErrorKind, SignatureCount};

/// A row of `failures` as [`Store::failures_page`] reads it.
#[derive(sqlx::FromRow)]
struct FailureRow {
    id: i64,
    member_id: String,
    at_ms: i64,
    scenario: String,
    server: String,
    model: String,
    correlation_id: Option<i64>,
    expected: String,
    actual: String,
    forensics: Option<String>,
    error_kind: Option<String>,
}

impl Store {
    // ---- failures --------------------------------------------------------------------------

    /// Counts the failure and keeps its record while the member has fewer than
    /// [`Store::failure_cap`] records; returns whether it was kept.
    pub async fn record_failure(
        &self,
        run_id: &RunId,
        member_id: &MemberName,
        failure: &FailureRecord,
    ) -> Result<bool> {
        const OP: &str = "record_failure";
        let mut tx = self.begin_write(OP).await?;
        let total: i64 = sqlx::query_scalar(
            "INSERT INTO failure_totals (run_id, member_id, total) VALUES ($1, $2, 1)
             ON CONFLICT (run_id, member_id) DO UPDATE SET total = failure_totals.total + 1
             RETURNING total",
        )
        .bind(run_id.as_str())
        .bind(member_id.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(self.db(OP))?;
        let keep = from_db(total) <= self.failure_cap;
        if keep {
            sqlx::query(
                "INSERT INTO failures (run_id, member_id, at_ms, scenario, server, model,
                                       correlation_id, expected, actual, forensics,
                                       error_kind)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )
            .bind(run_id.as_str())
            .bind(member_id.as_str())
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
            .bind(failure.error_kind.map(|k| k.as_str()))
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        }
        tx.commit().await.map_err(self.db(OP))?;
        Ok(keep)
    }

    /// Every failure record of the run (the first [`StoreOptions::failure_cap`] per member), in
    /// the order they were recorded.
    pub async fn failures(&self, run_id: &RunId) -> Result<Vec<(String, FailureRecord)>> {
        Ok(self
            .failures_after(run_id, 0)
            .await?
            .into_iter()
            .map(|(_, member, record)| (member, record))
            .collect())
    }

    /// The run's failure records after the one with id `after_id` (0: all), with their ids, in
    /// the order they were recorded: what a poller has not seen yet.
    pub async fn failures_after(
        &self,
        run_id: &RunId,
        after_id: i64,
    ) -> Result<Vec<(i64, String, FailureRecord)>> {
        self.failures_page(run_id, after_id, i64::MAX).await
    }

    /// At most `limit` of the run's failure records after the one with id `after_id`, with
    /// their ids, in the order they were recorded: one page of a long list.
    pub async fn failures_page(
        &self,
        run_id: &RunId,
        after_id: i64,
        limit: i64,
    ) -> Result<Vec<(i64, String, FailureRecord)>> {
        const OP: &str = "failures";
        let rows: Vec<FailureRow> = sqlx::query_as(
            "SELECT id, member_id, at_ms, scenario, server, model, correlation_id, expected,
                    actual, forensics, error_kind
             FROM failures WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(run_id.as_str())
        .bind(after_id)
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;
        rows.into_iter()
            .map(|row| {
                let FailureRow {
                    id,
                    member_id,
                    at_ms,
                    scenario,
                    server,
                    model,
                    correlation_id,
                    expected,
                    actual,
                    forensics,
                    error_kind,
                } = row;
                let error_kind = error_kind
                    .map(|k| {
                        ErrorKind::parse(&k).ok_or_else(|| {
                            self.corrupt(OP, format!("a failure's error kind {k:?}"))
                        })
                    })
                    .transpose()?;
                let forensics = forensics
                    .map(|f| serde_json::from_str(&f))
                    .transpose()
                    .map_err(|e| self.corrupt(OP, format!("forensics of a failure: {e}")))?;
                Ok((
                    id,
                    member_id,
                    FailureRecord {
                        at_ms,
                        scenario,
                        server,
                        model,
                        correlation_id: correlation_id.map(from_db),
                        expected,
                        actual,
                        error_kind,
                        forensics,
                    },
                ))
            })
            .collect()
    }

    /// Every worker's failures per signature, as its last snapshot counted them: (member,
    /// count), by member and signature id.
    pub async fn signature_counts(&self, run_id: &RunId) -> Result<Vec<(String, SignatureCount)>> {
        self.signature_counts_of(run_id, ALL_MEMBERS).await
    }

    /// [`Store::signature_counts`] of one member (`ALL_MEMBERS`: every one).
    pub(super) async fn signature_counts_of(
        &self,
        run_id: &RunId,
        member: &str,
    ) -> Result<Vec<(String, SignatureCount)>> {
        const OP: &str = "signature_counts";
        let rows: Vec<(String, String, i64, i64, i64)> = sqlx::query_as(
            "SELECT member_id, details, count, first_at_ms, last_at_ms FROM signature_counts
             WHERE run_id = $1 AND ($2 = '' OR member_id = $2) ORDER BY member_id, signature_id",
        )
        .bind(run_id.as_str())
        .bind(member)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;
        rows.into_iter()
            .map(|(member, details, count, first_at_ms, last_at_ms)| {
                let signature = serde_json::from_str(&details)
                    .map_err(|e| self.corrupt(OP, format!("a signature of {member}: {e}")))?;
                Ok((
                    member,
                    SignatureCount {
                        signature,
                        count: from_db(count),
                        first_at_ms,
                        last_at_ms,
                    },
                ))
            })
            .collect()
    }

    /// (member_id, failures reported) per member, kept or not, by member id. A member reported
    /// `total - kept` more failures than [`Store::failures`] shows.
    pub async fn failure_totals(&self, run_id: &RunId) -> Result<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT member_id, total FROM failure_totals WHERE run_id = $1 ORDER BY member_id",
        )
        .bind(run_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("failure_totals"))?;
        Ok(rows.into_iter().map(|(m, t)| (m, from_db(t))).collect())
    }
}
