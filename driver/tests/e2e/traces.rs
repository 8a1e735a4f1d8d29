//! Where a slow request spent its time: clients that trace (`trace_share`) against the real
//! tritonserver 2.51, which the run puts in OpenTelemetry mode and points at its receiver. A
//! model slow in its queue (two instances of 50 ms, 12 requests in flight) is attributed to
//! the queue; one slow in compute (200 ms, never more requests in flight than instances) to
//! compute — over gRPC and over HTTP. A client kept off the CPU most of the time (its worker
//! stopped for 90 ms of every 100) is attributed to the client: its answers wait in the kernel
//! until it reads them, and traced requests carry the kernel's receive time, so an answer read
//! late shows its wait as the client's.

use crate::support::{
    alone, edit_matrix, ensure_worker, processes, run_unless_the_server_crashed, smoke_matrix,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::time::Duration;
use stress_common::contract::RunId;
use stress_common::store::Store;

/// Keeps the worker of `member` in each run whose id starts with `run_id` stopped 90 ms of
/// every 100 until cancelled (dropped): a client starved of CPU, whatever the machine's
/// cgroups. A run done, it waits for the next (a run again after a server crash).
async fn starve(run_id: &str, member: &str) {
    let is_it = |args: &[String]| {
        let after = |flag: &str| args.iter().skip_while(|a| *a != flag).nth(1);
        after("--run-id").is_some_and(|id| id.starts_with(run_id))
            && after("--member-id").map(String::as_str) == Some(member)
    };
    loop {
        let pid = loop {
            if let Some(p) = processes().into_iter().find(|p| is_it(&p.args)) {
                break Pid::from_raw(p.pid as i32);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let _resumed = Resume(pid);
        while kill(pid, Signal::SIGSTOP).is_ok() {
            tokio::time::sleep(Duration::from_millis(90)).await;
            let _ = kill(pid, Signal::SIGCONT);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Lets a stopped process go on when the starving ends.
struct Resume(Pid);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tail_of_a_queueing_model_is_queue_and_of_a_slow_model_compute() {
    let _run = alone().await;
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
        // 50 requests/s: a few answers a second reach the socket while the client is stopped.
        let mut starved = tracing("grpc", "[{name: add_sub}]", 1);
        starved.load = Some(serde_saphyr::from_str("{rate: 50}").unwrap());
        m.client_templates.insert("starved".into(), starved);
        for name in ["queued", "computing", "starved"] {
            group.template = name.into();
            m.client_groups
                .insert(format!("{name}-clients"), group.clone());
        }
    });
    let starving = tokio::spawn(starve("e2e-traces", "starved-clients-0"));
    // tritonserver 2.51 in OpenTelemetry mode once died of SIGSEGV mid-run here (CI,
    // 2026-12-07; docs/limitations.md): such a run says nothing of the split, so it runs again.
    let (driver, status, run_dir, report) =
        run_unless_the_server_crashed(tmp.path(), &matrix, "e2e-traces", "20s").await;
    starving.abort();
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let run_id = RunId::new(run_dir.file_name().unwrap().to_str().unwrap());
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
    // The starved client's answers that waited in its socket while it was stopped keep the
    // kernel's receive time: the wait is the client's (received → answered), not the wire's.
    // Its tail's shares are not asserted: with the client stopped, tritonserver's gRPC frontend
    // sometimes sends an answer ~85 ms after its span ends, a real delay on the way back that
    // the split rightly calls transport out (in 3 of 12 runs here the tail was then 33–42%
    // client; docs/limitations.md).
    let store = Store::connect(&Store::sqlite_url(&run_dir.join("store.sqlite")))
        .await
        .unwrap();
    let spans = store.client_spans_after(&run_id, 0, 100_000).await.unwrap();
    let starved: Vec<_> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.model == "add_sub")
        .collect();
    let read_late = starved
        .iter()
        .filter(|s| s.received_ns.is_some_and(|r| s.answered_ns - r > 5_000_000))
        .count();
    assert!(
        starved.iter().all(|s| s.received_ns.is_some()) && read_late > 0,
        "{read_late} of {} answers of the starved client read 5 ms or more after they came",
        starved.len()
    );
    let starved_tail = tail("add_sub");
    assert!(share(&starved_tail, "client") > 0.0, "{starved_tail:#}");
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
