//! The run's OTLP/HTTP receiver of Triton's spans (`--trace-config mode=opentelemetry`), and
//! `run.otlp_forward`: each launched server exports to its own path
//! (`POST /servers/MEMBER/v1/traces`, [`OtlpReceiver::url_for`]), a user's collector to
//! `POST /v1/traces` (server [`EXTERNAL`]); bodies are OTLP/JSON or protobuf, optionally gzip
//! (<https://opentelemetry.io/docs/specs/otlp/#otlphttp>).
//!
//! The exporter is never slowed or failed by the store: each body is answered at once, its
//! spans ([`server_spans`]) go through a bounded queue to one writer task that records them in
//! batches, each write bounded and followed by as long a rest (the run's own writes share the
//! store); a full queue or a failed write drops them, counted
//! ([`ReceiverCounts`]). Forwarding is the same: one task sends the received bodies (and the
//! clients' spans, [`client_request`]) from a bounded queue, dropping and counting what fails.
//! The clients' spans go as the workers record them (every [`CLIENT_SPANS_EVERY`]), not at the
//! run's end: a night's soak shows in the user's collector while it runs, and its end is not
//! one burst past the queue.

pub use crate::report::spans::ReceiverCounts;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::store::{Store, within};
use stress_common::trace::{ClientSpan, ServerSpan};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

mod convert;
mod forward;
pub use convert::{client_request, server_spans};
use forward::forward_bodies;

/// The server of spans that come on `POST /v1/traces` (a user's collector, not a member).
pub const EXTERNAL: &str = "external";
/// Bodies' spans waiting for the store; past this, a body's spans are dropped.
pub const STORE_QUEUE: usize = 256;
/// Bodies waiting to be forwarded; past this, a body is dropped.
pub const FORWARD_QUEUE: usize = 256;
/// The spans one store write takes at most (a body's are not split, so one more body's
/// beyond): a write holds the store's writer (SQLite has one) while it runs, and the run's own
/// writes (heartbeats, failures, samples) wait behind it. Measured: 64 bodies of an ensemble
/// traced at 2,000 requests/s made writes of seconds, and workers' heartbeats missed their
/// 3 s limit (the run failed as "lost the store").
const BATCH_SPANS: usize = 2_000;
/// One store write answers within this, or its spans are dropped.
const STORE_LIMIT: Duration = Duration::from_secs(3);
/// One forward answers within this, or it is dropped.
const FORWARD_LIMIT: Duration = Duration::from_secs(5);
/// How long the queues are flushed once the stop is seen; what is left then is dropped.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);
/// How long the HTTP server may take to close its connections at the stop.
const SERVER_STOP_LIMIT: Duration = Duration::from_secs(2);
/// The longest [`OtlpReceiver::stop`] takes: the server's close, the clients' spans' last pass,
/// the work in flight (a store write or a forward, the longer), then the flush.
pub const STOP_LIMIT: Duration = SERVER_STOP_LIMIT
    .saturating_add(STORE_LIMIT)
    .saturating_add(FORWARD_LIMIT)
    .saturating_add(FLUSH_LIMIT);
const _: () = assert!(STORE_LIMIT.as_millis() <= FORWARD_LIMIT.as_millis());
/// A body's size as sent, and once gunzipped.
const BODY_LIMIT: usize = 16 << 20;
const DECODED_LIMIT: u64 = 64 << 20;
/// How often the clients' spans recorded since the last pass are sent on.
pub const CLIENT_SPANS_EVERY: Duration = Duration::from_secs(5);
/// Client spans per forwarded body.
const CLIENT_SPANS_BATCH: u32 = 1_000;
/// The service name of the clients' spans sent on.
pub const CLIENT_SERVICE: &str = "triton-stress-worker";
const JSON: &str = "application/json";
const PROTOBUF: &str = "application/x-protobuf";

#[derive(Debug, Default)]
struct Counters {
    bodies: AtomicU64,
    spans_received: AtomicU64,
    spans_stored: AtomicU64,
    spans_dropped: AtomicU64,
    bad_bodies: AtomicU64,
    forwarded: AtomicU64,
    forward_dropped: AtomicU64,
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}

impl Counters {
    fn read(&self) -> ReceiverCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ReceiverCounts {
            bodies: get(&self.bodies),
            spans_received: get(&self.spans_received),
            spans_stored: get(&self.spans_stored),
            spans_dropped: get(&self.spans_dropped),
            bad_bodies: get(&self.bad_bodies),
            forwarded: get(&self.forwarded),
            forward_dropped: get(&self.forward_dropped),
        }
    }
}

