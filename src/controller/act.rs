//! Act: every write of a sync — victim marks, `spec.replicas`, status, Events — each asking the
//! [`Leadership`](super::leadership::Leadership) handle right before its request
//! (`docs/writing-replicas.md`, `docs/scale-down.md`).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use llmscaler_api::names::{FIELD_MANAGER, api_version, kind};
use llmscaler_api::{LLMScaler, LLMScalerSpec, LLMScalerStatus, MetricProvider, ScaleDownBehavior};
use serde_json::json;

use super::Context;
use super::decide::{Plan, ReplicasWrite};
use super::leadership::NotLeader;
use super::observe::Observed;
use super::state::ScalerState;
use super::target::{self, TargetError, TargetState};
use super::victims::{self, VictimError};
use crate::engine::conditions::{self, EventSpec, WriteOutcome};
use crate::metrics::MetricSource;

/// Why a write of `spec.replicas` (with its victim marks) did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Marking the victims failed: the scale-down waits a sync.
    #[error(transparent)]
    Mark(#[from] VictimError),
    /// Applying `spec.replicas` failed.
    #[error(transparent)]
    Apply(#[from] TargetError),
    /// This replica does not lead (any more).
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
}

impl WriteError {
    /// The write outcome a condition reports.
    pub fn outcome(&self) -> WriteOutcome {
        match self {
            WriteError::Mark(err) => WriteOutcome::MarkFailed(err.to_string()),
            WriteError::Apply(err) => WriteOutcome::WriteFailed(err.to_string()),
            WriteError::NotLeader(err) => WriteOutcome::WriteFailed(err.to_string()),
        }
    }
}

/// Carries out the plan's write of `spec.replicas`, if any, and announces it with an Event.
/// Returns what happened, for `AbleToScale` and `ReplicasContested`.
pub async fn carry_out<E>(
    ctx: &Context,
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    observed: &Observed,
    plan: &Plan<E>,
    state: &mut ScalerState,
) -> WriteOutcome {
    let Some(write) = &plan.write else {
        return WriteOutcome::NotNeeded;
    };
    let namespace = scaler.namespace().unwrap_or_default();
    let name = scaler.name_any();
    let scaler_key = (namespace.as_str(), name.as_str());
    let written = write_replicas(
        ctx,
        spec,
        scaler_key,
        &observed.resource,
        &observed.target,
        write,
        state,
    )
    .await;
    match written {
        Ok(()) => {
            let event = conditions::replicas_event(
                (spec.target_ref.kind.as_str(), spec.target_ref.name.as_str()),
                (write.from, write.to),
                plan.decision.action,
                plan.decision.reason,
                plan.contested_by.as_deref(),
            );
            publish(ctx, scaler, event.as_slice()).await;
            WriteOutcome::Wrote
        }
        Err(err) => {
            tracing::warn!(namespace, name, error = %err, "writing spec.replicas failed");
            err.outcome()
        }
    }
}

/// Marks the victims of a scale-down (Deployments with `behavior: CacheAware`), then applies
/// `spec.replicas` of the target.
///
/// # Errors
/// [`WriteError`]: nothing was applied (marks may have been).
pub async fn write_replicas(
    ctx: &Context,
    spec: &LLMScalerSpec,
    (namespace, name): (&str, &str),
    resource: &ApiResource,
    target: &TargetState,
    write: &ReplicasWrite,
    state: &mut ScalerState,
) -> Result<(), WriteError> {
    if write.scale_down {
        mark_victims(ctx, spec, (namespace, name), target, write, state).await?;
    }
    ctx.leadership.check()?;
    target::apply_replicas(&ctx.client, resource, namespace, &spec.target_ref, write.to).await?;
    ctx.telemetry.count_write(namespace, name, "replicas");
    Ok(())
}

/// Marks the pods a Deployment scale-down to `write.to` will remove (`docs/scale-down.md`): the
/// drained pods when a drain finished, else a fresh choice.
///
/// # Errors
/// [`VictimError`] when the pods cannot be listed, the cost query fails, or the marks cannot be
/// written or seen in time.
async fn mark_victims(
    ctx: &Context,
    spec: &LLMScalerSpec,
    (namespace, name): (&str, &str),
    target: &TargetState,
    write: &ReplicasWrite,
    state: &mut ScalerState,
) -> Result<(), VictimError> {
    if !target.is_deployment
        || spec.effective_scale_down_behavior() != ScaleDownBehavior::CacheAware
    {
        return Ok(());
    }
    let remove = if write.drained.is_empty() {
        usize::try_from(target.spec_replicas.saturating_sub(write.to).max(0)).unwrap_or(0)
    } else {
        // The drain chose them already: no cost query.
        0
    };
    let Choice {
        pods,
        deployment,
        candidates,
        plan,
    } = choose_victims(ctx, spec, (namespace, name), target, remove, state).await?;
    let plan = if write.drained.is_empty() {
        plan
    } else {
        victims::plan_for(&candidates, &write.drained)
    };
    let patched = victims::apply_plan(
        &pods,
        &plan,
        &deployment,
        ctx.mark_deadline,
        &ctx.leadership,
    )
    .await?;
    for _ in 0..patched {
        ctx.telemetry.count_write(namespace, name, "deletion_cost");
    }
    tracing::info!(deployment = %deployment, victims = ?plan.victims, "marked pods for scale-down");
    Ok(())
}

/// The pods of a Deployment and the victims of removing `remove` of them.
pub struct Choice {
    /// The pods API of the namespace.
    pub pods: Api<Pod>,
    /// `namespace/name` of the Deployment.
    pub deployment: String,
    /// Its live pods.
    pub candidates: Vec<victims::Candidate>,
    /// The marks (and victims) of the cache-aware choice.
    pub plan: victims::Plan,
}

/// Lists the Deployment's live pods (the one pod read of a scale-down; the drain reads them
/// here too) and plans the cache-aware choice of `remove` victims (`docs/scale-down.md#which-pods`).
///
/// # Errors
/// [`VictimError`] when the Deployment has no selector, the pods cannot be listed or the cost
/// query fails.
pub async fn choose_victims(
    ctx: &Context,
    spec: &LLMScalerSpec,
    (namespace, name): (&str, &str),
    target: &TargetState,
    remove: usize,
    state: &mut ScalerState,
) -> Result<Choice, VictimError> {
    let deployment = format!("{namespace}/{}", spec.target_ref.name);
    let selector = victims::selector_string(&target.object.data)
        .ok_or_else(|| VictimError::NoSelector(deployment.clone()))?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let candidates = victims::candidates(&pods, &selector, &deployment).await?;
    let query = spec
        .scale_down
        .as_ref()
        .and_then(|s| s.deletion_cost_query.as_deref());
    let costs = match (query, spec.effective_provider()) {
        (Some(query), MetricProvider::Prometheus) if remove > 0 => {
            let headers = crate::metrics::secret_headers(&ctx.client, namespace, spec)
                .await
                .map_err(VictimError::CostQuery)?;
            match MetricSource::with_headers(&ctx.metrics_client, spec, &headers)
                .map_err(VictimError::CostQuery)?
            {
                MetricSource::Prometheus(prometheus) => Some(
                    prometheus
                        .query_per_pod(query)
                        .await
                        .map_err(VictimError::CostQuery)?,
                ),
                MetricSource::Decision(_) => None,
            }
        }
        (Some(_), MetricProvider::Custom) => {
            if !std::mem::replace(&mut state.warned_cost_query, true) {
                tracing::info!(
                    namespace,
                    name,
                    "deletionCostQuery is ignored under the Custom provider; newest pods go first"
                );
            }
            None
        }
        _ => None,
    };
    let plan = victims::plan(&candidates, remove, costs.as_ref());
    Ok(Choice {
        pods,
        deployment,
        candidates,
        plan,
    })
}

/// Why the status write failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The API server refused or failed the patch.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// This replica does not lead (any more).
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
}

