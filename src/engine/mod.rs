//! The decision engine: pure, no I/O, time passed in
//! (`docs/scaling.md#steps-of-one-sync`).
//!
//! One sync = one call to [`decide`]: it takes what the controller (or `simulate`, or `probe`)
//! observed of the target, the metric readings or the decision server's answer, the scaler's
//! policy and the stabilization history, and returns the `spec.replicas` to have after the sync,
//! the status `desiredReplicas` and a machine-readable [`Reason`].

pub mod calibration;
pub mod capacity;
pub mod clock;
pub mod conditions;
pub(crate) mod contest;
pub mod evidence;
mod history;
pub mod objective;
mod ratio;
pub mod scale_up;
pub mod schedule;
pub mod startup;

pub use history::{History, Record};
pub use ratio::{metric_recommendation, ratio_recommendation};

use llmscaler_api::{LLMScalerSpec, parse_target};

/// Bounds and damping taken from a (validated) spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// `spec.minReplicas`, replicas.
    pub min_replicas: i32,
    /// `spec.maxReplicas`, replicas.
    pub max_replicas: i32,
    /// `spec.scaleDown.stabilizationWindowSeconds` in milliseconds; 0 = off.
    pub window_ms: i64,
    /// `spec.scaleDown.maxStepReplicas`; 0 = unlimited.
    pub max_step_replicas: i32,
    /// `spec.scaleUp`: rate caps and tolerance (off by default).
    pub scale_up: scale_up::ScaleUpRules,
}

impl Policy {
    /// The policy of a spec (defaults applied through the `effective_*` accessors).
    pub(crate) fn from_spec(spec: &LLMScalerSpec) -> Self {
        Self {
            min_replicas: spec.min_replicas,
            max_replicas: spec.max_replicas,
            window_ms: i64::from(spec.effective_stabilization_window_seconds().max(0)) * 1000,
            max_step_replicas: spec.effective_max_step_replicas().max(0),
            scale_up: scale_up::ScaleUpRules::from_spec(spec),
        }
    }

    /// Clamps a recommendation to `[minReplicas, maxReplicas]` (`docs/scaling.md`, step 4) and
    /// says which bound applied, if any. When `min > max` (refused by admission) the maximum
    /// wins.
    pub fn clamp(&self, replicas: i32) -> (i32, Option<Limit>) {
        if replicas > self.max_replicas {
            (self.max_replicas, Some(Limit::Max))
        } else if replicas < self.min_replicas {
            (self.min_replicas.min(self.max_replicas), Some(Limit::Min))
        } else {
            (replicas, None)
        }
    }
}

/// What was read of the target at this sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The target's `spec.replicas` (missing is read as 1, `docs/scaling.md`, step 2).
    pub spec_replicas: i32,
    /// The target's `status.readyReplicas` (missing is 0).
    pub ready_replicas: i32,
    /// A Deployment rollout is in progress ([`rollout_in_progress`]); always `false` for kinds
    /// other than Deployment.
    pub rollout_in_progress: bool,
}

/// `docs/guards.md#rollout-guard`: a Deployment is mid-rollout when `status.observedGeneration <
/// metadata.generation`, or `status.updatedReplicas < spec.replicas`, or `status.replicas >
/// status.updatedReplicas`. Missing status fields count as 0.
pub fn rollout_in_progress(
    generation: i64,
    observed_generation: i64,
    spec_replicas: i32,
    status_replicas: i32,
    updated_replicas: i32,
) -> bool {
    observed_generation < generation
        || updated_replicas < spec_replicas
        || status_replicas > updated_replicas
}

/// Why one metric gave no recommendation: it is skipped, never read as zero
/// (`docs/scaling.md`, step 3).
/// `E` is the metric source's own error type (the controller's `&MetricError`, `simulate`'s
/// input text), kept typed until a message is written.
#[derive(Clone, Debug, PartialEq)]
pub enum Skip<E> {
    /// The reading failed or had no usable sample; the source's error says why.
    Unavailable(E),
    /// The query returned NaN or ±Inf.
    NotMeasurable(f64),
    /// The target does not parse (only reachable when admission was bypassed).
    BadTarget(String),
}

