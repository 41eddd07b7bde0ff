//! When a scaler's Service routes to the activator
//! (docs/scaling.md#holding-requests-while-waking-from-zero), decided purely from the sync's
//! observation and plan:
//! - **on** while the target has no Ready replica, and as soon as the decision is zero (before
//!   a drain takes the last replica out of rotation and before the write to zero, so no request
//!   arrives to nothing);
//! - **off** once a replica is Ready and the decision keeps at least one: no extra hop in
//!   steady state.
//!
//! A request held at zero wakes the fleet to one replica ([`held_wakes`]).

use llmscaler_api::LLMScalerSpec;

use super::{ActivatorView, Effect, Observation, Plan};

/// Whether requests held by the activator wake a fleet at zero: `holdRequests` is on and at
/// least one request is held.
pub(crate) fn held_wakes(spec: &LLMScalerSpec, activator: Option<&ActivatorView>) -> bool {
    holds(spec) && activator.is_some_and(|a| a.held > 0)
}

fn holds(spec: &LLMScalerSpec) -> bool {
    spec.scale_to_zero.as_ref().is_some_and(|s| s.holds())
}

/// Whether the Service should route to the activator after this sync.
pub(crate) fn wanted<E>(observed: &Observation<'_, E>, plan: &Plan<E>) -> bool {
    let after = plan.replicas_after(observed.target.spec_replicas);
    observed.target.ready_replicas == 0 || after == 0 || plan.decision.replicas == 0
}

/// Adds the route's change, if any: `on` first of all effects (before rotation labels and the
/// write to zero), `off` last. Nothing without `holdRequests` or an activator, and nothing in
/// a passive sync (paused or advisory scalers write nothing).
pub(super) fn plan<E>(spec: &LLMScalerSpec, observed: &Observation<'_, E>, plan: &mut Plan<E>) {
    let Some(view) = observed.activator else {
        return;
    };
    if !holds(spec) || plan.acting != super::Acting::Active || plan.competitor.is_some() {
        return;
    }
    let on = wanted(observed, plan);
    match (on, view.routed) {
        (true, false) => plan.effects.insert(0, Effect::ActivatorRoute { on: true }),
        (false, true) => plan.effects.push(Effect::ActivatorRoute { on: false }),
        (true, true) | (false, false) => {}
    }
}
