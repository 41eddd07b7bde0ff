//! Other autoscalers on the same workload (docs/writing-replicas.md#competing-autoscalers): a
//! HorizontalPodAutoscaler (also the one a KEDA ScaledObject creates) whose `scaleTargetRef` is
//! the scaler's target keeps writing `spec.replicas` through `/scale`; re-asserting against it
//! would be a write war. The controller watches HPAs (one shared cache, no request per sync) and
//! holds, naming the competitor.

use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use llmscaler_api::TargetRef;

/// The competitor of `target` in `namespace` among `hpas`, named for a condition message:
/// `KEDA ScaledObject NAME (HorizontalPodAutoscaler HPA)` when a ScaledObject owns the HPA, else
/// `HorizontalPodAutoscaler HPA`. The HPA's `scaleTargetRef` matches on kind, name and API group.
pub fn competitor(
    hpas: &[Arc<HorizontalPodAutoscaler>],
    namespace: &str,
    target: &TargetRef,
) -> Option<String> {
    let group = |api_version: &str| {
        api_version
            .rsplit_once('/')
            .map_or("", |(g, _)| g)
            .to_owned()
    };
    let target_group = group(&target.api_version);
    let mut found: Vec<String> = hpas
        .iter()
        .filter(|hpa| hpa.namespace().as_deref() == Some(namespace))
        .filter(|hpa| {
            hpa.spec.as_ref().is_some_and(|spec| {
                let r = &spec.scale_target_ref;
                r.kind == target.kind
                    && r.name == target.name
                    && group(r.api_version.as_deref().unwrap_or_default()) == target_group
            })
        })
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
        .collect();
    found.sort();
    found.into_iter().next()
}

/// The competitor of `target` from the shared HPA cache (empty until the watch has listed).
pub fn from_store(
    store: &Store<HorizontalPodAutoscaler>,
    namespace: &str,
    target: &TargetRef,
) -> Option<String> {
    competitor(&store.state(), namespace, target)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
                         "maxReplicas": 5}
            }))
            .expect("hpa"),
        )
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
