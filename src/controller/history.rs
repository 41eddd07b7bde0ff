//! The stabilization history in the LLMScaler status: what is persisted, when, and how a new
//! leader restores it so a restart can delay a scale-down, never advance it
//! (`docs/guards.md#restart-safe-history`). Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use llmscaler_api::{LLMScalerStatus, RecommendationRecord};

use crate::engine::{History, Record};

/// How stale the persisted stabilization history may get before it is written again,
/// milliseconds: a quarter of the window, at least one sync period, at most 60 s. A restart
/// restores the history shifted later by this much, so the restored window can end late, never
/// early (docs/guards.md#restart-safe-history).
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

#[cfg(test)]
mod tests {
    use super::*;

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
