//! Pure readings of a pod's status: whether its member has ended or failed and why, whether it
//! is ready and where, and one-line descriptions of its containers for people.

use super::watch::Seen;
use super::{GRPC_PORT, HTTP_PORT, METRICS_PORT};
use crate::launcher::MemberExit;
use crate::launcher::diagnostics::ContainerStatus;
use crate::plan::ServerEndpoint;
use k8s_openapi::api::core::v1::{ContainerState, Pod};
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::time::Duration;

/// Waiting reasons that will not resolve by themselves: the member has failed.
const FATAL_WAITING: &[&str] = &[
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// Whether a waiting container's message is the kubelet's own slowness, which it retries
/// (a secret or config map cache not synced in time, seen on a loaded node): the member has
/// not failed; the pending timeout still bounds it.
fn kubelet_retries(message: &str) -> bool {
    message.contains("failed to sync") && message.contains("timed out waiting for the condition")
}

/// Why a pod the driver did not delete is going: evicted (a node drained, an unplanned
/// eviction), preempted or deleted by someone else, in the words of its `DisruptionTarget`
/// condition where the cluster sets one (Kubernetes 1.26 on). Says "evicted": the judges
/// take it for the platform's doing, not the member's.
pub fn ended_by_cluster(pod: &Pod) -> String {
    let condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        .map(|c| {
            format!(
                ": {}{}",
                c.reason.as_deref().unwrap_or("DisruptionTarget"),
                c.message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_default();
    format!(
        "pod {} was evicted or deleted by the cluster, not by the driver{condition}",
        pod.name_any()
    )
}

/// Whether a pod's state means its member has ended or failed, and why: a container that
/// terminated or restarted, a waiting reason that does not heal, a Failed or Succeeded pod, a
/// pod deleted, or one Pending longer than `pending_timeout`.
pub fn pod_exit(
    member: &str,
    pod: &Pod,
    deleted: bool,
    pending_timeout: Duration,
) -> Option<MemberExit> {
    let exit = |code: Option<i32>, signal: Option<i32>, reason: String| {
        Some(MemberExit {
            member_id: member.into(),
            code,
            signal,
            reason: Some(reason),
        })
    };
    let status = pod.status.as_ref();
    // Init containers run first (a model image's copy): one that failed or cannot start ends
    // the member; one that completed is their normal end.
    let init = status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c, "init container"));
    let main = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c, "container"));
    for (c, kind) in init.chain(main) {
        if let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            if kind == "init container" && t.exit_code == 0 {
                continue;
            }
            return exit(
                Some(t.exit_code),
                t.signal,
                format!(
                    "{kind} {} terminated: {}, exit code {}",
                    c.name,
                    t.reason.as_deref().unwrap_or("?"),
                    t.exit_code
                ),
            );
        }
        if c.restart_count > 0 {
            let last = c
                .last_state
                .as_ref()
                .map(describe_state)
                .unwrap_or_default();
            return exit(
                None,
                None,
                format!(
                    "{kind} {} restarted {} time(s); last: {last}",
                    c.name, c.restart_count
                ),
            );
        }
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
            && let Some(reason) = w.reason.as_deref().filter(|r| FATAL_WAITING.contains(r))
            && !kubelet_retries(w.message.as_deref().unwrap_or(""))
        {
            return exit(
                None,
                None,
                format!(
                    "{kind} {} waiting: {reason}{}",
                    c.name,
                    w.message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ),
            );
        }
    }
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if phase == "Failed" || phase == "Succeeded" {
        return exit(None, None, format!("pod {}", pod_summary(pod)));
    }
    if deleted {
        return exit(None, None, format!("pod {} was deleted", pod.name_any()));
    }
    if phase == "Pending"
        && let Some(created) = pod.metadata.creation_timestamp.as_ref()
    {
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.0);
        let age = Duration::from_secs(age.as_secs().max(0) as u64);
        if age > pending_timeout {
            return exit(
                None,
                None,
                format!("Pending for {}s: {}", age.as_secs(), pod_summary(pod)),
            );
        }
    }
    None
}

