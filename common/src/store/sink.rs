//! [`StoreSink`]: a worker's [`StatusSink`] that writes straight into the store.

use super::Store;
use crate::status::{
    EventKind, FailureRecord, LoadTarget, SinkError, StatusSink, Stopping, WorkerSnapshot,
};

/// Writes a member's reports into the store: events to `events`, heartbeats to `heartbeats`,
/// snapshots through [`Store::record_snapshot`], failures through [`Store::record_failure`].
/// Made with [`Store::sink`].
#[derive(Debug, Clone)]
pub struct StoreSink {
    pub store: Store,
    pub run_id: crate::contract::RunId,
    pub member_id: crate::contract::MemberName,
}

fn sink_error(error: super::StoreError) -> SinkError {
    SinkError(error.to_string())
}

#[async_trait::async_trait]
impl StatusSink for StoreSink {
    async fn event(&self, kind: EventKind, details: &str) -> Result<(), SinkError> {
        self.store
            .record_event(&self.run_id, &self.member_id, kind, details)
            .await
            .map(drop)
            .map_err(sink_error)
    }

    async fn heartbeat(&self) -> Result<(), SinkError> {
        self.store
            .heartbeat(&self.run_id, &self.member_id, crate::now_ms())
            .await
            .map_err(sink_error)
    }

    async fn snapshot(&self, snapshot: &WorkerSnapshot) -> Result<(), SinkError> {
        self.store
            .record_snapshot(&self.run_id, &self.member_id, snapshot)
            .await
            .map_err(sink_error)
    }

    async fn failure(&self, failure: &FailureRecord) -> Result<(), SinkError> {
        self.store
            .record_failure(&self.run_id, &self.member_id, failure)
            .await
            .map(drop)
            .map_err(sink_error)
    }

    fn connections(&self) -> Option<String> {
        Some(self.store.connections())
    }

    async fn load_target(&self) -> Result<Option<LoadTarget>, SinkError> {
        self.store
            .load_target(&self.run_id, &self.member_id)
            .await
            .map_err(sink_error)
    }

    async fn stopping(&self) -> Result<Option<Stopping>, SinkError> {
        self.store.stopping(&self.run_id).await.map_err(sink_error)
    }

    async fn reported(&self) -> Result<crate::status::carry::Reported, SinkError> {
        self.store
            .reported(&self.run_id, &self.member_id)
            .await
            .map_err(sink_error)
    }
}
