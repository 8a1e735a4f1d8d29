//! Live numbers while a run is going: a worker's Prometheus metrics, a whole run's QPS and counts
//! from the status store (summed over workers; percentiles from merged histograms) with each
//! server's latest per-model sample, and Triton's own per-model metrics (with `--watch`: what
//! each model did since the last refresh: rates, queue vs compute time per request, batch size).

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::report::L0Table;
use stress_common::store::Store;
use stress_common::triton_metrics;

#[derive(Debug, Parser)]
#[command(name = "metrics-client", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Refresh every this often until interrupted (e.g. 2s); default: print once.
    #[arg(long, global = true, value_parser = humantime::parse_duration)]
    watch: Option<Duration>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Triton's /metrics (HOST:PORT of its metrics endpoint, e.g. 127.0.0.1:8002), per model.
    Triton { address: String },
    /// A worker's Prometheus metrics (its --metrics-addr).
    Worker { address: String },
    /// A whole run from the status store: QPS per worker and the summed L0 counts.
    Run {
        #[arg(long)]
        run: String,
        #[arg(long, default_value = "runs", env = "TRITON_STRESS_RUNS_DIR")]
        runs_dir: PathBuf,
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
    },
}

async fn fetch_metrics(address: &str) -> anyhow::Result<String> {
    let url = format!("http://{address}/metrics");
    let response = stress_common::http::get(&url, Duration::from_secs(5)).await?;
    if !response.is_ok() {
        bail!("{url} answered {}", response.status);
    }
    Ok(response.body)
}

