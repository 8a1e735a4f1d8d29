//! The client × server grid of a heterogeneous matrix: a row per client template (a client
//! implementation: the Rust worker over a protocol, a foreign client at its version), a column
//! per server group (a server build), and in each cell what the client groups of that template
//! against that server group did: verdict, QPS, p99, new failure signatures and the foreign
//! client programs that ran (their hellos). Pure: built from the run's matrix and
//! [`CellFacts`].

use crate::judge::verdicts::{JudgedSignature, Status};
use crate::matrix::Matrix;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use stress_common::report::L0Table;

/// The grid; present when the matrix crosses two or more client templates with two or more
/// server groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    /// Row names (client templates), in the matrix's order.
    pub clients: Vec<String>,
    /// Column names (server groups), in the matrix's order.
    pub servers: Vec<String>,
    /// The cells that have client groups, row by row.
    pub cells: Vec<Cell>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub client: String,
    pub server: String,
    /// The client groups of the cell.
    pub groups: Vec<String>,
    /// FAIL when a test failed or a signature fails the run; PASS else; NO TESTS without any.
    pub verdict: String,
    pub qps: f64,
    /// p99 latency (µs) from the cell's merged histograms; None without answers.
    pub p99_us: Option<u64>,
    pub tests: u64,
    pub failures: u64,
    /// Signatures first seen in this run, of the cell's members.
    pub new_signatures: Vec<String>,
    /// The client programs that ran in it, as their hellos said (`tritonclient-python-grpc
    /// 2.44.0`): foreign clients only, each once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<String>,
}

/// What a grid's cells are made of: the run's per-group tables, its judged signatures, its
/// foreign members' hellos and its load time.
pub struct CellFacts<'a> {
    pub groups: &'a BTreeMap<String, L0Table>,
    pub signatures: &'a [JudgedSignature],
    pub programs: &'a BTreeMap<String, stress_common::foreign::Hello>,
    pub load_seconds: f64,
}

/// The grid of `matrix` from its per-group tables; None when it is no cross (and not a cell
/// run in turn: each of those has the grid of its one cell).
pub fn grid(matrix: &Matrix, facts: &CellFacts) -> Option<Grid> {
    let clients: Vec<String> = matrix.client_templates.keys().cloned().collect();
    let servers: Vec<String> = matrix.server_groups.keys().cloned().collect();
    let crossed = clients.len() >= 2 && servers.len() >= 2;
    if !crossed && matrix.run.cells.is_together() {
        return None;
    }
    let cells = matrix
        .cells()
        .into_iter()
        .map(|c| cell(&c.client, &c.server, c.groups, facts))
        .collect();
    Some(Grid {
        clients,
        servers,
        cells,
    })
}

fn cell(client: &str, server: &str, in_cell: Vec<String>, facts: &CellFacts) -> Cell {
    let mut total = stress_common::report::ScenarioRow::default();
    let mut blocking = 0;
    for table in in_cell.iter().filter_map(|g| facts.groups.get(g)) {
        let t = table.total();
        total.tests += t.tests;
        total.requests += t.requests;
        total.failures += t.failures;
        total.latency.merge(&t.latency);
        blocking += table.blocking_failures();
    }
    let of_cell = |s: &&JudgedSignature| {
        s.members
            .iter()
            .any(|m| in_cell.iter().any(|g| member_of(m, g)))
    };
    let mine: Vec<&JudgedSignature> = facts.signatures.iter().filter(of_cell).collect();
    let programs: BTreeSet<String> = facts
        .programs
        .iter()
        .filter(|(m, _)| in_cell.iter().any(|g| member_of(m, g)))
        .map(|(_, hello)| hello.label())
        .collect();
    let fails = mine.iter().any(|s| s.fails.is_some());
    let verdict = match (total.tests + total.requests, blocking > 0 || fails) {
        (_, true) => "FAIL",
        (0, false) => "NO TESTS",
        (_, false) => "PASS",
    };
    Cell {
        client: client.into(),
        server: server.into(),
        groups: in_cell.clone(),
        verdict: verdict.into(),
        qps: total.requests as f64 / facts.load_seconds.max(1e-9),
        p99_us: (total.latency.count() > 0).then(|| total.latency.percentile_us(99.0)),
        tests: total.tests,
        failures: total.failures,
        new_signatures: mine
            .iter()
            .filter(|s| s.status == Status::New)
            .map(|s| s.signature.clone())
            .collect(),
        programs: programs.into_iter().collect(),
    }
}

