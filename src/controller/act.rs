//! Act: carries out a step's plan and decides nothing. Each effect — rotation labels, victim
//! marks, `spec.replicas`, Events — in the plan's order, each write asking the
//! [`Leadership`](super::leadership::Leadership) handle right before its request; the first
//! write that fails stops the rest (`docs/writing-replicas.md`, `docs/scale-down.md`).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource};
use llmscaler_api::LLMScalerSpec;
use llmscaler_api::names::ROTATION_LABEL;

use super::{SyncContext, events, target, victims};
use crate::engine::conditions::WriteOutcome;
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
        Effect::ActivatorRoute { on } => {
            let Some(link) = ctx.activator.as_ref() else {
                return Err("no activator configured (--activator)".to_owned());
            };
            ctx.leadership.check().map_err(|e| e.to_string())?;
            link.set_route(&ctx.client, namespace, spec, *on)
                .await
                .map_err(|e| e.to_string())?;
            ctx.telemetry
                .count_write(namespace, name, "activator_route");
            tracing::info!(
                namespace,
                name,
                on,
                "routed the Service to the activator: {on}"
            );
        }
        Effect::Event(event) => {
            events::publish(ctx, sync.scaler, std::slice::from_ref(event)).await
        }
    }
    Ok(())
}
