//! PerfAnalyzer: runs an external perf_analyzer against the load model, as upstream does; it is
//! allowed to fail. The worker looks the binary up once at start-up and drops the scenario from
//! the mix, with one log line, when there is none.

use super::{Failure, Outcome, TestEnv};
use crate::client::Protocol;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An explicit path, else `perf_analyzer` on PATH.
pub fn find(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p.is_file().then(|| p.to_path_buf());
    }
    stress_common::paths::find_on_path("perf_analyzer")
}

/// How long a perf_analyzer run started before the worker was told to stop may go on.
const FINISH_WHEN_STOPPING: Duration = Duration::from_secs(5);

/// Sum of the "Request count: N" lines perf_analyzer prints per measurement.
pub fn request_count(output: &str) -> u64 {
    output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Request count:"))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum()
}

pub async fn run(env: &mut TestEnv<'_>) -> Outcome {
    let model = env.settings.load_model.clone();
    let Some(binary) = env.settings.perf_analyzer.clone() else {
        return Outcome::Skipped("no perf_analyzer binary".into());
    };
    let protocol = match env.client.protocol() {
        Protocol::Grpc => "grpc",
        Protocol::Http => "http",
    };
    let mut command = tokio::process::Command::new(&binary);
    command
        .args(["-m", &model, "-u", env.client.address(), "-i", protocol])
        .args(["--concurrency-range", "1"])
        // A fixed request count, not windows until stable: every request it sends is in its
        // measurement, so the "Request count" it prints is what the server saw (the
        // driver reconciles the two), and it ends in about a second.
        .args(["--request-count", "2000"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = command.output();
    tokio::pin!(output);
    let output = tokio::select! {
        o = tokio::time::timeout(Duration::from_secs(60), &mut output) => o,
        _ = env.cancel.cancelled() => {
            // A started run may finish (about a second): killed, it prints no count, and the
            // requests it sent would be missing from the servers/workers reconciliation.
            match tokio::time::timeout(FINISH_WHEN_STOPPING, &mut output).await {
                Ok(o) => Ok(o),
                Err(_) => {
                    return Outcome::Skipped(
                        "stopping: perf_analyzer killed, the requests it sent are not counted"
                            .into(),
                    );
                }
            }
        }
    };
    let output = match output {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            return Outcome::Failed(Failure::new(
                &model,
                format!("{} to run", binary.display()),
                e.to_string(),
            ));
        }
        Err(_) => {
            return Outcome::Failed(Failure::new(
                &model,
                "perf_analyzer to finish within 60 s",
                "it did not",
            ));
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    env.stats
        .requests(env.scenario, &model, request_count(&stdout));
    if output.status.success() {
        Outcome::Passed
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().chain(stdout.lines()).rev().take(5).collect();
        Outcome::Failed(Failure::new(
            &model,
            "perf_analyzer to exit 0",
            format!(
                "{}: {}",
                output.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_counts_are_summed_over_windows() {
        let out = "  Client: \n    Request count: 200\n    Throughput: 2000 infer/sec\n  Client:\n    Request count: 210\n";
        assert_eq!(super::request_count(out), 410);
        assert_eq!(super::request_count("nothing"), 0);
    }
}