/// The receiver of one run, serving until [`stop`](Self::stop) (or until dropped: then its
/// tasks end on their own, the queues flushed as at the stop).
pub struct OtlpReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
    forwarder: Option<tokio::task::JoinHandle<()>>,
    /// Sends the clients' spans on as they are recorded (with a forward target).
    pump: Option<tokio::task::JoinHandle<()>>,
    closing: DropGuard,
    /// Fired at the stop: the pump makes its last pass.
    pumped: DropGuard,
    draining: DropGuard,
}

/// What the handlers and the receiver share.
struct Shared {
    counts: Counters,
    spans: mpsc::Sender<Vec<ServerSpan>>,
    forward: Option<mpsc::Sender<Forward>>,
}

/// A body to send on as it came.
struct Forward {
    body: Bytes,
    content_type: &'static str,
    gzip: bool,
}

impl OtlpReceiver {
    /// Binds `bind` (port 0: one the system picks) and serves the run's spans into `store`;
    /// with `forward`, every body received is sent on to that URL too, and the run's client
    /// spans as its workers record them.
    pub async fn start(
        bind: SocketAddr,
        store: Store,
        run_id: RunId,
        forward: Option<reqwest::Url>,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let draining = CancellationToken::new();
        let (spans, spans_rx) = mpsc::channel(STORE_QUEUE);
        let (forward_tx, forward_rx) = match forward {
            Some(url) => {
                let (tx, rx) = mpsc::channel(FORWARD_QUEUE);
                (Some(tx), Some((url, rx)))
            }
            None => (None, None),
        };
        let shared = Arc::new(Shared {
            counts: Counters::default(),
            spans,
            forward: forward_tx,
        });
        let pumped = CancellationToken::new();
        let pump = forward_rx.is_some().then(|| {
            let (store, run_id) = (store.clone(), run_id.clone());
            tokio::spawn(pump_client_spans(
                store,
                run_id,
                shared.clone(),
                pumped.clone(),
            ))
        });
        let queue = Queue::new(spans_rx, draining.clone());
        let writer = tokio::spawn(write_spans(store, run_id, queue, shared.clone()));
        let forwarder = forward_rx.map(|(url, rx)| {
            let queue = Queue::new(rx, draining.clone());
            tokio::spawn(forward_bodies(url, queue, shared.clone()))
        });
        let router = Router::new()
            .route("/servers/{member}/v1/traces", post(export_member))
            .route("/v1/traces", post(export_external))
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(shared.clone());
        let closing = CancellationToken::new();
        let server = axum::serve(listener, router)
            .with_graceful_shutdown(closing.clone().cancelled_owned())
            .into_future();
        let server = tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::warn!("the OTLP receiver stopped: {e}");
            }
        });
        Ok(Self {
            addr,
            shared,
            server,
            writer,
            forwarder,
            pump,
            closing: closing.drop_guard(),
            pumped: pumped.drop_guard(),
            draining: draining.drop_guard(),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL a server member exports to (`--trace-config opentelemetry,url=...`).
    pub fn url_for(&self, member: &str) -> String {
        format!("http://{}/servers/{member}/v1/traces", self.addr)
    }

    pub fn counts(&self) -> ReceiverCounts {
        self.shared.counts.read()
    }

    /// Stops serving, sends on the clients' spans not sent yet, then flushes what is queued
    /// for the store and the forward target (what is left after [`FLUSH_LIMIT`] is dropped),
    /// and says what it did: all within [`STOP_LIMIT`].
    pub async fn stop(self) -> ReceiverCounts {
        let Self {
            shared,
            mut server,
            writer,
            forwarder,
            pump,
            closing,
            pumped,
            draining,
            ..
        } = self;
        drop(closing);
        if tokio::time::timeout(SERVER_STOP_LIMIT, &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
        drop(pumped);
        if let Some(mut pump) = pump
            && tokio::time::timeout(STORE_LIMIT, &mut pump).await.is_err()
        {
            pump.abort();
        }
        drop(draining);
        let flush = async {
            let _ = writer.await;
            if let Some(f) = forwarder {
                let _ = f.await;
            }
        };
        if tokio::time::timeout(STOP_LIMIT - SERVER_STOP_LIMIT - STORE_LIMIT, flush)
            .await
            .is_err()
        {
            tracing::warn!("the OTLP receiver's queues did not flush in time");
        }
        shared.counts.read()
    }
}

/// The pump of the run's client spans to the forward target: every [`CLIENT_SPANS_EVERY`]
/// those recorded since its last pass, and a last pass once its token fires.
async fn pump_client_spans(
    store: Store,
    run_id: RunId,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let mut after = 0;
    loop {
        let last = tokio::select! {
            _ = tokio::time::sleep(CLIENT_SPANS_EVERY) => false,
            _ = stop.cancelled() => true,
        };
        after = shared
            .forward_client_spans_after(&store, &run_id, after)
            .await;
        if last {
            return;
        }
    }
}

impl Shared {
    /// Queues every client span recorded after id `after` for the forward target, a body per
    /// batch; returns the last id queued (a read that fails is tried again at the next pass).
    async fn forward_client_spans_after(
        &self,
        store: &Store,
        run_id: &RunId,
        mut after: i64,
    ) -> i64 {
        loop {
            let read = store.client_spans_after(run_id, after, CLIENT_SPANS_BATCH);
            match within(STORE_LIMIT, read).await {
                Ok(spans) if !spans.is_empty() => {
                    after = spans.last().map_or(after, |(id, _)| *id);
                    let spans: Vec<ClientSpan> = spans.into_iter().map(|(_, s)| s).collect();
                    self.queue_forward(Forward {
                        body: client_request(&spans, CLIENT_SERVICE)
                            .encode_to_vec()
                            .into(),
                        content_type: PROTOBUF,
                        gzip: false,
                    });
                }
                Ok(_) => return after,
                Err(e) => {
                    tracing::warn!("the clients' spans not read for forwarding: {e}");
                    return after;
                }
            }
        }
    }

    /// One export request: answered at once, its spans queued for the store.
    fn export(&self, member: &str, headers: &HeaderMap, body: Bytes) -> Response {
        add(&self.counts.bodies, 1);
        let request = Encoding::of(headers).and_then(|encoding| {
            let gzip = is_gzip(headers)?;
            let request = encoding.decode(&body, gzip)?;
            Ok((encoding, gzip, request))
        });
        let (encoding, gzip, request) = match request {
            Ok(r) => r,
            Err((status, why)) => {
                add(&self.counts.bad_bodies, 1);
                return (status, why).into_response();
            }
        };
        let spans = server_spans(member, &request);
        add(&self.counts.spans_received, spans.len());
        if !spans.is_empty()
            && let Err(e) = self.spans.try_send(spans)
        {
            add(&self.counts.spans_dropped, e.into_inner().len());
        }
        if self.forward.is_some() {
            self.queue_forward(Forward {
                body,
                content_type: encoding.content_type(),
                gzip,
            });
        }
        encoding.answer()
    }

    fn queue_forward(&self, forward: Forward) {
        if let Some(queue) = &self.forward
            && queue.try_send(forward).is_err()
        {
            add(&self.counts.forward_dropped, 1);
        }
    }
}

async fn export_member(
    State(shared): State<Arc<Shared>>,
    Path(member): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.export(&member, &headers, body)
}

async fn export_external(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.export(EXTERNAL, &headers, body)
}

/// Why a body is refused: the HTTP status and a message.
type Refusal = (StatusCode, String);

/// `Content-Encoding: gzip`, or none (identity).
fn is_gzip(headers: &HeaderMap) -> Result<bool, Refusal> {
    match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str()) {
        None => Ok(false),
        Some(Ok(v)) if v.eq_ignore_ascii_case("gzip") => Ok(true),
        Some(Ok(v)) if v.eq_ignore_ascii_case("identity") => Ok(false),
        Some(v) => Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Encoding {v:?}: gzip or none"),
        )),
    }
}

