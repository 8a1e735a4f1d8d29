//! A worker run: pre-flight checks, the stress streams, periodic status reports, a graceful stop
//! and the final report.

use crate::client::{self, TritonClient};
use crate::config::WorkerConfig;
use crate::metrics::Metrics;
use crate::scenarios::{self, ClientContext, Outcome, TestEnv, image::ImageBatch};
use crate::stats::Stats;
use rand::Rng;
use rand::SeedableRng;
use rand::distr::{Distribution, weighted::WeightedIndex};
use rand::rngs::StdRng;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};
use stress_common::contract::CORR_IDS_PER_STREAM;
use stress_common::interval::{IntervalTracker, series_interval};
use stress_common::outbox::{Limits, Outbox};
use stress_common::report::{L0Table, ModelRowJson, ModelTable, RowJson};
use stress_common::scenario::Scenario;
use stress_common::status::carry::Reported;
use stress_common::status::{
    EventKind, FailureRecord, Forensics, PreviousUse, SinkError, StatusSink, WorkerSnapshot,
    final_event_details,
};
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Bad input or an unusable server, found before any load was sent (exit code 2).
    #[error("{0}")]
    Preflight(String),
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize)]
pub struct WorkerReport {
    pub seed: u64,
    pub protocol: &'static str,
    pub servers: Vec<String>,
    pub elapsed_s: f64,
    pub rows: Vec<RowJson>,
    /// Failures of scenarios that are not allowed to fail.
    pub blocking_failures: u64,
    /// The run's driver judges the failures: they do not set the exit code.
    pub driver_judges: bool,
    pub failures: Vec<FailureRecord>,
    /// One row per (model, scenario).
    pub models: Vec<ModelRowJson>,
    /// The foreign client's implementation and version, from its hello.
    pub client: Option<stress_common::foreign::Hello>,
    /// Why this worker failed, whoever judges the tests: its foreign client failed (a broken
    /// interface, a non-zero exit, silence), or it could not take a model mix the driver set.
    pub failure: Option<String>,
    #[serde(skip)]
    pub table: L0Table,
    #[serde(skip)]
    pub model_table: ModelTable,
}

impl WorkerReport {
    pub fn render(&self) -> String {
        let mut out = self.table.render(self.elapsed_s);
        if !self.model_table.is_empty() {
            out.push('\n');
            out.push_str(&self.model_table.render(self.elapsed_s));
        }
        let total = self.rows.last().map_or(0, |r| r.requests);
        out.push_str(&format!(
            "\n{} requests in {:.1} s: {:.1} QPS over {} server(s) via {}; seed {}\n",
            total,
            self.elapsed_s,
            total as f64 / self.elapsed_s.max(1e-9),
            self.servers.len(),
            self.protocol,
            self.seed
        ));
        for f in self.failures.iter().take(20) {
            out.push_str(&format!("FAILED {f}\n"));
        }
        if let Some(why) = &self.failure {
            out.push_str(&format!("WORKER FAILED {why}\n"));
        }
        out
    }

    pub fn exit_code(&self) -> u8 {
        u8::from(self.failure.is_some() || self.blocking_failures > 0 && !self.driver_judges)
    }
}

