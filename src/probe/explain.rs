//! Why the fleet is where it is: the engine's steps for one scaler now, in the order the engine
//! applies them (readings, per-metric recommendation, clamp with schedules, stabilization window
//! and when its maximum expires, step cap, scale-up cap, guards) and the next expected change
//! (`llmscaler probe --name`, docs/troubleshooting.md). Pure: the live part reads the cluster.

use std::fmt::{Display, Write as _};

use k8s_openapi::jiff::Timestamp;
use llmscaler_api::LLMScalerSpec;

use crate::engine::{self, Action, History, Limit, Observation, Policy, Reason, Signal};
use crate::step::{self, Acting, Scaler};

/// What was read of the scaler's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetView<'a> {
    /// `targetRef.kind` and `.name`.
    pub kind: &'a str,
    /// The workload's name.
    pub name: &'a str,
    /// The engine's view: `spec.replicas`, `readyReplicas`, rollout.
    pub observed: Observation,
}

/// The explanation and what the engine would do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The lines to print, in the engine's order.
    pub text: String,
    /// Nothing was measurable: the fleet is held.
    pub held: bool,
    /// Some metrics were skipped (the others decided).
    pub skipped: bool,
    /// `spec.replicas` the operator would write now.
    pub replicas: i32,
    /// The engine's reason.
    pub reason: Reason,
}

/// Explains one sync at `now` of `spec` (defaulted, valid) on `target` with `signal`, from the
/// stabilization `history` (as persisted in status) and the schedules active now.
pub fn explain<E: Clone + Display>(
    spec: &LLMScalerSpec,
    target: &TargetView<'_>,
    signal: &Signal<E>,
    history: &History,
    now: Timestamp,
) -> Explanation {
    let observed = step::Observation {
        now_ms: now.as_millisecond(),
        target: step_target(target.observed),
        signal: signal.clone(),
        capacity: None,
        objective: None,
        activation: None,
        pods: None,
        in_flight: None,
        deletion_costs: None,
        activator: None,
        acting: Acting::Active,
        competitor: None,
        status: None,
    };
    let scaler = Scaler::new(spec, None).with_history(history.clone());
    explain_step(spec, target, scaler, &observed, history)
}

/// The step's view of a target the probe read: all of it, as the operator would see it, with
/// the operator owning `spec.replicas` (the probe explains the decision, not the contest).
pub fn step_target(observed: Observation) -> step::Target {
    step::Target {
        spec_replicas: observed.spec_replicas,
        ready_replicas: observed.ready_replicas,
        rollout_in_progress: observed.rollout_in_progress,
        is_deployment: false,
        owns_replicas: true,
        other_replicas_managers: Vec::new(),
        template: None,
        max_num_seqs: None,
    }
}

/// Explains the operator's step (`scaler`, restored as the operator would hold it) on
/// `observed`, from the stabilization `history` it starts from.
pub fn explain_step<E: Clone + Display>(
    spec: &LLMScalerSpec,
    target: &TargetView<'_>,
    mut scaler: Scaler,
    observed: &step::Observation<'_, E>,
    history: &History,
) -> Explanation {
    let plan = scaler.step(observed);
    let policy = plan.policy.clone();
    let active = plan.active_schedules.clone();
    let decision = plan.decision;
    let now_ms = observed.now_ms;
    let now = Timestamp::from_millisecond(now_ms).unwrap_or(Timestamp::UNIX_EPOCH);
    let observed = target.observed;
    let mut out = String::new();
    let spec_replicas = observed.spec_replicas;
    let _ = writeln!(
        out,
        "target {} {}: spec.replicas {spec_replicas}, readyReplicas {}{}",
        target.kind,
        target.name,
        observed.ready_replicas,
        if observed.rollout_in_progress {
            ", a rollout is in progress"
        } else {
            ""
        }
    );

    let _ = writeln!(
        out,
        "1. readings (baseline max(ready, 1) = {}):",
        observed.ready_replicas.max(1)
    );
    let skipped = readings_step(&mut out, spec, &decision);
    let held = decision.recommendation.is_none();
    let raw = decision.recommendation.unwrap_or(spec_replicas);
    if held {
        let _ = writeln!(
            out,
            "2. recommendation: nothing measurable: hold at spec.replicas {spec_replicas}"
        );
    } else {
        let _ = writeln!(out, "2. recommendation: {raw} (the largest)");
    }

    let clamped = clamp_step(&mut out, &policy, &active, raw);
    let window_end = window_step(
        &mut out,
        &policy,
        history,
        clamped,
        decision.desired,
        now_ms,
    );
    caps_step(&mut out, &policy, &decision, spec_replicas);
    result_step(&mut out, &decision, observed);
    if spec.objective.is_some() {
        capacity_line(&mut out, plan.capacity.as_ref());
    }
    let _ = writeln!(
        out,
        "next: {}",
        next_change(spec, &decision, held, window_end, now)
    );
    Explanation {
        text: out,
        held,
        skipped,
        replicas: decision.replicas,
        reason: decision.reason,
    }
}

