//! The names the operator writes into the cluster, as one source: the resource's group, version
//! and kind (from the [`Resource`] impl of [`LLMScaler`]), field managers, annotation keys, the
//! Lease name, condition types and reasons. The engine, the controller, the webhook and the docs
//! all read them from here; `docs/conditions.md` and the README list every [`ConditionType`] and
//! [`Reason`], and a test fails when one is missing there (see `docs/conditions.md`).

use std::borrow::Cow;

use kube::Resource;

use crate::LLMScaler;

/// The API group of [`LLMScaler`] (`autoscaling.modelsphere.dev`).
pub fn group() -> Cow<'static, str> {
    LLMScaler::group(&())
}

/// The kind of [`LLMScaler`] (`LLMScaler`).
pub fn kind() -> Cow<'static, str> {
    LLMScaler::kind(&())
}

/// The `apiVersion` of [`LLMScaler`] (`autoscaling.modelsphere.dev/v1alpha1`).
pub fn api_version() -> Cow<'static, str> {
    LLMScaler::api_version(&())
}

/// The one field manager under which the operator applies `spec.replicas` of targets, the
/// deletion-cost annotations of pods and the status of LLMScalers
/// (`docs/writing-replicas.md`).
pub const FIELD_MANAGER: &str = "llmscaler";

/// Pod annotation the ReplicaSet controller reads to choose which pods to delete first (lowest
/// first). Kubernetes docs: "ReplicaSet: Pod deletion cost".
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Cost given to victims when no `deletionCostQuery` is set: the newest pods go first
/// (`docs/scale-down.md`).
pub const NEWEST_FIRST_COST: i32 = -100;

/// Pod label the workload's Service selects on for a drained scale-down
/// (`docs/scale-down.md#drain`): the pod template sets it to [`ROTATION_IN`] and the Service's
/// selector requires that value; the operator sets it to [`ROTATION_OUT`] on the pods it is
/// about to remove, so the EndpointSlices drop them while they finish their requests. The
/// Deployment's own `spec.selector` must not use it (changing it would orphan the pod).
pub const ROTATION_LABEL: &str = "autoscaling.modelsphere.dev/rotation";

/// [`ROTATION_LABEL`] value of a pod in the Service's rotation.
pub const ROTATION_IN: &str = "in";

/// [`ROTATION_LABEL`] value of a pod taken out of rotation by a drain.
pub const ROTATION_OUT: &str = "out";

/// Field manager under which the operator applies [`ROTATION_LABEL`] of pods: separate from
/// [`FIELD_MANAGER`] so that applying the label and applying the deletion-cost annotation never
/// remove each other's field (`docs/scale-down.md#drain`).
pub const DRAIN_FIELD_MANAGER: &str = "llmscaler-drain";

/// Annotation that pauses a scaler: while it is `"true"` the operator computes and reports but
/// never writes the target or its pods (`docs/guards.md#pause-and-advisory`).
pub const PAUSED_ANNOTATION: &str = "autoscaling.modelsphere.dev/paused";

/// Name of the Lease used for leader election, in the operator's namespace.
pub const LEASE_NAME: &str = "llmscaler-leader";

/// The EndpointSlice label naming the controller that manages the slice.
pub const ENDPOINTSLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";

/// The value of [`ENDPOINTSLICE_MANAGED_BY_LABEL`] on the slices the operator writes to route
/// a Service to the activator (docs/scaling.md#holding-requests-while-waking-from-zero).
pub const ENDPOINTSLICE_MANAGER: &str = "llmscaler";

/// Defines a closed set of names: an enum, its `as_str`, `ALL` and `Display`.
macro_rules! names {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name as written into the cluster (CamelCase, as Kubernetes writes them).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant)),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

names! {
    /// The condition types of `status.conditions` (`docs/conditions.md`).
    pub enum ConditionType {
        /// The scaler is acting normally: valid spec, target found, metrics computable.
        Ready,
        /// A recommendation could be computed from the metrics or the decision server.
        ScalingActive,
        /// The target was found and the last change was not deferred.
        AbleToScale,
        /// The recommendation was clamped to `minReplicas` or `maxReplicas`.
        ScalingLimited,
        /// Another field manager wrote `spec.replicas` of the target.
        ReplicasContested,
    }
}

