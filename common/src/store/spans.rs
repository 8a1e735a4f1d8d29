//! Traced requests ([`crate::trace`]): the client spans workers append with their snapshots,
//! the server spans the driver's OTLP receiver writes, and the read of a run's tail.

use super::*;
use crate::contract::{MemberName, RunId};
use crate::trace::{ClientSpan, ServerSpan, SpanEvent};

/// A run's traced requests above a latency rank, per (scenario, model), with every server
/// span of their traces.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TracedTail {
    /// Per (scenario, model): how many requests were traced.
    pub traced: Vec<TracedCount>,
    /// The slowest traced requests of each (scenario, model), by client latency (from the
    /// intended send to the answer), slowest first within each.
    pub client: Vec<ClientSpan>,
    /// The fastest traced requests to each server (by the time from send to answer, received,
    /// [`FASTEST_PER_SERVER`] at most): the tightest bounds on each server's clock offset.
    pub fastest: Vec<ClientSpan>,
    /// The server spans of those requests' traces (the tail's and the fastest's).
    pub server: Vec<ServerSpan>,
}

/// How many of the fastest traced requests per server [`Store::traced_tail`] reads.
pub const FASTEST_PER_SERVER: i64 = 50;

/// How many of a (scenario, model)'s requests were traced.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TracedCount {
    pub scenario: String,
    pub model: String,
    pub traced: i64,
}

#[derive(sqlx::FromRow)]
struct ClientSpanRow {
    trace_id: String,
    span_id: String,
    scenario: String,
    model: String,
    server: String,
    intended_ns: i64,
    sent_ns: i64,
    answered_ns: i64,
    received_ns: Option<i64>,
    ok: i64,
}

#[derive(sqlx::FromRow)]
struct ServerSpanRow {
    server: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    start_ns: i64,
    end_ns: i64,
    events: String,
}

impl From<ClientSpanRow> for ClientSpan {
    fn from(r: ClientSpanRow) -> Self {
        ClientSpan {
            trace_id: r.trace_id,
            span_id: r.span_id,
            scenario: r.scenario,
            model: r.model,
            server: r.server,
            intended_ns: r.intended_ns,
            sent_ns: r.sent_ns,
            answered_ns: r.answered_ns,
            received_ns: r.received_ns,
            ok: r.ok != 0,
        }
    }
}

impl ServerSpanRow {
    fn into_span(self, store: &Store) -> Result<ServerSpan> {
        let events: Vec<SpanEvent> = serde_json::from_str(&self.events)
            .map_err(|e| store.corrupt("traced_tail", format!("server span events: {e}")))?;
        Ok(ServerSpan {
            server: self.server,
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent_span_id,
            name: self.name,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            events,
        })
    }
}

/// The columns of a [`ClientSpanRow`], in every read of client spans.
macro_rules! client_span_columns {
    () => {
        "trace_id, span_id, scenario, model, server, intended_ns, sent_ns, answered_ns,
         received_ns, ok"
    };
}

/// A run's client spans (`$1`) with each one's latency rank within its (scenario, model),
/// slowest first, and how many that (scenario, model) has.
macro_rules! ranked_client_spans {
    () => {
        concat!(
            "SELECT ",
            client_span_columns!(),
            ", ROW_NUMBER() OVER (PARTITION BY scenario, model
                                   ORDER BY answered_ns - intended_ns DESC) AS rank,
                COUNT(*) OVER (PARTITION BY scenario, model) AS n
             FROM client_spans WHERE run_id = $1"
        )
    };
}

/// A run's client spans (`$1`) with each one's speed rank among those to its server, fastest
/// (client's send to answer) first.
macro_rules! fastest_client_spans {
    () => {
        concat!(
            "SELECT ",
            client_span_columns!(),
            ", ROW_NUMBER() OVER (PARTITION BY server
                                   ORDER BY COALESCE(received_ns, answered_ns) - sent_ns) AS quick
             FROM client_spans WHERE run_id = $1"
        )
    };
}

