//! Report: what a sync tells the world — the new status (conditions merged with their transition
//! times, replicas, the persisted history), the Events of condition flips, the operator's own
//! metrics and the sync log line (`docs/conditions.md`, `docs/metrics.md`). Building the status is
//! pure; [`super::act`] writes it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use llmscaler_api::{LLMScaler, LLMScalerSpec, LLMScalerStatus, PausedStatus};

use llmscaler_api::names::Reason;

use super::decide::{Acting, Plan};
use super::history::history_to_persist;
use super::state::ScalerState;
use super::target::TargetState;
use crate::engine::conditions::{
    self, ConditionSpec, EventSpec, Ownership, SyncReport, WriteOutcome,
};
use crate::engine::{Decision, History};
use crate::metrics::Readings;
use crate::telemetry::Metrics;

/// What a sync established for the status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The target's ready replicas, when the target was read.
    pub current_replicas: Option<i32>,
    /// status `desiredReplicas`, when a decision was made.
    pub desired_replicas: Option<i32>,
    /// `(from, to)` when `spec.replicas` was written.
    pub wrote_replicas: Option<(i32, i32)>,
    /// The conditions the sync decided (others keep their previous value).
    pub conditions: Vec<ConditionSpec>,
    /// The stabilization history and its refresh interval (ms), when a decision was made.
    pub history: Option<(History, i64)>,
    /// The schedules active, when a decision was made.
    pub active_schedules: Option<Vec<String>>,
    /// Whether the operator acted, when a decision was made: `Some(None)` active,
    /// `Some(Some(by))` paused or advisory (what holds it).
    pub passive_by: Option<Option<String>>,
    /// The drain in progress, when a decision was made: `Some(None)` none.
    pub draining: Option<Option<llmscaler_api::DrainingStatus>>,
    /// The measured start-up time, seconds, when `spec.startup` is set and one was measured.
    pub startup_seconds: Option<i32>,
}

/// The new status of `scaler` after a sync at `now`, and the Events of the condition flips.
pub fn status(
    scaler: &LLMScaler,
    outcome: &Outcome,
    now: Timestamp,
) -> (LLMScalerStatus, Vec<EventSpec>) {
    let previous = scaler.status.clone().unwrap_or_default();
    let previous_conditions = previous.conditions.as_deref().unwrap_or_default();
    let (merged, flipped) = conditions::merge(
        previous_conditions,
        &outcome.conditions,
        scaler.metadata.generation,
        now,
    );
    let events = conditions::flip_events(previous_conditions, &flipped);
    let status = LLMScalerStatus {
        current_replicas: outcome.current_replicas.or(previous.current_replicas),
        desired_replicas: outcome.desired_replicas.or(previous.desired_replicas),
        observed_generation: scaler.metadata.generation,
        last_scale_time: if outcome.wrote_replicas.is_some_and(|(from, to)| from != to) {
            Some(Time(now))
        } else {
            previous.last_scale_time.clone()
        },
        recommendations: match &outcome.history {
            Some((history, refresh_ms)) => {
                history_to_persist(previous.recommendations.as_ref(), history, *refresh_ms)
            }
            None => previous.recommendations.clone(),
        },
        active_schedules: match &outcome.active_schedules {
            Some(active) => (!active.is_empty()).then(|| active.clone()),
            None => previous.active_schedules.clone(),
        },
        paused: match &outcome.passive_by {
            None => previous.paused.clone(),
            Some(None) => None,
            Some(Some(by)) => Some(PausedStatus {
                by: by.clone(),
                // Since the first sync that found it so (kept while the same thing holds it).
                since: previous
                    .paused
                    .as_ref()
                    .filter(|p| p.by == *by)
                    .map_or(Time(now), |p| p.since.clone()),
            }),
        },
        draining: match &outcome.draining {
            None => previous.draining.clone(),
            Some(draining) => draining.clone(),
        },
        startup_seconds: outcome.startup_seconds.or(previous.startup_seconds),
        conditions: Some(merged),
    };
    (status, events)
}

/// Records the readings of a sync in the operator's metrics: each value read, each failure by
/// kind.
pub fn record_readings(
    telemetry: &Metrics,
    spec: &LLMScalerSpec,
    (namespace, name): (&str, &str),
    readings: &Readings,
) {
    for (i, metric) in spec.metrics().iter().enumerate() {
        if let Ok(target) = llmscaler_api::parse_target(&metric.target) {
            telemetry.set_metric_target(namespace, name, &metric.display_name(i), target);
        }
    }
    match readings {
        Readings::Metrics(values) => {
            for (i, value) in values.iter().enumerate() {
                if let Ok(v) = value {
                    let metric = spec
                        .metrics()
                        .get(i)
                        .map_or_else(|| format!("metric{i}"), |m| m.display_name(i));
                    telemetry.set_metric_value(namespace, name, &metric, *v);
                }
            }
        }
        Readings::Decision(Ok(n)) => {
            telemetry.set_metric_value(namespace, name, "decision", f64::from(*n));
        }
        Readings::Decision(Err(_)) => {}
    }
    for (metric, err) in readings.errors(spec) {
        telemetry.count_metric_error(namespace, name, &metric, err.kind());
    }
}

