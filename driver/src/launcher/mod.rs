//! The launcher interface: how the driver starts, watches and stops a run's members. The local
//! launcher runs them as processes on this machine; the Kubernetes launcher runs them as pods.

pub mod diagnostics;
pub mod kube;
pub mod local;
pub mod logs;

pub use diagnostics::MemberDiagnostics;

use crate::matrix::{ClientMember, ModelSpec, Protocol, ServerMember};
use std::collections::BTreeSet;
use std::time::Duration;
pub use stress_common::contract::STORE_URL_ENV;
use stress_common::contract::{
    BatchSizeArg, DataSource, InputDataArg, LoadMode, MemberName, ModelSelection, RunId,
    ScenarioMix, ShapeOverride, WorkerArgs,
};

/// Where clients reach a started server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEndpoint {
    pub member: String,
    pub grpc: String,
    pub http: String,
    pub metrics: String,
}

impl ServerEndpoint {
    pub fn for_protocol(&self, protocol: Protocol) -> &str {
        match protocol {
            Protocol::Grpc => &self.grpc,
            Protocol::Http => &self.http,
        }
    }
}

/// What a worker is told: everything beyond its template.
#[derive(Debug, Clone)]
pub struct WorkerAssignment {
    pub run_id: RunId,
    pub member_id: MemberName,
    /// Addresses of its target servers for its protocol.
    pub servers: Vec<String>,
    pub store_url: String,
    pub poll_interval: Duration,
    /// The worker stops by itself after this long (the run's duration plus a margin), so a
    /// worker orphaned by a dead driver does not run forever.
    pub duration: Duration,
    pub perf_analyzer: Option<String>,
    /// Capacity mode: the worker runs one stream at this closed-loop concurrency and follows
    /// the controller's targets in the store (`--adaptive-load`).
    pub capacity_start: Option<u32>,
}

/// A member that ended, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberExit {
    pub member_id: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The launcher's own words when it knows more than a status (e.g. the kubelet's
    /// `OOMKilled`, `ErrImageNeverPull`).
    pub reason: Option<String>,
}