impl<E: std::fmt::Display> std::fmt::Display for Skip<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::Unavailable(why) => why.fmt(f),
            Skip::NotMeasurable(v) => write!(f, "value {v} is not measurable"),
            Skip::BadTarget(why) => write!(f, "target refused: {why}"),
        }
    }
}

/// The load signal of one sync; `E` is the source's error type.
#[derive(Clone, Debug, PartialEq)]
pub enum Signal<E> {
    /// Prometheus: one entry per `spec.metrics[]`, in order: the query's value, or why it could
    /// not be read.
    Metrics(Vec<MetricInput<E>>),
    /// Custom provider: `replicas.active` of the matching decision (replicas, 0..=i32::MAX as
    /// the decision-server client accepts it), or why there is none.
    Decision(Result<i32, E>),
}

/// One metric's reading and its target.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricInput<E> {
    /// Display name (`spec.metrics[i].name` or `metric<i>`).
    pub name: String,
    /// The raw `target` string of the spec.
    pub target: String,
    /// The query's value, or why it could not be read.
    pub value: Result<f64, E>,
    /// `role: Guardrail` (docs/signals.md#guardrails): may raise replicas or hold a scale-down
    /// while above its target, never lowers; unmeasurable, it neither holds nor lowers.
    pub guardrail: bool,
}

/// One metric's outcome: its recommendation in replicas or why it was skipped.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricOutcome<E> {
    /// Display name.
    pub name: String,
    /// The value read, when one was.
    pub value: Option<f64>,
    /// `value / target`, when both are usable (the tolerance band's input).
    pub ratio: Option<f64>,
    /// `ceil(max(ready, 1) × value / target)`, saturated to `0..=i32::MAX`, or the skip reason.
    /// For a guardrail this is informational: it counts only while the ratio is above 1
    /// ([`MetricOutcome::counts`]).
    pub recommendation: Result<i32, Skip<E>>,
    /// The metric is a guardrail.
    pub guardrail: bool,
}

impl<E> MetricOutcome<E> {
    /// Whether the outcome takes part in the recommendation: a normal metric that was
    /// measured, or a guardrail measured above its target (ratio > 1).
    pub fn counts(&self) -> bool {
        self.recommendation.is_ok() && (!self.guardrail || self.guardrail_engaged())
    }

    /// A guardrail measured at or above its target: it holds a scale-down
    /// (docs/signals.md#guardrails). Always `false` for a normal metric.
    pub(crate) fn guardrail_engaged(&self) -> bool {
        self.guardrail && self.recommendation.is_ok() && self.ratio.is_some_and(|r| r > 1.0)
    }

    /// A normal metric that was skipped (a skipped guardrail neither holds nor lowers, so it
    /// is not "partial data").
    pub(crate) fn skipped_normal(&self) -> bool {
        !self.guardrail && self.recommendation.is_err()
    }
}

/// Bound that clamped the recommendation (the `ScalingLimited` condition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// Raised to `minReplicas`.
    Min,
    /// Lowered to `maxReplicas`.
    Max,
}

/// What happened to `spec.replicas` at this sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `spec.replicas` raised.
    ScaleUp,
    /// `spec.replicas` lowered.
    ScaleDown,
    /// No change wanted.
    None,
    /// A change was wanted but a guard deferred it.
    Deferred,
}

impl Action {
    /// The `simulate` CSV spelling: `scale_up`, `scale_down`, `none`, `deferred`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::ScaleUp => "scale_up",
            Action::ScaleDown => "scale_down",
            Action::None => "none",
            Action::Deferred => "deferred",
        }
    }
}

/// The reason of a decision: one of the [`Reason::is_decision`] reasons of the API crate's
/// vocabulary (CamelCase, as Kubernetes condition reasons), so the conditions and Events built
/// from a decision pass it on rather than map it.
pub use llmscaler_api::names::Reason;

