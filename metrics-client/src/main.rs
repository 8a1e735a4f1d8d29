//! Live numbers while a run is going: a worker's Prometheus gauges, a whole run's QPS and counts
//! from the status store (summed over workers; percentiles from merged histograms), and Triton's
//! own per-model metrics (queue vs compute time).

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use stress_common::report::L0Table;
use stress_common::store::Store;

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

/// The worker's own series (name{labels} value), one per line, grouped by metric.
fn render_worker(text: &str) -> String {
    let mut by_metric: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("triton_stress_worker_"))
    {
        let name = line.split(['{', ' ']).next().unwrap_or(line);
        by_metric.entry(name).or_default().push(line);
    }
    let mut out = String::new();
    for (_, lines) in by_metric {
        for l in lines {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

async fn run_view(store: &Store, run_id: &str) -> anyhow::Result<String> {
    let run = store
        .run(run_id)
        .await?
        .with_context(|| format!("no run {run_id}"))?;
    let mut out = format!(
        "run {} ({}): {}\n",
        run.run_id,
        run.launcher,
        run.verdict.as_deref().unwrap_or("RUNNING")
    );
    let latest = store.latest_qps(run_id).await?;
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
    let mut table = L0Table::new();
    for (_, counts) in store.scenario_counts(run_id).await? {
        table.add(&counts)?;
    }
    // The same denominator as the driver's report, so both show the same QPS for a run.
    let load_seconds = stress_common::qps::load_seconds(&store.qps_samples(run_id).await?);
    out.push_str(&table.render(load_seconds));
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
    loop {
        let text = match &cli.command {
            Command::Triton { address } => stress_common::triton_metrics::render(
                &stress_common::triton_metrics::parse(&fetch_metrics(address).await?),
            ),
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
        };
        store.create_run(&run).await.unwrap();
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
            };
            store.record_snapshot("r", "w-0", &snapshot).await.unwrap();
        }
        store.finish_run("r", "PASS", t0 + 100_000).await.unwrap();

        let view = super::run_view(&store, "r").await.unwrap();
        let total = view
            .lines()
            .find(|l| l.starts_with("TOTAL "))
            .unwrap_or_else(|| panic!("no TOTAL row:\n{view}"));
        let qps = total.split('|').nth(4).map(str::trim);
        assert_eq!(qps, Some("250.0"), "{view}");
    }

    #[test]
    fn worker_series_are_kept_and_others_dropped() {
        let text = "# HELP x\ntriton_stress_worker_qps 12.5\nother 1\ntriton_stress_worker_tests_total{scenario=\"Load\"} 3\n";
        let out = super::render_worker(text);
        assert!(out.contains("triton_stress_worker_qps 12.5"));
        assert!(out.contains("scenario=\"Load\""));
        assert!(!out.contains("other"));
    }
}
