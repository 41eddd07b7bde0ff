//! Generic access to the scaled workload: any kind with `spec.replicas` and
//! `status.readyReplicas`, found by discovery of `targetRef.apiVersion`/`kind` and read as a
//! `DynamicObject` (docs/resource.md#targetref, docs/scaling.md steps 1–2,
//! docs/writing-replicas.md).

use std::collections::{BTreeMap, HashMap};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::core::gvk::ParseGroupVersionError;
use llmscaler_api::TargetRef;
use serde_json::{Value, json};
use tokio::sync::RwLock;

use crate::engine::{Observation, rollout_in_progress};
use llmscaler_api::names::FIELD_MANAGER;

/// Why the target could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// `targetRef.apiVersion` does not parse.
    #[error("targetRef.apiVersion {api_version:?}: {source}")]
    ApiVersion {
        /// The value given.
        api_version: String,
        /// The parse error.
        #[source]
        source: ParseGroupVersionError,
    },
    /// The API server does not serve that kind.
    #[error("kind {kind} of {api_version} is not served by the API server: {source}")]
    UnknownKind {
        /// `targetRef.apiVersion`.
        api_version: String,
        /// `targetRef.kind`.
        kind: String,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// The workload does not exist.
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        /// `targetRef.kind`.
        kind: String,
        /// The scaler's namespace.
        namespace: String,
        /// `targetRef.name`.
        name: String,
    },
    /// Any other API error (RBAC, timeouts), with the operation.
    #[error("{operation} {kind} {namespace}/{name}: {source}")]
    Api {
        /// `get` or `apply`.
        operation: &'static str,
        /// `targetRef.kind`.
        kind: String,
        /// The scaler's namespace.
        namespace: String,
        /// `targetRef.name`.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl TargetError {
    /// Whether the condition reason is `TargetNotFound` (vs. a transient API failure).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            TargetError::NotFound { .. }
                | TargetError::UnknownKind { .. }
                | TargetError::ApiVersion { .. }
        )
    }
}

/// Caches discovery results per `(apiVersion, kind)` so each sync costs one GET.
#[derive(Default)]
pub struct Resolver {
    cache: RwLock<HashMap<(String, String), ApiResource>>,
}

impl Resolver {
    /// The `ApiResource` for a target reference, from the cache or by discovery.
    ///
    /// # Errors
    /// [`TargetError::ApiVersion`] or [`TargetError::UnknownKind`].
    pub async fn resolve(
        &self,
        client: &kube::Client,
        target: &TargetRef,
    ) -> Result<ApiResource, TargetError> {
        let key = (target.api_version.clone(), target.kind.clone());
        if let Some(found) = self.cache.read().await.get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = match target.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", target.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &target.kind);
        let (resource, _caps) =
            kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|source| TargetError::UnknownKind {
                    api_version: target.api_version.clone(),
                    kind: target.kind.clone(),
                    source,
                })?;
        self.cache.write().await.insert(key, resource.clone());
        Ok(resource)
    }

    /// Forgets a cached kind (after a 404 the CRD may have been removed and re-added).
    pub async fn forget(&self, target: &TargetRef) {
        self.cache
            .write()
            .await
            .remove(&(target.api_version.clone(), target.kind.clone()));
    }
}

/// What one GET of the target tells the engine and the writer.
#[derive(Clone, Debug)]
pub struct TargetState {
    /// The object as read.
    pub object: DynamicObject,
    /// `spec.replicas`, 1 when missing (docs/scaling.md step 2).
    pub spec_replicas: i32,
    /// `status.readyReplicas`, 0 when missing.
    pub ready_replicas: i32,
    /// Deployment only: a rollout is in progress (docs/guards.md#rollout-guard).
    pub rollout_in_progress: bool,
    /// Field managers other than ours that own `spec.replicas`, newest first, from
    /// `managedFields`.
    pub other_replicas_managers: Vec<String>,
    /// Whether [`FIELD_MANAGER`] owns `spec.replicas` (alone or shared: an apply of the same
    /// value by another manager shares ownership, which is no contest).
    pub owns_replicas: bool,
    /// Whether `kind` is `Deployment` (rollout guard and victim marking apply).
    pub is_deployment: bool,
}

