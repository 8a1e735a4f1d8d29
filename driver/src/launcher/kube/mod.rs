//! The production path: every server is a Triton pod and every client a worker pod, created
//! through the Kubernetes API with typed k8s-openapi objects and server-side apply.
//!
//! One owner ConfigMap per run (`triton-stress-<run id>`, holding the matrix and the run id)
//! owns every other object of the run, and every object carries the run label, so
//! `kubectl get pods -l triton-stress/run=<id>` shows one run. Pod names are derived from the
//! run id and the member name, so a driver restarted with the same run id applies the same
//! objects again (a no-op) instead of creating duplicates.
//!
//! Pod state comes from one watch on the run's pods (never a busy poll): a container that
//! terminated or restarted, a pod that failed, an image that cannot be pulled, a pod Pending
//! past its timeout all end the member, with the reason the kubelet gives.
//!
//! By concern: `spec` (the pods, pure), `setup` (owner ConfigMap and store Secret), `watch`
//! (the pod watch), `status` (what a pod's status means, pure), `inspect` (logs, events,
//! diagnostics), `cleanup` (deleting).

pub mod chaos_mesh;
mod cleanup;
mod config_reader;
mod disruption;
pub mod drain;
mod inspect;
pub mod memory;
pub mod restricted;
mod setup;
mod spec;
mod status;
mod watch;

pub use cleanup::delete_run;
pub use config_reader::{CONFIG_READER, ReaderLogError, reader_pod};
pub use setup::owner_config_map;
pub use spec::{
    MODEL_IMAGE_CONTAINER, PodContext, client_pod, model_config_key, owner_name, pod_deadline,
    pod_name, secret_name, server_pod, server_service, service_name,
};

use super::{
    LaunchError, Launcher, MemberDiagnostics, MemberExit, ModelConfigs, ReadConfigsError,
    STORE_URL_ENV,
};
use crate::matrix::faults::{Fault, FaultKind, Injection};
use crate::matrix::{ClientMember, Matrix, ServerMember, ServerTemplate};
use crate::plan::{ServerEndpoint, WorkerAssignment};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use spec::container_command;
use status::{member_exit, pod_exit, servers_readiness};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use stress_common::tritonserver;
use tokio::time::Instant;
use watch::{PodWatch, Seen};

/// Field manager of every object the driver applies.
pub const FIELD_MANAGER: &str = "triton-stress-driver";
/// The label that selects one run's objects.
pub const RUN_LABEL: &str = "triton-stress/run";

/// Ports of the Triton container (Triton's defaults) and of the worker's Prometheus endpoint.
pub const HTTP_PORT: u16 = 8000;
pub const GRPC_PORT: u16 = 8001;
pub const METRICS_PORT: u16 = 8002;
pub const WORKER_METRICS_PORT: u16 = 9464;
/// Where the worker image keeps perf_analyzer (docker/worker).
const PERF_ANALYZER_IN_IMAGE: &str = "/usr/local/bin/perf_analyzer";
const SERVER_CONTAINER: &str = "tritonserver";
const CLIENT_CONTAINER: &str = "worker";
/// How long diagnostics wait for a failed member's container to show as terminated, from the
/// failure's judgement (or from the diagnostics' start when there was none).
const DIAGNOSTICS_SETTLE: Duration = Duration::from_secs(3);
/// How often waits on the pod watch look again without a change: a pod Pending past its
/// timeout has failed although nothing about it changed.
const RECHECK: Duration = Duration::from_secs(1);
/// How many log lines of each container a failed pod's diagnostics keep.
const LOG_TAIL_LINES: i64 = 50;
/// A `restart` fault's pod deletion: Triton gets SIGTERM and this long to stop gracefully
/// (the server pods' own termination grace).
const RESTART_GRACE: Duration = Duration::from_secs(30);
/// A pod deleted for a fault that is still there this long after its grace has failed.
const RECREATE_LIMIT: Duration = Duration::from_secs(60);
/// A pod deleted for a fault that is still in the API this long after its grace is deleted at
/// once: its containers were killed when the grace ran out, and this cluster's kubelet was
/// seen to take 66 s more to confirm a deletion (CI, 2026-12-05), which the fault's recovery
/// would otherwise count as the server's.
const CONFIRM_WAIT: Duration = Duration::from_secs(5);

/// What the kube launcher needs beyond the matrix.
#[derive(Debug, Clone)]
pub struct KubeSettings {
    pub namespace: String,
    pub run_id: String,
    /// The matrix as written, kept in the owner ConfigMap.
    pub matrix_yaml: String,
    /// The store URL as the pods reach it; it goes into a Secret, never into a pod spec.
    pub pod_store_url: String,
    /// `Never` on a cluster without a registry (the project's test cluster), else `IfNotPresent`.
    pub image_pull_policy: String,
    /// A pod still Pending after this long has failed (unschedulable, image never pulled ...).
    pub pending_timeout: Duration,
    /// Every pod's `activeDeadlineSeconds` ([`pod_deadline`]).
    pub pod_deadline_seconds: Option<i64>,
    /// A sweep variant's config.pbtxt texts by owner ConfigMap key ([`model_config_data`]),
    /// which its server pods mount.
    pub model_configs: BTreeMap<String, String>,
    /// The proxy the driver's API calls go through when the run plans an `api-outage`.
    pub api_proxy: Option<ApiProxy>,
    /// The node of the driver's own pod ([`drain::preflight`]): no drain may hit it.
    pub driver_node: Option<String>,
}

/// The owner ConfigMap's model config entries of `matrix`: every template's mounted configs
/// (a sweep variant's), by [`model_config_key`].
pub fn model_config_data(matrix: &Matrix) -> BTreeMap<String, String> {
    matrix
        .server_templates
        .values()
        .flat_map(|t| &t.mounted_configs)
        .map(|c| (model_config_key(&c.model), c.text.clone()))
        .collect()
}

/// How long the config reader may take beyond its pending timeout (it only prints files).
const READER_RUN_LIMIT: Duration = Duration::from_secs(120);

struct MemberPod {
    pod: String,
    role: &'static str,
    container: &'static str,
    command: String,
    /// The pod as applied: applied again after a fault deleted or evicted it.
    spec: Pod,
}

