//! `drain`: the node of a fault's target cordoned, the run's pods there evicted (the launcher
//! applies them again; they wait for a node), the node uncordoned at the fault's end. Patching
//! nodes is a cluster-scoped power the namespaced Role does not have: deploy/drain's
//! ClusterRole grants it, opt-in, and a run whose driver lacks it is refused before it starts.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use crate::matrix::faults::FaultKind;

/// The cluster-scoped calls a drain makes, as (API group, resource, verbs):
/// deploy/drain's ClusterRole grants exactly these (a test compares them).
/// - nodes: read whether the node is cordoned already (get), cordoned and uncordoned (patch),
///   and the nodes a run cordoned found by their label (list: `driver cleanup --run` uncordons
///   what a driver that died mid-drain left).
pub const DRAIN_ACCESS: &[(&str, &str, &[&str])] = &[("", "nodes", &["get", "list", "patch"])];

/// The label on a node the driver cordoned: the run that did. A run that died before its
/// uncordon leaves it, so `kubectl get nodes -l triton-stress.io/cordoned-by` says whose cordon
/// it is, and `driver cleanup --run` finds it.
pub const CORDONED_BY: &str = "triton-stress.io/cordoned-by";

/// A node the driver cordoned for a drain.
#[derive(Debug, Clone, PartialEq)]
pub struct Cordon {
    pub node: String,
    /// False when the node was cordoned already (by its admins): the drain's end leaves it so.
    pub ours: bool,
}

/// Cordons `node` for `run_id` (no new pod lands there) unless it is cordoned already.
pub async fn cordon(nodes: &Api<Node>, node: &str, run_id: &str) -> Result<Cordon, kube::Error> {
    let current = nodes.get(node).await?;
    let already = current.spec.and_then(|s| s.unschedulable).unwrap_or(false);
    if !already {
        let patch = serde_json::json!({
            "metadata": {"labels": {CORDONED_BY: run_id}},
            "spec": {"unschedulable": true},
        });
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(Cordon {
        node: node.into(),
        ours: !already,
    })
}

/// Undoes [`cordon`]: a node the driver cordoned is schedulable again, its label gone.
pub async fn uncordon(nodes: &Api<Node>, cordon: &Cordon) -> Result<(), kube::Error> {
    if !cordon.ours {
        return Ok(());
    }
    let patch = serde_json::json!({
        "metadata": {"labels": {CORDONED_BY: null}},
        "spec": {"unschedulable": null},
    });
    nodes
        .patch(&cordon.node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Uncordons every node `run_id` cordoned and left so (its driver died mid-drain); the nodes
/// uncordoned. A driver that may not list nodes has none: it could not have cordoned one.
pub async fn uncordon_left_by(client: &Client, run_id: &str) -> Result<Vec<String>, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("{CORDONED_BY}={run_id}"));
    let left = match nodes.list(&lp).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(e)) if e.code == 403 => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut uncordoned = Vec::new();
    for node in left {
        let cordon = Cordon {
            node: node.metadata.name.unwrap_or_default(),
            ours: true,
        };
        uncordon(&nodes, &cordon).await?;
        uncordoned.push(cordon.node);
    }
    Ok(uncordoned)
}

