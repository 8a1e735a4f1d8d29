//! What a failed member's pod tells: its status, its containers' log tails, its events, and the
//! kubectl commands to dig further. Read before cleanup deletes the pod.

use super::status::{container_statuses, failed_init_container, pod_summary};
use super::{DIAGNOSTICS_SETTLE, KubeLauncher, LOG_TAIL_LINES, RUN_LABEL};
use crate::launcher::Launcher;
use crate::launcher::diagnostics::{MemberDiagnostics, MemberEnd, PodDiagnostics, PodEvent};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use tokio::time::Instant;

impl KubeLauncher {
    /// The member's diagnostics (see `Launcher::diagnostics`).
    pub(super) async fn collect_diagnostics(&mut self, member_id: &str) -> MemberDiagnostics {
        let Some(mp) = self.members.get(member_id) else {
            return MemberDiagnostics {
                launcher: self.name().into(),
                ..Default::default()
            };
        };
        let (pod_name, container) = (mp.pod.clone(), mp.container);
        // A worker the driver deleted (stopping the run) ends on that SIGTERM: its end tells
        // nothing, and waiting for each of them would hold the run's end for seconds.
        let stopped_by_the_driver = mp.role == "client"
            && self.stopping.contains(member_id)
            && !self.exits.contains_key(member_id);
        let ns = self.ns().to_string();
        // A process killed a moment ago shows as terminated only when the kubelet's next status
        // update arrives (1-3 s): give it that long from the failure's judgement, so the report
        // shows the termination.
        if !stopped_by_the_driver {
            let until = self
                .settle_until
                .unwrap_or_else(|| Instant::now() + DIAGNOSTICS_SETTLE);
            self.wait_member_ended(member_id, until).await;
        }
        // A fresh read: the watch may lag the kubelet by a moment.
        let pod = match self.pods.get(&pod_name).await {
            Ok(p) => Some(p),
            Err(_) => self.seen(member_id).map(|s| s.pod),
        };
        let status = pod
            .as_ref()
            .and_then(|p| p.status.clone())
            .unwrap_or_default();
        let restarts: i32 = status
            .container_statuses
            .iter()
            .flatten()
            .map(|c| c.restart_count)
            .sum();
        // A failed init container (a model image's copy) is where the member failed; Triton
        // never started, so that container's log says why.
        let log_container = pod
            .as_ref()
            .and_then(failed_init_container)
            .unwrap_or_else(|| container.to_string());
        let mut log_tail = self.log_tail(&pod_name, &log_container, false).await;
        if let Some(kept) = self.log_tails_before_stop.get(member_id)
            && log_unavailable(&log_tail)
        {
            log_tail = kept.clone();
            log_tail.push("[the log up to the driver's stop; the pod is gone now]".into());
        }
        let previous_log_tail = if restarts > 0 {
            self.log_tail(&pod_name, container, true).await
        } else {
            Vec::new()
        };
        let events = self.pod_events(&pod_name).await;
        MemberDiagnostics {
            launcher: self.name().into(),
            exit: self.exits.get(member_id).map(MemberEnd::from),
            command: self.command_line(member_id),
            location: self.locate(member_id),
            log_file: None,
            log_tail,
            pod: Some(PodDiagnostics {
                kubectl: kubectl_commands(&ns, &pod_name, container, &self.settings.run_id),
                namespace: ns,
                node: pod
                    .as_ref()
                    .and_then(|p| p.spec.as_ref())
                    .and_then(|s| s.node_name.clone()),
                phase: status.phase,
                status_reason: status.reason,
                ip: status.pod_ip,
                restarts,
                summary: pod.as_ref().map(pod_summary),
                containers: pod.as_ref().map(container_statuses).unwrap_or_default(),
                events,
                previous_log_tail,
                name: pod_name,
            }),
            server_metrics: None,
        }
    }

    /// Why a pod that should be ready is not: phase, conditions, container states and the
    /// pod's latest warning events (a failing readiness probe shows only there).
    pub(super) async fn not_ready_reason(&self, member: &str) -> String {
        let Some(seen) = self.seen(member) else {
            return "no pod seen (was it created?)".into();
        };
        let mut parts = vec![pod_summary(&seen.pod)];
        let events = self.pod_events(&seen.pod.name_any()).await;
        let warnings = not_ready_warnings(&events);
        if !warnings.is_empty() {
            let shown: Vec<String> = warnings.iter().map(ToString::to_string).collect();
            parts.push(format!("warnings: {}", shown.join("; ")));
        }
        parts.join("; ")
    }

