//! Decide: the pure part of a sync. From what was observed, the scaler's memory and the time, the
//! engine's decision, whether and what to write to `spec.replicas`, and who holds the field
//! (`docs/scaling.md`, `docs/writing-replicas.md#contest`). No I/O: table-tested below.

use k8s_openapi::jiff::Timestamp;
use llmscaler_api::names::{PAUSED_ANNOTATION, Reason};
use llmscaler_api::{LLMScaler, LLMScalerSpec, ScalerMode};

use super::history::{history_from_status, refresh_interval_ms};
use super::state::ScalerState;
use super::target::TargetState;
use crate::engine::capacity::{CapacityInput, CapacityModel};
use crate::engine::conditions::{Ownership, WriteOutcome};
use crate::engine::contest::{claimed_before, contested_by, recent_contest};
use crate::engine::startup::{self, StartupTracker};
use crate::engine::{self, Decision, Extras, History, Policy, Signal};

/// A write of `spec.replicas` the sync wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicasWrite {
    /// The value before, replicas.
    pub from: i32,
    /// The value to apply, replicas.
    pub to: i32,
    /// Mark victims first (a scale-down).
    pub scale_down: bool,
    /// The pods a finished drain took out of rotation: the victims to mark, instead of a fresh
    /// choice (docs/scale-down.md#drain). Empty otherwise.
    pub drained: Vec<String>,
}

/// What a sync decided, before acting; `E` is the metric source's error type.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan<E> {
    /// The engine's decision.
    pub decision: Decision<E>,
    /// The write to make, if any: a change, or a claim / re-assert of the unchanged value.
    pub write: Option<ReplicasWrite>,
    /// The field manager that took `spec.replicas` from the operator at this sync.
    pub contested_by: Option<String>,
    /// The stabilization history after the sync, and its refresh interval (ms).
    pub history: (History, i64),
    /// Whether the operator acts on the target at this sync.
    pub acting: Acting,
    /// The schedules active at this sync, by name.
    pub active_schedules: Vec<String>,
    /// The bounds in force (`spec` bounds with the active schedules applied), replicas.
    pub bounds: (i32, i32),
    /// The activation signal woke the fleet from zero at this sync.
    pub woken: bool,
    /// Another autoscaler on the same target (see [`Plan::hold_for`]).
    pub competitor: Option<String>,
}

impl<E> Plan<E> {
    /// Holds for `competitor`, another autoscaler of the same target: nothing is written
    /// (docs/writing-replicas.md#competing-autoscalers).
    pub fn hold_for(&mut self, competitor: String) {
        self.write = None;
        self.competitor = Some(competitor);
    }
}

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

/// Whether the operator writes the target (docs/guards.md#pause-and-advisory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acting {
    /// Writes `spec.replicas` and pod marks.
    Active,
    /// Computes and reports only: paused by annotation or in advisory mode.
    Passive {
        /// `Paused` or `AdvisoryMode`.
        reason: Reason,
        /// What holds it, for status: the annotation or the mode.
        by: String,
    },
}

impl Acting {
    /// How `scaler` acts: paused while its [`PAUSED_ANNOTATION`] is `"true"`, advisory under
    /// `spec.mode: Advisory`, else active.
    pub fn of(scaler: &LLMScaler, spec: &LLMScalerSpec) -> Self {
        let paused = scaler
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PAUSED_ANNOTATION))
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if paused {
            Acting::Passive {
                reason: Reason::Paused,
                by: format!("annotation {PAUSED_ANNOTATION}"),
            }
        } else if spec.effective_mode() == ScalerMode::Advisory {
            Acting::Passive {
                reason: Reason::AdvisoryMode,
                by: "spec.mode: Advisory".to_owned(),
            }
        } else {
            Acting::Active
        }
    }
}

/// Decides one sync at `now_ms` (Unix milliseconds): the engine on the observed target and
/// signal, then contest detection and the re-assert throttle. Updates `state` (history, contest
/// memory). `sync_period_ms` is the scaler's sync period.
#[allow(clippy::too_many_arguments)]
pub fn decide<E: Clone>(
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    target: &TargetState,
    signal: &Signal<E>,
    wake: bool,
    state: &mut ScalerState,
    now_ms: i64,
    sync_period_ms: i64,
) -> Plan<E> {
    decide_with_capacity(
        scaler,
        spec,
        target,
        signal,
        None,
        wake,
        state,
        now_ms,
        sync_period_ms,
    )
}

