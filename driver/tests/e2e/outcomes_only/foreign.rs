//! A foreign client group (docs/clients.md), the project's Python client on tritonclient,
//! beside the Rust worker's.

use crate::support::{
    beside_another, edit_matrix, ensure_worker, read, read_json, repo_root, run_matrix_for,
    smoke_matrix,
};
use serde_json::Value;

/// A foreign client group (docs/clients.md) beside the Rust worker's: the project's Python
/// client on tritonclient. Against add_sub its tests are counted like the worker's own, in its
/// group's rows, and the run passes; against add_sub_wrong the wrong answers it finds are
/// failure records of its member in its words, and the run fails on the server's bug.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_tritonclient_group_is_counted_like_the_worker_s_own_and_its_failures_fail_the_run()
 {
    let _run = beside_another().await;
    ensure_worker();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("models");
    std::fs::create_dir_all(&repo).unwrap();
    for (dir, model) in [("models", "add_sub"), ("models-faulty", "add_sub_wrong")] {
        std::os::unix::fs::symlink(repo_root().join(dir).join(model), repo.join(model)).unwrap();
    }
    let foreign_matrix = |model: &str, beside_rust: bool| {
        let dir = tmp.path().join(model);
        std::fs::create_dir_all(&dir).unwrap();
        edit_matrix(smoke_matrix(&dir), |m| {
            m.run.slo.clear();
            for template in m.server_templates.values_mut() {
                template.model_repositories = vec![repo.display().to_string()];
            }
            let mut rust = m.client_templates["grpc-all"].clone();
            rust.scenarios = Some([("Load".to_string(), 1)].into_iter().collect());
            let mut python = rust.clone();
            python.scenarios = None;
            python.load = None;
            python.concurrency = 1;
            python.models = serde_saphyr::from_str(&format!("[{{name: {model}}}]")).unwrap();
            python.client = Some(
                serde_saphyr::from_str(&format!(
                    "{{command: [{}, {}], interface: 1}}",
                    repo_root().join(".local/venv/bin/python").display(),
                    repo_root()
                        .join("clients/python/tritonclient_stress.py")
                        .display()
                ))
                .unwrap(),
            );
            m.client_templates.insert("python".into(), python);
            let mut group = m.client_groups["grpc-clients"].clone();
            group.template = "python".into();
            m.client_groups.insert("python-clients".into(), group);
            if beside_rust {
                m.client_templates.insert("grpc-all".into(), rust);
            } else {
                m.client_groups.shift_remove("grpc-clients");
                m.client_templates.shift_remove("grpc-all");
            }
        })
    };

    let matrix = foreign_matrix("add_sub", true);
    let (driver, status, run_dir) = run_matrix_for(tmp.path(), &matrix, "e2e-foreign", "8s").await;
    assert_eq!(status.code(), Some(0), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    let load = |group: &str| -> Value {
        let rows = report["groups"][group]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let row = rows.into_iter().find(|r| r["scenario"] == "Load");
        row.unwrap_or_else(|| panic!("no Load row of {group}: {:#}", report["groups"]))
    };
    for group in ["grpc-clients", "python-clients"] {
        let row = load(group);
        assert!(row["requests"].as_u64().unwrap() > 0, "{group}: {row:#}");
        assert_eq!(row["failures"], 0, "{group}: {row:#}");
    }
    // The Python client's tests are its requests, one each.
    let python = load("python-clients");
    assert_eq!(python["tests"], python["requests"], "{python:#}");

    let matrix = foreign_matrix("add_sub_wrong", false);
    let (driver, status, run_dir) =
        run_matrix_for(tmp.path(), &matrix, "e2e-foreign-wrong", "8s").await;
    assert_eq!(status.code(), Some(1), "{}", driver.output());
    let report = read_json(&run_dir.join("report.json"));
    assert_eq!(report["verdict"], "FAIL", "{report:#}");
    let failures = report["failures"].as_array().expect("failure records");
    let (member, record) = (&failures[0][0], &failures[0][1]);
    assert_eq!(member, "python-clients-0", "{failures:#?}");
    assert_eq!(record["error_kind"], "wrong_answer", "{record:#}");
    assert!(
        record["actual"]
            .as_str()
            .unwrap()
            .starts_with("OUTPUT1 = ["),
        "{record:#}"
    );
    let root = read(&run_dir.join("report.txt"));
    assert!(root.contains("SERVER BUG on triton-0"), "{root}");
    assert!(root.contains("seen by CLIENT python-clients-0"), "{root}");
}