    /// The pod's events, oldest first.
    pub(super) async fn pod_events(&self, pod: &str) -> Vec<PodEvent> {
        let events: Api<CoreEvent> = Api::namespaced(self.client.clone(), self.ns());
        let Ok(list) = events
            .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
            .await
        else {
            return Vec::new();
        };
        // The scheduler's events carry only eventTime; the kubelet's only lastTimestamp.
        let when = |e: &CoreEvent| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
                .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
        };
        let mut items = list.items;
        items.sort_by_key(|e| when(e).map(|t| t.as_second()).unwrap_or_default());
        items
            .iter()
            .map(|e| PodEvent {
                at: when(e).map(|t| t.to_string()),
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                message: e.message.clone().unwrap_or_default().trim().to_string(),
                count: e.count.unwrap_or(1),
            })
            .collect()
    }

    /// A member's log lines timed within `[from_ms, to_ms]`, read with the API's timestamps
    /// from a little before `from_ms`; none when the log cannot be read (the pod is gone).
    pub(super) async fn log_between(
        &self,
        member_id: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Vec<String> {
        let Some(mp) = self.members.get(member_id) else {
            return Vec::new();
        };
        let ago_s = (stress_common::now_ms() - from_ms).max(0) / 1000 + 2;
        let Ok(text) = self
            .pods
            .logs(
                &mp.pod,
                &LogParams {
                    container: Some(mp.container.into()),
                    timestamps: true,
                    since_seconds: Some(ago_s),
                    ..Default::default()
                },
            )
            .await
        else {
            return Vec::new();
        };
        crate::launcher::logs::between(
            text.lines(),
            from_ms,
            to_ms,
            crate::launcher::logs::kube_line,
        )
    }

    /// Reads the log tails of `members`' pods ([`KEEP_LOGS_AT_ONCE`] at a time, those read
    /// within [`KEEP_LOGS_LIMIT`]) before a failed run deletes them: what a worker logged while
    /// it failed is the report's evidence.
    pub(super) async fn keep_log_tails(&mut self, members: &[String]) {
        let pods: Vec<(String, String, String)> = members
            .iter()
            .filter_map(|m| {
                let mp = self.members.get(m)?;
                Some((m.clone(), mp.pod.clone(), mp.container.to_string()))
            })
            .collect();
        let this = &*self;
        let tails: Vec<(String, Vec<String>)> = futures::stream::iter(pods)
            .map(|(m, pod, container)| async move {
                let tail = this.log_tail(&pod, &container, false).await;
                (m, tail)
            })
            .buffer_unordered(KEEP_LOGS_AT_ONCE)
            .take_until(tokio::time::sleep(KEEP_LOGS_LIMIT))
            .collect()
            .await;
        if tails.len() < members.len() {
            tracing::info!(
                "{} of {} workers' log tails read within {KEEP_LOGS_LIMIT:?}",
                tails.len(),
                members.len()
            );
        }
        self.log_tails_before_stop.extend(tails);
    }

    /// The last lines of a container's log (of its previous instance with `previous`); none
    /// when the log cannot be read.
    async fn log_tail(&self, pod: &str, container: &str, previous: bool) -> Vec<String> {
        self.pods
            .logs(
                pod,
                &LogParams {
                    container: Some(container.into()),
                    previous,
                    tail_lines: Some(LOG_TAIL_LINES),
                    ..Default::default()
                },
            )
            .await
            .map(|text| text.lines().map(String::from).collect())
            .unwrap_or_default()
    }
}

/// How long a failed run's stop waits for its workers' log tails, and how many it asks the API
/// server for at once.
const KEEP_LOGS_LIMIT: std::time::Duration = std::time::Duration::from_secs(3);
const KEEP_LOGS_AT_ONCE: usize = 8;

/// Whether a log read gave nothing of the container's: empty, or the kubelet's word that the
/// container is gone ("unable to retrieve container logs for containerd://...").
fn log_unavailable(tail: &[String]) -> bool {
    match tail {
        [] => true,
        [only] => only.starts_with("unable to retrieve container logs"),
        _ => false,
    }
}