/// The objective's capacity estimate and how it was obtained (docs/objective.md#status).
fn capacity_line(out: &mut String, capacity: Option<&llmscaler_api::CapacityStatus>) {
    match capacity {
        Some(c) => {
            let _ = writeln!(
                out,
                "capacity: {} requests/s per replica ({}; correction {}, lower bound {}, {} syncs of evidence): {}",
                c.requests_per_second,
                c.basis,
                c.correction.as_deref().unwrap_or("1"),
                c.lower_bound.as_deref().unwrap_or("-"),
                c.samples.unwrap_or(0),
                c.message.as_deref().unwrap_or("")
            );
        }
        None => {
            let _ = writeln!(
                out,
                "capacity: no estimate yet (no completions seen): the ttft guardrail and the bounds act"
            );
        }
    }
}

/// Step 3: the clamp to the bounds in force (with the active schedules). Returns the clamped
/// recommendation.
fn clamp_step(out: &mut String, policy: &Policy, active: &[String], raw: i32) -> i32 {
    let (clamped, limited) = policy.clamp(raw);
    let schedules = if active.is_empty() {
        String::new()
    } else {
        format!(" with schedules {}", active.join(", "))
    };
    let clamp_text = match limited {
        Some(Limit::Min) => format!("raised to the floor {}", policy.min_replicas),
        Some(Limit::Max) => format!("lowered to the ceiling {}", policy.max_replicas),
        None => "within range".to_owned(),
    };
    let _ = writeln!(
        out,
        "3. clamp to [{}, {}]{schedules}: {clamped} ({clamp_text})",
        policy.min_replicas, policy.max_replicas
    );

    clamped
}

/// Steps 5 and 6: the step cap of a scale-down and the scale-up rate cap.
fn caps_step<E>(
    out: &mut String,
    policy: &Policy,
    decision: &engine::Decision<E>,
    spec_replicas: i32,
) {
    if decision.desired < spec_replicas && policy.max_step_replicas > 0 {
        let _ = writeln!(
            out,
            "5. step cap {}: {}",
            policy.max_step_replicas,
            spec_replicas
                .saturating_sub(policy.max_step_replicas)
                .max(decision.desired)
        );
    } else {
        let _ = writeln!(out, "5. step cap: not applied");
    }
    if decision.reason == Reason::ScaleUpLimited {
        let _ = writeln!(
            out,
            "6. scale-up rate cap: at most {} now",
            decision.replicas
        );
    } else {
        let _ = writeln!(out, "6. scale-up rate cap: not applied");
    }
}

/// Step 1: each metric's value, target and recommendation, or why it was skipped. Returns
/// whether any was skipped.
fn readings_step<E: Display>(
    out: &mut String,
    spec: &LLMScalerSpec,
    decision: &engine::Decision<E>,
) -> bool {
    let targets: Vec<&str> = spec.metrics().iter().map(|m| m.target.as_str()).collect();
    let mut skipped = false;
    for (i, m) in decision.metrics.iter().enumerate() {
        let target_text = targets
            .get(i)
            .map(|t| format!(" target {t}"))
            .unwrap_or_default();
        match (&m.recommendation, m.value) {
            (Ok(r), Some(v)) => {
                let _ = writeln!(
                    out,
                    "   {}: value {v}{target_text} -> {r} replica(s)",
                    m.name
                );
            }
            (Ok(r), None) => {
                let _ = writeln!(out, "   {}: -> {r} replica(s)", m.name);
            }
            (Err(skip), _) => {
                skipped = true;
                let _ = writeln!(out, "   {}: skipped, never read as 0: {skip}", m.name);
            }
        }
    }
    skipped
}

