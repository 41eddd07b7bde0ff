//! The five conditions of a sync and the Events they cause (`docs/conditions.md`). Pure: what the
//! sync found and wrote comes in, the conditions and Events to publish come out; transition times
//! change only on a flip.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use llmscaler_api::names::{ConditionType, Reason};

use super::{Action, Limit};

/// A condition as a sync decides it, before transition times are worked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionSpec {
    /// The condition type.
    pub type_: ConditionType,
    /// `True` or `False`.
    pub status: bool,
    /// Why, as a CamelCase reason.
    pub reason: Reason,
    /// Human-readable detail.
    pub message: String,
}

impl ConditionSpec {
    /// A condition of `type_` with `status`, `reason` and `message`.
    pub fn new(
        type_: ConditionType,
        status: bool,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }

    /// Whether this status is the healthy one for its type (`False` for `ScalingLimited` and
    /// `ReplicasContested`, `True` for the others).
    pub(crate) fn is_healthy(&self) -> bool {
        self.status
            != matches!(
                self.type_,
                ConditionType::ScalingLimited | ConditionType::ReplicasContested
            )
    }
}

/// What the sync did about `spec.replicas`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Nothing to write (no change, no claim due), or not written because a guard deferred it.
    NotNeeded,
    /// `spec.replicas` was applied.
    Wrote,
    /// Marking the scale-down's victims failed (message): the scale-down waits a sync.
    MarkFailed(String),
    /// Applying `spec.replicas` failed (message).
    WriteFailed(String),
    /// `scaleDown.drain`: the scale-down waits for the drained pods (message: which, how many
    /// requests in flight, until when) (docs/scale-down.md#drain).
    Draining(String),
    /// `scaleDown.drain`: the drain could not proceed (message); the scale-down waits.
    DrainFailed(String),
}

/// Who holds `spec.replicas` of the target, as the sync saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Another field manager (named) took it from the operator at this sync.
    Contested(String),
    /// A contest seen recently is still shown ([`super::contest::recent_contest`]).
    RecentlyContested(ConditionSpec),
    /// The operator owns it (or wrote it at this sync).
    Owned,
    /// The operator has not written it yet.
    NotClaimed,
}

/// Everything a decided sync found, for its five conditions.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncReport<'a> {
    /// The engine's recommendation before clamping; `None` when nothing was measurable.
    pub recommendation: Option<i32>,
    /// Why the engine decided as it did.
    pub decision_reason: Reason,
    /// The bound that clamped the recommendation.
    pub limited: Option<Limit>,
    /// The target's `spec.replicas` before the sync, replicas.
    pub spec_replicas: i32,
    /// `spec.replicas` after the sync (what a held sync holds at, after the clamp), replicas.
    pub replicas: i32,
    /// The target's `status.readyReplicas`, replicas.
    pub ready_replicas: i32,
    /// `spec.minReplicas` and `spec.maxReplicas`.
    pub bounds: (i32, i32),
    /// Skipped metrics: display name and why.
    pub skipped: &'a [(String, String)],
    /// What happened to `spec.replicas`.
    pub write: &'a WriteOutcome,
    /// Who holds `spec.replicas`.
    pub ownership: &'a Ownership,
    /// The target's kind and name, for messages.
    pub target: (&'a str, &'a str),
    /// What set `bounds` besides the spec: the active schedules, `activation` (docs/guards.md).
    pub schedules: &'a [String],
    /// Set when the operator computes but does not act: `Paused` or `AdvisoryMode`, and a
    /// message saying what holds it and what it would do.
    pub passive: Option<(Reason, String)>,
    /// Another autoscaler on the same target (named): the operator holds and writes nothing.
    pub competing: Option<&'a str>,
}

/// The conditions of a sync that refused an invalid spec (`Ready`, `ScalingActive`,
/// `AbleToScale` False with reason `InvalidSpec`); the others keep their previous values.
pub(crate) fn invalid_spec(message: &str) -> Vec<ConditionSpec> {
    [
        ConditionType::Ready,
        ConditionType::ScalingActive,
        ConditionType::AbleToScale,
    ]
    .into_iter()
    .map(|t| ConditionSpec::new(t, false, Reason::InvalidSpec, message))
    .collect()
}

