//! One watch on a run's pods (never a busy poll): it keeps the latest pod of each member and
//! wakes whoever waits for a change.

use super::spec::MEMBER_LABEL;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// The latest state of a member's pod, as the watch saw it.
#[derive(Clone)]
pub struct Seen {
    pub pod: Pod,
    pub deleted: bool,
}

/// The latest pod of each member (by its member label), kept current by a background task.
pub struct PodWatch {
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodWatch {
    /// Starts watching the pods that `selector` selects.
    pub fn spawn(pods: Api<Pod>, selector: String) -> Self {
        let seen: Arc<Mutex<BTreeMap<String, Seen>>> = Arc::default();
        let changed = Arc::new(Notify::new());
        let task = tokio::spawn(watch_pods(pods, selector, seen.clone(), changed.clone()));
        Self {
            seen,
            changed,
            task,
        }
    }

    /// The member's pod as last seen.
    pub fn get(&self, member: &str) -> Option<Seen> {
        self.seen.lock().expect("seen").get(member).cloned()
    }

    /// Waits for the next pod change, or `at_most`.
    pub async fn next_change(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.changed.notified()).await;
    }
}

/// Keeps `seen` current from one watch on the run's pods and wakes whoever waits on `changed`.
async fn watch_pods(
    pods: Api<Pod>,
    selector: String,
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    changed: Arc<Notify>,
) {
    use kube::runtime::WatchStreamExt;
    let stream = watcher(pods, watcher::Config::default().labels(&selector)).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let (pod, deleted) = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
            Ok(watcher::Event::Delete(p)) => (p, true),
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!("watching pods ({selector}): {e}");
                continue;
            }
        };
        if let Some(member) = pod.labels().get(MEMBER_LABEL).cloned() {
            seen.lock()
                .expect("seen")
                .insert(member, Seen { pod, deleted });
            changed.notify_waiters();
        }
    }
}