names! {
    /// Every reason the operator gives (`docs/conditions.md`), one vocabulary: condition
    /// reasons, Event reasons and the reason of each sync's decision (the engine's, in the
    /// `sync` log line, the `ScaledUp`/`ScaledDown` Event note and `simulate`'s `reason`
    /// column). Some are several at once (`ScaledUp` is an Event and a decision,
    /// `RolloutInProgress` a condition reason and a decision); [`Reason::is_decision`] and
    /// [`Reason::is_event_only`] say which.
    pub enum Reason {
        /// Everything is in order.
        AsExpected,
        /// The spec breaks an admission rule (the webhook was down or bypassed).
        InvalidSpec,
        /// The namespace spent its query budget (`--namespace-query-budget`): the sync waits
        /// for it, nothing is read or written meanwhile (the fleet keeps its size).
        QueryBudgetExceeded,
        /// The target workload or its kind does not exist.
        TargetNotFound,
        /// Reading the target failed for another reason than not-found (RBAC, timeouts).
        TargetUnreadable,
        /// No metric could be measured: the fleet is held. As a decision: nothing measurable
        /// (or the decision server failed, or a metric was skipped while the others wanted
        /// fewer replicas) and the held `spec.replicas` stays as it is. (When the clamp or the
        /// window moves a held value, the decision's reason is the move's: `ScaledDown`,
        /// `StepCapped`, `ScaledUp` or a deferral.)
        MetricsUnavailable,
        /// Some metrics could be measured, others were skipped.
        SomeMetricsSkipped,
        /// The recommendation was computed from every metric.
        ValidMetrics,
        /// The last sync could change replicas.
        ReadyForNewScale,
        /// A Deployment rollout is in progress (a decision: the change is deferred).
        RolloutInProgress,
        /// The previous scale-down has not settled (`readyReplicas != spec.replicas`; a
        /// decision: deferred).
        ScaleDownNotSettled,
        /// Writing the target failed.
        WriteFailed,
        /// The `deletionCostQuery` or the pod marking failed: the scale-down waits.
        DeletionCostFailed,
        /// `scaleDown.drain`: the pods to remove are out of rotation, finishing their in-flight
        /// requests; replicas are lowered when they reach 0 or `drainSeconds` passes.
        Draining,
        /// `scaleDown.drain`: listing or relabelling the pods, or reading their in-flight
        /// requests, failed: the scale-down waits.
        DrainFailed,
        /// Clamped up to `minReplicas`.
        TooFewReplicas,
        /// Clamped down to `maxReplicas`.
        TooManyReplicas,
        /// Within `[minReplicas, maxReplicas]`.
        DesiredWithinRange,
        /// Another field manager owns `spec.replicas`.
        OtherFieldManager,
        /// The operator owns `spec.replicas`.
        OwnedByLLMScaler,
        /// The operator has not written `spec.replicas` yet (nothing measurable since it started).
        NotClaimed,
        /// The scaler is paused by annotation: nothing is written to the target.
        Paused,
        /// `spec.mode: Advisory`: nothing is written to the target.
        AdvisoryMode,
        /// Another autoscaler (an HPA, or the HPA of a KEDA ScaledObject) scales the same
        /// target: the operator holds and writes nothing, rather than a write war.
        CompetingAutoscaler,
        /// Event: replicas raised. Decision: raised to the recommendation.
        ScaledUp,
        /// Event: replicas lowered. Decision: lowered to the (stabilized) recommendation.
        ScaledDown,
        /// Event: replicas written again after another manager changed them.
        ReplicasReasserted,
        /// Event: pods taken out of rotation before a scale-down (`scaleDown.drain`).
        DrainStarted,
        /// Event: load came back during a drain; the drained pods are back in rotation.
        DrainCancelled,
        /// Event: pods found out of rotation at a leader's first sync (a drain left by an
        /// earlier leader or process) are drained on; the clock continues from
        /// `status.draining.since`.
        DrainResumed,
        /// Decision: lowered by `maxStepReplicas` towards a lower recommendation.
        StepCapped,
        /// Decision: raised, but only as far as the evidence bound, coming capacity or the
        /// `scaleUp` rate cap allows (docs/guards.md).
        ScaleUpLimited,
        /// Decision: the recommendation equals `spec.replicas`.
        Steady,
        /// Decision: the raw recommendation is lower but the stabilization window keeps the
        /// fleet.
        ScaleDownStabilized,
        /// Decision: the recommendation is lower but a guardrail metric above its target holds
        /// the fleet (`docs/signals.md#guardrails`).
        GuardrailHeld,
    }
}