/// The conditions of a sync that could not read its target: `Ready` and `AbleToScale` False,
/// `TargetNotFound` when the target or its kind does not exist, else `TargetUnreadable`.
pub(crate) fn target_failed(not_found: bool, message: &str) -> Vec<ConditionSpec> {
    let reason = if not_found {
        Reason::TargetNotFound
    } else {
        Reason::TargetUnreadable
    };
    [ConditionType::Ready, ConditionType::AbleToScale]
        .into_iter()
        .map(|t| ConditionSpec::new(t, false, reason, message))
        .collect()
}

/// The conditions of a sync whose metric source could not be built (bad `serverAddress` or
/// header): `Ready` and `ScalingActive` False with reason `MetricsUnavailable`.
pub(crate) fn source_failed(message: &str) -> Vec<ConditionSpec> {
    [ConditionType::Ready, ConditionType::ScalingActive]
        .into_iter()
        .map(|t| ConditionSpec::new(t, false, Reason::MetricsUnavailable, message))
        .collect()
}

/// The conditions of a sync delayed by the namespace's query budget: `ScalingActive` false
/// (nothing was read), `Ready` left as the last sync set it (docs/security.md#query-budget).
pub(crate) fn query_budget_exceeded(message: &str) -> Vec<ConditionSpec> {
    vec![ConditionSpec::new(
        ConditionType::ScalingActive,
        false,
        Reason::QueryBudgetExceeded,
        message,
    )]
}

/// The five conditions of a decided sync, in the order `Ready`, `ScalingActive`, `AbleToScale`,
/// `ScalingLimited`, `ReplicasContested`.
pub fn derive(report: &SyncReport<'_>) -> Vec<ConditionSpec> {
    if let Some(competitor) = report.competing {
        return competing(report, competitor);
    }
    let able = able_to_scale(report);
    let active = scaling_active(report);
    let ready = if let Some((reason, message)) = &report.passive {
        // Not acting by choice: ready when the metrics are, the reason says why nothing is
        // written.
        ConditionSpec::new(
            ConditionType::Ready,
            active.status,
            *reason,
            message.clone(),
        )
    } else if active.status && able.status {
        ConditionSpec::new(
            ConditionType::Ready,
            true,
            Reason::AsExpected,
            "scaling normally",
        )
    } else {
        let cause = if active.status { &able } else { &active };
        ConditionSpec::new(
            ConditionType::Ready,
            false,
            cause.reason,
            cause.message.clone(),
        )
    };
    vec![
        ready,
        active,
        able,
        scaling_limited(report),
        replicas_contested(report),
    ]
}

/// The conditions while another autoscaler scales the target: `Ready`, `AbleToScale` False and
/// `ReplicasContested` True with reason `CompetingAutoscaler`, naming it.
fn competing(report: &SyncReport<'_>, competitor: &str) -> Vec<ConditionSpec> {
    let (kind, name) = report.target;
    let message = format!(
        "{competitor} also scales {kind} {name}: llmscaler holds and writes nothing (no write \
         war); remove one of the two autoscalers"
    );
    let why = |t| ConditionSpec::new(t, false, Reason::CompetingAutoscaler, message.clone());
    vec![
        why(ConditionType::Ready),
        scaling_active(report),
        why(ConditionType::AbleToScale),
        scaling_limited(report),
        ConditionSpec::new(
            ConditionType::ReplicasContested,
            true,
            Reason::CompetingAutoscaler,
            message.clone(),
        ),
    ]
}

fn able_to_scale(report: &SyncReport<'_>) -> ConditionSpec {
    let able = |status, reason, message: String| {
        ConditionSpec::new(ConditionType::AbleToScale, status, reason, message)
    };
    if let Some((reason, message)) = &report.passive {
        return able(false, *reason, message.clone());
    }
    match report.write {
        WriteOutcome::MarkFailed(message) => {
            return able(false, Reason::DeletionCostFailed, message.clone());
        }
        WriteOutcome::WriteFailed(message) => {
            return able(false, Reason::WriteFailed, message.clone());
        }
        WriteOutcome::Draining(message) => {
            return able(false, Reason::Draining, message.clone());
        }
        WriteOutcome::DrainFailed(message) => {
            return able(false, Reason::DrainFailed, message.clone());
        }
        WriteOutcome::NotNeeded | WriteOutcome::Wrote => {}
    }
    // A deferred decision's reason is the condition's: one vocabulary, nothing to map.
    match report.decision_reason {
        reason @ Reason::RolloutInProgress => able(
            false,
            reason,
            "a Deployment rollout is in progress; a scale-down waits for it (a scale-up does not)"
                .to_owned(),
        ),
        reason @ Reason::ScaleDownNotSettled => able(
            false,
            reason,
            format!(
                "readyReplicas {} != spec.replicas {}; the next scale-down waits for it",
                report.ready_replicas, report.spec_replicas
            ),
        ),
        _ => able(
            true,
            Reason::ReadyForNewScale,
            "the target can be scaled".to_owned(),
        ),
    }
}

