//! Act: carries out a step's plan and decides nothing. Each effect — rotation labels, victim
//! marks, `spec.replicas`, Events — in the plan's order, each write asking the
//! [`Leadership`](super::leadership::Leadership) handle right before its request; the first
//! write that fails stops the rest (`docs/writing-replicas.md`, `docs/scale-down.md`).

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, ApiResource};
use kube::runtime::events::{Event, EventType};
use llmscaler_api::names::ROTATION_LABEL;
use llmscaler_api::{LLMScaler, LLMScalerSpec};

use super::{Context, SyncContext, target, victims};
use crate::engine::conditions::{self, EventSpec, WriteOutcome};
use crate::step::{Effect, Plan};

/// Carries out `plan`'s effects on the target of `spec` (resource `resource`). Returns what
/// happened to `spec.replicas`: the plan's outcome when every write succeeded, else the failure
/// of the first that did not.
pub(crate) async fn carry_out<E>(
    sync: &SyncContext<'_>,
    spec: &LLMScalerSpec,
    resource: &ApiResource,
    plan: &Plan<E>,
) -> WriteOutcome {
    for effect in &plan.effects {
        if let Err(message) = one(sync, spec, resource, effect).await {
            tracing::warn!(namespace = sync.namespace, name = sync.name, error = %message, "a write of the sync failed; the rest waits for the next sync");
            return effect.failed(message);
        }
    }
    plan.outcome.clone()
}

/// One effect.
async fn one(
    sync: &SyncContext<'_>,
    spec: &LLMScalerSpec,
    resource: &ApiResource,
    effect: &Effect,
) -> Result<(), String> {
    let ctx = sync.ctx;
    let (namespace, name) = (sync.namespace, sync.name);
    let deployment = format!("{namespace}/{}", spec.target_ref.name);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match effect {
        Effect::Rotation { pods: names, value } => {
            let patched = victims::set_rotation(&pods, names, value, &deployment, &ctx.leadership)
                .await
                .map_err(|e| e.to_string())?;
            for _ in 0..patched {
                ctx.telemetry.count_write(namespace, name, "rotation");
            }
            tracing::info!(namespace, name, pods = ?names, rotation = value, "set {ROTATION_LABEL}");
        }
        Effect::Marks(marks) => {
            let patched = victims::apply_plan(
                &pods,
                marks,
                &deployment,
                ctx.mark_deadline,
                &ctx.leadership,
            )
            .await
            .map_err(|e| e.to_string())?;
            for _ in 0..patched {
                ctx.telemetry.count_write(namespace, name, "deletion_cost");
            }
            tracing::info!(deployment = %deployment, victims = ?marks.victims, "marked pods for scale-down");
        }
        Effect::Replicas { to, .. } => {
            ctx.leadership.check().map_err(|e| e.to_string())?;
            target::apply_replicas(&ctx.client, resource, namespace, &spec.target_ref, *to)
                .await
                .map_err(|e| e.to_string())?;
            ctx.telemetry.count_write(namespace, name, "replicas");
        }
        Effect::Event(event) => publish(ctx, sync.scaler, std::slice::from_ref(event)).await,
    }
    Ok(())
}

/// Publishes `events` on the scaler (a failure is logged, not returned: Events are best effort).
pub(crate) async fn publish(ctx: &Context, scaler: &LLMScaler, events: &[EventSpec]) {
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
