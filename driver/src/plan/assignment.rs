//! What the plan assigns once the servers run: where clients reach each server
//! ([`ServerEndpoint`]), what each worker is told beyond its template ([`WorkerAssignment`]),
//! and the contract the two make, rendered as the worker's arguments ([`worker_contract`],
//! [`worker_args`]), in one place for every launcher.

use std::time::Duration;
use stress_common::contract::{
    BatchSizeArg, DataSource, InputDataArg, LoadMode, MemberName, ModelSelection, RunId,
    ScenarioMix, ShapeOverride, WorkerArgs,
};

use crate::matrix::{ClientMember, ModelSpec, Protocol};

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

    /// Its addresses as clients reach them (`host:port`; an external server may lack one).
    pub fn addresses(&self) -> Vec<String> {
        [&self.grpc, &self.http]
            .into_iter()
            .filter(|a| !a.is_empty())
            .cloned()
            .collect()
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
        driver_judges: true,
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
        client_command: t.client.as_ref().map(|c| c.command.clone()),
        client_env: t
            .client
            .iter()
            .flat_map(|c| &c.env)
            .map(|(name, value)| stress_common::contract::EnvVar {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        trace_share: t.trace_share,
        tolerance: t.tolerance.unwrap_or_default(),
        consistency: t.consistency,
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
/// arguments (the store URL travels separately, in [`STORE_URL_ENV`](stress_common::contract::STORE_URL_ENV), so it never shows in a
/// process list or a pod spec).
pub fn worker_args(client: &ClientMember, a: &WorkerAssignment) -> Vec<String> {
    let mut args = worker_contract(client, a).to_args();
    args.extend(client.template.extra_args.iter().cloned());
    args
}
