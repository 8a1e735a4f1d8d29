//! Disruptions the kube launcher injects: evictions and the PodDisruptionBudgets that may
//! refuse them, and the restart of the store's pod. A launched server group of two
//! or more pods gets a budget of `minAvailable: n - 1`, so an eviction (an `evict` fault, or a
//! node drained by the cluster's admins during a soak) takes one server of the group at a time;
//! while the budget allows none, the Eviction API answers 429 and an `evict` fault is blocked,
//! not failed. A `store-restart` deletes deploy/'s Postgres pod ([`STORE_POD_SELECTOR`]).

use super::spec::{GROUP_LABEL, PodContext, ROLE_LABEL, SERVER_ROLE, run_labels, with_component};
use super::{FIELD_MANAGER, RUN_LABEL};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, EvictParams, Patch, PatchParams};

pub fn budget_name(run_id: &str, group: &str) -> String {
    format!("{run_id}-{group}")
}

/// The budget of a server group of `members` pods (two or more): all but one available. None
/// for a single server: a budget of zero disruptions would refuse every eviction, and one of
/// one would refuse none.
pub fn server_group_budget(
    ctx: &PodContext,
    group: &str,
    members: u32,
) -> Option<PodDisruptionBudget> {
    if members < 2 {
        return None;
    }
    let selector = [
        (RUN_LABEL, ctx.run_id.as_str()),
        (ROLE_LABEL, SERVER_ROLE),
        (GROUP_LABEL, group),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Some(PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(budget_name(&ctx.run_id, group)),
            labels: Some(with_component(run_labels(&ctx.run_id), SERVER_ROLE)),
            owner_references: Some(vec![ctx.owner.clone()]),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(
                i32::try_from(members - 1).unwrap_or(i32::MAX),
            )),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    })
}

/// The version of the `policy` group that serves budgets: `v1` from Kubernetes 1.21, else
/// `v1beta1` (1.20, the project's test cluster, where `policy/v1` is not found), whose budget
/// spec has the same fields. Any other answer keeps `v1`, which every served release has now.
pub async fn policy_version(client: &Client) -> &'static str {
    match client.list_api_group_resources("policy/v1").await {
        Ok(list)
            if !list
                .resources
                .iter()
                .any(|r| r.name == "poddisruptionbudgets") =>
        {
            "v1beta1"
        }
        Err(kube::Error::Api(status)) if status.code == 404 => "v1beta1",
        _ => "v1",
    }
}

/// Applies `budget` in `version` of the policy group (server-side apply).
pub async fn apply_budget(
    client: Client,
    namespace: &str,
    version: &str,
    budget: &PodDisruptionBudget,
) -> Result<(), kube::Error> {
    let resource = ApiResource {
        group: "policy".into(),
        version: version.into(),
        api_version: format!("policy/{version}"),
        kind: "PodDisruptionBudget".into(),
        plural: "poddisruptionbudgets".into(),
    };
    let mut object = serde_json::to_value(budget).map_err(kube::Error::SerdeError)?;
    object["apiVersion"] = resource.api_version.clone().into();
    let name = budget.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .map(|_| ())
}

/// What the Eviction API did with a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// The pod is being deleted with its own termination grace.
    Started,
    /// A PodDisruptionBudget refused it (429), in the API server's words.
    Refused(String),
}

/// Evicts `pod`. kube's request leaves the Eviction's apiVersion out, so the API server reads it
/// in its own version (policy/v1beta1 on 1.20, policy/v1 later).
pub async fn evict(pods: &Api<Pod>, pod: &str) -> Result<Eviction, kube::Error> {
    match pods.evict(pod, &EvictParams::default()).await {
        Ok(_) => Ok(Eviction::Started),
        Err(kube::Error::Api(status)) if status.code == 429 => {
            Ok(Eviction::Refused(status.message.clone()))
        }
        Err(e) => Err(e),
    }
}

/// The label of deploy/'s Postgres pod (deploy/base/postgres.yaml), which a store-restart
/// deletes.
pub const STORE_POD_SELECTOR: &str = "app.kubernetes.io/name=triton-stress-postgres";

/// The store's pods that are not already ending, by name.
pub async fn store_pods(pods: &Api<Pod>) -> Result<Vec<String>, String> {
    let found = pods
        .list(&kube::api::ListParams::default().labels(STORE_POD_SELECTOR))
        .await
        .map_err(|e| format!("listing the store's pods ({STORE_POD_SELECTOR}): {e}"))?;
    Ok(found
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name.clone())
        .collect())
}

/// A store-restart: the store's Postgres pods deleted with their own grace, for their
/// StatefulSet to create again on the same volume. Err says why nothing was deleted.
pub async fn restart_store(pods: &Api<Pod>) -> Result<(), String> {
    let names = store_pods(pods).await?;
    if names.is_empty() {
        return Err(format!(
            "no store pod to restart: none is labelled {STORE_POD_SELECTOR} (deploy/'s Postgres)"
        ));
    }
    for name in names {
        pods.delete(&name, &kube::api::DeleteParams::default())
            .await
            .map_err(|e| format!("deleting the store's pod {name}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::spec::{server_pod, tests::context, tests::matrix};
    use super::*;

    #[test]
    fn a_group_of_servers_keeps_all_but_one_and_a_lone_server_gets_no_budget() {
        assert_eq!(server_group_budget(&context(), "triton", 1), None);
        let budget = server_group_budget(&context(), "triton", 3).unwrap();
        assert_eq!(
            budget.spec.unwrap().min_available,
            Some(IntOrString::Int(2))
        );
        // Owned by the run: deleting the run's ConfigMap deletes it.
        assert_eq!(
            budget.metadata.owner_references,
            Some(vec![context().owner])
        );
    }

    /// The selector selects exactly the group's server pods as the launcher labels them.
    #[test]
    fn the_budget_selects_its_group_s_server_pods_and_no_other() {
        let budget = server_group_budget(&context(), "triton", 2).unwrap();
        let selector = budget.spec.unwrap().selector.unwrap().match_labels.unwrap();
        let m = matrix();
        let selected: Vec<String> = m
            .servers()
            .iter()
            .filter(|s| {
                let labels = server_pod(s, &context()).unwrap().metadata.labels.unwrap();
                selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .map(|s| s.name.to_string())
            .collect();
        assert_eq!(selected, ["triton-0", "triton-1"], "not small-0");
    }
}