/// Whether member `m` (`<group>-<index>`) is of client group `group`.
fn member_of(m: &str, group: &str) -> bool {
    m.strip_prefix(group)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|index| index.parse::<u32>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stress_common::histogram::LatencyHistogram;
    use stress_common::status::ScenarioCounts;

    const MATRIX: &str = "
version: 1
run: { name: cross, duration: 1m }
server_templates:
  a: { tritonserver: { binary: auto }, model_repositories: [/models] }
server_groups:
  new: { template: a, instances: 1 }
  old: { template: a, instances: 1 }
client_templates:
  rust: { worker: { binary: auto }, protocol: grpc, scenarios: { Load: 1 } }
  python:
    worker: { binary: auto }
    protocol: grpc
    client: { command: [python3, c.py], interface: 1 }
client_groups:
  rust-new: { template: rust, instances: 1, target: new }
  rust-old: { template: rust, instances: 1, target: old }
  python-new: { template: python, instances: 1, target: new }
";

    fn table(tests: u64, failures: u64, latencies_ms: &[u64]) -> L0Table {
        let mut latency = LatencyHistogram::default();
        for ms in latencies_ms {
            latency.record(std::time::Duration::from_millis(*ms));
        }
        let mut t = L0Table::new();
        t.add(&ScenarioCounts {
            scenario: "Mine".into(),
            tests,
            failures,
            requests: tests,
            latency_histogram: latency.encode(),
            ..Default::default()
        })
        .unwrap();
        t
    }

    #[test]
    fn each_cell_is_its_groups_and_a_failed_test_fails_only_its_cell() {
        let m = crate::matrix::parse(MATRIX, "m.yaml").unwrap();
        let groups: BTreeMap<String, L0Table> = [
            ("rust-new".to_string(), table(10, 0, &[1, 2, 3])),
            ("rust-old".to_string(), table(20, 0, &[])),
            ("python-new".to_string(), table(5, 1, &[4])),
        ]
        .into();
        let hello = |version: &str| stress_common::foreign::Hello {
            interface: 1,
            client: "tritonclient-python-grpc".into(),
            version: version.into(),
        };
        // Two members of python-new said the same; one of another group says nothing here.
        let programs = [
            ("python-new-0".to_string(), hello("2.44.0")),
            ("python-new-1".to_string(), hello("2.44.0")),
            ("python-newer-0".to_string(), hello("2.51.0")),
        ]
        .into();
        let facts = CellFacts {
            groups: &groups,
            signatures: &[],
            programs: &programs,
            load_seconds: 10.0,
        };
        let g = grid(&m, &facts).unwrap();
        assert_eq!(
            (g.clients, g.servers),
            (
                vec!["rust".into(), "python".into()],
                vec!["new".into(), "old".into()]
            )
        );
        let cell = |c: &str, s: &str| g.cells.iter().find(|x| x.client == c && x.server == s);
        let rust_new = cell("rust", "new").unwrap();
        assert_eq!((rust_new.verdict.as_str(), rust_new.qps), ("PASS", 1.0));
        assert!(rust_new.p99_us.unwrap() >= 3000, "{rust_new:?}");
        assert_eq!(cell("rust", "old").unwrap().p99_us, None);
        let python_new = cell("python", "new").unwrap();
        assert_eq!(
            (python_new.verdict.as_str(), python_new.failures),
            ("FAIL", 1)
        );
        assert_eq!(python_new.groups, ["python-new"]);
        assert_eq!(python_new.programs, ["tritonclient-python-grpc 2.44.0"]);
        assert!(rust_new.programs.is_empty(), "{rust_new:?}");
        assert!(cell("python", "old").is_none(), "no group there");
    }

    #[test]
    fn a_matrix_that_crosses_nothing_has_no_grid_and_members_are_told_by_group() {
        let one_server = MATRIX
            .replace("  old: { template: a, instances: 1 }\n", "")
            .replace(
                "  rust-old: { template: rust, instances: 1, target: old }\n",
                "",
            );
        let m = crate::matrix::parse(&one_server, "m.yaml").unwrap();
        let facts = CellFacts {
            groups: &BTreeMap::new(),
            signatures: &[],
            programs: &BTreeMap::new(),
            load_seconds: 1.0,
        };
        assert!(grid(&m, &facts).is_none());
        assert!(member_of("rust-new-0", "rust-new"));
        assert!(
            !member_of("rust-new-0", "rust"),
            "rust-new-0 is not of group rust"
        );
        assert!(!member_of("rust-newer-0", "rust-new"));
    }
}