impl Store {
    /// Appends a member's client spans inside its snapshot's transaction.
    pub(super) async fn append_client_spans(
        &self,
        tx: &mut Transaction<'static, Any>,
        run_id: &RunId,
        member_id: &MemberName,
        spans: &[ClientSpan],
    ) -> Result<()> {
        for s in spans {
            sqlx::query(
                "INSERT INTO client_spans (run_id, member_id, trace_id, span_id, scenario, model,
                                           server, intended_ns, sent_ns, answered_ns,
                                           received_ns, ok)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            )
            .bind(run_id.as_str())
            .bind(member_id.as_str())
            .bind(&s.trace_id)
            .bind(&s.span_id)
            .bind(&s.scenario)
            .bind(&s.model)
            .bind(&s.server)
            .bind(s.intended_ns)
            .bind(s.sent_ns)
            .bind(s.answered_ns)
            .bind(s.received_ns)
            .bind(i64::from(s.ok))
            .execute(&mut **tx)
            .await
            .map_err(self.db("record_snapshot"))?;
        }
        Ok(())
    }

    /// Appends server spans (what one OTLP export carried), in one transaction.
    pub async fn record_server_spans(&self, run_id: &RunId, spans: &[ServerSpan]) -> Result<()> {
        const OP: &str = "record_server_spans";
        let mut tx = self.begin_write(OP).await?;
        for s in spans {
            let events = serde_json::to_string(&s.events).expect("events serialize");
            sqlx::query(
                "INSERT INTO server_spans (run_id, server, trace_id, span_id, parent_span_id,
                                           name, start_ns, end_ns, events)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(run_id.as_str())
            .bind(&s.server)
            .bind(&s.trace_id)
            .bind(&s.span_id)
            .bind(&s.parent_span_id)
            .bind(&s.name)
            .bind(s.start_ns)
            .bind(s.end_ns)
            .bind(events)
            .execute(&mut *tx)
            .await
            .map_err(self.db(OP))?;
        }
        tx.commit().await.map_err(self.db(OP))
    }

    /// The run's traced tail: per (scenario, model), its slowest `share` of traced requests
    /// (at least one each; `share` 0.01: those above the traced p99) with their server spans.
    /// Read in SQL by rank, so the report holds the tail, not every traced request.
    pub async fn traced_tail(&self, run_id: &RunId, share: f64) -> Result<TracedTail> {
        let traced: Vec<TracedCount> = sqlx::query_as(
            "SELECT scenario, model, COUNT(*) AS traced FROM client_spans WHERE run_id = $1
             GROUP BY scenario, model ORDER BY scenario, model",
        )
        .bind(run_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("traced_tail"))?;
        let client: Vec<ClientSpanRow> = sqlx::query_as(concat!(
            "SELECT ",
            client_span_columns!(),
            " FROM (",
            ranked_client_spans!(),
            ") AS r WHERE rank <= n * $2 OR rank = 1
             ORDER BY scenario, model, rank"
        ))
        .bind(run_id.as_str())
        .bind(share)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("traced_tail"))?;
        // The server spans of both the tail's traces and the fastest's, each span once.
        let server: Vec<ServerSpanRow> = sqlx::query_as(concat!(
            "SELECT server, trace_id, span_id, parent_span_id, name, start_ns, end_ns, events
             FROM server_spans WHERE run_id = $1 AND (trace_id IN
                 (SELECT trace_id FROM (",
            ranked_client_spans!(),
            ") AS r WHERE rank <= n * $2 OR rank = 1) OR trace_id IN
                 (SELECT trace_id FROM (",
            fastest_client_spans!(),
            ") AS f WHERE quick <= $3))
             ORDER BY id"
        ))
        .bind(run_id.as_str())
        .bind(share)
        .bind(FASTEST_PER_SERVER)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("traced_tail"))?;
        let fastest = self.fastest_traced(run_id).await?;
        let server = server
            .into_iter()
            .map(|row| row.into_span(self))
            .collect::<Result<_>>()?;
        Ok(TracedTail {
            traced,
            client: client.into_iter().map(ClientSpan::from).collect(),
            fastest,
            server,
        })
    }

    /// The fastest traced requests to each server.
    async fn fastest_traced(&self, run_id: &RunId) -> Result<Vec<ClientSpan>> {
        let client: Vec<ClientSpanRow> = sqlx::query_as(concat!(
            "SELECT ",
            client_span_columns!(),
            " FROM (",
            fastest_client_spans!(),
            ") AS f WHERE quick <= $2 ORDER BY server, quick"
        ))
        .bind(run_id.as_str())
        .bind(FASTEST_PER_SERVER)
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("traced_tail"))?;
        Ok(client.into_iter().map(ClientSpan::from).collect())
    }

    /// How many server spans the run's receiver recorded.
    pub async fn server_span_count(&self, run_id: &RunId) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM server_spans WHERE run_id = $1")
            .bind(run_id.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(self.db("server_span_count"))?;
        Ok(from_db(n))
    }

    /// At most `limit` of the run's client spans recorded after the one with id `after_id`
    /// (0: from the first), by id, each with its id: what a forwarder has not sent yet.
    pub async fn client_spans_after(
        &self,
        run_id: &RunId,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<(i64, ClientSpan)>> {
        #[derive(sqlx::FromRow)]
        struct Row {
            id: i64,
            #[sqlx(flatten)]
            span: ClientSpanRow,
        }
        let rows: Vec<Row> = sqlx::query_as(concat!(
            "SELECT id, ",
            client_span_columns!(),
            " FROM client_spans WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3"
        ))
        .bind(run_id.as_str())
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(self.db("client_spans_after"))?;
        Ok(rows
            .into_iter()
            .map(|r| (r.id, ClientSpan::from(r.span)))
            .collect())
    }
}
