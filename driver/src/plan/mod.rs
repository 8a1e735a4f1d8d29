//! A run's plan: every member, its group, its correlation-id block, its targets and (once the
//! servers' addresses are known) its worker's contract, computed once from the matrix as a
//! pure value. `run` launches and records it; nothing here does I/O.

mod assignment;
pub mod capacity;
pub mod fail_fast;
pub mod preflight;
pub mod spans;

pub use assignment::{ServerEndpoint, WorkerAssignment, worker_args, worker_contract};

use crate::matrix::faults::{self, Injection};
use crate::matrix::{
    CapacitySettings, ClientMember, ExternalServer, Matrix, RunMode, ServerMember,
};
use crate::plan::capacity::{ControllerConfig, split};
use fail_fast::Rules;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use stress_common::contract::{MemberName, RunId};
use stress_common::status::Role;
use stress_common::store::Member;

/// How long a worker outlives the run's duration on its own: the driver stops it itself; the
/// margin only ends a worker orphaned by a dead driver.
pub const ORPHAN_MARGIN: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct RunPlan {
    pub run_id: RunId,
    /// The matrix's run name.
    pub name: String,
    pub duration: Duration,
    pub poll: Duration,
    pub warmup: Duration,
    pub server_ready_timeout: Duration,
    pub keep_failed: bool,
    pub rules: Rules,
    /// The servers the launcher starts.
    pub servers: Vec<ServerMember>,
    /// The servers that already run (`endpoints`): health-checked and watched by the driver,
    /// never launched, stopped or removed.
    pub externals: Vec<ExternalServer>,
    pub clients: Vec<ClientMember>,
    /// Capacity mode's settings (None: a soak run).
    pub capacity: Option<CapacitySettings>,
    /// The SLO rules, run level first, then each client group's ([`Matrix::slo_rules`]).
    pub slo: Vec<crate::matrix::slo::Rule>,
    /// The faults to inject, by time from the load phase's start (`matrix::faults::schedule`).
    pub faults: Vec<Injection>,
    /// `<run name>-<member>` for every member: its process or pod name.
    qualified: BTreeMap<MemberName, String>,
}

impl RunPlan {
    /// The plan of `matrix` under `run_id`; `duration` overrides the matrix's.
    pub fn new(matrix: &Matrix, run_id: RunId, duration: Option<Duration>) -> Self {
        let externals = matrix.external_servers();
        let clients = matrix.clients();
        let servers = spans::export_spans(matrix.servers(), &clients);
        let qualified = servers
            .iter()
            .map(|s| &s.name)
            .chain(clients.iter().map(|c| &c.name))
            .map(|m| (m.clone(), matrix.qualified_name(m)))
            .collect();
        let ff = &matrix.run.fail_fast;
        let duration = duration.unwrap_or(matrix.run.duration);
        let faults = faults::schedule(
            &matrix.faults,
            |t| matrix.fault_target_members(t).ok(),
            duration,
            matrix
                .run
                .seed
                .unwrap_or_else(|| faults::default_seed(&matrix.run.name)),
        );
        RunPlan {
            run_id,
            name: matrix.run.name.clone(),
            duration,
            poll: matrix.run.poll_interval,
            warmup: matrix.run.warmup,
            server_ready_timeout: matrix.run.server_ready_timeout,
            keep_failed: matrix.run.keep_failed,
            rules: Rules::new(
                matrix.run.poll_interval,
                ff.heartbeat_timeout_polls,
                ff.zero_qps_polls,
            )
            .with_store_outage_limit(ff.store_outage_limit),
            servers,
            externals,
            clients,
            capacity: match matrix.run.mode {
                RunMode::Capacity => matrix.capacity.clone(),
                RunMode::Soak => None,
            },
            slo: matrix.slo_rules.clone(),
            faults,
            qualified,
        }
    }

    /// The faults written with `at` that do not fit this plan's load phase (a `--duration`
    /// shorter than the matrix's): their indexes in `faults:`.
    pub fn unplanned_faults(&self, matrix: &Matrix) -> Vec<usize> {
        matrix
            .faults
            .iter()
            .enumerate()
            .filter(|(i, f)| f.at.is_some() && !self.faults.iter().any(|p| p.fault_index == *i))
            .map(|(i, _)| i)
            .collect()
    }

