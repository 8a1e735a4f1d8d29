//! PerfAnalyzer: runs an external perf_analyzer against the load model, as upstream does; it is
//! allowed to fail. The worker looks the binary up once, where its arguments are read
//! (`config.rs`, `perf_analyzer_for`).
//!
//! perf_analyzer writes every request's send and response timestamps to a profile export
//! (`--profile-export-file`); the worker records each one's latency in the scenario's
//! histogram, so its row has real percentiles, merged with everything else, and the requests
//! it sent are counted one by one (answered or not).

use super::{Failure, Outcome, TestEnv};
use crate::client::Protocol;
use std::path::{Path, PathBuf};
use std::time::Duration;
use stress_common::signature::ErrorKind;

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

pub async fn run(env: &mut TestEnv<'_, '_>) -> Outcome {
    let model = env.settings.load_model.clone();
    let Some(binary) = env.settings.perf_analyzer.clone() else {
        return Outcome::Skipped("no perf_analyzer binary".into());
    };
    let protocol = match env.client.protocol() {
        Protocol::Grpc => "grpc",
        Protocol::Http => "http",
    };
    // Its requests are counted when it ends, seconds from now.
    let _deferred = env.stats.deferred_test();
    let export = ProfileExport::path();
    let mut command =
        perf_analyzer_command(&binary, &model, env.client.address(), protocol, &export);
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
                    // Killed on drop: the reconciliation learns a run's worth may be missing.
                    env.stats.uncounted_run(env.scenario, &model);
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
    count_requests(env, &model, &export, &output, &stdout);
    outcome_of(&model, &output, &stdout)
}

/// The perf_analyzer command line: a fixed number of requests to `model` on `address`, each
/// one's times written to `export`.
fn perf_analyzer_command(
    binary: &Path,
    model: &str,
    address: &str,
    protocol: &str,
    export: &ProfileExport,
) -> tokio::process::Command {
    // Dies with the worker (a worker killed outright runs no drop).
    let mut command = stress_common::shutdown::command_dying_with_parent(binary);
    command
        .args(["-m", model, "-u", address, "-i", protocol])
        .arg("--profile-export-file")
        .arg(&export.0)
        .args(["--concurrency-range", "1"])
        // A fixed request count, not windows until stable: every request it sends is in its
        // measurement, so the "Request count" it prints is what the server saw (the
        // driver reconciles the two), and it ends in a second or a few: a run still going
        // when the worker stops has its drain time to finish, or its requests go uncounted.
        .args([
            "--request-count",
            &stress_common::limits::PERF_ANALYZER_REQUESTS.to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// Counts a finished run's requests: each with its latency from the profile export, else
/// without latencies from its summary.
fn count_requests(
    env: &TestEnv<'_, '_>,
    model: &str,
    export: &ProfileExport,
    output: &std::process::Output,
    stdout: &str,
) {
    match export.read() {
        Ok(requests) => {
            for latency in requests {
                env.stats
                    .request(env.scenario, model, env.client.address(), latency);
            }
        }
        Err(e) => {
            // Counted without latencies, from its summary.
            if output.status.success() {
                tracing::warn!("perf_analyzer's profile export: {e}");
            }
            env.stats
                .requests(env.scenario, model, request_count(stdout));
        }
    }
}

/// A finished run's outcome: passed when it exited 0, else failed with the last lines it wrote.
fn outcome_of(model: &str, output: &std::process::Output, stdout: &str) -> Outcome {
    if output.status.success() {
        Outcome::Passed
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().chain(stdout.lines()).rev().take(5).collect();
        let kind = failed_run_kind(&stderr, stdout);
        Outcome::Failed(
            Failure::new(
                model,
                "perf_analyzer to exit 0",
                format!(
                    "{}: {}",
                    output.status,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ),
            )
            .with_kind(kind),
        )
    }
}

/// What kind of failure a perf_analyzer run that exited non-zero saw, from its words: it
/// checks no answer unless given validation data, so it is a wrong answer only when it says so;
/// a broken or refused connection, a deadline, a server that said it cannot serve, or else the
/// server's own error.
fn failed_run_kind(stderr: &str, stdout: &str) -> ErrorKind {
    let text = format!("{stderr}\n{stdout}").to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    if has(&[
        "output doesn't match",
        "does not match expected",
        "validation failed",
    ]) {
        ErrorKind::WrongAnswer
    } else if has(&["deadline exceeded", "timed out", "timeout"]) {
        ErrorKind::Timeout
    } else if has(&[
        "failed to connect",
        "connection refused",
        "connection reset",
        "socket closed",
        "broken pipe",
        "couldn't connect",
    ]) {
        ErrorKind::Transport
    } else if has(&["unavailable", "resource_exhausted", "not ready"]) {
        ErrorKind::Unavailable
    } else {
        ErrorKind::ServerError
    }
}

/// perf_analyzer's profile export file, removed when dropped.
struct ProfileExport(PathBuf);

#[derive(serde::Deserialize)]
struct Export {
    experiments: Vec<Experiment>,
}

#[derive(serde::Deserialize)]
struct Experiment {
    requests: Vec<ExportedRequest>,
}

#[derive(serde::Deserialize)]
struct ExportedRequest {
    /// Send time, ns since the epoch.
    timestamp: u64,
    /// One per response (several for a decoupled model), ns since the epoch.
    #[serde(default)]
    response_timestamps: Vec<u64>,
}

impl ProfileExport {
    fn path() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!(
            "triton-stress-perf-analyzer-{}-{n}.json",
            std::process::id()
        )))
    }

    /// Every request's latency to its last response (None: no response).
    fn read(&self) -> Result<Vec<Option<Duration>>, ProfileExportError> {
        let text = std::fs::read_to_string(&self.0).map_err(|source| ProfileExportError::Read {
            path: self.0.clone(),
            source,
        })?;
        latencies(&text).map_err(|source| ProfileExportError::NotAnExport {
            path: self.0.clone(),
            source,
        })
    }
}

