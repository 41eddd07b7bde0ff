//! The engine's part of a step: the policy in force (schedules, activation, start-up window),
//! the engine's decision on the restored or remembered history, contest detection and the
//! re-assert throttle (docs/scaling.md, docs/writing-replicas.md#contest); then the write and
//! its marks, and the advice of advisory mode.

use k8s_openapi::jiff::Timestamp;
use llmscaler_api::names::Reason;
use llmscaler_api::{LLMScalerSpec, ScaleDownBehavior};

use super::{Acting, Effect, Memory, Observation, Plan, ReplicasWrite, Scaler, victims};
use crate::controller::history::refresh_interval_ms;
use crate::engine::capacity::CapacityModel;
use crate::engine::conditions::{self, EventSpec, WriteOutcome};
use crate::engine::contest::{claimed_before, contested_by};
use crate::engine::startup;
use crate::engine::{self, Extras, History, Policy};

/// Whether the activation value wakes a fleet at zero: greater than `spec.activation.threshold`
/// (docs/scaling.md#scale-to-zero-and-activation). A failed or missing reading never wakes and
/// never lowers anything.
pub fn wakes<E>(spec: &LLMScalerSpec, activation: Option<&Result<f64, E>>) -> bool {
    let (Some(config), Some(Ok(value))) = (&spec.activation, activation) else {
        return false;
    };
    llmscaler_api::parse_threshold(config.threshold.as_deref())
        .is_ok_and(|threshold| value.is_finite() && *value > threshold)
}

impl Scaler {
    /// The policy in force at this sync: the spec's, with the active schedules, the activation
    /// floor and the start-up window. Returns it with the active schedules and whether the
    /// activation woke the fleet. Observes the target in the start-up tracker.
    fn policy<E>(&mut self, observed: &Observation<'_, E>) -> (Policy, Vec<String>, bool) {
        let spec = &self.spec;
        let target = &observed.target;
        let mut policy = Policy::from_spec(spec);
        if spec.startup.is_some() {
            self.memory.startup.observe(
                observed.now_ms,
                target.spec_replicas,
                target.ready_replicas,
            );
            policy.window_ms = startup::window_ms(spec, policy.window_ms, &self.memory.startup);
        }
        let now = Timestamp::from_millisecond(observed.now_ms).unwrap_or(Timestamp::UNIX_EPOCH);
        let active = engine::schedule::apply(&mut policy, &self.schedules, now);
        // At zero, the activation signal or a request held by the activator raises the floor
        // to one replica (the ceiling wins).
        let woken = (wakes(spec, observed.activation.as_ref())
            || super::route::held_wakes(spec, observed.activator.as_ref()))
            && target.spec_replicas == 0
            && policy.max_replicas > 0;
        if woken {
            policy.min_replicas = policy.min_replicas.max(1);
        }
        (policy, active, woken)
    }

    /// The history this sync starts from: in memory while leading, else the status' shifted
    /// later by the refresh interval (never an early scale-down); back from a pause or advisory
    /// mode, the current replicas pinned.
    fn history_for(
        &mut self,
        policy: &Policy,
        resuming: bool,
        refresh_ms: i64,
        now_ms: i64,
        spec_replicas: i32,
    ) -> History {
        let mut history = self.memory.history.take().unwrap_or_else(|| {
            let records = self.restored.take().unwrap_or_default();
            History::from_records(
                records
                    .into_iter()
                    .map(|mut r| {
                        r.at_ms = r.at_ms.saturating_add(refresh_ms);
                        r
                    })
                    .collect(),
            )
        });
        if resuming {
            // Start from the current replicas, not from what was recommended or "written"
            // while nothing was (no jump, a full window before going down, no scale-up rate
            // used up).
            history = History::default();
            if policy.window_ms > 0 {
                history.pin(now_ms, spec_replicas);
            }
        } else if policy.window_ms == 0 {
            // Without a window no record is kept: those of an earlier window are dropped.
            history.clear_records();
        }
        history
    }

