//! Observe: what one sync reads before deciding — the spec re-checked, the target, and the
//! metric readings (`docs/scaling.md` steps 1–3). Reads only; nothing here writes.

use kube::api::ApiResource;
use llmscaler_api::{LLMScaler, LLMScalerSpec, ValidationErrors, check_spec};

use super::target::{self, TargetError, TargetState};
use super::{Context, competitors};
use crate::engine::capacity::CapacityInput;
use crate::metrics::per_pod::PodSet;
use crate::metrics::{MetricError, MetricSource, Readings};

/// What a sync found before deciding.
#[derive(Debug)]
pub enum Observation {
    /// The spec breaks admission rules (the webhook was down or bypassed): nothing is read.
    Invalid(ValidationErrors),
    /// The target (or its kind) could not be read.
    TargetFailed(TargetError),
    /// The metric source could not be built from the spec.
    SourceFailed(MetricError),
    /// Everything the engine needs.
    Observed(Box<Observed>),
}

/// The target and the readings of one sync.
#[derive(Debug)]
pub struct Observed {
    /// The target's resource, as discovered.
    pub resource: ApiResource,
    /// The target as read.
    pub target: TargetState,
    /// The metric readings.
    pub readings: Readings,
    /// The activation query's value, read only while the target is at zero replicas and
    /// `spec.activation` is set.
    pub activation: Option<Result<f64, MetricError>>,
    /// Another autoscaler of the same target, from the shared HPA cache.
    pub competitor: Option<String>,
    /// The readings of `spec.capacity`'s queries, when it is set (Prometheus provider).
    pub capacity: Option<CapacityReadings>,
}

/// One sync's readings of `spec.capacity`'s queries (docs/scaling.md#capacity-recommender).
#[derive(Debug)]
pub struct CapacityReadings {
    /// `arrivalRateQuery`'s value, requests/s.
    pub arrival: Result<f64, MetricError>,
    /// `backlogQuery`'s value, requests, when set.
    pub backlog: Option<Result<f64, MetricError>>,
}

impl CapacityReadings {
    /// The engine's input, borrowing the typed errors.
    pub fn input(&self) -> CapacityInput<&MetricError> {
        CapacityInput {
            arrival: self.arrival.as_ref().copied(),
            backlog: self.backlog.as_ref().map(|b| b.as_ref().copied()),
        }
    }
}

/// Re-checks the (defaulted) spec, reads the target in `namespace`, and reads the metrics.
pub async fn observe(
    ctx: &Context,
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    namespace: &str,
) -> Observation {
    if let Err(violations) = check_spec(spec, &ctx.policy) {
        return Observation::Invalid(violations);
    }
    let namespace_rules =
        llmscaler_api::validation::validate_namespace_rules(spec, namespace, &ctx.policy);
    if !namespace_rules.is_empty() {
        return Observation::Invalid(llmscaler_api::ValidationErrors(namespace_rules));
    }
    let target_ref = &spec.target_ref;
    let resource = match ctx.resolver.resolve(&ctx.client, target_ref).await {
        Ok(resource) => resource,
        Err(err) => return Observation::TargetFailed(err),
    };
    let cached = ctx.targets.get(&resource, namespace, &target_ref.name);
    let read = match cached {
        Some(object) => Ok(target::state_of((*object).clone(), &target_ref.kind)),
        None => target::read(&ctx.client, &resource, namespace, target_ref).await,
    };
    let target = match read {
        Ok(state) => state,
        Err(err) => {
            if err.is_not_found() {
                ctx.resolver.forget(target_ref).await;
            }
            return Observation::TargetFailed(err);
        }
    };
    let headers = match crate::metrics::secret_headers(&ctx.client, namespace, spec).await {
        Ok(headers) => headers,
        Err(err) => return Observation::SourceFailed(err),
    };
    let source = match MetricSource::with_headers(&ctx.metrics_client, spec, &headers) {
        Ok(source) => source,
        Err(err) => return Observation::SourceFailed(err),
    };
    let pods = if spec
        .metrics()
        .iter()
        .any(llmscaler_api::MetricSpec::is_per_pod)
    {
        Some(ready_pods(ctx, &target, &target_ref.kind, namespace).await)
    } else {
        None
    };
    let readings = source.read_with_pods(spec, pods.as_ref()).await;
    let activation = match (&source, &spec.activation) {
        (MetricSource::Prometheus(prometheus), Some(activation)) if target.spec_replicas == 0 => {
            Some(prometheus.query(&activation.query).await)
        }
        _ => None,
    };
    let capacity = match (&source, &spec.capacity) {
        (MetricSource::Prometheus(prometheus), Some(capacity)) => {
            let backlog = async {
                match &capacity.backlog_query {
                    Some(query) => Some(prometheus.query(query).await),
                    None => None,
                }
            };
            let (arrival, backlog) =
                futures::join!(prometheus.query(&capacity.arrival_rate_query), backlog);
            Some(CapacityReadings { arrival, backlog })
        }
        _ => None,
    };
    let competitor = competitors::from_stores(&ctx.hpas, &ctx.scalers, scaler);
    Observation::Observed(Box::new(Observed {
        resource,
        target,
        readings,
        activation,
        competitor,
        capacity,
    }))
}

/// The target's current Ready pods for its per-pod metrics (docs/signals.md#ready-pods), from
/// the pod cache and the target's pod selector.
async fn ready_pods(
    ctx: &Context,
    target: &TargetState,
    kind: &str,
    namespace: &str,
) -> Result<PodSet, String> {
    let selector = target.pod_selector(kind)?;
    let pods = ctx
        .pods
        .pods(namespace, &selector)
        .await
        .map_err(|e| e.to_string())?;
    Ok(PodSet {
        namespace: namespace.to_owned(),
        ready: pods
            .into_iter()
            .filter(|p| p.ready)
            .map(|p| p.name)
            .collect(),
    })
}
