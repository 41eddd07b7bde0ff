//! Observe: what one sync reads before deciding — the spec re-checked, the target, and the
//! metric readings (`docs/scaling.md` steps 1–3). Reads only; nothing here writes.

use kube::api::ApiResource;
use llmscaler_api::{LLMScalerSpec, ValidationErrors, check_spec};

use super::Context;
use super::target::{self, TargetError, TargetState};
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
}

/// Re-checks the (defaulted) spec, reads the target in `namespace`, and reads the metrics.
pub async fn observe(ctx: &Context, spec: &LLMScalerSpec, namespace: &str) -> Observation {
    if let Err(violations) = check_spec(spec) {
        return Observation::Invalid(violations);
    }
    let namespace_rules = llmscaler_api::validation::validate_namespace_rules(
        spec,
        namespace,
        llmscaler_api::policy::current(),
    );
    if !namespace_rules.is_empty() {
        return Observation::Invalid(llmscaler_api::ValidationErrors(namespace_rules));
    }
    let target_ref = &spec.target_ref;
    let resource = match ctx.resolver.resolve(&ctx.client, target_ref).await {
        Ok(resource) => resource,
        Err(err) => return Observation::TargetFailed(err),
    };
    let target = match target::read(&ctx.client, &resource, namespace, target_ref).await {
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
    let readings = match MetricSource::with_headers(&ctx.metrics_client, spec, &headers) {
        Ok(source) => source.read(spec).await,
        Err(err) => return Observation::SourceFailed(err),
    };
    Observation::Observed(Box::new(Observed {
        resource,
        target,
        readings,
    }))
}
