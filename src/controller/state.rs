//! Per-scaler memory of the leading process: the stabilization history while leading, the contest
//! memory, the drain in progress and one-time log flags. It leaves when the scaler does (watch delete events, and a
//! re-list that no longer holds it), and a new leadership term starts empty, from what status says.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::engine::History;
use crate::engine::contest::ContestMemory;
use crate::engine::startup::StartupTracker;

/// A scaler's key: namespace and name.
pub type ScalerKey = (String, String);

/// What the controller remembers of one scaler between syncs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScalerState {
    /// The uid this memory belongs to: a scaler deleted and re-created under the same name starts
    /// afresh.
    pub uid: Option<String>,
    /// The stabilization history while this process leads (status holds a copy refreshed at least
    /// every refresh interval).
    pub history: Option<History>,
    /// Contest detection and the re-assert throttle.
    pub contest: ContestMemory,
    /// `deletionCostQuery` under Custom was logged once.
    pub warned_cost_query: bool,
    /// The last replica count advised in advisory mode (an Event is published when it changes).
    pub last_advice: Option<i32>,
    /// The scale-down drain in progress (`scaleDown.drain`), if any.
    pub drain: Option<DrainState>,
    /// Whether this term has read back the pods' rotation labels once (a drain left by another
    /// process is taken over, or its pods put back when drain is off).
    pub drain_recovered: bool,
    /// When the next sync is due, milliseconds since the epoch (the evaluation lag is measured
    /// from it; `docs/scaling.md#pacing`).
    pub due_ms: Option<i64>,
    /// The measured start-up time and the scale-ups waiting for their replicas
    /// (docs/guards.md#start-up-awareness); `status.startupSeconds` seeds it in a new term.
    pub startup: Option<StartupTracker>,
}

/// A scale-down drain in progress (docs/scale-down.md#drain): pods out of rotation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainState {
    /// The pods out of rotation, by name.
    pub victims: Vec<String>,
    /// When this process took them out or found them out (Unix ms).
    pub started_ms: i64,
    /// In-flight requests on them at the last read (`None` when not read).
    pub in_flight: Option<i64>,
}

/// Every scaler's memory, shared by the reconciles of one leadership term.
#[derive(Debug, Default)]
pub struct States {
    map: Mutex<HashMap<ScalerKey, ScalerState>>,
}

impl States {
    /// Takes the memory of `key` out for one sync (fresh when absent or when `uid` differs); give
    /// it back with [`States::put`].
    pub fn take(&self, key: &ScalerKey, uid: Option<&str>) -> ScalerState {
        let mut map = self.lock();
        match map.remove(key) {
            Some(state) if state.uid.as_deref() == uid => state,
            _ => ScalerState {
                uid: uid.map(str::to_owned),
                ..ScalerState::default()
            },
        }
    }

    /// Stores the memory of `key` after a sync.
    pub fn put(&self, key: ScalerKey, state: ScalerState) {
        self.lock().insert(key, state);
    }

    /// Forgets `key` (the scaler was deleted). Returns whether anything was held.
    pub fn evict(&self, key: &ScalerKey) -> bool {
        self.lock().remove(key).is_some()
    }

    /// Keeps only the keys `live` says still exist (after a re-list); returns the evicted keys.
    pub fn retain(&self, live: impl Fn(&ScalerKey) -> bool) -> Vec<ScalerKey> {
        let mut map = self.lock();
        let gone: Vec<ScalerKey> = map.keys().filter(|k| !live(k)).cloned().collect();
        for key in &gone {
            map.remove(key);
        }
        gone
    }

    /// How many scalers are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no scaler is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ScalerKey, ScalerState>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ScalerKey {
        ("ns".to_owned(), name.to_owned())
    }

    #[test]
    fn memory_follows_the_scaler_and_its_uid() {
        let states = States::default();
        let mut state = states.take(&key("a"), Some("uid-1"));
        state.warned_cost_query = true;
        states.put(key("a"), state);
        assert!(states.take(&key("a"), Some("uid-1")).warned_cost_query);
        states.put(key("a"), states.take(&key("a"), Some("uid-1")));
        // Re-created under the same name: a new uid starts afresh.
        assert!(!states.take(&key("a"), Some("uid-2")).warned_cost_query);
        states.put(key("a"), ScalerState::default());
        states.put(key("b"), ScalerState::default());
        assert!(states.evict(&key("a")));
        assert!(!states.evict(&key("a")));
        states.put(key("c"), ScalerState::default());
        assert_eq!(states.retain(|k| k.1 == "c"), vec![key("b")]);
        assert_eq!(states.len(), 1);
    }
}
