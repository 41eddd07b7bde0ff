//! The pods of the targets, from watch caches (docs/signals.md#ready-pods): one watch per
//! namespace, started the first time a scaler of that namespace reads a per-pod metric, holding
//! each Pod stripped to what the operator reads (name, labels, the `Ready` condition,
//! `deletionTimestamp`, `creationTimestamp`, the `pod-deletion-cost` annotation). Until a
//! namespace's watch has listed, its pods are read with one LIST.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use kube::core::{Selector, SelectorExt};
use llmscaler_api::names::{POD_DELETION_COST, ROTATION_LABEL};

/// How long a sync waits for a new namespace's watch to list before reading with a LIST.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(2);

/// One pod of a target, as the operator reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    /// `metadata.name`.
    pub name: String,
    /// The `Ready` condition is `True` and the pod is not being deleted.
    pub ready: bool,
    /// `metadata.creationTimestamp`, seconds since the epoch (0 when missing).
    pub created: i64,
    /// The `controller.kubernetes.io/pod-deletion-cost` annotation, as written.
    pub deletion_cost: Option<String>,
    /// The rotation label (docs/scale-down.md#drain).
    pub rotation: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
}

impl PodInfo {
    /// The step's view of a live pod.
    pub fn into_step(self) -> crate::step::Pod {
        crate::step::Pod {
            name: self.name,
            ready: self.ready,
            created: self.created,
            deletion_cost: self.deletion_cost,
            rotation: self.rotation,
        }
    }
}

/// The pod watch caches, one per namespace.
pub struct PodCache {
    client: kube::Client,
    namespaces: Mutex<HashMap<String, Watched>>,
}

struct Watched {
    store: Store<Pod>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodCache {
    fn drop(&mut self) {
        for watched in self.lock().values() {
            watched.task.abort();
        }
    }
}

/// Why the pods could not be read.
#[derive(Debug, thiserror::Error)]
#[error("listing the pods of namespace {namespace}: {source}")]
pub struct PodListError {
    /// The namespace.
    pub namespace: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

impl PodCache {
    /// Pod caches on `client`; no watch runs until [`PodCache::pods`] asks for a namespace.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            namespaces: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watched>> {
        self.namespaces
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pods of `namespace` whose labels match `selector`, sorted by name: from the
    /// namespace's watch (started now if needed), or one LIST while it has not listed within
    /// [`FIRST_LIST_WAIT`].
    ///
    /// # Errors
    /// [`PodListError`] when the LIST fallback fails (e.g. no RBAC to list pods).
    pub async fn pods(
        &self,
        namespace: &str,
        selector: &Selector,
    ) -> Result<Vec<PodInfo>, PodListError> {
        let store = {
            let mut namespaces = self.lock();
            namespaces
                .entry(namespace.to_owned())
                .or_insert_with(|| self.watch(namespace))
                .store
                .clone()
        };
        let listed = tokio::time::timeout(FIRST_LIST_WAIT, store.wait_until_ready())
            .await
            .is_ok_and(|r| r.is_ok());
        let mut pods: Vec<PodInfo> = if listed {
            store
                .state()
                .iter()
                .filter(|pod| matches(pod, selector))
                .map(|pod| info(pod))
                .collect()
        } else {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            api.list(&ListParams::default().labels_from(selector))
                .await
                .map_err(|source| PodListError {
                    namespace: namespace.to_owned(),
                    source,
                })?
                .items
                .iter()
                .filter(|pod| matches(pod, selector))
                .map(info)
                .collect()
        };
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(pods)
    }

    fn watch(&self, namespace: &str) -> Watched {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let (store, writer) = reflector::store();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(strip)
            .reflect(writer);
        let namespace = namespace.to_owned();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Err(err) = event {
                    tracing::warn!(namespace = %namespace, error = %err, "watching pods failed; per-pod metrics read them with a LIST until it recovers");
                }
            }
        });
        Watched { store, task }
    }
}

fn matches(pod: &Pod, selector: &Selector) -> bool {
    let empty = BTreeMap::new();
    selector.matches(pod.metadata.labels.as_ref().unwrap_or(&empty))
}

/// Keeps what [`PodInfo`] needs: the rest of a Pod (spec, managed fields, other status) is
/// dropped before it is cached.
pub fn strip(pod: &mut Pod) {
    pod.spec = None;
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == POD_DELETION_COST);
    }
    let ready: Option<Vec<PodCondition>> = pod.status.as_ref().and_then(|s| {
        s.conditions
            .as_ref()
            .map(|c| c.iter().filter(|c| c.type_ == "Ready").cloned().collect())
    });
    pod.status = Some(PodStatus {
        conditions: ready,
        ..PodStatus::default()
    });
}

/// The [`PodInfo`] of a (stripped or full) Pod.
pub fn info(pod: &Pod) -> PodInfo {
    let ready_condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    PodInfo {
        name: pod.metadata.name.clone().unwrap_or_default(),
        ready: ready_condition && pod.metadata.deletion_timestamp.is_none(),
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        deletion_cost: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_DELETION_COST).cloned()),
        rotation: pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ROTATION_LABEL).cloned()),
        terminating: pod.metadata.deletion_timestamp.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("pod")
    }

    #[test]
    fn strip_keeps_what_info_reads() {
        let mut p = pod(serde_json::json!({
            "metadata": {
                "name": "vllm-1", "namespace": "ns", "labels": {"app": "vllm"},
                "creationTimestamp": "2026-01-01T00:00:10Z",
                "annotations": {"controller.kubernetes.io/pod-deletion-cost": "-100", "big": "x"},
                "managedFields": [{"manager": "kubelet"}]
            },
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"}
            ]}
        }));
        let before = info(&p);
        strip(&mut p);
        assert_eq!(info(&p), before);
        assert!(before.ready);
        assert_eq!(before.deletion_cost.as_deref(), Some("-100"));
        assert!(p.spec.is_none() && p.metadata.managed_fields.is_none());
        assert_eq!(p.metadata.annotations.as_ref().map(BTreeMap::len), Some(1));
        assert!(matches(&p, &Selector::from_iter([("app", "vllm")])));
        assert!(!matches(&p, &Selector::from_iter([("app", "other")])));
    }

    #[test]
    fn terminating_or_unready_pods_are_not_ready() {
        let terminating = pod(serde_json::json!({
            "metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }));
        assert!(!info(&terminating).ready);
        let unready = pod(serde_json::json!({
            "metadata": {"name": "b"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        }));
        assert!(!info(&unready).ready);
    }
}
