//! Targets from watch caches (issue 14): one reflector per target kind (discovered at run time),
//! shared by every scaler of that kind, so a steady scaler costs no API request per sync. A kind's
//! watch starts the first time a scaler targets it; until it has listed, and for an object it
//! does not hold (just created), the controller falls back to a GET. After the operator's own
//! write the cache may lag: the object the write returned stands in until the watch delivers a
//! newer version. Cached objects are [`prune`]d to what a sync reads and held as compact JSON
//! ([`super::compact_store`]), so thousands of cached targets stay small.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};

use super::compact_store::CompactStore;

/// The key of one watched kind: `apiVersion` and `kind`.
type KindKey = (String, String);

/// The key of one object: kind, namespace and name.
type ObjectKey = (KindKey, String, String);

/// The watch caches of every target kind.
pub struct TargetCache {
    client: kube::Client,
    /// The namespace the controller watches (`None`: every namespace).
    namespace: Option<String>,
    kinds: Mutex<HashMap<KindKey, Watched>>,
    /// After a write: the `resourceVersion` it replaced and the object it returned.
    written: Mutex<HashMap<ObjectKey, (String, Arc<DynamicObject>)>>,
}

struct Watched {
    store: CompactStore,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TargetCache {
    fn drop(&mut self) {
        for watched in self.lock_kinds().values() {
            watched.task.abort();
        }
    }
}

impl TargetCache {
    /// Caches for targets in `namespace` (every namespace when `None`), watched on `client`.
    pub fn new(client: kube::Client, namespace: Option<String>) -> Self {
        Self {
            client,
            namespace,
            kinds: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
        }
    }

    fn lock_kinds(&self) -> std::sync::MutexGuard<'_, HashMap<KindKey, Watched>> {
        self.kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached object `namespace/name` of `resource`: `None` when the kind's watch has not
    /// listed yet (it is started now) or does not hold the object (the caller then GETs it).
    pub fn get(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        let kind_key = (resource.api_version.clone(), resource.kind.clone());
        let store = {
            let mut kinds = self.lock_kinds();
            let watched = kinds
                .entry(kind_key.clone())
                .or_insert_with(|| self.watch(resource));
            watched.store.clone()
        };
        if !store.is_ready() {
            return None;
        }
        let cached = Arc::new(store.get(namespace, name)?);
        let object_key = (kind_key, namespace.to_owned(), name.to_owned());
        let mut written = self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match written.get(&object_key) {
            // The watch has not delivered our write yet: the written object is newer.
            Some((before, after)) if cached.resource_version().as_ref() == Some(before) => {
                Some(after.clone())
            }
            Some(_) => {
                written.remove(&object_key);
                Some(cached)
            }
            None => Some(cached),
        }
    }

    /// Notes the operator's write of `after` over the version `before` (a `resourceVersion`).
    pub fn wrote(&self, resource: &ApiResource, before: Option<String>, after: DynamicObject) {
        let (Some(before), Some(namespace)) = (before, after.namespace()) else {
            return;
        };
        let key = (
            (resource.api_version.clone(), resource.kind.clone()),
            namespace,
            after.name_any(),
        );
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, (before, Arc::new(pruned(after))));
    }

    /// Starts the watch of one kind (objects [`prune`]d before they are stored).
    fn watch(&self, resource: &ApiResource) -> Watched {
        let api: Api<DynamicObject> = match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        };
        let store = CompactStore::default();
        let kind = resource.kind.clone();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(prune);
        let feed = store.clone();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => feed.apply(&event),
                    Err(err) => {
                        tracing::warn!(kind = %kind, error = %err, "watching targets failed; syncs read them with a GET until it recovers");
                    }
                }
            }
        });
        Watched { store, task }
    }
}

/// The `status` fields a sync reads ([`super::target::state_of`]): everything else of `status`
/// (conditions with their messages and timestamps, collision counts) is dropped from the cache.
const STATUS_READ: [&str; 4] = [
    "readyReplicas",
    "replicas",
    "updatedReplicas",
    "observedGeneration",
];

/// The `spec` key under which a cached target keeps its template's `--max-num-seqs` ([`prune`]).
pub const PRUNED_MAX_NUM_SEQS: &str = "maxNumSeqsOfTemplate";

