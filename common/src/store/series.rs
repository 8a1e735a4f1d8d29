//! What workers and the sampler write over time: snapshots (counts, histograms, QPS points,
//! latency intervals) and the servers' samples, and the reads that aggregate them.

use super::*;
use crate::contract::{MemberName, RunId};

/// The operation [`Store::record_snapshot`]'s errors name.
const RECORD_SNAPSHOT: &str = "record_snapshot";

/// A foreign program's hello, saved per member with its worker's snapshots: the report says
/// which client ran. (Here, not in `foreign`: that module stays below the store.)
impl Document for crate::foreign::Hello {
    const KIND: &'static str = "client_program";
}

/// The run and member a snapshot's rows belong to, and the time they carry.
struct SnapshotKey<'a> {
    run_id: &'a RunId,
    member_id: &'a MemberName,
    at_ms: i64,
}

impl Store {
    // ---- snapshots -------------------------------------------------------------------------

    /// In one transaction: replaces the member's latest QPS sample (and appends it to the
    /// series when `snapshot.series_point`), replaces its cumulative per-scenario counts,
    /// appends the latency intervals it closes and the outages it carries, saves its client
    /// program's hello (a `client_program` document), and sets its heartbeat (all at `snapshot.at_ms`, or now when that is 0). What it replaces is never
    /// taken back in time: a snapshot older than the one stored leaves it (a write delayed past
    /// a newer one, as one a paused store commits on resuming after its client gave up on it),
    /// and one already stored (the same write retried) adds nothing.
    pub async fn record_snapshot(
        &self,
        run_id: &RunId,
        member_id: &MemberName,
        snapshot: &WorkerSnapshot,
    ) -> Result<()> {
        let at_ms = if snapshot.at_ms > 0 {
            snapshot.at_ms
        } else {
            crate::now_ms()
        };
        let key = SnapshotKey {
            run_id,
            member_id,
            at_ms,
        };
        let mut tx = self.begin_write(RECORD_SNAPSHOT).await?;
        if self.already_recorded(&mut tx, &key, snapshot).await? {
            return tx.commit().await.map_err(self.db(RECORD_SNAPSHOT));
        }
        self.write_qps(&mut tx, &key, snapshot).await?;
        self.write_scenario_counts(&mut tx, &key, snapshot).await?;
        self.write_model_counts(&mut tx, &key, snapshot).await?;
        self.append_intervals(&mut tx, &key, snapshot).await?;
        self.append_outages(&mut tx, &key, snapshot).await?;
        self.append_client_spans(&mut tx, run_id, member_id, &snapshot.client_spans)
            .await?;
        if let Some(program) = &snapshot.client_program {
            self.upsert_document(&mut *tx, run_id, member_id.as_str(), program)
                .await?;
        }
        sqlx::query(Self::HEARTBEAT)
            .bind(run_id.as_str())
            .bind(member_id.as_str())
            .bind(at_ms)
            .execute(&mut *tx)
            .await
            .map_err(self.db(RECORD_SNAPSHOT))?;
        self.write_signature_counts(&mut tx, &key, snapshot).await?;
        tx.commit().await.map_err(self.db(RECORD_SNAPSHOT))
    }

    /// Whether this very snapshot is stored already: a write retried after its commit's answer
    /// was lost (the worker's outbox gives up on a write after 5 s, and the commit may have
    /// landed). Appending it again would count its intervals twice. The member's latest sample
    /// with the snapshot's time, total and QPS is this one (a worker's snapshots each have a
    /// time of their own).
    async fn already_recorded(
        &self,
        tx: &mut Transaction<'static, Any>,
        key: &SnapshotKey<'_>,
        snapshot: &WorkerSnapshot,
    ) -> Result<bool> {
        let latest: Option<(i64, i64, f64)> = sqlx::query_as(
            "SELECT at_ms, total_requests, qps FROM latest_qps WHERE run_id = $1 AND member_id = $2",
        )
        .bind(key.run_id.as_str())
        .bind(key.member_id.as_str())
        .fetch_optional(&mut **tx)
        .await
        .map_err(self.db(RECORD_SNAPSHOT))?;
        let this = (
            key.at_ms,
            to_db(snapshot.total_requests),
            finite_or_zero(snapshot.qps),
        );
        Ok(latest == Some(this))
    }

