//! The pods of a run as pure functions: a member, its template and the run's context in, the
//! k8s-openapi object out. Nothing here talks to a cluster, so the specs are tested against
//! YAML fixtures (`testdata/`).

use super::restricted;
use super::{
    CLIENT_CONTAINER, FIELD_MANAGER, GRPC_PORT, HTTP_PORT, METRICS_PORT, RUN_LABEL,
    SERVER_CONTAINER, WORKER_METRICS_PORT,
};
use crate::launcher::STORE_URL_ENV;
use crate::matrix::{
    ClientMember, MODEL_CONFIGS_VOLUME, MODEL_IMAGE_VOLUME, ModelImage, MountedConfig, Resources,
    SHM_VOLUME, ServerMember, ServerTemplate, ServerVolume, TMP_VOLUME, TRACES_VOLUME, Toleration,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, HostPathVolumeSource, KeyToPath, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, Probe, ResourceRequirements,
    SecretKeySelector, Service, ServicePort, ServiceSpec, Toleration as K8sToleration, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use stress_common::tritonserver::shell_quote;

/// The label that says whether a pod is a server or a client ([`SERVER_ROLE`], [`CLIENT_ROLE`]).
pub(crate) const ROLE_LABEL: &str = "triton-stress/role";
pub(crate) const SERVER_ROLE: &str = "server";
pub(crate) const CLIENT_ROLE: &str = "client";
pub(crate) const GROUP_LABEL: &str = "triton-stress/group";
const INDEX_LABEL: &str = "triton-stress/index";
/// The label that names a pod's member; the watch keys its pods by it.
pub const MEMBER_LABEL: &str = "triton-stress/member";

/// What every pod of a run shares beyond its member.
#[derive(Debug, Clone)]
pub struct PodContext {
    pub run_id: String,
    /// `Never` on a cluster without a registry, else `IfNotPresent`.
    pub image_pull_policy: String,
    /// The run's owner ConfigMap: deleting it deletes the pods.
    pub owner: OwnerReference,
    /// Every pod ends by itself this long after it starts (`activeDeadlineSeconds`), so the
    /// pods of a driver that vanished do not run forever; see [`pod_deadline`].
    pub active_deadline_seconds: Option<i64>,
}

/// How long a pod of a run may live: the whole run (server start-up, warm-up, the clients'
/// duration) plus a margin for the stop and the report. A run without a duration (0: until
/// stopped) gets no deadline.
pub fn pod_deadline(
    duration: std::time::Duration,
    warmup: std::time::Duration,
    server_ready_timeout: std::time::Duration,
) -> Option<i64> {
    const MARGIN: std::time::Duration = std::time::Duration::from_secs(15 * 60);
    if duration.is_zero() {
        return None;
    }
    let total = duration
        .saturating_add(warmup)
        .saturating_add(server_ready_timeout)
        .saturating_add(MARGIN);
    Some(i64::try_from(total.as_secs()).unwrap_or(i64::MAX))
}

pub fn owner_name(run_id: &str) -> String {
    format!("triton-stress-{run_id}")
}

pub fn secret_name(run_id: &str) -> String {
    format!("triton-stress-{run_id}-store")
}

pub fn pod_name(run_id: &str, member: &str) -> String {
    format!("{run_id}-{member}")
}

/// The labels of every object of a run.
pub fn run_labels(run_id: &str) -> BTreeMap<String, String> {
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

pub fn with_component(
    mut labels: BTreeMap<String, String>,
    component: &str,
) -> BTreeMap<String, String> {
    labels.insert("app.kubernetes.io/component".into(), component.into());
    labels
}

/// A member pod's labels: the run's, plus its role, group, index and member name.
fn member_labels(
    run_id: &str,
    role: &str,
    group: &str,
    index: u32,
    member: &str,
) -> BTreeMap<String, String> {
    let mut labels = with_component(run_labels(run_id), role);
    labels.extend([
        (ROLE_LABEL.to_string(), role.to_string()),
        (GROUP_LABEL.to_string(), group.to_string()),
        (INDEX_LABEL.to_string(), index.to_string()),
        (MEMBER_LABEL.to_string(), member.to_string()),
    ]);
    labels
}

pub const MODEL_IMAGE_CONTAINER: &str = "model-image";
/// Where the init container sees that emptyDir: a path no models image should hold its
/// repository under (the mount would hide it).
const MODEL_IMAGE_COPY_TARGET: &str = "/triton-stress-model-copy";

/// A template the kube launcher cannot make a pod of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    #[error("the kube launcher runs images; this template names a binary (use --launcher local)")]
    NotAnImage,
}

/// The templates of `plan` that name a binary where a pod needs an image, each at its field
/// (`server_templates.T.tritonserver.binary`, `client_templates.T.worker.binary`).
pub fn unlaunchable(plan: &crate::plan::RunPlan) -> Vec<crate::launcher::Unlaunchable> {
    let servers = plan
        .servers
        .iter()
        .filter(|s| s.template.tritonserver.image().is_none())
        .map(|s| ("server_templates", &s.template_name, "tritonserver"));
    let clients = plan
        .clients
        .iter()
        .filter(|c| c.template.worker.image().is_none())
        .map(|c| ("client_templates", &c.template_name, "worker"));
    let named: std::collections::BTreeSet<_> = servers.chain(clients).collect();
    named
        .into_iter()
        .map(
            |(templates, name, artifact)| crate::launcher::Unlaunchable {
                field: crate::matrix::FieldPath::root()
                    .key(templates)
                    .key(name)
                    .key(artifact)
                    .key("binary"),
                why: PodError::NotAnImage.to_string(),
            },
        )
        .collect()
}

/// The Triton pod of a server member.
pub fn server_pod(s: &ServerMember, ctx: &PodContext) -> Result<Pod, PodError> {
    let t = &s.template;
    let image = t.tritonserver.image().ok_or(PodError::NotAnImage)?;
    let args = server_args(s);
    let (mounts, volumes) = server_volumes(s, ctx);
    let init_containers = t
        .model_image
        .as_ref()
        .map(|m| vec![model_copier(m, t.resources.as_ref(), ctx)]);
    let container = server_container(t, image, ctx, args, mounts);
    let mut pod = pod(
        ctx,
        &s.name,
        member_labels(&ctx.run_id, SERVER_ROLE, &s.group, s.index, &s.name),
        container,
        volumes,
        &t.node_selector,
        &t.tolerations,
    );
    if let Some(spec) = pod.spec.as_mut() {
        spec.init_containers = init_containers;
    }
    Ok(pod)
}

/// `tritonserver`'s arguments: the repositories, the ports, the template's own, then tracing.
fn server_args(s: &ServerMember) -> Vec<String> {
    let t = &s.template;
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
    if let Some(trace) = t.trace.as_ref().filter(|t| !t.writes_files()) {
        args.extend(trace.args());
    }
    if let Some(trace) = t.trace.as_ref().filter(|t| t.writes_files()) {
        args.extend([
            "--trace-config".into(),
            format!("triton,file={}/{}.json", TRACES_VOLUME.1, s.name),
        ]);
        args.extend(trace.args());
    }
    args
}

/// The server container's mounts and the pod's volumes behind them: /dev/shm, the traces'
/// directory, the model image's copy, the template's volumes and a sweep variant's configs.
fn server_volumes(s: &ServerMember, ctx: &PodContext) -> (Vec<VolumeMount>, Vec<Volume>) {
    let t = &s.template;
    let mut mounts = vec![VolumeMount {
        // The python backend's stubs talk to the server through /dev/shm; a container's
        // default 64 MiB is too small for a few model instances.
        name: SHM_VOLUME.0.into(),
        mount_path: SHM_VOLUME.1.into(),
        ..Default::default()
    }];
    let mut volumes = vec![memory_volume(SHM_VOLUME.0)];
    if t.trace.as_ref().is_some_and(|t| t.writes_files()) {
        mounts.push(VolumeMount {
            name: TRACES_VOLUME.0.into(),
            mount_path: TRACES_VOLUME.1.into(),
            ..Default::default()
        });
        volumes.push(Volume {
            name: TRACES_VOLUME.0.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
    }
    if let Some(m) = &t.model_image {
        mounts.push(VolumeMount {
            name: MODEL_IMAGE_VOLUME.into(),
            mount_path: m.path.clone(),
            // The server serves the copy; it never writes to it.
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(Volume {
            name: MODEL_IMAGE_VOLUME.into(),
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
    if !t.mounted_configs.is_empty() {
        volumes.push(mount_configs(&t.mounted_configs, ctx, &mut mounts));
    }
    (mounts, volumes)
}

/// A sweep variant's configs, from the run's owner ConfigMap: each file mounted alone (subPath)
/// over the model's own, so the rest of the repository stays as it is. Adds the mounts to
/// `mounts`; returns the ConfigMap's volume.
fn mount_configs(
    configs: &[MountedConfig],
    ctx: &PodContext,
    mounts: &mut Vec<VolumeMount>,
) -> Volume {
    let mut items = Vec::with_capacity(configs.len());
    for c in configs {
        let key = model_config_key(&c.model);
        mounts.push(VolumeMount {
            name: MODEL_CONFIGS_VOLUME.into(),
            mount_path: format!(
                "{}/{}/config.pbtxt",
                c.repository.trim_end_matches('/'),
                c.model
            ),
            sub_path: Some(key.clone()),
            read_only: Some(true),
            ..Default::default()
        });
        items.push(KeyToPath {
            key: key.clone(),
            path: key,
            ..Default::default()
        });
    }
    Volume {
        name: MODEL_CONFIGS_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: owner_name(&ctx.run_id),
            items: Some(items),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The `tritonserver` container: its ports, and a readiness probe on Triton's ready endpoint.
fn server_container(
    t: &ServerTemplate,
    image: &str,
    ctx: &PodContext,
    args: Vec<String>,
    mounts: Vec<VolumeMount>,
) -> Container {
    let port = |name: &str, p: u16| ContainerPort {
        name: Some(name.into()),
        container_port: p.into(),
        ..Default::default()
    };
    Container {
        name: SERVER_CONTAINER.into(),
        image: Some(image.into()),
        image_pull_policy: Some(ctx.image_pull_policy.clone()),
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
    }
}

/// The init container that copies a `model_image`'s repository into the pod's emptyDir. `cp`
/// is all it needs from the image, so a plain models image (docker/models) or any image with
/// coreutils or busybox works. It gets the server's CPU and memory (not its GPUs): a pod is
/// Guaranteed only when every container, init containers included, has requests = limits.
fn model_copier(m: &ModelImage, r: Option<&Resources>, ctx: &PodContext) -> Container {
    Container {
        name: MODEL_IMAGE_CONTAINER.into(),
        security_context: Some(restricted::container_security_context()),
        image: Some(m.image.clone()),
        image_pull_policy: Some(ctx.image_pull_policy.clone()),
        command: Some(vec![
            "cp".into(),
            "-R".into(),
            format!("{}/.", m.source.trim_end_matches('/')),
            format!("{MODEL_IMAGE_COPY_TARGET}/"),
        ]),
        resources: resources_without_gpus(r),
        volume_mounts: Some(vec![VolumeMount {
            name: MODEL_IMAGE_VOLUME.into(),
            mount_path: MODEL_IMAGE_COPY_TARGET.into(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// A foreign client's own image gets the worker (its supervisor) from the worker's image: an
/// init container copies it into an emptyDir that the client's container runs it from.
pub const WORKER_COPY_CONTAINER: &str = "worker-copy";
const WORKER_COPY_VOLUME: (&str, &str) = ("triton-stress-worker", "/opt/triton-stress");
/// Where the worker's image holds the worker (docker/worker).
const WORKER_IN_ITS_IMAGE: &str = "/usr/local/bin/worker";

/// The init container that copies the worker out of `worker_image`.
fn worker_copier(worker_image: &str, r: Option<&Resources>, ctx: &PodContext) -> Container {
    Container {
        name: WORKER_COPY_CONTAINER.into(),
        security_context: Some(restricted::container_security_context()),
        image: Some(worker_image.into()),
        image_pull_policy: Some(ctx.image_pull_policy.clone()),
        command: Some(vec![
            "cp".into(),
            WORKER_IN_ITS_IMAGE.into(),
            format!("{}/worker", WORKER_COPY_VOLUME.1),
        ]),
        resources: resources_without_gpus(r),
        volume_mounts: Some(vec![worker_copy_mount(false)]),
        ..Default::default()
    }
}

fn worker_copy_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: WORKER_COPY_VOLUME.0.into(),
        mount_path: WORKER_COPY_VOLUME.1.into(),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// The worker pod of a client member, running `worker_args` (see `plan::worker_args`);
/// the store URL comes from the run's Secret. A foreign client with an image of its own runs
/// in that image, under the worker copied in ([`worker_copier`]).
pub fn client_pod(
    c: &ClientMember,
    worker_args: Vec<String>,
    ctx: &PodContext,
) -> Result<Pod, PodError> {
    let t = &c.template;
    let worker_image = t.worker.image().ok_or(PodError::NotAnImage)?;
    let own_image = t.client.as_ref().and_then(|f| f.image.as_deref());
    let (image, command) = match own_image {
        Some(image) => (image, format!("{}/worker", WORKER_COPY_VOLUME.1)),
        None => (worker_image, "worker".to_string()),
    };
    let mut args = worker_args;
    // On the pod's own address (Kubernetes expands $(POD_IP) from the env below), not every
    // interface.
    if !t.extra_args.iter().any(|a| a.starts_with("--metrics-addr")) {
        args.extend([
            "--metrics-addr".into(),
            format!("$(POD_IP):{WORKER_METRICS_PORT}"),
        ]);
    }
    let mut env = vec![
        EnvVar {
            name: STORE_URL_ENV.into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret_name(&ctx.run_id),
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
        image_pull_policy: Some(ctx.image_pull_policy.clone()),
        command: Some(vec![command]),
        args: Some(args),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("metrics".into()),
            container_port: WORKER_METRICS_PORT.into(),
            ..Default::default()
        }]),
        resources: resources(t.resources.as_ref()),
        volume_mounts: own_image.map(|_| vec![worker_copy_mount(true)]),
        ..Default::default()
    };
    let volumes = own_image.map_or_else(Vec::new, |_| {
        vec![Volume {
            name: WORKER_COPY_VOLUME.0.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]
    });
    let mut pod = pod(
        ctx,
        &c.name,
        member_labels(&ctx.run_id, CLIENT_ROLE, &c.group, c.index, &c.name),
        container,
        volumes,
        &t.node_selector,
        &t.tolerations,
    );
    if let (Some(_), Some(spec)) = (own_image, pod.spec.as_mut()) {
        spec.init_containers = Some(vec![worker_copier(worker_image, t.resources.as_ref(), ctx)]);
    }
    Ok(pod)
}

fn pod(
    ctx: &PodContext,
    member: &str,
    labels: BTreeMap<String, String>,
    mut container: Container,
    mut volumes: Vec<Volume>,
    node_selector: &indexmap::IndexMap<String, String>,
    tolerations: &[Toleration],
) -> Pod {
    // The restricted Pod Security Standard: non-root, no escalation, no capabilities,
    // RuntimeDefault seccomp, a read-only root filesystem with a writable /tmp.
    container.security_context = Some(restricted::container_security_context());
    container
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(VolumeMount {
            name: TMP_VOLUME.0.into(),
            mount_path: TMP_VOLUME.1.into(),
            ..Default::default()
        });
    volumes.push(Volume {
        name: TMP_VOLUME.0.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    });
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&ctx.run_id, member)),
            labels: Some(labels),
            owner_references: Some(vec![ctx.owner.clone()]),
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
            security_context: Some(restricted::pod_security_context()),
            active_deadline_seconds: ctx.active_deadline_seconds,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A server's Service name: a DNS-1035 label (a letter first, 63 characters at most), which a
/// pod name (the run id first) need not be.
pub fn service_name(run_id: &str, member: &str) -> String {
    let name = format!("ts-{}", pod_name(run_id, member));
    if name.len() <= 63 {
        return name;
    }
    let hash = crate::matrix::faults::default_seed(&name);
    format!("ts-{hash:016x}")
}

/// The ClusterIP Service in front of a server member's pod: clients address it, not the pod,
/// so a pod deleted and created again for an injected fault keeps its clients' address. Only a
/// Ready pod is behind it (Triton's readiness probe), so a client reaches no half-started server.
pub fn server_service(s: &ServerMember, ctx: &PodContext) -> Service {
    let selector = BTreeMap::from([
        (RUN_LABEL.to_string(), ctx.run_id.clone()),
        (MEMBER_LABEL.to_string(), s.name.to_string()),
    ]);
    let port = |name: &str, port: u16| ServicePort {
        name: Some(name.into()),
        port: i32::from(port),
        target_port: Some(IntOrString::Int(i32::from(port))),
        protocol: Some("TCP".into()),
        ..Default::default()
    };
    Service {
        metadata: ObjectMeta {
            name: Some(service_name(&ctx.run_id, &s.name)),
            labels: Some(member_labels(
                &ctx.run_id,
                "server",
                &s.group,
                s.index,
                &s.name,
            )),
            owner_references: Some(vec![ctx.owner.clone()]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector),
            ports: Some(vec![
                port("http", HTTP_PORT),
                port("grpc", GRPC_PORT),
                port("metrics", METRICS_PORT),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container's command line as a shell line (what runs inside the pod).
pub fn container_command(pod: &Pod) -> String {
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

/// The owner ConfigMap's key of a sweep variant's config.pbtxt for `model`.
pub fn model_config_key(model: &str) -> String {
    format!("model-config.{model}")
}

/// A server's CPU and memory without its GPUs (for a container beside Triton that needs none).
pub(crate) fn resources_without_gpus(r: Option<&Resources>) -> Option<ResourceRequirements> {
    resources(
        r.map(|r| Resources {
            gpus: 0,
            ..r.clone()
        })
        .as_ref(),
    )
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::matrix::Matrix;
    use std::path::PathBuf;

    /// Servers and clients with every pod option the matrix has: a model image, volumes of
    /// each kind, trace, resources with a GPU, node selector, tolerations, environment.
    const MATRIX: &str = r#"
version: 1
run: { name: specs, duration: 1m }
server_templates:
  gpu:
    tritonserver: { image: "nvcr.io/nvidia/tritonserver:24.10-py3" }
    model_repositories: [/models, /mnt/extra-models]
    model_image: { image: "triton-stress/models:dev", path: /models }
    args: ["--log-verbose=1"]
    resources: { cpu: "4", memory: 16Gi, gpus: 1 }
    env: { OMP_NUM_THREADS: "2" }
    trace: { level: TIMESTAMPS, rate: 100 }
    volumes:
      - { name: extra-models, mount_path: /mnt/extra-models, host_path: /srv/models }
      - { name: cache, mount_path: /cache, read_only: false, persistent_volume_claim: triton-cache }
      - { name: configs, mount_path: /configs, config_map: model-configs }
    node_selector: { nvidia.com/gpu.present: "true" }
    tolerations:
      - { key: nvidia.com/gpu, operator: Exists, effect: NoSchedule }
      - { key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 30 }
  cpu:
    tritonserver: { image: "triton-stress/tritonserver:dev" }
    model_repositories: [/models]
server_groups:
  triton: { template: gpu, instances: 2 }
  small: { template: cpu, instances: 1 }
client_templates:
  grpc-all:
    worker: { image: "triton-stress/worker:dev" }
    protocol: grpc
    concurrency: 3
    resources: { cpu: 250m, memory: 512Mi }
    env: { RUST_LOG: debug }
    node_selector: { pool: clients }
    tolerations: [{ operator: Exists }]
  python:
    worker: { image: "triton-stress/worker:dev" }
    protocol: grpc
    models: [{ name: add_sub }]
    client:
      command: [python3, /opt/clients/tritonclient_stress.py]
      image: "triton-stress/python-client-2.51:dev"
      interface: 1
client_groups:
  clients: { template: grpc-all, instances: 1, target: triton }
  python-clients: { template: python, instances: 1, target: small }
"#;

    pub(crate) fn matrix() -> Matrix {
        crate::matrix::parse(MATRIX, "specs.yaml").expect("the test matrix is valid")
    }

    /// [`matrix`] as a sweep variant's: two models' configs mounted, one of them in a second
    /// repository.
    pub(crate) fn variant_matrix() -> Matrix {
        use crate::matrix::MountedConfig;
        let mut m = matrix();
        m.server_templates.get_mut("gpu").unwrap().mounted_configs = vec![
            MountedConfig {
                model: "fixed_capacity".into(),
                repository: "/models".into(),
                text: "name: \"fixed_capacity\"\n".into(),
            },
            MountedConfig {
                model: "simple".into(),
                repository: "/mnt/extra-models/".into(),
                text: "name: \"simple\"\n".into(),
            },
        ];
        m
    }

    pub(crate) fn context() -> PodContext {
        PodContext {
            run_id: "specs-20260101-000000-abcd".into(),
            image_pull_policy: "IfNotPresent".into(),
            owner: OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: owner_name("specs-20260101-000000-abcd"),
                uid: "0b7a4c1e-0000-4000-8000-000000000001".into(),
                controller: Some(true),
                block_owner_deletion: None,
            },
            active_deadline_seconds: pod_deadline(
                std::time::Duration::from_secs(3600),
                std::time::Duration::from_secs(10),
                std::time::Duration::from_secs(120),
            ),
        }
    }

    #[test]
    fn pods_end_by_themselves_after_the_run_and_a_margin() {
        let s = std::time::Duration::from_secs;
        assert_eq!(
            pod_deadline(s(3600), s(10), s(120)),
            Some(3600 + 10 + 120 + 900)
        );
        assert_eq!(pod_deadline(s(0), s(10), s(120)), None, "0: until stopped");
        assert_eq!(
            pod_deadline(crate::matrix::bounds::MAX_DURATION, s(86_400), s(86_400)),
            Some(30 * 86_400 + 2 * 86_400 + 900)
        );
    }

    /// Every pod the launcher makes for the matrices here passes the restricted Pod Security
    /// Standard, but for the host path the test matrix asks for (said, not refused).
    #[test]
    fn every_generated_pod_is_restricted() {
        let nightly =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../test-matrices/nightly-soak.yaml");
        for m in [matrix(), crate::matrix::load(&nightly).unwrap()] {
            let mut pods: Vec<Pod> = m
                .servers()
                .iter()
                .map(|s| server_pod(s, &context()).unwrap())
                .collect();
            pods.extend(m.clients().iter().map(|c| {
                client_pod(c, vec!["--servers".into(), "a:1".into()], &context()).unwrap()
            }));
            for pod in pods {
                let found: Vec<String> = restricted::violations(pod.spec.as_ref().unwrap())
                    .into_iter()
                    .filter(|v| !v.ends_with("is hostPath"))
                    .collect();
                assert_eq!(found, Vec::<String>::new(), "{:?}", pod.metadata.name);
            }
        }
    }

    /// Compares the pod as YAML with `testdata/<name>`; `UPDATE_FIXTURES=1` rewrites the file
    /// instead (then read the diff: the fixture is the reviewed spec).
    pub(crate) fn assert_fixture(name: &str, pod: &impl serde::Serialize) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("src/launcher/kube/testdata")
            .join(name);
        let yaml = serde_saphyr::to_string(pod).expect("an object serialises to YAML");
        if std::env::var_os("UPDATE_FIXTURES").is_some() {
            std::fs::write(&path, &yaml).unwrap();
            return;
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        assert!(
            yaml == expected,
            "the pod differs from {} (UPDATE_FIXTURES=1 rewrites it):\n{yaml}",
            path.display()
        );
    }

    /// A server's Service selects exactly its member's pod (the pod's own labels), on Triton's
    /// three ports, owned by the run; its name is a DNS-1035 label even for a long run id.
    #[test]
    fn server_service_selects_its_member_pod() {
        let m = matrix();
        let server = &m.servers()[0];
        let service = server_service(server, &context());
        assert_fixture("server-service.yaml", &service);
        let pod = server_pod(server, &context()).unwrap();
        let pod_labels = pod.metadata.labels.unwrap();
        let selector = service.spec.unwrap().selector.unwrap();
        assert!(!selector.is_empty());
        for (k, v) in &selector {
            assert_eq!(pod_labels.get(k), Some(v), "{k}");
        }
        let other = server_pod(&m.servers()[1], &context()).unwrap();
        let other_labels = other.metadata.labels.unwrap();
        assert!(selector.iter().any(|(k, v)| other_labels.get(k) != Some(v)));
        let dns_1035 = |n: &str| {
            n.len() <= 63
                && n.starts_with(|c: char| c.is_ascii_lowercase())
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !n.ends_with('-')
        };
        for run_id in ["20261128-173000-abcd", &"a".repeat(63)] {
            let name = service_name(run_id, "triton-12");
            assert!(dns_1035(&name), "{name}");
        }
        assert_ne!(
            service_name(&"a".repeat(63), "triton-1"),
            service_name(&"a".repeat(63), "triton-2")
        );
    }

    #[test]
    fn server_pod_with_volumes_trace_gpu_and_tolerations() {
        let m = matrix();
        let server = &m.servers()[1];
        assert_eq!(server.name, "triton-1");
        assert_fixture("server-gpu.yaml", &server_pod(server, &context()).unwrap());
    }

    /// The nightly soak as committed: NVIDIA's image, which holds no models, gets the QA
    /// models copied in by an init container before Triton starts, and serves that copy.
    #[test]
    fn nightly_soak_servers_get_the_qa_models_from_the_models_image() {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../test-matrices/nightly-soak.yaml");
        let m = crate::matrix::load(&path).expect("the nightly matrix loads");
        let pod = server_pod(&m.servers()[0], &context()).unwrap();
        let spec = pod.spec.unwrap();
        let triton = &spec.containers[0];
        assert!(
            triton
                .image
                .as_deref()
                .unwrap()
                .starts_with("nvcr.io/nvidia/tritonserver:"),
            "{triton:?}"
        );
        assert!(
            triton
                .args
                .iter()
                .flatten()
                .any(|a| a == "--model-repository=/models"),
            "{triton:?}"
        );
        let mount = triton
            .volume_mounts
            .iter()
            .flatten()
            .find(|v| v.mount_path == "/models")
            .expect("the copy is mounted at /models");
        assert_eq!(
            (mount.name.as_str(), mount.read_only),
            (MODEL_IMAGE_VOLUME, Some(true))
        );
        let init = spec.init_containers.expect("an init container");
        assert_eq!(init.len(), 1);
        assert_eq!(init[0].image.as_deref(), Some("triton-stress/models:dev"));
        assert_eq!(
            init[0].command.as_deref().unwrap()[..3],
            ["cp", "-R", "/models/."].map(String::from)
        );
        let copy = &init[0].volume_mounts.as_ref().unwrap()[0];
        assert_eq!(copy.name, MODEL_IMAGE_VOLUME);
        assert_eq!(
            init[0].command.as_ref().unwrap()[3],
            format!("{}/", copy.mount_path)
        );
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == MODEL_IMAGE_VOLUME)
            .unwrap();
        assert!(volume.empty_dir.is_some(), "{volume:?}");
        // The GPU stays with Triton; the copy gets CPU and memory alike (Guaranteed QoS).
        let limits = init[0].resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert!(
            !limits.contains_key("nvidia.com/gpu") && limits.contains_key("cpu"),
            "{limits:?}"
        );
    }

    #[test]
    fn server_pod_with_defaults_only() {
        let m = matrix();
        let server = m
            .servers()
            .into_iter()
            .find(|s| s.name == "small-0")
            .unwrap();
        assert_fixture(
            "server-minimal.yaml",
            &server_pod(&server, &context()).unwrap(),
        );
    }

    #[test]
    fn worker_pod_gets_store_url_from_the_secret() {
        let m = matrix();
        let client = &m.clients()[0];
        let args = [
            "--servers",
            "10.244.0.7:8001,10.244.0.8:8001",
            "--protocol",
            "grpc",
        ]
        .map(String::from)
        .to_vec();
        assert_fixture(
            "worker.yaml",
            &client_pod(client, args, &context()).unwrap(),
        );
    }

    /// A foreign client with an image of its own runs there under the worker, which an init
    /// container copies out of the worker's image into an emptyDir the client mounts read-only.
    #[test]
    fn a_foreign_client_s_own_image_runs_the_worker_copied_in() {
        let m = matrix();
        let client = m
            .clients()
            .into_iter()
            .find(|c| c.group == "python-clients")
            .unwrap();
        let args = [
            "--servers",
            "10.244.0.9:8001",
            "--client-command",
            "python3",
        ]
        .map(String::from)
        .to_vec();
        let pod = client_pod(&client, args, &context()).unwrap();
        assert_fixture("foreign-client.yaml", &pod);
        let spec = pod.spec.unwrap();
        let (init, main) = (&spec.init_containers.unwrap()[0], &spec.containers[0]);
        assert_eq!(init.image.as_deref(), Some("triton-stress/worker:dev"));
        assert_eq!(
            main.image.as_deref(),
            Some("triton-stress/python-client-2.51:dev")
        );
        let copied = init.command.as_ref().unwrap().last().unwrap();
        assert_eq!(main.command.as_deref(), Some(&[copied.clone()][..]));
        let mount = &main.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(mount.read_only, Some(true));
        assert!(copied.starts_with(&mount.mount_path), "{copied}");
    }

    /// A sweep variant's server (its template's mounted configs): each config.pbtxt comes
    /// from the run's owner ConfigMap, mounted alone (subPath) and read-only over the model's
    /// own in its repository, under the key the owner ConfigMap holds it by.
    #[test]
    fn a_sweep_variant_s_configs_are_mounted_over_the_models_own() {
        let m = variant_matrix();
        let server = &m.servers()[0];
        let pod = server_pod(server, &context()).unwrap();
        assert_fixture("server-variant.yaml", &pod);
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            restricted::violations(spec)
                .into_iter()
                .filter(|v| !v.ends_with("is hostPath"))
                .count(),
            0
        );
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == MODEL_CONFIGS_VOLUME)
            .unwrap();
        let source = volume.config_map.as_ref().unwrap();
        assert_eq!(source.name, owner_name(&context().run_id));
        let keys: Vec<&str> = source
            .items
            .iter()
            .flatten()
            .map(|i| i.key.as_str())
            .collect();
        assert_eq!(keys, ["model-config.fixed_capacity", "model-config.simple"]);
        let mounts: Vec<(&str, Option<&str>, Option<bool>)> = spec.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .filter(|v| v.name == MODEL_CONFIGS_VOLUME)
            .map(|v| (v.mount_path.as_str(), v.sub_path.as_deref(), v.read_only))
            .collect();
        assert_eq!(
            mounts,
            [
                (
                    "/models/fixed_capacity/config.pbtxt",
                    Some("model-config.fixed_capacity"),
                    Some(true)
                ),
                (
                    "/mnt/extra-models/simple/config.pbtxt",
                    Some("model-config.simple"),
                    Some(true)
                ),
            ]
        );
        // Another template's servers mount nothing.
        let small = m
            .servers()
            .into_iter()
            .find(|s| s.name == "small-0")
            .unwrap();
        let small = server_pod(&small, &context()).unwrap();
        assert!(
            !small
                .spec
                .unwrap()
                .volumes
                .iter()
                .flatten()
                .any(|v| v.name == MODEL_CONFIGS_VOLUME)
        );
    }

    #[test]
    fn a_binary_is_refused() {
        let m = crate::matrix::parse(
            &MATRIX.replace(
                r#"{ image: "triton-stress/tritonserver:dev" }"#,
                "{ binary: auto }",
            ),
            "specs.yaml",
        )
        .unwrap();
        let server = m
            .servers()
            .into_iter()
            .find(|s| s.name == "small-0")
            .unwrap();
        let refused = server_pod(&server, &context()).unwrap_err();
        assert_eq!(refused, PodError::NotAnImage);
        assert!(refused.to_string().contains("--launcher local"));
    }

    /// Before anything starts, every template that names a binary is refused at its field,
    /// once however many members it has; a matrix of images (the twin) is refused nothing.
    #[test]
    fn binaries_are_refused_before_anything_starts_at_their_fields() {
        let plan = |m: &Matrix| crate::plan::RunPlan::new(m, "k-1".into(), None);
        let images = crate::matrix::parse(MATRIX, "specs.yaml").unwrap();
        assert_eq!(unlaunchable(&plan(&images)), []);
        let binaries = crate::matrix::parse(
            &MATRIX
                .replace(
                    r#"{ image: "nvcr.io/nvidia/tritonserver:24.10-py3" }"#,
                    "{ binary: auto }",
                )
                .replacen(
                    r#"{ image: "triton-stress/worker:dev" }"#,
                    "{ binary: auto }",
                    1,
                ),
            "specs.yaml",
        )
        .unwrap();
        let fields: Vec<String> = unlaunchable(&plan(&binaries))
            .iter()
            .map(|u| format!("{}: {}", u.field, u.why))
            .collect();
        assert_eq!(
            fields,
            [
                "client_templates.grpc-all.worker.binary: the kube launcher runs images; this \
                 template names a binary (use --launcher local)",
                "server_templates.gpu.tritonserver.binary: the kube launcher runs images; this \
                 template names a binary (use --launcher local)",
            ]
        );
    }
}