/// Connects to every server and checks it is live and ready with every model the mix needs;
/// learns the sequence models' batching. Any problem is a pre-flight error: no load is sent.
/// A `patient` worker (one that replaced its member's process: its servers may be coming back
/// too, e.g. from a drained node) asks each server again every second until it is ready, within
/// the pre-flight's limit.
pub async fn preflight(
    config: &mut WorkerConfig,
    patient: bool,
) -> Result<Vec<Arc<dyn TritonClient>>, WorkerError> {
    let scenarios: Vec<Scenario> = config.mix.iter().map(|(s, _)| *s).collect();
    let mut models = scenarios::required_models(&scenarios, &config.settings);
    if let Some(program) = &config.client {
        models.extend(program.models.iter().cloned());
    }
    let mut clients = Vec::new();
    for address in &config.servers {
        let c = loop {
            match ready_server(config, address, &models).await {
                Ok(c) => break c,
                Err(e) if patient => {
                    tracing::warn!("pre-flight: {e}; asking again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e),
            }
        };
        clients.push(c);
    }
    if scenarios.contains(&Scenario::Infer) {
        let plan = scenarios::infer::prepare(&clients, &config.settings.infer)
            .await
            .map_err(|e| WorkerError::Preflight(e.to_string()))?;
        config.settings.infer_plan = Some(Arc::new(plan));
    }
    if scenarios.iter().any(|s| s.uses_sequences()) {
        for (model, batch) in &mut config.settings.sequence_models {
            let model_config = clients[0]
                .model_config(model, "")
                .await
                .map_err(|e| WorkerError::Preflight(format!("model {model}: config: {e}")))?;
            *batch = model_config.max_batch_size;
            if let Some(idle) = model_config
                .sequence_batching
                .and_then(|s| s.max_sequence_idle_us)
            {
                config.sequence_idle_us.insert(model.clone(), idle);
            }
        }
    }
    Ok(clients)
}

/// The server at `address`, connected and checked ready with every one of `models`.
async fn ready_server(
    config: &WorkerConfig,
    address: &str,
    models: &[String],
) -> Result<Arc<dyn TritonClient>, WorkerError> {
    let err = |what: String| WorkerError::Preflight(format!("server {address}: {what}"));
    let c = client::connect(config.protocol, address, config.http_binary)
        .await
        .map_err(|e| {
            err(format!(
                "cannot connect over {}: {e}",
                config.protocol.as_str()
            ))
        })?;
    match c.server_ready().await {
        Ok(true) => {}
        Ok(false) => return Err(err("is not ready".into())),
        Err(e) => return Err(err(format!("readiness check failed: {e}"))),
    }
    for m in models {
        match c.model_ready(m).await {
            Ok(true) => {}
            Ok(false) => return Err(err(format!("model {m} is not loaded or not ready"))),
            Err(e) => return Err(err(format!("model {m}: {e}"))),
        }
    }
    Ok(c)
}

struct Shared {
    config: WorkerConfig,
    clients: Vec<Arc<dyn TritonClient>>,
    stats: Stats,
    sink: Arc<dyn StatusSink>,
    images: ImageBatch,
    mix: Vec<Scenario>,
    /// Picks the next test's scenario from the mix (None: a foreign client runs instead).
    picker: Option<WeightedIndex<u32>>,
    failure_reported: AtomicBool,
    /// Why this worker failed, when it did (see [`WorkerReport::failure`]).
    failure: std::sync::Mutex<Option<String>>,
    /// The foreign client's hello: its implementation and version.
    client_hello: std::sync::Mutex<Option<stress_common::foreign::Hello>>,
    /// The latency series: closes an interval into the snapshot that ends it.
    intervals: std::sync::Mutex<IntervalTracker>,
    /// Fired after the stop when the driver stops the run because it failed: tests in flight
    /// are dropped instead of given the drain timeout.
    abandon: CancellationToken,
    /// What this member reported before this process started (a replaced member): added to
    /// every snapshot written, so the store's counts carry on instead of starting over.
    carried: Reported,
}

impl Shared {
    /// The run's shared state.
    fn new(
        config: WorkerConfig,
        clients: Vec<Arc<dyn TritonClient>>,
        sink: Arc<dyn StatusSink>,
        metrics: Option<Arc<Metrics>>,
        carried: Reported,
    ) -> Result<Self, WorkerError> {
        if config.mix.is_empty() && config.client.is_none() {
            return Err(WorkerError::Preflight("no scenario left to run".into()));
        }
        let images = ImageBatch::new(&config.settings.image_model, config.settings.image_batch)
            .map_err(|e| WorkerError::Preflight(format!("committed images: {e}")))?;
        let picker = match config.client {
            Some(_) => None,
            None => Some(
                WeightedIndex::new(config.mix.iter().map(|(_, w)| *w))
                    .map_err(|e| WorkerError::Preflight(format!("scenario weights: {e}")))?,
            ),
        };
        let mix: Vec<Scenario> = config.mix.iter().map(|(s, _)| *s).collect();
        let stats = Stats::with_metrics(metrics).watching(clients.iter().map(|c| c.address()));
        Ok(Shared {
            clients,
            stats,
            sink,
            images,
            picker,
            mix,
            failure_reported: AtomicBool::new(false),
            failure: Default::default(),
            client_hello: Default::default(),
            intervals: std::sync::Mutex::new(IntervalTracker::new(
                series_interval(config.duration, config.poll_interval),
                stress_common::now_ms(),
            )),
            abandon: CancellationToken::new(),
            carried,
            config,
        })
    }

    /// Fails this worker, whoever judges its tests (the first reason stays).
    fn fail(&self, why: String) {
        tracing::error!("{why}");
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
    }

    /// Records a snapshot, with the latency interval it closes when one is due (or `last`); the
    /// interval is committed only once recorded, so a failed write loses nothing from the
    /// series (the next interval covers the gap).
    async fn record(&self, mut snapshot: WorkerSnapshot, last: bool) -> Result<(), SinkError> {
        let (due, closing) = {
            let tracker = self.intervals.lock().expect("interval tracker lock");
            let due = last || tracker.due(snapshot.at_ms);
            (
                due,
                due.then(|| tracker.close(&snapshot.models, snapshot.at_ms)),
            )
        };
        let closing = match closing {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                tracing::warn!("latency interval not computed: {e}");
                None
            }
            None => None,
        };
        if let Some(c) = &closing {
            snapshot.intervals = c.intervals.clone();
        }
        // The QPS series has the latency series' points: one per interval, and the last.
        snapshot.series_point = due;
        // After the interval closed: intervals are this process's own differences.
        self.carried
            .carry_into(&mut snapshot)
            .map_err(|e| SinkError(format!("this member's earlier counts: {e}")))?;
        self.sink.snapshot(&snapshot).await?;
        if let Some(c) = closing {
            self.intervals
                .lock()
                .expect("interval tracker lock")
                .commit(c);
        }
        Ok(())
    }
}

/// How long the pre-flight checks may take: the run's duration (at least 5 s: connecting
/// and reading model metadata take a moment), at most 2 minutes.
pub fn preflight_limit(duration: Option<Duration>) -> Duration {
    const MOST: Duration = Duration::from_secs(120);
    const LEAST: Duration = Duration::from_secs(5);
    duration.map_or(MOST, |d| d.clamp(LEAST, MOST))
}

/// How long a stopping worker keeps delivering what it queued (the final counts and
/// SUCCESS/FAILURE last) to a store that is slow or down: within the driver's 15 s stop grace.
pub const FINAL_FLUSH: Duration = Duration::from_secs(10);

/// Runs the mix until the duration ends or `cancel` fires, then reports. Every report goes
/// through an [`Outbox`]: the streams never wait for the store, and a store outage loses
/// nothing it can keep (see `stress_common::outbox`).
pub async fn run(
    config: WorkerConfig,
    sink: Arc<dyn StatusSink>,
    metrics: Option<Arc<Metrics>>,
    cancel: CancellationToken,
) -> Result<WorkerReport, WorkerError> {
    let outbox = Arc::new(Outbox::new(sink, Limits::default()));
    let result = run_with(config, outbox.clone(), metrics, cancel).await;
    // The outbox logs what it could not deliver, one JSON line each.
    outbox.finish(FINAL_FLUSH).await;
    result
}

async fn run_with(
    mut config: WorkerConfig,
    sink: Arc<dyn StatusSink>,
    metrics: Option<Arc<Metrics>>,
    cancel: CancellationToken,
) -> Result<WorkerReport, WorkerError> {
    announce_starting(&*sink).await;
    let _stamps = crate::client::receive_stamp::hold_on()
        .inspect_err(|e| tracing::debug!("no kernel receive timestamps: {e}"));
    let carried = reported_before(&*sink).await?;
    let clients = checked_preflight(&mut config, !carried.is_empty(), &*sink, &cancel).await?;
    let shared = Arc::new(Shared::new(
        config,
        clients,
        sink.clone(),
        metrics.clone(),
        carried,
    )?);
    let config = &shared.config;
    announce_running(config, &*sink).await;

    let started = Instant::now();
    let stop = cancel.child_token();
    let stopped_ms = watch_the_stop(config.duration, &stop);
    tokio::spawn(abandon_when_the_run_failed(
        stop.clone(),
        sink.clone(),
        shared.abandon.clone(),
    ));
    let mut streams = tokio::task::JoinSet::new();
    match &config.client {
        Some(_) => {
            streams.spawn(supervise_client(shared.clone(), stop.clone()));
        }
        None => {
            for i in 0..config.concurrency {
                streams.spawn(stream_loop(shared.clone(), i, stop.clone()));
            }
        }
    }
    let reporter = tokio::spawn(report_loop(shared.clone(), metrics.clone(), stop.clone()));
    while let Some(r) = streams.join_next().await {
        if let Err(e) = r {
            tracing::error!("a stress stream panicked: {e}");
            record_final_event(
                &*sink,
                EventKind::Failure,
                &format!("stress stream panicked: {e}"),
            )
            .await;
        }
    }
    let elapsed = started.elapsed();
    stop.cancel();
    let _ = reporter.await;

    // Final counts are flushed before the final event, so the driver reads complete numbers;
    // with them the outages still open.
    let stopped_ms = match stopped_ms.load(Ordering::Relaxed) {
        0 => stress_common::now_ms(),
        at => at,
    };
    let snapshot = shared.stats.last_snapshot(&shared.mix, stopped_ms);
    if let Some(m) = &metrics {
        m.update(&snapshot);
    }
    if let Err(e) = shared.record(snapshot.clone(), true).await {
        tracing::error!("final snapshot not recorded: {e}");
    }
    let report = final_report(&shared, &snapshot, elapsed);
    let (kind, details) = final_outcome(&report, &snapshot, config.driver_judges);
    // The last thing this worker reports: the driver stopping the run waits for it.
    record_final_event(&*sink, kind, &final_event_details(&details)).await;
    Ok(report)
}

/// What this member reported before this process started ([`stress_common::status::carry`]),
/// read before its first snapshot is written. Tried again for a while: a worker replaced while the store is
/// down (a pod evicted during a store restart) waits for it, since a store that cannot say
/// would let this process write over counts already recorded.
async fn reported_before(sink: &dyn StatusSink) -> Result<Reported, WorkerError> {
    let deadline = Instant::now() + REPORTED_WAIT;
    loop {
        let why = match tokio::time::timeout(REPORTED_TRY, sink.reported()).await {
            Ok(Ok(reported)) => {
                if !reported.is_empty() {
                    tracing::info!(
                        "this member reported {} requests before this process: its counts carry on from there",
                        reported.total_requests
                    );
                }
                return Ok(reported);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {REPORTED_TRY:?}"),
        };
        if Instant::now() + REPORTED_TRY >= deadline {
            return Err(WorkerError::Preflight(format!(
                "what this member reported before could not be read from the run's store within {REPORTED_WAIT:?}: {why}"
            )));
        }
        tracing::warn!("what this member reported before is not read yet: {why}");
        tokio::time::sleep(REPORTED_TRY).await;
    }
}

/// How long one read of [`reported_before`] may take, and the pause between tries.
const REPORTED_TRY: Duration = Duration::from_secs(2);
/// How long [`reported_before`] waits for the store at most: the driver's default store outage
/// limit (run.fail_fast.store_outage_limit).
const REPORTED_WAIT: Duration = Duration::from_secs(60);

/// The STARTING event and a first heartbeat (each only logged when it cannot be recorded).
async fn announce_starting(sink: &dyn StatusSink) {
    if let Err(e) = sink
        .event(EventKind::Starting, "connecting to servers")
        .await
    {
        tracing::warn!("STARTING event not recorded: {e}");
    }
    if let Err(e) = sink.heartbeat().await {
        tracing::warn!("heartbeat not recorded: {e}");
    }
}

/// [`preflight`] within [`preflight_limit`] and until `cancel`; its failure is the worker's
/// final event.
async fn checked_preflight(
    config: &mut WorkerConfig,
    patient: bool,
    sink: &dyn StatusSink,
    cancel: &CancellationToken,
) -> Result<Vec<Arc<dyn TritonClient>>, WorkerError> {
    // Servers that accept connections and never answer must not hold the worker past its
    // duration or a SIGTERM.
    let limit = preflight_limit(config.duration);
    let checked = tokio::select! {
        checked = tokio::time::timeout(limit, preflight(config, patient)) => checked.unwrap_or_else(|_| {
            Err(WorkerError::Preflight(format!(
                "the servers did not answer the pre-flight checks within {limit:?}"
            )))
        }),
        _ = cancel.cancelled() => Err(WorkerError::Preflight(
            "stopped by a signal before the servers answered the pre-flight checks".into(),
        )),
    };
    if let Err(e) = &checked {
        let details = final_event_details(&format!("pre-flight: {e}"));
        record_final_event(sink, EventKind::Failure, &details).await;
    }
    checked
}

/// The RUNNING event, and its log line.
async fn announce_running(config: &WorkerConfig, sink: &dyn StatusSink) {
    tracing::info!(
        servers = ?config.servers, protocol = config.protocol.as_str(), concurrency = config.concurrency,
        seed = config.seed, corr_id_base = config.corr_ids.base, "running"
    );
    let running = format!(
        "{} streams against {} via {}, seed {}",
        config.concurrency,
        config.servers.join(","),
        config.protocol.as_str(),
        config.seed
    );
    if let Err(e) = sink.event(EventKind::Running, &running).await {
        tracing::warn!("RUNNING event not recorded: {e}");
    }
}

/// Fires `stop` when the run's duration ends; returns when the streams stopped starting tests
/// (0 until then): a server silent past its stall threshold by then is still out at the
/// worker's end (the drain that follows starts nothing).
fn watch_the_stop(duration: Option<Duration>, stop: &CancellationToken) -> Arc<AtomicI64> {
    if let Some(d) = duration {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            stop.cancel();
        });
    }
    let stopped_ms = Arc::new(AtomicI64::new(0));
    {
        let (stop, stopped_ms) = (stop.clone(), stopped_ms.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            stopped_ms.store(stress_common::now_ms(), Ordering::Relaxed);
        });
    }
    stopped_ms
}