    /// The clients that talk to server `member` (every client of its group's clients), or,
    /// for the status store ([`STORE_TARGET`](crate::matrix::faults::STORE_TARGET)), every
    /// client.
    pub fn clients_of(&self, member: &str) -> Vec<String> {
        let store = member == crate::matrix::faults::STORE_TARGET;
        self.clients
            .iter()
            .filter(|c| store || c.targets.iter().any(|t| t.as_str() == member))
            .map(|c| c.name.to_string())
            .collect()
    }

    /// The client groups, each with its members in index order.
    pub fn client_groups(&self) -> BTreeMap<String, Vec<MemberName>> {
        let mut groups: BTreeMap<String, Vec<MemberName>> = BTreeMap::new();
        for c in &self.clients {
            groups
                .entry(c.group.clone())
                .or_default()
                .push(c.name.clone());
        }
        groups
    }

    /// Capacity mode: the controller's numbers for each client group.
    pub fn capacity_configs(&self) -> BTreeMap<String, ControllerConfig> {
        let Some(cap) = &self.capacity else {
            return BTreeMap::new();
        };
        self.client_groups()
            .into_iter()
            .map(|(g, members)| (g, ControllerConfig::new(cap, members.len() as u32)))
            .collect()
    }

    /// Capacity mode: a client's share of its group's starting concurrency.
    fn capacity_start(&self, c: &ClientMember) -> Option<u32> {
        let settings = self.capacity.as_ref()?;
        let members: Vec<&MemberName> = self
            .clients
            .iter()
            .filter(|m| m.group == c.group)
            .map(|m| &m.name)
            .collect();
        let min = ControllerConfig::new(settings, members.len() as u32).min;
        let i = members.iter().position(|m| **m == c.name)?;
        Some(split(min, members.len())[i])
    }