/// A pod deleted or evicted for an injected fault and not yet seen again: its end is the fault's,
/// not a failure.
#[derive(Debug, Clone)]
struct Recreation {
    /// The deleted pod's uid: while the API still has it, it is ending.
    old_uid: Option<String>,
    /// The new pod's uid once applied: done when the watch sees it.
    new_uid: Option<String>,
    /// When the old pod, still there, is deleted at once (None: done).
    force_at: Option<Instant>,
    /// The old pod must be gone by then.
    give_up_at: Instant,
}

/// What a recreation does next while its new pod is not applied yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecreationStep {
    /// The old pod is gone: apply the new one.
    Apply,
    /// The old pod is ending within its grace.
    Wait,
    /// The old pod outlived its grace: delete it at once (its containers are past their kill).
    ForceDelete,
    /// The old pod is still there after a force delete and the limit: the member failed.
    GiveUp,
}

impl Recreation {
    fn new(old_uid: Option<String>, grace: Duration, waits: Duration, now: Instant) -> Self {
        Recreation {
            old_uid,
            new_uid: None,
            force_at: Some(now + grace + waits + CONFIRM_WAIT),
            give_up_at: now + grace + waits + RECREATE_LIMIT,
        }
    }

    fn step(&self, old_is_there: bool, now: Instant) -> RecreationStep {
        if !old_is_there {
            RecreationStep::Apply
        } else if now >= self.give_up_at {
            RecreationStep::GiveUp
        } else if self.force_at.is_some_and(|at| now >= at) {
            RecreationStep::ForceDelete
        } else {
            RecreationStep::Wait
        }
    }
}

pub struct KubeLauncher {
    client: Client,
    /// The driver's address as pods reach it ([`driver_address`]).
    driver_address: Option<std::net::IpAddr>,
    settings: KubeSettings,
    pods: Api<Pod>,
    services: Api<Service>,
    /// Each server's Service address (its ClusterIP), which its clients use.
    service_ips: BTreeMap<String, String>,
    /// Server pods deleted for a fault, until their new pod is seen.
    recreating: BTreeMap<String, Recreation>,
    /// Each server group's pods started so far: a group of two or more gets a
    /// PodDisruptionBudget ([`disruption`]).
    group_sizes: BTreeMap<String, u32>,
    /// The policy group's version that serves budgets, asked once ([`disruption::policy_version`]).
    policy_version: Option<&'static str>,
    /// What every pod of the run shares (run id, pull policy, owner).
    pods_context: PodContext,
    members: BTreeMap<String, MemberPod>,
    endpoints: BTreeMap<String, ServerEndpoint>,
    watch: PodWatch,
    exits: BTreeMap<String, MemberExit>,
    /// Members the driver itself is stopping: their end is not a failure.
    stopping: BTreeSet<String>,
    /// Until when diagnostics wait for failed members' ends: set when the failure is judged.
    settle_until: Option<Instant>,
    /// Workers' log tails read just before a failed run deleted their pods (a deleted pod's
    /// log may be gone by the time the report asks for it).
    log_tails_before_stop: BTreeMap<String, Vec<String>>,
    /// The nodes drained and not yet uncordoned, by the fault's target member.
    cordons: BTreeMap<String, drain::Cordon>,
    /// The drains' durations so far: a pod evicted by one waits that long for a node, on top
    /// of its pending timeout.
    drained_for: Duration,
}

/// Whether the kube launcher injects `fault` (known before connecting to a cluster, so a run
/// it refuses leaves nothing behind).
pub fn can_inject(fault: &Fault) -> Result<(), super::Uninjectable> {
    match fault.kind {
        FaultKind::Kill
        | FaultKind::Restart
        | FaultKind::Evict
        | FaultKind::Drain
        | FaultKind::StoreRestart
        | FaultKind::ApiOutage => Ok(()),
        FaultKind::Pause | FaultKind::Network => Err(super::Uninjectable::Kind(format!(
            "the kube launcher injects kill, restart and evict (a server pod deleted or \
             evicted, and created again); a {} needs a way into the pod that it does not \
             take (no pods/exec, no privileged pods)",
            fault.kind.as_str()
        ))),
    }
}

