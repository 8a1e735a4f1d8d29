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

use super::{LaunchError, Launcher, MemberExit, STORE_URL_ENV, ServerEndpoint, WorkerAssignment};
use crate::matrix::{ClientMember, Resources, ServerMember, ServerVolume, Toleration};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, Event as CoreEvent, HTTPGetAction, HostPathVolumeSource, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, Probe, ResourceRequirements, Secret,
    SecretKeySelector, Toleration as K8sToleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stress_common::tritonserver::{self, shell_quote};
use tokio::sync::Notify;

/// Field manager of every object the driver applies.
pub const FIELD_MANAGER: &str = "triton-stress-driver";
/// The label that selects one run's objects.
pub const RUN_LABEL: &str = "triton-stress/run";
const ROLE_LABEL: &str = "triton-stress/role";
const GROUP_LABEL: &str = "triton-stress/group";
const INDEX_LABEL: &str = "triton-stress/index";
const MEMBER_LABEL: &str = "triton-stress/member";

/// Ports of the Triton container (Triton's defaults) and of the worker's Prometheus endpoint.
pub const HTTP_PORT: u16 = 8000;
pub const GRPC_PORT: u16 = 8001;
pub const METRICS_PORT: u16 = 8002;
pub const WORKER_METRICS_PORT: u16 = 9464;
/// Where the worker image keeps perf_analyzer (docker/worker).
const PERF_ANALYZER_IN_IMAGE: &str = "/usr/local/bin/perf_analyzer";
const SERVER_CONTAINER: &str = "tritonserver";
const CLIENT_CONTAINER: &str = "worker";
/// How long diagnostics wait for a failed member's container to show as terminated.
const DIAGNOSTICS_SETTLE: Duration = Duration::from_secs(3);
/// How many log lines of each container a failed pod's diagnostics keep.
const LOG_TAIL_LINES: i64 = 50;
/// Waiting reasons that will not resolve by themselves: the member has failed.
const FATAL_WAITING: &[&str] = &[
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

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
}

/// The latest state of a member's pod, as the watch saw it.
#[derive(Clone)]
struct Seen {
    pod: Pod,
    deleted: bool,
}

struct MemberPod {
    pod: String,
    role: &'static str,
    container: &'static str,
    command: String,
}

pub struct KubeLauncher {
    client: Client,
    settings: KubeSettings,
    pods: Api<Pod>,
    owner: OwnerReference,
    members: BTreeMap<String, MemberPod>,
    endpoints: BTreeMap<String, ServerEndpoint>,
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    changed: Arc<Notify>,
    watch: tokio::task::JoinHandle<()>,
    exits: BTreeMap<String, MemberExit>,
    /// Members the driver itself is stopping: their end is not a failure.
    stopping: BTreeSet<String>,
}