fn scaling_active(report: &SyncReport<'_>) -> ConditionSpec {
    let list = report
        .skipped
        .iter()
        .map(|(metric, why)| format!("{metric}: {why}"))
        .collect::<Vec<_>>()
        .join("; ");
    if report.recommendation.is_none() {
        ConditionSpec::new(
            ConditionType::ScalingActive,
            false,
            Reason::MetricsUnavailable,
            format!("holding at {} replicas: {list}", report.replicas),
        )
    } else if !report.skipped.is_empty() {
        let held = if report.decision_reason == Reason::MetricsUnavailable {
            "; no scale-down while a metric is skipped"
        } else {
            ""
        };
        ConditionSpec::new(
            ConditionType::ScalingActive,
            true,
            Reason::SomeMetricsSkipped,
            format!("skipped: {list}{held}"),
        )
    } else {
        ConditionSpec::new(
            ConditionType::ScalingActive,
            true,
            Reason::ValidMetrics,
            "the recommendation was computed from every metric",
        )
    }
}

fn scaling_limited(report: &SyncReport<'_>) -> ConditionSpec {
    let (min, max) = report.bounds;
    let by_schedules = if report.schedules.is_empty() {
        String::new()
    } else {
        format!(" (in force: {})", report.schedules.join(", "))
    };
    match report.limited {
        Some(Limit::Min) => ConditionSpec::new(
            ConditionType::ScalingLimited,
            true,
            Reason::TooFewReplicas,
            format!("recommendation raised to minReplicas {min}{by_schedules}"),
        ),
        Some(Limit::Max) => ConditionSpec::new(
            ConditionType::ScalingLimited,
            true,
            Reason::TooManyReplicas,
            format!("recommendation lowered to maxReplicas {max}{by_schedules}"),
        ),
        None => ConditionSpec::new(
            ConditionType::ScalingLimited,
            false,
            Reason::DesiredWithinRange,
            "the recommendation is within [minReplicas, maxReplicas]",
        ),
    }
}

fn replicas_contested(report: &SyncReport<'_>) -> ConditionSpec {
    let (kind, name) = report.target;
    match report.ownership {
        Ownership::Contested(manager) => ConditionSpec::new(
            ConditionType::ReplicasContested,
            true,
            Reason::OtherFieldManager,
            format!(
                "field manager {manager:?} wrote spec.replicas of {kind} {name}; llmscaler \
                 re-asserts it at most once per sync period (leave replicas out of that \
                 manager's manifest)"
            ),
        ),
        Ownership::RecentlyContested(previous) => previous.clone(),
        Ownership::Owned => ConditionSpec::new(
            ConditionType::ReplicasContested,
            false,
            Reason::OwnedByLLMScaler,
            "llmscaler owns spec.replicas",
        ),
        Ownership::NotClaimed if *report.write == WriteOutcome::Wrote => ConditionSpec::new(
            ConditionType::ReplicasContested,
            false,
            Reason::OwnedByLLMScaler,
            "llmscaler owns spec.replicas",
        ),
        Ownership::NotClaimed => ConditionSpec::new(
            ConditionType::ReplicasContested,
            false,
            Reason::NotClaimed,
            "llmscaler has not written spec.replicas yet",
        ),
    }
}

/// Merges new conditions into the previous ones: `lastTransitionTime` changes only when the
/// status flips; previous conditions of types not in `wanted` are kept as they were (a sync that
/// could not decide them). Returns the conditions and the ones that flipped (or appeared).
pub fn merge(
    previous: &[Condition],
    wanted: &[ConditionSpec],
    generation: Option<i64>,
    now: Timestamp,
) -> (Vec<Condition>, Vec<ConditionSpec>) {
    let mut flipped = Vec::new();
    let mut conditions: Vec<Condition> = wanted
        .iter()
        .map(|w| {
            let status = if w.status { "True" } else { "False" }.to_owned();
            let old = previous.iter().find(|c| c.type_ == w.type_.as_str());
            let transition = match old {
                Some(old) if old.status == status => old.last_transition_time.clone(),
                _ => {
                    flipped.push(w.clone());
                    Time(now)
                }
            };
            Condition {
                type_: w.type_.as_str().to_owned(),
                status,
                reason: w.reason.as_str().to_owned(),
                message: clean_message(&w.message, CONDITION_MESSAGE_MAX_BYTES),
                observed_generation: generation,
                last_transition_time: transition,
            }
        })
        .collect();
    conditions.extend(
        previous
            .iter()
            .filter(|p| wanted.iter().all(|w| w.type_.as_str() != p.type_))
            .cloned(),
    );
    (conditions, flipped)
}

