//! The "restricted" Pod Security Standard (which includes "baseline"), as a pure check on a
//! pod spec, and the security contexts that pass it. The project's test cluster is Kubernetes
//! 1.20, which has no Pod Security admission (beta in 1.23), so a namespace label enforces
//! nothing there: the launcher checks every pod it creates itself, and the tests check
//! deploy/'s pod templates. The rules follow
//! <https://kubernetes.io/docs/concepts/security/pod-security-standards/> (restricted: volume
//! types, privilege escalation, running as non-root, non-root user, seccomp, capabilities;
//! baseline: host namespaces, privileged, capabilities, hostPath, host ports, /proc mount,
//! seccomp, sysctls).

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

/// The user and group every container of the project runs as (its images' `USER 1000:1000`).
pub const RUN_AS_USER: i64 = 1000;

/// Volume types the restricted profile allows.
const ALLOWED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Sysctls the baseline profile allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
];

/// The pod-level context of every pod the launcher creates: non-root user 1000, the runtime's
/// default seccomp profile, volumes owned by group 1000.
pub fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        run_as_group: Some(RUN_AS_USER),
        fs_group: Some(RUN_AS_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every container's context: no privilege escalation, every capability dropped, and a
/// read-only root filesystem (what a container writes goes to its emptyDir volumes).
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

/// Where a pod spec breaks the restricted profile: one line per rule and place, empty when it
/// passes.
pub fn violations(spec: &PodSpec) -> Vec<String> {
    let mut found = Vec::new();
    let pod_sc = spec.security_context.clone().unwrap_or_default();
    for (flag, on) in [
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ] {
        if on == Some(true) {
            found.push(format!("host namespaces: {flag} is true"));
        }
    }
    for v in spec.volumes.iter().flatten() {
        let kind = volume_kind(v);
        if !ALLOWED_VOLUMES.contains(&kind) {
            found.push(format!("volume types: volume {:?} is {kind}", v.name));
        }
    }
    for s in pod_sc.sysctls.iter().flatten() {
        if !SAFE_SYSCTLS.contains(&s.name.as_str()) {
            found.push(format!("sysctls: {} is not a safe sysctl", s.name));
        }
    }
    if pod_sc.run_as_user == Some(0) {
        found.push("running as non-root user: the pod's runAsUser is 0".into());
    }
    let seccomp_ok = |p: Option<&SeccompProfile>| {
        p.is_some_and(|p| p.type_ == "RuntimeDefault" || p.type_ == "Localhost")
    };
    let pod_seccomp = seccomp_ok(pod_sc.seccomp_profile.as_ref());
    if pod_sc
        .seccomp_profile
        .as_ref()
        .is_some_and(|p| p.type_ == "Unconfined")
    {
        found.push("seccomp: the pod's profile is Unconfined".into());
    }
    let all = spec.containers.iter().map(|c| ("container", c)).chain(
        spec.init_containers
            .iter()
            .flatten()
            .map(|c| ("init container", c)),
    );
    for (what, c) in all {
        container_violations(what, c, &pod_sc, pod_seccomp, &mut found);
    }
    found
}

fn container_violations(
    what: &str,
    c: &Container,
    pod_sc: &PodSecurityContext,
    pod_seccomp: bool,
    found: &mut Vec<String>,
) {
    let at = format!("{what} {:?}", c.name);
    let sc = c.security_context.clone().unwrap_or_default();
    if sc.privileged == Some(true) {
        found.push(format!("privileged: {at} is privileged"));
    }
    if sc.allow_privilege_escalation != Some(false) {
        found.push(format!(
            "privilege escalation: {at} does not set allowPrivilegeEscalation: false"
        ));
    }
    if sc.run_as_non_root.or(pod_sc.run_as_non_root) != Some(true) {
        found.push(format!(
            "running as non-root: {at} does not set runAsNonRoot: true"
        ));
    }
    if sc.run_as_user == Some(0) {
        found.push(format!("running as non-root user: {at} has runAsUser 0"));
    }
    match sc.seccomp_profile.as_ref() {
        Some(p) if p.type_ == "RuntimeDefault" || p.type_ == "Localhost" => {}
        Some(p) => found.push(format!("seccomp: {at} has profile {}", p.type_)),
        None if pod_seccomp => {}
        None => found.push(format!(
            "seccomp: neither the pod nor {at} sets RuntimeDefault or Localhost"
        )),
    }
    let caps = sc.capabilities.clone().unwrap_or_default();
    if !caps.drop.iter().flatten().any(|d| d == "ALL") {
        found.push(format!("capabilities: {at} does not drop ALL"));
    }
    for added in caps.add.iter().flatten() {
        if added != "NET_BIND_SERVICE" {
            found.push(format!("capabilities: {at} adds {added}"));
        }
    }
    for p in c.ports.iter().flatten() {
        if p.host_port.is_some_and(|h| h != 0) {
            found.push(format!("host ports: {at} uses host port {:?}", p.host_port));
        }
    }
    if sc.proc_mount.as_deref().is_some_and(|m| m != "Default") {
        found.push(format!("/proc mount: {at} is not Default"));
    }
    if let Some(se) = &sc.se_linux_options
        && se
            .type_
            .as_deref()
            .is_some_and(|t| !matches!(t, "container_t" | "container_init_t" | "container_kvm_t"))
    {
        found.push(format!("SELinux: {at} sets a custom type"));
    }
}

/// The volume's source type as the pod spec names it.
fn volume_kind(v: &k8s_openapi::api::core::v1::Volume) -> &'static str {
    macro_rules! kinds {
        ($($field:ident => $name:literal),* $(,)?) => {
            $(if v.$field.is_some() { return $name; })*
        };
    }
    kinds!(
        config_map => "configMap",
        csi => "csi",
        downward_api => "downwardAPI",
        empty_dir => "emptyDir",
        ephemeral => "ephemeral",
        persistent_volume_claim => "persistentVolumeClaim",
        projected => "projected",
        secret => "secret",
        host_path => "hostPath",
        nfs => "nfs",
        iscsi => "iscsi",
        rbd => "rbd",
        cephfs => "cephfs",
        glusterfs => "glusterfs",
        fc => "fc",
        flex_volume => "flexVolume",
        cinder => "cinder",
        azure_disk => "azureDisk",
        azure_file => "azureFile",
        gce_persistent_disk => "gcePersistentDisk",
        aws_elastic_block_store => "awsElasticBlockStore",
        git_repo => "gitRepo",
    );
    "another type"
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerPort, HostPathVolumeSource, PodSecurityContext, Sysctl, Volume,
    };

    fn passing() -> PodSpec {
        PodSpec {
            security_context: Some(pod_security_context()),
            containers: vec![Container {
                name: "c".into(),
                security_context: Some(container_security_context()),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "tmp".into(),
                empty_dir: Some(Default::default()),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// deploy/'s pods (the CronJob's driver, the Postgres store, driver serve) pass as shipped.
    #[test]
    fn every_pod_template_in_deploy_is_restricted() {
        use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
        use k8s_openapi::api::batch::v1::CronJob;
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/base");
        let mut checked = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in text.split("\n---\n") {
                let Ok(v) = serde_saphyr::from_str::<serde_json::Value>(doc) else {
                    continue;
                };
                let spec = match v["kind"].as_str() {
                    Some("Deployment") => {
                        serde_json::from_value::<Deployment>(v)
                            .unwrap()
                            .spec
                            .template
                            .spec
                    }
                    Some("StatefulSet") => {
                        serde_json::from_value::<StatefulSet>(v)
                            .unwrap()
                            .spec
                            .template
                            .spec
                    }
                    Some("CronJob") => serde_json::from_value::<CronJob>(v)
                        .unwrap()
                        .spec
                        .job_template
                        .spec
                        .and_then(|job| job.template.spec),
                    _ => continue,
                };
                let spec = spec.expect("a pod template");
                assert_eq!(
                    violations(&spec),
                    Vec::<String>::new(),
                    "{}",
                    path.display()
                );
                checked.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        checked.sort();
        assert_eq!(checked, ["cronjob.yaml", "postgres.yaml", "serve.yaml"]);
    }

    #[test]
    fn the_project_s_contexts_pass() {
        assert_eq!(violations(&passing()), Vec::<String>::new());
    }

    /// A faulty twin per rule: each change makes the check name its rule.
    #[test]
    fn each_rule_catches_its_twin() {
        type Edit = fn(&mut PodSpec);
        let twins: &[(&str, Edit)] = &[
            ("host namespaces", |s| s.host_network = Some(true)),
            ("host namespaces", |s| s.host_pid = Some(true)),
            ("volume types", |s| {
                s.volumes.as_mut().unwrap().push(Volume {
                    name: "node".into(),
                    host_path: Some(HostPathVolumeSource {
                        path: "/".into(),
                        type_: None,
                    }),
                    ..Default::default()
                })
            }),
            ("sysctls", |s| {
                s.security_context.as_mut().unwrap().sysctls = Some(vec![Sysctl {
                    name: "kernel.msgmax".into(),
                    value: "1".into(),
                }])
            }),
            ("privileged", |s| {
                s.containers[0]
                    .security_context
                    .as_mut()
                    .unwrap()
                    .privileged = Some(true)
            }),
            ("privilege escalation", |s| {
                s.containers[0]
                    .security_context
                    .as_mut()
                    .unwrap()
                    .allow_privilege_escalation = None
            }),
            ("running as non-root", |s| {
                s.security_context = Some(PodSecurityContext {
                    seccomp_profile: s.security_context.clone().unwrap().seccomp_profile,
                    ..Default::default()
                });
                s.containers[0]
                    .security_context
                    .as_mut()
                    .unwrap()
                    .run_as_non_root = None;
            }),
            ("running as non-root user", |s| {
                s.containers[0]
                    .security_context
                    .as_mut()
                    .unwrap()
                    .run_as_user = Some(0)
            }),
            ("seccomp", |s| {
                s.security_context.as_mut().unwrap().seccomp_profile = None
            }),
            ("capabilities", |s| {
                s.containers[0]
                    .security_context
                    .as_mut()
                    .unwrap()
                    .capabilities = None
            }),
            ("capabilities", |s| {
                s.containers[0]
                    .security_context
                    .as_mut()
                    .unwrap()
                    .capabilities
                    .as_mut()
                    .unwrap()
                    .add = Some(vec!["SYS_ADMIN".into()])
            }),
            ("host ports", |s| {
                s.containers[0].ports = Some(vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(80),
                    ..Default::default()
                }])
            }),
            ("/proc mount", |s| {
                s.containers[0]
                    .security_context
                    .as_mut()
                    .unwrap()
                    .proc_mount = Some("Unmasked".into())
            }),
            ("privilege escalation", |s| {
                s.init_containers = Some(vec![Container {
                    name: "init".into(),
                    ..Default::default()
                }])
            }),
        ];
        for (rule, edit) in twins {
            let mut spec = passing();
            edit(&mut spec);
            let found = violations(&spec);
            assert!(
                found.iter().any(|v| v.starts_with(&format!("{rule}:"))),
                "{rule}: {found:?}"
            );
        }
    }
}