/// The commands that show a pod, its logs (also of a restarted container), a shell in it, and
/// the run's other pods.
fn kubectl_commands(ns: &str, pod: &str, container: &str, run_id: &str) -> Vec<String> {
    vec![
        format!("kubectl -n {ns} describe pod {pod}"),
        format!("kubectl -n {ns} logs {pod} -c {container}"),
        format!("kubectl -n {ns} logs {pod} -c {container} --previous"),
        format!("kubectl -n {ns} exec -it {pod} -c {container} -- sh"),
        format!("kubectl -n {ns} get pods -l {RUN_LABEL}={run_id} -o wide"),
    ]
}

/// The warnings that say why a pod is not ready, from its events (oldest first): the latest
/// of each reason, a failing probe (`Unhealthy`) first, then the others newest first, at most
/// `MAX_NOT_READY_WARNINGS`. Not just the latest warning: a cluster's repeated complaint about
/// its own setup (such as `MissingClusterDNS`) can be newer than every probe failure.
fn not_ready_warnings(events: &[PodEvent]) -> Vec<&PodEvent> {
    let mut latest: Vec<&PodEvent> = Vec::new();
    for e in events.iter().rev().filter(|e| e.type_ == "Warning") {
        if !latest.iter().any(|l| l.reason == e.reason) {
            latest.push(e);
        }
    }
    // Stable: newest first within each rank.
    latest.sort_by_key(|e| e.reason != PROBE_FAILED_REASON);
    latest.truncate(MAX_NOT_READY_WARNINGS);
    latest
}

/// The kubelet's event reason for a failing liveness, readiness or startup probe.
const PROBE_FAILED_REASON: &str = "Unhealthy";
const MAX_NOT_READY_WARNINGS: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_read_after_the_container_went_gives_way_to_the_one_kept() {
        let gone = "unable to retrieve container logs for containerd://43a5".to_string();
        assert!(log_unavailable(&[]));
        assert!(log_unavailable(std::slice::from_ref(&gone)));
        assert!(!log_unavailable(&["INFO started".into()]));
        assert!(!log_unavailable(&["a".into(), gone]));
    }

    fn event(type_: &str, reason: &str, message: &str, at: &str) -> PodEvent {
        PodEvent {
            at: Some(at.into()),
            type_: type_.into(),
            reason: reason.into(),
            message: message.into(),
            count: 1,
        }
    }

    #[test]
    fn a_failing_probe_is_named_first_even_when_a_newer_warning_is_about_the_cluster() {
        let events = [
            event("Normal", "Started", "Started container tritonserver", "t1"),
            event(
                "Warning",
                "Unhealthy",
                "Readiness probe failed: refused",
                "t2",
            ),
            event("Warning", "MissingClusterDNS", "no ClusterDNS IP", "t3"),
            event(
                "Warning",
                "Unhealthy",
                "Readiness probe failed: timeout",
                "t4",
            ),
            event(
                "Warning",
                "MissingClusterDNS",
                "no ClusterDNS IP again",
                "t5",
            ),
        ];
        let shown: Vec<String> = not_ready_warnings(&events)
            .iter()
            .map(|e| format!("{} {}", e.reason, e.message))
            .collect();
        assert_eq!(
            shown,
            [
                "Unhealthy Readiness probe failed: timeout",
                "MissingClusterDNS no ClusterDNS IP again",
            ]
        );
    }

    #[test]
    fn without_a_probe_failure_the_newest_warnings_are_named_and_normal_events_never() {
        let events = [
            event("Warning", "FailedMount", "a", "t1"),
            event("Warning", "BackOff", "b", "t2"),
            event("Normal", "Pulled", "c", "t3"),
            event("Warning", "Failed", "d", "t4"),
            event("Warning", "FailedScheduling", "e", "t5"),
        ];
        let reasons: Vec<&str> = not_ready_warnings(&events)
            .iter()
            .map(|e| e.reason.as_str())
            .collect();
        assert_eq!(reasons, ["FailedScheduling", "Failed", "BackOff"]);
        assert!(not_ready_warnings(&events[2..3]).is_empty());
    }
}
