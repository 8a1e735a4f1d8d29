//! Where a slow request spent its time: clients that trace (`trace_share`) against the real
//! tritonserver 2.51, which the run puts in OpenTelemetry mode and points at its receiver. A
//! model slow in its queue (two instances of 50 ms, 12 requests in flight) is attributed to
//! the queue; one slow in compute (200 ms, never more requests in flight than instances) to
//! compute — over gRPC and over HTTP.

use crate::support::{
    RUN_LOCK, edit_matrix, ensure_worker, read_json, run_matrix_for, smoke_matrix,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tail_of_a_queueing_model_is_queue_and_of_a_slow_model_compute() {
    let _one_run = RUN_LOCK.lock().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        m.run.slo.clear();
        let base = m.client_templates.values().next().unwrap().clone();
        m.client_templates.clear();
        let mut group = m.client_groups.values().next().unwrap().clone();
        m.client_groups.clear();
        let tracing = |protocol: &str, models: &str, in_flight: u32| {
            let mut t = base.clone();
            t.scenarios = None;
            t.protocol = serde_saphyr::from_str(protocol).unwrap();
            t.models = serde_saphyr::from_str(models).unwrap();
            // One stream with `in_flight` requests in flight (closed loop).
            t.concurrency = 1;
            t.load = Some(driver::matrix::LoadMode::Concurrency(in_flight));
            t.trace_share = Some("1".parse().unwrap());
            t
        };
        m.client_templates.insert(
            "queued".into(),
            tracing("grpc", "[{name: fixed_capacity}]", 12),
        );
        m.client_templates.insert(
            "computing".into(),
            tracing("http", "[{name: identity_delay, shape: {INPUT0: [4]}}]", 2),
        );
        for name in ["queued", "computing"] {
            group.template = name.into();
            m.client_groups
                .insert(format!("{name}-clients"), group.clone());
        }
    });
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-traces", "20s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let traces = &report["traced_tail"];
    assert!(traces.is_object(), "no traces in the report: {report:#}");
    let tail = |model: &str| {
        traces["rows"]
            .as_array()
            .expect("tails")
            .iter()
            .find(|t| t["model"] == model)
            .unwrap_or_else(|| panic!("no tail of {model}: {traces:#}"))
            .clone()
    };
    let share = |t: &serde_json::Value, part: &str| t["shares"][part].as_f64().unwrap();
    let queued = tail("fixed_capacity");
    assert!(share(&queued, "queue") > 0.6, "{queued:#}");
    let computing = tail("identity_delay");
    assert!(share(&computing, "compute_infer") > 0.8, "{computing:#}");
    // Over HTTP every traced request's spans arrive; over gRPC tritonserver 2.51 loses the
    // context of about one request in ten (docs/limitations.md): those are counted, never split.
    assert_eq!(
        computing["no_spans"], 0,
        "every tail request joined: {computing:#}"
    );
    assert_eq!(
        computing["partial"], 0,
        "every tail request joined: {computing:#}"
    );
    let (tail, split) = (
        queued["tail"].as_u64().unwrap(),
        queued["split"].as_u64().unwrap(),
    );
    assert!(split > 0 && split * 2 >= tail, "{queued:#}");
    assert_eq!(
        queued["no_spans"].as_u64().unwrap() + queued["partial"].as_u64().unwrap() + split,
        tail,
        "{queued:#}"
    );
    let text = std::fs::read_to_string(run_dir.join("report.txt")).unwrap();
    assert!(text.contains("Where the tail's time went"), "{text}");
}
