//! Other autoscalers on the same workload (docs/writing-replicas.md#competing-autoscalers): a
//! HorizontalPodAutoscaler (also the one a KEDA ScaledObject creates) whose `scaleTargetRef` is
//! the scaler's target keeps writing `spec.replicas` through `/scale`; re-asserting against it
//! would be a write war. The controller watches HPAs (one shared cache, no request per sync) and
//! holds, naming the competitor.

use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use llmscaler_api::{LLMScaler, TargetRef};

use super::by_target::ByTarget;

/// The competitor of `target` in `namespace` among `hpas`, named for a condition message:
/// `KEDA ScaledObject NAME (HorizontalPodAutoscaler HPA)` when a ScaledObject owns the HPA, else
/// `HorizontalPodAutoscaler HPA`. The HPA's `scaleTargetRef` matches on kind, name and API group.
pub fn competitor(
    hpas: &[Arc<HorizontalPodAutoscaler>],
    namespace: &str,
    target: &TargetRef,
) -> Option<String> {
    hpas.iter()
        .filter(|hpa| scales(hpa, namespace, target))
        .map(|hpa| {
            let keda = hpa
                .owner_references()
                .iter()
                .find(|o| o.kind == "ScaledObject" && o.api_version.starts_with("keda.sh/"));
            match keda {
                Some(owner) => format!(
                    "KEDA ScaledObject {} (HorizontalPodAutoscaler {})",
                    owner.name,
                    hpa.name_any()
                ),
                None => format!("HorizontalPodAutoscaler {}", hpa.name_any()),
            }
        })
        .min()
}

/// Whether `hpa` scales `target` in `namespace` (kind, name and API group of `scaleTargetRef`).
fn scales(hpa: &HorizontalPodAutoscaler, namespace: &str, target: &TargetRef) -> bool {
    // Borrowed comparisons, most selective first: this runs over every cached HPA at every sync.
    fn group(api_version: &str) -> &str {
        api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }
    hpa.spec.as_ref().is_some_and(|spec| {
        let r = &spec.scale_target_ref;
        r.name == target.name
            && r.kind == target.kind
            && hpa.metadata.namespace.as_deref() == Some(namespace)
            && group(r.api_version.as_deref().unwrap_or_default()) == group(&target.api_version)
    })
}

/// The competitor of `scaler` from the shared caches (empty until their watches have listed):
/// an HPA on its target, or an older LLMScaler on the same target. Only the objects filed
/// under the scaler's target are looked at ([`ByTarget`]): a sync costs the same at any number of
/// cached HPAs and scalers.
pub fn from_index(
    hpas: &ByTarget<HorizontalPodAutoscaler>,
    scalers: &ByTarget<LLMScaler>,
    scaler: &LLMScaler,
) -> Option<String> {
    let namespace = scaler.namespace().unwrap_or_default();
    let target = &scaler.spec.target_ref;
    let on_target: Vec<_> = hpas
        .candidates(&namespace, &target.kind, &target.name)
        .into_iter()
        .filter(|hpa| scales(hpa, &namespace, target))
        .collect();
    competitor(&on_target, &namespace, target).or_else(|| {
        older_scaler(
            &scalers.candidates(&namespace, &target.kind, &target.name),
            scaler,
        )
    })
}

