//! The driver's lease on its run, renewed while it lives (a vanished driver's run is later
//! ABANDONED).

use super::STORE_CALL_LIMIT;
use crate::judge::rootcause::{LEASE_RENEWAL_MS, LEASE_TTL_MIN_MS};
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::millis;
use stress_common::store::{Store, within as bounded};

/// The driver's lease on its run, renewed every [`Lease::RENEWAL`] until dropped. A driver that
/// vanishes (SIGKILL, a drained node) stops renewing, and [`Lease::ttl`] later its run counts as
/// ABANDONED ([`Store::abandon_expired`]: the next `driver run` or `driver cleanup` on the store).
pub(super) struct Lease(tokio::task::JoinHandle<()>);

impl Lease {
    const RENEWAL: Duration = Duration::from_millis(LEASE_RENEWAL_MS as u64);

    /// Two minutes, and always a minute longer than a store outage the run survives, so a
    /// live driver's run is never taken for abandoned.
    pub(super) fn ttl(store_outage_limit: Duration) -> Duration {
        Duration::from_millis(LEASE_TTL_MIN_MS as u64)
            .max(store_outage_limit + Duration::from_secs(60))
    }

    pub(super) async fn hold(store: Store, run_id: RunId, ttl: Duration) -> Lease {
        let renew = move || {
            let (store, run_id) = (store.clone(), run_id.clone());
            async move {
                let until = stress_common::now_ms() + millis(ttl);
                if let Err(e) = bounded(STORE_CALL_LIMIT, store.renew_lease(&run_id, until)).await {
                    tracing::warn!("lease on run {run_id} not renewed: {e}");
                }
            }
        };
        renew().await;
        Lease(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Lease::RENEWAL).await;
                renew().await;
            }
        }))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.abort();
    }
}
