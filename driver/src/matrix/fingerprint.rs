//! A matrix's fingerprint: which runs ran "the same matrix", so that only they are compared
//! (regressions) and their failures counted as one history (signatures). It is a hash of what
//! defines the system under test and its load: the server templates and groups (model
//! repositories and images, arguments, resources, environment, placement, endpoints), the client
//! templates and groups (protocol, concurrency, scenarios, models, load), the run's mode and the
//! capacity settings, and the fault plan (a run that kills its server is not the same load as one
//! that does not). Left out: the run's name and timing (duration, polls, warm-up), SLO rules,
//! report and regression settings, known issues, and the server's and worker's binary or image
//! and version — an upgrade is compared with the runs before it, which is the point.
//!
//! The text carries a version ([`FINGERPRINT_VERSION`]): a change of what goes in is a new
//! version, and the history before it is said to be another matrix, not silently mixed in.
//! Version 2 took in the fault plan. A matrix without faults hashes as in version 1 and keeps
//! version 1's text, so its history goes on; a run with faults recorded under version 1 is
//! matched by its fingerprint recomputed from its stored matrix text ([`of_stored_run`]).

use super::Matrix;

/// The fingerprint's format; bump it when what goes into it changes.
pub const FINGERPRINT_VERSION: u32 = 2;

/// The version a matrix without faults is written with (its text is version 1's).
const WITHOUT_FAULTS_VERSION: u32 = 1;

/// `mfp<version>-<16 hex digits>`.
pub fn fingerprint(m: &Matrix) -> String {
    let mut v = serde_json::to_value(m).expect("a matrix serialises");
    let take = |v: &mut serde_json::Value, key: &str| v.get_mut(key).map(serde_json::Value::take);
    let mut canonical = serde_json::Map::new();
    let mut server_templates = take(&mut v, "server_templates").unwrap_or_default();
    for t in server_templates
        .as_object_mut()
        .into_iter()
        .flat_map(|o| o.values_mut())
    {
        if let Some(t) = t.as_object_mut() {
            t.remove("tritonserver");
            t.remove("version");
        }
    }
    let mut client_templates = take(&mut v, "client_templates").unwrap_or_default();
    for t in client_templates
        .as_object_mut()
        .into_iter()
        .flat_map(|o| o.values_mut())
    {
        if let Some(t) = t.as_object_mut() {
            t.remove("worker");
        }
    }
    let mut client_groups = take(&mut v, "client_groups").unwrap_or_default();
    for g in client_groups
        .as_object_mut()
        .into_iter()
        .flat_map(|o| o.values_mut())
    {
        if let Some(g) = g.as_object_mut() {
            g.remove("slo");
        }
    }
    canonical.insert("server_templates".into(), server_templates);
    canonical.insert(
        "server_groups".into(),
        take(&mut v, "server_groups").unwrap_or_default(),
    );
    canonical.insert("client_templates".into(), client_templates);
    canonical.insert("client_groups".into(), client_groups);
    canonical.insert(
        "mode".into(),
        v.pointer("/run/mode").cloned().unwrap_or_default(),
    );
    canonical.insert(
        "capacity".into(),
        take(&mut v, "capacity").unwrap_or_default(),
    );
    let version = match take(&mut v, "faults") {
        Some(faults) => {
            canonical.insert("faults".into(), faults);
            FINGERPRINT_VERSION
        }
        None => WITHOUT_FAULTS_VERSION,
    };
    // serde_json's maps are ordered by key: the text is canonical.
    let text = serde_json::Value::Object(canonical).to_string();
    format!("mfp{version}-{:016x}", fnv1a(text.as_bytes()))
}