/// The LLMScaler that owns `scaler`'s target when two point at it: the oldest (creation time,
/// then name) acts, every other one holds naming it (admission refuses the second one; this
/// covers a scaler created while the webhook was down).
pub fn older_scaler(scalers: &[Arc<LLMScaler>], scaler: &LLMScaler) -> Option<String> {
    let key = |s: &LLMScaler| {
        (
            s.metadata.creation_timestamp.clone().map(|t| t.0),
            s.name_any(),
        )
    };
    let target = &scaler.spec.target_ref;
    scalers
        .iter()
        .filter(|other| {
            other.namespace() == scaler.namespace()
                && other.name_any() != scaler.name_any()
                && other.spec.target_ref.kind == target.kind
                && other.spec.target_ref.name == target.name
                && key(other) < key(scaler)
        })
        .min_by_key(|other| key(other))
        .map(|other| format!("LLMScaler {}", other.name_any()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    fn scaler(name: &str, created: &str, target: &str) -> Arc<LLMScaler> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
                "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                         "serverAddress": "http://p:9090", "minReplicas": 1, "maxReplicas": 5}
            }))
            .expect("scaler"),
        )
    }

    #[test]
    fn the_oldest_scaler_of_a_target_acts_the_others_hold() {
        let all = [
            scaler("a", "2026-01-01T00:00:00Z", "vllm"),
            scaler("b", "2026-01-02T00:00:00Z", "vllm"),
            scaler("c", "2026-01-02T00:00:00Z", "vllm"),
            scaler("d", "2025-01-01T00:00:00Z", "other"),
        ];
        assert_eq!(older_scaler(&all, &all[0]), None);
        assert_eq!(older_scaler(&all, &all[1]).as_deref(), Some("LLMScaler a"));
        assert_eq!(older_scaler(&all, &all[2]).as_deref(), Some("LLMScaler a"));
        assert_eq!(older_scaler(&all, &all[3]), None);
        assert_eq!(
            older_scaler(&all[1..3], &all[2]).as_deref(),
            Some("LLMScaler b"),
            "same time: by name"
        );
    }

    use super::*;

    /// The LLMScaler index fed as the controller feeds it (the reflector first, then the index),
    /// through add, modify, re-target, delete and re-create: the competitor check never names the
    /// scaler itself nor a version that is gone, and the older scaler of a target acts.
    #[test]
    fn the_scaler_index_follows_add_modify_retarget_delete_and_recreate() {
        use kube::runtime::{reflector, watcher};
        let (store, mut writer) = reflector::store::<LLMScaler>();
        let scalers = ByTarget::default();
        let hpas = ByTarget::<HorizontalPodAutoscaler>::default();
        let mut feed = |event: watcher::Event<LLMScaler>| {
            writer.apply_watcher_event(&event);
            scalers.observe(&store, &event);
        };
        let a = scaler("a", "2026-01-01T00:00:00Z", "vllm");
        let b = scaler("b", "2026-01-02T00:00:00Z", "vllm");
        feed(watcher::Event::Init);
        feed(watcher::Event::InitApply((*a).clone()));
        feed(watcher::Event::InitDone);
        let check = |s: &LLMScaler| from_index(&hpas, &scalers, s);
        assert_eq!(
            check(&a),
            None,
            "alone on its target: no competitor, not itself"
        );
        // Modified in place (a new version, same target) several times: still no competitor.
        for generation in 2..5 {
            let mut modified = (*a).clone();
            modified.metadata.generation = Some(generation);
            feed(watcher::Event::Apply(modified));
            assert_eq!(
                check(&a),
                None,
                "its own earlier versions are not competitors"
            );
        }
        feed(watcher::Event::Apply((*b).clone()));
        assert_eq!(check(&a), None, "the older one acts");
        assert_eq!(check(&b).as_deref(), Some("LLMScaler a"));
        // b re-targeted: neither competes any more.
        let b_moved = scaler("b", "2026-01-02T00:00:00Z", "sglang");
        feed(watcher::Event::Apply((*b_moved).clone()));
        assert_eq!(check(&a), None);
        assert_eq!(check(&b_moved), None);
        // ... and back.
        feed(watcher::Event::Apply((*b).clone()));
        assert_eq!(check(&b).as_deref(), Some("LLMScaler a"));
        // a deleted: b acts.
        feed(watcher::Event::Delete((*a).clone()));
        assert_eq!(check(&b), None, "a deleted scaler is no competitor");
        // a re-created (same name, created later than b): now a holds, naming b.
        let a_again = scaler("a", "2026-01-03T00:00:00Z", "vllm");
        feed(watcher::Event::Apply((*a_again).clone()));
        assert_eq!(check(&b), None);
        assert_eq!(check(&a_again).as_deref(), Some("LLMScaler b"));
        // A re-list that holds only the re-created a: b's entry is gone, a acts.
        feed(watcher::Event::Init);
        feed(watcher::Event::InitApply((*a_again).clone()));
        feed(watcher::Event::InitDone);
        assert_eq!(check(&a_again), None);
        assert_eq!(scalers.candidates("ns", "Deployment", "vllm").len(), 1);
    }

    fn hpa(
        namespace: &str,
        name: &str,
        target: (&str, &str, &str),
        keda: Option<&str>,
    ) -> Arc<HorizontalPodAutoscaler> {
        let owners = keda.map_or_else(Vec::new, |so| {
            vec![json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": so, "uid": "u"})]
        });
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": name, "namespace": namespace, "ownerReferences": owners},
                "spec": {"scaleTargetRef": {"apiVersion": target.0, "kind": target.1, "name": target.2},
                         "maxReplicas": 5,
                         "metrics": [{"type": "External", "external": {
                             "metric": {"name": "s0-prometheus"},
                             "target": {"type": "AverageValue", "averageValue": "8"}}}]},
                "status": {"currentReplicas": 2, "desiredReplicas": 2,
                           "conditions": [{"type": "ScalingActive", "status": "True",
                                           "reason": "ValidMetricFound", "message": "the HPA was able to compute"}]}
            }))
            .expect("hpa"),
        )
    }

    #[test]
    fn a_cached_hpa_names_the_same_competitor() {
        let target = TargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "vllm".into(),
        };
        let full = hpa(
            "ns",
            "keda-hpa-chat",
            ("apps/v1", "Deployment", "vllm"),
            Some("chat"),
        );
        let mut cached = (*full).clone();
        super::super::cached_hpa(&mut cached);
        assert!(full.status.is_some() && cached.status.is_none());
        assert!(cached.spec.as_ref().is_some_and(|s| s.metrics.is_none()));
        assert_eq!(
            competitor(&[full], "ns", &target),
            competitor(&[Arc::new(cached)], "ns", &target)
        );
    }

    #[test]
    fn an_hpa_or_a_scaled_object_on_the_same_target_is_found() {
        let target = TargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "vllm".into(),
        };
        let hpas = [
            hpa("other", "x", ("apps/v1", "Deployment", "vllm"), None),
            hpa("ns", "y", ("apps/v1", "Deployment", "other"), None),
            hpa("ns", "z", ("apps/v1", "StatefulSet", "vllm"), None),
        ];
        assert_eq!(competitor(&hpas, "ns", &target), None);
        let hpas = [hpa(
            "ns",
            "vllm-hpa",
            ("apps/v1", "Deployment", "vllm"),
            None,
        )];
        assert_eq!(
            competitor(&hpas, "ns", &target).as_deref(),
            Some("HorizontalPodAutoscaler vllm-hpa")
        );
        let hpas = [hpa(
            "ns",
            "keda-hpa-chat",
            ("apps/v1beta9", "Deployment", "vllm"),
            Some("chat"),
        )];
        assert_eq!(
            competitor(&hpas, "ns", &target).as_deref(),
            Some("KEDA ScaledObject chat (HorizontalPodAutoscaler keda-hpa-chat)")
        );
    }
}
