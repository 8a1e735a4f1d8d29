//! The final report, built only from the status store, so `driver report --run ID` rebuilds the
//! same report at any time: the L0 table over all workers and per client group, QPS per worker
//! over time, Triton's server-side metrics, every failure, and for every failed member its exit,
//! log tail and the command to reproduce it.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use stress_common::report::{L0Table, RowJson};
use stress_common::status::{EventKind, FailureRecord, Role};
use stress_common::store::{Member, Store, StoreError};
use stress_common::triton_metrics::{self, ModelMetrics};

/// How many failure records the report lists (the store has the rest).
const LISTED_FAILURES: usize = 50;
/// Points kept of each worker's QPS series in report.json.
const SERIES_POINTS: usize = 600;

#[derive(Debug, Serialize)]
pub struct WorkerQps {
    pub member_id: String,
    pub group: String,
    pub samples: usize,
    pub min: f64,
    pub avg: f64,
    pub max: f64,
    /// (seconds since the run started, QPS), downsampled.
    pub series: Vec<(f64, f64)>,
}

#[derive(Debug, Serialize)]
pub struct FailedMember {
    pub member_id: String,
    pub role: String,
    pub group: String,
    pub failed_at_ms: i64,
    pub reason: String,
    pub diagnostics: serde_json::Value,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub run_id: String,
    pub name: String,
    pub launcher: String,
    pub verdict: String,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    /// Seconds during which workers reported (the QPS denominator).
    pub load_seconds: f64,
    pub scenarios: Vec<RowJson>,
    pub groups: BTreeMap<String, Vec<RowJson>>,
    pub workers: Vec<WorkerQps>,
    pub server_metrics: BTreeMap<String, Vec<ModelMetrics>>,
    pub failure_count: u64,
    pub failures: Vec<(String, FailureRecord)>,
    pub failed_members: Vec<FailedMember>,
    #[serde(skip)]
    tables: (L0Table, BTreeMap<String, L0Table>),
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no run {0} in the store")]
    NoRun(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("run {run}: {message}")]
    Corrupt { run: String, message: String },
}

fn group_of<'a>(members: &'a [Member], id: &str) -> (&'a str, Option<Role>) {
    members
        .iter()
        .find(|m| m.member_id == id)
        .map_or(("?", None), |m| (m.group_name.as_str(), Some(m.role)))
}

/// Averages consecutive points down to at most `n`.
fn downsample(points: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
    if points.len() <= n {
        return points.to_vec();
    }
    let chunk = points.len().div_ceil(n);
    points
        .chunks(chunk)
        .map(|c| {
            let k = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / k,
                c.iter().map(|p| p.1).sum::<f64>() / k,
            )
        })
        .collect()
}