/// The result of one sync; `E` is the metric source's error type.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision<E> {
    /// `spec.replicas` after this sync (equal to the observed value when nothing is written).
    pub replicas: i32,
    /// status `desiredReplicas`: clamped and stabilized, before the step cap. On hold the
    /// observed `spec.replicas` stands in for the recommendation, so this is that value clamped
    /// and stabilized.
    pub desired: i32,
    /// Largest per-metric (or the decision server's) recommendation before clamping, saturated
    /// to i32; `None` on hold (nothing measurable), even when the held value is then clamped.
    pub recommendation: Option<i32>,
    /// The bound that clamped the recommendation, if any.
    pub limited: Option<Limit>,
    /// What happened to `spec.replicas`.
    pub action: Action,
    /// Why.
    pub reason: Reason,
    /// Per metric outcome (one entry named `decision` under the Custom provider).
    pub metrics: Vec<MetricOutcome<E>>,
}

impl<E> Signal<E> {
    /// The Prometheus signal of a spec: `values[i]` is the reading of `spec.metrics[i]` (extra
    /// values are ignored; a metric without a value is left out, never read as zero).
    pub fn metrics(spec: &LLMScalerSpec, values: Vec<Result<f64, E>>) -> Self {
        Signal::Metrics(
            spec.metrics()
                .iter()
                .enumerate()
                .zip(values)
                .map(|((i, m), value)| MetricInput {
                    name: m.display_name(i),
                    target: m.target.clone(),
                    value,
                    guardrail: m.is_guardrail(),
                })
                .collect(),
        )
    }
}

/// The recommendation of a signal before clamping (`docs/scaling.md`, step 3), with per-metric
/// outcomes.
/// `None` means hold: every metric was skipped or the decision server failed.
pub(crate) fn recommend<E: Clone>(
    signal: &Signal<E>,
    ready_replicas: i32,
) -> (Option<i32>, Vec<MetricOutcome<E>>) {
    match signal {
        Signal::Metrics(inputs) => {
            let outcomes: Vec<MetricOutcome<E>> = inputs
                .iter()
                .map(|input| evaluate_metric(input, ready_replicas))
                .collect();
            (best_recommendation(&outcomes), outcomes)
        }
        Signal::Decision(result) => {
            let recommendation = result.as_ref().ok().map(|&active| active.max(0));
            let outcome = MetricOutcome {
                name: "decision".to_string(),
                value: recommendation.map(f64::from),
                ratio: None,
                guardrail: false,
                recommendation: match result {
                    Ok(_) => Ok(recommendation.unwrap_or(0)),
                    Err(why) => Err(Skip::Unavailable(why.clone())),
                },
            };
            (recommendation, vec![outcome])
        }
    }
}

/// The largest recommendation of the outcomes that count ([`MetricOutcome::counts`]: guardrails
/// only while above their target), `None` when none does.
fn best_recommendation<E>(outcomes: &[MetricOutcome<E>]) -> Option<i32> {
    outcomes
        .iter()
        .filter(|o| o.counts())
        .filter_map(|o| o.recommendation.as_ref().ok().copied())
        .max()
}

fn evaluate_metric<E: Clone>(input: &MetricInput<E>, ready_replicas: i32) -> MetricOutcome<E> {
    let value = input.value.as_ref().ok().copied();
    let target = parse_target(&input.target);
    let ratio = match (value, &target) {
        (Some(v), Ok(t)) if v.is_finite() => Some(v / t),
        _ => None,
    };
    let recommendation = match (&input.value, target) {
        (_, Err(why)) => Err(Skip::BadTarget(why)),
        (Err(why), _) => Err(Skip::Unavailable(why.clone())),
        (Ok(v), Ok(target)) => metric_recommendation(ready_replicas, *v, target),
    };
    MetricOutcome {
        name: input.name.clone(),
        value,
        ratio,
        recommendation,
        guardrail: input.guardrail,
    }
}

/// One sync of `docs/scaling.md`, steps 3–8. `now_ms` is the evaluation time in milliseconds on
/// any monotonic-enough clock shared with the history (the controller uses Unix time). The
/// history is updated in place: the clamped recommendation is recorded, entries older than the
/// window dropped, and after a scale-down with a window the history is replaced by the value
/// written.
///
/// A held sync (every metric skipped, or the decision server failed) recommends the observed
/// `spec.replicas`; that value is clamped, recorded and step-capped like any other, so a held
/// fleet above `maxReplicas` still comes down to it, and a held sync inside the window keeps a
/// later low reading from scaling down early. [`Decision::recommendation`] stays `None`
/// (`docs/scaling.md#holding`).
pub fn decide<E: Clone>(
    policy: &Policy,
    observed: &Observation,
    signal: &Signal<E>,
    history: &mut History,
    now_ms: i64,
) -> Decision<E> {
    decide_with(
        policy,
        observed,
        signal,
        &Extras::default(),
        history,
        now_ms,
    )
}

