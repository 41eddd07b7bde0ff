//! Watch caches indexed by the workload they scale (issue 26): the LLMScalers and the
//! HorizontalPodAutoscalers of each target, kept beside their reflector stores from the same
//! watch events, so the competitor check of a sync ([`super::competitors`]) looks its target up
//! (O(1)) instead of scanning every cached object (O(N) per sync, O(N²) per period).
//!
//! The index holds the store's own `Arc`s (no copy of an object): after each event the reflector
//! has applied, the object is taken from the store; a re-list rebuilds the index from the store
//! once it is complete (`InitDone`), as the store itself swaps its buffer then.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// What the index needs of an object: the target it scales (`kind`, `name`; the namespace is its
/// own), or `None` when it names none.
pub trait ScalesTarget {
    /// `(kind, name)` of the workload the object scales.
    fn target(&self) -> Option<(&str, &str)>;
}

impl ScalesTarget for llmscaler_api::LLMScaler {
    fn target(&self) -> Option<(&str, &str)> {
        Some((&self.spec.target_ref.kind, &self.spec.target_ref.name))
    }
}

impl ScalesTarget for k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler {
    fn target(&self) -> Option<(&str, &str)> {
        let r = &self.spec.as_ref()?.scale_target_ref;
        Some((&r.kind, &r.name))
    }
}

/// The objects of a reflector store grouped by the target they scale (namespace, kind, name).
/// Target keys are hashes: a lookup returns the objects whose key hashes the same, which callers
/// compare in full (a collision only costs a comparison). Objects are known by their exact
/// namespace and name.
pub struct ByTarget<K> {
    inner: Mutex<Inner<K>>,
    hasher: RandomState,
}

struct Inner<K> {
    /// Target key → the objects scaling it.
    objects: HashMap<u64, Vec<Arc<K>>>,
    /// Every indexed object, by namespace and name (to find where an updated one was filed).
    filed: HashSet<Named<K>>,
}

/// An object hashed and compared by its namespace and name.
struct Named<K>(Arc<K>);

impl<K: Resource> Named<K> {
    fn id(&self) -> (Option<&str>, Option<&str>) {
        id_of(self.0.as_ref())
    }
}

/// An object's namespace and name.
fn id_of<K: Resource>(object: &K) -> (Option<&str>, Option<&str>) {
    let meta = object.meta();
    (meta.namespace.as_deref(), meta.name.as_deref())
}

impl<K: Resource> PartialEq for Named<K> {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl<K: Resource> Eq for Named<K> {}

impl<K: Resource> Hash for Named<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id().hash(state);
    }
}

impl<K> Default for ByTarget<K> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                objects: HashMap::new(),
                filed: HashSet::new(),
            }),
            hasher: RandomState::new(),
        }
    }
}

