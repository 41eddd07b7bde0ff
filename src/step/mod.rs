//! The step: one sync of one scaler as a pure state machine, with no I/O (the "sans-I/O" shape
//! of `quinn-proto` and `rustls`). A [`Scaler`] is built from the spec and the status it
//! restores from and owns everything a scaler remembers between syncs (the stabilization and
//! scale-up history, the start-up tracker, the compiled schedules, the contest memory, the drain
//! in progress, the last advice). [`Scaler::step`] takes one sync's [`Observation`] and returns a
//! [`Plan`] of explicit [`Effect`]s, in the order they are to be carried out.
//!
//! The engine's rules stay in [`crate::engine`]; the step is the one place that sequences them
//! (docs/scaling.md), decides the drain's transitions (docs/scale-down.md#drain) and the marks
//! of a scale-down. The controller, `simulate --metrics`, `simulate --requests`, `probe --scaler`
//! and `probe --name` all run it; what each reads before a step is what
//! [`Scaler::reads`] asks for.

mod decide;
mod drain;
pub(crate) mod engine_args;
#[cfg(test)]
mod fields;
pub mod objective;
mod route;
#[cfg(test)]
mod tests;
pub mod victims;

use std::collections::BTreeMap;

use llmscaler_api::names::{PAUSED_ANNOTATION, Reason};
use llmscaler_api::{DrainingStatus, LLMScaler, LLMScalerSpec, LLMScalerStatus, ScalerMode};

use crate::engine::capacity::CapacityInput;
use crate::engine::conditions::{EventSpec, WriteOutcome};
use crate::engine::contest::ContestMemory;
use crate::engine::startup::StartupTracker;
use crate::engine::{Decision, History, Policy, Record, Signal};
use llmscaler_api::schedule::Schedule;

pub use decide::{passive_message, wakes};
pub use drain::{Next, SETTLE_MS, default_in_flight_query, next};
pub use victims::Marks;

/// The target as one sync saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// `spec.replicas`, replicas (1 when missing).
    pub spec_replicas: i32,
    /// `status.readyReplicas`, replicas (0 when missing).
    pub ready_replicas: i32,
    /// A Deployment rollout is in progress (docs/guards.md#rollout-guard).
    pub rollout_in_progress: bool,
    /// The target is an `apps/v1` Deployment (victim marks and drain apply).
    pub is_deployment: bool,
    /// The operator's field manager owns `spec.replicas`.
    pub owns_replicas: bool,
    /// Other field managers owning `spec.replicas`, newest first.
    pub other_replicas_managers: Vec<String>,
    /// A hash of the pod template ([`objective::template_hash`]), when known: a change starts
    /// the objective's calibration over.
    pub template: Option<String>,
    /// vLLM's `--max-num-seqs` in the pod template ([`engine_args::max_num_seqs`]), sequences
    /// per replica, when it states one: the objective's batch limit, not learned from a queue.
    pub max_num_seqs: Option<u32>,
}

/// One pod of the target, as a sync reads it (live pods only: terminating pods are left out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    /// `metadata.name`.
    pub name: String,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `metadata.creationTimestamp`, seconds since the epoch (newest = largest).
    pub created: i64,
    /// The `controller.kubernetes.io/pod-deletion-cost` annotation, as written.
    pub deletion_cost: Option<String>,
    /// The rotation label (`in`, `out`), docs/scale-down.md#drain.
    pub rotation: Option<String>,
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
        } else {
            Acting::of_spec(spec)
        }
    }

    /// How a scaler without annotations acts: advisory under `spec.mode: Advisory`, else active.
    pub fn of_spec(spec: &LLMScalerSpec) -> Self {
        match spec.effective_mode() {
            ScalerMode::Advisory => Acting::Passive {
                reason: Reason::AdvisoryMode,
                by: "spec.mode: Advisory".to_owned(),
            },
            ScalerMode::Active => Acting::Active,
        }
    }
}

