//! Per-scaler memory of the leading process: the step ([`Scaler`], which owns the stabilization
//! history, the contest memory, the drain in progress...), the next due time and one-time log
//! flags. It leaves when the scaler does (watch delete events, and a
//! re-list that no longer holds it), and a new leadership term starts empty, from what status says.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::step::Scaler;

/// A scaler's key: namespace and name.
pub(crate) type ScalerKey = (String, String);

/// What the controller remembers of one scaler between syncs.
#[derive(Clone, Debug, Default)]
pub(crate) struct ScalerState {
    /// The uid this memory belongs to: a scaler deleted and re-created under the same name starts
    /// afresh.
    pub uid: Option<String>,
    /// The step and everything it remembers (history, start-up, contest, drain, advice); built
    /// at the first sync of this term from the spec and the status.
    pub scaler: Option<Scaler>,
    /// `deletionCostQuery` under Custom was logged once.
    pub warned_cost_query: bool,
    /// When the next sync is due, milliseconds since the epoch (the evaluation lag is measured
    /// from it; `docs/scaling.md#pacing`).
    pub due_ms: Option<i64>,
}

/// Every scaler's memory, shared by the reconciles of one leadership term. Each state is boxed:
/// a [`ScalerState`] is about 1.5 KiB inline, and a map of inline values holds one in every
/// bucket, used or not (up to twice the scalers after a resize): 6.2 MB for 2,000 scalers,
/// measured with heaptrack (docs/benchmarks/scale.md).
#[derive(Debug, Default)]
pub(crate) struct States {
    map: Mutex<HashMap<ScalerKey, Box<ScalerState>>>,
}

impl States {
    /// Takes the memory of `key` out for one sync (fresh when absent or when `uid` differs); give
    /// it back with [`States::put`].
    pub fn take(&self, key: &ScalerKey, uid: Option<&str>) -> ScalerState {
        let mut map = self.lock();
        match map.remove(key) {
            Some(state) if state.uid.as_deref() == uid => *state,
            _ => ScalerState {
                uid: uid.map(str::to_owned),
                ..ScalerState::default()
            },
        }
    }

    /// Stores the memory of `key` after a sync.
    pub fn put(&self, key: ScalerKey, state: ScalerState) {
        self.lock().insert(key, Box::new(state));
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
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ScalerKey, Box<ScalerState>>> {
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
