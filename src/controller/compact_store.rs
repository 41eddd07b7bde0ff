//! A watch cache of targets that holds each object as its compact JSON text (issue 26: memory
//! per scaler). kube's reflector keeps every object as a `DynamicObject`, whose `serde_json`
//! maps take a B-tree node of about 630 bytes each, however few keys they hold: a pruned
//! Deployment (five small maps, one `managedFields` entry) took about 6 KiB of heap, measured
//! with heaptrack at 2,000 targets (`docs/benchmarks/scale.md`), against about 0.5 KiB as text.
//! A read decodes the text again (a few microseconds for a pruned target, once per sync).
//!
//! Fed with the events of one watch, as a reflector is: `Init` starts a re-list kept aside,
//! `InitApply` fills it, `InitDone` swaps it in (so the old list serves until the new one is
//! complete) and marks the store ready; `Apply` and `Delete` change one object.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::api::DynamicObject;
use kube::runtime::watcher;

/// An object's namespace (empty when cluster-scoped) and name.
type Key = (String, String);

/// Objects by namespace and name, each as compact JSON.
type Objects = HashMap<Key, Box<[u8]>>;

/// The store; clones share it.
#[derive(Clone, Default)]
pub(crate) struct CompactStore {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Default)]
struct Inner {
    objects: Objects,
    /// A re-list in progress (between `Init` and `InitDone`).
    relist: Option<Objects>,
    /// Whether a first list has completed.
    ready: bool,
}

impl CompactStore {
    /// Follows one watch event (objects already pruned by the caller).
    pub fn apply(&self, event: &watcher::Event<DynamicObject>) {
        let mut inner = self.write();
        match event {
            watcher::Event::Init => inner.relist = Some(Objects::new()),
            watcher::Event::InitApply(object) => {
                if let Some((key, text)) = encoded(object) {
                    inner
                        .relist
                        .get_or_insert_with(Objects::new)
                        .insert(key, text);
                }
            }
            watcher::Event::InitDone => {
                let mut objects = inner.relist.take().unwrap_or_default();
                objects.shrink_to_fit();
                inner.objects = objects;
                inner.ready = true;
            }
            watcher::Event::Apply(object) => {
                if let Some((key, text)) = encoded(object) {
                    inner.objects.insert(key, text);
                }
            }
            watcher::Event::Delete(object) => {
                inner.objects.remove(&key_of(object));
            }
        }
    }

    /// Whether a first list has completed (before it, [`CompactStore::get`] finds nothing).
    pub fn is_ready(&self) -> bool {
        self.read().ready
    }

    /// The object `namespace/name` (namespace empty when cluster-scoped), decoded; `None` when
    /// the store does not hold it.
    pub fn get(&self, namespace: &str, name: &str) -> Option<DynamicObject> {
        let inner = self.read();
        let text = inner
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))?;
        // Text this store encoded itself: a decoding failure reads as "not cached" (a GET).
        serde_json::from_slice(text).ok()
    }

    /// How many objects it holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn key_of(object: &DynamicObject) -> Key {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// The key and compact JSON of `object`; `None` if it cannot be encoded (not expected of an
/// object just decoded: it is then left out, and a sync GETs it).
fn encoded(object: &DynamicObject) -> Option<(Key, Box<[u8]>)> {
    let text = serde_json::to_vec(object).ok()?;
    Some((key_of(object), text.into_boxed_slice()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(name: &str, replicas: i64) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1",
                         "managedFields": [{"manager": "llmscaler", "operation": "Apply",
                                            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}},
            "status": {"readyReplicas": replicas}
        }))
        .expect("deployment")
    }

    #[test]
    fn follows_the_watch_and_reads_back_the_same_object() {
        let store = CompactStore::default();
        assert!(!store.is_ready());
        store.apply(&watcher::Event::Init);
        store.apply(&watcher::Event::InitApply(deployment("a", 1)));
        store.apply(&watcher::Event::InitApply(deployment("b", 2)));
        assert!(
            store.get("ns", "a").is_none(),
            "not before the list is done"
        );
        store.apply(&watcher::Event::InitDone);
        assert!(store.is_ready());
        assert_eq!(store.get("ns", "a"), Some(deployment("a", 1)));
        assert!(store.get("other", "a").is_none());
        store.apply(&watcher::Event::Apply(deployment("a", 3)));
        assert_eq!(store.get("ns", "a"), Some(deployment("a", 3)));
        store.apply(&watcher::Event::Delete(deployment("b", 2)));
        assert!(store.get("ns", "b").is_none());
        // A re-list: the old list serves until it is done, then only what it held stays.
        store.apply(&watcher::Event::Init);
        store.apply(&watcher::Event::InitApply(deployment("c", 1)));
        assert_eq!(store.get("ns", "a"), Some(deployment("a", 3)));
        store.apply(&watcher::Event::InitDone);
        assert!(store.get("ns", "a").is_none());
        assert_eq!(store.get("ns", "c"), Some(deployment("c", 1)));
        assert_eq!(store.len(), 1);
    }
}
