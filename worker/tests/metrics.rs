//! A worker run in-process against a REAL tritonserver: its `/metrics` holds a latency histogram
//! per scenario and server that counts every answered request, and its final SUCCESS reaches a
//! status sink whose first writes of it fail.
//!
//! Needs scripts/install-tritonserver.sh to have been run (.local/bin/tritonserver).

mod support;

use clap::Parser;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use stress_common::status::EventKind;
use stress_common::status::testing::FlakySink;
use tokio_util::sync::CancellationToken;
use worker::metrics::Metrics;

const HISTOGRAM: &str = "triton_stress_worker_request_latency_seconds";

/// One sample line of the exposition: `name{k="v",...} value`, labels in a map.
fn parse_line(line: &str) -> Option<(&str, BTreeMap<&str, &str>, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    let labels = labels
        .split(',')
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k, v.trim_matches('"')))
        .collect();
    Some((name, labels, value.parse().ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_histograms_count_every_answered_request_by_scenario_and_server() {
    let _serial = support::SERVER_LOCK.lock().await;
    let server = support::start_server("metrics").await;
    // Two addresses of the one server: two values of the server label.
    let servers = [
        server.grpc_address(),
        server.grpc_address().replace("127.0.0.1", "localhost"),
    ];
    let cli = worker::config::Cli::try_parse_from([
        "worker",
        "--servers",
        &servers.join(","),
        "--scenarios",
        "Load:1,SequenceValid:1",
        "--concurrency",
        "2",
        "--duration",
        "4s",
        "--seed",
        "1",
    ])
    .unwrap();
    let config = cli.run.into_config().unwrap();
    let metrics = Arc::new(Metrics::default());
    let cancel = CancellationToken::new();
    let address = worker::metrics::serve(
        metrics.clone(),
        "127.0.0.1:0".parse().unwrap(),
        cancel.clone(),
    )
    .await
    .unwrap();
    let sink = Arc::new(FlakySink::new(Some(EventKind::Success), 2));
    let report = worker::run::run(config, sink.clone(), Some(metrics), cancel.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", support::server_log(&server)));

    // The final SUCCESS was retried until the sink took it, once.
    let successes: Vec<String> = sink
        .events()
        .into_iter()
        .filter(|(k, _)| *k == EventKind::Success)
        .map(|(_, d)| d)
        .collect();
    assert_eq!(sink.attempts(), 3);
    assert_eq!(successes.len(), 1, "{successes:?}");

    let scrape =
        stress_common::http::get(&format!("http://{address}/metrics"), Duration::from_secs(5))
            .await
            .unwrap();
    cancel.cancel();
    assert!(scrape.is_ok(), "{scrape:?}");
    let text = scrape.body;
    assert!(
        text.contains(&format!("# TYPE {HISTOGRAM} histogram")),
        "{text}"
    );
    assert!(!text.contains("p99"), "the p99 gauge is gone:\n{text}");

    // Per (scenario, server): _count, _sum and cumulative _bucket lines ending in +Inf = _count.
    let mut count: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut sum: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut buckets: BTreeMap<(String, String), Vec<(String, f64)>> = BTreeMap::new();
    for (name, labels, value) in text.lines().filter_map(parse_line) {
        let Some(kind) = name.strip_prefix(HISTOGRAM) else {
            continue;
        };
        let key = (
            labels
                .get("scenario")
                .expect("a scenario label")
                .to_string(),
            labels.get("server").expect("a server label").to_string(),
        );
        match kind {
            "_count" => assert!(count.insert(key, value).is_none()),
            "_sum" => assert!(sum.insert(key, value).is_none()),
            "_bucket" => buckets
                .entry(key)
                .or_default()
                .push((labels["le"].to_string(), value)),
            other => panic!("unexpected series {HISTOGRAM}{other}"),
        }
    }
    assert_eq!(
        count.keys().collect::<Vec<_>>(),
        sum.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        count.keys().collect::<Vec<_>>(),
        buckets.keys().collect::<Vec<_>>()
    );
    for (key, series) in &buckets {
        assert_eq!(
            series.len(),
            worker::metrics::LATENCY_BUCKETS_S.len() + 1,
            "{key:?}"
        );
        assert!(
            series.windows(2).all(|w| w[0].1 <= w[1].1),
            "{key:?}: {series:?}"
        );
        assert_eq!(series.last().unwrap(), &("+Inf".to_string(), count[key]));
        assert!(sum[key] > 0.0, "{key:?}");
    }
    let labelled_servers: BTreeSet<&str> = count.keys().map(|(_, s)| s.as_str()).collect();
    assert_eq!(
        labelled_servers,
        servers.iter().map(String::as_str).collect(),
        "{text}"
    );

    // Every answered request is one observation: the counts add up to each row's requests.
    for scenario in ["Load", "SequenceValid"] {
        let row = report
            .rows
            .iter()
            .find(|r| r.scenario == scenario)
            .unwrap_or_else(|| panic!("no {scenario} row: {:?}", report.rows));
        assert_eq!(row.failures, 0, "{}", report.render());
        assert!(row.requests > 0, "{}", report.render());
        let observed: f64 = count
            .iter()
            .filter(|((s, _), _)| s == scenario)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(observed, row.requests as f64, "{scenario}:\n{text}");
    }
    support::stop_server(server).await;
}