/// A stored run's fingerprint as today's driver computes it: the stored one, unless the run has
/// faults and was fingerprinted before the fault plan joined (then recomputed from its matrix
/// text); recomputed too for a run stored without one. None: neither is possible.
pub fn of_stored_run(stored: Option<String>, matrix_text: &str) -> Option<String> {
    let current = format!("mfp{FINGERPRINT_VERSION}-");
    match (stored, super::parse(matrix_text, "matrix.yaml")) {
        (Some(stored), Ok(m)) if m.faults.is_empty() || stored.starts_with(&current) => {
            Some(stored)
        }
        (_, Ok(m)) => Some(fingerprint(&m)),
        (stored, Err(_)) => stored,
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut h, bytes);
    std::hash::Hasher::finish(&h)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MATRIX: &str = r#"
version: 1
run: { name: nightly, duration: 60s, poll_interval: 1s, slo: [{ metric: p99, max: 1s }] }
server_templates:
  cpu: { tritonserver: { binary: auto }, model_repositories: [../models], args: ["--log-verbose=0"] }
server_groups:
  triton: { template: cpu, instances: 1 }
client_templates:
  grpc: { worker: { binary: auto }, protocol: grpc, concurrency: 4 }
client_groups:
  clients: { template: grpc, instances: 1, target: triton }
"#;

    fn of(yaml: &str) -> String {
        fingerprint(&crate::matrix::parse(yaml, "m.yaml").expect("valid"))
    }

    #[test]
    fn what_does_not_change_the_system_or_its_load_leaves_it_alone() {
        let base = of(MATRIX);
        assert!(base.starts_with("mfp1-") && base.len() == 21, "{base}");
        for same in [
            MATRIX.replace("name: nightly, duration: 60s", "name: other, duration: 8h"),
            MATRIX.replace("poll_interval: 1s", "poll_interval: 2s"),
            MATRIX.replace("slo: [{ metric: p99, max: 1s }]", "slo: []"),
            MATRIX.replace(
                "tritonserver: { binary: auto }",
                "tritonserver: { binary: /opt/triton-2.52/bin/tritonserver }",
            ),
            MATRIX.replace(
                "worker: { binary: auto }",
                "worker: { binary: /usr/bin/worker }",
            ),
            // Key order in the YAML is not meaning.
            MATRIX.replace(
                "protocol: grpc, concurrency: 4",
                "concurrency: 4, protocol: grpc",
            ),
        ] {
            assert_eq!(of(&same), base, "{same}");
        }
    }

    #[test]
    fn servers_clients_scenarios_and_models_change_it() {
        let base = of(MATRIX);
        for other in [
            MATRIX.replace("template: cpu, instances: 1", "template: cpu, instances: 2"),
            MATRIX.replace(
                "template: grpc, instances: 1",
                "template: grpc, instances: 8",
            ),
            MATRIX.replace("concurrency: 4", "concurrency: 16"),
            MATRIX.replace("protocol: grpc", "protocol: http"),
            MATRIX.replace("[../models]", "[../models, ../models-faulty]"),
            MATRIX.replace("--log-verbose=0", "--log-verbose=1"),
            MATRIX.replace(
                "concurrency: 4 }",
                "concurrency: 4, models: [{ name: add_sub }] }",
            ),
            MATRIX.replace(
                "concurrency: 4 }",
                "concurrency: 4, scenarios: { Load: 1 } }",
            ),
            format!(
                "{MATRIX}faults:\n  - {{ name: kill, target: triton, at: 20s, kind: kill, expect: {{ recover_within: 30s }} }}\n"
            ),
        ] {
            assert_ne!(of(&other), base, "{other}");
        }
    }

    #[test]
    fn a_matrix_without_faults_keeps_the_fingerprint_it_was_stored_with() {
        // Pinned: runs recorded before the fault plan joined must stay this matrix's history.
        assert_eq!(of(MATRIX), "mfp1-a355fedb8b5517e2");
        assert_eq!(
            of_stored_run(Some("mfp1-stored".into()), MATRIX).as_deref(),
            Some("mfp1-stored")
        );
        assert_eq!(of_stored_run(None, MATRIX), Some(of(MATRIX)), "none stored");
    }

    #[test]
    fn a_run_with_faults_is_not_the_matrix_without_them_even_when_stored_before() {
        let faulty = format!(
            "{MATRIX}faults:\n  - {{ name: kill, target: triton, at: 20s, kind: kill, \
             expect: {{ recover_within: 30s }} }}\n"
        );
        let with = of(&faulty);
        assert!(with.starts_with("mfp2-"), "{with}");
        // Stored under version 1, it carried the fingerprint of the matrix without faults.
        let stored_before = Some(of(MATRIX));
        assert_eq!(of_stored_run(stored_before, &faulty), Some(with.clone()));
        assert_eq!(of_stored_run(Some(with.clone()), &faulty), Some(with));
        assert_eq!(
            of_stored_run(Some("mfp1-old".into()), "not: [a matrix"),
            Some("mfp1-old".into()),
            "a text that no longer parses keeps what was stored"
        );
    }
}