/// The worker's report from its final snapshot.
fn final_report(shared: &Shared, snapshot: &WorkerSnapshot, elapsed: Duration) -> WorkerReport {
    let config = &shared.config;
    let mut table = L0Table::new();
    for c in &snapshot.scenarios {
        let _ = table.add(c);
    }
    let mut model_table = ModelTable::new();
    for c in &snapshot.models {
        let _ = model_table.add(c);
    }
    let elapsed_s = elapsed.as_secs_f64();
    WorkerReport {
        seed: config.seed,
        protocol: config.protocol.as_str(),
        servers: config.servers.clone(),
        elapsed_s,
        rows: table.to_json(elapsed_s),
        blocking_failures: table.blocking_failures(),
        driver_judges: config.driver_judges,
        failures: shared.stats.failures(),
        models: model_table.to_json(elapsed_s),
        client: shared
            .client_hello
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
        failure: shared
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
        table,
        model_table,
    }
}

/// The final event's kind and details for a report.
fn final_outcome(
    report: &WorkerReport,
    snapshot: &WorkerSnapshot,
    driver_judges: bool,
) -> (EventKind, String) {
    if let Some(why) = &report.failure {
        (EventKind::Failure, why.clone())
    } else if report.blocking_failures == 0 {
        (
            EventKind::Success,
            format!("{} requests, no failures", snapshot.total_requests),
        )
    } else if driver_judges {
        (
            EventKind::Success,
            format!(
                "{} requests, {} failed tests (recorded for the driver to judge)",
                snapshot.total_requests, report.blocking_failures
            ),
        )
    } else {
        (
            EventKind::Failure,
            format!("{} failed tests", report.blocking_failures),
        )
    }
}

