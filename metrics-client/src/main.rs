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
        "worker", "QPS", "requests"
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
    let elapsed = (stress_common::now_ms() - run.started_at_ms) as f64 / 1000.0;
    out.push_str(
        &table.render(
            run.finished_at_ms
                .map_or(elapsed, |f| (f - run.started_at_ms) as f64 / 1000.0),
        ),
    );
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
    #[test]
    fn worker_series_are_kept_and_others_dropped() {
        let text = "# HELP x\ntriton_stress_worker_qps 12.5\nother 1\ntriton_stress_worker_tests_total{scenario=\"Load\"} 3\n";
        let out = super::render_worker(text);
        assert!(out.contains("triton_stress_worker_qps 12.5"));
        assert!(out.contains("scenario=\"Load\""));
        assert!(!out.contains("other"));
    }
}