/// The opt-in inputs of a sync beyond the metrics: the capacity recommender and the start-up
/// hold (docs/scaling.md#capacity-recommender, docs/guards.md#start-up-awareness).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Extras<E> {
    /// `spec.capacity`'s model and this sync's readings of its queries.
    pub capacity: Option<(capacity::CapacityModel, capacity::CapacityInput<E>)>,
    /// `spec.objective`'s outcome of this sync (docs/objective.md), computed by the step that
    /// owns the calibration; like the capacity recommendation, it is not evidence-bounded.
    pub objective: Option<MetricOutcome<E>>,
    /// Replicas of a recent scale-up are still starting and count as coming capacity
    /// ([`startup::holds_scale_up`]): the metrics may not raise `spec.replicas`, the capacity
    /// recommendation still may.
    pub hold_metric_scale_up: bool,
    /// The metric readings of the previous sync by name ([`evidence::readings`] of its
    /// [`Decision::metrics`]): a reading lower than its previous one holds
    /// (docs/guards.md#evidence-bound). Empty at the first sync and after a restart.
    pub previous: std::collections::BTreeMap<String, f64>,
}

impl<E> Default for Extras<E> {
    fn default() -> Self {
        Self {
            capacity: None,
            objective: None,
            hold_metric_scale_up: false,
            previous: std::collections::BTreeMap::new(),
        }
    }
}