/// Why perf_analyzer's profile export gave no latencies; each names the file.
#[derive(Debug, thiserror::Error)]
enum ProfileExportError {
    /// Not written (perf_analyzer failed early) or unreadable.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not JSON, or not the shape perf_analyzer writes.
    #[error("{}: {source}", path.display())]
    NotAnExport {
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl Drop for ProfileExport {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The latencies in a profile export's text.
fn latencies(text: &str) -> Result<Vec<Option<Duration>>, serde_json::Error> {
    let export: Export = serde_json::from_str(text)?;
    Ok(export
        .experiments
        .iter()
        .flat_map(|e| &e.requests)
        .map(|r| {
            let last = r.response_timestamps.iter().max()?;
            Some(Duration::from_nanos(last.saturating_sub(r.timestamp)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_run_is_typed_by_what_perf_analyzer_said() {
        use super::{ErrorKind, failed_run_kind};
        let kind = |stderr: &str| failed_run_kind(stderr, "Request concurrency: 1");
        assert_eq!(
            kind(
                "error: failed to get model metadata: failed to connect to all addresses; \
                 last error: UNAVAILABLE"
            ),
            ErrorKind::Transport
        );
        assert_eq!(
            kind("Thread [0] had error: Deadline Exceeded"),
            ErrorKind::Timeout
        );
        assert_eq!(kind("Server not ready"), ErrorKind::Unavailable);
        assert_eq!(
            kind("Output doesn't match expected output"),
            ErrorKind::WrongAnswer
        );
        // Nothing said: not a wrong answer (it checked none).
        assert_eq!(kind(""), ErrorKind::ServerError);
    }

    #[test]
    fn a_profile_export_gives_each_request_its_latency() {
        // The shape perf_analyzer 2.51 writes (inputs and outputs left out).
        let text = r#"{"experiments": [{"experiment": {"mode": "concurrency", "value": 1},
            "requests": [
                {"timestamp": 1000000, "request_inputs": {}, "response_timestamps": [1250000]},
                {"timestamp": 2000000, "response_timestamps": [2100000, 2900000]},
                {"timestamp": 3000000, "response_timestamps": []}
            ], "window_boundaries": [1, 2]}],
            "version": "2.51.0", "service_kind": "triton", "endpoint": ""}"#;
        let l = super::latencies(text).unwrap();
        use std::time::Duration;
        assert_eq!(
            l,
            [
                Some(Duration::from_micros(250)),
                Some(Duration::from_micros(900)),
                None
            ]
        );
        assert!(super::latencies("{}").is_err());
    }

    #[test]
    fn a_profile_export_that_gives_no_latencies_says_why() {
        use super::{ProfileExport, ProfileExportError};
        let export = ProfileExport::path();
        let path = export.0.clone();
        // perf_analyzer wrote nothing.
        let e = export.read().unwrap_err();
        assert!(
            matches!(&e, ProfileExportError::Read { path: p, source }
                if *p == path && source.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with(&format!("{}: ", path.display())),
            "{e}"
        );
        // It wrote something else.
        std::fs::write(&path, "{}").unwrap();
        let e = export.read().unwrap_err();
        assert!(
            matches!(&e, ProfileExportError::NotAnExport { path: p, .. } if *p == path),
            "{e:?}"
        );
        let json = super::latencies("{}").unwrap_err();
        assert_eq!(e.to_string(), format!("{}: {json}", path.display()));
        drop(export);
        assert!(!path.exists());
    }

    #[test]
    fn request_counts_are_summed_over_windows() {
        let out = "  Client: \n    Request count: 200\n    Throughput: 2000 infer/sec\n  Client:\n    Request count: 210\n";
        assert_eq!(super::request_count(out), 410);
        assert_eq!(super::request_count("nothing"), 0);
    }
}
