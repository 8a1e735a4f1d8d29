//! The event log (ordered per run, with notices on Postgres) and the workers' heartbeats.

use super::*;
use crate::contract::{MemberName, RunId};

impl Store {
    // ---- events ----------------------------------------------------------------------------

    /// Appends an event (at [`crate::now_ms`]) and returns its id.
    pub async fn record_event(
        &self,
        run_id: &RunId,
        member_id: &MemberName,
        kind: EventKind,
        details: &str,
    ) -> Result<i64> {
        const INSERT: &str = "INSERT INTO events (run_id, member_id, at_ms, kind, details)
                              VALUES ($1, $2, $3, $4, $5) RETURNING id";
        let at_ms = crate::now_ms();
        let insert = || {
            sqlx::query_scalar::<_, i64>(INSERT)
                .bind(run_id.as_str())
                .bind(member_id.as_str())
                .bind(at_ms)
                .bind(kind.as_str())
                .bind(details)
        };
        match self.backend {
            Backend::Sqlite => insert()
                .fetch_one(&self.pool)
                .await
                .map_err(self.db("record_event")),
            Backend::Postgres => {
                // Serialise the inserts of one run so that its ids become visible in order.
                let mut tx = self.begin_write("record_event").await?;
                sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
                    .bind(EVENT_LOCK_CLASS)
                    .bind(run_id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db("record_event"))?;
                let id = insert()
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(self.db("record_event"))?;
                // Delivered at the commit, when the event is visible: a listening driver
                // reads it at once instead of at its next poll.
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(EVENT_CHANNEL)
                    .bind(run_id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db("record_event"))?;
                tx.commit().await.map_err(self.db("record_event"))?;
                Ok(id)
            }
        }
    }

    fn event_row(&self, op: &'static str, row: &sqlx::any::AnyRow) -> Result<EventRow> {
        let get = || -> std::result::Result<(i64, String, i64, String, String), sqlx::Error> {
            Ok((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
                row.try_get(4)?,
            ))
        };
        let (id, member_id, at_ms, kind, details) = get().map_err(self.db(op))?;
        let kind = EventKind::parse(&kind)
            .ok_or_else(|| self.corrupt(op, format!("event {id} has unknown kind {kind:?}")))?;
        Ok(EventRow {
            id,
            member_id,
            at_ms,
            kind,
            details,
        })
    }

    /// Wakes its holder when `run_id` records an event, on Postgres (LISTEN on its own
    /// connection; each event insert NOTIFYs at its commit); None on SQLite, which has no such
    /// thing (poll [`Self::events`]). Best effort: a notice lost while the connection is down
    /// is made up by one wake at the reconnect, and the caller still polls as a fallback.
    pub async fn event_notices(&self, run_id: &RunId) -> Result<Option<EventNotices>> {
        let Some(url) = &self.listen_url else {
            return Ok(None);
        };
        let mut listener = sqlx::postgres::PgListener::connect(url)
            .await
            .map_err(self.db("event_notices"))?;
        listener
            .listen(EVENT_CHANNEL)
            .await
            .map_err(self.db("event_notices"))?;
        let woken = Arc::new(tokio::sync::Notify::new());
        let wake = woken.clone();
        let run_id = run_id.to_string();
        let masked = self.url.clone();
        let task = tokio::spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(notice)) if notice.payload() == run_id => wake.notify_one(),
                    Ok(Some(_)) => {}
                    // The connection dropped (and reconnects on the next call): what was
                    // said meanwhile is lost, so look once.
                    Ok(None) => wake.notify_one(),
                    Err(e) => {
                        tracing::debug!("event notices from {masked}: {e}; retrying in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(Some(EventNotices { woken, task }))
    }

    /// The events of a run with an id above `after_id` (0 for all), ascending. Poll with the
    /// last id seen.
    pub async fn events(&self, run_id: &RunId, after_id: i64) -> Result<Vec<EventRow>> {
        let rows = sqlx::query(
            "SELECT id, member_id, at_ms, kind, details FROM events
             WHERE run_id = $1 AND id > $2 ORDER BY id",
        )
        .bind(run_id.as_str())
        .bind(after_id)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("events"))?;
        rows.iter()
            .map(|row| self.event_row("events", row))
            .collect()
    }

    /// How the driver is stopping `run_id`: its first stop event ([`Stopping`]), None before.
    pub async fn stopping(&self, run_id: &RunId) -> Result<Option<Stopping>> {
        let details: Option<String> = sqlx::query_scalar(
            "SELECT details FROM events
             WHERE run_id = $1 AND member_id = $2 AND kind = $3 AND details LIKE $4
             ORDER BY id LIMIT 1",
        )
        .bind(run_id.as_str())
        .bind(DRIVER_MEMBER)
        .bind(EventKind::Running.as_str())
        .bind(format!("{}%", Stopping::PREFIX))
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db("stopping"))?;
        Ok(details.as_deref().and_then(Stopping::parse))
    }

    /// The run's first FAILURE event.
    pub async fn first_failure(&self, run_id: &RunId) -> Result<Option<EventRow>> {
        let row = sqlx::query(
            "SELECT id, member_id, at_ms, kind, details FROM events
             WHERE run_id = $1 AND kind = $2 ORDER BY id LIMIT 1",
        )
        .bind(run_id.as_str())
        .bind(EventKind::Failure.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(self.db("first_failure"))?;
        row.map(|row| self.event_row("first_failure", &row))
            .transpose()
    }

    // ---- heartbeats ------------------------------------------------------------------------

    pub(super) const HEARTBEAT: &str =
        "INSERT INTO heartbeats (run_id, member_id, at_ms) VALUES ($1, $2, $3)
                             ON CONFLICT (run_id, member_id) DO UPDATE SET at_ms = excluded.at_ms
                             WHERE heartbeats.at_ms <= excluded.at_ms";

    /// Sets the member's last heartbeat.
    pub async fn heartbeat(
        &self,
        run_id: &RunId,
        member_id: &MemberName,
        at_ms: i64,
    ) -> Result<()> {
        sqlx::query(Self::HEARTBEAT)
            .bind(run_id.as_str())
            .bind(member_id.as_str())
            .bind(at_ms)
            .execute(&self.pool)
            .await
            .map_err(self.db("heartbeat"))?;
        Ok(())
    }

    /// (member_id, last heartbeat ms) of every member that sent one, by member id.
    pub async fn heartbeats(&self, run_id: &RunId) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(
            "SELECT member_id, at_ms FROM heartbeats WHERE run_id = $1 ORDER BY member_id",
        )
        .bind(run_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("heartbeats"))
    }
}

/// The class (first key) of the Postgres advisory locks that order a run's events ("ev").
const EVENT_LOCK_CLASS: i32 = 0x6576;

/// The Postgres NOTIFY channel of event inserts; the payload is the run id.
const EVENT_CHANNEL: &str = "triton_stress_events";

/// See [`Store::event_notices`]; dropping it stops listening.
pub struct EventNotices {
    woken: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl EventNotices {
    /// Returns when the run has recorded an event since the last return (notices in between
    /// are coalesced into one). Cancel-safe.
    pub async fn recorded(&self) {
        self.woken.notified().await
    }
}

impl Drop for EventNotices {
    fn drop(&mut self) {
        self.task.abort();
    }
}