fn sparkline(values: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let pts: Vec<f64> = downsample(&values.iter().map(|v| (0.0, *v)).collect::<Vec<_>>(), width)
        .into_iter()
        .map(|p| p.1)
        .collect();
    let max = pts.iter().cloned().fold(0.0, f64::max);
    pts.iter()
        .map(|v| {
            if max <= 0.0 {
                BARS[0]
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

impl Report {
    pub async fn from_store(store: &Store, run_id: &str) -> Result<Self, ReportError> {
        let run = store
            .run(run_id)
            .await?
            .ok_or_else(|| ReportError::NoRun(run_id.into()))?;
        let members = store.members(run_id).await?;
        let corrupt = |message: String| ReportError::Corrupt {
            run: run_id.into(),
            message,
        };

        let mut total = L0Table::new();
        let mut groups: BTreeMap<String, L0Table> = BTreeMap::new();
        for (member_id, counts) in store.scenario_counts(run_id).await? {
            total.add(&counts).map_err(|e| corrupt(e.to_string()))?;
            let (group, _) = group_of(&members, &member_id);
            groups
                .entry(group.to_string())
                .or_default()
                .add(&counts)
                .map_err(|e| corrupt(e.to_string()))?;
        }

        let samples = store.qps_samples(run_id).await?;
        let load_seconds = stress_common::qps::load_seconds(&samples);
        let mut per_worker: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for s in &samples {
            per_worker
                .entry(s.member_id.clone())
                .or_default()
                .push(((s.at_ms - run.started_at_ms) as f64 / 1000.0, s.qps));
        }
        let workers = per_worker
            .into_iter()
            .map(|(member_id, series)| {
                // The final snapshot reports qps 0 by design; leave it out of the stats.
                let live: Vec<f64> = series.iter().map(|p| p.1).collect();
                let live = if live.len() > 1 && live.last() == Some(&0.0) {
                    &live[..live.len() - 1]
                } else {
                    &live[..]
                };
                let n = live.len().max(1) as f64;
                WorkerQps {
                    group: group_of(&members, &member_id).0.to_string(),
                    member_id,
                    samples: series.len(),
                    min: live
                        .iter()
                        .cloned()
                        .fold(f64::INFINITY, f64::min)
                        .min(f64::MAX),
                    avg: live.iter().sum::<f64>() / n,
                    max: live.iter().cloned().fold(0.0, f64::max),
                    series: downsample(&series, SERIES_POINTS),
                }
            })
            .collect();

        let diagnostics: BTreeMap<String, serde_json::Value> =
            store.diagnostics(run_id).await?.into_iter().collect();
        let mut server_metrics = BTreeMap::new();
        for (member, d) in &diagnostics {
            if let Some(text) = d.get("server_metrics_text").and_then(|v| v.as_str()) {
                server_metrics.insert(member.clone(), triton_metrics::parse(text));
            }
        }

        let mut failed_members: Vec<FailedMember> = Vec::new();
        for e in store.events(run_id, 0).await? {
            if e.kind != EventKind::Failure
                || failed_members.iter().any(|f| f.member_id == e.member_id)
            {
                continue;
            }
            let (group, role) = group_of(&members, &e.member_id);
            failed_members.push(FailedMember {
                role: role.map_or("?", Role::as_str).to_string(),
                group: group.to_string(),
                failed_at_ms: e.at_ms,
                reason: e.details.clone(),
                diagnostics: diagnostics.get(&e.member_id).cloned().unwrap_or_default(),
                member_id: e.member_id,
            });
        }

        let failure_count = store
            .failure_totals(run_id)
            .await?
            .into_iter()
            .map(|(_, n)| n)
            .sum();
        let mut failures = store.failures(run_id).await?;
        failures.truncate(LISTED_FAILURES);

        Ok(Report {
            run_id: run.run_id,
            name: run.name,
            launcher: run.launcher,
            verdict: run.verdict.unwrap_or_else(|| "RUNNING".into()),
            started_at_ms: run.started_at_ms,
            finished_at_ms: run.finished_at_ms,
            load_seconds,
            scenarios: total.to_json(load_seconds),
            groups: groups
                .iter()
                .map(|(g, t)| (g.clone(), t.to_json(load_seconds)))
                .collect(),
            workers,
            server_metrics,
            failure_count,
            failures,
            failed_members,
            tables: (total, groups),
        })
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let took = self
            .finished_at_ms
            .map(|f| format!("{:.1} s", (f - self.started_at_ms) as f64 / 1000.0))
            .unwrap_or_else(|| "still running".into());
        let _ = writeln!(
            out,
            "Run {} ({} launcher): {}\nMatrix run name: {}; took {}; load phase {:.1} s\n",
            self.run_id, self.launcher, self.verdict, self.name, took, self.load_seconds
        );
        let _ = writeln!(out, "== Scenarios, all workers ==");
        out.push_str(&self.tables.0.render(self.load_seconds));
        if self.tables.1.len() > 1 {
            for (group, table) in &self.tables.1 {
                let _ = writeln!(out, "\n== Scenarios, client group {group} ==");
                out.push_str(&table.render(self.load_seconds));
            }
        }
        if !self.workers.is_empty() {
            let _ = writeln!(out, "\n== QPS per worker over time ==");
            let _ = writeln!(
                out,
                "{:<24} {:<16} {:>9} {:>9} {:>9}  over time",
                "Worker", "Group", "min", "avg", "max"
            );
            for w in &self.workers {
                let values: Vec<f64> = w.series.iter().map(|p| p.1).collect();
                let _ = writeln!(
                    out,
                    "{:<24} {:<16} {:>9.1} {:>9.1} {:>9.1}  {}",
                    w.member_id,
                    w.group,
                    w.min,
                    w.avg,
                    w.max,
                    sparkline(&values, 40)
                );
            }
        }
        for (server, models) in &self.server_metrics {
            let _ = writeln!(
                out,
                "\n== Server-side metrics of {server} (Triton /metrics) =="
            );
            out.push_str(&triton_metrics::render(models));
        }
        if !self.failures.is_empty() {
            let _ = writeln!(
                out,
                "\n== Failures (first {} of {}) ==",
                self.failures.len(),
                self.failure_count
            );
            for (member, f) in &self.failures {
                let _ = writeln!(out, "{member}: {f}");
            }
        }
        for m in &self.failed_members {
            let _ = writeln!(
                out,
                "\n== FAILED {} {} (group {}) at {} ==\nreason: {}",
                m.role,
                m.member_id,
                m.group,
                format_time(m.failed_at_ms),
                m.reason
            );
            let d = &m.diagnostics;
            // Local members have exit and log_file; pods have the rest.
            for key in [
                "exit",
                "namespace",
                "pod",
                "phase",
                "status_reason",
                "node",
                "pod_ip",
                "restarts",
                "log_file",
            ] {
                match d.get(key) {
                    Some(serde_json::Value::String(v)) => {
                        let _ = writeln!(out, "{key}: {v}");
                    }
                    Some(v @ serde_json::Value::Number(_)) => {
                        let _ = writeln!(out, "{key}: {v}");
                    }
                    _ => {}
                }
            }
            if let Some(cmd) = d.get("command").and_then(|v| v.as_str()) {
                let _ = writeln!(out, "reproduce: {cmd}");
            }
            for (key, title) in [("containers", "containers"), ("events", "events")] {
                let lines = string_list(d.get(key));
                if !lines.is_empty() {
                    let _ = writeln!(out, "{title}:");
                    for line in lines {
                        let _ = writeln!(out, "  - {line}");
                    }
                }
            }
            for (key, title) in [
                ("log_tail", "log tail"),
                ("previous_log_tail", "log tail of the previous container"),
            ] {
                if let Some(tail) = d.get(key).and_then(|v| v.as_str()) {
                    let _ = writeln!(out, "{title}:");
                    for line in tail.lines() {
                        let _ = writeln!(out, "  | {line}");
                    }
                }
            }
            let commands = string_list(d.get("kubectl"));
            if !commands.is_empty() {
                let _ = writeln!(out, "dig further:");
                for c in commands {
                    let _ = writeln!(out, "  $ {c}");
                }
            }
        }
        out
    }
}

fn string_list(v: Option<&serde_json::Value>) -> Vec<&str> {
    v.and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default()
}

/// UTC wall-clock time of a store timestamp, e.g. 2026-11-21 06:15:12.345Z.
pub fn format_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_sparklines() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(format_time(1_795_241_712_345), "2026-11-21 06:15:12.345Z");
        assert_eq!(sparkline(&[0.0, 1.0, 2.0], 40).chars().count(), 3);
        assert_eq!(downsample(&[(0.0, 1.0); 1000], 100).len(), 100);
    }
}