    /// The engine's decision and the write it asks for (before the drain and the marks).
    pub(super) fn decide<E: Clone>(&mut self, observed: &Observation<'_, E>) -> Plan<E> {
        let target = &observed.target;
        let now_ms = observed.now_ms;
        let (policy, active_schedules, woken) = self.policy(observed);
        let spec = &self.spec;
        let sync_period_ms = i64::from(spec.effective_sync_period_seconds().max(1)) * 1000;
        let startup_s =
            crate::engine::startup::startup_seconds(spec, &self.memory.startup).unwrap_or(0.0);
        let added = super::objective::step(
            spec,
            &mut self.memory.objective,
            observed.objective.as_ref(),
            (
                now_ms,
                target.spec_replicas,
                target.ready_replicas,
                target.template.as_ref(),
                target.max_num_seqs,
            ),
            startup_s,
            policy.max_replicas,
        );
        let mut signal = observed.signal.clone();
        let (objective, capacity_status) = match added {
            Some(added) => {
                if let (Some(guardrail), engine::Signal::Metrics(inputs)) =
                    (added.guardrail, &mut signal)
                {
                    inputs.push(guardrail);
                }
                let status = added
                    .estimate
                    .map(|e| super::objective::status_of(&e, target.template.as_ref()));
                (Some(added.outcome), status)
            }
            None => (None, None),
        };
        let extras = Extras {
            capacity: CapacityModel::from_spec(spec)
                .map(|m| m.with_startup(startup_s))
                .zip(observed.capacity.clone()),
            objective,
            hold_metric_scale_up: startup::holds_scale_up(
                spec,
                &self.memory.startup,
                now_ms,
                target.spec_replicas,
                target.ready_replicas,
            ),
            previous: std::mem::take(&mut self.memory.previous_readings),
        };
        let refresh_ms = refresh_interval_ms(policy.window_ms, sync_period_ms);
        let acting = observed.acting.clone();
        let resuming =
            acting == Acting::Active && observed.status.is_some_and(|s| s.paused.is_some());
        let mut history =
            self.history_for(&policy, resuming, refresh_ms, now_ms, target.spec_replicas);
        let engine_target = engine::Observation {
            spec_replicas: target.spec_replicas,
            ready_replicas: target.ready_replicas,
            rollout_in_progress: target.rollout_in_progress,
        };
        let decision = engine::decide_with(
            &policy,
            &engine_target,
            &signal,
            &extras,
            &mut history,
            now_ms,
        );
        self.memory.history = Some(history.clone());
        self.memory.previous_readings = crate::engine::evidence::readings(&decision.metrics);
        let write = self.claim(observed, &decision, &acting, sync_period_ms);
        let contested = contested_by(
            claimed_before(previous_conditions(observed)),
            target.owns_replicas,
            &target.other_replicas_managers,
        );
        Plan {
            decision,
            write,
            effects: Vec::new(),
            outcome: WriteOutcome::NotNeeded,
            contested_by: contested,
            history: (history, refresh_ms),
            acting,
            active_schedules,
            bounds: (policy.min_replicas, policy.max_replicas),
            policy,
            woken,
            competitor: None,
            draining: None,
            startup_seconds: None,
            last_contest_ms: None,
            capacity: capacity_status,
        }
    }

    /// Contest detection, the claim on first contact and the re-assert throttle; the write the
    /// decision asks for, and the scale-up it starts (start-up awareness).
    fn claim<E>(
        &mut self,
        observed: &Observation<'_, E>,
        decision: &engine::Decision<E>,
        acting: &Acting,
        sync_period_ms: i64,
    ) -> Option<ReplicasWrite> {
        let target = &observed.target;
        let now_ms = observed.now_ms;
        if contested_by(
            claimed_before(previous_conditions(observed)),
            target.owns_replicas,
            &target.other_replicas_managers,
        )
        .is_some()
        {
            self.memory.contest.saw_contest(now_ms);
        }
        let changes = decision.replicas != target.spec_replicas;
        // Claim the field on first contact and re-assert it after a contest, at most once per
        // sync period; a held sync asserts nothing.
        let reassert = self.memory.contest.reassert_due(
            target.owns_replicas,
            decision.recommendation.is_none() || *acting != Acting::Active,
            now_ms,
            sync_period_ms,
        );
        let write = (*acting == Acting::Active && (changes || reassert)).then_some(ReplicasWrite {
            from: target.spec_replicas,
            to: decision.replicas,
            drained: Vec::new(),
        });
        if self.spec.startup.is_some()
            && let Some(w) = &write
            && w.to > w.from
        {
            // A write that fails leaves spec.replicas below `to`: the next observation drops it.
            self.memory.startup.note_scale_up(now_ms, w.to);
        }
        write
    }
}