/// The metrics a decision skipped, with the message of each (written here, from the source's
/// typed error), for `ScalingActive`.
pub fn skipped<E: std::fmt::Display>(decision: &Decision<E>) -> Vec<(String, String)> {
    decision
        .metrics
        .iter()
        .filter_map(|m| {
            m.recommendation.as_ref().err().map(|skip| {
                let name = if m.guardrail {
                    format!("{} (guardrail: neither holds nor lowers)", m.name)
                } else {
                    m.name.clone()
                };
                (name, skip.to_string())
            })
        })
        .collect()
}

/// Records the activation reading of a fleet at zero as metric `activation`.
pub fn record_activation(
    telemetry: &Metrics,
    (namespace, name): (&str, &str),
    activation: &Result<f64, crate::metrics::MetricError>,
) {
    match activation {
        Ok(v) => telemetry.set_metric_value(namespace, name, "activation", *v),
        Err(err) => telemetry.count_metric_error(namespace, name, "activation", err.kind()),
    }
}

/// Records a decision in the operator's metrics and logs the sync line.
pub fn record_decision<E>(
    telemetry: &Metrics,
    (namespace, name): (&str, &str),
    (spec_replicas, ready_replicas): (i32, i32),
    decision: &Decision<E>,
) {
    telemetry.set_replicas(
        namespace,
        name,
        ready_replicas,
        decision.desired,
        decision.recommendation,
    );
    tracing::info!(
        namespace,
        name,
        ready = ready_replicas,
        spec = spec_replicas,
        desired = decision.desired,
        replicas = decision.replicas,
        action = decision.action.as_str(),
        reason = decision.reason.as_str(),
        "sync"
    );
}

/// The five conditions of a decided sync (see [`conditions::derive`]).
pub fn conditions<E: std::fmt::Display>(
    spec: &LLMScalerSpec,
    (target, activation): (
        &TargetState,
        Option<&Result<f64, crate::metrics::MetricError>>,
    ),
    plan: &Plan<E>,
    write: &WriteOutcome,
    ownership: &Ownership,
) -> Vec<ConditionSpec> {
    let decision = &plan.decision;
    let mut skipped = skipped(decision);
    if let Some(Err(err)) = activation {
        skipped.push(("activation".to_owned(), err.to_string()));
    }
    let mut bounds_by = plan.active_schedules.clone();
    if plan.woken {
        bounds_by.push("activation".to_owned());
    }
    conditions::derive(&SyncReport {
        recommendation: decision.recommendation,
        decision_reason: decision.reason,
        limited: decision.limited,
        spec_replicas: target.spec_replicas,
        replicas: decision.replicas,
        ready_replicas: target.ready_replicas,
        bounds: plan.bounds,
        skipped: &skipped,
        write,
        ownership,
        target: (spec.target_ref.kind.as_str(), spec.target_ref.name.as_str()),
        schedules: &bounds_by,
        passive: match &plan.acting {
            Acting::Active => None,
            Acting::Passive { reason, by } => {
                Some((*reason, passive_message(spec, target, plan, by)))
            }
        },
        competing: plan.competitor.as_deref(),
    })
}

/// What a paused or advisory scaler would do: `<by>: nothing is written; would scale Deployment
/// vllm 2 -> 4 (ScaledUp)` or `...; replicas stay 3`.
fn passive_message<E>(
    spec: &LLMScalerSpec,
    target: &TargetState,
    plan: &Plan<E>,
    by: &str,
) -> String {
    let decision = &plan.decision;
    let advice = if decision.replicas == target.spec_replicas {
        format!("replicas stay {}", target.spec_replicas)
    } else {
        format!(
            "would scale {} {} {} -> {} ({})",
            spec.target_ref.kind,
            spec.target_ref.name,
            target.spec_replicas,
            decision.replicas,
            decision.reason.as_str()
        )
    };
    format!("{by}: nothing is written; {advice}")
}

/// In advisory mode, an Event when the advice changes (`AdvisoryMode`, Normal): what the operator
/// would write. Paused scalers and unchanged advice publish nothing.
pub fn advice_event<E>(
    spec: &LLMScalerSpec,
    target: &TargetState,
    plan: &Plan<E>,
    state: &mut ScalerState,
) -> Option<EventSpec> {
    let Acting::Passive { reason, by } = &plan.acting else {
        state.last_advice = None;
        return None;
    };
    let advice = plan.decision.replicas;
    let changed = state.last_advice.replace(advice) != Some(advice);
    (*reason == Reason::AdvisoryMode && changed && advice != target.spec_replicas).then(|| {
        EventSpec {
            warning: false,
            reason: *reason,
            note: passive_message(spec, target, plan, by),
            action: "Advise",
        }
    })
}