/// How a member's pod, as last seen, ended or failed (None: it is fine, or not seen yet).
pub fn member_exit(
    seen: &BTreeMap<String, Seen>,
    member: &str,
    pending_timeout: Duration,
) -> Option<MemberExit> {
    let s = seen.get(member)?;
    pod_exit(member, &s.pod, s.deleted, pending_timeout)
}

/// The init container of the pod that terminated with a non-zero exit code, if one did.
pub fn failed_init_container(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .init_container_statuses
        .iter()
        .flatten()
        .find(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code != 0)
        })
        .map(|c| c.name.clone())
}

/// Where a run's servers stand on their way to ready.
#[derive(Debug, Default, PartialEq)]
pub struct Readiness {
    /// The servers that are ready, with their addresses.
    pub ready: Vec<ServerEndpoint>,
    /// The first server whose pod ended or failed, and why.
    pub failed: Option<(String, String)>,
    /// The first server not ready yet (no pod seen, not Ready, or no address).
    pub waiting: Option<String>,
}

/// Reads the servers' pods as last seen: ready ones get their endpoints.
pub fn servers_readiness(
    servers: &[String],
    seen: &BTreeMap<String, Seen>,
    pending_timeout: Duration,
) -> Readiness {
    let mut r = Readiness::default();
    for name in servers {
        if let Some(exit) = member_exit(seen, name, pending_timeout) {
            r.failed.get_or_insert((name.clone(), exit.describe()));
            continue;
        }
        match seen.get(name).map(|s| (is_ready(&s.pod), pod_ip(&s.pod))) {
            Some((true, Some(ip))) => r.ready.push(ServerEndpoint {
                member: name.clone(),
                grpc: format!("{ip}:{GRPC_PORT}"),
                http: format!("{ip}:{HTTP_PORT}"),
                metrics: format!("{ip}:{METRICS_PORT}"),
            }),
            _ => {
                r.waiting.get_or_insert(name.clone());
            }
        }
    }
    r
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// Each container's state, readiness, restarts and last termination; init containers first,
/// named `NAME (init)`.
pub fn container_statuses(pod: &Pod) -> Vec<ContainerStatus> {
    let init = pod
        .status
        .iter()
        .flat_map(|s| s.init_container_statuses.iter().flatten())
        .map(|c| (c, format!("{} (init)", c.name)));
    let main = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| (c, c.name.clone()));
    init.chain(main)
        .map(|(c, name)| ContainerStatus {
            name,
            state: c.state.as_ref().map(describe_state).unwrap_or_default(),
            ready: c.ready,
            restarts: c.restart_count,
            last_termination: c
                .last_state
                .as_ref()
                .filter(|s| s.terminated.is_some())
                .map(describe_state),
        })
        .collect()
}

fn describe_state(s: &ContainerState) -> String {
    if let Some(t) = &s.terminated {
        let mut out = format!(
            "terminated ({}, exit code {}",
            t.reason.as_deref().unwrap_or("?"),
            t.exit_code
        );
        if let Some(sig) = t.signal {
            out.push_str(&format!(", signal {sig}"));
        }
        if let Some(at) = &t.finished_at {
            out.push_str(&format!(", at {}", at.0));
        }
        if let Some(m) = t.message.as_deref().filter(|m| !m.trim().is_empty()) {
            out.push_str(&format!(": {}", m.trim()));
        }
        out.push(')');
        out
    } else if let Some(w) = &s.waiting {
        format!(
            "waiting ({}{})",
            w.reason.as_deref().unwrap_or("?"),
            w.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )
    } else if let Some(r) = &s.running {
        format!(
            "running since {}",
            r.started_at
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default()
        )
    } else {
        "unknown".into()
    }
}

