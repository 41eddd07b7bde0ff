//! The LLMScaler status: conditions that keep their transition times, the stabilization history,
//! and the server-side apply of the status subresource, only when something changed (spec §1
//! status, §6, §7).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use llmscaler_api::{LLMScaler, LLMScalerStatus, RecommendationRecord};
use serde_json::json;

use super::names::FIELD_MANAGER;
use crate::engine::{History, Record};

/// A condition as a sync decides it, before transition times are worked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionSpec {
    /// One of [`super::names::condition`].
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// One of [`super::names::reason`].
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

impl ConditionSpec {
    /// A condition of `type_` with `status`, `reason` and `message`.
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// Merges new conditions into the previous ones: `lastTransitionTime` changes only when the
/// status flips (spec §7); previous conditions of types not in `wanted` are kept as they were. Returns the conditions and the types that flipped (or appeared).
pub fn merge_conditions(
    previous: &[Condition],
    wanted: &[ConditionSpec],
    generation: Option<i64>,
    now: Timestamp,
) -> (Vec<Condition>, Vec<ConditionSpec>) {
    let mut flipped = Vec::new();
    let conditions = wanted
        .iter()
        .map(|w| {
            let status = if w.status { "True" } else { "False" }.to_string();
            let old = previous.iter().find(|c| c.type_ == w.type_);
            let transition = match old {
                Some(old) if old.status == status => old.last_transition_time.clone(),
                _ => {
                    flipped.push(w.clone());
                    Time(now)
                }
            };
            Condition {
                type_: w.type_.to_string(),
                status,
                reason: w.reason.to_string(),
                message: w.message.clone(),
                observed_generation: generation,
                last_transition_time: transition,
            }
        })
        .collect();
    // A sync that could not decide every condition (target missing, invalid spec) keeps the
    // others as they were, e.g. a recent `ReplicasContested=True`.
    let mut conditions: Vec<Condition> = conditions;
    conditions.extend(
        previous
            .iter()
            .filter(|p| wanted.iter().all(|w| w.type_ != p.type_))
            .cloned(),
    );
    (conditions, flipped)
}

/// How stale the persisted stabilization history may get before it is written again,
/// milliseconds: a quarter of the window, at least one sync period, at most 60 s. A restart
/// restores the history shifted later by this much, so the restored window can end late, never
/// early (spec §2 step 5; issue 6 restart safety).
pub fn refresh_interval_ms(window_ms: i64, sync_period_ms: i64) -> i64 {
    (window_ms / 4).min(60_000).max(sync_period_ms)
}

/// The history kept in status, as the engine's [`History`], every time moved `shift_ms` later
/// (see [`refresh_interval_ms`]).
pub fn history_from_status(status: Option<&LLMScalerStatus>, shift_ms: i64) -> History {
    History::from_records(
        status
            .and_then(|s| s.recommendations.as_ref())
            .into_iter()
            .flatten()
            .map(|r| Record {
                at_ms: r.time.0.as_millisecond().saturating_add(shift_ms),
                replicas: r.replicas,
            })
            .collect(),
    )
}

/// The engine's history as status records: only the records that can still be a window maximum
/// ([`History::dominant`]), at second precision rounded up so a restored window can only be
/// longer, never shorter.
pub fn history_to_status(history: &History) -> Option<Vec<RecommendationRecord>> {
    let records: Vec<RecommendationRecord> = history
        .dominant()
        .iter()
        .filter_map(|r| {
            let seconds = r.at_ms.div_euclid(1000) + i64::from(r.at_ms.rem_euclid(1000) != 0);
            Timestamp::from_second(seconds)
                .ok()
                .map(|t| RecommendationRecord {
                    time: Time(t),
                    replicas: r.replicas,
                })
        })
        .collect();
    (!records.is_empty()).then_some(records)
}

/// What to persist: the `previous` records when they hold the same values and none lags the
/// in-memory history by more than `refresh_ms` (no write in steady state), else the history.
pub fn history_to_persist(
    previous: Option<&Vec<RecommendationRecord>>,
    history: &History,
    refresh_ms: i64,
) -> Option<Vec<RecommendationRecord>> {
    let current = history_to_status(history);
    let (Some(old), Some(new)) = (previous, current.as_ref()) else {
        return current;
    };
    let fresh_enough = old.len() == new.len()
        && old.iter().zip(new).all(|(o, n)| {
            o.replicas == n.replicas
                && n.time.0.as_millisecond() - o.time.0.as_millisecond() <= refresh_ms
        });
    if fresh_enough {
        previous.cloned()
    } else {
        current
    }
}

/// Server-side applies `status` to the scaler's status subresource under [`FIELD_MANAGER`],
/// unless it equals the current status. Returns whether it wrote.
///
/// # Errors
/// The API error of the patch.
pub async fn apply_status(
    api: &Api<LLMScaler>,
    scaler: &LLMScaler,
    status: LLMScalerStatus,
) -> Result<bool, kube::Error> {
    if scaler.status.as_ref() == Some(&status) {
        return Ok(false);
    }
    let name = scaler.metadata.name.clone().unwrap_or_default();
    tracing::debug!(scaler = %name, before = ?scaler.status, after = ?status, "status changed");
    let body = json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "status": status,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_changes_only_on_flip() {
        let t0 = Timestamp::from_second(1_000).expect("valid");
        let t1 = Timestamp::from_second(2_000).expect("valid");
        let wanted = [ConditionSpec::new("Ready", true, "AsExpected", "ok")];
        let (first, flipped) = merge_conditions(&[], &wanted, Some(1), t0);
        assert_eq!(flipped.len(), 1);
        let reworded = [ConditionSpec::new("Ready", true, "AsExpected", "still ok")];
        let (second, flipped) = merge_conditions(&first, &reworded, Some(1), t1);
        assert!(flipped.is_empty());
        assert_eq!(second[0].last_transition_time, Time(t0));
        assert_eq!(second[0].message, "still ok");
        let down = [ConditionSpec::new(
            "Ready",
            false,
            "MetricsUnavailable",
            "no data",
        )];
        let (third, flipped) = merge_conditions(&second, &down, Some(1), t1);
        assert_eq!(flipped.len(), 1);
        assert_eq!(third[0].last_transition_time, Time(t1));
        let other = [ConditionSpec::new(
            "AbleToScale",
            false,
            "TargetNotFound",
            "gone",
        )];
        let (fourth, _) = merge_conditions(&third, &other, Some(1), t1);
        let types: Vec<&str> = fourth.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["AbleToScale", "Ready"],
            "undecided conditions are kept"
        );
    }

