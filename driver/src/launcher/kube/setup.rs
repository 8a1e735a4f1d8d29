//! What a run sets up in its namespace before any pod: the owner ConfigMap (the matrix and the
//! run id; every other object of the run is its dependent) and the Secret holding the store URL.

use super::spec::{owner_name, run_labels, secret_name, with_component};
use super::{FIELD_MANAGER, KubeSettings, setup_err};
use crate::launcher::LaunchError;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use std::collections::BTreeMap;

/// The run's owner ConfigMap.
pub fn owner_config_map(settings: &KubeSettings) -> ConfigMap {
    let run_id = &settings.run_id;
    ConfigMap {
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
    }
}

/// The Secret that carries the store URL to the worker pods (never into a pod spec).
pub fn store_secret(settings: &KubeSettings, owner: &OwnerReference) -> Secret {
    let run_id = &settings.run_id;
    Secret {
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
    }
}

/// Applies the owner ConfigMap and the store Secret; the owner reference every pod carries.
pub async fn apply_run_objects(
    client: &Client,
    settings: &KubeSettings,
) -> Result<OwnerReference, LaunchError> {
    let ns = &settings.namespace;
    let run_id = &settings.run_id;
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let owner_cm = configmaps
        .patch(
            &owner_name(run_id),
            &apply,
            &Patch::Apply(&owner_config_map(settings)),
        )
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
    secrets
        .patch(
            &secret_name(run_id),
            &apply,
            &Patch::Apply(&store_secret(settings, &owner)),
        )
        .await
        .map_err(|e| setup_err(&format!("applying Secret {ns}/{}", secret_name(run_id)), e))?;
    Ok(owner)
}
