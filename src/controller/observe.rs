//! Observe: what one sync reads before its step — the spec re-checked, the target, the
//! Secrets and the metric source (once each), the metric readings, and what the step's memory
//! asks for ([`Scaler::reads`]: the pods from the pod cache, the drain's in-flight requests,
//! `deletionCostQuery`, the activation query) (`docs/scaling.md` steps 1–3). Reads only.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::ApiResource;
use kube::core::Selector;
use llmscaler_api::{LLMScalerSpec, ValidationErrors, check_spec};

use super::pod_cache::PodInfo;
use super::target::{self, TargetError, TargetState};
use super::{SyncContext, competitors};
use crate::metrics::PrometheusSource;
use crate::metrics::per_pod::PodSet;
use crate::metrics::{MetricError, MetricSource, Readings};
use crate::step::{self, Reads, Scaler};

/// One sync's readings of `spec.capacity`'s queries: the arrival rate (requests/s) and, with
/// `backlogQuery`, the backlog (requests).
pub(crate) type CapacityReadings = (Result<f64, MetricError>, Option<Result<f64, MetricError>>);

/// What a sync found before its step.
#[derive(Debug)]
pub(crate) enum Observation {
    /// The spec breaks admission rules (the webhook was down or bypassed): nothing is read.
    Invalid(ValidationErrors),
    /// The target (or its kind) could not be read.
    TargetFailed(TargetError),
    /// The metric source could not be built from the spec.
    SourceFailed(MetricError),
    /// Everything the step needs.
    Observed(Box<Observed>),
}

/// The target and the readings of one sync.
#[derive(Debug)]
pub(crate) struct Observed {
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
    /// The readings of `spec.objective`'s queries, in order, when it is set.
    pub objective: Option<Vec<Result<f64, MetricError>>>,
    /// The target's live pods, when the step asked for them.
    pub pods: Option<Result<Vec<step::Pod>, String>>,
    /// The drain's in-flight readings, when the step asked for them.
    pub in_flight: Option<Result<BTreeMap<String, f64>, MetricError>>,
    /// `deletionCostQuery`'s values, when the step asked for them.
    pub deletion_costs: Option<Result<BTreeMap<String, f64>, MetricError>>,
}

/// Re-checks the (defaulted) spec, reads the target, builds the metric source once (reading
/// the Secrets of `serverHeadersFrom` once), and reads the metrics and what `scaler` asks for.
pub(crate) async fn observe(sync: &SyncContext<'_>, scaler: &Scaler) -> Observation {
    let spec = scaler.spec();
    if let Err(violations) = check_spec(spec, &sync.ctx.policy) {
        return Observation::Invalid(violations);
    }
    let namespace_rules =
        llmscaler_api::validation::validate_namespace_rules(spec, sync.namespace, &sync.ctx.policy);
    if !namespace_rules.is_empty() {
        return Observation::Invalid(ValidationErrors(namespace_rules));
    }
    let (resource, target) = match read_target(sync, spec).await {
        Ok(both) => both,
        Err(err) => return Observation::TargetFailed(err),
    };
    let ctx = sync.ctx;
    let headers = match crate::metrics::secret_headers(&ctx.client, sync.namespace, spec).await {
        Ok(headers) => headers,
        Err(err) => return Observation::SourceFailed(err),
    };
    let source = match MetricSource::with_headers(&ctx.metrics_client, spec, &headers) {
        Ok(source) => source,
        Err(err) => return Observation::SourceFailed(err),
    };
    let reads = scaler.reads(&super::target_view(&target), sync.namespace, sync.now_ms);
    let (metric_pods, pods) = read_pods(sync, spec, &target, &reads).await;
    let prometheus = match &source {
        MetricSource::Prometheus(p) => Some(p),
        MetricSource::Decision(_) => None,
    };
    let objective = async {
        let (Some(prometheus), Some(queries)) =
            (prometheus, crate::engine::objective::queries(spec))
        else {
            return None;
        };
        Some(futures::future::join_all(queries.iter().map(|q| prometheus.query(q))).await)
    };
    let (readings, (activation, capacity, in_flight, deletion_costs), objective) = futures::join!(
        source.read_with_pods(spec, metric_pods.as_ref()),
        extra_reads(prometheus, spec, &reads),
        objective
    );
    Observation::Observed(Box::new(Observed {
        resource,
        target,
        readings,
        activation,
        competitor: competitors::from_index(
            &ctx.hpas_by_target,
            &ctx.scalers_by_target,
            sync.scaler,
        ),
        capacity,
        objective,
        pods,
        in_flight,
        deletion_costs,
    }))
}

