//! The servers over time: every server's Triton `/metrics` scraped once per series interval
//! (`stress_common::interval::series_interval`) into the store's `server_samples`, as counter
//! deltas per model plus gauges and the server's memory (a local process tree's RSS, a pod's
//! cgroup memory: [`ServerMemory`]).
//!
//! It runs beside the poll loop (a scrape of a hung server must not delay fail-fast). The first
//! scrape, taken before the workers start, is the baseline the first delta starts from (saved
//! with its memory and gauges only, no counts);
//! [`ServerSampler::finish`] takes the last one after the workers' final flush, so the deltas
//! add up to what each server did during the load.

use crate::launcher::ServerMemory;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::store::{Store, within};
use stress_common::triton_metrics::{self, ModelMetrics, ServerSample};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// The longest a scrape may take before the sample goes without that server.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// A sample's write: a store that does not answer loses this sample, not the run's end.
const STORE_WRITE_LIMIT: Duration = Duration::from_secs(3);

/// A server to sample: its metrics address and where its memory is read.
#[derive(Debug, Clone)]
pub struct SampledServer {
    pub member: stress_common::contract::MemberName,
    pub metrics: String,
    pub memory: Option<ServerMemory>,
    /// Launched by this run (on this machine or the cluster), not an external server: a
    /// quick connect tells first whether it is there at all (see [`LOCAL_CONNECT`](crate::launcher::LOCAL_CONNECT)).
    pub launched: bool,
}

/// How long the baseline scrape is retried for a server whose metrics did not answer.
const BASELINE_PATIENCE: Duration = Duration::from_millis(1500);
const BASELINE_RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Per server: where its memory is read (a local server started again after an injected fault
/// is a new process). Apart from [`State`], which a sample holds while it scrapes.
type MemorySources = std::sync::Mutex<BTreeMap<String, ServerMemory>>;

#[derive(Debug, Default)]
struct State {
    /// Per server: the cumulative counters and time of its last scrape.
    last: BTreeMap<String, (i64, Vec<ModelMetrics>)>,
    /// Per server not answering: the first scrape since its last good one that found it gone.
    silent_since: BTreeMap<String, i64>,
}

pub struct ServerSampler {
    store: Store,
    run_id: RunId,
    servers: Vec<SampledServer>,
    state: Arc<Mutex<State>>,
    memory: Arc<MemorySources>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ServerSampler {
    /// Takes the baseline scrape now, then samples every `interval` until [`Self::finish`].
    pub async fn start(
        store: Store,
        run_id: RunId,
        servers: Vec<SampledServer>,
        interval: Duration,
    ) -> Self {
        let memory = servers
            .iter()
            .filter_map(|s| Some((s.member.to_string(), s.memory.clone()?)))
            .collect();
        let mut sampler = Self {
            store,
            run_id,
            servers,
            state: Arc::default(),
            memory: Arc::new(std::sync::Mutex::new(memory)),
            stop: CancellationToken::new(),
            task: None,
        };
        sampler.sample().await;
        // A server whose metrics did not answer gets more tries before the workers start:
        // without a baseline its counts would miss the load before its first scrape (the
        // report then calls the comparison off, see `report::not_comparable`).
        let patience = tokio::time::Instant::now() + BASELINE_PATIENCE;
        loop {
            let missing: Vec<SampledServer> = {
                let state = sampler.state.lock().await;
                sampler
                    .servers
                    .iter()
                    .filter(|s| !state.last.contains_key(s.member.as_str()))
                    .cloned()
                    .collect()
            };
            if missing.is_empty() || tokio::time::Instant::now() >= patience {
                break;
            }
            tokio::time::sleep(BASELINE_RETRY_PAUSE).await;
            sampler.sample_of(&missing).await;
        }
        let (store, run_id, servers, state, memory, stop) = (
            sampler.store.clone(),
            sampler.run_id.clone(),
            sampler.servers.clone(),
            sampler.state.clone(),
            sampler.memory.clone(),
            sampler.stop.clone(),
        );
        sampler.task = Some(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stop.cancelled() => return,
                }
                sample(&store, &run_id, &servers, &state, &memory).await;
            }
        }));
        sampler
    }

    /// The sampled servers' member names.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.servers.iter().map(|s| s.member.as_str())
    }

    /// Where `member`'s memory is read from now on (None: nowhere): a local server started
    /// again after an injected fault is a new process. Never waits for a sample under way (the
    /// poll loop calls it every tick of a fault: a paused server's scrape holds a sample for up
    /// to [`SCRAPE_TIMEOUT`], and a 4 s pause once ended 1 s late behind it).
    pub fn track_memory(&self, member: &str, memory: Option<ServerMemory>) {
        let mut sources = self.memory.lock().expect("memory sources");
        match memory {
            // The same source keeps its reader (and whether it already warned).
            Some(memory) if sources.get(member).is_some_and(|m| m.same_source(&memory)) => {}
            Some(memory) => {
                sources.insert(member.to_string(), memory);
            }
            None => {
                sources.remove(member);
            }
        }
    }

    /// One sample now, beside the periodic ones: taken just before a fault stops servers, so
    /// what they served until then is scraped (what a process serves after its last scrape is
    /// lost with it).
    pub async fn sample(&self) {
        self.sample_of(&self.servers).await;
    }

    async fn sample_of(&self, servers: &[SampledServer]) {
        sample(
            &self.store,
            &self.run_id,
            servers,
            &self.state,
            &self.memory,
        )
        .await;
    }

    /// Stops the periodic samples and takes the last one (call after the workers' final
    /// flush, before the servers stop).
    pub async fn finish(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.sample().await;
    }
}