/// How long a stopping worker asks the store why it stops: the answer only shortens the stop.
const STOP_REASON_LIMIT: Duration = Duration::from_secs(1);

/// Once `stop` fires, asks the run's store why. When the driver stops the run because a member
/// failed (a stop that does not [drain](stress_common::status::Stopping::drains)), fires
/// `abandon`: tests in flight, most of them waiting on a dead server or a perf_analyzer run,
/// then do not hold the driver's exit for the drain timeout. Any other stop, or no answer in
/// time, keeps the drain.
async fn abandon_when_the_run_failed(
    stop: CancellationToken,
    sink: Arc<dyn StatusSink>,
    abandon: CancellationToken,
) {
    stop.cancelled().await;
    match tokio::time::timeout(STOP_REASON_LIMIT, sink.stopping()).await {
        Ok(Ok(Some(stopping))) if !stopping.drains() => {
            tracing::info!("{}: tests in flight are abandoned", stopping.details());
            abandon.cancel();
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!("why the run stops not read: {e}"),
        Err(_) => tracing::debug!("why the run stops not read within {STOP_REASON_LIMIT:?}"),
    }
}

/// Queues an event the driver decides on (SUCCESS, FAILURE): the outbox retries it until
/// [`FINAL_FLUSH`] at the end, and logs it if it still cannot be written.
pub async fn record_final_event(sink: &dyn StatusSink, kind: EventKind, details: &str) {
    if let Err(e) = sink.event(kind, details).await {
        tracing::error!("{kind} event not recorded ({e}): {details}");
    }
}

async fn report_loop(shared: Arc<Shared>, metrics: Option<Arc<Metrics>>, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(shared.config.poll_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; a sample over no time would read as QPS 0.
    ticker.tick().await;
    let mut last = (Instant::now(), 0u64);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.cancelled() => return,
        }
        let now = Instant::now();
        // The QPS from the snapshot's own total: a perf_analyzer run's requests, counted all
        // at once at its end, must not land in a snapshot's total but not in its QPS.
        let mut snapshot = shared.stats.snapshot(&shared.mix);
        let total = snapshot.total_requests;
        let dt = now.duration_since(last.0).as_secs_f64();
        snapshot.qps = if dt > 0.0 {
            total.saturating_sub(last.1) as f64 / dt
        } else {
            0.0
        };
        last = (now, total);
        if let Some(m) = &metrics {
            m.update(&snapshot);
        }
        // The store refreshes the heartbeat with every snapshot.
        if let Err(e) = shared.record(snapshot, false).await {
            tracing::warn!("status not recorded: {e}");
        }
        if let Some(live) = &shared.config.settings.load_target {
            let plan = shared.config.settings.infer_plan.as_deref();
            if let Err(why) = follow_load_target(&*shared.sink, live, plan).await {
                // Measuring on under the previous mix would report it as the phase's.
                shared.fail(why);
                return stop.cancel();
            }
        }
    }
}

