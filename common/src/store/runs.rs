//! Runs, their leases and members, and the baselines pinned by name.

use super::*;
use crate::contract::{MemberName, RunId};

/// Every table that holds a run's rows by `run_id` (the run itself last): what
/// [`Store::delete_run`] removes. The store tests hold it to the schema, so a migration's new
/// table is pruned too.
pub const RUN_TABLES: &[&str] = &[
    "members",
    "events",
    "heartbeats",
    "qps_samples",
    "latest_qps",
    "scenario_counts",
    "failures",
    "failure_totals",
    "diagnostics",
    "model_counts",
    "load_targets",
    "capacity_phases",
    "slo_results",
    "baselines",
    "comparisons",
    "latency_intervals",
    "server_samples",
    "trace_summaries",
    "log_excerpts",
    "documents",
    "signature_counts",
    "outages",
    "client_spans",
    "server_spans",
    "runs",
];

impl Store {
    // ---- runs ------------------------------------------------------------------------------

    pub async fn create_run(&self, run: &NewRun) -> Result<()> {
        sqlx::query(
            // A driver restarted with the same run id continues that run: nothing recorded
            // is replaced.
            "INSERT INTO runs (run_id, name, matrix_yaml, launcher, started_at_ms, fingerprint)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run_id) DO NOTHING",
        )
        .bind(&run.run_id)
        .bind(&run.name)
        .bind(&run.matrix_yaml)
        .bind(&run.launcher)
        .bind(run.started_at_ms)
        .bind(run.fingerprint.as_deref())
        .execute(&self.pool)
        .await
        .map_err(self.db("create_run"))?;
        Ok(())
    }

    /// Records the verdict; an error when the run does not exist.
    pub async fn finish_run(
        &self,
        run_id: &RunId,
        verdict: &str,
        finished_at_ms: i64,
    ) -> Result<()> {
        let done =
            sqlx::query("UPDATE runs SET verdict = $2, finished_at_ms = $3 WHERE run_id = $1")
                .bind(run_id.as_str())
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
    pub async fn renew_lease(&self, run_id: &RunId, until_ms: i64) -> Result<()> {
        sqlx::query("UPDATE runs SET lease_until_ms = $2 WHERE run_id = $1 AND verdict IS NULL")
            .bind(run_id.as_str())
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
                &RunId::new(run.run_id.clone()),
                &MemberName::new("driver"),
                EventKind::Failure,
                &crate::status::DriverFailure::Died.details(&format!(
                    "the driver's lease ran out without a verdict (it was killed or lost its \
                     node); `driver cleanup --run {}` removes what it left",
                    run.run_id
                )),
            )
            .await?;
            run.verdict = Some(ABANDONED.into());
            run.finished_at_ms = Some(ended);
            abandoned.push(run);
        }
        Ok(abandoned)
    }

    const RUN_COLUMNS: &str = "run_id, name, matrix_yaml, launcher, started_at_ms, finished_at_ms, verdict, lease_until_ms, fingerprint";

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
            fingerprint: row.try_get(8)?,
        })
    }

    pub async fn run(&self, run_id: &RunId) -> Result<Option<RunRow>> {
        let sql = format!("SELECT {} FROM runs WHERE run_id = $1", Self::RUN_COLUMNS);
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(run_id.as_str())
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

    /// The runs not finished (running, or whose driver vanished before a `driver cleanup` or
    /// another run marked them), newest first.
    pub async fn unfinished_runs(&self) -> Result<Vec<RunRow>> {
        let sql = format!(
            "SELECT {} FROM runs WHERE finished_at_ms IS NULL
             ORDER BY started_at_ms DESC, run_id DESC",
            Self::RUN_COLUMNS
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(self.db("unfinished_runs"))?;
        rows.iter()
            .map(Self::run_row)
            .collect::<std::result::Result<_, _>>()
            .map_err(self.db("unfinished_runs"))
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
    pub async fn members(&self, run_id: &RunId) -> Result<Vec<Member>> {
        let rows: Vec<MemberRow> = sqlx::query_as(
            "SELECT member_id, role, group_name, member_index, address, process_name,
                    corr_id_base, corr_id_block_size, command
             FROM members WHERE run_id = $1
             ORDER BY group_name, member_index, member_id",
        )
        .bind(run_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("members"))?;
        rows.into_iter()
            .map(
                |MemberRow {
                     member_id,
                     role,
                     group_name,
                     member_index: index,
                     address,
                     process_name,
                     corr_id_base: base,
                     corr_id_block_size: size,
                     command,
                 }| {
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

    /// Deletes a run and everything recorded for it ([`RUN_TABLES`], its pin as a baseline
    /// included), in one transaction. Returns how many rows went.
    pub async fn delete_run(&self, run_id: &RunId) -> Result<u64> {
        let mut tx = self.begin_write("delete_run").await?;
        let mut rows = 0;
        for table in RUN_TABLES {
            rows += sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE run_id = $1"
            )))
            .bind(run_id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(self.db("delete_run"))?
            .rows_affected();
        }
        tx.commit().await.map_err(self.db("delete_run"))?;
        Ok(rows)
    }

    // ---- baselines and regressions -----------------------------------------------------------

    /// Pins `run_id` as the baseline of runs named `name` (replaces an earlier pin).
    pub async fn pin_baseline(&self, name: &str, run_id: &RunId) -> Result<()> {
        sqlx::query(
            "INSERT INTO baselines (name, run_id, pinned_at_ms) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET
                 run_id = excluded.run_id, pinned_at_ms = excluded.pinned_at_ms",
        )
        .bind(name)
        .bind(run_id.as_str())
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
}

/// A row of `members` as [`Store::members`] reads it.
#[derive(sqlx::FromRow)]
struct MemberRow {
    member_id: String,
    role: String,
    group_name: String,
    member_index: i64,
    address: String,
    process_name: String,
    corr_id_base: Option<i64>,
    corr_id_block_size: Option<i64>,
    command: String,
}