/// The worker's own series (name{labels} value), one per line, grouped by metric. A histogram
/// (latency) shows as one line per label set: its count and p50/p99 estimated from the buckets.
fn render_worker(text: &str) -> String {
    use prometheus_parse::Value;
    let samples = triton_metrics::scrape(text);
    let histograms: Vec<&str> = samples
        .iter()
        .filter(|s| matches!(s.value, Value::Histogram(_)))
        .map(|s| s.metric.as_str())
        .collect();
    // A histogram's `_count` and `_sum` come as untyped series: its own line says both.
    let of_histogram = |name: &str| {
        histograms.iter().any(|h| {
            name.strip_prefix(*h)
                .is_some_and(|rest| ["_count", "_sum"].contains(&rest))
        })
    };
    let mut by_metric: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.metric.starts_with("triton_stress_worker_") && !of_histogram(&s.metric))
    {
        let series = match s.labels.is_empty() {
            true => s.metric.clone(),
            false => format!("{}{{{}}}", s.metric, s.labels),
        };
        let line = match &s.value {
            Value::Histogram(buckets) => {
                let cumulative: Vec<(f64, f64)> =
                    buckets.iter().map(|b| (b.less_than, b.count)).collect();
                let count = cumulative.last().map_or(0.0, |b| b.1);
                let show = |q| match quantile(q, &cumulative) {
                    Some(s) => format!("{:.3}ms", s * 1000.0),
                    None => "-".into(),
                };
                format!(
                    "{series} count={count} p50={} p99={}",
                    show(0.5),
                    show(0.99)
                )
            }
            value => match triton_metrics::number(value) {
                Some(v) => format!("{series} {v}"),
                None => continue,
            },
        };
        by_metric.entry(&s.metric).or_default().push(line);
    }
    let mut out = String::new();
    for (_, mut lines) in by_metric {
        // The parser hands histograms over in no set order.
        lines.sort();
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

/// The `q` quantile of cumulative buckets (upper bound, count), as Prometheus'
/// `histogram_quantile` estimates it: linear within the bucket that holds the rank; the highest
/// finite bound when that is the +Inf bucket. None without observations.
fn quantile(q: f64, cumulative: &[(f64, f64)]) -> Option<f64> {
    let total = cumulative.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(upper, count) in cumulative {
        if count >= rank {
            if upper.is_infinite() {
                return Some(lower);
            }
            let share = if count > below {
                (rank - below) / (count - below)
            } else {
                1.0
            };
            return Some(lower + (upper - lower) * share);
        }
        (lower, below) = (upper, count);
    }
    Some(lower)
}

async fn run_view(store: &Store, run_id: &str) -> anyhow::Result<String> {
    let run = store
        .run(&RunId::from(run_id))
        .await?
        .with_context(|| format!("no run {run_id}"))?;
    let mut out = format!(
        "run {} ({}): {}\n",
        run.run_id,
        run.launcher,
        run.verdict.as_deref().unwrap_or("RUNNING")
    );
    let latest = store.latest_qps(&RunId::from(run_id)).await?;
    let total: f64 = latest.iter().map(|q| q.qps).sum();
    out.push_str(&format!(
        "{:<28} {:>10} {:>12}\n",
        "worker", "QPS now", "requests"
    ));
    for q in &latest {
        out.push_str(&format!(
            "{:<28} {:>10.1} {:>12}\n",
            q.member_id, q.qps, q.total_requests
        ));
    }
    out.push_str(&format!("{:<28} {:>10.1}\n\n", "overall", total));
    // Per client group, as the driver's progress line: QPS now, tests and failures so far.
    let members = store.members(&RunId::from(run_id)).await?;
    let counts = store.scenario_counts(&RunId::from(run_id)).await?;
    let mut groups: BTreeMap<&str, (usize, f64, u64, u64)> = BTreeMap::new();
    for m in members
        .iter()
        .filter(|m| m.role == stress_common::status::Role::Client)
    {
        let g = groups.entry(m.group_name.as_str()).or_default();
        g.0 += 1;
        g.1 += latest
            .iter()
            .filter(|q| q.member_id == m.member_id)
            .map(|q| q.qps)
            .sum::<f64>();
        for (_, c) in counts.iter().filter(|(id, _)| *id == m.member_id) {
            g.2 += c.tests;
            g.3 += c.failures;
        }
    }
    if !groups.is_empty() {
        out.push_str(&format!(
            "{:<28} {:>8} {:>10} {:>10} {:>9}\n",
            "client group", "workers", "QPS now", "tests", "failures"
        ));
        for (group, (workers, qps, tests, failures)) in &groups {
            out.push_str(&format!(
                "{group:<28} {workers:>8} {qps:>10.1} {tests:>10} {failures:>9}\n"
            ));
        }
        out.push('\n');
    }
    let mut table = L0Table::new();
    for (_, c) in &counts {
        table.add(c)?;
    }
    // The same denominator as the driver's report, so both show the same QPS for a run.
    let load_seconds = store.qps_span(&RunId::from(run_id)).await?.load_seconds();
    out.push_str(&table.render(load_seconds));
    // Each server's latest sample (the driver samples every series interval).
    let mut latest: BTreeMap<String, triton_metrics::ServerSample> = BTreeMap::new();
    for (member, sample) in store.server_samples(&RunId::from(run_id)).await? {
        latest.insert(member, sample);
    }
    for (member, s) in &latest {
        out.push_str(&format!(
            "\n{member}: the {:.1} s to its latest sample{}\n",
            s.interval_ms as f64 / 1000.0,
            s.rss_bytes
                .map(|b| format!(", RSS {:.1} MiB", b / (1024.0 * 1024.0)))
                .unwrap_or_default()
        ));
        out.push_str(&triton_metrics::render_interval(
            &s.models,
            s.interval_ms as f64 / 1000.0,
        ));
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    stress_common::telemetry::init("warn");
    let cli = Cli::parse();
    let store = match &cli.command {
        Command::Run {
            run,
            runs_dir,
            database_url,
        } => Some(match database_url {
            Some(url) => Store::connect(url).await?,
            None => {
                let file = runs_dir.join(run).join("store.sqlite");
                anyhow::ensure!(file.is_file(), "no store at {}", file.display());
                Store::connect(&Store::sqlite_url(&file)).await?
            }
        }),
        _ => None,
    };
    // Triton with --watch: the previous scrape, to show what each model did since.
    let mut previous: Option<(std::time::Instant, Vec<triton_metrics::ModelMetrics>)> = None;
    loop {
        let text = match &cli.command {
            Command::Triton { address } => {
                let now = triton_metrics::parse(&fetch_metrics(address).await?);
                let at = std::time::Instant::now();
                let text = match &previous {
                    Some((then, before)) => {
                        let seconds = at.duration_since(*then).as_secs_f64();
                        format!(
                            "{address}: the last {seconds:.1} s\n{}",
                            triton_metrics::render_interval(
                                &triton_metrics::delta(before, &now),
                                seconds
                            )
                        )
                    }
                    None => format!(
                        "{address}: since the server started{}\n{}",
                        if cli.watch.is_some() {
                            " (rates from the next refresh)"
                        } else {
                            ""
                        },
                        triton_metrics::render(&now)
                    ),
                };
                previous = Some((at, now));
                text
            }
            Command::Worker { address } => render_worker(&fetch_metrics(address).await?),
            Command::Run { run, .. } => {
                run_view(store.as_ref().expect("opened above"), run).await?
            }
        };
        match cli.watch {
            None => {
                print!("{text}");
                return Ok(());
            }
            Some(every) => {
                print!("\x1b[2J\x1b[H{text}");
                tokio::time::sleep(every).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use stress_common::histogram::LatencyHistogram;
    use stress_common::status::{ScenarioCounts, WorkerSnapshot};
    use stress_common::store::{NewRun, Store};

    /// The run view's QPS is requests over the load the samples cover, as in the driver's
    /// report: not over the run's wall time, which includes start-up and warm-up.
    #[tokio::test]
    async fn a_run_s_qps_is_over_its_load_not_its_wall_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&Store::sqlite_url(&dir.path().join("store.sqlite")))
            .await
            .unwrap();
        let t0 = 1_000_000;
        let run = NewRun {
            run_id: "r".into(),
            name: "qps".into(),
            matrix_yaml: String::new(),
            launcher: "local".into(),
            started_at_ms: t0,
            fingerprint: None,
        };
        store.create_run(&run).await.unwrap();
        store
            .upsert_member(&stress_common::store::Member {
                run_id: "r".into(),
                member_id: "w-0".into(),
                role: stress_common::status::Role::Client,
                group_name: "grpc".into(),
                index: 0,
                address: String::new(),
                process_name: "worker".into(),
                corr_id_base: None,
                corr_id_block_size: None,
                command: String::new(),
            })
            .await
            .unwrap();
        // Load from 60 s (after start-up and warm-up) to 64 s, sampled every 2 s: 4 s of load.
        for (at_s, requests) in [(62, 500), (64, 1000)] {
            let snapshot = WorkerSnapshot {
                at_ms: t0 + at_s * 1000,
                total_requests: requests,
                qps: 250.0,
                scenarios: vec![ScenarioCounts {
                    scenario: "Load".into(),
                    tests: 1,
                    requests,
                    latency_histogram: LatencyHistogram::new().encode(),
                    ..Default::default()
                }],
                models: vec![],
                intervals: vec![],
                series_point: true,
                signatures: vec![],
                outages: vec![],
                rss_bytes: None,
                deferred_clients: 0,
                unanswered: vec![],
                client_spans: vec![],
                client_program: None,
            };
            store
                .record_snapshot(&"r".into(), &"w-0".into(), &snapshot)
                .await
                .unwrap();
        }
        store
            .finish_run(&"r".into(), "PASS", t0 + 100_000)
            .await
            .unwrap();

        let view = super::run_view(&store, "r").await.unwrap();
        let total = view
            .lines()
            .find(|l| l.starts_with("TOTAL "))
            .unwrap_or_else(|| panic!("no TOTAL row:\n{view}"));
        let qps = total.split('|').nth(4).map(str::trim);
        assert_eq!(qps, Some("250.0"), "{view}");
        // Per client group: its workers, QPS now, tests and failures.
        let group = view.lines().find(|l| l.starts_with("grpc ")).expect(&view);
        let cells: Vec<&str> = group.split_whitespace().collect();
        assert_eq!(cells, ["grpc", "1", "250.0", "1", "0"], "{view}");

        // A server's latest sample is shown per model: rates over its interval.
        for success in [100.0, 300.0] {
            let sample = stress_common::triton_metrics::ServerSample {
                at_ms: t0 + 60_000 + success as i64,
                interval_ms: 2000,
                rss_bytes: Some(200.0 * 1024.0 * 1024.0),
                models: vec![stress_common::triton_metrics::ModelMetrics {
                    model: "add_sub".into(),
                    success,
                    queue_duration_us: success * 7.0,
                    ..Default::default()
                }],
                ..Default::default()
            };
            store
                .record_server_sample(&"r".into(), &"triton-0".into(), &sample)
                .await
                .unwrap();
        }
        let view = super::run_view(&store, "r").await.unwrap();
        assert!(
            view.contains("triton-0: the 2.0 s to its latest sample, RSS 200.0 MiB"),
            "{view}"
        );
        let row = view.lines().find(|l| l.starts_with("add_sub ")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells[1..4],
            ["150.0", "0.0", "7"],
            "the latest sample's: {view}"
        );
    }

    #[test]
    fn worker_series_are_kept_and_others_dropped() {
        let text = "# HELP x\ntriton_stress_worker_qps 12.5\nother 1\ntriton_stress_worker_tests_total{scenario=\"Load\"} 3\n";
        let out = super::render_worker(text);
        assert!(out.contains("triton_stress_worker_qps 12.5"));
        assert!(out.contains("scenario=\"Load\""));
        assert!(!out.contains("other"));
    }

    #[test]
    fn a_latency_histogram_shows_as_its_count_and_percentiles() {
        let h = "triton_stress_worker_request_latency_seconds";
        let labels = r#"scenario="Load",server="a:1""#;
        let text = format!(
            "# TYPE {h} histogram\n\
             {h}_sum{{{labels}}} 0.5\n\
             {h}_count{{{labels}}} 100\n\
             {h}_bucket{{le=\"0.001\",{labels}}} 40\n\
             {h}_bucket{{le=\"0.002\",{labels}}} 90\n\
             {h}_bucket{{le=\"0.005\",{labels}}} 98\n\
             {h}_bucket{{le=\"+Inf\",{labels}}} 100\n\
             triton_stress_worker_qps 3\n"
        );
        let out = super::render_worker(&text);
        // p50: rank 50 in (1 ms, 2 ms] holding 40..90: 1 + 10/50 ms. p99: past 5 ms, in +Inf.
        assert_eq!(
            out,
            format!(
                "triton_stress_worker_qps 3\n{h}{{{labels}}} count=100 p50=1.200ms p99=5.000ms\n"
            )
        );
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_of_the_rank() {
        let b = [(1.0, 10.0), (2.0, 10.0), (4.0, 20.0), (f64::INFINITY, 20.0)];
        assert_eq!(super::quantile(0.25, &b), Some(0.5));
        assert_eq!(super::quantile(0.75, &b), Some(3.0));
        assert_eq!(super::quantile(1.0, &b), Some(4.0));
        assert_eq!(
            super::quantile(0.5, &[(1.0, 0.0), (f64::INFINITY, 0.0)]),
            None
        );
    }
}
