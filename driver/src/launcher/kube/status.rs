//! Pure readings of a pod's status: whether its member has ended or failed and why, whether it
//! is ready and where, and one-line descriptions of its containers for people.

use crate::launcher::MemberExit;
use crate::launcher::diagnostics::ContainerStatus;
use k8s_openapi::api::core::v1::{ContainerState, Pod};
use kube::ResourceExt;
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
    for c in status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            return exit(
                Some(t.exit_code),
                t.signal,
                format!(
                    "container {} terminated: {}, exit code {}",
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
                    "container {} restarted {} time(s); last: {last}",
                    c.name, c.restart_count
                ),
            );
        }
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
            && let Some(reason) = w.reason.as_deref().filter(|r| FATAL_WAITING.contains(r))
        {
            return exit(
                None,
                None,
                format!(
                    "container {} waiting: {reason}{}",
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

/// Each container's state, readiness, restarts and last termination.
pub fn container_statuses(pod: &Pod) -> Vec<ContainerStatus> {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| ContainerStatus {
            name: c.name.clone(),
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