/// Drops from a cached target what no sync reads (issue 14: memory per scaler, about 1 KiB per
/// target left): the pod template (kept as its hash and its `--max-num-seqs`, under
/// [`PRUNED_MAX_NUM_SEQS`]) and every other `spec` field but `replicas` and `selector`,
/// `status` but [`STATUS_READ`], the labels, annotations and owner references, and every
/// `managedFields` entry that does not own `spec.replicas` (an owner keeps its manager,
/// operation, time and `{"f:spec":{"f:replicas":{}}}`, all that
/// [`super::target::replicas_owners`] reads). Name, namespace, uid, `resourceVersion` and
/// `generation` stay.
pub fn prune(object: &mut DynamicObject) {
    if let Some(spec) = object.data.get_mut("spec").and_then(|s| s.as_object_mut()) {
        // The pod template is kept as its hash only (`spec.objective` starts its calibration
        // over when it changes, docs/objective.md#status).
        // So is vLLM's `--max-num-seqs`, the objective's batch limit, under
        // [`PRUNED_MAX_NUM_SEQS`].
        let template = spec.get("template").filter(|t| !t.is_string());
        let hash = template.map(crate::step::objective::template_hash);
        let max_num_seqs = template.and_then(crate::step::engine_args::max_num_seqs);
        spec.retain(|key, _| key == "replicas" || key == "selector");
        if let Some(hash) = hash {
            spec.insert("template".to_owned(), serde_json::Value::String(hash));
        }
        if let Some(n) = max_num_seqs {
            spec.insert(PRUNED_MAX_NUM_SEQS.to_owned(), n.into());
        }
    }
    if let Some(status) = object
        .data
        .get_mut("status")
        .and_then(|s| s.as_object_mut())
    {
        status.retain(|key, _| STATUS_READ.contains(&key.as_str()));
    }
    object.metadata.annotations = None;
    object.metadata.labels = None;
    object.metadata.owner_references = None;
    if let Some(entries) = object.metadata.managed_fields.as_mut() {
        entries.retain_mut(|entry| {
            let owns = entry
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .and_then(|spec| spec.get("f:replicas"))
                .is_some();
            if owns {
                entry.fields_v1 = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                    serde_json::json!({"f:spec": {"f:replicas": {}}}),
                ));
            }
            owns
        });
    }
}

/// [`prune`] by value.
fn pruned(mut object: DynamicObject) -> DynamicObject {
    prune(&mut object);
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::target::{replicas_owners, state_of};

    #[test]
    fn a_pruned_target_reads_the_same() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "vllm", "namespace": "ns", "generation": 3, "resourceVersion": "7",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "labels": {"team": "a"},
                "managedFields": [
                    {"manager": "kubectl", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
                     "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {}}}}},
                    {"manager": "kube-controller-manager", "operation": "Update",
                     "time": "2026-01-01T00:00:01Z", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:status": {"f:readyReplicas": {}}}},
                    {"manager": "llmscaler", "operation": "Apply", "time": "2026-01-01T00:00:02Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
                ]
            },
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "vllm"}},
                "template": {"metadata": {"labels": {"app": "vllm"}}, "spec": {"containers": [
                    {"name": "vllm", "args": ["--model", "m", "--max-num-seqs", "48"]}
                ]}}
            },
            "status": {"readyReplicas": 3, "replicas": 4, "updatedReplicas": 4, "observedGeneration": 3,
                       "conditions": [{"type": "Available", "status": "True",
                                       "message": "Deployment has minimum availability."}]}
        }))
        .expect("object");
        let before = state_of(object.clone(), "Deployment");
        let after = state_of(pruned(object), "Deployment");
        assert_eq!(
            (
                before.spec_replicas,
                before.ready_replicas,
                before.rollout_in_progress
            ),
            (
                after.spec_replicas,
                after.ready_replicas,
                after.rollout_in_progress
            )
        );
        assert_eq!(
            before.other_replicas_managers,
            after.other_replicas_managers
        );
        assert_eq!(before.owns_replicas, after.owns_replicas);
        assert_eq!(
            replicas_owners(&before.object),
            replicas_owners(&after.object)
        );
        assert_eq!(
            crate::controller::victims::selector_string(&before.object.data),
            crate::controller::victims::selector_string(&after.object.data)
        );
        assert!(after.object.data["spec"]["template"].is_string());
        // The step reads the same template hash and `--max-num-seqs` from both.
        let (seen_before, seen_after) = (
            crate::controller::target_view(&before),
            crate::controller::target_view(&after),
        );
        assert_eq!(seen_before.template, seen_after.template);
        assert_eq!(
            (seen_before.max_num_seqs, seen_after.max_num_seqs),
            (Some(48), Some(48))
        );
        assert!(after.object.metadata.annotations.is_none());
        assert!(after.object.metadata.labels.is_none());
        assert!(after.object.data["status"].get("conditions").is_none());
        assert_eq!(after.object.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            after.object.metadata.managed_fields.map(|m| m.len()),
            Some(2)
        );
    }
}