impl Drop for KubeLauncher {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

fn setup_err(what: &str, e: impl std::fmt::Display) -> LaunchError {
    LaunchError::Setup(format!("{what}: {e}"))
}

/// The labels of every object of a run (plus role/group/index/member for pods).
fn run_labels(run_id: &str) -> BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name", "triton-stress"),
        ("app.kubernetes.io/instance", run_id),
        ("app.kubernetes.io/part-of", "triton-stress"),
        ("app.kubernetes.io/managed-by", FIELD_MANAGER),
        (RUN_LABEL, run_id),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

pub fn owner_name(run_id: &str) -> String {
    format!("triton-stress-{run_id}")
}

fn secret_name(run_id: &str) -> String {
    format!("triton-stress-{run_id}-store")
}

pub fn pod_name(run_id: &str, member: &str) -> String {
    format!("{run_id}-{member}")
}

/// A Kubernetes client from `KUBECONFIG` / `~/.kube/config`, or the in-cluster service account.
pub async fn connect() -> Result<Client, LaunchError> {
    Client::try_default()
        .await
        .map_err(|e| setup_err("no Kubernetes client (in-cluster or KUBECONFIG)", e))
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
        let ns = &settings.namespace;
        let run_id = &settings.run_id;
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let owner_cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(owner_name(run_id)),
                labels: Some(with_component(run_labels(run_id), "run")),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("run-id".to_string(), run_id.clone()),
                ("matrix.yaml".to_string(), settings.matrix_yaml.clone()),
            ])),
            ..Default::default()
        };
        let owner_cm = configmaps
            .patch(&owner_name(run_id), &apply, &Patch::Apply(&owner_cm))
            .await
            .map_err(|e| {
                setup_err(
                    &format!("applying ConfigMap {ns}/{}", owner_name(run_id)),
                    e,
                )
            })?;
        let owner = owner_cm
            .controller_owner_ref(&())
            .ok_or_else(|| LaunchError::Setup("the owner ConfigMap has no uid".into()))?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(secret_name(run_id)),
                labels: Some(with_component(run_labels(run_id), "store")),
                owner_references: Some(vec![owner.clone()]),
                ..Default::default()
            },
            string_data: Some(BTreeMap::from([(
                "url".to_string(),
                settings.pod_store_url.clone(),
            )])),
            ..Default::default()
        };
        secrets
            .patch(&secret_name(run_id), &apply, &Patch::Apply(&secret))
            .await
            .map_err(|e| setup_err(&format!("applying Secret {ns}/{}", secret_name(run_id)), e))?;

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
        let seen: Arc<Mutex<BTreeMap<String, Seen>>> = Arc::default();
        let changed = Arc::new(Notify::new());
        let watch = tokio::spawn(watch_pods(
            pods.clone(),
            selector,
            seen.clone(),
            changed.clone(),
        ));
        Ok(Self {
            client,
            settings,
            pods,
            owner,
            members: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            seen,
            changed,
            watch,
            exits: BTreeMap::new(),
            stopping: BTreeSet::new(),
        })
    }

    fn ns(&self) -> &str {
        &self.settings.namespace
    }

    fn seen(&self, member: &str) -> Option<Seen> {
        self.seen.lock().expect("seen").get(member).cloned()
    }

    fn labels(
        &self,
        role: &str,
        group: &str,
        index: u32,
        member: &str,
    ) -> BTreeMap<String, String> {
        let mut labels = with_component(run_labels(&self.settings.run_id), role);
        labels.extend([
            (ROLE_LABEL.to_string(), role.to_string()),
            (GROUP_LABEL.to_string(), group.to_string()),
            (INDEX_LABEL.to_string(), index.to_string()),
            (MEMBER_LABEL.to_string(), member.to_string()),
        ]);
        labels
    }

    async fn apply_pod(&mut self, member: &str, pod: Pod) -> Result<(), LaunchError> {
        let name = pod.metadata.name.clone().unwrap_or_default();
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
        Ok(())
    }

    /// The Triton pod of a server member.
    pub fn server_pod(&self, s: &ServerMember) -> Result<Pod, String> {
        let t = &s.template;
        let image = t.tritonserver.image().ok_or(
            "the kube launcher runs images; this template names a binary (use --launcher local)",
        )?;
        let mut args: Vec<String> = t
            .model_repositories
            .iter()
            .map(|r| format!("--model-repository={r}"))
            .collect();
        args.extend([
            format!("--http-port={HTTP_PORT}"),
            format!("--grpc-port={GRPC_PORT}"),
            format!("--metrics-port={METRICS_PORT}"),
        ]);
        args.extend(t.args.iter().cloned());
        let mut mounts = vec![VolumeMount {
            // The python backend's stubs talk to the server through /dev/shm; a container's
            // default 64 MiB is too small for a few model instances.
            name: "dshm".into(),
            mount_path: "/dev/shm".into(),
            ..Default::default()
        }];
        let mut volumes = vec![memory_volume("dshm")];
        if let Some(trace) = &t.trace {
            args.extend([
                "--trace-config".into(),
                format!("triton,file=/traces/{}.json", s.name),
            ]);
            args.extend(trace.args());
            mounts.push(VolumeMount {
                name: "traces".into(),
                mount_path: "/traces".into(),
                ..Default::default()
            });
            volumes.push(Volume {
                name: "traces".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            });
        }
        for v in &t.volumes {
            mounts.push(VolumeMount {
                name: v.name.clone(),
                mount_path: v.mount_path.clone(),
                read_only: Some(v.read_only),
                ..Default::default()
            });
            volumes.push(to_k8s_volume(v));
        }
        let port = |name: &str, p: u16| ContainerPort {
            name: Some(name.into()),
            container_port: p.into(),
            ..Default::default()
        };
        let container = Container {
            name: SERVER_CONTAINER.into(),
            image: Some(image.into()),
            image_pull_policy: Some(self.settings.image_pull_policy.clone()),
            command: Some(vec!["tritonserver".into()]),
            args: Some(args),
            env: Some(plain_env(&t.env)),
            ports: Some(vec![
                port("http", HTTP_PORT),
                port("grpc", GRPC_PORT),
                port("metrics", METRICS_PORT),
            ]),
            readiness_probe: Some(Probe {
                http_get: Some(HTTPGetAction {
                    path: Some("/v2/health/ready".into()),
                    port: IntOrString::Int(HTTP_PORT.into()),
                    ..Default::default()
                }),
                period_seconds: Some(2),
                timeout_seconds: Some(2),
                failure_threshold: Some(3),
                ..Default::default()
            }),
            resources: resources(t.resources.as_ref()),
            volume_mounts: Some(mounts),
            ..Default::default()
        };
        Ok(self.pod(
            &s.name,
            self.labels("server", &s.group, s.index, &s.name),
            container,
            volumes,
            &t.node_selector,
            &t.tolerations,
        ))
    }

    /// The worker pod of a client member.
    pub fn client_pod(&self, c: &ClientMember, a: &WorkerAssignment) -> Result<Pod, String> {
        let t = &c.template;
        let image = t.worker.image().ok_or(
            "the kube launcher runs images; this template names a binary (use --launcher local)",
        )?;
        let mut args = super::worker_args(c, a);
        if !t.extra_args.iter().any(|a| a.starts_with("--metrics-addr")) {
            args.extend([
                "--metrics-addr".into(),
                format!("0.0.0.0:{WORKER_METRICS_PORT}"),
            ]);
        }
        let mut env = vec![
            EnvVar {
                name: STORE_URL_ENV.into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret_name(&self.settings.run_id),
                        key: "url".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_IP", "status.podIP"),
        ];
        env.extend(plain_env(&t.env));
        let container = Container {
            name: CLIENT_CONTAINER.into(),
            image: Some(image.into()),
            image_pull_policy: Some(self.settings.image_pull_policy.clone()),
            command: Some(vec!["worker".into()]),
            args: Some(args),
            env: Some(env),
            ports: Some(vec![ContainerPort {
                name: Some("metrics".into()),
                container_port: WORKER_METRICS_PORT.into(),
                ..Default::default()
            }]),
            resources: resources(t.resources.as_ref()),
            ..Default::default()
        };
        Ok(self.pod(
            &c.name,
            self.labels("client", &c.group, c.index, &c.name),
            container,
            Vec::new(),
            &t.node_selector,
            &t.tolerations,
        ))
    }

    fn pod(
        &self,
        member: &str,
        labels: BTreeMap<String, String>,
        container: Container,
        volumes: Vec<Volume>,
        node_selector: &indexmap::IndexMap<String, String>,
        tolerations: &[Toleration],
    ) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(pod_name(&self.settings.run_id, member)),
                labels: Some(labels),
                owner_references: Some(vec![self.owner.clone()]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![container],
                // A soak must see a crash, not a restarted container that hides it.
                restart_policy: Some("Never".into()),
                volumes: (!volumes.is_empty()).then_some(volumes),
                node_selector: (!node_selector.is_empty()).then(|| {
                    node_selector
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                }),
                tolerations: (!tolerations.is_empty())
                    .then(|| tolerations.iter().map(to_k8s_toleration).collect()),
                termination_grace_period_seconds: Some(30),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Waits for the next pod change, or `at_most`.
    async fn next_change(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.changed.notified()).await;
    }

    /// Why a pod that should be ready is not: phase, conditions, container states and the
    /// pod's latest warning events (a failing readiness probe shows only there).
    async fn not_ready_reason(&self, member: &str) -> String {
        let Some(seen) = self.seen(member) else {
            return "no pod seen (was it created?)".into();
        };
        let mut parts = vec![pod_summary(&seen.pod)];
        let events = self.pod_events(&seen.pod.name_any()).await;
        if let Some(last) = events.iter().rev().find(|e| e.contains("Warning")) {
            parts.push(format!("last warning: {last}"));
        }
        parts.join("; ")
    }

    /// The pod's events, oldest first, as `time type reason: message (xN)`.
    async fn pod_events(&self, pod: &str) -> Vec<String> {
        let events: Api<CoreEvent> = Api::namespaced(self.client.clone(), self.ns());
        let Ok(list) = events
            .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
            .await
        else {
            return Vec::new();
        };
        // The scheduler's events carry only eventTime; the kubelet's only lastTimestamp.
        let when = |e: &CoreEvent| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
                .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
        };
        let mut items = list.items;
        items.sort_by_key(|e| when(e).map(|t| t.as_second()).unwrap_or_default());
        items
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}: {}{}",
                    when(e).map(|t| t.to_string()).unwrap_or_default(),
                    e.type_.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default().trim(),
                    match e.count {
                        Some(n) if n > 1 => format!(" (x{n})"),
                        _ => String::new(),
                    }
                )
            })
            .collect()
    }

    async fn log_tail(&self, pod: &str, container: &str, previous: bool) -> Option<String> {
        self.pods
            .logs(
                pod,
                &LogParams {
                    container: Some(container.into()),
                    previous,
                    tail_lines: Some(LOG_TAIL_LINES),
                    ..Default::default()
                },
            )
            .await
            .ok()
    }

    /// Deletes the named member pods (their containers get SIGTERM and `grace` to end).
    async fn delete_pods<'a>(&self, members: impl Iterator<Item = &'a String>, grace: Duration) {
        let dp = DeleteParams {
            grace_period_seconds: Some(grace.as_secs() as u32),
            ..Default::default()
        };
        for m in members {
            if let Some(mp) = self.members.get(m)
                && let Err(e) = self.pods.delete(&mp.pod, &dp).await
                && !is_not_found(&e)
            {
                tracing::warn!("deleting pod {}: {e}", mp.pod);
            }
        }
    }

    /// How the member's pod ended or failed, as the watch last saw it (None: it is fine).
    fn ended(&self, member: &str) -> Option<MemberExit> {
        let seen = self.seen(member)?;
        pod_exit(
            member,
            &seen.pod,
            seen.deleted,
            self.settings.pending_timeout,
        )
    }

    /// Waits until every named member's container has ended (or `deadline`); their exits.
    async fn wait_ended(&mut self, members: &[String], deadline: Instant) -> Vec<MemberExit> {
        loop {
            let ended: Vec<Option<MemberExit>> = members.iter().map(|m| self.ended(m)).collect();
            if ended.iter().all(Option::is_some) || Instant::now() >= deadline {
                return members
                    .iter()
                    .zip(ended)
                    .map(|(m, e)| {
                        e.unwrap_or_else(|| MemberExit {
                            member_id: m.clone(),
                            code: None,
                            signal: None,
                            reason: Some("did not stop in time".into()),
                        })
                    })
                    .collect();
            }
            self.next_change(Duration::from_secs(1)).await;
        }
    }

    /// Every object of this run that is not a kept member's pod is deleted; with nothing kept
    /// the owner ConfigMap and the Secret go too, and this waits (bounded) until the pods are gone.
    async fn delete_run_objects(&mut self, keep: &BTreeSet<String>) {
        let doomed: Vec<String> = self
            .members
            .keys()
            .filter(|m| !keep.contains(*m))
            .cloned()
            .collect();
        self.delete_pods(doomed.iter(), Duration::ZERO).await;
        if keep.is_empty() {
            if let Err(e) = delete_run(&self.client, self.ns(), &self.settings.run_id).await {
                tracing::warn!("cleaning up run {}: {e}", self.settings.run_id);
            }
        } else {
            let kept: Vec<String> = keep
                .iter()
                .filter_map(|m| self.members.get(m))
                .map(|mp| mp.pod.clone())
                .collect();
            tracing::info!(
                "kept for inspection in namespace {}: {}; remove with `driver cleanup --run {} --namespace {}`",
                self.ns(),
                kept.join(", "),
                self.settings.run_id,
                self.ns()
            );
        }
    }
}