impl TargetState {
    /// The labels that select the target's pods (docs/signals.md#ready-pods):
    /// `spec.selector.matchLabels`, or for a LeaderWorkerSet its
    /// `leaderworkerset.sigs.k8s.io/name` label.
    ///
    /// # Errors
    /// A message when the kind has no such selector, or when it also has `matchExpressions`
    /// (the pods could not be told from others by labels alone).
    pub fn pod_selector(&self, kind: &str) -> Result<BTreeMap<String, String>, String> {
        let selector = self.object.data.get("spec").and_then(|s| s.get("selector"));
        if kind == "LeaderWorkerSet" && selector.is_none() {
            let name = self.object.metadata.name.clone().unwrap_or_default();
            return Ok(BTreeMap::from([(
                "leaderworkerset.sigs.k8s.io/name".to_owned(),
                name,
            )]));
        }
        let Some(selector) = selector else {
            return Err(format!(
                "{kind} has no spec.selector.matchLabels to find its pods; runtime signals and \
                 perPod queries need one"
            ));
        };
        if selector
            .get("matchExpressions")
            .and_then(|e| e.as_array())
            .is_some_and(|e| !e.is_empty())
        {
            return Err(format!(
                "{kind} selects its pods with matchExpressions; runtime signals and perPod \
                 queries need spec.selector.matchLabels only"
            ));
        }
        let labels: BTreeMap<String, String> = selector
            .get("matchLabels")
            .and_then(|m| m.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        if labels.is_empty() {
            return Err(format!(
                "{kind} has an empty spec.selector.matchLabels; runtime signals and perPod \
                 queries need one"
            ));
        }
        Ok(labels)
    }

    /// The engine's view of the target.
    pub fn observation(&self) -> Observation {
        Observation {
            spec_replicas: self.spec_replicas,
            ready_replicas: self.ready_replicas,
            rollout_in_progress: self.rollout_in_progress,
        }
    }
}

/// Reads the target named by `target` in `namespace`.
///
/// # Errors
/// [`TargetError::NotFound`] on 404, [`TargetError::Api`] on any other API error.
pub async fn read(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: &str,
    target: &TargetRef,
) -> Result<TargetState, TargetError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let object = api
        .get_opt(&target.name)
        .await
        .map_err(|source| TargetError::Api {
            operation: "get",
            kind: target.kind.clone(),
            namespace: namespace.to_string(),
            name: target.name.clone(),
            source,
        })?
        .ok_or_else(|| TargetError::NotFound {
            kind: target.kind.clone(),
            namespace: namespace.to_string(),
            name: target.name.clone(),
        })?;
    Ok(state_of(object, &target.kind))
}

/// Extracts the replica figures, rollout state and `spec.replicas` owners of an object.
pub fn state_of(object: DynamicObject, kind: &str) -> TargetState {
    let int = |path: &[&str]| -> Option<i64> {
        let mut value = &object.data;
        for key in path {
            value = value.get(key)?;
        }
        value.as_i64()
    };
    let clamp = |v: i64| i32::try_from(v.max(0)).unwrap_or(i32::MAX);
    let spec_replicas = int(&["spec", "replicas"]).map_or(1, clamp);
    let ready_replicas = int(&["status", "readyReplicas"]).map_or(0, clamp);
    let is_deployment = kind == "Deployment";
    let rollout = is_deployment
        && rollout_in_progress(
            object.metadata.generation.unwrap_or(0),
            int(&["status", "observedGeneration"]).unwrap_or(0),
            spec_replicas,
            int(&["status", "replicas"]).map_or(0, clamp),
            int(&["status", "updatedReplicas"]).map_or(0, clamp),
        );
    let owners = replicas_owners(&object);
    let owns_replicas = owners.iter().any(|m| m == FIELD_MANAGER);
    let other_replicas_managers = owners.into_iter().filter(|m| m != FIELD_MANAGER).collect();
    TargetState {
        object,
        spec_replicas,
        ready_replicas,
        rollout_in_progress: rollout,
        other_replicas_managers,
        owns_replicas,
        is_deployment,
    }
}

/// Managers whose `managedFields` entry holds `f:spec` → `f:replicas`, newest entry first.
pub fn replicas_owners(object: &DynamicObject) -> Vec<String> {
    let mut entries: Vec<_> = object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .and_then(|spec| spec.get("f:replicas"))
                .is_some()
        })
        .collect();
    entries.sort_by(|a, b| {
        b.time
            .as_ref()
            .map(|t| t.0)
            .cmp(&a.time.as_ref().map(|t| t.0))
    });
    entries
        .into_iter()
        .filter_map(|e| e.manager.clone())
        .collect()
}