    /// Every server, launched ones first, then the external ones.
    pub fn server_names(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| &s.name)
            .chain(self.externals.iter().map(|e| &e.name))
            .map(ToString::to_string)
            .collect()
    }

    /// The external server of that name, if it is one.
    pub fn external(&self, member: &str) -> Option<&ExternalServer> {
        self.externals.iter().find(|e| e.name == member)
    }

    /// Where the clients reach each external server (an address it lacks is empty).
    pub fn external_endpoints(&self) -> BTreeMap<String, ServerEndpoint> {
        self.externals
            .iter()
            .map(|e| {
                let port = |p: &Option<String>| p.clone().unwrap_or_default();
                let ep = ServerEndpoint {
                    member: e.name.to_string(),
                    grpc: port(&e.ports.grpc),
                    http: port(&e.ports.http),
                    metrics: port(&e.ports.metrics),
                };
                (e.name.to_string(), ep)
            })
            .collect()
    }

    pub fn client_names(&self) -> BTreeSet<String> {
        self.clients.iter().map(|c| c.name.to_string()).collect()
    }

    /// The servers a client talks to (empty for a server or an unknown member).
    pub fn targets_of(&self, member: &str) -> &[MemberName] {
        self.clients
            .iter()
            .find(|c| c.name == member)
            .map_or(&[], |c| c.targets.as_slice())
    }

    /// Every member as the store records it before launch (no address or command yet).
    pub fn members(&self) -> Vec<Member> {
        let servers = self.servers.iter().map(|s| self.server_record(s));
        let externals = self.externals.iter().map(|e| self.external_record(e));
        let clients = self.clients.iter().map(|c| self.client_record(c));
        servers.chain(externals).chain(clients).collect()
    }

    /// An external server as the store records it: its addresses, and no process or command
    /// (an empty `process_name` is how the report tells it was not launched).
    pub fn external_record(&self, e: &ExternalServer) -> Member {
        Member {
            run_id: self.run_id.to_string(),
            member_id: e.name.to_string(),
            role: Role::Server,
            group_name: e.group.clone(),
            index: e.index,
            address: e.address(),
            process_name: String::new(),
            corr_id_base: None,
            corr_id_block_size: None,
            command: String::new(),
        }
    }

    pub fn server_record(&self, s: &ServerMember) -> Member {
        Member {
            run_id: self.run_id.to_string(),
            member_id: s.name.to_string(),
            role: Role::Server,
            group_name: s.group.clone(),
            index: s.index,
            address: String::new(),
            process_name: self.qualified[&s.name].clone(),
            corr_id_base: None,
            corr_id_block_size: None,
            command: String::new(),
        }
    }

    pub fn client_record(&self, c: &ClientMember) -> Member {
        Member {
            run_id: self.run_id.to_string(),
            member_id: c.name.to_string(),
            role: Role::Client,
            group_name: c.group.clone(),
            index: c.index,
            address: String::new(),
            process_name: self.qualified[&c.name].clone(),
            corr_id_base: Some(c.corr_ids.base),
            corr_id_block_size: Some(c.corr_ids.size),
            command: String::new(),
        }
    }

    /// What a client's worker is told once its servers are up: every ready server of its
    /// target group, at the port of its protocol.
    pub fn assignment(
        &self,
        c: &ClientMember,
        endpoints: &BTreeMap<String, ServerEndpoint>,
        store_url: &str,
        perf_analyzer: Option<&str>,
    ) -> WorkerAssignment {
        WorkerAssignment {
            run_id: self.run_id.clone(),
            member_id: c.name.clone(),
            servers: c
                .targets
                .iter()
                .filter_map(|t| endpoints.get(t.as_str()))
                .map(|ep| ep.for_protocol(c.template.protocol).to_string())
                .collect(),
            store_url: store_url.into(),
            poll_interval: self.poll,
            duration: self.duration + ORPHAN_MARGIN,
            perf_analyzer: perf_analyzer.map(str::to_string),
            capacity_start: self.capacity_start(c),
        }
    }

    /// What a failed run keeps for inspection: the failed members and, for a failed client, the
    /// servers it talked to. External servers are not the launcher's to keep or remove.
    pub fn kept_for_inspection(&self, failed: &BTreeSet<String>) -> BTreeSet<String> {
        let mut keep = failed.clone();
        for c in self
            .clients
            .iter()
            .filter(|c| failed.contains(c.name.as_str()))
        {
            keep.extend(c.targets.iter().map(MemberName::to_string));
        }
        keep.retain(|m| self.external(m).is_none());
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{self, Protocol};
    use stress_common::contract::CorrIdBlock;

    const MATRIX: &str = r#"
version: 1
run:
  name: plan
  duration: 30s
  poll_interval: 500ms
  fail_fast: {heartbeat_timeout_polls: 4, zero_qps_polls: 0}
server_templates:
  triton: {tritonserver: {binary: auto}, model_repositories: [models]}
client_templates:
  grpc: {worker: {binary: auto}, protocol: grpc, concurrency: 2, scenarios: {SequenceValid: 3}, load: {rate: 50}}
  http:
    worker: {binary: auto}
    protocol: http
    concurrency: 1
    tolerance: 0.001
    consistency: true
    models:
      - {name: add_sub, weight: 3}
      - {name: dyn, version: 2, shape: {IN: [4, 2]}, input_data: zero, batch_size: 2}
server_groups:
  a: {template: triton, instances: 2}
  b: {template: triton, instances: 1}
client_groups:
  g: {template: grpc, target: a, instances: 2, corr_id_block_size: 100}
  h: {template: http, target: b, instances: 1, corr_id_block_size: 1000}
"#;

    fn plan() -> RunPlan {
        let m = matrix::parse(MATRIX, "plan.yaml").unwrap();
        RunPlan::new(&m, RunId::new("plan-1"), None)
    }

    fn endpoint(member: &str, port: u16) -> (String, ServerEndpoint) {
        (
            member.into(),
            ServerEndpoint {
                member: member.into(),
                grpc: format!("127.0.0.1:{port}"),
                http: format!("127.0.0.1:{}", port + 1),
                metrics: format!("127.0.0.1:{}", port + 2),
            },
        )
    }

    #[test]
    fn the_slo_rules_are_the_matrixs_as_read_run_level_first() {
        let with_rules = MATRIX
            .replace(
                "client_groups:\n  g: {",
                "client_groups:\n  g: {slo: [{metric: qps, min: 3}], ",
            )
            .replacen("server_templates:", "run_slo_here\nserver_templates:", 1)
            .replace(
                "run_slo_here",
                "  slo: [{metric: p99, scenario: SequenceValid, max: 50ms}]",
            );
        let m = matrix::parse(&with_rules, "plan.yaml").unwrap_or_else(|e| panic!("{e}"));
        let p = RunPlan::new(&m, RunId::new("plan-1"), None);
        let read: Vec<(Option<&str>, Option<f64>, Option<f64>)> = p
            .slo
            .iter()
            .map(|r| (r.group.as_deref(), r.min, r.max))
            .collect();
        assert_eq!(
            read,
            [(None, None, Some(50.0)), (Some("g"), Some(3.0), None)]
        );
        assert_eq!(p.slo, m.slo_rules);
    }

    #[test]
    fn capacity_mode_splits_each_groups_floor_across_its_workers() {
        let mut m = matrix::parse(MATRIX, "plan.yaml").unwrap();
        let endpoints: BTreeMap<_, _> = [endpoint("a-0", 9000), endpoint("b-0", 9100)].into();
        let soak = RunPlan::new(&m, RunId::new("plan-1"), None);
        let a = soak.assignment(&soak.clients[0], &endpoints, "sqlite:///x", None);
        assert_eq!(a.capacity_start, None, "a soak run");
        m.run.mode = crate::matrix::RunMode::Capacity;
        m.capacity =
            Some(serde_saphyr::from_str("{target_p99: 50ms, min_concurrency: 5}").unwrap());
        let p = RunPlan::new(&m, RunId::new("plan-1"), None);
        let starts: Vec<Option<u32>> = p
            .clients
            .iter()
            .map(|c| {
                p.assignment(c, &endpoints, "sqlite:///x", None)
                    .capacity_start
            })
            .collect();
        assert_eq!(
            starts,
            [Some(3), Some(2), Some(5)],
            "g: 5 over 2 workers; h: 5 on 1"
        );
        let g0 = p.assignment(&p.clients[0], &endpoints, "sqlite:///x", None);
        let args = worker_contract(&p.clients[0], &g0);
        assert!(args.adaptive_load);
        assert_eq!(
            args.concurrency, 1,
            "one stream, its load concurrency follows the store"
        );
        assert_eq!(
            args.load(),
            Some(stress_common::contract::LoadMode::Concurrency(3))
        );
    }

    #[test]
    fn members_ids_and_targets() {
        let p = plan();
        assert_eq!(p.server_names(), ["a-0", "a-1", "b-0"]);
        let names: Vec<_> = p.members().into_iter().map(|m| m.member_id).collect();
        assert_eq!(names, ["a-0", "a-1", "b-0", "g-0", "g-1", "h-0"]);
        let blocks: Vec<CorrIdBlock> = p.clients.iter().map(|c| c.corr_ids).collect();
        assert_eq!(
            blocks,
            [
                CorrIdBlock { base: 1, size: 100 },
                CorrIdBlock {
                    base: 101,
                    size: 100
                },
                CorrIdBlock {
                    base: 201,
                    size: 1000
                }
            ]
        );
        assert_eq!(p.targets_of("g-1"), ["a-0", "a-1"]);
        assert_eq!(p.targets_of("h-0"), ["b-0"]);
        assert!(p.targets_of("a-0").is_empty());
        assert_eq!(p.members()[3].process_name, "plan-g-0");
        assert_eq!(p.rules, Rules::new(Duration::from_millis(500), 4, 0));
        assert_eq!(p.duration, Duration::from_secs(30));
    }

    #[test]
    fn the_store_outage_limit_comes_from_the_matrix_and_covers_the_heartbeat_limit() {
        let rules = Rules::new(Duration::from_secs(1), 3, 3);
        assert_eq!(rules.store_outage_limit, Duration::from_secs(60));
        let longer = rules.with_store_outage_limit(Duration::from_secs(300));
        assert_eq!(longer.store_outage_limit, Duration::from_secs(300));
        let slow = Rules::new(Duration::from_secs(10), 3, 3)
            .with_store_outage_limit(Duration::from_secs(10));
        assert_eq!(slow.store_outage_limit, Duration::from_secs(30));
    }

    #[test]
    fn assignments_follow_protocol_and_readiness() {
        let p = plan();
        let endpoints: BTreeMap<_, _> = [endpoint("a-0", 9000), endpoint("b-0", 9100)].into();
        let g1 = p.assignment(&p.clients[1], &endpoints, "sqlite:///x", Some("/pa"));
        // a-1 never became ready: only a-0, at its gRPC port.
        assert_eq!(g1.servers, ["127.0.0.1:9000"]);
        assert_eq!(g1.duration, Duration::from_secs(90));
        let h0 = p.assignment(&p.clients[2], &endpoints, "sqlite:///x", None);
        assert_eq!(h0.servers, ["127.0.0.1:9101"]);

        let args = worker_contract(&p.clients[1], &g1);
        assert_eq!(args.protocol, Protocol::Grpc);
        assert_eq!(
            args.corr_ids,
            CorrIdBlock {
                base: 101,
                size: 100
            }
        );
        assert_eq!(args.load_rate, Some(50.0));
        assert_eq!(args.scenarios.unwrap().to_string(), "SequenceValid:3");
        assert_eq!(args.member_id.unwrap().as_str(), "g-1");
        assert_eq!(args.poll_interval, Duration::from_millis(500));
        let http = worker_contract(&p.clients[2], &h0);
        assert!(http.scenarios.is_none(), "omitted: the worker's defaults");
        assert_eq!(http.load(), None);
        let models: Vec<String> = http.models.iter().map(|m| m.to_string()).collect();
        assert_eq!(models, ["add_sub:3", "dyn@2:1"]);
        let shapes: Vec<String> = http.shapes.iter().map(|s| s.to_string()).collect();
        assert_eq!(shapes, ["dyn/IN:4,2"]);
        let data: Vec<String> = http.input_data.iter().map(|d| d.to_string()).collect();
        assert_eq!(data, ["dyn=zero"]);
        let batches: Vec<String> = http.batch_sizes.iter().map(|b| b.to_string()).collect();
        assert_eq!(batches, ["dyn=2"]);
        assert_eq!((http.tolerance.get(), http.consistency), (0.001, true));
        let grpc = worker_contract(&p.clients[0], &g1);
        assert!(grpc.models.is_empty() && grpc.shapes.is_empty() && grpc.input_data.is_empty());
        assert!(grpc.batch_sizes.is_empty());
        assert_eq!((grpc.tolerance.get(), grpc.consistency), (0.0, false));
    }

    #[test]
    fn external_servers_are_members_with_addresses_and_targets() {
        let m = matrix::parse(
            &MATRIX.replace(
                "  b: {template: triton, instances: 1}",
                "  b:\n    endpoints: [{grpc: \"10.0.0.9:8001\", http: \"10.0.0.9:8000\"}]",
            ),
            "plan.yaml",
        )
        .unwrap();
        let p = RunPlan::new(&m, RunId::new("plan-1"), None);
        assert_eq!(p.server_names(), ["a-0", "a-1", "b-0"]);
        assert_eq!(p.servers.len(), 2, "only a's are launched");
        let b0 = &p.members()[2];
        assert_eq!(
            (b0.member_id.as_str(), b0.role, b0.address.as_str()),
            ("b-0", Role::Server, "grpc=10.0.0.9:8001 http=10.0.0.9:8000")
        );
        assert!(b0.process_name.is_empty() && b0.command.is_empty());
        // The HTTP client h reaches b-0 at its HTTP port.
        let endpoints = p.external_endpoints();
        assert_eq!(endpoints["b-0"].metrics, "", "no metrics port given");
        let h0 = p.assignment(&p.clients[2], &endpoints, "sqlite:///x", None);
        assert_eq!(h0.servers, ["10.0.0.9:8000"]);
        // A failed client keeps its launched servers only.
        let keep = p.kept_for_inspection(&BTreeSet::from(["h-0".to_string()]));
        assert_eq!(keep, BTreeSet::from(["h-0".into()]));
    }

    #[test]
    fn a_failed_client_keeps_its_servers() {
        let p = plan();
        let keep = p.kept_for_inspection(&BTreeSet::from(["g-0".to_string()]));
        assert_eq!(
            keep,
            BTreeSet::from(["g-0".into(), "a-0".into(), "a-1".into()])
        );
        let keep = p.kept_for_inspection(&BTreeSet::from(["b-0".to_string()]));
        assert_eq!(keep, BTreeSet::from(["b-0".into()]));
    }
}
