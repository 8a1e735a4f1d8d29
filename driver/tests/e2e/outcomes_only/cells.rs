//! A client × server matrix whose cells run in turn (`run.cells: in_turn`): each cell a run of
//! its own with only its servers, one after another, and the run's grid gathered from them.

use crate::support::{beside_another, edit_matrix, ensure_worker, read, read_json, smoke_matrix};
use serde_json::Value;

/// Two client templates (the worker over gRPC and over HTTP) against two server groups, three
/// of the four cells filled: three runs `RUN-c1..3`, one after another, each with its one
/// server and its client group only; grid.json and grid.txt have every cell, each measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_in_turn_run_one_after_another_each_with_only_its_servers() {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let matrix = edit_matrix(smoke_matrix(tmp.path()), |m| {
        m.run.slo.clear();
        m.run.cells = serde_saphyr::from_str("in_turn").unwrap();
        let server = m.server_groups["triton"].clone();
        m.server_groups.insert("other".into(), server);
        let mut grpc = m.client_templates["grpc-all"].clone();
        grpc.scenarios = Some([("Load".to_string(), 1)].into_iter().collect());
        grpc.load = None;
        grpc.concurrency = 2;
        let mut http = grpc.clone();
        http.protocol = serde_saphyr::from_str("http").unwrap();
        m.client_templates.clear();
        m.client_templates.insert("grpc".into(), grpc);
        m.client_templates.insert("http".into(), http);
        let group = m.client_groups["grpc-clients"].clone();
        m.client_groups.clear();
        for (name, template, target) in [
            ("grpc-on-triton", "grpc", "triton"),
            ("grpc-on-other", "grpc", "other"),
            ("http-on-other", "http", "other"),
        ] {
            let mut g = group.clone();
            g.template = template.into();
            g.target = target.into();
            m.client_groups.insert(name.into(), g);
        }
    });
    let runs = tmp.path().join("runs");
    let (driver, status, run_dir) =
        crate::support::run_matrix_for(tmp.path(), &matrix, "e2e-cells", "5s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());

    let cells: Vec<(&str, &str, &str)> = vec![
        ("grpc", "triton", "grpc-on-triton"),
        ("grpc", "other", "grpc-on-other"),
        ("http", "other", "http-on-other"),
    ];
    let mut previous_end = 0;
    for (k, (_, server, group)) in cells.iter().enumerate() {
        let id = format!("e2e-cells-c{}", k + 1);
        let report = read_json(&runs.join(&id).join("report.json"));
        assert_eq!(report["verdict"], "PASS", "{id}: {report:#}");
        let servers: Vec<&str> = member_names(&report["servers"]);
        assert_eq!(servers, [format!("{server}-0")], "{id}");
        let groups: Vec<&String> = report["groups"].as_object().unwrap().keys().collect();
        assert_eq!(groups, [group], "{id}");
        // One after another: this cell started after the one before it had finished.
        let started = report["started_at_ms"].as_i64().unwrap();
        assert!(
            started >= previous_end,
            "{id} started before the cell before it ended"
        );
        previous_end = report["finished_at_ms"].as_i64().unwrap();
    }

    let grid = read_json(&run_dir.join("grid.json"));
    assert_eq!(grid["clients"], serde_json::json!(["grpc", "http"]));
    assert_eq!(grid["servers"], serde_json::json!(["triton", "other"]));
    let got: Vec<(&str, &str)> = grid["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["client"].as_str().unwrap(), c["server"].as_str().unwrap()))
        .collect();
    let want: Vec<(&str, &str)> = cells.iter().map(|(c, s, _)| (*c, *s)).collect();
    assert_eq!(got, want, "{grid:#}");
    for cell in grid["cells"].as_array().unwrap() {
        assert_eq!(cell["verdict"], "PASS", "{cell:#}");
        assert!(cell["qps"].as_f64().unwrap() > 0.0, "{cell:#}");
        assert!(cell["p99_us"].as_u64().unwrap() > 0, "{cell:#}");
    }
    let text = read(&run_dir.join("grid.txt"));
    assert!(text.contains("e2e-cells-c3: http on other PASS"), "{text}");
    assert!(
        driver.stdout().contains("Clients x servers"),
        "{}",
        driver.output()
    );
}

/// The member names of a report's `servers` list.
fn member_names(servers: &Value) -> Vec<&str> {
    servers
        .as_array()
        .map(|s| s.iter().filter_map(|m| m["member_id"].as_str()).collect())
        .unwrap_or_default()
}