/// The apply body of docs/writing-replicas.md: only `apiVersion`, `kind`, `metadata.name/namespace`
/// and
/// `spec.replicas`; no `resourceVersion`.
pub fn replicas_apply_body(target: &TargetRef, namespace: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": target.api_version,
        "kind": target.kind,
        "metadata": {"name": target.name, "namespace": namespace},
        "spec": {"replicas": replicas},
    })
}

/// Server-side applies `spec.replicas` of the target under [`FIELD_MANAGER`] with force, to the
/// main resource (not `/scale`, docs/writing-replicas.md). Returns the object as stored.
///
/// # Errors
/// [`TargetError::NotFound`] on 404, [`TargetError::Api`] otherwise.
pub async fn apply_replicas(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: &str,
    target: &TargetRef,
    replicas: i32,
) -> Result<DynamicObject, TargetError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let body = replicas_apply_body(target, namespace, replicas);
    api.patch(
        &target.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|source| match &source {
        kube::Error::Api(status) if status.code == 404 => TargetError::NotFound {
            kind: target.kind.clone(),
            namespace: namespace.to_string(),
            name: target.name.clone(),
        },
        _ => TargetError::Api {
            operation: "apply",
            kind: target.kind.clone(),
            namespace: namespace.to_string(),
            name: target.name.clone(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).expect("valid object")
    }

    #[test]
    fn pod_selector_is_match_labels_or_refused_naming_the_kind() {
        let of = |kind: &str, spec: Value| {
            state_of(
                object(json!({
                    "apiVersion": "x/v1", "kind": kind,
                    "metadata": {"name": "w", "namespace": "ns"}, "spec": spec,
                })),
                kind,
            )
            .pod_selector(kind)
        };
        assert_eq!(
            of(
                "Deployment",
                json!({"selector": {"matchLabels": {"app": "vllm"}}})
            ),
            Ok(BTreeMap::from([("app".to_owned(), "vllm".to_owned())]))
        );
        assert_eq!(
            of("LeaderWorkerSet", json!({"replicas": 2})),
            Ok(BTreeMap::from([(
                "leaderworkerset.sigs.k8s.io/name".to_owned(),
                "w".to_owned()
            )]))
        );
        let no_selector = of("InferencePool", json!({"replicas": 2})).expect_err("none");
        assert!(no_selector.starts_with("InferencePool has no spec.selector.matchLabels"));
        let expressions = of(
            "Deployment",
            json!({"selector": {"matchLabels": {"app": "v"}, "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a"]}]}}),
        )
        .expect_err("expressions");
        assert!(expressions.contains("matchExpressions"), "{expressions}");
    }

    #[test]
    fn reads_replicas_with_spec_defaults() {
        let state = state_of(
            object(json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "s", "generation": 3},
                "spec": {}, "status": {"readyReplicas": 2, "observedGeneration": 1}
            })),
            "StatefulSet",
        );
        assert_eq!((state.spec_replicas, state.ready_replicas), (1, 2));
        assert!(
            !state.rollout_in_progress,
            "rollout guard is for Deployments only"
        );
    }

    #[test]
    fn deployment_rollout_and_owners() {
        let state = state_of(
            object(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "generation": 2, "managedFields": [
                    {"manager": "llmscaler", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                    {"manager": "kubectl-client-side-apply", "operation": "Update",
                     "time": "2026-01-01T00:01:00Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
                    {"manager": "argocd-controller", "operation": "Apply",
                     "time": "2026-01-01T00:02:00Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:template": {}}}}
                ]},
                "spec": {"replicas": 3},
                "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2, "readyReplicas": 3}
            })),
            "Deployment",
        );
        assert!(state.rollout_in_progress);
        assert_eq!(
            state.other_replicas_managers,
            vec!["kubectl-client-side-apply"]
        );
    }

    #[test]
    fn apply_body_holds_only_replicas() {
        let target = TargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "vllm".into(),
        };
        assert_eq!(
            replicas_apply_body(&target, "ns", 4),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "vllm", "namespace": "ns"}, "spec": {"replicas": 4}})
        );
    }
}