impl MemberExit {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Neither an exit code nor a signal is known (e.g. a pod deleted before its container's
    /// status was reported).
    pub fn status_unknown(&self) -> bool {
        self.code.is_none() && self.signal.is_none()
    }

    pub fn describe(&self) -> String {
        if let Some(reason) = &self.reason {
            return reason.clone();
        }
        match (self.code, self.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("killed by signal {s} ({})", signal_name(s)),
            (None, None) => "ended (status unknown)".into(),
        }
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => "signal",
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{member}: {reason}")]
    Member { member: String, reason: String },
    #[error("{0}")]
    Setup(String),
}

/// The contract a client's worker runs under: its template and its assignment.
pub fn worker_contract(client: &ClientMember, a: &WorkerAssignment) -> WorkerArgs {
    let t = &client.template;
    let mut args = WorkerArgs {
        servers: a.servers.clone(),
        protocol: t.protocol,
        scenarios: t
            .scenarios
            .as_ref()
            .map(|_| ScenarioMix(t.scenario_weights())),
        concurrency: t.concurrency,
        duration: a.duration,
        corr_ids: client.corr_ids,
        load_concurrency: None,
        load_rate: None,
        load_arrivals: None,
        request_intervals: None,
        adaptive_load: false,
        poll_interval: a.poll_interval,
        run_id: Some(a.run_id.clone()),
        member_id: Some(a.member_id.clone()),
        perf_analyzer: a.perf_analyzer.as_ref().map(Into::into),
        models: t.models.iter().map(model_selection).collect(),
        shapes: t
            .models
            .iter()
            .flat_map(|m| {
                m.shape.iter().map(|(input, dims)| ShapeOverride {
                    model: Some(m.name.clone()),
                    input: input.clone(),
                    dims: dims.clone(),
                })
            })
            .collect(),
        input_data: t
            .models
            .iter()
            .filter_map(|m| {
                let source = match m.input_data.as_deref()? {
                    "zero" => DataSource::Zero,
                    "random" => DataSource::Random,
                    file => DataSource::File(file.into()),
                };
                Some(InputDataArg {
                    model: Some(m.name.clone()),
                    source,
                })
            })
            .collect(),
        batch_sizes: t
            .models
            .iter()
            .filter_map(|m| {
                Some(BatchSizeArg {
                    model: Some(m.name.clone()),
                    size: m.batch_size?,
                })
            })
            .collect(),
    };
    args.set_load(t.load.clone());
    if let Some(start) = a.capacity_start {
        args.concurrency = 1;
        args.set_load(Some(LoadMode::Concurrency(start)));
        args.adaptive_load = true;
    }
    args
}

/// A matrix model as the worker's `--model` names it.
pub fn model_selection(m: &ModelSpec) -> ModelSelection {
    ModelSelection {
        name: m.name.clone(),
        version: m.version.map(|v| v.to_string()).unwrap_or_default(),
        weight: m.weight,
    }
}

/// Worker command-line arguments for a client: the contract, then the template's extra
/// arguments (the store URL travels separately, in [`STORE_URL_ENV`], so it never shows in a
/// process list or a pod spec).
pub fn worker_args(client: &ClientMember, a: &WorkerAssignment) -> Vec<String> {
    let mut args = worker_contract(client, a).to_args();
    args.extend(client.template.extra_args.iter().cloned());
    args
}

#[async_trait::async_trait]
pub trait Launcher: Send {
    fn name(&self) -> &'static str;

    /// Starts a server; does not wait for it to be ready.
    async fn start_server(&mut self, server: &ServerMember) -> Result<(), LaunchError>;

    /// Waits until every started server is ready and says where clients reach each (a pod's
    /// address is known only once it runs); the error names the first that is not, and why.
    async fn wait_servers_ready(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ServerEndpoint>, LaunchError>;

    async fn start_client(
        &mut self,
        client: &ClientMember,
        assignment: &WorkerAssignment,
    ) -> Result<(), LaunchError>;

    /// Members that ended since the last call.
    async fn exited(&mut self) -> Vec<MemberExit>;

    /// Returns when a member may have ended, so the poll loop looks at once instead of at its
    /// next tick (fail-fast within a fraction of the poll interval). May return spuriously;
    /// by default never (the tick alone).
    async fn member_may_have_ended(&mut self) {
        std::future::pending::<()>().await
    }

    /// The run was judged failed just now. A launcher whose members' ends are reported late
    /// (a pod's, by the kubelet) counts the time it allows them for the report from here, so
    /// that time overlaps the workers' final reports instead of following them.
    fn failure_judged(&mut self) {}

    /// Asks every client to stop (SIGTERM) and waits up to `grace` for each; then kills.
    async fn stop_clients(&mut self, grace: Duration) -> Vec<MemberExit>;

    /// Stops every member still running: the failure path. Clients get SIGTERM and up to
    /// `grace` to flush their records, then SIGKILL; servers (their metrics already read) may
    /// be ended at once rather than unload every model.
    async fn stop_all(&mut self, grace: Duration);

    /// Stops the servers after the clients are done: the success path.
    async fn stop_servers(&mut self, grace: Duration);

    /// The last step, after diagnostics and the report: removes what the run left behind except
    /// the `keep` members (failed ones and the servers they talked to, kept for inspection).
    /// Processes leave nothing but their logs, which stay.
    async fn cleanup(&mut self, _keep: &BTreeSet<String>) {}

    /// What the report shows of a member: exit, log tail, reproduce command, where it ran (and
    /// for a pod its status, events and kubectl commands). Server metrics are not read here.
    async fn diagnostics(&mut self, member_id: &str) -> MemberDiagnostics;

    /// Whether a server answers `/v2/health/live` within `timeout`; the error says how it did not.
    async fn server_live(&mut self, member_id: &str, timeout: Duration) -> Result<(), String>;

    /// Triton's own /metrics text of a server, while it runs.
    async fn server_metrics(&mut self, member_id: &str) -> Option<String>;

    /// The shell line that starts the member again by hand.
    fn command_line(&self, member_id: &str) -> Option<String>;

    /// Where a started member runs, for people and tests: `pid 1234`, or a pod's name.
    fn locate(&self, member_id: &str) -> Option<String>;

    /// The CPU time a running member's process has used so far (None: not known here, e.g.
    /// a pod): tells a hung worker from a busy one.
    fn cpu_time(&self, _member_id: &str) -> Option<Duration> {
        None
    }

    /// A local server's process id (its memory is read from /proc); None elsewhere.
    fn server_pid(&self, _member_id: &str) -> Option<u32> {
        None
    }

    /// A server's log lines timed within `[from_ms, to_ms]` (at most
    /// [`logs::MAX_EXCERPT_LINES`]; none when its log cannot be read).
    async fn server_log_between(
        &mut self,
        _member_id: &str,
        _from_ms: i64,
        _to_ms: i64,
    ) -> Vec<String> {
        Vec::new()
    }

    /// Whether a started member's process runs yet (a pod may still wait for a node or its
    /// image); a process does from its start.
    fn is_running(&self, _member_id: &str) -> bool {
        true
    }
}