/// Step 7 and the result: what the guards deferred and what the operator writes.
fn result_step<E>(out: &mut String, decision: &engine::Decision<E>, observed: Observation) {
    let spec_replicas = observed.spec_replicas;
    let guard = match decision.reason {
        Reason::RolloutInProgress => {
            "a Deployment rollout is in progress: the change waits".to_owned()
        }
        Reason::ScaleDownNotSettled => format!(
            "readyReplicas {} != spec.replicas {spec_replicas}: the scale-down waits",
            observed.ready_replicas
        ),
        _ => "none deferred the change".to_owned(),
    };
    let _ = writeln!(out, "7. guards: {guard}");
    let result = if decision.replicas == spec_replicas {
        format!(
            "spec.replicas stays {spec_replicas} ({})",
            decision.reason.as_str()
        )
    } else {
        format!(
            "spec.replicas {spec_replicas} -> {} ({})",
            decision.replicas,
            decision.reason.as_str()
        )
    };
    let _ = writeln!(out, "=> {result}");
}

/// Step 4; returns when the window's maximum above `clamped` expires, if it holds the fleet.
fn window_step(
    out: &mut String,
    policy: &Policy,
    history: &History,
    clamped: i32,
    desired: i32,
    now_ms: i64,
) -> Option<Timestamp> {
    if policy.window_ms == 0 {
        let _ = writeln!(out, "4. stabilization window: off");
        return None;
    }
    let cutoff = now_ms.saturating_sub(policy.window_ms);
    let holding = history
        .records()
        .iter()
        .filter(|r| r.at_ms > cutoff && r.replicas > clamped)
        .map(|r| r.at_ms.saturating_add(policy.window_ms))
        .max()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok());
    match holding {
        Some(end) => {
            let _ = writeln!(
                out,
                "4. stabilization window {} s: maximum {desired} holds until {end} (in {} s)",
                policy.window_ms / 1000,
                seconds_until(now_ms, end)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "4. stabilization window {} s: maximum {desired}",
                policy.window_ms / 1000
            );
        }
    }
    holding
}

/// Whole seconds from `now_ms` until `end`, rounded up, at least 0.
fn seconds_until(now_ms: i64, end: Timestamp) -> i64 {
    ((end.as_millisecond() - now_ms).max(0) + 999) / 1000
}

fn next_change<E>(
    spec: &LLMScalerSpec,
    decision: &engine::Decision<E>,
    held: bool,
    window_end: Option<Timestamp>,
    now: Timestamp,
) -> String {
    let period = spec.effective_sync_period_seconds();
    match (decision.action, decision.reason) {
        (Action::ScaleUp | Action::ScaleDown, _) => {
            format!("the next sync (every {period} s) writes it")
        }
        (_, Reason::RolloutInProgress) => "when the rollout completes".to_owned(),
        (_, Reason::ScaleDownNotSettled) => "when readyReplicas reaches spec.replicas".to_owned(),
        (_, Reason::ScaleDownStabilized) => match window_end {
            Some(end) => format!(
                "a scale-down at {end} (in {} s) when the window's maximum expires, if the load stays",
                seconds_until(now.as_millisecond(), end)
            ),
            None => "a scale-down when the window's maximum expires".to_owned(),
        },
        (_, Reason::ScaleUpLimited) => "more once the scale-up period allows it".to_owned(),
        (_, Reason::GuardrailHeld) => {
            "a scale-down once every guardrail is at or below its target".to_owned()
        }
        _ if held => "when a metric becomes measurable again".to_owned(),
        _ => "when the load changes".to_owned(),
    }
}

#[cfg(test)]
mod tests;