/// [`decide`] with this sync's readings of `spec.capacity`'s queries (ignored without
/// `spec.capacity`), and start-up awareness under `spec.startup`: the start-up tracker in
/// `state` (seeded from `status.startupSeconds`) takes this sync's observation of the target,
/// the stabilization window follows it, replicas still starting hold a metric scale-up, and a
/// scale-up written starts a new measurement (docs/guards.md#start-up-awareness).
#[allow(clippy::too_many_arguments)]
pub fn decide_with_capacity<E: Clone>(
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    target: &TargetState,
    signal: &Signal<E>,
    capacity: Option<CapacityInput<E>>,
    wake: bool,
    state: &mut ScalerState,
    now_ms: i64,
    sync_period_ms: i64,
) -> Plan<E> {
    let mut policy = Policy::from_spec(spec);
    let mut tracker = state.startup.take().unwrap_or_else(|| {
        StartupTracker::seeded(
            scaler
                .status
                .as_ref()
                .and_then(|s| s.startup_seconds)
                .map(f64::from),
        )
    });
    if spec.startup.is_some() {
        tracker.observe(now_ms, target.spec_replicas, target.ready_replicas);
        policy.window_ms = startup::window_ms(spec, policy.window_ms, &tracker);
    }
    let extras = Extras {
        capacity: CapacityModel::from_spec(spec).zip(capacity),
        hold_metric_scale_up: startup::holds_scale_up(
            spec,
            &tracker,
            now_ms,
            target.spec_replicas,
            target.ready_replicas,
        ),
    };
    let now = Timestamp::from_millisecond(now_ms).unwrap_or(Timestamp::UNIX_EPOCH);
    let active_schedules =
        engine::schedule::apply(&mut policy, &engine::schedule::compile(spec), now);
    // At zero, the activation signal raises the floor to one replica (the ceiling still wins).
    let woken = wake && target.spec_replicas == 0 && policy.max_replicas > 0;
    if woken {
        policy.min_replicas = policy.min_replicas.max(1);
    }
    let refresh_ms = refresh_interval_ms(policy.window_ms, sync_period_ms);
    let acting = Acting::of(scaler, spec);
    let resuming =
        acting == Acting::Active && scaler.status.as_ref().is_some_and(|s| s.paused.is_some());
    // While leading, the history lives in memory; after a restart or a leader change it comes
    // back from status, shifted later by the refresh interval (never an early scale-down).
    let mut history = state
        .history
        .take()
        .unwrap_or_else(|| history_from_status(scaler.status.as_ref(), refresh_ms));
    if resuming {
        // Back from a pause or advisory mode: start from the current replicas, not from what was
        // recommended or "written" while nothing was (no jump, a full window before going down,
        // no scale-up rate used up).
        history = History::default();
        if policy.window_ms > 0 {
            history.pin(now_ms, target.spec_replicas);
        }
    } else if policy.window_ms == 0 {
        // Without a window no record is kept: those of an earlier window are dropped.
        history.clear_records();
    }
    let decision = engine::decide_with(
        &policy,
        &target.observation(),
        signal,
        &extras,
        &mut history,
        now_ms,
    );
    state.history = Some(history.clone());

    let previous = previous_conditions(scaler);
    let contested_by = contested_by(
        claimed_before(previous),
        target.owns_replicas,
        &target.other_replicas_managers,
    );
    if contested_by.is_some() {
        state.contest.saw_contest(now_ms);
    }
    let changes = decision.replicas != target.spec_replicas;
    // Claim the field on first contact and re-assert it after a contest, at most once per sync
    // period; a held sync asserts nothing.
    let reassert = state.contest.reassert_due(
        target.owns_replicas,
        decision.recommendation.is_none() || acting != Acting::Active,
        now_ms,
        sync_period_ms,
    );
    let write = (acting == Acting::Active && (changes || reassert)).then_some(ReplicasWrite {
        from: target.spec_replicas,
        to: decision.replicas,
        scale_down: decision.replicas < target.spec_replicas,
        drained: Vec::new(),
    });
    if spec.startup.is_some()
        && let Some(w) = &write
        && w.to > w.from
    {
        // A write that fails leaves spec.replicas below `to`: the next observation drops it.
        tracker.note_scale_up(now_ms, w.to);
    }
    state.startup = Some(tracker);
    Plan {
        decision,
        write,
        contested_by,
        history: (history, refresh_ms),
        acting,
        active_schedules,
        bounds: (policy.min_replicas, policy.max_replicas),
        woken,
        competitor: None,
    }
}

/// Who holds `spec.replicas` after the sync wrote (or not): for `ReplicasContested`.
pub fn ownership<E>(
    plan: &Plan<E>,
    scaler: &LLMScaler,
    target: &TargetState,
    state: &ScalerState,
    write: &WriteOutcome,
    now_ms: i64,
) -> Ownership {
    if let Some(manager) = &plan.contested_by {
        return Ownership::Contested(manager.clone());
    }
    if let Some(previous) = recent_contest(
        previous_conditions(scaler),
        now_ms,
        state.contest.last_contest_ms,
    ) {
        return Ownership::RecentlyContested(previous);
    }
    if target.owns_replicas || *write == WriteOutcome::Wrote {
        Ownership::Owned
    } else {
        Ownership::NotClaimed
    }
}

fn previous_conditions(
    scaler: &LLMScaler,
) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    scaler
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