/// Before anything starts: each `store-restart` of `matrix` refused (file, line and field)
/// when `namespace` has no store pod to restart (or the pods cannot be listed).
pub async fn store_restart_refusals(
    client: &Client,
    namespace: &str,
    matrix: &crate::matrix::Matrix,
) -> Vec<String> {
    if !matrix
        .faults
        .iter()
        .any(|f| f.kind == FaultKind::StoreRestart)
    {
        return Vec::new();
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let why = match disruption::store_pods(&pods).await {
        Ok(names) if !names.is_empty() => return Vec::new(),
        Ok(_) => format!(
            "namespace {namespace} has no store pod to restart: none is labelled {} \
             (deploy/'s Postgres, deploy/base/postgres.yaml)",
            disruption::STORE_POD_SELECTOR
        ),
        Err(e) => e,
    };
    super::uninjectable(matrix, |f| match f.kind {
        FaultKind::StoreRestart => Err(super::Uninjectable::Setting {
            field: "target",
            why: why.clone(),
        }),
        _ => Ok(()),
    })
}

fn setup_err(what: &str, e: impl std::fmt::Display) -> LaunchError {
    LaunchError::Setup(format!("{what}: {e}"))
}

/// Every Kubernetes API call the driver makes, as (API group, resource, verbs):
/// deploy/base/rbac.yaml's Role grants exactly these (a test compares them), so a new call
/// needs both changed.
/// - pods: created by server-side apply (create, patch), read for diagnostics (get), listed by
///   the run label (list), watched for their state (watch), deleted at the end (delete);
/// - services: a ClusterIP Service per server, which its clients address, so a server pod
///   deleted and created again for an injected fault keeps its address: applied (create,
///   patch), deleted by the run label (list, delete);
/// - pods/log: a failed member's log tail, and the config reader's output (get);
/// - pods/exec: a server pod's memory over the run (`cat` of its cgroup's memory.stat; get for
///   a WebSocket exec, create where the API server checks that);
/// - pods/eviction: an `evict` fault (create);
/// - events: why a pod did not start (list, by the pod's name);
/// - configmaps, secrets: the run's owner ConfigMap and store Secret, applied (create, patch)
///   and deleted by name (delete): no get or list, so the driver reads no other Secret;
/// - poddisruptionbudgets (policy): a server group's budget, applied (create, patch), deleted
///   with the owner ConfigMap by the garbage collector.
pub const API_ACCESS: &[(&str, &str, &[&str])] = &[
    (
        "",
        "pods",
        &["create", "delete", "get", "list", "patch", "watch"],
    ),
    ("", "pods/log", &["get"]),
    ("", "pods/exec", &["create", "get"]),
    ("", "pods/eviction", &["create"]),
    ("", "services", &["create", "delete", "list", "patch"]),
    ("", "events", &["list"]),
    ("", "configmaps", &["create", "delete", "patch"]),
    ("", "secrets", &["create", "delete", "patch"]),
    ("policy", "poddisruptionbudgets", &["create", "patch"]),
];

/// Every Kubernetes API call answers within this (connect, read and write), or fails: an API
/// server that hangs must not hang the driver. Watches ask the server to end each request
/// sooner ([`WATCH_TIMEOUT_S`]) and resume.
pub const API_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// The server-side length of one watch request, within [`API_TIMEOUT`].
pub const WATCH_TIMEOUT_S: u32 = 20;

/// Overrides [`driver_address`]: the driver's IP address as pods reach it.
pub const DRIVER_ADDRESS_ENV: &str = "TRITON_STRESS_DRIVER_ADDRESS";

/// The driver's address as pods reach it: [`DRIVER_ADDRESS_ENV`], else this host's address on
/// the route to the API server (in a pod: its pod IP; on the test cluster's node: the node's
/// bridge address), unless that is a loopback address (a tunnel), which pods cannot reach.
pub async fn driver_address() -> Option<std::net::IpAddr> {
    if let Ok(text) = std::env::var(DRIVER_ADDRESS_ENV) {
        return text.trim().parse().ok();
    }
    let config = kube::Config::infer().await.ok()?;
    let host = config
        .cluster_url
        .host()?
        .trim_matches(['[', ']'])
        .to_string();
    let port = config.cluster_url.port_u16().unwrap_or(443);
    // A name that does not resolve at once (no cluster DNS here) is no reason to hold a run.
    let lookup = tokio::net::lookup_host((host.as_str(), port));
    let towards = tokio::time::timeout(std::time::Duration::from_secs(2), lookup)
        .await
        .ok()?
        .ok()?
        .next()?;
    local_address_towards(towards).filter(|ip| !ip.is_loopback())
}

/// The local address the system would send from to reach `peer` (a connected UDP socket sends
/// nothing).
fn local_address_towards(peer: std::net::SocketAddr) -> Option<std::net::IpAddr> {
    let unspecified: std::net::SocketAddr = match peer {
        std::net::SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        std::net::SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = std::net::UdpSocket::bind(unspecified).ok()?;
    socket.connect(peer).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// A Kubernetes client from `KUBECONFIG` / `~/.kube/config`, or the in-cluster service account,
/// with [`API_TIMEOUT`] on every call and no retries of its own. With `cuttable`, its calls go
/// through a proxy of the driver's own, returned, which an `api-outage` cuts.
pub async fn connect(cuttable: bool) -> Result<(Client, Option<ApiProxy>), LaunchError> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|e| setup_err("no Kubernetes client (in-cluster or KUBECONFIG)", e))?;
    let proxy = if cuttable {
        Some(through_proxy(&mut config).await?)
    } else {
        None
    };
    config.connect_timeout = Some(API_TIMEOUT);
    config.read_timeout = Some(API_TIMEOUT);
    config.write_timeout = Some(API_TIMEOUT);
    // kube retries 429, 503 and 504 by default, up to 15 times with a backoff to 1000 s: an
    // eviction a PodDisruptionBudget refuses (429) held the poll loop 6.6 min that way (the
    // evicted pod was not created again meanwhile, so the budget never let go). Every call
    // answers at once; the driver decides what to do again.
    config.default_retry = false;
    let client = Client::try_from(config)
        .map_err(|e| setup_err("no Kubernetes client (in-cluster or KUBECONFIG)", e))?;
    Ok((client, proxy))
}

/// The proxy between the driver and the API server that an `api-outage` cuts.
pub type ApiProxy = std::sync::Arc<super::proxy::FaultProxy>;

/// Points `config` at a new local proxy to its API server; TLS still names the API server.
async fn through_proxy(config: &mut kube::Config) -> Result<ApiProxy, LaunchError> {
    let url = config.cluster_url.clone();
    let host = url.host().unwrap_or_default().to_string();
    let port = url.port_u16().unwrap_or(443);
    let upstream = format!("{host}:{port}");
    let proxy = super::proxy::FaultProxy::start(&upstream)
        .await
        .map_err(|e| setup_err("a proxy to the API server (for an api-outage)", e))?;
    let path = url.path_and_query().map_or("/", |p| p.as_str());
    config.cluster_url = format!("https://{}{path}", proxy.address())
        .parse()
        .map_err(|e| setup_err("the proxy's URL", e))?;
    config.tls_server_name = Some(host.trim_matches(['[', ']']).to_string());
    Ok(std::sync::Arc::new(proxy))
}

impl KubeLauncher {
    /// Applies the run's owner ConfigMap and store Secret, and starts watching its pods.
    pub async fn start(client: Client, settings: KubeSettings) -> Result<Self, LaunchError> {
        if settings.run_id.len() > 63 {
            return Err(LaunchError::Setup(format!(
                "run id {:?} is longer than 63 characters, the limit of a label value",
                settings.run_id
            )));
        }
        let owner = setup::apply_run_objects(&client, &settings).await?;
        let ns = &settings.namespace;
        let run_id = &settings.run_id;
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let selector = format!("{RUN_LABEL}={run_id}");
        let existing = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| setup_err(&format!("listing pods in {ns}"), e))?;
        if !existing.items.is_empty() {
            tracing::info!(
                "run {run_id} already has {} pod(s) in {ns} (a restarted driver): applying the same objects again",
                existing.items.len()
            );
        }
        let watch = PodWatch::spawn(pods.clone(), selector);
        let services = Api::namespaced(client.clone(), ns);
        Ok(Self {
            client,
            driver_address: driver_address().await,
            pods_context: PodContext {
                run_id: settings.run_id.clone(),
                image_pull_policy: settings.image_pull_policy.clone(),
                owner,
                active_deadline_seconds: settings.pod_deadline_seconds,
            },
            services,
            service_ips: BTreeMap::new(),
            recreating: BTreeMap::new(),
            group_sizes: BTreeMap::new(),
            policy_version: None,
            settings,
            pods,
            members: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            watch,
            exits: BTreeMap::new(),
            stopping: BTreeSet::new(),
            settle_until: None,
            log_tails_before_stop: BTreeMap::new(),
            cordons: BTreeMap::new(),
            drained_for: Duration::ZERO,
        })
    }

    fn ns(&self) -> &str {
        &self.settings.namespace
    }

    /// How long a pod may stay Pending: its timeout, and the drains' durations (an evicted pod
    /// waits for its node's uncordon).
    fn pending_timeout(&self) -> Duration {
        self.settings.pending_timeout + self.drained_for
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn seen(&self, member: &str) -> Option<Seen> {
        self.watch.get(member)
    }

    /// Whether the member's pod was last seen in `phase`.
    fn phase_is(&self, member: &str, phase: &str) -> bool {
        self.seen(member).is_some_and(|s| {
            s.pod.status.as_ref().and_then(|st| st.phase.as_deref()) == Some(phase)
        })
    }

    /// The started servers' member names.
    fn server_members(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|(_, m)| m.role == "server")
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Applies a member's pod and remembers it (its pod name, role, container and command).
    async fn apply_pod(
        &mut self,
        member: &str,
        pod: Pod,
        role: &'static str,
        container: &'static str,
        command: String,
    ) -> Result<(), LaunchError> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        // The restricted Pod Security Standard, checked here: Kubernetes before 1.23 has no
        // admission that would. A host path is the matrix's own request: said, not refused
        // (a namespace that enforces the standard refuses the pod itself).
        for v in pod
            .spec
            .as_ref()
            .map(restricted::violations)
            .unwrap_or_default()
        {
            if v.starts_with("volume types:") && v.ends_with("is hostPath") {
                tracing::warn!("pod {name} breaks the restricted Pod Security Standard: {v}");
            } else {
                return Err(LaunchError::Member {
                    member: member.to_string(),
                    reason: format!("pod {name} breaks the restricted Pod Security Standard: {v}"),
                });
            }
        }
        self.pods
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&pod),
            )
            .await
            .map_err(|e| LaunchError::Member {
                member: member.into(),
                reason: format!("creating pod {}/{name}: {e}", self.ns()),
            })?;
        self.members.insert(
            member.to_string(),
            MemberPod {
                pod: name,
                role,
                container,
                command,
                spec: pod,
            },
        );
        Ok(())
    }

    /// Applies a server's Service and remembers its address.
    async fn apply_service(&mut self, server: &ServerMember) -> Result<(), LaunchError> {
        let service = server_service(server, &self.pods_context);
        let name = service.metadata.name.clone().unwrap_or_default();
        let member_err = |reason: String| LaunchError::Member {
            member: server.name.to_string(),
            reason,
        };
        let applied = self
            .services
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&service),
            )
            .await
            .map_err(|e| member_err(format!("creating Service {}/{name}: {e}", self.ns())))?;
        let ip = applied
            .spec
            .and_then(|s| s.cluster_ip)
            .filter(|ip| !ip.is_empty() && ip != "None")
            .ok_or_else(|| member_err(format!("Service {}/{name} got no cluster IP", self.ns())))?;
        self.service_ips.insert(server.name.to_string(), ip);
        Ok(())
    }

    /// Counts `server` into its group and applies the group's budget once it has two or more
    /// pods (again as it grows: all but one available).
    async fn apply_budget(&mut self, server: &ServerMember) -> Result<(), LaunchError> {
        let size = self.group_sizes.entry(server.group.clone()).or_default();
        *size += 1;
        let Some(budget) =
            disruption::server_group_budget(&self.pods_context, &server.group, *size)
        else {
            return Ok(());
        };
        let version = match self.policy_version {
            Some(v) => v,
            None => *self
                .policy_version
                .insert(disruption::policy_version(&self.client).await),
        };
        disruption::apply_budget(self.client.clone(), self.ns(), version, &budget)
            .await
            .map_err(|e| LaunchError::Member {
                member: server.name.to_string(),
                reason: format!(
                    "applying PodDisruptionBudget {}/{} (policy/{version}): {e}",
                    self.ns(),
                    disruption::budget_name(&self.settings.run_id, &server.group)
                ),
            })
    }

    /// Waits until each ready server answers through its Service (kube-proxy routes to a Ready
    /// pod only at its next sync), so no client starts against an address that refuses it.
    async fn wait_services(
        &self,
        ready: &[ServerEndpoint],
        deadline: Instant,
    ) -> Result<(), LaunchError> {
        for ep in ready {
            loop {
                let probe = tritonserver::probe_live(&ep.http, Duration::from_secs(1)).await;
                match probe {
                    Ok(()) => break,
                    Err(e) if Instant::now() >= deadline => {
                        return Err(LaunchError::Member {
                            member: ep.member.clone(),
                            reason: format!(
                                "its pod is Ready but its Service {} ({}) does not answer: {e}",
                                service_name(&self.settings.run_id, &ep.member),
                                ep.http
                            ),
                        });
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
        Ok(())
    }

    /// Moves each server pod deleted for a fault along: once the old pod is gone from the API,
    /// the same pod is applied again; once the watch sees the new pod, its state is the
    /// member's again. An old pod that outlives its grace is the member's failure.
    async fn advance_recreations(&mut self) -> Vec<MemberExit> {
        let mut failed = Vec::new();
        let members: Vec<String> = self.recreating.keys().cloned().collect();
        for member in members {
            let (Some(r), Some(mp)) = (self.recreating.get(&member), self.members.get(&member))
            else {
                continue;
            };
            if let Some(new_uid) = &r.new_uid {
                let seen_new = self
                    .seen(&member)
                    .is_some_and(|s| s.pod.metadata.uid.as_ref() == Some(new_uid));
                if seen_new {
                    self.recreating.remove(&member);
                }
                continue;
            }
            let old_is_there = match self.pods.get_opt(&mp.pod).await {
                Ok(found) => found.is_some_and(|p| p.metadata.uid == r.old_uid),
                Err(e) => {
                    tracing::warn!("reading pod {} after its fault: {e}", mp.pod);
                    continue;
                }
            };
            match r.step(old_is_there, Instant::now()) {
                RecreationStep::Apply => {}
                RecreationStep::Wait => continue,
                RecreationStep::ForceDelete => {
                    let pod = mp.pod.clone();
                    self.force_delete(&member, &pod).await;
                    continue;
                }
                RecreationStep::GiveUp => {
                    self.recreating.remove(&member);
                    failed.push(MemberExit::because(
                        &member,
                        format!(
                            "pod {} deleted for an injected fault did not end within its grace",
                            mp.pod
                        ),
                    ));
                    continue;
                }
            }
            let applied = self
                .pods
                .patch(
                    &mp.pod,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&mp.spec),
                )
                .await;
            match applied {
                Ok(pod) => {
                    tracing::info!("{member}: pod {} created again after its fault", mp.pod);
                    if let Some(r) = self.recreating.get_mut(&member) {
                        r.new_uid = pod.metadata.uid;
                    }
                }
                Err(e) => {
                    self.recreating.remove(&member);
                    failed.push(MemberExit::because(
                        &member,
                        format!("creating pod {} again after its fault: {e}", mp.pod),
                    ));
                }
            }
        }
        failed
    }

    /// Deletes `member`'s old pod at once (grace 0), once: a failure is logged and the
    /// recreation's limit decides.
    async fn force_delete(&mut self, member: &str, pod: &str) {
        if let Some(r) = self.recreating.get_mut(member) {
            r.force_at = None;
        }
        tracing::info!("{member}: pod {pod} still there after its grace: deleted at once");
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        if let Err(e) = self.pods.delete(pod, &dp).await {
            tracing::warn!("{member}: deleting pod {pod} at once: {e}");
        }
    }

    /// `member`'s pod deleted (kill, restart) or evicted (evict, drain), to be applied again
    /// once the API has let it go: until the watch sees the new pod, its end is the fault's,
    /// which allows it `waits` more (a drain's node stays cordoned that long). A worker is only
    /// evicted (validation's rule): applied again, it carries on from what its member reported
    /// (stress_common::status::carry).
    async fn take_down(
        &mut self,
        member: &str,
        kind: FaultKind,
        waits: Duration,
    ) -> Result<(), LaunchError> {
        let member_err = |reason: String| LaunchError::Member {
            member: member.into(),
            reason,
        };
        let evicts = matches!(kind, FaultKind::Evict | FaultKind::Drain);
        let grace = match kind {
            FaultKind::Kill => Duration::ZERO,
            FaultKind::Restart | FaultKind::Evict | FaultKind::Drain => RESTART_GRACE,
            kind => {
                return Err(member_err(format!(
                    "the kube launcher does not inject {} faults",
                    kind.as_str()
                )));
            }
        };
        let Some(mp) = self
            .members
            .get(member)
            .filter(|m| m.role == "server" || evicts)
        else {
            return Err(member_err("not a started member".into()));
        };
        let pod = mp.pod.clone();
        let old_uid = self.seen(member).and_then(|s| s.pod.metadata.uid);
        if evicts {
            let eviction = disruption::evict(&self.pods, &pod)
                .await
                .map_err(|e| member_err(format!("evicting pod {}/{pod}: {e}", self.ns())))?;
            if let disruption::Eviction::Refused(why) = eviction {
                return Err(LaunchError::Blocked {
                    member: member.into(),
                    reason: format!("the eviction of pod {}/{pod} was refused: {why}", self.ns()),
                });
            }
        } else {
            let dp = DeleteParams {
                grace_period_seconds: Some(grace.as_secs() as u32),
                ..Default::default()
            };
            self.pods
                .delete(&pod, &dp)
                .await
                .map_err(|e| member_err(format!("deleting pod {}/{pod}: {e}", self.ns())))?;
        }
        self.recreating.insert(
            member.into(),
            Recreation::new(old_uid, grace, waits, Instant::now()),
        );
        // The pod's deletion wakes the poll loop (`member_may_have_ended`), whose `exited`
        // applies the pod again as soon as the API has let the old one go.
        Ok(())
    }

    /// Drains the node of `target`'s pod for `duration`: cordoned, then the target evicted
    /// (its budget refusing: the drain is blocked, the node uncordoned), then every other pod
    /// of the run there, as far as their budgets allow. Refused for the driver's own node.
    async fn drain(
        &mut self,
        target: &str,
        duration: Duration,
    ) -> Result<super::Injected, LaunchError> {
        let member_err = |reason: String| LaunchError::Member {
            member: target.into(),
            reason,
        };
        let seen = self.seen(target);
        let node = seen
            .as_ref()
            .and_then(|s| drain::node_of(&s.pod))
            .ok_or_else(|| member_err("its pod has no node yet".into()))?
            .to_string();
        if self.settings.driver_node.as_deref() == Some(node.as_str()) {
            return Err(member_err(format!(
                "refused: node {node} holds the driver itself"
            )));
        }
        let nodes = self.nodes();
        let cordon = drain::cordon(&nodes, &node, &self.settings.run_id)
            .await
            .map_err(|e| member_err(format!("cordoning node {node}: {e}")))?;
        if let Err(e) = self.take_down(target, FaultKind::Drain, duration).await {
            if let Err(undo) = drain::uncordon(&nodes, &cordon).await {
                tracing::warn!("uncordoning node {node}: {undo}");
            }
            return Err(e);
        }
        self.cordons.insert(target.into(), cordon);
        self.drained_for += duration;
        let others: Vec<String> = self
            .members
            .keys()
            .filter(|m| m.as_str() != target && !self.stopping.contains(*m))
            .filter(|m| {
                self.seen(m)
                    .is_some_and(|s| drain::node_of(&s.pod) == Some(node.as_str()))
            })
            .cloned()
            .collect();
        let mut injected = super::Injected::default();
        for member in others {
            match self.take_down(&member, FaultKind::Drain, duration).await {
                Ok(()) => injected.also_hit.push(member),
                Err(e) => injected.kept.push(e.to_string()),
            }
        }
        Ok(injected)
    }

    /// Why the member's pod is going, when the cluster takes it away: the API server's word,
    /// asked at once (the watch may lag). None while the driver itself stops or replaces it,
    /// or when the pod is not going.
    async fn going_by_cluster(&self, member: &str) -> Option<String> {
        if self.stopping.contains(member) || self.recreating.contains_key(member) {
            return None;
        }
        let applied = self.members.get(member)?;
        let read = tokio::time::timeout(Duration::from_secs(2), self.pods.get_opt(&applied.pod));
        match read.await.ok()?.ok()? {
            Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                Some(status::ended_by_cluster(&pod))
            }
            Some(_) => None,
            // Gone already: the pod as applied names it.
            None => Some(status::ended_by_cluster(&applied.spec)),
        }
    }

    /// How the member's pod ended or failed, as the watch last saw it (None: it is fine). Asked
    /// only of members the driver is neither stopping nor replacing: a pod going away then was
    /// evicted or deleted by the cluster, which ends the member at once.
    fn ended(&self, member: &str) -> Option<MemberExit> {
        let seen = self.seen(member)?;
        if seen.deleted || seen.pod.metadata.deletion_timestamp.is_some() {
            return Some(MemberExit::because(
                member,
                status::ended_by_cluster(&seen.pod),
            ));
        }
        pod_exit(member, &seen.pod, seen.deleted, self.pending_timeout())
    }

    /// Waits until the named member's container has ended, or `deadline`.
    async fn wait_member_ended(&self, member: &str, deadline: Instant) {
        let pending_timeout = self.pending_timeout();
        let started = Instant::now();
        let ended = self
            .watch
            .wait_for(deadline, RECHECK, |seen| {
                member_exit(seen, member, pending_timeout).ok_or(())
            })
            .await;
        // The failure path's timing on a cluster is mostly this wait for the kubelet.
        tracing::info!(
            "diagnostics of {member}: {} after {} ms",
            if ended.is_ok() {
                "its end is reported"
            } else {
                "its end was not reported by the deadline"
            },
            started.elapsed().as_millis()
        );
    }

    /// Waits until every named member's container has ended (or `deadline`); their exits.
    async fn wait_ended(&self, members: &[String], deadline: Instant) -> Vec<MemberExit> {
        let pending_timeout = self.pending_timeout();
        let ended = self
            .watch
            .wait_for(deadline, RECHECK, |seen| {
                let ended: Vec<Option<MemberExit>> = members
                    .iter()
                    .map(|m| member_exit(seen, m, pending_timeout))
                    .collect();
                if ended.iter().all(Option::is_some) {
                    Ok(ended)
                } else {
                    Err(ended)
                }
            })
            .await
            .unwrap_or_else(|partly| partly);
        members
            .iter()
            .zip(ended)
            .map(|(m, e)| e.unwrap_or_else(|| MemberExit::because(m, "did not stop in time")))
            .collect()
    }
}

#[async_trait::async_trait]
impl Launcher for KubeLauncher {
    fn name(&self) -> &'static str {
        "kube"
    }

    fn span_receiver_host(&self) -> Option<std::net::IpAddr> {
        self.driver_address
    }

    /// A reader pod built like the template's server pods prints each model's config.pbtxt
    /// (see `config_reader`); its log, read once it has ended, is the answer. The pod is
    /// deleted after (and with the run in any case).
    async fn read_model_configs(
        &mut self,
        template: &ServerTemplate,
        models: &[String],
    ) -> Result<ModelConfigs, ReadConfigsError> {
        let pod = reader_pod(template, CONFIG_READER, models, &self.pods_context).map_err(|e| {
            LaunchError::Member {
                member: CONFIG_READER.into(),
                reason: e.to_string(),
            }
        })?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        let command = container_command(&pod);
        self.apply_pod(CONFIG_READER, pod, CONFIG_READER, SERVER_CONTAINER, command)
            .await?;
        let pending_timeout = self.settings.pending_timeout;
        let ended = self
            .watch
            .wait_for(
                Instant::now() + pending_timeout + READER_RUN_LIMIT,
                RECHECK,
                |seen| member_exit(seen, CONFIG_READER, pending_timeout).ok_or(()),
            )
            .await;
        let answer = match ended {
            Err(()) => Err(ReadConfigsError::Reader {
                pod: name.clone(),
                why: format!(
                    "did not end within {}s",
                    (pending_timeout + READER_RUN_LIMIT).as_secs()
                ),
            }),
            // Succeeded also when the kubelet's container status is gone by now.
            Ok(exit) if !exit.success() && !self.phase_is(CONFIG_READER, "Succeeded") => {
                let d = self.collect_diagnostics(CONFIG_READER).await;
                Err(ReadConfigsError::Reader {
                    pod: name.clone(),
                    why: format!(
                        "{}; its log ends: {}",
                        exit.describe(),
                        d.log_tail.join("\n")
                    ),
                })
            }
            Ok(_) => match self
                .pods
                .logs(
                    &name,
                    &kube::api::LogParams {
                        container: Some(SERVER_CONTAINER.into()),
                        ..Default::default()
                    },
                )
                .await
            {
                Err(e) => Err(ReadConfigsError::Reader {
                    pod: name.clone(),
                    why: format!("reading its log: {e}"),
                }),
                Ok(log) => {
                    config_reader::parse_log(&log, models, template.model_repositories.len())
                        .map(|found| ModelConfigs {
                            found,
                            looked_in: template.model_repositories.clone(),
                        })
                        .map_err(|error| ReadConfigsError::ReaderLog {
                            pod: name.clone(),
                            error,
                        })
                }
            },
        };
        self.delete_pods([CONFIG_READER.to_string()].iter(), Duration::ZERO)
            .await;
        self.members.remove(CONFIG_READER);
        answer
    }

    fn failure_judged(&mut self) {
        self.settle_until
            .get_or_insert_with(|| Instant::now() + DIAGNOSTICS_SETTLE);
    }

    async fn start_server(&mut self, server: &ServerMember) -> Result<(), LaunchError> {
        let pod = server_pod(server, &self.pods_context).map_err(|e| LaunchError::Member {
            member: server.name.to_string(),
            reason: e.to_string(),
        })?;
        let command = container_command(&pod);
        self.apply_pod(&server.name, pod, "server", SERVER_CONTAINER, command)
            .await?;
        self.apply_service(server).await?;
        self.apply_budget(server).await
    }

    async fn wait_servers_ready(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ServerEndpoint>, LaunchError> {
        let deadline = Instant::now() + timeout;
        let servers = self.server_members();
        let pending_timeout = self.settings.pending_timeout;
        // Woken by every pod change: a server is used the moment its pod is Ready.
        let readiness = self
            .watch
            .wait_for(deadline, RECHECK, |seen| {
                let r = servers_readiness(&servers, seen, pending_timeout);
                if r.failed.is_some() || r.waiting.is_none() {
                    Ok(r)
                } else {
                    Err(r)
                }
            })
            .await
            .unwrap_or_else(|not_yet| not_yet);
        // Clients and the driver address a server's Service, not its pod.
        let ready: Vec<ServerEndpoint> = readiness
            .ready
            .iter()
            .map(|ep| match self.service_ips.get(&ep.member) {
                Some(ip) => ServerEndpoint {
                    member: ep.member.clone(),
                    grpc: format!("{ip}:{GRPC_PORT}"),
                    http: format!("{ip}:{HTTP_PORT}"),
                    metrics: format!("{ip}:{METRICS_PORT}"),
                },
                None => ep.clone(),
            })
            .collect();
        for ep in &ready {
            self.endpoints.insert(ep.member.clone(), ep.clone());
        }
        if let Some((member, reason)) = readiness.failed {
            return Err(LaunchError::Member { member, reason });
        }
        match readiness.waiting {
            None => {
                self.wait_services(&ready, deadline).await?;
                Ok(ready)
            }
            Some(first_waiting) => Err(LaunchError::Member {
                reason: format!(
                    "not ready after {timeout:?}: {}",
                    self.not_ready_reason(&first_waiting).await
                ),
                member: first_waiting,
            }),
        }
    }

    async fn start_client(
        &mut self,
        client: &ClientMember,
        assignment: &WorkerAssignment,
    ) -> Result<(), LaunchError> {
        // perf_analyzer runs inside the worker's image, not from this machine's path.
        let assignment = WorkerAssignment {
            perf_analyzer: Some(PERF_ANALYZER_IN_IMAGE.into()),
            ..assignment.clone()
        };
        let pod = client_pod(
            client,
            crate::plan::worker_args(client, &assignment),
            &self.pods_context,
        )
        .map_err(|e| LaunchError::Member {
            member: client.name.to_string(),
            reason: e.to_string(),
        })?;
        let command = format!(
            "{STORE_URL_ENV}=<from Secret {}> {}",
            secret_name(&self.settings.run_id),
            container_command(&pod)
        );
        self.apply_pod(&client.name, pod, "client", CLIENT_CONTAINER, command)
            .await
    }

    async fn member_may_have_ended(&mut self) {
        // Any pod change: the poll loop asks `exited`, which reads the watch's latest pods.
        self.watch.changed().await;
    }

    async fn exited(&mut self) -> Vec<MemberExit> {
        let mut ended = self.advance_recreations().await;
        for name in self.members.keys() {
            if self.exits.contains_key(name)
                || self.stopping.contains(name)
                || self.recreating.contains_key(name)
            {
                continue;
            }
            ended.extend(self.ended(name));
        }
        for e in &ended {
            self.exits.insert(e.member_id.clone(), e.clone());
        }
        ended
    }

    async fn stop_clients(&mut self, grace: Duration) -> Vec<MemberExit> {
        let clients: Vec<String> = self
            .members
            .iter()
            .filter(|(name, m)| m.role == "client" && !self.exits.contains_key(*name))
            .map(|(name, _)| name.clone())
            .collect();
        self.stopping.extend(clients.iter().cloned());
        if self.settle_until.is_some() {
            self.keep_log_tails(&clients).await;
        }
        // Deleting a pod is how Kubernetes sends SIGTERM: the worker flushes its final counts
        // and exits; the watch sees the container's exit code before the pod is gone.
        self.delete_pods(clients.iter(), grace).await;
        let exits = self
            .wait_ended(&clients, Instant::now() + grace + Duration::from_secs(10))
            .await;
        for e in &exits {
            self.exits.insert(e.member_id.clone(), e.clone());
        }
        exits
    }

    async fn stop_all(&mut self, _grace: Duration) {
        // Nothing is deleted here: the failure path collects diagnostics first, and cleanup()
        // then deletes what is not kept for inspection.
        let all: Vec<String> = self.members.keys().cloned().collect();
        self.stopping.extend(all);
        self.recreating.clear();
    }

    async fn stop_servers(&mut self, grace: Duration) {
        self.recreating.clear();
        let servers = self.server_members();
        self.stopping.extend(servers.iter().cloned());
        self.delete_pods(servers.iter(), grace).await;
    }

    async fn cleanup(&mut self, keep: &BTreeSet<String>) {
        // A drain the run did not end (it stopped first): its node is not left cordoned.
        for (member, cordon) in std::mem::take(&mut self.cordons) {
            if let Err(e) = drain::uncordon(&self.nodes(), &cordon).await {
                tracing::warn!("uncordoning node {} (drain of {member}): {e}", cordon.node);
            }
        }
        self.delete_run_objects(keep).await;
    }

    async fn diagnostics(&mut self, member_id: &str) -> MemberDiagnostics {
        self.collect_diagnostics(member_id).await
    }

    async fn server_log_between(
        &mut self,
        member_id: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Vec<String> {
        self.log_between(member_id, from_ms, to_ms).await
    }

    async fn server_live(
        &mut self,
        member_id: &str,
        timeout: Duration,
    ) -> Result<(), tritonserver::ProbeError> {
        let ep =
            self.endpoints
                .get(member_id)
                .ok_or_else(|| tritonserver::ProbeError::NoAddress {
                    member: member_id.into(),
                })?;
        let probed = tritonserver::probe_live(&ep.http, timeout).await;
        // A server that stopped answering because the cluster is taking its pod away (an
        // eviction the watch has not shown yet) is the platform's doing: the API says so.
        match (probed, self.going_by_cluster(member_id).await) {
            (Err(tritonserver::ProbeError::Unreachable { endpoint, cause }), Some(why)) => {
                Err(tritonserver::ProbeError::Unreachable {
                    endpoint,
                    cause: format!("{cause}; {why}"),
                })
            }
            (probed, _) => probed,
        }
    }

    async fn server_metrics(&mut self, member_id: &str) -> Option<String> {
        let ep = self.endpoints.get(member_id)?;
        // A dead pod's address drops packets: a quick connect says so before an HTTP timeout.
        if !stress_common::http::reachable(&ep.metrics, crate::launcher::LOCAL_CONNECT).await {
            return None;
        }
        tritonserver::metrics_text(&ep.metrics).await
    }

    fn command_line(&self, member_id: &str) -> Option<String> {
        self.members.get(member_id).map(|m| m.command.clone())
    }

    fn unlaunchable(&self, plan: &crate::plan::RunPlan) -> Vec<super::Unlaunchable> {
        spec::unlaunchable(plan)
    }

    fn can_inject(&self, fault: &Fault) -> Result<(), super::Uninjectable> {
        can_inject(fault)
    }

    /// A server pod deleted (kill: at once, as a force delete; restart: SIGTERM and the pod's
    /// grace) or a server or worker pod evicted (evict: the Eviction API, which a server
    /// group's budget may refuse) and applied again once the API has let it go: a server's
    /// Service keeps its clients' address, a worker keeps its member name and id block. Until
    /// the watch sees the new pod, the member's end is the fault's. A drain evicts every pod of
    /// the run on the target's node, cordoned first.
    async fn inject(&mut self, injection: &Injection) -> Result<super::Injected, LaunchError> {
        let member = injection.member.as_str();
        let member_err = |reason: String| LaunchError::Member {
            member: member.into(),
            reason,
        };
        match injection.kind {
            FaultKind::StoreRestart => disruption::restart_store(&self.pods)
                .await
                .map(|()| super::Injected::default())
                .map_err(|why| member_err(format!("in namespace {}: {why}", self.ns()))),
            FaultKind::ApiOutage => {
                let proxy = self.settings.api_proxy.as_ref().ok_or_else(|| {
                    member_err("the driver's API calls do not go through its proxy".into())
                })?;
                proxy.cut(true);
                Ok(super::Injected::default())
            }
            FaultKind::Drain => self.drain(member, injection.duration).await,
            kind => self
                .take_down(member, kind, Duration::ZERO)
                .await
                .map(|()| super::Injected::default()),
        }
    }

    /// An `api-outage` ends: the proxy lets the driver's API calls through again. A `drain`
    /// ends: its node is uncordoned.
    async fn end_fault(&mut self, member: &str) -> Result<super::FaultEnded, LaunchError> {
        if let (crate::matrix::faults::API_SERVER_TARGET, Some(proxy)) =
            (member, &self.settings.api_proxy)
        {
            proxy.cut(false);
        }
        if let Some(cordon) = self.cordons.remove(member) {
            drain::uncordon(&self.nodes(), &cordon)
                .await
                .map_err(|e| LaunchError::Member {
                    member: member.into(),
                    reason: format!("uncordoning node {}: {e}", cordon.node),
                })?;
        }
        Ok(super::FaultEnded::default())
    }

    fn is_running(&self, member_id: &str) -> bool {
        self.seen(member_id).is_some_and(|s| {
            s.pod.status.as_ref().and_then(|st| st.phase.as_deref()) != Some("Pending")
        })
    }

    fn locate(&self, member_id: &str) -> Option<String> {
        self.members
            .get(member_id)
            .map(|m| format!("pod {}/{}", self.ns(), m.pod))
    }

    async fn cpu_use(&mut self, member_id: &str) -> Option<super::CpuUse> {
        let m = self.members.get(member_id)?;
        memory::container_cpu_now(&self.pods, &m.pod, m.container).await
    }

    fn server_memory(&self, member_id: &str) -> Option<super::ServerMemory> {
        let m = self.members.get(member_id).filter(|m| m.role == "server")?;
        Some(super::ServerMemory::Pod(memory::PodMemory::new(
            self.pods.clone(),
            &m.pod,
            m.container,
        )))
    }
}

#[cfg(test)]
mod rbac_tests {
    /// deploy/base/rbac.yaml's Role grants exactly [`super::API_ACCESS`]: nothing the code does
    /// not call, and everything it does.
    #[test]
    fn the_role_grants_exactly_what_the_code_calls() {
        let path =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/rbac.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut granted: Vec<(String, String, Vec<String>)> = Vec::new();
        for doc in text.split("\n---\n") {
            let Ok(role) = serde_saphyr::from_str::<k8s_openapi::api::rbac::v1::Role>(doc) else {
                continue;
            };
            for rule in role.rules.unwrap_or_default() {
                let groups = rule.api_groups.clone().unwrap_or_default();
                assert_eq!(groups.len(), 1, "one API group a rule: {rule:?}");
                assert!(rule.resource_names.is_none(), "{rule:?}");
                for resource in rule.resources.unwrap_or_default() {
                    let mut verbs = rule.verbs.clone();
                    verbs.sort();
                    granted.push((groups[0].clone(), resource, verbs));
                }
            }
        }
        granted.sort();
        let mut used: Vec<(String, String, Vec<String>)> = super::API_ACCESS
            .iter()
            .map(|(g, r, v)| {
                let verbs = v.iter().map(|v| v.to_string()).collect();
                (g.to_string(), r.to_string(), verbs)
            })
            .collect();
        used.sort();
        assert_eq!(granted, used);
    }
}

#[cfg(test)]
mod tests {
    use super::{Recreation, RecreationStep};
    use std::time::Duration;
    use tokio::time::Instant;

    /// A pod deleted for a fault is waited for through its grace (and what else the fault
    /// waits), deleted at once a little after, once, and a failure only after the limit.
    #[test]
    fn a_pod_deleted_for_a_fault_is_forced_out_after_its_grace_and_given_up_on_at_the_limit() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(30);
        let waits = Duration::from_secs(10);
        let mut r = Recreation::new(Some("old".into()), grace, waits, t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(r.step(false, at(1)), RecreationStep::Apply);
        assert_eq!(r.step(true, at(1)), RecreationStep::Wait);
        assert_eq!(r.step(true, at(40)), RecreationStep::Wait);
        assert_eq!(r.step(true, at(46)), RecreationStep::ForceDelete);
        r.force_at = None;
        assert_eq!(r.step(true, at(46)), RecreationStep::Wait);
        assert_eq!(r.step(false, at(47)), RecreationStep::Apply);
        assert_eq!(r.step(true, at(100)), RecreationStep::GiveUp);
    }

    #[test]
    fn the_driver_address_is_the_one_on_the_route_to_the_api_server() {
        let loopback: std::net::SocketAddr = "127.0.0.1:6443".parse().unwrap();
        assert_eq!(
            super::local_address_towards(loopback),
            Some(std::net::Ipv4Addr::LOCALHOST.into())
        );
        let v6: std::net::SocketAddr = "[::1]:6443".parse().unwrap();
        assert!(super::local_address_towards(v6).is_none_or(|ip| ip.is_ipv6()));
    }
}