/// The target's kind, by discovery (cached), and the object, from the watch cache or one GET.
async fn read_target(
    sync: &SyncContext<'_>,
    spec: &LLMScalerSpec,
) -> Result<(ApiResource, TargetState), TargetError> {
    let ctx = sync.ctx;
    let target_ref = &spec.target_ref;
    let resource = ctx.resolver.resolve(&ctx.client, target_ref).await?;
    let cached = ctx.targets.get(&resource, sync.namespace, &target_ref.name);
    let read = match cached {
        Some(object) => Ok(target::state_of(
            Arc::unwrap_or_clone(object),
            &target_ref.kind,
        )),
        None => target::read(&ctx.client, &resource, sync.namespace, target_ref).await,
    };
    match read {
        Ok(state) => Ok((resource, state)),
        Err(err) => {
            if err.is_not_found() {
                ctx.resolver.forget(target_ref).await;
            }
            Err(err)
        }
    }
}

type Extra = (
    Option<Result<f64, MetricError>>,
    Option<CapacityReadings>,
    Option<Result<BTreeMap<String, f64>, MetricError>>,
    Option<Result<BTreeMap<String, f64>, MetricError>>,
);

/// The queries besides `spec.metrics`, concurrently: activation (what `reads` asks),
/// `spec.capacity`'s, the drain's in-flight and `deletionCostQuery` (what `reads` asks).
/// Nothing under the Custom provider.
async fn extra_reads(
    prometheus: Option<&PrometheusSource>,
    spec: &LLMScalerSpec,
    reads: &Reads,
) -> Extra {
    let Some(prometheus) = prometheus else {
        return (None, None, None, None);
    };
    let activation = async {
        match &reads.activation {
            Some(query) => Some(prometheus.query(query).await),
            None => None,
        }
    };
    let capacity = async {
        let capacity = spec.capacity.as_ref()?;
        let backlog = async {
            match &capacity.backlog_query {
                Some(query) => Some(prometheus.query(query).await),
                None => None,
            }
        };
        let (arrival, backlog) =
            futures::join!(prometheus.query(&capacity.arrival_rate_query), backlog);
        Some((arrival, backlog))
    };
    let in_flight = async {
        let (query, pods) = reads.in_flight.as_ref()?;
        Some(prometheus.query_per_pod(query).await.map(|mut values| {
            values.retain(|pod, _| pods.contains(pod));
            values
        }))
    };
    let costs = async {
        match &reads.deletion_costs {
            Some(query) => Some(prometheus.query_per_pod(query).await),
            None => None,
        }
    };
    futures::join!(activation, capacity, in_flight, costs)
}

/// The pods one sync reads from the pod cache: the Ready pods of the per-pod metrics
/// (docs/signals.md#ready-pods), and the live pods the step asked for (victims, drain).
async fn read_pods(
    sync: &SyncContext<'_>,
    spec: &LLMScalerSpec,
    target: &TargetState,
    reads: &Reads,
) -> (
    Option<Result<PodSet, String>>,
    Option<Result<Vec<step::Pod>, String>>,
) {
    let kind = spec.target_ref.kind.as_str();
    let metric_pods = if spec
        .metrics()
        .iter()
        .any(llmscaler_api::MetricSpec::is_per_pod)
    {
        let pods = match target.pod_selector(kind) {
            Ok(labels) => cached(sync, &labels.into_iter().collect()).await,
            Err(why) => Err(why),
        };
        Some(pods.map(|pods| {
            PodSet {
                namespace: sync.namespace.to_owned(),
                ready: pods
                    .into_iter()
                    .filter(|p| p.ready)
                    .map(|p| p.name)
                    .collect(),
            }
        }))
    } else {
        None
    };
    let step_pods = if reads.pods {
        let pods = match label_selector(target, &spec.target_ref.kind) {
            Ok(selector) => cached(sync, &selector).await,
            Err(why) => Err(why),
        };
        Some(pods.map(|pods| {
            pods.into_iter()
                .filter(|p| !p.terminating)
                .map(PodInfo::into_step)
                .collect()
        }))
    } else {
        None
    };
    (metric_pods, step_pods)
}

async fn cached(sync: &SyncContext<'_>, selector: &Selector) -> Result<Vec<PodInfo>, String> {
    sync.ctx
        .pods
        .pods(sync.namespace, selector)
        .await
        .map_err(|e| e.to_string())
}

/// The selector of the target's pods: its `spec.selector` (`matchLabels` and
/// `matchExpressions`), or a LeaderWorkerSet's name label.
///
/// # Errors
/// A message naming the target when it has no usable selector.
fn label_selector(target: &TargetState, kind: &str) -> Result<Selector, String> {
    let name = target.object.metadata.name.clone().unwrap_or_default();
    let Some(selector) = target
        .object
        .data
        .get("spec")
        .and_then(|s| s.get("selector"))
    else {
        return target
            .pod_selector(kind)
            .map(|labels| labels.into_iter().collect());
    };
    let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
        serde_json::from_value(selector.clone())
            .map_err(|err| format!("{kind} {name} has an unreadable spec.selector: {err}"))?;
    let selector = Selector::try_from(selector)
        .map_err(|err| format!("{kind} {name} has an unusable spec.selector: {err}"))?;
    if selector.selects_all() {
        return Err(format!(
            "{kind} {name} has no spec.selector to find its pods"
        ));
    }
    Ok(selector)
}