    /// The snapshot's QPS sample: the member's latest, and a point of its series when it is one.
    async fn write_qps(
        &self,
        tx: &mut Transaction<'static, Any>,
        key: &SnapshotKey<'_>,
        snapshot: &WorkerSnapshot,
    ) -> Result<()> {
        let unanswered = if snapshot.unanswered.is_empty() {
            String::new()
        } else {
            serde_json::to_string(&snapshot.unanswered).expect("plain data serialises")
        };
        // The sample replaces the member's latest (what the driver polls), and joins the
        // series when it is one of its points (one per series interval, and the last).
        const SERIES: &str =
            "INSERT INTO qps_samples (run_id, member_id, at_ms, qps, total_requests, rss_bytes)
             VALUES ($1, $2, $3, $4, $5, $6)";
        const LATEST: &str =
            "INSERT INTO latest_qps (run_id, member_id, at_ms, qps, total_requests,
                                     deferred_clients, unanswered)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (run_id, member_id) DO UPDATE SET
                 at_ms = excluded.at_ms, qps = excluded.qps,
                 total_requests = excluded.total_requests,
                 deferred_clients = excluded.deferred_clients,
                 unanswered = excluded.unanswered
             WHERE latest_qps.at_ms <= excluded.at_ms";
        let statements: &[&'static str] = if snapshot.series_point {
            &[SERIES, LATEST]
        } else {
            &[LATEST]
        };
        for &sql in statements {
            let query = sqlx::query(sql)
                .bind(key.run_id.as_str())
                .bind(key.member_id.as_str())
                .bind(key.at_ms)
                .bind(finite_or_zero(snapshot.qps))
                .bind(to_db(snapshot.total_requests));
            let query = if sql == SERIES {
                query.bind(snapshot.rss_bytes.map(to_db))
            } else {
                query
                    .bind(i64::from(snapshot.deferred_clients))
                    .bind(unanswered.as_str())
            };
            query
                .execute(&mut **tx)
                .await
                .map_err(self.db(RECORD_SNAPSHOT))?;
        }
        Ok(())
    }

    /// The member's cumulative per-scenario counts, unless newer ones are stored.
    async fn write_scenario_counts(
        &self,
        tx: &mut Transaction<'static, Any>,
        key: &SnapshotKey<'_>,
        snapshot: &WorkerSnapshot,
    ) -> Result<()> {
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
                     send_lateness_histogram = excluded.send_lateness_histogram
                 WHERE scenario_counts.updated_at_ms <= excluded.updated_at_ms",
            )
            .bind(key.run_id.as_str())
            .bind(key.member_id.as_str())
            .bind(&counts.scenario)
            .bind(to_db(counts.tests))
            .bind(to_db(counts.failures))
            .bind(to_db(counts.requests))
            .bind(to_db(counts.skipped))
            .bind(&counts.latency_histogram)
            .bind(key.at_ms)
            .bind(Some(&counts.send_lateness_histogram).filter(|h| !h.is_empty()))
            .execute(&mut **tx)
            .await
            .map_err(self.db(RECORD_SNAPSHOT))?;
        }
        Ok(())
    }

    /// The member's cumulative per-model counts, unless newer ones are stored.
    async fn write_model_counts(
        &self,
        tx: &mut Transaction<'static, Any>,
        key: &SnapshotKey<'_>,
        snapshot: &WorkerSnapshot,
    ) -> Result<()> {
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
                     uncounted_runs = excluded.uncounted_runs
                 WHERE model_counts.updated_at_ms <= excluded.updated_at_ms",
            )
            .bind(key.run_id.as_str())
            .bind(key.member_id.as_str())
            .bind(&counts.scenario)
            .bind(&counts.model)
            .bind(to_db(counts.tests))
            .bind(to_db(counts.failures))
            .bind(to_db(counts.requests))
            .bind(&counts.latency_histogram)
            .bind(stream)
            .bind(key.at_ms)
            .bind(to_db(counts.uncounted_runs))
            .execute(&mut **tx)
            .await
            .map_err(self.db(RECORD_SNAPSHOT))?;
        }
        Ok(())
    }

    /// The latency intervals the snapshot closes.
    async fn append_intervals(
        &self,
        tx: &mut Transaction<'static, Any>,
        key: &SnapshotKey<'_>,
        snapshot: &WorkerSnapshot,
    ) -> Result<()> {
        for i in &snapshot.intervals {
            sqlx::query(
                "INSERT INTO latency_intervals (run_id, member_id, scenario, model, start_ms,
                                                end_ms, requests, failures, latency_histogram)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(key.run_id.as_str())
            .bind(key.member_id.as_str())
            .bind(&i.scenario)
            .bind(&i.model)
            .bind(i.start_ms)
            .bind(i.end_ms)
            .bind(to_db(i.requests))
            .bind(to_db(i.failures))
            .bind(&i.latency_histogram)
            .execute(&mut **tx)
            .await
            .map_err(self.db(RECORD_SNAPSHOT))?;
        }
        Ok(())
    }

    /// The outages the snapshot carries.
    async fn append_outages(
        &self,
        tx: &mut Transaction<'static, Any>,
        key: &SnapshotKey<'_>,
        snapshot: &WorkerSnapshot,
    ) -> Result<()> {
        for o in &snapshot.outages {
            sqlx::query(
                "INSERT INTO outages (run_id, member_id, server, last_ok_ms, first_failure_ms,
                                      first_ok_ms, failed_tests, failed_sequences)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(key.run_id.as_str())
            .bind(key.member_id.as_str())
            .bind(&o.server)
            .bind(o.last_ok_ms)
            .bind(o.first_failure_ms)
            .bind(o.first_ok_ms)
            .bind(to_db(o.failed_tests))
            .bind(to_db(o.failed_sequences))
            .execute(&mut **tx)
            .await
            .map_err(self.db(RECORD_SNAPSHOT))?;
        }
        Ok(())
    }

    /// The member's failure signature counts, unless higher ones are stored.
    async fn write_signature_counts(
        &self,
        tx: &mut Transaction<'static, Any>,
        key: &SnapshotKey<'_>,
        snapshot: &WorkerSnapshot,
    ) -> Result<()> {
        for c in &snapshot.signatures {
            sqlx::query(
                "INSERT INTO signature_counts (run_id, member_id, signature_id, details, count,
                                               first_at_ms, last_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (run_id, member_id, signature_id) DO UPDATE SET
                     count = excluded.count, first_at_ms = excluded.first_at_ms,
                     last_at_ms = excluded.last_at_ms
                 WHERE signature_counts.count <= excluded.count",
            )
            .bind(key.run_id.as_str())
            .bind(key.member_id.as_str())
            .bind(c.signature.id())
            .bind(serde_json::to_string(&c.signature).expect("plain data serialises"))
            .bind(to_db(c.count))
            .bind(c.first_at_ms)
            .bind(c.last_at_ms)
            .execute(&mut **tx)
            .await
            .map_err(self.db(RECORD_SNAPSHOT))?;
        }
        Ok(())
    }

    /// The run's latency intervals ending in `[from_ms, to_ms]` (every worker, scenario and
    /// model), by end time: merge their histograms for exact percentiles over the window.
    pub async fn latency_intervals(
        &self,
        run_id: &RunId,
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
    pub async fn latency_interval_width(&self, run_id: &RunId) -> Result<Option<i64>> {
        const OP: &str = "latency_interval_width";
        let (n,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM latency_intervals WHERE run_id = $1 AND end_ms > start_ms",
        )
        .bind(run_id.as_str())
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
        .bind(run_id.as_str())
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
        run_id: &RunId,
        from_ms: i64,
        to_ms: i64,
        mut visit: impl FnMut(String, IntervalCounts),
    ) -> Result<()> {
        use futures::TryStreamExt;
        let mut rows = sqlx::query_as::<_, IntervalRow>(
            "SELECT member_id, scenario, model, start_ms, end_ms, requests, failures,
                    latency_histogram
             FROM latency_intervals WHERE run_id = $1 AND end_ms >= $2 AND end_ms <= $3
             ORDER BY end_ms, id",
        )
        .bind(run_id.as_str())
        .bind(from_ms)
        .bind(to_ms)
        .fetch(&self.pool);
        while let Some(row) = rows
            .try_next()
            .await
            .map_err(self.db("latency_intervals"))?
        {
            visit(
                row.member_id,
                IntervalCounts {
                    scenario: row.scenario,
                    model: row.model,
                    start_ms: row.start_ms,
                    end_ms: row.end_ms,
                    requests: from_db(row.requests),
                    failures: from_db(row.failures),
                    latency_histogram: row.latency_histogram,
                },
            );
        }
        Ok(())
    }

    /// Every outage the run's workers reported ([`Outage`]), as (member, outage), in the order
    /// they were recorded (each worker's in the order it saw them end).
    pub async fn outages(&self, run_id: &RunId) -> Result<Vec<(String, Outage)>> {
        Ok(self
            .outages_after(run_id, 0)
            .await?
            .into_iter()
            .map(|(_, member, outage)| (member, outage))
            .collect())
    }

    /// The outages recorded after the one with id `after_id` (0: from the first), each with its
    /// id, in the order recorded: a reader that keeps what it read asks only for what is new.
    pub async fn outages_after(
        &self,
        run_id: &RunId,
        after_id: i64,
    ) -> Result<Vec<(i64, String, Outage)>> {
        let rows: Vec<OutageRow> = sqlx::query_as(
            "SELECT id, member_id, server, last_ok_ms, first_failure_ms, first_ok_ms,
                    failed_tests, failed_sequences
             FROM outages WHERE run_id = $1 AND id > $2 ORDER BY id",
        )
        .bind(run_id.as_str())
        .bind(after_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("outages"))?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let outage = Outage {
                    server: row.server,
                    last_ok_ms: row.last_ok_ms,
                    first_failure_ms: row.first_failure_ms,
                    first_ok_ms: row.first_ok_ms,
                    failed_tests: from_db(row.failed_tests),
                    failed_sequences: from_db(row.failed_sequences),
                };
                (row.id, row.member_id, outage)
            })
            .collect())
    }

    // ---- server samples --------------------------------------------------------------------

    /// Appends one server's sample (its metrics over an interval).
    pub async fn record_server_sample(
        &self,
        run_id: &RunId,
        member_id: &MemberName,
        sample: &ServerSample,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO server_samples (run_id, member_id, at_ms, details) VALUES ($1, $2, $3, $4)",
        )
        .bind(run_id.as_str())
        .bind(member_id.as_str())
        .bind(sample.at_ms)
        .bind(serde_json::to_string(sample).expect("plain data serialises"))
        .execute(&self.pool)
        .await
        .map_err(self.db("record_server_sample"))?;
        Ok(())
    }

    /// Every server sample of the run, by time.
    pub async fn server_samples(&self, run_id: &RunId) -> Result<Vec<(String, ServerSample)>> {
        self.member_json(
            "server_samples",
            "SELECT member_id, details FROM server_samples WHERE run_id = $1 ORDER BY at_ms, id",
            run_id,
        )
        .await
    }

    /// Every QPS sample of the run, by time (then insertion).
    /// Each worker's own resident memory at the points of its QPS series that carry it:
    /// (member, at_ms, bytes), in time order.
    pub async fn worker_rss(&self, run_id: &RunId) -> Result<Vec<(String, i64, u64)>> {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT member_id, at_ms, rss_bytes FROM qps_samples
             WHERE run_id = $1 AND rss_bytes IS NOT NULL ORDER BY at_ms, id",
        )
        .bind(run_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("worker_rss"))?;
        Ok(rows
            .into_iter()
            .map(|(m, at, rss)| (m, at, rss.max(0) as u64))
            .collect())
    }

    pub async fn qps_samples(&self, run_id: &RunId) -> Result<Vec<QpsSample>> {
        self.fetch_qps(
            "qps_samples",
            "SELECT member_id, at_ms, qps, total_requests FROM qps_samples
             WHERE run_id = $1 ORDER BY at_ms, id",
            run_id,
        )
        .await
    }

    /// What [`crate::qps::load_seconds`] needs of the run's QPS samples, aggregated in the
    /// database: `QpsSpan::of(&store.qps_samples(run))` and when the first latency interval
    /// started, in four small queries whatever the run's length.
    pub async fn qps_span(&self, run_id: &RunId) -> Result<crate::qps::QpsSpan> {
        const OP: &str = "qps_span";
        let (first_ms, last_ms): (Option<i64>, Option<i64>) =
            sqlx::query_as("SELECT MIN(at_ms), MAX(at_ms) FROM qps_samples WHERE run_id = $1")
                .bind(run_id.as_str())
                .fetch_one(&self.pool)
                .await
                .map_err(self.db(OP))?;
        let first_with_two: Option<(String,)> = sqlx::query_as(
            "SELECT member_id FROM qps_samples WHERE run_id = $1
             GROUP BY member_id HAVING COUNT(*) >= 2 ORDER BY member_id LIMIT 1",
        )
        .bind(run_id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db(OP))?;
        let interval_ms = match first_with_two {
            Some((member_id,)) => {
                let at: Vec<(i64,)> = sqlx::query_as(
                    "SELECT at_ms FROM qps_samples WHERE run_id = $1 AND member_id = $2
                     ORDER BY at_ms LIMIT 2",
                )
                .bind(run_id.as_str())
                .bind(&member_id)
                .fetch_all(&self.pool)
                .await
                .map_err(self.db(OP))?;
                (at.len() == 2).then(|| at[1].0 - at[0].0)
            }
            None => None,
        };
        let (sending_since_ms,): (Option<i64>,) =
            sqlx::query_as("SELECT MIN(start_ms) FROM latency_intervals WHERE run_id = $1")
                .bind(run_id.as_str())
                .fetch_one(&self.pool)
                .await
                .map_err(self.db(OP))?;
        Ok(crate::qps::QpsSpan {
            first_ms,
            last_ms,
            interval_ms,
            sending_since_ms,
        })
    }

    /// Each member's QPS series summarised in the database, by member id: its statistics and
    /// at most `points` points ([`QpsSummary`]). One scan of the run's series and a grouping
    /// (no join, so no plan that rescans the series per member), whatever its length; what
    /// comes back is bounded by members × `points`.
    /// `span`: the run's [`Store::qps_span`], which the caller has read already.
    pub async fn qps_summaries(
        &self,
        run_id: &RunId,
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
        .bind(run_id.as_str())
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
    pub async fn latest_qps(&self, run_id: &RunId) -> Result<Vec<QpsSample>> {
        let rows: Vec<(String, i64, f64, i64, i64, String)> = sqlx::query_as(
            "SELECT member_id, at_ms, qps, total_requests, deferred_clients, unanswered
             FROM latest_qps WHERE run_id = $1 ORDER BY member_id",
        )
        .bind(run_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("latest_qps"))?;
        Ok(rows
            .into_iter()
            .map(
                |(member_id, at_ms, qps, total_requests, deferred, unanswered)| QpsSample {
                    member_id,
                    at_ms,
                    qps,
                    total_requests: from_db(total_requests),
                    deferred_clients: u32::try_from(deferred).unwrap_or(0),
                    // Written by this code only; an unreadable value reads as none (the
                    // rule that uses it then judges by QPS alone).
                    unanswered: if unanswered.is_empty() {
                        Vec::new()
                    } else {
                        serde_json::from_str(&unanswered).unwrap_or_default()
                    },
                },
            )
            .collect())
    }

    /// Runs a query selecting (member_id, at_ms, qps, total_requests) for one run.
    async fn fetch_qps(
        &self,
        op: &'static str,
        sql: &'static str,
        run_id: &RunId,
    ) -> Result<Vec<QpsSample>> {
        let rows: Vec<(String, i64, f64, i64)> = sqlx::query_as(sql)
            .bind(run_id.as_str())
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
                deferred_clients: 0,
                unanswered: vec![],
            })
            .collect())
    }

    /// What `member` has reported so far, as its latest snapshot left it (see
    /// [`crate::status::carry`]): empty for a member that has written none. Its rows only: a
    /// worker of a large run asks this at its start.
    pub async fn reported(
        &self,
        run_id: &RunId,
        member: &MemberName,
    ) -> Result<crate::status::carry::Reported> {
        let member = member.as_str();
        let total_requests = self
            .latest_qps(run_id)
            .await?
            .into_iter()
            .find(|s| s.member_id == member)
            .map_or(0, |s| s.total_requests);
        let scenarios = self.scenario_counts_of(run_id, member).await?;
        let models = self.model_counts_of(run_id, member).await?;
        let signatures = self.signature_counts_of(run_id, member).await?;
        Ok(crate::status::carry::Reported {
            total_requests,
            scenarios: scenarios.into_iter().map(|(_, c)| c).collect(),
            models: models.into_iter().map(|(_, _, c)| c).collect(),
            signatures: signatures.into_iter().map(|(_, c)| c).collect(),
        })
    }

    /// The latest cumulative counts of every (member, scenario), by member then scenario.
    pub async fn scenario_counts(&self, run_id: &RunId) -> Result<Vec<(String, ScenarioCounts)>> {
        self.scenario_counts_of(run_id, ALL_MEMBERS).await
    }

    /// [`Store::scenario_counts`] of one member (`ALL_MEMBERS`: every one).
    async fn scenario_counts_of(
        &self,
        run_id: &RunId,
        member: &str,
    ) -> Result<Vec<(String, ScenarioCounts)>> {
        let rows: Vec<ScenarioRow> = sqlx::query_as(
            "SELECT member_id, scenario, tests, failures, requests, skipped, latency_histogram,
                    send_lateness_histogram
             FROM scenario_counts WHERE run_id = $1 AND ($2 = '' OR member_id = $2)
             ORDER BY member_id, scenario",
        )
        .bind(run_id.as_str())
        .bind(member)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("scenario_counts"))?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let counts = ScenarioCounts {
                    scenario: row.scenario,
                    tests: from_db(row.tests),
                    failures: from_db(row.failures),
                    requests: from_db(row.requests),
                    skipped: from_db(row.skipped),
                    latency_histogram: row.latency_histogram,
                    send_lateness_histogram: row.send_lateness_histogram.unwrap_or_default(),
                };
                (row.member_id, counts)
            })
            .collect())
    }

    /// The latest cumulative counts of every (member, scenario, model), by member, scenario,
    /// model, each with the time of the snapshot that wrote it.
    pub async fn model_counts(&self, run_id: &RunId) -> Result<Vec<(String, i64, ModelCounts)>> {
        self.model_counts_of(run_id, ALL_MEMBERS).await
    }

    /// [`Store::model_counts`] of one member (`ALL_MEMBERS`: every one).
    async fn model_counts_of(
        &self,
        run_id: &RunId,
        member: &str,
    ) -> Result<Vec<(String, i64, ModelCounts)>> {
        const OP: &str = "model_counts";
        let rows: Vec<ModelRow> = sqlx::query_as(
            "SELECT member_id, scenario, model, tests, failures, requests, latency_histogram,
                    stream, updated_at_ms, uncounted_runs
             FROM model_counts WHERE run_id = $1 AND ($2 = '' OR member_id = $2)
             ORDER BY member_id, scenario, model",
        )
        .bind(run_id.as_str())
        .bind(member)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db(OP))?;
        rows.into_iter()
            .map(|row| {
                let member_id = row.member_id;
                let stream = row
                    .stream
                    .map(|s| serde_json::from_str(&s))
                    .transpose()
                    .map_err(|e| {
                        self.corrupt(OP, format!("model_counts.stream of {member_id}: {e}"))
                    })?;
                let counts = ModelCounts {
                    scenario: row.scenario,
                    model: row.model,
                    tests: from_db(row.tests),
                    failures: from_db(row.failures),
                    requests: from_db(row.requests),
                    latency_histogram: row.latency_histogram,
                    stream,
                    uncounted_runs: from_db(row.uncounted_runs),
                };
                Ok((member_id, row.updated_at_ms, counts))
            })
            .collect()
    }

    /// Runs `sql`, which selects (member_id, a JSON text) of one run, and parses each JSON.
    async fn member_json<T: serde::de::DeserializeOwned>(
        &self,
        op: &'static str,
        sql: &'static str,
        run_id: &RunId,
    ) -> Result<Vec<(String, T)>> {
        let rows: Vec<(String, String)> = sqlx::query_as(sql)
            .bind(run_id.as_str())
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
}