/// The two encodings of OTLP/HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Json,
    Protobuf,
}

impl Encoding {
    fn of(headers: &HeaderMap) -> Result<Self, Refusal> {
        let value = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let media = value.split(';').next().unwrap_or_default().trim();
        if media.eq_ignore_ascii_case(JSON) {
            Ok(Self::Json)
        } else if media.eq_ignore_ascii_case(PROTOBUF) {
            Ok(Self::Protobuf)
        } else {
            Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Type {value:?}: {JSON} or {PROTOBUF}"),
            ))
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Self::Json => JSON,
            Self::Protobuf => PROTOBUF,
        }
    }

    fn decode(self, body: &[u8], gzip: bool) -> Result<ExportTraceServiceRequest, Refusal> {
        let bad = |e: String| (StatusCode::BAD_REQUEST, e);
        let mut gunzipped = Vec::new();
        let body = if gzip {
            flate2::read::GzDecoder::new(body)
                .take(DECODED_LIMIT)
                .read_to_end(&mut gunzipped)
                .map_err(|e| bad(format!("gzip: {e}")))?;
            &gunzipped[..]
        } else {
            body
        };
        match self {
            Self::Json => serde_json::from_slice(body).map_err(|e| bad(format!("OTLP/JSON: {e}"))),
            Self::Protobuf => ExportTraceServiceRequest::decode(body)
                .map_err(|e| bad(format!("OTLP protobuf: {e}"))),
        }
    }

    /// HTTP 200 with an `ExportTraceServiceResponse` (full success) in this encoding.
    fn answer(self) -> Response {
        let body = match self {
            Self::Json => b"{}".to_vec(),
            Self::Protobuf => ExportTraceServiceResponse::default().encode_to_vec(),
        };
        ([(header::CONTENT_TYPE, self.content_type())], body).into_response()
    }
}

