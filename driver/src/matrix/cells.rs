//! The cells of a client × server matrix (a client template's groups against one server group)
//! and `run.cells: in_turn`, which runs each cell as a run of its own, one after another: on a
//! small machine the cells running at once measure each other's CPU, not their client.

use super::{CellSchedule, Matrix};
use std::collections::BTreeSet;

/// One cell: a client template against a server group, and the client groups that make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellOf {
    pub client: String,
    pub server: String,
    pub groups: Vec<String>,
}

impl Matrix {
    /// The cells that have client groups, client template by client template, each over the
    /// server groups in the matrix's order.
    pub fn cells(&self) -> Vec<CellOf> {
        let mut cells = Vec::new();
        for client in self.client_templates.keys() {
            for server in self.server_groups.keys() {
                let groups: Vec<String> = self
                    .client_groups
                    .iter()
                    .filter(|(_, g)| g.template == *client && g.target == *server)
                    .map(|(name, _)| name.clone())
                    .collect();
                if !groups.is_empty() {
                    cells.push(CellOf {
                        client: client.clone(),
                        server: server.clone(),
                        groups,
                    });
                }
            }
        }
        cells
    }

    /// Whether the run is made of its cells' runs: `in_turn` with two cells or more.
    pub fn runs_cells_in_turn(&self) -> bool {
        self.run.cells == CellSchedule::InTurn && self.cells().len() > 1
    }

    /// `cell`'s run of its own: its client groups and server group and the templates they use,
    /// the faults that hit them and the SLO rules of its groups (the run's own rules stay). Its
    /// fingerprint depends on the cell alone, so each cell has a history of its own.
    pub fn cell_run(&self, cell: &CellOf) -> Matrix {
        let mut m = self.clone();
        m.client_groups.retain(|name, _| cell.groups.contains(name));
        m.server_groups.retain(|name, _| *name == cell.server);
        m.client_templates.retain(|name, _| *name == cell.client);
        let server_templates: BTreeSet<String> = m
            .server_groups
            .values()
            .filter_map(|g| g.template.clone())
            .collect();
        m.server_templates
            .retain(|name, _| server_templates.contains(name));
        // A fault stays where its target still names something of the cell's run.
        let faults = std::mem::take(&mut m.faults);
        m.faults = faults
            .into_iter()
            .filter(|f| m.fault_target_members(&f.target).is_ok())
            .collect();
        let client_groups = &m.client_groups;
        m.slo_rules.retain(|r| {
            r.group
                .as_ref()
                .is_none_or(|g| client_groups.contains_key(g))
        });
        m
    }
}

#[cfg(test)]
mod tests {
    const CROSS: &str = "
version: 1
run:
  name: cross
  duration: 5m
  cells: in_turn
  slo: [{ metric: qps, min: 1 }]
server_templates:
  new: { tritonserver: { binary: auto }, model_repositories: [/models] }
  old: { tritonserver: { binary: /opt/old/tritonserver }, model_repositories: [/models] }
server_groups:
  s-new: { template: new, instances: 1 }
  s-old: { template: old, instances: 2 }
client_templates:
  rust: { worker: { binary: auto }, protocol: grpc, scenarios: { Load: 1 } }
  python:
    worker: { binary: auto }
    protocol: grpc
    client: { command: [python3, c.py], interface: 1 }
client_groups:
  rust-new: { template: rust, instances: 1, target: s-new }
  rust-old:
    template: rust
    instances: 1
    target: s-old
    slo: [{ metric: p99, max: 1s }]
  python-old: { template: python, instances: 1, target: s-old }
faults:
  - { name: kill-new, target: s-new, at: 10s, kind: kill }
  - { name: kill-old-1, target: s-old-1, at: 10s, kind: kill }
";

    #[test]
    fn the_cells_are_the_templates_against_the_server_groups_they_target() {
        let m = crate::matrix::parse(CROSS, "cross.yaml").unwrap();
        let cells: Vec<(String, String, Vec<String>)> = m
            .cells()
            .into_iter()
            .map(|c| (c.client, c.server, c.groups))
            .collect();
        let cell = |c: &str, s: &str, g: &str| (c.to_string(), s.to_string(), vec![g.to_string()]);
        assert_eq!(
            cells,
            [
                cell("rust", "s-new", "rust-new"),
                cell("rust", "s-old", "rust-old"),
                cell("python", "s-old", "python-old"),
            ]
        );
        assert!(m.runs_cells_in_turn());
    }

    #[test]
    fn a_cell_s_run_has_only_its_groups_templates_faults_and_rules() {
        let m = crate::matrix::parse(CROSS, "cross.yaml").unwrap();
        let cells = m.cells();
        let old = m.cell_run(&cells[1]);
        let keys = |k: Vec<&String>| k.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(keys(old.client_groups.keys().collect()), ["rust-old"]);
        assert_eq!(keys(old.server_groups.keys().collect()), ["s-old"]);
        assert_eq!(keys(old.client_templates.keys().collect()), ["rust"]);
        assert_eq!(keys(old.server_templates.keys().collect()), ["old"]);
        let faults: Vec<&str> = old.faults.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(faults, ["kill-old-1"]);
        assert_eq!(old.slo_rules.len(), 2, "{:?}", old.slo_rules);
        let new = m.cell_run(&cells[0]);
        let faults: Vec<&str> = new.faults.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(faults, ["kill-new"]);
        // Only the run's own rule: rust-old's is not of this cell.
        assert_eq!(new.slo_rules.len(), 1, "{:?}", new.slo_rules);
        // A cell's history is its own: adding a cell to the matrix leaves it as it was.
        assert_ne!(
            crate::matrix::fingerprint(&new),
            crate::matrix::fingerprint(&old)
        );
        let mut more = m.clone();
        more.client_groups.shift_remove("python-old");
        assert_eq!(
            crate::matrix::fingerprint(&more.cell_run(&more.cells()[0])),
            crate::matrix::fingerprint(&new)
        );
    }

    #[test]
    fn one_cell_is_no_run_of_runs() {
        let one = CROSS.replace(
            "  rust-old:\n    template: rust\n    instances: 1\n    target: s-old\n    slo: [{ metric: p99, max: 1s }]\n  python-old: { template: python, instances: 1, target: s-old }\n",
            "",
        ).replace("  - { name: kill-old-1, target: s-old-1, at: 10s, kind: kill }\n", "");
        let m = crate::matrix::parse(&one, "one.yaml").unwrap();
        assert_eq!(m.cells().len(), 1);
        assert!(!m.runs_cells_in_turn());
    }
}
