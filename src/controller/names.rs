//! Field managers, annotation keys, condition types and reasons, as named constants (spec §5–7).

/// The one field manager under which the operator applies `spec.replicas` of targets, the
/// deletion-cost annotations of pods and the status of LLMScalers (spec §6).
pub const FIELD_MANAGER: &str = "llmscaler";

/// Pod annotation the ReplicaSet controller reads to choose which pods to delete first (lowest
/// first). Kubernetes docs: "ReplicaSet: Pod deletion cost".
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Cost given to victims when no `deletionCostQuery` is set: the newest pods go first (spec §5).
pub const NEWEST_FIRST_COST: i32 = -100;

/// Name of the Lease used for leader election, in the operator's namespace.
pub const LEASE_NAME: &str = "llmscaler-leader";

/// Condition types (spec §7).
pub mod condition {
    /// The scaler is acting normally: valid spec, target found, metrics computable.
    pub const READY: &str = "Ready";
    /// A recommendation could be computed from the metrics or the decision server.
    pub const SCALING_ACTIVE: &str = "ScalingActive";
    /// The target was found and the last change was not deferred.
    pub const ABLE_TO_SCALE: &str = "AbleToScale";
    /// The recommendation was clamped to `minReplicas` or `maxReplicas`.
    pub const SCALING_LIMITED: &str = "ScalingLimited";
    /// Another field manager wrote `spec.replicas` of the target.
    pub const REPLICAS_CONTESTED: &str = "ReplicasContested";
}

/// Condition and event reasons (CamelCase, as Kubernetes reasons).
pub mod reason {
    /// Everything is in order.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// The spec breaks an admission rule (the webhook was down or bypassed).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The target workload or its kind does not exist.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// No metric could be measured: the fleet is held.
    pub const METRICS_UNAVAILABLE: &str = "MetricsUnavailable";
    /// Some metrics could be measured, others were skipped.
    pub const SOME_METRICS_SKIPPED: &str = "SomeMetricsSkipped";
    /// The recommendation was computed from every metric.
    pub const VALID_METRICS: &str = "ValidMetrics";
    /// The last sync could change replicas.
    pub const READY_FOR_NEW_SCALE: &str = "ReadyForNewScale";
    /// A Deployment rollout is in progress.
    pub const ROLLOUT_IN_PROGRESS: &str = "RolloutInProgress";
    /// The previous scale-down has not settled.
    pub const SCALE_DOWN_NOT_SETTLED: &str = "ScaleDownNotSettled";
    /// Writing the target failed.
    pub const WRITE_FAILED: &str = "WriteFailed";
    /// Clamped up to `minReplicas`.
    pub const TOO_FEW_REPLICAS: &str = "TooFewReplicas";
    /// Clamped down to `maxReplicas`.
    pub const TOO_MANY_REPLICAS: &str = "TooManyReplicas";
    /// Within `[minReplicas, maxReplicas]`.
    pub const DESIRED_WITHIN_RANGE: &str = "DesiredWithinRange";
    /// Another field manager owns `spec.replicas`.
    pub const OTHER_FIELD_MANAGER: &str = "OtherFieldManager";
    /// The operator owns `spec.replicas`.
    pub const OWNED: &str = "OwnedByLLMScaler";
    /// The operator has not written `spec.replicas` yet (nothing measurable since it started).
    pub const NOT_CLAIMED: &str = "NotClaimed";
    /// Reading the target failed for another reason than not-found (RBAC, timeouts).
    pub const TARGET_UNREADABLE: &str = "TargetUnreadable";
    /// The `deletionCostQuery` or the pod marking failed: the scale-down waits.
    pub const DELETION_COST_FAILED: &str = "DeletionCostFailed";
    /// Event: replicas raised.
    pub const SCALED_UP: &str = "ScaledUp";
    /// Event: replicas lowered.
    pub const SCALED_DOWN: &str = "ScaledDown";
    /// Event: replicas written again after another manager changed them.
    pub const REASSERTED: &str = "ReplicasReasserted";
}
