//! What a run sets up in its namespace before any pod: the owner ConfigMap (the matrix, the
//! run id and a sweep variant's model configs; every other object of the run is its dependent) and the Secret holding the store URL.

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
        data: Some({
            // A sweep variant's model configs travel here: its server pods mount each key
            // (spec's subPath mounts), and the ConfigMap goes with the run.
            let mut data = settings.model_configs.clone();
            data.insert("run-id".to_string(), run_id.clone());
            data.insert("matrix.yaml".to_string(), settings.matrix_yaml.clone());
            data
        }),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::kube::spec::tests::{context, variant_matrix};

    /// A sweep variant's configs are keys `model-config.<model>` of the run's owner ConfigMap
    /// (what its server pods mount), beside the run id and the matrix.
    #[test]
    fn the_owner_config_map_holds_a_variant_s_configs() {
        let m = variant_matrix();
        // The owner ConfigMap holds each under that key, beside the run id and the matrix.
        let settings = super::super::KubeSettings {
            namespace: "ns".into(),
            run_id: context().run_id,
            matrix_yaml: "version: 1".into(),
            pod_store_url: "postgres://x".into(),
            image_pull_policy: "IfNotPresent".into(),
            pending_timeout: std::time::Duration::from_secs(60),
            pod_deadline_seconds: None,
            model_configs: super::super::model_config_data(&m),
            api_proxy: None,
            driver_node: None,
        };
        let data = owner_config_map(&settings).data.unwrap();
        assert_eq!(
            data.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "matrix.yaml",
                "model-config.fixed_capacity",
                "model-config.simple",
                "run-id"
            ]
        );
        assert_eq!(data["model-config.simple"], "name: \"simple\"\n");
    }
}