/// The node `pod` runs on (None: not scheduled yet).
pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// Before anything starts, for a matrix with a `drain`: whether the driver may get, list and
/// patch nodes (asked of the API server: a SelfSubjectAccessReview, which every user may
/// create), and the node the driver itself runs on (None: outside the cluster), which no drain
/// may hit: refused here already when it is the only node pods can be scheduled on.
pub async fn preflight(client: &Client) -> Result<Option<String>, String> {
    for (group, resource, verbs) in DRAIN_ACCESS {
        for verb in *verbs {
            if !allowed(client, group, resource, verb).await? {
                return Err(format!(
                    "the driver may not {verb} {resource}: a drain cordons its target's node; \
                     bind deploy/drain's ClusterRole to the driver's account \
                     (docs/faults.md)"
                ));
            }
        }
    }
    let Some(own) = own_node(client).await? else {
        return Ok(None);
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing the nodes: {e}"))?;
    match only_schedulable(&listed.items) {
        Some(only) if only == own => Err(format!(
            "node {own} holds the driver itself and is the only node pods can be scheduled on: \
             a drain of it would stop the driver"
        )),
        _ => Ok(Some(own)),
    }
}

/// The one node of `nodes` that is not cordoned (None: none, or several).
fn only_schedulable(nodes: &[Node]) -> Option<&str> {
    let mut open = nodes.iter().filter(|n| {
        !n.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    });
    match (open.next(), open.next()) {
        (Some(one), None) => one.metadata.name.as_deref(),
        _ => None,
    }
}

async fn allowed(client: &Client, group: &str, resource: &str, verb: &str) -> Result<bool, String> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = reviews
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| format!("asking whether the driver may {verb} {resource}: {e}"))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The node of the driver's own pod, when it runs in one: its pod is its host name, in the
/// namespace of its service account.
async fn own_node(client: &Client) -> Result<Option<String>, String> {
    const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        return Ok(None);
    }
    let unknown = |why: String| {
        format!(
            "the driver runs in a pod, but which node holds it is not known ({why}): a drain could hit it"
        )
    };
    let namespace = std::fs::read_to_string(NAMESPACE_FILE)
        .map_err(|e| unknown(format!("{NAMESPACE_FILE}: {e}")))?;
    let name = std::env::var("HOSTNAME").map_err(|e| unknown(format!("HOSTNAME: {e}")))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace.trim());
    let pod = pods
        .get(&name)
        .await
        .map_err(|e| unknown(format!("pod {}/{name}: {e}", namespace.trim())))?;
    Ok(node_of(&pod).map(str::to_string))
}

/// Each `drain` of `matrix` refused (file, line and field) by what [`preflight`] found.
pub fn refusals(matrix: &crate::matrix::Matrix, why: &str) -> Vec<String> {
    super::super::uninjectable(matrix, |f| match f.kind {
        FaultKind::Drain => Err(super::super::Uninjectable::Setting {
            field: "kind",
            why: why.into(),
        }),
        _ => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, NodeSpec};

    fn node(name: &str, cordoned: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.spec = Some(NodeSpec {
            unschedulable: Some(cordoned),
            ..Default::default()
        });
        n
    }

    #[test]
    fn the_only_node_pods_can_land_on_is_the_one_not_cordoned() {
        let one = [node("a", false)];
        assert_eq!(super::only_schedulable(&one), Some("a"));
        let cordoned = [node("a", true), node("b", false)];
        assert_eq!(super::only_schedulable(&cordoned), Some("b"));
        let two = [node("a", false), node("b", false)];
        assert_eq!(super::only_schedulable(&two), None);
    }

    /// deploy/drain's ClusterRole grants exactly [`super::DRAIN_ACCESS`].
    #[test]
    fn the_drain_cluster_role_grants_exactly_what_a_drain_calls() {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/drain/cluster-role.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut granted = Vec::new();
        for doc in text.split("\n---\n") {
            let Ok(role) = serde_saphyr::from_str::<k8s_openapi::api::rbac::v1::ClusterRole>(doc)
            else {
                continue;
            };
            for rule in role.rules.unwrap_or_default() {
                let group = rule.api_groups.unwrap_or_default().join(",");
                for resource in rule.resources.unwrap_or_default() {
                    let mut verbs = rule.verbs.clone();
                    verbs.sort();
                    granted.push((group.clone(), resource, verbs));
                }
            }
        }
        let used: Vec<(String, String, Vec<String>)> = super::DRAIN_ACCESS
            .iter()
            .map(|(g, r, v)| {
                (
                    g.to_string(),
                    r.to_string(),
                    v.iter().map(|v| v.to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(granted, used);
    }
}