/// What one sync read, for [`Scaler::step`]; `E` is the metric source's error type.
#[derive(Clone, Debug)]
pub struct Observation<'a, E> {
    /// The time of the sync, Unix milliseconds.
    pub now_ms: i64,
    /// The target.
    pub target: Target,
    /// The metric readings (or the decision server's answer).
    pub signal: Signal<E>,
    /// The readings of `spec.capacity`'s queries, when it is set.
    pub capacity: Option<CapacityInput<E>>,
    /// The readings of `spec.objective`'s queries ([`crate::engine::objective::queries`], in
    /// order), when it is set.
    pub objective: Option<Vec<Result<f64, E>>>,
    /// The activation query's value, read while `spec.replicas` is 0 and `spec.activation` is
    /// set.
    pub activation: Option<Result<f64, E>>,
    /// The target's live pods, when [`Reads::pods`] asked for them (`Err`: why they could not be
    /// read).
    pub pods: Option<Result<Vec<Pod>, String>>,
    /// The in-flight requests per drained pod, when [`Reads::in_flight`] asked for them.
    pub in_flight: Option<Result<BTreeMap<String, f64>, E>>,
    /// `deletionCostQuery`'s value per pod, when [`Reads::deletion_costs`] asked for it.
    pub deletion_costs: Option<Result<BTreeMap<String, f64>, E>>,
    /// Paused, advisory or active.
    pub acting: Acting,
    /// Another autoscaler of the same target: the step holds (nothing is written).
    pub competitor: Option<String>,
    /// The scaler's status before this sync (contest memory, pause, drain clock).
    pub status: Option<&'a LLMScalerStatus>,
    /// The activator's view of the scaler's Service, under `spec.scaleToZero.holdRequests`
    /// with an activator configured; `None` otherwise.
    pub activator: Option<ActivatorView>,
}

/// What a sync knows of the activator for one scaler
/// (docs/scaling.md#holding-requests-while-waking-from-zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActivatorView {
    /// Requests the activator holds for the scaler's Service now.
    pub held: u64,
    /// The Service routes to the activator (the operator's EndpointSlice exists).
    pub routed: bool,
}

/// What a sync must read before its step, besides the target and the metrics (decided by the
/// scaler's memory, so the step never reads).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// The target's live pods (victims, drain, rotation labels).
    pub pods: bool,
    /// The in-flight query of the drain in progress, and its pods.
    pub in_flight: Option<(String, Vec<String>)>,
    /// `deletionCostQuery`, when a scale-down may mark pods.
    pub deletion_costs: Option<String>,
    /// The activation query, while the target is at zero.
    pub activation: Option<String>,
}

/// One write or announcement of a sync, carried out in order; the first write that fails stops
/// the rest (Events are best effort and never stop anything).
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Set the rotation label of `pods` to `value` ([`ROTATION_IN`] or [`ROTATION_OUT`]).
    ///
    /// [`ROTATION_IN`]: llmscaler_api::names::ROTATION_IN
    /// [`ROTATION_OUT`]: llmscaler_api::names::ROTATION_OUT
    Rotation {
        /// Pod names.
        pods: Vec<String>,
        /// The label value.
        value: &'static str,
    },
    /// Write the pod-deletion-cost marks and wait until they are visible.
    Marks(Marks),
    /// Server-side apply `spec.replicas` of the target.
    Replicas {
        /// The value before, replicas.
        from: i32,
        /// The value to apply, replicas.
        to: i32,
    },
    /// Publish an Event on the scaler.
    Event(EventSpec),
    /// Route the scaler's Service to the activator (`on`: its EndpointSlice is created) or stop
    /// (`off`: deleted), docs/scaling.md#holding-requests-while-waking-from-zero.
    ActivatorRoute {
        /// Whether the Service routes to the activator after the effect.
        on: bool,
    },
}

impl Effect {
    /// The write outcome when this effect fails with `message`.
    pub fn failed(&self, message: String) -> WriteOutcome {
        match self {
            Effect::Rotation { .. } => WriteOutcome::DrainFailed(message),
            Effect::Marks(_) => WriteOutcome::MarkFailed(message),
            Effect::Replicas { .. } | Effect::Event(_) | Effect::ActivatorRoute { .. } => {
                WriteOutcome::WriteFailed(message)
            }
        }
    }
}

/// A write of `spec.replicas` the sync makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicasWrite {
    /// The value before, replicas.
    pub from: i32,
    /// The value to apply, replicas.
    pub to: i32,
    /// The pods a finished drain took out of rotation: the victims to mark, instead of a fresh
    /// choice (docs/scale-down.md#drain). Empty otherwise.
    pub drained: Vec<String>,
}