/// Capacity mode: takes the load the driver's controller set for this worker: its concurrency,
/// and a phase's model mix for the Infer plan. A store that cannot be read leaves the current
/// load; a mix the plan cannot take is the error: the worker cannot run the phase it is asked
/// to (a mix naming a model or version it did not plan, which `driver validate` refuses in a
/// matrix).
async fn follow_load_target(
    sink: &dyn StatusSink,
    live: &scenarios::LiveLoad,
    plan: Option<&scenarios::infer::InferPlan>,
) -> Result<(), String> {
    let target = match sink.load_target().await {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(()),
        Err(e) => {
            tracing::warn!("load target not read: {e}");
            return Ok(());
        }
    };
    if target.concurrency >= 1 {
        let before = live.concurrency.swap(target.concurrency, Ordering::Relaxed);
        if before != target.concurrency {
            tracing::info!(
                from = before,
                to = target.concurrency,
                "load concurrency changed by the driver"
            );
        }
    }
    live.count_unanswered
        .store(target.count_unanswered, Ordering::Relaxed);
    let before = live.set_rate(target.rate);
    if before != live.rate() {
        match live.rate() {
            Some(rate) => tracing::info!(rate, "spike: open loop at the driver's rate"),
            None => tracing::info!("spike over: back to closed loop"),
        }
    }
    let mut applied = live.mix.lock().unwrap_or_else(|e| e.into_inner());
    if *applied != target.mix {
        let result = match plan {
            Some(plan) => plan
                .set_mix(target.mix.as_deref())
                .map_err(|e| e.to_string()),
            None => Err(format!("mix {:?}: no Infer plan (no --model)", target.mix)),
        };
        if let Err(e) = result {
            return Err(format!("the driver's model mix cannot be run: {e}"));
        }
        tracing::info!(mix = ?target.mix, "model mix changed by the driver");
        *applied = target.mix;
    }
    Ok(())
}