/// Largest condition message written, in bytes (32 KiB, the API server's own limit for
/// `metav1.Condition.message`; `docs/security.md#messages`).
pub(crate) const CONDITION_MESSAGE_MAX_BYTES: usize = 32 * 1024;

/// Largest Event note written, in bytes (1 KiB; the API server refuses notes over 1 KiB).
pub(crate) const EVENT_NOTE_MAX_BYTES: usize = 1024;

/// A message fit for a condition or an Event (`docs/security.md#messages`): control characters
/// (C0, DEL, C1, and the bidirectional overrides that could disguise text in a terminal) become
/// a space, runs of whitespace collapse to one space, and the text is cut at a character
/// boundary to at most `max_bytes` bytes, ending with `…` when cut.
pub(crate) fn clean_message(text: &str, max_bytes: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_bytes));
    let mut space = false;
    for c in text.chars() {
        let c = if c.is_control() || is_bidi_control(c) {
            ' '
        } else {
            c
        };
        if c.is_whitespace() {
            if !space && !out.is_empty() {
                out.push(' ');
            }
            space = true;
            continue;
        }
        space = false;
        out.push(c);
        if out.len() > max_bytes {
            break;
        }
    }
    let trimmed_len = out.trim_end().len();
    out.truncate(trimmed_len);
    if out.len() > max_bytes {
        let ellipsis = '…'.len_utf8();
        let mut cut = max_bytes.saturating_sub(ellipsis);
        while cut > 0 && !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        if max_bytes >= ellipsis {
            out.push('…');
        }
    }
    out
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// An Event to publish on the LLMScaler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// `Warning` when true, else `Normal`.
    pub warning: bool,
    /// The Event's reason.
    pub reason: Reason,
    /// The Event's note.
    pub note: String,
    /// The Event's action (`Sync` or `Scale`).
    pub action: &'static str,
}

/// The Events of condition flips: every flip, except a condition that appears for the first time
/// in its healthy state (not news), and one Event per reason in one sync (`Ready` mirrors the
/// failing condition; a competing autoscaler flips three conditions with one reason).
pub(crate) fn flip_events(previous: &[Condition], flipped: &[ConditionSpec]) -> Vec<EventSpec> {
    let mut seen = std::collections::BTreeSet::new();
    flipped
        .iter()
        .filter(|flip| {
            let was_absent = previous.iter().all(|c| c.type_ != flip.type_.as_str());
            !(was_absent && flip.is_healthy())
        })
        .filter(|flip| seen.insert(flip.reason))
        .map(|flip| EventSpec {
            warning: !flip.is_healthy(),
            reason: flip.reason,
            note: format!(
                "{} is now {}: {}",
                flip.type_,
                if flip.status { "True" } else { "False" },
                flip.message
            ),
            action: "Sync",
        })
        .collect()
}

/// The Event of a write of `spec.replicas` from `from` to `to`: `ReplicasReasserted` (Warning)
/// after a contest, `ScaledUp`/`ScaledDown` for a change, none for a first claim of an unchanged
/// value. `why` is the engine's reason (e.g. `StepCapped`).
pub(crate) fn replicas_event(
    target: (&str, &str),
    (from, to): (i32, i32),
    action: Action,
    why: Reason,
    contested_by: Option<&str>,
) -> Option<EventSpec> {
    let (kind, name) = target;
    let (reason, note) = match (action, contested_by) {
        (_, Some(manager)) => (
            Reason::ReplicasReasserted,
            format!(
                "{kind} {name}: spec.replicas {from} written by {manager:?} re-asserted to {to}"
            ),
        ),
        (Action::ScaleUp, None) => (
            Reason::ScaledUp,
            format!("{kind} {name}: {from} -> {to} replicas ({})", why.as_str()),
        ),
        (Action::ScaleDown, None) => (
            Reason::ScaledDown,
            format!("{kind} {name}: {from} -> {to} replicas ({})", why.as_str()),
        ),
        _ => return None,
    };
    Some(EventSpec {
        warning: contested_by.is_some(),
        reason,
        note,
        action: "Scale",
    })
}

#[cfg(test)]
mod tests;