/// What a step decided; `E` is the metric source's error type.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan<E> {
    /// The engine's decision.
    pub decision: Decision<E>,
    /// The write of `spec.replicas`, if any: a change, or a claim / re-assert of the value.
    pub write: Option<ReplicasWrite>,
    /// The effects, in order.
    pub effects: Vec<Effect>,
    /// What happens to `spec.replicas` when every effect succeeds (`Wrote` with a write;
    /// `Draining`, `DrainFailed`, `MarkFailed` or `NotNeeded` without).
    pub outcome: WriteOutcome,
    /// The field manager that took `spec.replicas` from the operator at this sync.
    pub contested_by: Option<String>,
    /// The stabilization history after the sync, and its refresh interval (ms).
    pub history: (History, i64),
    /// Whether the operator acts on the target at this sync.
    pub acting: Acting,
    /// The schedules active at this sync, by name.
    pub active_schedules: Vec<String>,
    /// The policy in force (bounds with the schedules and activation, the window with
    /// start-up awareness).
    pub policy: Policy,
    /// The bounds in force, replicas.
    pub bounds: (i32, i32),
    /// The activation signal woke the fleet from zero at this sync.
    pub woken: bool,
    /// Another autoscaler on the same target.
    pub competitor: Option<String>,
    /// The drain in progress after the step, for status.
    pub draining: Option<DrainingStatus>,
    /// The measured start-up time, whole seconds, under `spec.startup`.
    pub startup_seconds: Option<i32>,
    /// The last time the contest was seen, Unix ms (for `ReplicasContested`).
    pub last_contest_ms: Option<i64>,
    /// The objective's capacity estimate, for `status.capacity` (without `observedAt`; see
    /// [`objective::merge`]); `None` without `spec.objective` or before any evidence.
    pub capacity: Option<llmscaler_api::CapacityStatus>,
}

/// A drain in progress (docs/scale-down.md#drain): pods out of rotation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Drain {
    /// The pods out of rotation, by name.
    pub victims: Vec<String>,
    /// When they were taken or found out (Unix ms).
    pub started_ms: i64,
    /// In-flight requests on them at the last read (`None` when not read).
    pub in_flight: Option<i64>,
}

/// Everything a scaler remembers between syncs.
#[derive(Clone, Debug, Default, PartialEq)]
struct Memory {
    /// The stabilization and scale-up history (restored from status at the first step).
    history: Option<History>,
    /// The start-up tracker (seeded from `status.startupSeconds`).
    startup: StartupTracker,
    /// Contest detection and the re-assert throttle.
    contest: ContestMemory,
    /// The drain in progress.
    drain: Option<Drain>,
    /// The pods' rotation labels were read once (a drain left by another process taken over).
    drain_recovered: bool,
    /// The last replica count advised in advisory mode.
    last_advice: Option<i32>,
    /// Milliseconds added to the times another process wrote in status (a drain's `since`), see
    /// [`Scaler::status_written_behind_by`].
    status_shift_ms: i64,
    /// The objective's calibration.
    objective: objective::ObjectiveMemory,
    /// The metric readings of the last sync, by name (the evidence bound's falling hold,
    /// docs/guards.md#evidence-bound); not kept in status: empty after a restart.
    previous_readings: std::collections::BTreeMap<String, f64>,
}

/// One scaler's step and memory (see the module documentation).
#[derive(Clone, Debug)]
pub struct Scaler {
    spec: LLMScalerSpec,
    schedules: Vec<Schedule>,
    /// The status history, not yet shifted (taken at the first step).
    restored: Option<Vec<Record>>,
    memory: Memory,
}

impl Scaler {
    /// The step of a defaulted, valid `spec`, restoring from `status` (the stabilization
    /// history, the measured start-up time) as a new leader does.
    pub fn new(spec: &LLMScalerSpec, status: Option<&LLMScalerStatus>) -> Self {
        let restored = crate::controller::history::history_from_status(status, 0)
            .records()
            .to_vec();
        Self {
            spec: spec.clone(),
            schedules: crate::engine::schedule::compile(spec),
            restored: Some(restored),
            memory: Memory {
                startup: StartupTracker::seeded(
                    status.and_then(|s| s.startup_seconds).map(f64::from),
                ),
                objective: objective::ObjectiveMemory::restored(status),
                ..Memory::default()
            },
        }
    }