/// One stress stream (upstream: a stress thread): its own RNG, its slice of the correlation-id
/// block and 10 client contexts, 2 common and 8 rare (a rare one is used 10% of the time).
/// Runs the foreign client program in place of the streams; its failure is kept for the
/// final outcome.
async fn supervise_client(shared: Arc<Shared>, stop: CancellationToken) {
    let program = shared.config.client.as_ref().expect("a client program");
    let run = crate::foreign::Supervised {
        config: &shared.config,
        program,
        stats: &shared.stats,
        sink: &*shared.sink,
    };
    match crate::foreign::supervise(run, stop).await {
        crate::foreign::Outcome::Finished { hello } => {
            *shared
                .client_hello
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = hello;
        }
        crate::foreign::Outcome::Failed(why) => shared.fail(why),
    }
}

async fn stream_loop(shared: Arc<Shared>, index: usize, stop: CancellationToken) {
    let config = &shared.config;
    let mut rng = StdRng::seed_from_u64(config.seed.wrapping_add(index as u64));
    let mut contexts = stream_contexts(&shared, index);
    let mut failures_in_a_row: u32 = 0;
    let mut schedule = scenarios::StreamSchedule::for_stream(index, config.concurrency);
    let mut answers = scenarios::Answers::default();
    let Some(picker) = &shared.picker else {
        return;
    };
    // Picked a test ahead: a window hands its answers in flight to the next test only when
    // that is a window of the same scenario (scenarios::answers).
    let mut scenario = shared.mix[picker.sample(&mut rng)];
    // Answers handed over when the stop came: the window they were handed to takes them in
    // and, told to stop, sends nothing and waits for them (or counts them unanswered).
    while !stop.is_cancelled() || !answers.is_empty() {
        if failures_in_a_row > 0 {
            // Back off after failures: a dead server fails every test at once, and without a
            // pause each stream turns that into hundreds of failure records (and CrashingClient
            // child processes) per second.
            let pause = failure_pause(failures_in_a_row);
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => break,
            }
        }
        let ctx_index = if rng.random_bool(0.1) {
            2 + rng.random_range(0..8)
        } else {
            rng.random_range(0..2)
        };
        let context = &mut contexts[ctx_index];
        let client = &shared.clients[context.server];
        let mut env = TestEnv {
            scenario,
            client,
            settings: &config.settings,
            stats: &shared.stats,
            rng: &mut rng,
            context,
            cancel: &stop,
            images: &shared.images,
            model: String::new(),
            wire: Default::default(),
            schedule: std::mem::take(&mut schedule),
            answers: std::mem::take(&mut answers),
        };
        let started_ms = stress_common::now_ms();
        let outcome = run_until_stopped(&shared, &mut env, &stop).await;
        let next = shared.mix[picker.sample(env.rng)];
        let outcome = match outcome {
            Some(o) if next == scenario && !stop.is_cancelled() => Some(o),
            Some(o) => Some(scenarios::answers::settle(&mut env.answers, &stop, o).await),
            None => None,
        };
        answers = std::mem::take(&mut env.answers);
        let wire = env.wire.take();
        schedule = std::mem::take(&mut env.schedule);
        schedule.test_ended(matches!(outcome, Some(Outcome::Passed)));
        let previous_use = hand_over_context(&mut env, started_ms, outcome.as_ref());
        match outcome {
            // Stopped mid-test and not finished within the drain timeout: not counted. A
            // perf_analyzer run is killed with its test, so its requests are counted nowhere.
            None => {
                if scenario == Scenario::PerfAnalyzer {
                    shared
                        .stats
                        .uncounted_run(scenario, &config.settings.load_model);
                }
                break;
            }
            Some(Outcome::Passed) => {
                failures_in_a_row = 0;
                shared.stats.test_passed(scenario, &env.model);
                shared
                    .stats
                    .server_answered(client.address(), stress_common::now_ms());
            }
            Some(Outcome::Skipped(reason)) => {
                tracing::debug!(%scenario, reason, "skipped");
                shared.stats.test_skipped(scenario);
            }
            Some(Outcome::Failed(failure)) => {
                failures_in_a_row = failures_in_a_row.saturating_add(1);
                let record = failure.into_record(scenario, client.address());
                let trace = TestTrace {
                    started_ms,
                    wire,
                    previous_use,
                };
                report_failure(&shared, scenario, record, trace).await;
            }
        }
        scenario = next;
    }
}

