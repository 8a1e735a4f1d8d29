//! Removing what a run left: its pods and their servers' Services (all, or all but the ones
//! kept for inspection), and with nothing kept every object carrying the run label.

use super::{KubeLauncher, RUN_LABEL};
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Pod deletions sent at once by [`KubeLauncher::delete_pods`].
const DELETES_IN_FLIGHT: usize = 32;

impl KubeLauncher {
    /// Deletes the named member pods (their containers get SIGTERM and `grace` to end).
    pub(super) async fn delete_pods<'a>(
        &self,
        members: impl Iterator<Item = &'a String>,
        grace: Duration,
    ) {
        let dp = DeleteParams {
            grace_period_seconds: Some(grace.as_secs() as u32),
            ..Default::default()
        };
        // Together: one by one, each waiting for the API server's answer, the last of 8 worker
        // pods got its SIGTERM (and sent its final report) 250-450 ms after the first, in the
        // order deleted, on the test cluster. Bounded, to stay well within the API server's
        // in-flight limit for mutating requests (200 by default) at a large run's stop.
        let (pods, dp) = (&self.pods, &dp);
        let doomed = members.filter_map(|m| self.members.get(m));
        futures::stream::iter(doomed)
            .for_each_concurrent(DELETES_IN_FLIGHT, |mp| async move {
                if let Err(e) = pods.delete(&mp.pod, dp).await
                    && !is_not_found(&e)
                {
                    tracing::warn!("deleting pod {}: {e}", mp.pod);
                }
            })
            .await;
    }

    /// Every object of this run that is not a kept member's pod is deleted; with nothing kept
    /// the owner ConfigMap and the Secret go too, and this waits (bounded) until the pods are gone.
    pub(super) async fn delete_run_objects(&mut self, keep: &BTreeSet<String>) {
        let doomed: Vec<String> = self
            .members
            .keys()
            .filter(|m| !keep.contains(*m))
            .cloned()
            .collect();
        self.delete_pods(doomed.iter(), Duration::ZERO).await;
        let now = DeleteParams::default();
        for server in doomed.iter().filter(|m| self.service_ips.contains_key(*m)) {
            let name = super::service_name(&self.settings.run_id, server);
            if let Err(e) = delete_named::<Service>(&self.client, self.ns(), &name, &now).await {
                tracing::warn!("deleting Service {name}: {e}");
            }
        }
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

/// Deletes every object of a run (its pods by the run label; its Secret and owner ConfigMap by
/// name, so the Role needs no list or get on either) and waits up to a minute until its pods
/// are gone. `driver cleanup --run` and a passed run use it.
pub async fn delete_run(client: &Client, ns: &str, run_id: &str) -> Result<usize, kube::Error> {
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={run_id}"));
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    // A driver that died mid-drain left its node cordoned: schedulable again first.
    for node in super::drain::uncordon_left_by(client, run_id).await? {
        tracing::info!("uncordoned node {node}, left cordoned by run {run_id}");
    }
    let mut deleted = delete_labelled::<Pod>(client, ns, &lp, &now).await?;
    deleted += delete_labelled::<Service>(client, ns, &lp, &now).await?;
    deleted += delete_named::<Secret>(client, ns, &super::secret_name(run_id), &now).await?;
    deleted += delete_named::<ConfigMap>(client, ns, &super::owner_name(run_id), &now).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline && !pods.list(&lp).await?.items.is_empty() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(deleted)
}

/// A kind of namespaced object the cleanup lists and deletes (pods, services, secrets, config
/// maps).
trait Namespaced:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug
{
}

impl<K> Namespaced for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
{
}

/// Deletes the object of kind `K` named `name` in `ns`: 1 if it was there, else 0.
async fn delete_named<K: Namespaced>(
    client: &Client,
    ns: &str,
    name: &str,
    dp: &DeleteParams,
) -> Result<usize, kube::Error> {
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.delete(name, dp).await {
        Ok(_) => Ok(1),
        Err(e) if is_not_found(&e) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Deletes every object of kind `K` in `ns` that `lp` selects; how many there were.
async fn delete_labelled<K: Namespaced>(
    client: &Client,
    ns: &str,
    lp: &ListParams,
    dp: &DeleteParams,
) -> Result<usize, kube::Error> {
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

pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}