fn previous_conditions<'a, E>(
    observed: &Observation<'a, E>,
) -> &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    observed
        .status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// The effects of the plan's write, if any: the marks of a Deployment scale-down under
/// `behavior: CacheAware` (the drained pods, or a fresh choice), `spec.replicas`, and its
/// Event. Without what the marks need (the pods, the cost query's values) nothing is written
/// and the outcome says why.
pub(super) fn write<E: std::fmt::Display>(
    spec: &LLMScalerSpec,
    observed: &Observation<'_, E>,
    plan: &mut Plan<E>,
) {
    let Some(write) = plan.write.clone() else {
        return;
    };
    let target = &observed.target;
    if write.to < write.from
        && target.is_deployment
        && spec.effective_scale_down_behavior() == ScaleDownBehavior::CacheAware
    {
        match marks(observed, &write) {
            Ok(marks) => plan.effects.push(Effect::Marks(marks)),
            Err(why) => {
                plan.write = None;
                plan.outcome = WriteOutcome::MarkFailed(why);
                return;
            }
        }
    }
    plan.effects.push(Effect::Replicas {
        from: write.from,
        to: write.to,
    });
    if let Some(event) = conditions::replicas_event(
        (spec.target_ref.kind.as_str(), spec.target_ref.name.as_str()),
        (write.from, write.to),
        plan.decision.action,
        plan.decision.reason,
        plan.contested_by.as_deref(),
    ) {
        plan.effects.push(Effect::Event(event));
    }
    plan.outcome = WriteOutcome::Wrote;
}

/// The marks of a scale-down (docs/scale-down.md#which-pods).
fn marks<E: std::fmt::Display>(
    observed: &Observation<'_, E>,
    write: &ReplicasWrite,
) -> Result<victims::Marks, String> {
    let pods = match &observed.pods {
        Some(Ok(pods)) => pods,
        Some(Err(why)) => return Err(why.clone()),
        None => return Err("the target's pods were not read".to_owned()),
    };
    if !write.drained.is_empty() {
        // The drain chose them already: no cost query.
        return Ok(victims::plan_for(pods, &write.drained));
    }
    let remove = usize::try_from(write.from.saturating_sub(write.to).max(0)).unwrap_or(0);
    let costs = match &observed.deletion_costs {
        Some(Ok(costs)) => Some(costs),
        Some(Err(err)) => return Err(format!("deletionCostQuery: {err}")),
        None => None,
    };
    Ok(victims::plan(pods, remove, costs))
}

/// In advisory mode, an Event when the advice changes (`AdvisoryMode`, Normal): what the
/// operator would write. Paused scalers and unchanged advice publish nothing.
pub(super) fn advice<E>(
    spec: &LLMScalerSpec,
    memory: &mut Memory,
    observed: &Observation<'_, E>,
    plan: &Plan<E>,
) -> Option<EventSpec> {
    let Acting::Passive { reason, by } = &plan.acting else {
        memory.last_advice = None;
        return None;
    };
    let advice = plan.decision.replicas;
    let changed = memory.last_advice.replace(advice) != Some(advice);
    let spec_replicas = observed.target.spec_replicas;
    (*reason == Reason::AdvisoryMode && changed && advice != spec_replicas).then(|| EventSpec {
        warning: false,
        reason: *reason,
        note: passive_message(spec, spec_replicas, plan, by),
        action: "Advise",
    })
}

/// What a paused or advisory scaler would do: `<by>: nothing is written; would scale Deployment
/// vllm 2 -> 4 (ScaledUp)` or `...; replicas stay 3`.
pub fn passive_message<E>(
    spec: &LLMScalerSpec,
    spec_replicas: i32,
    plan: &Plan<E>,
    by: &str,
) -> String {
    let decision = &plan.decision;
    let advice = if decision.replicas == spec_replicas {
        format!("replicas stay {spec_replicas}")
    } else {
        format!(
            "would scale {} {} {} -> {} ({})",
            spec.target_ref.kind,
            spec.target_ref.name,
            spec_replicas,
            decision.replicas,
            decision.reason.as_str()
        )
    };
    format!("{by}: nothing is written; {advice}")
}