/// A stream's client contexts: one per correlation id of its slice of the block, spread over
/// the servers.
fn stream_contexts(shared: &Shared, index: usize) -> Vec<ClientContext> {
    let config = &shared.config;
    let base = config
        .corr_ids
        .stream(index as u64, config.concurrency as u64)
        .base;
    (0..CORR_IDS_PER_STREAM)
        .map(|c| ClientContext {
            correlation_id: base + c,
            server: (index * CORR_IDS_PER_STREAM as usize + c as usize) % shared.clients.len(),
            ..Default::default()
        })
        .collect()
}

/// Runs a test; once `stop` fires, lets it finish within the drain timeout unless the run is
/// abandoned. `None`: it did not finish.
async fn run_until_stopped(
    shared: &Shared,
    env: &mut TestEnv<'_, '_>,
    stop: &CancellationToken,
) -> Option<Outcome> {
    let test = scenarios::run(env);
    tokio::pin!(test);
    tokio::select! {
        o = &mut test => Some(o),
        _ = stop.cancelled() => tokio::select! {
            finished = tokio::time::timeout(shared.config.drain_timeout, &mut test) => finished.ok(),
            _ = shared.abandon.cancelled() => None,
        },
    }
}

/// Records a finished test as its context's last use (what the next test on this id will see
/// as its previous use); returns the use before it.
fn hand_over_context(
    env: &mut TestEnv<'_, '_>,
    started_ms: i64,
    outcome: Option<&Outcome>,
) -> Option<PreviousUse> {
    let finished = match outcome {
        Some(Outcome::Passed) => Some("passed"),
        Some(Outcome::Failed(_)) => Some("failed"),
        Some(Outcome::Skipped(_)) => Some("skipped"),
        None => None,
    };
    let previous_use = env.context.last_test.take();
    if let Some(done) = finished {
        env.context.last_test = Some(PreviousUse {
            scenario: env.scenario.name().to_string(),
            model: env.model.to_string(),
            started_ms,
            ended_ms: stress_common::now_ms(),
            outcome: done.to_string(),
            left_open: {
                let mut open: Vec<String> = env.context.open_sequences.iter().cloned().collect();
                open.sort();
                open
            },
        });
    }
    previous_use
}

/// What a failed test leaves for its record's forensics.
struct TestTrace {
    started_ms: i64,
    /// Its requests on the wire, and how many were left out.
    wire: (Vec<stress_common::status::WireStep>, u64),
    /// The previous use of its context's correlation id.
    previous_use: Option<PreviousUse>,
}