impl<K> ByTarget<K>
where
    K: Resource + ScalesTarget + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    /// The objects of `namespace` that may scale `kind`/`name` (compare them in full).
    pub fn candidates(&self, namespace: &str, kind: &str, name: &str) -> Vec<Arc<K>> {
        let key = self.target_key(namespace, kind, name);
        self.lock().objects.get(&key).cloned().unwrap_or_default()
    }

    /// Follows one watch event the reflector feeding `store` has already applied.
    pub fn observe(&self, store: &Store<K>, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(object) => {
                let current = store.get(&ObjectRef::from_obj(object));
                let mut inner = self.lock();
                match current {
                    Some(current) => self.file(&mut inner, current),
                    None => self.unfile(&mut inner, Arc::new(object.clone())),
                }
            }
            watcher::Event::Delete(object) => {
                self.unfile(&mut self.lock(), Arc::new(object.clone()));
            }
            watcher::Event::InitDone => self.rebuild(store.state()),
            // The store swaps in a re-list only at `InitDone`.
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }

    /// Replaces the whole index with `objects` (after a re-list).
    pub fn rebuild(&self, objects: Vec<Arc<K>>) {
        let mut inner = self.lock();
        inner.objects.clear();
        inner.filed.clear();
        for object in objects {
            self.file(&mut inner, object);
        }
        inner.objects.shrink_to_fit();
        inner.filed.shrink_to_fit();
    }

    /// Files `object`, replacing the version filed before (wherever it was filed).
    fn file(&self, inner: &mut Inner<K>, object: Arc<K>) {
        self.unfile(inner, object.clone());
        if let Some(target) = self.key_of(&object) {
            inner
                .objects
                .entry(target)
                .or_default()
                .push(object.clone());
            inner.filed.insert(Named(object));
        }
    }

    /// Removes whatever version of `object` (by namespace and name) is filed.
    fn unfile(&self, inner: &mut Inner<K>, object: Arc<K>) {
        let Some(Named(old)) = inner.filed.take(&Named(object)) else {
            return;
        };
        let Some(target) = self.key_of(&old) else {
            return;
        };
        if let Some(list) = inner.objects.get_mut(&target) {
            list.retain(|o| id_of(o.as_ref()) != id_of(old.as_ref()));
            if list.is_empty() {
                inner.objects.remove(&target);
            }
        }
    }

    fn key_of(&self, object: &K) -> Option<u64> {
        let (kind, name) = object.target()?;
        let namespace = object.meta().namespace.as_deref().unwrap_or_default();
        Some(self.target_key(namespace, kind, name))
    }

    fn target_key(&self, namespace: &str, kind: &str, name: &str) -> u64 {
        self.hasher.hash_one((namespace, kind, name))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    use kube::runtime::reflector;
    use serde_json::json;

    use super::*;

    fn hpa(name: &str, namespace: &str, target: &str) -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "maxReplicas": 3}
        }))
        .expect("hpa")
    }

    fn names(found: &[Arc<HorizontalPodAutoscaler>]) -> Vec<String> {
        let mut names: Vec<String> = found
            .iter()
            .filter_map(|h| h.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_index_follows_the_watch() {
        let (store, mut writer) = reflector::store::<HorizontalPodAutoscaler>();
        let index = ByTarget::default();
        let mut feed = |event: watcher::Event<HorizontalPodAutoscaler>| {
            writer.apply_watcher_event(&event);
            index.observe(&store, &event);
        };
        feed(watcher::Event::Init);
        feed(watcher::Event::InitApply(hpa("a", "ns", "vllm")));
        feed(watcher::Event::InitApply(hpa("b", "other", "vllm")));
        feed(watcher::Event::InitDone);
        feed(watcher::Event::Apply(hpa("c", "ns", "vllm")));
        assert_eq!(
            names(&index.candidates("ns", "Deployment", "vllm")),
            ["a", "c"]
        );
        assert_eq!(
            names(&index.candidates("other", "Deployment", "vllm")),
            ["b"]
        );
        assert!(index.candidates("ns", "StatefulSet", "vllm").is_empty());
        // Retargeted: filed under its new target only, as its latest version.
        feed(watcher::Event::Apply(hpa("a", "ns", "sglang")));
        assert_eq!(names(&index.candidates("ns", "Deployment", "vllm")), ["c"]);
        let moved = index.candidates("ns", "Deployment", "sglang");
        assert_eq!(names(&moved), ["a"]);
        assert_eq!(
            moved[0]
                .spec
                .as_ref()
                .map(|s| s.scale_target_ref.name.as_str()),
            Some("sglang")
        );
        // Updated in place: one entry, not two.
        feed(watcher::Event::Apply(hpa("c", "ns", "vllm")));
        assert_eq!(names(&index.candidates("ns", "Deployment", "vllm")), ["c"]);
        feed(watcher::Event::Delete(hpa("c", "ns", "vllm")));
        assert!(index.candidates("ns", "Deployment", "vllm").is_empty());
        // A re-list that no longer holds `a` drops it.
        feed(watcher::Event::Init);
        feed(watcher::Event::InitApply(hpa("b", "other", "vllm")));
        assert_eq!(
            names(&index.candidates("ns", "Deployment", "sglang")),
            ["a"],
            "the old list serves until the re-list is done"
        );
        feed(watcher::Event::InitDone);
        assert!(index.candidates("ns", "Deployment", "sglang").is_empty());
        assert_eq!(
            names(&index.candidates("other", "Deployment", "vllm")),
            ["b"]
        );
    }
}
