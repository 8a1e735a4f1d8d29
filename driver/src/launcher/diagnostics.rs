//! What a launcher knows of a member that the store does not: how it ended, how to start it
//! again, its log tail, its pod, and a server's own metrics. Launchers fill it, the store keeps
//! it as JSON before cleanup, and the report renders it; every field has a default, so what an
//! older or newer driver stored still reads.

use super::MemberExit;
use serde::{Deserialize, Serialize};
use std::fmt;
use stress_common::triton_metrics::ModelMetrics;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemberDiagnostics {
    /// The launcher that ran it: `local` or `kube`.
    pub launcher: String,
    /// How it ended; None while it runs (or when it never started).
    pub exit: Option<MemberEnd>,
    /// The shell line that starts it again by hand.
    pub command: Option<String>,
    /// Where it ran, for people: `pid 1234`, `pod ns/name`.
    pub location: Option<String>,
    /// Its log file on this machine (local launcher).
    pub log_file: Option<String>,
    /// The last lines of its log (of its container, for a pod).
    pub log_tail: Vec<String>,
    /// Its pod (kube launcher).
    pub pod: Option<PodDiagnostics>,
    /// Triton's own counters per model, scraped from the server's `/metrics` before it stopped
    /// (servers only; None when not scraped).
    pub server_metrics: Option<Vec<ModelMetrics>>,
}

/// A member's diagnostics in the store, by member name.
impl stress_common::store::Document for MemberDiagnostics {
    const KIND: &'static str = "diagnostics";

    /// Fields it lacks read as their defaults; a value of another shape (a driver before these
    /// types stored free-form JSON) reads as empty, with a warning.
    fn from_stored(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        Ok(serde_json::from_value(value).unwrap_or_else(|e| {
            tracing::warn!("member diagnostics that do not read ({e}): left out");
            Self::default()
        }))
    }
}

/// How a member ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemberEnd {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The launcher's own words when it knows more than a status (e.g. the kubelet's
    /// `OOMKilled`).
    pub reason: Option<String>,
    /// One line for people, e.g. `killed by signal 9 (SIGKILL)`.
    pub description: String,
}

impl From<&MemberExit> for MemberEnd {
    fn from(e: &MemberExit) -> Self {
        Self {
            code: e.code,
            signal: e.signal,
            reason: e.reason.clone(),
            description: e.describe(),
        }
    }
}

/// A member's pod as it was when the diagnostics were taken.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodDiagnostics {
    pub namespace: String,
    pub name: String,
    pub phase: Option<String>,
    /// The pod's status reason (e.g. `Evicted`).
    pub status_reason: Option<String>,
    pub node: Option<String>,
    pub ip: Option<String>,
    /// Restarts of all its containers.
    pub restarts: i32,
    /// Phase, unmet conditions and container states in one line.
    pub summary: Option<String>,
    pub containers: Vec<ContainerStatus>,
    /// Its events, oldest first.
    pub events: Vec<PodEvent>,
    /// The log tail of the container before its last restart.
    pub previous_log_tail: Vec<String>,
    /// kubectl commands that dig further.
    pub kubectl: Vec<String>,
}

/// One container of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerStatus {
    pub name: String,
    /// E.g. `terminated (OOMKilled, exit code 137, at ...)`, `running since ...`.
    pub state: String,
    pub ready: bool,
    pub restarts: i32,
    /// How its previous instance ended, when it restarted.
    pub last_termination: Option<String>,
}

impl fmt::Display for ContainerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}, ready={}, restarts={}",
            self.name, self.state, self.ready, self.restarts
        )?;
        if let Some(last) = &self.last_termination {
            write!(f, "; last termination: {last}")?;
        }
        Ok(())
    }
}

/// A Kubernetes event about a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodEvent {
    /// When it last happened (RFC 3339), if the event says.
    pub at: Option<String>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    /// How many times it happened.
    pub count: i32,
}

impl fmt::Display for PodEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(at) = &self.at {
            write!(f, "{at} ")?;
        }
        write!(f, "{} {}: {}", self.type_, self.reason, self.message.trim())?;
        if self.count > 1 {
            write!(f, " (x{})", self.count)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed_pod() -> MemberDiagnostics {
        MemberDiagnostics {
            launcher: "kube".into(),
            exit: Some(MemberEnd::from(&MemberExit {
                member_id: "triton-0".into(),
                code: Some(137),
                signal: None,
                reason: Some("container tritonserver terminated: OOMKilled, exit code 137".into()),
            })),
            command: Some("tritonserver --model-repository=/models".into()),
            location: Some("pod ns/run-triton-0".into()),
            log_file: None,
            log_tail: vec!["I0101 started".into(), "E0101 out of memory".into()],
            pod: Some(PodDiagnostics {
                namespace: "ns".into(),
                name: "run-triton-0".into(),
                phase: Some("Failed".into()),
                status_reason: None,
                node: Some("node-1".into()),
                ip: Some("10.244.0.7".into()),
                restarts: 0,
                summary: Some("pod run-triton-0 Failed".into()),
                containers: vec![ContainerStatus {
                    name: "tritonserver".into(),
                    state: "terminated (OOMKilled, exit code 137)".into(),
                    ready: false,
                    restarts: 0,
                    last_termination: None,
                }],
                events: vec![PodEvent {
                    at: Some("2026-01-01T00:00:00Z".into()),
                    type_: "Warning".into(),
                    reason: "OOMKilling".into(),
                    message: "Memory cgroup out of memory ".into(),
                    count: 2,
                }],
                previous_log_tail: Vec::new(),
                kubectl: vec!["kubectl -n ns describe pod run-triton-0".into()],
            }),
            server_metrics: Some(vec![ModelMetrics {
                model: "add_sub".into(),
                version: "1".into(),
                success: 100.0,
                failure: 3.0,
                ..Default::default()
            }]),
        }
    }

    #[test]
    fn round_trips_through_json() {
        let d = failed_pod();
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["pod"]["events"][0]["type"], "Warning");
        assert_eq!(json["exit"]["code"], 137);
        let back: MemberDiagnostics = serde_json::from_value(json).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn absent_and_unknown_fields_read_as_defaults() {
        let d: MemberDiagnostics = serde_json::from_value(serde_json::json!({
            "launcher": "local",
            "exit": { "signal": 9, "description": "killed by signal 9 (SIGKILL)" },
            "something_newer": [1, 2, 3],
        }))
        .unwrap();
        assert_eq!(d.exit.as_ref().and_then(|e| e.signal), Some(9));
        assert_eq!(d.exit.unwrap().code, None);
        assert!(d.log_tail.is_empty() && d.pod.is_none() && d.server_metrics.is_none());
    }

    #[test]
    fn containers_and_events_read_as_one_line_each() {
        let pod = failed_pod().pod.unwrap();
        assert_eq!(
            pod.containers[0].to_string(),
            "tritonserver: terminated (OOMKilled, exit code 137), ready=false, restarts=0"
        );
        assert_eq!(
            pod.events[0].to_string(),
            "2026-01-01T00:00:00Z Warning OOMKilling: Memory cgroup out of memory (x2)"
        );
    }
}