    /// A step whose status was written by a process whose clock ran `ms` milliseconds behind
    /// this one (the Lease's estimate, [`crate::lease::clock_ahead_ms`]): the restored history
    /// and a resumed drain's `since` move `ms` later, so a window or a drain budget measured on
    /// the slower clock never ends early on this one (docs/guards.md#restart-safe-history). A
    /// negative `ms` (the writer ran ahead) changes nothing: those times already lie later.
    #[must_use]
    pub fn status_written_behind_by(mut self, ms: i64) -> Self {
        let ms = ms.max(0);
        if let Some(records) = self.restored.as_mut() {
            for record in records {
                record.at_ms = record.at_ms.saturating_add(ms);
            }
        }
        self.memory.status_shift_ms = ms;
        self
    }

    /// A step that starts with `history` as its stabilization and scale-up history (a replay
    /// warm-started at a fleet size).
    #[must_use]
    pub fn with_history(mut self, history: History) -> Self {
        self.restored = None;
        self.memory.history = Some(history);
        self
    }

    /// Takes the (defaulted, valid) spec of this sync: the memory stays, the schedules are
    /// compiled again when the spec changed.
    pub fn respec(&mut self, spec: &LLMScalerSpec) {
        if self.spec != *spec {
            self.spec = spec.clone();
            self.schedules = crate::engine::schedule::compile(spec);
        }
    }

    /// The spec the step runs.
    pub fn spec(&self) -> &LLMScalerSpec {
        &self.spec
    }

    /// The drain in progress, if any.
    pub fn drain(&self) -> Option<&Drain> {
        self.memory.drain.as_ref()
    }

    /// What the next sync must read besides the target and the metrics, for a target seen as
    /// `target` in `namespace`.
    pub fn reads(&self, target: &Target, namespace: &str, now_ms: i64) -> Reads {
        drain::reads(&self.spec, &self.memory, target, namespace, now_ms)
    }

    /// One sync: sequences the engine's rules on `observed` and returns the plan of effects;
    /// the memory moves on as if every effect succeeds (a failed one shows in the next
    /// observation: the target's `spec.replicas`, the pods' labels).
    pub fn step<E: Clone + std::fmt::Display>(&mut self, observed: &Observation<'_, E>) -> Plan<E> {
        let mut plan = self.decide(observed);
        if let Some(competitor) = &observed.competitor {
            plan.write = None;
            plan.competitor = Some(competitor.clone());
        }
        drain::step(&self.spec, &mut self.memory, observed, &mut plan);
        decide::write(&self.spec, observed, &mut plan);
        if let Some(event) = decide::advice(&self.spec, &mut self.memory, observed, &plan) {
            plan.effects.push(Effect::Event(event));
        }
        route::plan(&self.spec, observed, &mut plan);
        plan.draining = drain::status(self.memory.drain.as_ref());
        plan.startup_seconds = self
            .spec
            .startup
            .as_ref()
            .and(self.memory.startup.seconds())
            .map(|s| {
                // Seconds up to 20 × 3600 in practice; saturating either way.
                #[allow(clippy::cast_possible_truncation)]
                let whole = s.round().clamp(0.0, f64::from(i32::MAX)) as i32;
                whole
            });
        plan.last_contest_ms = self.memory.contest.last_contest_ms;
        plan
    }
}

/// The target `spec.replicas` after the plan's effects all succeed.
impl<E> Plan<E> {
    /// `spec.replicas` after the plan, when every effect succeeds.
    pub fn replicas_after(&self, before: i32) -> i32 {
        self.write.as_ref().map_or(before, |w| w.to)
    }

    /// The pods the plan takes out of rotation (`out`) and puts back (`in`).
    pub fn rotation(&self) -> impl Iterator<Item = (&str, &'static str)> {
        self.effects.iter().flat_map(|e| match e {
            Effect::Rotation { pods, value } => pods
                .iter()
                .map(|p| (p.as_str(), *value))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        })
    }
}
