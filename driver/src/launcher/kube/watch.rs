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
use tokio::time::Instant;

/// The latest state of a member's pod, as the watch saw it.
#[derive(Clone)]
pub struct Seen {
    pub pod: Pod,
    pub deleted: bool,
}

/// The latest pod of each member (by its member label), kept current by a background task.
pub struct PodWatch {
    pods: Arc<Pods>,
    task: tokio::task::JoinHandle<()>,
}

/// What the watch task writes and the launcher reads.
#[derive(Default)]
struct Pods {
    seen: Mutex<BTreeMap<String, Seen>>,
    changed: Notify,
}

impl Pods {
    /// Records a member's pod and wakes whoever waits for a change.
    fn record(&self, member: String, seen: Seen) {
        self.seen.lock().expect("seen").insert(member, seen);
        self.changed.notify_waiters();
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodWatch {
    /// Starts watching the pods that `selector` selects.
    pub fn spawn(pods: Api<Pod>, selector: String) -> Self {
        let shared = Arc::new(Pods::default());
        let task = tokio::spawn(watch_pods(pods, selector, shared.clone()));
        Self { pods: shared, task }
    }

    /// The member's pod as last seen.
    pub fn get(&self, member: &str) -> Option<Seen> {
        self.pods.seen.lock().expect("seen").get(member).cloned()
    }

    /// Returns at the next change of any pod (a change between two calls is not seen: the
    /// caller's own tick covers it).
    pub async fn changed(&self) {
        self.pods.changed.notified().await;
    }

    /// Evaluates `check` on the latest pods until it answers `Ok`, or until `deadline`, when its
    /// last `Err` is the answer. It runs again on every pod change, and at least every `recheck`
    /// for rules that depend on time alone (a pod Pending too long changes nothing).
    pub async fn wait_for<T, E>(
        &self,
        deadline: Instant,
        recheck: Duration,
        mut check: impl FnMut(&BTreeMap<String, Seen>) -> Result<T, E>,
    ) -> Result<T, E> {
        loop {
            // Registered before the check, so a change during the check still wakes this.
            let changed = self.pods.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let answer = check(&self.pods.seen.lock().expect("seen"));
            let now = Instant::now();
            if answer.is_ok() || now >= deadline {
                return answer;
            }
            let _ = tokio::time::timeout_at(deadline.min(now + recheck), changed).await;
        }
    }
}

/// Keeps `shared` current from one watch on the run's pods.
async fn watch_pods(pods: Api<Pod>, selector: String, shared: Arc<Pods>) {
    use kube::runtime::WatchStreamExt;
    let stream = watcher(
        pods,
        watcher::Config::default()
            .labels(&selector)
            .timeout(super::WATCH_TIMEOUT_S),
    )
    .default_backoff();
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
            shared.record(member, Seen { pod, deleted });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch fed by the test instead of a cluster.
    fn fed_by_hand() -> PodWatch {
        PodWatch {
            pods: Arc::default(),
            task: tokio::spawn(std::future::pending()),
        }
    }

    fn seen(name: &str) -> Seen {
        Seen {
            pod: Pod {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            deleted: false,
        }
    }

    /// A change wakes the wait at once, not at its next recheck.
    #[tokio::test]
    async fn a_pod_change_answers_the_wait_without_waiting_for_the_recheck() {
        let watch = fed_by_hand();
        let pods = watch.pods.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            pods.record("a".into(), seen("run-a"));
        });
        let started = Instant::now();
        let answer = watch
            .wait_for(
                started + Duration::from_secs(20),
                Duration::from_secs(10),
                |seen| seen.get("a").map(|s| s.pod.name_any()).ok_or(()),
            )
            .await;
        assert_eq!(answer, Ok("run-a".to_string()));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    /// A pod change wakes whoever waits on `changed` (the poll loop's exit check).
    #[tokio::test]
    async fn a_pod_change_wakes_the_waiter() {
        let watch = fed_by_hand();
        let pods = watch.pods.clone();
        let waiter = tokio::spawn(async move { watch.changed().await });
        tokio::task::yield_now().await;
        // Until the waiter registered, a record could go unseen: repeat until it wakes.
        let woke = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                pods.record("a".into(), seen("run-a"));
                if waiter.is_finished() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(woke.is_ok(), "the change did not wake the waiter");
    }

    /// Without an answer by the deadline, the last check's is returned.
    #[tokio::test]
    async fn the_deadline_returns_the_last_check() {
        let watch = fed_by_hand();
        let mut checks = 0;
        let started = Instant::now();
        let answer: Result<(), u32> = watch
            .wait_for(
                started + Duration::from_millis(300),
                Duration::from_millis(100),
                |_| {
                    checks += 1;
                    Err(checks)
                },
            )
            .await;
        // Rechecked on time alone: at 0, 100, 200 and 300 ms (give or take the scheduler).
        assert!(matches!(answer, Err(n) if n >= 3), "{answer:?}");
        assert!(started.elapsed() >= Duration::from_millis(300));
    }
}
