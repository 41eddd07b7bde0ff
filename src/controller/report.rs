//! Report: what a sync tells the world — the new status (conditions merged with their transition
//! times, replicas, the persisted history), the Events of condition flips, the operator's own
//! metrics and the sync log line (`docs/conditions.md`, `docs/metrics.md`). Building the status is
//! pure; [`report`] and [`failed`] write it (server-side apply, leadership checked right before).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use llmscaler_api::names::{FIELD_MANAGER, api_version, kind};
use llmscaler_api::{LLMScaler, LLMScalerSpec, LLMScalerStatus, PausedStatus};
use serde_json::json;

use super::history::history_to_persist;
use super::leadership::NotLeader;
use super::observe::Observed;
use super::target::TargetState;
use super::{SyncContext, events};
use crate::engine::conditions::{
    self, ConditionSpec, EventSpec, Ownership, SyncReport, WriteOutcome,
};
use crate::engine::contest::recent_contest;
use crate::engine::{Decision, History};
use crate::metrics::{MetricError, Readings};
use crate::step::{Acting, Plan, passive_message};
use crate::telemetry::Metrics;

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

/// Reports a decided sync: the operator's metrics and log line, then the status (conditions
/// from the plan and what `write` says happened) and the Events of condition flips.
///
/// # Errors
/// [`StatusError`] when the status could not be written.
pub(crate) async fn report(
    sync: &SyncContext<'_>,
    spec: &LLMScalerSpec,
    observed: &Observed,
    plan: &Plan<&MetricError>,
    write: WriteOutcome,
) -> Result<(), StatusError> {
    let telemetry = &sync.ctx.telemetry;
    let key = (sync.namespace, sync.name);
    let target = &observed.target;
    record_readings(telemetry, spec, key, &observed.readings);
    if let Some(activation) = &observed.activation {
        record_activation(telemetry, key, activation);
    }
    record_decision(
        telemetry,
        key,
        (target.spec_replicas, target.ready_replicas),
        &plan.decision,
    );
    let ownership = ownership(plan, sync.scaler, target, &write, sync.now_ms);
    let conditions = conditions(
        spec,
        (target, observed.activation.as_ref()),
        plan,
        &write,
        &ownership,
    );
    let outcome = Outcome {
        current_replicas: Some(target.ready_replicas),
        desired_replicas: Some(plan.decision.desired),
        wrote_replicas: plan
            .write
            .as_ref()
            .filter(|_| write == WriteOutcome::Wrote)
            .map(|w| (w.from, w.to)),
        conditions,
        passive_by: Some(match &plan.acting {
            Acting::Active => None,
            Acting::Passive { by, .. } => Some(by.clone()),
        }),
        active_schedules: Some(plan.active_schedules.clone()),
        history: Some(plan.history.clone()),
        draining: Some(plan.draining.clone()),
        startup_seconds: plan.startup_seconds,
        capacity: Some(plan.capacity.clone()),
    };
    write_outcome(sync, &outcome).await
}

/// Reports a sync that could not decide (invalid spec, target or metric source failed): the
/// `conditions`, the rest of the status as it was.
///
/// # Errors
/// [`StatusError`] when the status could not be written.
pub(crate) async fn failed(
    sync: &SyncContext<'_>,
    conditions: Vec<ConditionSpec>,
) -> Result<(), StatusError> {
    let outcome = Outcome {
        conditions,
        ..Outcome::default()
    };
    write_outcome(sync, &outcome).await
}

async fn write_outcome(sync: &SyncContext<'_>, outcome: &Outcome) -> Result<(), StatusError> {
    let now = Timestamp::from_millisecond(sync.now_ms).unwrap_or(Timestamp::UNIX_EPOCH);
    let (status, events) = status(sync.scaler, outcome, now);
    write_status(sync, status).await?;
    events::publish(sync.ctx, sync.scaler, &events).await;
    Ok(())
}

/// Server-side applies `status` to the scaler's status subresource under [`FIELD_MANAGER`],
/// unless it equals the current status. Returns whether it wrote.
async fn write_status(
    sync: &SyncContext<'_>,
    status: LLMScalerStatus,
) -> Result<bool, StatusError> {
    let scaler = sync.scaler;
    // The operator's per-condition series follow every sync's conditions, written or not.
    sync.ctx.telemetry.set_conditions(
        sync.namespace,
        sync.name,
        status
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str())),
    );
    if scaler.status.as_ref() == Some(&status) {
        return Ok(false);
    }
    tracing::debug!(scaler = %sync.name, before = ?scaler.status, after = ?status, "status changed");
    let body = json!({
        "apiVersion": api_version(),
        "kind": kind(),
        "status": status,
    });
    sync.ctx.leadership.check()?;
    let api: Api<LLMScaler> = Api::namespaced(sync.ctx.client.clone(), sync.namespace);
    api.patch_status(
        sync.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    sync.ctx
        .telemetry
        .count_write(sync.namespace, sync.name, "status");
    Ok(true)
}

/// Who holds `spec.replicas` after the sync wrote (or not): for `ReplicasContested`.
pub(crate) fn ownership<E>(
    plan: &Plan<E>,
    scaler: &LLMScaler,
    target: &TargetState,
    write: &WriteOutcome,
    now_ms: i64,
) -> Ownership {
    if let Some(manager) = &plan.contested_by {
        return Ownership::Contested(manager.clone());
    }
    let previous = scaler
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    if let Some(previous) = recent_contest(previous, now_ms, plan.last_contest_ms) {
        return Ownership::RecentlyContested(previous);
    }
    if target.owns_replicas || *write == WriteOutcome::Wrote {
        Ownership::Owned
    } else {
        Ownership::NotClaimed
    }
}

/// What a sync established for the status.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Outcome {
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
    /// The objective's capacity estimate, when a decision was made: `Some(None)` none (no
    /// objective, or no evidence yet).
    pub capacity: Option<Option<llmscaler_api::CapacityStatus>>,
}

/// The new status of `scaler` after a sync at `now`, and the Events of the condition flips.
pub(crate) fn status(
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
        capacity: match &outcome.capacity {
            None => previous.capacity.clone(),
            Some(new) => crate::step::objective::merge(
                previous.capacity.as_ref(),
                new.clone(),
                now.as_millisecond(),
            ),
        },
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
            Acting::Passive { reason, by } => Some((
                *reason,
                passive_message(spec, target.spec_replicas, plan, by),
            )),
        },
        competing: plan.competitor.as_deref(),
    })
}