impl Drop for ServerSampler {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One sample of every server, scraped concurrently; a server that does not answer is left out
/// of this sample (its next delta covers the gap). Samples are taken one at a time (the state
/// is held throughout): a delta is only ever taken from an earlier scrape.
async fn sample(
    store: &Store,
    run_id: &RunId,
    servers: &[SampledServer],
    state: &Mutex<State>,
    memory: &MemorySources,
) {
    let mut state = state.lock().await;
    let memory = memory.lock().expect("memory sources").clone();
    let scrapes = futures::future::join_all(servers.iter().map(|s| {
        let memory = memory.get(s.member.as_str());
        async move {
            if s.launched
                && !stress_common::http::reachable(&s.metrics, crate::launcher::LOCAL_CONNECT).await
            {
                return (s, stress_common::now_ms(), None, None);
            }
            let url = format!("http://{}/metrics", s.metrics);
            // A pod's memory is an API round trip: read beside the scrape, within its limit.
            let read_memory = async {
                let memory = memory?;
                tokio::time::timeout(SCRAPE_TIMEOUT, memory.read())
                    .await
                    .ok()
                    .flatten()
            };
            let (text, memory) =
                tokio::join!(stress_common::http::get(&url, SCRAPE_TIMEOUT), read_memory);
            let text = text.ok().filter(|r| r.is_ok()).map(|r| r.body);
            (s, stress_common::now_ms(), text, memory)
        }
    }))
    .await;
    for (server, at_ms, text, memory) in scrapes {
        let member = server.member.to_string();
        let Some(text) = text else {
            state.silent_since.entry(member).or_insert(at_ms);
            continue;
        };
        let silent_since = state.silent_since.remove(&member);
        let rss_bytes = memory.map(|m| m.resident_bytes as f64);
        let memory_limit_bytes = memory.and_then(|m| m.limit_bytes).map(|b| b as f64);
        let models = triton_metrics::parse(&text);
        // The first scrape is the baseline the deltas start from: recorded with its memory
        // and gauges only (no interval, no counts), so growth counts from before the load.
        let Some((before_ms, before)) = state.last.get(server.member.as_str()) else {
            let baseline = ServerSample {
                at_ms,
                interval_ms: 0,
                rss_bytes,
                memory_limit_bytes,
                gauges: triton_metrics::gauges(&text),
                models: Vec::new(),
                unscraped_ms: None,
            };
            if let Err(e) = within(
                STORE_WRITE_LIMIT,
                store.record_server_sample(run_id, &server.member, &baseline),
            )
            .await
            {
                tracing::warn!("baseline sample of {} not recorded: {e}", server.member);
            }
            state
                .last
                .insert(server.member.to_string(), (at_ms, models));
            continue;
        };
        let (deltas, unscraped_ms) = deltas((*before_ms, before), (at_ms, &models), silent_since);
        let sample = ServerSample {
            at_ms,
            interval_ms: at_ms - before_ms,
            rss_bytes,
            memory_limit_bytes,
            gauges: triton_metrics::gauges(&text),
            models: deltas,
            unscraped_ms,
        };
        // Only a recorded sample moves the baseline: after a failed write the next delta
        // covers the gap.
        match within(
            STORE_WRITE_LIMIT,
            store.record_server_sample(run_id, &server.member, &sample),
        )
        .await
        {
            Ok(()) => {
                state
                    .last
                    .insert(server.member.to_string(), (at_ms, models));
            }
            Err(e) => tracing::warn!("server sample of {} not recorded: {e}", server.member),
        }
    }
}

/// What a server's counters did from its `last` scrape to `now` (each: when, what), and, when
/// `now` is a new process's, how long its predecessor went unscraped: to `silent_since` (the
/// first scrape that found it gone) or, restarted between two scrapes, to `now`.
fn deltas(
    (last_ms, last): (i64, &[ModelMetrics]),
    (now_ms, now): (i64, &[ModelMetrics]),
    silent_since: Option<i64>,
) -> (Vec<ModelMetrics>, Option<i64>) {
    if triton_metrics::restarted(last, now) {
        let unscraped = silent_since.unwrap_or(now_ms) - last_ms;
        (triton_metrics::delta(&[], now), Some(unscraped))
    } else {
        (triton_metrics::delta(last, now), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(success: f64) -> Vec<ModelMetrics> {
        vec![ModelMetrics {
            model: "m".into(),
            version: "1".into(),
            success,
            ..Default::default()
        }]
    }

    /// A paused server accepts a scrape's connection and never answers: the sample holds its
    /// state for up to [`SCRAPE_TIMEOUT`]. The poll loop, which tracks memory every tick of a
    /// fault, must not wait for it (a 4 s pause once ended 1 s late behind such a scrape).
    #[tokio::test]
    async fn a_sample_waiting_on_a_paused_server_holds_back_no_memory_tracking() {
        let paused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let url = Store::sqlite_url(&dir.path().join("store.sqlite"));
        let sampler = ServerSampler {
            store: Store::connect(&url).await.unwrap(),
            run_id: RunId::new("r"),
            servers: vec![SampledServer {
                member: "triton-0".parse().unwrap(),
                metrics: paused.local_addr().unwrap().to_string(),
                memory: None,
                launched: false,
            }],
            state: Arc::default(),
            memory: Arc::default(),
            stop: CancellationToken::new(),
            task: None,
        };
        let mut sampling = std::pin::pin!(sampler.sample());
        assert!(futures::poll!(&mut sampling).is_pending());
        assert!(
            sampler.state.try_lock().is_err(),
            "the sample holds its state"
        );
        let pid = std::process::id();
        sampler.track_memory("triton-0", Some(ServerMemory::ProcessTree(pid)));
        assert!(sampler.memory.lock().unwrap().contains_key("triton-0"));
    }

    #[test]
    fn a_new_process_counts_from_zero_and_says_how_long_its_predecessor_went_unscraped() {
        let same = deltas((1000, &served(100.0)), (2000, &served(160.0)), None);
        assert_eq!((same.0[0].success, same.1), (60.0, None));
        // Gone at the scrape of 3.0 s, back by 9.0 s: 80 served since the restart, and the
        // old process ran unscraped for up to 2.0 s after its last scrape.
        let back = deltas((1000, &served(100.0)), (9000, &served(80.0)), Some(3000));
        assert_eq!((back.0[0].success, back.1), (80.0, Some(2000)));
        // Restarted between two scrapes: up to the whole interval.
        let quick = deltas((1000, &served(100.0)), (2000, &served(5.0)), None);
        assert_eq!((quick.0[0].success, quick.1), (5.0, Some(1000)));
    }
}
