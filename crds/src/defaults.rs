//! The defaults of docs/admission.md#defaults, in one place: the mutating webhook writes them into
//! stored objects, and
//! `simulate`, `probe` and the controller apply the same function to what they read.

use crate::types::{LLMScalerSpec, MetricProvider, ScaleDown, ScaleDownBehavior};

/// `syncPeriodSeconds` default, seconds (docs/resource.md).
pub const SYNC_PERIOD_SECONDS: i32 = 15;
/// `retryPeriodSeconds` default, seconds (docs/resource.md).
pub(crate) const RETRY_PERIOD_SECONDS: i32 = 10;
/// `customProvider.path` default (docs/resource.md,
/// docs/providers.md#custom-provider-decision-server).
pub(crate) const DECISIONS_PATH: &str = "/decisions";

/// Fills every default of docs/admission.md#defaults that is not set: `metricProvider: Prometheus`,
/// `syncPeriodSeconds: 15`, `retryPeriodSeconds: 10`, `customProvider.path: /decisions` (when a
/// `customProvider` is present), and `scaleDown` with `stabilizationWindowSeconds: 0`,
/// `maxStepReplicas: 0`, `behavior: CacheAware`, and `drain.drainSeconds: 120` when a `drain` is
/// present. Values already set are never changed.
pub fn apply_defaults(spec: &mut LLMScalerSpec) {
    spec.metric_provider
        .get_or_insert(MetricProvider::Prometheus);
    spec.sync_period_seconds.get_or_insert(SYNC_PERIOD_SECONDS);
    spec.retry_period_seconds
        .get_or_insert(RETRY_PERIOD_SECONDS);
    if let Some(custom) = spec.custom_provider.as_mut() {
        custom
            .path
            .get_or_insert_with(|| DECISIONS_PATH.to_string());
    }
    let scale_down = spec.scale_down.get_or_insert_with(ScaleDown::default);
    scale_down.stabilization_window_seconds.get_or_insert(0);
    scale_down.max_step_replicas.get_or_insert(0);
    scale_down
        .behavior
        .get_or_insert(ScaleDownBehavior::CacheAware);
    if let Some(drain) = scale_down.drain.as_mut() {
        drain
            .drain_seconds
            .get_or_insert(crate::types::DEFAULT_DRAIN_SECONDS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CustomProvider, TargetRef};

    fn minimal() -> LLMScalerSpec {
        let target = TargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "vllm".into(),
        };
        LLMScalerSpec::new(target, "http://prometheus:9090", 1, 5)
    }

    #[test]
    fn fills_every_default() {
        let mut spec = minimal();
        spec.custom_provider = Some(CustomProvider {
            service_id: "svc".into(),
            ..Default::default()
        });
        apply_defaults(&mut spec);
        assert_eq!(spec.metric_provider, Some(MetricProvider::Prometheus));
        assert_eq!(spec.sync_period_seconds, Some(15));
        assert_eq!(spec.retry_period_seconds, Some(10));
        assert_eq!(
            spec.custom_provider.and_then(|c| c.path),
            Some("/decisions".to_string())
        );
        let sd = spec.scale_down.expect("scaleDown defaulted");
        assert_eq!(sd.stabilization_window_seconds, Some(0));
        assert_eq!(sd.max_step_replicas, Some(0));
        assert_eq!(sd.behavior, Some(ScaleDownBehavior::CacheAware));
        assert_eq!(sd.deletion_cost_query, None);
    }

    #[test]
    fn keeps_values_already_set() {
        let mut spec = minimal();
        spec.metric_provider = Some(MetricProvider::Custom);
        spec.sync_period_seconds = Some(30);
        spec.scale_down = Some(ScaleDown {
            stabilization_window_seconds: Some(300),
            max_step_replicas: Some(2),
            behavior: Some(ScaleDownBehavior::None),
            deletion_cost_query: None,
            drain: None,
        });
        apply_defaults(&mut spec);
        assert_eq!(spec.metric_provider, Some(MetricProvider::Custom));
        assert_eq!(spec.sync_period_seconds, Some(30));
        let sd = spec.scale_down.expect("scaleDown kept");
        assert_eq!(sd.stabilization_window_seconds, Some(300));
        assert_eq!(sd.max_step_replicas, Some(2));
        assert_eq!(sd.behavior, Some(ScaleDownBehavior::None));
    }

    #[test]
    fn no_custom_provider_is_invented() {
        let mut spec = minimal();
        apply_defaults(&mut spec);
        assert_eq!(spec.custom_provider, None);
    }
}