/// A failed test's record, with its forensics: counted, logged, stored, and the worker's
/// FAILURE event when it is the first failure that fails the run.
async fn report_failure(
    shared: &Shared,
    scenario: Scenario,
    mut record: FailureRecord,
    trace: TestTrace,
) {
    let config = &shared.config;
    // The previous use of the slot's correlation id says something only about a
    // test that used it (a sequence); elsewhere it would blame an unrelated test.
    let previous_use = trace
        .previous_use
        .filter(|_| scenario.uses_sequences() || record.correlation_id.is_some());
    let (steps, steps_left_out) = trace.wire;
    record.forensics = Some(Forensics {
        steps,
        steps_left_out,
        previous_use,
        server_log: Vec::new(),
        sequence_idle_us: config.sequence_idle_us.get(&record.model).copied(),
        test_started_ms: Some(trace.started_ms),
    });
    shared
        .stats
        .server_failed(&record.server, record.at_ms, scenario.uses_sequences());
    tracing::warn!("{record}");
    if shared.stats.test_failed(scenario, &record)
        && let Err(e) = shared.sink.failure(&record).await
    {
        tracing::warn!("failure not recorded: {e}");
    }
    // Under a driver that judges, the record is the report: the driver decides.
    if !config.driver_judges
        && !scenario.allowed_to_fail()
        && !shared.failure_reported.swap(true, Ordering::SeqCst)
    {
        record_final_event(&*shared.sink, EventKind::Failure, &record.to_string()).await;
    }
}

/// How long a stream pauses after its `n`th failed test in a row: 100 ms, doubling, at most 5 s.
pub fn failure_pause(n: u32) -> Duration {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);
    FIRST
        .saturating_mul(1u32 << n.saturating_sub(1).min(16))
        .min(MAX)
}

/// Waits up to `timeout` for a server to become ready (used by tests and the demo script).
pub async fn wait_ready(client: &dyn TritonClient, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if client.server_ready().await == Ok(true) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    use stress_common::status::LoadTarget;
    use stress_common::status::testing::FlakySink;

    #[tokio::test]
    async fn a_final_event_is_written_after_failed_attempts() {
        let sink = Arc::new(FlakySink::new(None, 2));
        let outbox = Outbox::new(sink.clone(), Limits::default());
        record_final_event(&outbox, EventKind::Success, "12 requests, no failures").await;
        assert_eq!(outbox.finish(FINAL_FLUSH).await.records, 0);
        assert_eq!(sink.attempts(), 3);
        assert_eq!(
            sink.events(),
            [(EventKind::Success, "12 requests, no failures".to_string())]
        );
    }

    #[tokio::test]
    async fn a_final_event_that_cannot_be_written_holds_the_worker_to_the_final_flush() {
        let sink = Arc::new(FlakySink::new(None, u32::MAX));
        let outbox = Outbox::new(sink.clone(), Limits::default());
        let started = Instant::now();
        record_final_event(&outbox, EventKind::Failure, "1 failed tests").await;
        assert_eq!(outbox.finish(Duration::from_secs(1)).await.records, 1);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(sink.attempts() >= 2);
        assert!(sink.events().is_empty());
    }

    #[tokio::test]
    async fn a_model_mix_the_worker_cannot_run_is_its_failure_not_a_warning() {
        let live = scenarios::LiveLoad::new(2);
        let target = |mix: Option<&str>| {
            FlakySink::new(None, 0).with_load_target(LoadTarget {
                concurrency: 5,
                mix: mix.map(str::to_string),
                rate: None,
                count_unanswered: false,
            })
        };
        // No mix asked: the concurrency is taken.
        assert_eq!(follow_load_target(&target(None), &live, None).await, Ok(()));
        assert_eq!(live.concurrency.load(Ordering::Relaxed), 5);
        // A mix the worker has no plan for: an error every time it is asked, never applied.
        for _ in 0..2 {
            let why = follow_load_target(&target(Some("b@2:1")), &live, None).await;
            let why = why.expect_err("a mix that cannot be run");
            assert!(
                why.contains("model mix cannot be run") && why.contains("b@2:1"),
                "{why}"
            );
        }
        assert_eq!(*live.mix.lock().unwrap(), None);
    }

    #[test]
    fn the_pre_flight_is_bounded_by_the_run_s_duration() {
        let s = Duration::from_secs;
        assert_eq!(preflight_limit(None), s(120));
        assert_eq!(preflight_limit(Some(s(30))), s(30));
        assert_eq!(preflight_limit(Some(s(1))), s(5));
        assert_eq!(preflight_limit(Some(s(8 * 3600))), s(120));
    }

    #[test]
    fn failure_pauses_double_up_to_five_seconds() {
        let ms = |n| failure_pause(n).as_millis();
        assert_eq!([ms(1), ms(2), ms(3), ms(6)], [100, 200, 400, 3200]);
        assert_eq!(ms(7), 5000);
        assert_eq!(ms(u32::MAX), 5000);
    }
}