/// [`decide`] with the opt-in [`Extras`]: the capacity recommendation joins the metric
/// outcomes (named `capacity`, the largest recommendation wins, a failed reading is skipped like
/// a metric's), and while [`Extras::hold_metric_scale_up`] a scale-up goes no higher than the
/// capacity recommendation (reason `ScaleUpLimited`; none without `spec.capacity`).
pub(crate) fn decide_with<E: Clone>(
    policy: &Policy,
    observed: &Observation,
    signal: &Signal<E>,
    extras: &Extras<E>,
    history: &mut History,
    now_ms: i64,
) -> Decision<E> {
    let spec = observed.spec_replicas;
    // During a rollout, surge pods are ready on top of spec.replicas: counting them would grow
    // the fleet by the surge at every sync (kubernetes/kubernetes#72775), so the ratio's
    // baseline is capped at spec.replicas then.
    let baseline = if observed.rollout_in_progress {
        observed.ready_replicas.min(spec)
    } else {
        observed.ready_replicas
    };
    let (mut recommendation, mut metrics) = recommend(signal, baseline);
    if policy.scale_up.apply_tolerance(&mut metrics, spec) {
        recommendation = best_recommendation(&metrics);
    }
    let capacity_outcome = extras
        .capacity
        .as_ref()
        .map(|(model, input)| model.outcome(input, policy.max_replicas));
    let capacity_recommendation = capacity_outcome
        .as_ref()
        .and_then(|o| o.recommendation.as_ref().ok().copied());
    // The evidence bound (docs/guards.md#evidence-bound): a ratio read on the Ready replicas
    // supports at most doubling them per sync, whatever the ratio, and a reading that fell since
    // the previous sync supports no scale-up.
    let bounded_to = match signal {
        Signal::Metrics(_) => {
            let bounded = evidence::apply(&mut metrics, baseline, spec, &extras.previous);
            if bounded != evidence::Bounded::default() {
                recommendation = best_recommendation(&metrics);
            }
            bounded.step
        }
        Signal::Decision(_) => None,
    };
    if let Some(outcome) = capacity_outcome {
        metrics.push(outcome);
    }
    let objective_recommendation = extras.objective.as_ref().and_then(|outcome| {
        metrics.push(outcome.clone());
        outcome.recommendation.as_ref().ok().copied()
    });
    let capacity_recommendation = capacity_recommendation.max(objective_recommendation);
    if extras.capacity.is_some() || extras.objective.is_some() {
        recommendation = best_recommendation(&metrics);
    }
    // Hold: nothing measurable recommends the current spec.replicas, which then goes through
    // clamp, window, step cap and guards like any recommendation (so a lowered maxReplicas
    // still applies, and the window remembers the held value).
    let held = recommendation.is_none();
    // Partial data never lowers capacity (`docs/scaling.md#partial-data`, the
    // HorizontalPodAutoscaler's rule): with any metric skipped, the measured ones may raise the
    // fleet but not lower it below the current spec.replicas.
    let partial = !held
        && metrics.iter().any(MetricOutcome::skipped_normal)
        && recommendation.is_some_and(|r| r < spec);
    // A guardrail above its target holds a scale-down (docs/signals.md#guardrails); it never
    // lowers, and an unmeasurable one neither holds nor lowers.
    let normal_best = metrics
        .iter()
        .filter(|m| !m.guardrail && m.counts())
        .filter_map(|m| m.recommendation.as_ref().ok().copied())
        .max();
    let guarded = metrics.iter().any(MetricOutcome::guardrail_engaged)
        && normal_best.is_some_and(|r| r < spec);
    let raw = match recommendation {
        Some(r) if partial || guarded => r.max(spec),
        Some(r) => r,
        None => spec,
    };

    let (clamped, limited) = policy.clamp(raw);
    let desired = if policy.window_ms > 0 {
        // A lowered maxReplicas applies at once, inside the window too, and a history restored
        // from status never holds the fleet above it.
        history.cap(policy.max_replicas);
        let window_max = history.record(now_ms, clamped, policy.window_ms);
        // The window holds, it never raises: a recommendation a guard kept from being written
        // (coming capacity, a rate cap) is not replayed later; only this sync's may raise.
        window_max.min(spec.max(clamped))
    } else {
        clamped
    };

    let mut target = desired;
    let mut reason = if desired > spec {
        Reason::ScaledUp
    } else if desired < spec {
        Reason::ScaledDown
    } else if held || partial {
        Reason::MetricsUnavailable
    } else if guarded && clamped == spec {
        Reason::GuardrailHeld
    } else if clamped < spec {
        Reason::ScaleDownStabilized
    } else {
        Reason::Steady
    };
    if desired < spec && policy.max_step_replicas > 0 {
        let stepped = spec.saturating_sub(policy.max_step_replicas).max(desired);
        if stepped > desired {
            reason = Reason::StepCapped;
        }
        target = stepped;
    }

    if target > spec && extras.hold_metric_scale_up {
        // Coming capacity: replicas still starting will serve what the metrics see piling up.
        // The hold is on the metrics only: a raised floor (`minReplicas`, a schedule's, a wake
        // from zero) is not theirs and is never held back (docs/guards.md#start-up-awareness).
        let floor = policy.min_replicas.min(policy.max_replicas);
        let allowed = capacity_recommendation
            .map_or(spec, |c| policy.clamp(c).0.max(spec))
            .max(floor);
        if target > allowed {
            target = allowed;
            reason = Reason::ScaleUpLimited;
        }
    }

    if target > spec
        && let Some(limit) = policy.scale_up.limit(spec, history, now_ms)
        && target > limit
    {
        target = limit;
        reason = Reason::ScaleUpLimited;
    }

    if reason == Reason::ScaledUp && bounded_to == Some(target) {
        reason = Reason::ScaleUpLimited;
    }

    let deferral = if target == spec {
        None
    } else if observed.rollout_in_progress && target < spec {
        // A rollout defers scale-down (cold caches, victims among old and new pods); a traffic
        // spike still gets its replicas.
        Some(Reason::RolloutInProgress)
    } else if target < spec && observed.ready_replicas != spec {
        Some(Reason::ScaleDownNotSettled)
    } else {
        None
    };

    if let Some(reason) = deferral {
        return Decision {
            replicas: spec,
            desired,
            recommendation,
            limited,
            action: Action::Deferred,
            reason,
            metrics,
        };
    }

    history.note_change(now_ms, target - spec);
    let action = if target > spec {
        Action::ScaleUp
    } else if target < spec {
        if policy.window_ms > 0 {
            history.pin(now_ms, target);
        }
        Action::ScaleDown
    } else {
        Action::None
    };

    Decision {
        replicas: target,
        desired,
        recommendation,
        limited,
        action,
        reason,
        metrics,
    }
}

#[cfg(test)]
mod tests;