    #[test]
    fn history_round_trips_rounding_up_and_shifted() {
        let history = History::from_records(vec![Record {
            at_ms: 1_500,
            replicas: 4,
        }]);
        let status = LLMScalerStatus {
            recommendations: history_to_status(&history),
            ..LLMScalerStatus::default()
        };
        let restored = history_from_status(Some(&status), 5_000);
        assert_eq!(
            restored.records(),
            &[Record {
                at_ms: 7_000,
                replicas: 4
            }]
        );
    }

    #[test]
    fn steady_history_is_persisted_once_per_refresh_interval() {
        let mut history = History::default();
        history.record(1_000, 4, 60_000);
        let persisted = history_to_persist(None, &history, 15_000);
        assert!(persisted.is_some());
        history.record(10_000, 4, 60_000);
        assert_eq!(
            history_to_persist(persisted.as_ref(), &history, 15_000),
            persisted,
            "fresh enough"
        );
        history.record(17_000, 4, 60_000);
        let refreshed = history_to_persist(persisted.as_ref(), &history, 15_000);
        assert_ne!(refreshed, persisted, "16 s stale > 15 s refresh");
        history.record(18_000, 6, 60_000);
        assert_ne!(
            history_to_persist(refreshed.as_ref(), &history, 15_000),
            refreshed,
            "new value"
        );
    }

    #[test]
    fn refresh_interval_bounds() {
        assert_eq!(refresh_interval_ms(300_000, 15_000), 60_000);
        assert_eq!(refresh_interval_ms(20_000, 1_000), 5_000);
        assert_eq!(refresh_interval_ms(20_000, 15_000), 15_000);
    }
}