/// Server-side applies `status` to the scaler's status subresource under [`FIELD_MANAGER`],
/// unless it equals the current status. Returns whether it wrote.
///
/// # Errors
/// [`StatusError`].
pub async fn write_status(
    ctx: &Context,
    scaler: &LLMScaler,
    status: LLMScalerStatus,
) -> Result<bool, StatusError> {
    if scaler.status.as_ref() == Some(&status) {
        return Ok(false);
    }
    let namespace = scaler.namespace().unwrap_or_default();
    let name = scaler.name_any();
    tracing::debug!(scaler = %name, before = ?scaler.status, after = ?status, "status changed");
    let body = json!({
        "apiVersion": api_version(),
        "kind": kind(),
        "status": status,
    });
    ctx.leadership.check()?;
    let api: Api<LLMScaler> = Api::namespaced(ctx.client.clone(), &namespace);
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    ctx.telemetry.count_write(&namespace, &name, "status");
    Ok(true)
}

/// Publishes `events` on the scaler (a failure is logged, not returned: Events are best effort).
pub async fn publish(ctx: &Context, scaler: &LLMScaler, events: &[EventSpec]) {
    let reference = scaler.object_ref(&());
    for spec in events {
        if ctx.leadership.check().is_err() {
            return;
        }
        let event = Event {
            type_: if spec.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: spec.reason.as_str().to_owned(),
            note: Some(conditions::clean_message(
                &spec.note,
                conditions::EVENT_NOTE_MAX_BYTES,
            )),
            action: spec.action.to_owned(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %err, reason = %spec.reason, "cannot publish Event");
        }
    }
}