/// Deletes every object of a run (pods, Secrets, ConfigMaps, Services carrying its label) and
/// waits up to a minute until its pods are gone. `driver cleanup --run` and a passed run use it.
pub async fn delete_run(client: &Client, ns: &str, run_id: &str) -> Result<usize, kube::Error> {
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={run_id}"));
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let mut deleted = delete_labelled::<Pod>(client, ns, &lp, &now).await?;
    deleted += delete_labelled::<Secret>(client, ns, &lp, &now).await?;
    deleted +=
        delete_labelled::<k8s_openapi::api::core::v1::Service>(client, ns, &lp, &now).await?;
    deleted += delete_labelled::<ConfigMap>(client, ns, &lp, &now).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && !pods.list(&lp).await?.items.is_empty() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(deleted)
}

/// Deletes every object of kind `K` in `ns` that `lp` selects; how many there were.
async fn delete_labelled<K>(
    client: &Client,
    ns: &str,
    lp: &ListParams,
    dp: &DeleteParams,
) -> Result<usize, kube::Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let items = api.list(lp).await?.items;
    for o in &items {
        ignore_not_found(api.delete(&o.name_any(), dp).await)?;
    }
    Ok(items.len())
}

fn ignore_not_found<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn with_component(
    mut labels: BTreeMap<String, String>,
    component: &str,
) -> BTreeMap<String, String> {
    labels.insert("app.kubernetes.io/component".into(), component.into());
    labels
}

