//! Capacity mode's live channel: the load each worker is asked for.

use super::*;
use crate::contract::{MemberName, RunId};

impl Store {
    // ---- capacity mode ---------------------------------------------------------------------

    /// Sets the load the capacity controller asks of a worker (replaces).
    pub async fn set_load_target(
        &self,
        run_id: &RunId,
        member_id: &MemberName,
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
        .bind(run_id.as_str())
        .bind(member_id.as_str())
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
    pub async fn load_target(
        &self,
        run_id: &RunId,
        member_id: &MemberName,
    ) -> Result<Option<LoadTarget>> {
        let row: Option<(i64, Option<String>, f64, i64)> = sqlx::query_as(
            "SELECT concurrency, mix, rate, count_unanswered FROM load_targets
             WHERE run_id = $1 AND member_id = $2",
        )
        .bind(run_id.as_str())
        .bind(member_id.as_str())
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
}