impl Reason {
    /// Whether the reason names an Event only, never a condition nor a decision.
    pub const fn is_event_only(self) -> bool {
        match self {
            Reason::ReplicasReasserted
            | Reason::DrainStarted
            | Reason::DrainCancelled
            | Reason::DrainResumed => true,
            Reason::AsExpected
            | Reason::InvalidSpec
            | Reason::QueryBudgetExceeded
            | Reason::TargetNotFound
            | Reason::TargetUnreadable
            | Reason::MetricsUnavailable
            | Reason::SomeMetricsSkipped
            | Reason::ValidMetrics
            | Reason::ReadyForNewScale
            | Reason::RolloutInProgress
            | Reason::ScaleDownNotSettled
            | Reason::WriteFailed
            | Reason::DeletionCostFailed
            | Reason::Draining
            | Reason::DrainFailed
            | Reason::TooFewReplicas
            | Reason::TooManyReplicas
            | Reason::DesiredWithinRange
            | Reason::OtherFieldManager
            | Reason::OwnedByLLMScaler
            | Reason::NotClaimed
            | Reason::Paused
            | Reason::AdvisoryMode
            | Reason::CompetingAutoscaler
            | Reason::ScaledUp
            | Reason::ScaledDown
            | Reason::StepCapped
            | Reason::ScaleUpLimited
            | Reason::Steady
            | Reason::ScaleDownStabilized
            | Reason::GuardrailHeld => false,
        }
    }

    /// Whether a sync's decision can have this reason (`docs/conditions.md#decision-reasons`).
    pub const fn is_decision(self) -> bool {
        match self {
            Reason::ScaledUp
            | Reason::ScaledDown
            | Reason::StepCapped
            | Reason::ScaleUpLimited
            | Reason::Steady
            | Reason::ScaleDownStabilized
            | Reason::GuardrailHeld
            | Reason::MetricsUnavailable
            | Reason::RolloutInProgress
            | Reason::ScaleDownNotSettled => true,
            Reason::AsExpected
            | Reason::InvalidSpec
            | Reason::QueryBudgetExceeded
            | Reason::TargetNotFound
            | Reason::TargetUnreadable
            | Reason::SomeMetricsSkipped
            | Reason::ValidMetrics
            | Reason::ReadyForNewScale
            | Reason::WriteFailed
            | Reason::DeletionCostFailed
            | Reason::Draining
            | Reason::DrainFailed
            | Reason::TooFewReplicas
            | Reason::TooManyReplicas
            | Reason::DesiredWithinRange
            | Reason::OtherFieldManager
            | Reason::OwnedByLLMScaler
            | Reason::NotClaimed
            | Reason::Paused
            | Reason::AdvisoryMode
            | Reason::CompetingAutoscaler
            | Reason::ReplicasReasserted
            | Reason::DrainStarted
            | Reason::DrainCancelled
            | Reason::DrainResumed => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_resource() {
        assert_eq!(group(), "autoscaling.modelsphere.dev");
        assert_eq!(kind(), "LLMScaler");
        assert_eq!(api_version(), "autoscaling.modelsphere.dev/v1alpha1");
    }

    #[test]
    fn enums_spell_their_variants() {
        assert_eq!(ConditionType::ALL.len(), 5);
        assert_eq!(
            ConditionType::ReplicasContested.as_str(),
            "ReplicasContested"
        );
        assert_eq!(Reason::OwnedByLLMScaler.to_string(), "OwnedByLLMScaler");
        let mut seen = std::collections::BTreeSet::new();
        assert!(Reason::ALL.iter().all(|r| seen.insert(r.as_str())));
        let decisions: Vec<&str> = Reason::ALL
            .iter()
            .filter(|r| r.is_decision())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(
            decisions,
            [
                "MetricsUnavailable",
                "RolloutInProgress",
                "ScaleDownNotSettled",
                "ScaledUp",
                "ScaledDown",
                "StepCapped",
                "ScaleUpLimited",
                "Steady",
                "ScaleDownStabilized",
                "GuardrailHeld",
            ]
        );
    }
}
