//! Autoscaler signals against a real tritonserver (`fixed_capacity`: 2 instances × 50 ms) and a
//! real Prometheus (Debian's package: scripts/install-prometheus.sh) that scrapes it: the PromQL
//! path agrees with the direct scrape of the same server, a selector matching no series is a
//! warning, and a Prometheus that stops answering mid-run leaves the direct scrape going.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use driver::capacity::autoscale::{Collector, PromAnswer, Signal, prom_query};
use driver::capacity::controller::{Controller, Ending, Window};
use driver::matrix::PrometheusSource;
use driver::plan::capacity::ControllerConfig;
use stress_common::tritonserver::{ServerSpec, TritonServer, find_binary, free_port};

const SERVER: &str = "triton-0";
const GROUP: &str = "clients";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("driver/ is inside the repository")
        .to_path_buf()
}

/// A Prometheus on a free loopback port scraping `target` every 500 ms; killed on drop.
struct Prometheus {
    child: Child,
    url: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    async fn start(dir: &Path, target: &str) -> Self {
        let binary = std::env::var_os("PROMETHEUS_BIN")
            .map(PathBuf::from)
            .or_else(|| stress_common::paths::find_on_path("prometheus"))
            .expect("prometheus is not installed: run scripts/install-prometheus.sh");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{ scrape_interval: 500ms, scrape_timeout: 400ms }}\n\
                 scrape_configs:\n\
                 \x20 - job_name: triton\n\
                 \x20   static_configs: [{{ targets: [\"{target}\"] }}]\n"
            ),
        )
        .unwrap();
        let port = free_port().unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let p = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        // Ready, and it has scraped the server at least once.
        for _ in 0..120 {
            let now = stress_common::now_ms();
            if let Ok(PromAnswer::Value(v)) =
                prom_query(&p.url, r#"up{job="triton"}"#, now, Duration::from_secs(1)).await
                && v == 1.0
            {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "prometheus did not scrape {target} within 30 s:\n{}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
    }
}

async fn start_triton(dir: &Path) -> TritonServer {
    let root = repo_root();
    let binary = find_binary(Some(&root)).unwrap_or_else(|e| panic!("{e}"));
    let mut spec = ServerSpec::new(binary, vec![root.join("models")], dir.join("triton.log"));
    spec.extra_args = vec![
        "--model-control-mode=explicit".into(),
        "--load-model=fixed_capacity".into(),
        "--log-verbose=0".into(),
    ];
    TritonServer::start_ready(spec, Duration::from_secs(300))
        .await
        .unwrap_or_else(|e| panic!("tritonserver: {e}"))
}

/// `concurrency` closed loops of HTTP inferences on fixed_capacity until `stop`.
fn load(
    http: String,
    concurrency: usize,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<tokio::task::JoinHandle<u64>> {
    let body = serde_json::json!({
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [4], "data": [1, 2, 3, 4]}]
    });
    (0..concurrency)
        .map(|_| {
            let (http, body, stop) = (http.clone(), body.clone(), stop.clone());
            tokio::spawn(async move {
                let url = format!("http://{http}/v2/models/fixed_capacity/infer");
                let mut ok = 0;
                while !stop.is_cancelled() {
                    let r =
                        stress_common::http::post_json(&url, &body, Duration::from_secs(10)).await;
                    ok += u64::from(r.is_ok_and(|r| r.is_ok()));
                }
                ok
            })
        })
        .collect()
}

fn collector(metrics: &str, source: PrometheusSource) -> Collector {
    Collector::with(
        BTreeMap::from([(SERVER.to_string(), metrics.to_string())]),
        BTreeMap::from([(
            GROUP.to_string(),
            (
                BTreeSet::from([SERVER.to_string()]),
                BTreeSet::from(["triton".to_string()]),
            ),
        )]),
        Some(source),
        0.8,
    )
}

/// A controller that judged the windows between `times` on target at concurrency 4.
fn controller(times: &[i64]) -> Controller {
    let mut c = Controller::new(ControllerConfig {
        target_p99_us: 50_000,
        min: 4,
        max: 4,
        increase_step: 1,
        slow_start: false,
        decrease_rate: 0.8,
        settle_periods: 0,
        tolerance: 0.1,
        stable_checks: 2,
        max_decreases: 3,
        safety_factor: 0.7,
    });
    // A phase's first window is never judged: a settling one before the scraped ones.
    let settling = [times[0] - 1000, times[0]];
    for w in std::iter::once(&settling[..]).chain(times.windows(2)) {
        c.check(Window {
            start_ms: w[0],
            end_ms: w[1],
            requests: 300,
            sent: 300,
            failures: 0,
            qps: 100.0,
            p50_us: 40_000,
            p99_us: 50_000,
            models: vec![],
            latency: Default::default(),
        });
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promql_signals_agree_with_the_direct_scrape_and_outages_only_warn() {
    let tmp = tempfile::tempdir().unwrap();
    let mut triton = start_triton(tmp.path()).await;
    let mut prometheus = Some(Prometheus::start(tmp.path(), &triton.metrics_address()).await);
    let url = prometheus.as_ref().unwrap().url.clone();
    let stop = tokio_util::sync::CancellationToken::new();
    // 4 in flight on 2 slots of 50 ms: ~40/s, each request queued ~50 ms on average.
    let loops = load(triton.http_address(), 4, stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;

    let good = PrometheusSource {
        url: url.clone(),
        selector: r#"job="triton""#.into(),
    };
    let nothing = PrometheusSource {
        url: url.clone(),
        selector: r#"job="not-triton""#.into(),
    };
    let mut by_prometheus = collector(&triton.metrics_address(), good);
    let mut unmatched = collector(&triton.metrics_address(), nothing);
    let mut times = Vec::new();
    for i in 0..3 {
        if i == 2 {
            // Prometheus goes away mid-run.
            prometheus = None;
            tokio::time::sleep(Duration::from_secs(2)).await;
        } else if i > 0 {
            tokio::time::sleep(Duration::from_secs(4)).await;
        }
        let now = stress_common::now_ms();
        times.push(now);
        tokio::join!(by_prometheus.scrape(now), unmatched.scrape(now));
    }
    assert!(prometheus.is_none());
    stop.cancel();
    let answered: u64 = futures::future::join_all(loops)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    assert!(answered > 200, "the load ran: {answered} requests");

    let c = controller(&times);
    assert_eq!(c.ending, Some(Ending::Converged));
    assert_eq!(
        c.result().window_end_ms,
        Some(times[1]),
        "the first window is the best"
    );
    let a = by_prometheus.autoscaler(GROUP, &c).expect("scraped");
    assert_eq!(a.source, "prometheus", "{a:#?}");
    let observed = |s: Signal| {
        a.signals
            .iter()
            .find(|t| t.signal == s)
            .unwrap_or_else(|| panic!("no {s:?}: {a:#?}"))
            .observed
    };
    // Same server, same window: PromQL over Prometheus' samples vs the two direct scrapes.
    for (signal, tolerance) in [
        (Signal::ComputeUsPerRequest, 0.10),
        (Signal::RequestUsPerRequest, 0.15),
        (Signal::QueueUsPerRequest, 0.30),
    ] {
        let (promql, direct) = (observed(signal), a.direct[&signal]);
        eprintln!("{signal:?}: PromQL {promql:.0} vs direct {direct:.0}");
        assert!(
            (promql - direct).abs() <= tolerance * direct,
            "{signal:?}: PromQL {promql} vs direct {direct}: {a:#?}"
        );
    }
    let compute = observed(Signal::ComputeUsPerRequest);
    assert!(
        (49_000.0..62_000.0).contains(&compute),
        "fixed_capacity computes 50 ms: {compute}"
    );
    assert!(
        observed(Signal::QueueUsPerRequest) > 5_000.0,
        "4 in flight on 2 slots queue: {a:#?}"
    );
    assert!(
        a.signals.iter().any(|t| t.signal == Signal::CpuUtilization),
        "{a:#?}"
    );
    assert!(
        a.signals
            .iter()
            .any(|t| t.signal == Signal::PendingRequests),
        "{a:#?}"
    );
    assert!(
        !a.signals.iter().any(|t| t.signal == Signal::GpuUtilization),
        "a CPU build reports no GPU: {a:#?}"
    );
    assert_eq!(a.servers.len(), 1, "{a:#?}");
    assert_eq!(a.servers[0].model, "fixed_capacity");
    // The window after Prometheus went away: a warning, and the direct scrape's numbers.
    assert_eq!(a.warnings.len(), 1, "{a:#?}");
    assert!(
        a.warnings[0].contains("did not answer for 1 window(s)"),
        "{a:#?}"
    );

    let u = unmatched.autoscaler(GROUP, &c).expect("scraped");
    assert_eq!(u.source, "direct", "{u:#?}");
    assert!(
        u.warnings[0].contains(r#"selector "job=\"not-triton\"" matched no series"#),
        "{u:#?}"
    );
    assert_eq!(
        u.signals
            .iter()
            .find(|t| t.signal == Signal::ComputeUsPerRequest)
            .map(|t| t.observed),
        Some(u.direct[&Signal::ComputeUsPerRequest]),
        "the direct scrape stands in"
    );
    triton.stop(Duration::from_secs(10)).await;
}