/// A row of `latency_intervals` as [`Store::visit_latency_intervals`] reads it.
#[derive(sqlx::FromRow)]
struct IntervalRow {
    member_id: String,
    scenario: String,
    model: String,
    start_ms: i64,
    end_ms: i64,
    requests: i64,
    failures: i64,
    latency_histogram: String,
}

/// A row of `outages`.
#[derive(sqlx::FromRow)]
struct OutageRow {
    id: i64,
    member_id: String,
    server: String,
    last_ok_ms: i64,
    first_failure_ms: Option<i64>,
    first_ok_ms: Option<i64>,
    failed_tests: i64,
    failed_sequences: i64,
}

/// A row of `scenario_counts`.
#[derive(sqlx::FromRow)]
struct ScenarioRow {
    member_id: String,
    scenario: String,
    tests: i64,
    failures: i64,
    requests: i64,
    skipped: i64,
    latency_histogram: String,
    send_lateness_histogram: Option<String>,
}

/// A row of `model_counts`.
#[derive(sqlx::FromRow)]
struct ModelRow {
    member_id: String,
    scenario: String,
    model: String,
    tests: i64,
    failures: i64,
    requests: i64,
    latency_histogram: String,
    stream: Option<String>,
    updated_at_ms: i64,
    uncounted_runs: i64,
}
