//! What a failed member's pod tells: its status, its containers' log tails, its events, and the
//! kubectl commands to dig further. Read before cleanup deletes the pod.

use super::status::{container_lines, pod_summary};
use super::{DIAGNOSTICS_SETTLE, KubeLauncher, LOG_TAIL_LINES, RUN_LABEL};
use crate::launcher::{Launcher, MemberExit};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use std::time::{Duration, Instant};

impl KubeLauncher {
    /// The member's diagnostics (see `Launcher::diagnostics`).
    pub(super) async fn collect_diagnostics(&mut self, member_id: &str) -> serde_json::Value {
        let Some(mp) = self.members.get(member_id) else {
            return serde_json::json!({ "launcher": "kube" });
        };
        let (pod_name, container) = (mp.pod.clone(), mp.container);
        let ns = self.ns().to_string();
        // A process killed a moment ago shows as terminated only when the kubelet's next status
        // update arrives (~1 s): give it that long, so the report shows the termination.
        let deadline = Instant::now() + DIAGNOSTICS_SETTLE;
        while self.ended(member_id).is_none() && Instant::now() < deadline {
            self.next_change(Duration::from_millis(250)).await;
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
        let had_previous = restarts > 0;
        let log_tail = self.log_tail(&pod_name, container, false).await;
        let previous_log_tail = if had_previous {
            self.log_tail(&pod_name, container, true).await
        } else {
            None
        };
        let events = self.pod_events(&pod_name).await;
        let exit = self.exits.get(member_id).map(MemberExit::describe);
        let kubectl = vec![
            format!("kubectl -n {ns} describe pod {pod_name}"),
            format!("kubectl -n {ns} logs {pod_name} -c {container}"),
            format!("kubectl -n {ns} logs {pod_name} -c {container} --previous"),
            format!("kubectl -n {ns} exec -it {pod_name} -c {container} -- sh"),
            format!(
                "kubectl -n {ns} get pods -l {RUN_LABEL}={} -o wide",
                self.settings.run_id
            ),
        ];
        serde_json::json!({
            "launcher": "kube",
            "exit": exit,
            "namespace": ns,
            "pod": pod_name,
            "phase": status.phase,
            "status_reason": status.reason,
            "node": pod.as_ref().and_then(|p| p.spec.as_ref()).and_then(|s| s.node_name.clone()),
            "pod_ip": status.pod_ip,
            "restarts": restarts,
            "containers": pod.as_ref().map(container_lines).unwrap_or_default(),
            "summary": pod.as_ref().map(pod_summary),
            "events": events,
            "log_tail": log_tail,
            "previous_log_tail": previous_log_tail,
            "command": self.command_line(member_id),
            "kubectl": kubectl,
        })
    }

    /// Why a pod that should be ready is not: phase, conditions, container states and the
    /// pod's latest warning events (a failing readiness probe shows only there).
    pub(super) async fn not_ready_reason(&self, member: &str) -> String {
        let Some(seen) = self.seen(member) else {
            return "no pod seen (was it created?)".into();
        };
        let mut parts = vec![pod_summary(&seen.pod)];
        let events = self.pod_events(&seen.pod.name_any()).await;
        if let Some(last) = events.iter().rev().find(|e| e.contains("Warning")) {
            parts.push(format!("last warning: {last}"));
        }
        parts.join("; ")
    }

    /// The pod's events, oldest first, as `time type reason: message (xN)`.
    pub(super) async fn pod_events(&self, pod: &str) -> Vec<String> {
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
            .map(|e| {
                format!(
                    "{} {} {}: {}{}",
                    when(e).map(|t| t.to_string()).unwrap_or_default(),
                    e.type_.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default().trim(),
                    match e.count {
                        Some(n) if n > 1 => format!(" (x{n})"),
                        _ => String::new(),
                    }
                )
            })
            .collect()
    }

    async fn log_tail(&self, pod: &str, container: &str, previous: bool) -> Option<String> {
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
            .ok()
    }
}