fn memory_volume(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn plain_env(env: &indexmap::IndexMap<String, String>) -> Vec<EnvVar> {
    env.iter()
        .map(|(k, v)| EnvVar {
            name: k.clone(),
            value: Some(v.clone()),
            ..Default::default()
        })
        .collect()
}

fn field_env(name: &str, field: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Requests = limits (Guaranteed QoS, so a soak's numbers do not depend on its neighbours).
fn resources(r: Option<&Resources>) -> Option<ResourceRequirements> {
    let r = r?;
    let mut q = BTreeMap::new();
    if let Some(cpu) = &r.cpu {
        q.insert("cpu".to_string(), Quantity(cpu.clone()));
    }
    if let Some(memory) = &r.memory {
        q.insert("memory".to_string(), Quantity(memory.clone()));
    }
    if r.gpus > 0 {
        q.insert("nvidia.com/gpu".to_string(), Quantity(r.gpus.to_string()));
    }
    Some(ResourceRequirements {
        limits: Some(q.clone()),
        requests: Some(q),
        ..Default::default()
    })
}

fn to_k8s_volume(v: &ServerVolume) -> Volume {
    Volume {
        name: v.name.clone(),
        host_path: v.host_path.as_ref().map(|path| HostPathVolumeSource {
            path: path.clone(),
            type_: Some("Directory".into()),
        }),
        persistent_volume_claim: v.persistent_volume_claim.as_ref().map(|claim| {
            PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: Some(v.read_only),
            }
        }),
        config_map: v.config_map.as_ref().map(|name| ConfigMapVolumeSource {
            name: name.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn to_k8s_toleration(t: &Toleration) -> K8sToleration {
    K8sToleration {
        key: t.key.clone(),
        operator: t.operator.clone(),
        value: t.value.clone(),
        effect: t.effect.clone(),
        toleration_seconds: t.toleration_seconds,
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// One line per container: state, readiness, restarts and last termination.
fn container_lines(pod: &Pod) -> Vec<String> {
    let Some(statuses) = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
    else {
        return Vec::new();
    };
    statuses
        .iter()
        .map(|c| {
            let state = c.state.as_ref().map(describe_state).unwrap_or_default();
            let last = c
                .last_state
                .as_ref()
                .filter(|s| s.terminated.is_some())
                .map(|s| format!("; last termination: {}", describe_state(s)))
                .unwrap_or_default();
            format!(
                "{}: {state}, ready={}, restarts={}{last}",
                c.name, c.ready, c.restart_count
            )
        })
        .collect()
}

fn describe_state(s: &k8s_openapi::api::core::v1::ContainerState) -> String {
    if let Some(t) = &s.terminated {
        let mut out = format!(
            "terminated ({}, exit code {}",
            t.reason.as_deref().unwrap_or("?"),
            t.exit_code
        );
        if let Some(sig) = t.signal {
            out.push_str(&format!(", signal {sig}"));
        }
        if let Some(at) = &t.finished_at {
            out.push_str(&format!(", at {}", at.0));
        }
        if let Some(m) = t.message.as_deref().filter(|m| !m.trim().is_empty()) {
            out.push_str(&format!(": {}", m.trim()));
        }
        out.push(')');
        out
    } else if let Some(w) = &s.waiting {
        format!(
            "waiting ({}{})",
            w.reason.as_deref().unwrap_or("?"),
            w.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )
    } else if let Some(r) = &s.running {
        format!(
            "running since {}",
            r.started_at
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default()
        )
    } else {
        "unknown".into()
    }
}

/// Phase, unmet conditions and container states in one line.
fn pod_summary(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let mut parts = vec![format!(
        "pod {} {}",
        pod.name_any(),
        status.phase.as_deref().unwrap_or("Unknown")
    )];
    if let Some(reason) = status.reason.as_deref() {
        parts.push(format!(
            "{reason}: {}",
            status.message.as_deref().unwrap_or_default()
        ));
    }
    for c in status.conditions.iter().flatten() {
        if c.status != "True" {
            let why = [c.reason.as_deref(), c.message.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
            if !why.is_empty() {
                parts.push(format!("{}=False ({why})", c.type_));
            }
        }
    }
    parts.extend(container_lines(pod));
    parts.join("; ")
}

/// Whether a pod's state means its member has ended or failed, and why: a container that
/// terminated or restarted, a waiting reason that does not heal, a Failed or Succeeded pod, a
/// pod deleted, or one Pending longer than `pending_timeout`.
fn pod_exit(
    member: &str,
    pod: &Pod,
    deleted: bool,
    pending_timeout: Duration,
) -> Option<MemberExit> {
    let exit = |code: Option<i32>, signal: Option<i32>, reason: String| {
        Some(MemberExit {
            member_id: member.into(),
            code,
            signal,
            reason: Some(reason),
        })
    };
    let status = pod.status.as_ref();
    for c in status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            return exit(
                Some(t.exit_code),
                t.signal,
                format!(
                    "container {} terminated: {}, exit code {}",
                    c.name,
                    t.reason.as_deref().unwrap_or("?"),
                    t.exit_code
                ),
            );
        }
        if c.restart_count > 0 {
            let last = c
                .last_state
                .as_ref()
                .map(describe_state)
                .unwrap_or_default();
            return exit(
                None,
                None,
                format!(
                    "container {} restarted {} time(s); last: {last}",
                    c.name, c.restart_count
                ),
            );
        }
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
            && let Some(reason) = w.reason.as_deref().filter(|r| FATAL_WAITING.contains(r))
        {
            return exit(
                None,
                None,
                format!(
                    "container {} waiting: {reason}{}",
                    c.name,
                    w.message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ),
            );
        }
    }
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if phase == "Failed" || phase == "Succeeded" {
        return exit(None, None, format!("pod {}", pod_summary(pod)));
    }
    if deleted {
        return exit(None, None, format!("pod {} was deleted", pod.name_any()));
    }
    if phase == "Pending"
        && let Some(created) = pod.metadata.creation_timestamp.as_ref()
    {
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.0);
        let age = Duration::from_secs(age.as_secs().max(0) as u64);
        if age > pending_timeout {
            return exit(
                None,
                None,
                format!("Pending for {}s: {}", age.as_secs(), pod_summary(pod)),
            );
        }
    }
    None
}

/// Keeps `seen` current from one watch on the run's pods and wakes whoever waits on `changed`.
async fn watch_pods(
    pods: Api<Pod>,
    selector: String,
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    changed: Arc<Notify>,
) {
    use kube::runtime::WatchStreamExt;
    let stream = watcher(pods, watcher::Config::default().labels(&selector)).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let (pod, deleted) = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
            Ok(watcher::Event::Delete(p)) => (p, true),
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!("watching pods ({selector}): {e}");
                continue;
            }
        };
        if let Some(member) = pod.labels().get(MEMBER_LABEL).cloned() {
            seen.lock()
                .expect("seen")
                .insert(member, Seen { pod, deleted });
            changed.notify_waiters();
        }
    }
}

#[async_trait::async_trait]
impl Launcher for KubeLauncher {
    fn name(&self) -> &'static str {
        "kube"
    }

    async fn start_server(&mut self, server: &ServerMember) -> Result<(), LaunchError> {
        let pod = self
            .server_pod(server)
            .map_err(|reason| LaunchError::Member {
                member: server.name.clone(),
                reason,
            })?;
        let command = container_command(&pod);
        self.apply_pod(&server.name, pod).await?;
        self.members.insert(
            server.name.clone(),
            MemberPod {
                pod: pod_name(&self.settings.run_id, &server.name),
                role: "server",
                container: SERVER_CONTAINER,
                command,
            },
        );
        Ok(())
    }

    async fn wait_servers_ready(
        &mut self,
        timeout: Duration,
    ) -> Result<Vec<ServerEndpoint>, LaunchError> {
        let deadline = Instant::now() + timeout;
        let servers: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.role == "server")
            .map(|(name, _)| name.clone())
            .collect();
        loop {
            let mut waiting = None;
            for name in &servers {
                let Some(seen) = self.seen(name) else {
                    waiting.get_or_insert(name.clone());
                    continue;
                };
                if let Some(exit) =
                    pod_exit(name, &seen.pod, seen.deleted, self.settings.pending_timeout)
                {
                    return Err(LaunchError::Member {
                        member: name.clone(),
                        reason: exit.describe(),
                    });
                }
                match (is_ready(&seen.pod), pod_ip(&seen.pod)) {
                    (true, Some(ip)) => {
                        self.endpoints.insert(
                            name.clone(),
                            ServerEndpoint {
                                member: name.clone(),
                                grpc: format!("{ip}:{GRPC_PORT}"),
                                http: format!("{ip}:{HTTP_PORT}"),
                                metrics: format!("{ip}:{METRICS_PORT}"),
                            },
                        );
                    }
                    _ => {
                        waiting.get_or_insert(name.clone());
                    }
                }
            }
            let Some(first_waiting) = waiting else {
                return Ok(servers
                    .iter()
                    .filter_map(|s| self.endpoints.get(s).cloned())
                    .collect());
            };
            if Instant::now() >= deadline {
                return Err(LaunchError::Member {
                    reason: format!(
                        "not ready after {timeout:?}: {}",
                        self.not_ready_reason(&first_waiting).await
                    ),
                    member: first_waiting,
                });
            }
            self.next_change(Duration::from_secs(1)).await;
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
        let pod = self
            .client_pod(client, &assignment)
            .map_err(|reason| LaunchError::Member {
                member: client.name.clone(),
                reason,
            })?;
        let command = format!(
            "{STORE_URL_ENV}=<from Secret {}> {}",
            secret_name(&self.settings.run_id),
            container_command(&pod)
        );
        self.apply_pod(&client.name, pod).await?;
        self.members.insert(
            client.name.clone(),
            MemberPod {
                pod: pod_name(&self.settings.run_id, &client.name),
                role: "client",
                container: CLIENT_CONTAINER,
                command,
            },
        );
        Ok(())
    }

    async fn exited(&mut self) -> Vec<MemberExit> {
        let mut ended = Vec::new();
        for name in self.members.keys() {
            if self.exits.contains_key(name) || self.stopping.contains(name) {
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
    }

    async fn stop_servers(&mut self, grace: Duration) {
        let servers: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.role == "server")
            .map(|(name, _)| name.clone())
            .collect();
        self.stopping.extend(servers.iter().cloned());
        self.delete_pods(servers.iter(), grace).await;
    }

    async fn cleanup(&mut self, keep: &BTreeSet<String>) {
        self.delete_run_objects(keep).await;
    }

    async fn diagnostics(&mut self, member_id: &str) -> serde_json::Value {
        let Some(mp) = self.members.get(member_id) else {
            return serde_json::json!({ "launcher": "kube" });
        };
        let (pod_name, container) = (mp.pod.clone(), mp.container);
        let ns = self.ns().to_string();
        // A process killed a moment ago shows as terminated only when the kubelet's next status
        // update arrives (~1 s): give it that long, so the report shows the termination.
        let deadline = Instant::now() + DIAGNOSTICS_SETTLE;
        while self.ended(member_id).is_none() && Instant::now() < deadline {
            self.next_change(Duration::from_millis(250)).await;
        }
        // A fresh read: the watch may lag the kubelet by a moment.
        let pod = match self.pods.get(&pod_name).await {
            Ok(p) => Some(p),
            Err(_) => self.seen(member_id).map(|s| s.pod),
        };
        let status = pod
            .as_ref()
            .and_then(|p| p.status.clone())
            .unwrap_or_default();
        let restarts: i32 = status
            .container_statuses
            .iter()
            .flatten()
            .map(|c| c.restart_count)
            .sum();
        let had_previous = restarts > 0;
        let log_tail = self.log_tail(&pod_name, container, false).await;
        let previous_log_tail = if had_previous {
            self.log_tail(&pod_name, container, true).await
        } else {
            None
        };
        let events = self.pod_events(&pod_name).await;
        let exit = self.exits.get(member_id).map(MemberExit::describe);
        let kubectl = vec![
            format!("kubectl -n {ns} describe pod {pod_name}"),
            format!("kubectl -n {ns} logs {pod_name} -c {container}"),
            format!("kubectl -n {ns} logs {pod_name} -c {container} --previous"),
            format!("kubectl -n {ns} exec -it {pod_name} -c {container} -- sh"),
            format!(
                "kubectl -n {ns} get pods -l {RUN_LABEL}={} -o wide",
                self.settings.run_id
            ),
        ];
        serde_json::json!({
            "launcher": "kube",
            "exit": exit,
            "namespace": ns,
            "pod": pod_name,
            "phase": status.phase,
            "status_reason": status.reason,
            "node": pod.as_ref().and_then(|p| p.spec.as_ref()).and_then(|s| s.node_name.clone()),
            "pod_ip": status.pod_ip,
            "restarts": restarts,
            "containers": pod.as_ref().map(container_lines).unwrap_or_default(),
            "summary": pod.as_ref().map(pod_summary),
            "events": events,
            "log_tail": log_tail,
            "previous_log_tail": previous_log_tail,
            "command": self.command_line(member_id),
            "kubectl": kubectl,
        })
    }

    async fn server_live(&mut self, member_id: &str, timeout: Duration) -> Result<(), String> {
        let ep = self
            .endpoints
            .get(member_id)
            .ok_or_else(|| format!("no ready server {member_id}"))?;
        tritonserver::probe_live(&ep.http, timeout).await
    }

    async fn server_metrics(&mut self, member_id: &str) -> Option<String> {
        let ep = self.endpoints.get(member_id)?;
        tritonserver::metrics_text(&ep.metrics).await
    }

    fn command_line(&self, member_id: &str) -> Option<String> {
        self.members.get(member_id).map(|m| m.command.clone())
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
}

/// The container's command line as a shell line (what runs inside the pod).
fn container_command(pod: &Pod) -> String {
    let Some(c) = pod.spec.as_ref().and_then(|s| s.containers.first()) else {
        return String::new();
    };
    c.command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}