/// Phase, unmet conditions and container states in one line.
pub fn pod_summary(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let mut parts = vec![format!(
        "pod {} {}",
        pod.name_any(),
        status.phase.as_deref().unwrap_or("Unknown")
    )];
    if let Some(reason) = status.reason.as_deref() {
        parts.push(format!(
            "{reason}: {}",
            status.message.as_deref().unwrap_or_default()
        ));
    }
    for c in status.conditions.iter().flatten() {
        if c.status != "True" {
            let why = [c.reason.as_deref(), c.message.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
            if !why.is_empty() {
                parts.push(format!("{}=False ({why})", c.type_));
            }
        }
    }
    parts.extend(container_statuses(pod).iter().map(ToString::to_string));
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cache_the_kubelet_did_not_sync_in_time_is_not_a_failure() {
        assert!(super::kubelet_retries(
            "failed to sync secret cache: timed out waiting for the condition"
        ));
        assert!(!super::kubelet_retries("secret \"store\" not found"));
    }

    use super::*;

    /// A pod the driver did not delete, going: the platform's doing (`judge::classify` takes
    /// "evicted" for it), in the cluster's own words where it gives them.
    #[test]
    fn a_pod_evicted_by_the_cluster_is_the_platform_s_doing_with_its_reason() {
        let drained = pod(
            "t-0",
            serde_json::json!({ "phase": "Running", "conditions": [{
                "type": "DisruptionTarget", "status": "True",
                "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting",
            }]}),
        );
        let why = ended_by_cluster(&drained.pod);
        assert_eq!(
            why,
            "pod t-0 was evicted or deleted by the cluster, not by the driver: \
             EvictionByEvictionAPI (Eviction API: evicting)"
        );
        // Without the condition (Kubernetes before 1.26), still the platform's.
        let older = pod("t-1", serde_json::json!({ "phase": "Running" }));
        assert!(ended_by_cluster(&older.pod).ends_with("not by the driver"));
    }

    fn pod(name: &str, status: serde_json::Value) -> Seen {
        Seen {
            pod: serde_json::from_value(serde_json::json!({
                "metadata": { "name": name },
                "status": status,
            }))
            .unwrap(),
            deleted: false,
        }
    }

    fn ready(ip: Option<&str>) -> serde_json::Value {
        serde_json::json!({
            "phase": "Running",
            "podIP": ip,
            "conditions": [{ "type": "Ready", "status": "True" }],
            "containerStatuses": [{
                "name": "tritonserver", "image": "i", "imageID": "", "ready": true,
                "restartCount": 0, "state": { "running": {} },
            }],
        })
    }

    const PENDING: Duration = Duration::from_secs(300);

    #[test]
    fn ready_servers_get_endpoints_and_the_first_other_one_waits() {
        let servers: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let seen = BTreeMap::from([
            ("a".to_string(), pod("run-a", ready(Some("10.0.0.1")))),
            // Ready, but its address is not reported yet.
            ("b".to_string(), pod("run-b", ready(None))),
            (
                "c".to_string(),
                pod(
                    "run-c",
                    serde_json::json!({
                        "phase": "Running",
                        "podIP": "10.0.0.3",
                        "conditions": [{ "type": "Ready", "status": "False" }],
                    }),
                ),
            ),
            // "d" has no pod yet.
        ]);
        let r = servers_readiness(&servers, &seen, PENDING);
        assert_eq!(
            r.ready,
            [ServerEndpoint {
                member: "a".into(),
                grpc: "10.0.0.1:8001".into(),
                http: "10.0.0.1:8000".into(),
                metrics: "10.0.0.1:8002".into(),
            }]
        );
        assert_eq!((r.failed, r.waiting.as_deref()), (None, Some("b")));
        let r = servers_readiness(&servers[2..], &seen, PENDING);
        assert_eq!(r.waiting.as_deref(), Some("c"));
        let r = servers_readiness(&servers[3..], &seen, PENDING);
        assert_eq!(r.waiting.as_deref(), Some("d"));
        let all_ready = servers_readiness(&servers[..1], &seen, PENDING);
        assert_eq!((all_ready.ready.len(), all_ready.waiting), (1, None));
    }

    /// A server pod with a model image: its copy's init container in `init`, Triton waiting.
    fn initialising(init: serde_json::Value, phase: &str) -> serde_json::Value {
        serde_json::json!({
            "phase": phase,
            "initContainerStatuses": [{
                "name": "model-image", "image": "m", "imageID": "", "ready": false,
                "restartCount": 0, "state": init,
            }],
            "containerStatuses": [{
                "name": "tritonserver", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": { "waiting": { "reason": "PodInitializing" } },
            }],
        })
    }

    #[test]
    fn a_failed_model_copy_fails_the_server_and_a_completed_one_does_not() {
        let failed = pod(
            "run-a",
            initialising(
                serde_json::json!({ "terminated": { "exitCode": 1, "reason": "Error" } }),
                "Failed",
            ),
        );
        let exit = pod_exit("a", &failed.pod, false, PENDING).unwrap();
        assert_eq!(
            (exit.code, exit.reason.as_deref()),
            (
                Some(1),
                Some("init container model-image terminated: Error, exit code 1")
            )
        );
        let names: Vec<String> = container_statuses(&failed.pod)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["model-image (init)", "tritonserver"]);
        assert_eq!(
            failed_init_container(&failed.pod).as_deref(),
            Some("model-image")
        );

        let no_image = pod(
            "run-a",
            initialising(
                serde_json::json!({ "waiting": { "reason": "ErrImageNeverPull", "message": "no models image" } }),
                "Pending",
            ),
        );
        let exit = pod_exit("a", &no_image.pod, false, PENDING).unwrap();
        assert_eq!(
            exit.reason.as_deref(),
            Some("init container model-image waiting: ErrImageNeverPull: no models image")
        );

        let copying = pod(
            "run-a",
            initialising(serde_json::json!({ "running": {} }), "Pending"),
        );
        assert_eq!(pod_exit("a", &copying.pod, false, PENDING), None);
        let copied = pod(
            "run-a",
            initialising(
                serde_json::json!({ "terminated": { "exitCode": 0, "reason": "Completed" } }),
                "Pending",
            ),
        );
        assert_eq!(pod_exit("a", &copied.pod, false, PENDING), None);
        assert_eq!(failed_init_container(&copied.pod), None);
        // After a completed copy, Triton's own end is what counts.
        let mut crashed = copied.pod.clone();
        crashed
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = serde_json::from_value(serde_json::json!({
            "terminated": { "exitCode": 137, "reason": "OOMKilled" }
        }))
        .unwrap();
        assert_eq!(
            pod_exit("a", &crashed, false, PENDING).and_then(|e| e.reason),
            Some("container tritonserver terminated: OOMKilled, exit code 137".into())
        );
    }

    #[test]
    fn a_terminated_server_has_failed_with_the_kubelets_reason() {
        let seen = BTreeMap::from([(
            "a".to_string(),
            pod(
                "run-a",
                serde_json::json!({
                    "phase": "Failed",
                    "containerStatuses": [{
                        "name": "tritonserver", "image": "i", "imageID": "", "ready": false,
                        "restartCount": 0,
                        "state": { "terminated": { "exitCode": 137, "reason": "OOMKilled" } },
                    }],
                }),
            ),
        )]);
        let r = servers_readiness(&["a".to_string()], &seen, PENDING);
        assert_eq!(
            r.failed,
            Some((
                "a".into(),
                "container tritonserver terminated: OOMKilled, exit code 137".into()
            ))
        );
        assert!(r.ready.is_empty() && r.waiting.is_none());
    }
}