/// A bounded queue's consumer side: items until the stop, then what is queued until
/// [`FLUSH_LIMIT`] has passed (the queue closed: no more come in).
struct Queue<T> {
    rx: mpsc::Receiver<T>,
    stop: CancellationToken,
    deadline: Option<Instant>,
}

impl<T> Queue<T> {
    fn new(rx: mpsc::Receiver<T>, stop: CancellationToken) -> Self {
        Self {
            rx,
            stop,
            deadline: None,
        }
    }

    /// The next item; `None` once stopped and empty.
    async fn next(&mut self) -> Option<T> {
        if self.deadline.is_none() {
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => {
                    self.rx.close();
                    self.deadline = Some(Instant::now() + FLUSH_LIMIT);
                }
                item = self.rx.recv() => return item,
            }
        }
        self.rx.recv().await
    }

    fn try_next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }

    /// How long one item's work may take: `limit`, less once the stop's time runs out.
    fn limit(&self, limit: Duration) -> Duration {
        self.deadline.map_or(limit, |d| {
            d.saturating_duration_since(Instant::now()).min(limit)
        })
    }
}

/// Logs the first failure of a stretch, and the recovery.
#[derive(Default)]
struct Failing(bool);

impl Failing {
    fn saw(&mut self, what: &str, error: Option<String>) {
        match &error {
            Some(e) if !self.0 => tracing::warn!("{what}: {e} (dropped and counted from now)"),
            None if self.0 => tracing::info!("{what}: working again"),
            _ => {}
        }
        self.0 = error.is_some();
    }
}

/// One store write's spans: `first` body's, then the queued bodies' (`next`) while fewer than
/// [`BATCH_SPANS`].
fn batch_from(
    first: Vec<ServerSpan>,
    mut next: impl FnMut() -> Option<Vec<ServerSpan>>,
) -> Vec<ServerSpan> {
    let mut batch = first;
    while batch.len() < BATCH_SPANS {
        match next() {
            Some(more) => batch.extend(more),
            None => break,
        }
    }
    batch
}

/// The writer: batches of queued spans into the store, each write bounded.
async fn write_spans(
    store: Store,
    run_id: RunId,
    mut queue: Queue<Vec<ServerSpan>>,
    shared: Arc<Shared>,
) {
    let counts = &shared.counts;
    let mut failing = Failing::default();
    while let Some(first) = queue.next().await {
        let batch = batch_from(first, || queue.try_next());
        let limit = queue.limit(STORE_LIMIT);
        let started = Instant::now();
        let write = within(limit, store.record_server_spans(&run_id, &batch)).await;
        let error = write.err().map(|e| e.to_string());
        let count = match error {
            None => &counts.spans_stored,
            Some(_) => &counts.spans_dropped,
        };
        add(count, batch.len());
        failing.saw("OTLP receiver: storing spans", error);
        // As long again before the next write: the spans take the store half the time at
        // most, whatever the traced rate; what that cannot store waits in the queue, then is
        // dropped and counted. Not once the run stops: then the queue is flushed.
        tokio::select! {
            _ = tokio::time::sleep(started.elapsed()) => {}
            _ = queue.stop.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests;
