//! How the run learns that what a fault stopped is back (I/O, with the decisions pure): a
//! server READY again, an evicted worker's new process running, a restarted store writing
//! again.

use std::time::Duration;
use stress_common::store::{Store, within as bounded};

/// How often a killed or restarted server is asked whether it is READY again.
pub(super) const READY_PROBE: Duration = Duration::from_millis(100);
/// How often, and how long at most, a store-restart's probe reads the workers' heartbeats.
const STORE_PROBE: Duration = Duration::from_millis(500);

/// When the server at `http` answers READY again, probing every [`READY_PROBE`] until
/// `deadline`: only after it was seen not ready (a server stopping gracefully may still answer
/// for a moment).
pub(super) async fn ready_again(http: String, deadline: tokio::time::Instant) -> Option<i64> {
    let mut seen_down = false;
    loop {
        let ready =
            stress_common::tritonserver::http_status(&http, "/v2/health/ready").await == Some(200);
        if ready && seen_down {
            return Some(stress_common::now_ms());
        }
        seen_down |= !ready;
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(READY_PROBE).await;
    }
}

/// What the run's store says of a fault's recovery: a store-restart's (the store answers again
/// after it was seen down, and every worker has written since: its heartbeat, the time of its
/// latest snapshot, is later), and an evicted worker's (its new process is RUNNING).
#[derive(Clone)]
pub(super) struct StoreProbe {
    pub(super) store: Store,
    pub(super) run_id: stress_common::contract::RunId,
    pub(super) workers: Vec<String>,
}

impl StoreProbe {
    /// When every worker's writes were accepted again (None: not before `deadline`).
    pub(super) async fn written_again(self, deadline: tokio::time::Instant) -> Option<i64> {
        let mut recovery = StoreRecovery::default();
        loop {
            let read = bounded(STORE_PROBE, self.store.heartbeats(&self.run_id)).await;
            let now = stress_common::now_ms();
            if let Some(at) = recovery.observe(read.ok().as_deref(), &self.workers, now) {
                return Some(at);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(STORE_PROBE).await;
        }
    }

    /// When a worker evicted at `since_ms` runs again (its new process's RUNNING event, written
    /// once its pre-flight passed; None: not before `deadline`).
    pub(super) async fn running_again(
        self,
        member: String,
        since_ms: i64,
        deadline: tokio::time::Instant,
    ) -> Option<i64> {
        let mut after_id = 0;
        loop {
            if let Ok(events) =
                bounded(STORE_PROBE, self.store.events(&self.run_id, after_id)).await
            {
                after_id = events.last().map_or(after_id, |e| e.id);
                if let Some(at) = running_since(&events, &member, since_ms) {
                    return Some(at);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(STORE_PROBE).await;
        }
    }
}

/// The first RUNNING event of `member` at or after `since_ms`, among `events` (pure).
fn running_since(
    events: &[stress_common::store::EventRow],
    member: &str,
    since_ms: i64,
) -> Option<i64> {
    events
        .iter()
        .find(|e| {
            e.member_id == member
                && e.kind == stress_common::status::EventKind::Running
                && e.at_ms >= since_ms
        })
        .map(|e| e.at_ms)
}

/// What a store-restart's probe has seen so far (pure).
#[derive(Debug, Default)]
struct StoreRecovery {
    seen_down: bool,
    back_at_ms: Option<i64>,
}

impl StoreRecovery {
    /// One read of the workers' heartbeats at `now_ms` (None: it failed). Some(now_ms) once
    /// the store, after it was seen down, is back and every one of `workers` has a heartbeat
    /// later than its return.
    fn observe(
        &mut self,
        read: Option<&[(String, i64)]>,
        workers: &[String],
        now_ms: i64,
    ) -> Option<i64> {
        let Some(beats) = read else {
            self.seen_down = true;
            return None;
        };
        let back = match self.back_at_ms {
            Some(back) => back,
            None if self.seen_down => *self.back_at_ms.insert(now_ms),
            None => return None,
        };
        let written = |w: &String| beats.iter().any(|(m, at)| m == w && *at > back);
        workers.iter().all(written).then_some(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::{StoreRecovery, running_since};
    use stress_common::status::EventKind;
    use stress_common::store::EventRow;

    #[test]
    fn an_evicted_worker_runs_again_at_its_new_process_s_running_event() {
        let event = |id, member: &str, at_ms, kind| EventRow {
            id,
            member_id: member.into(),
            at_ms,
            kind,
            details: String::new(),
        };
        let events = [
            event(1, "w-0", 1_000, EventKind::Running),
            event(2, "w-0", 5_000, EventKind::Success),
            event(3, "w-1", 6_000, EventKind::Running),
            event(4, "w-0", 7_000, EventKind::Starting),
            event(5, "w-0", 9_000, EventKind::Running),
        ];
        assert_eq!(running_since(&events, "w-0", 5_000), Some(9_000));
        assert_eq!(
            running_since(&events[..4], "w-0", 5_000),
            None,
            "its old process's RUNNING, another worker's and a STARTING are not it"
        );
    }

    fn beats(list: &[(&str, i64)]) -> Vec<(String, i64)> {
        list.iter().map(|(m, at)| (m.to_string(), *at)).collect()
    }

    #[test]
    fn a_restarted_store_recovers_once_every_worker_wrote_after_its_return() {
        let workers = ["w-0".to_string(), "w-1".to_string()];
        let mut r = StoreRecovery::default();
        let before = beats(&[("w-0", 900), ("w-1", 950)]);
        // Still up right after the deletion (the old pod stops): not down yet, no recovery.
        assert_eq!(r.observe(Some(&before), &workers, 1_000), None);
        assert_eq!(r.observe(None, &workers, 1_500), None, "down");
        // Back at 3 s: the heartbeats are from before the outage.
        assert_eq!(r.observe(Some(&before), &workers, 3_000), None);
        // One worker's outbox flushed, the other not yet.
        let one = beats(&[("w-0", 3_200), ("w-1", 950)]);
        assert_eq!(r.observe(Some(&one), &workers, 3_500), None);
        let both = beats(&[("w-0", 3_200), ("w-1", 3_400)]);
        assert_eq!(r.observe(Some(&both), &workers, 4_000), Some(4_000));
    }

    #[test]
    fn a_store_never_seen_down_or_a_worker_that_never_writes_is_not_recovered() {
        let workers = ["w-0".to_string()];
        let mut never_down = StoreRecovery::default();
        let fresh = beats(&[("w-0", 5_000)]);
        assert_eq!(never_down.observe(Some(&fresh), &workers, 5_100), None);
        let mut silent = StoreRecovery::default();
        assert_eq!(silent.observe(None, &workers, 1_000), None);
        assert_eq!(silent.observe(Some(&[]), &workers, 2_000), None);
        assert_eq!(silent.observe(Some(&[]), &workers, 9_000), None);
    }
}
