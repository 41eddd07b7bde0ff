//! The policies of `simulate --requests`: `llmscaler` (the engine on the scaler's own queries)
//! and the comparators `hpa`, `keda`, `ideal`, `reactive` and `static`
//! (`docs/simulate/README.md#comparators`).

mod hpa;
mod ideal;
pub(crate) mod llmscaler;
mod reactive;

pub use hpa::{HpaPolicy, KedaPolicy, MetricShape, shapes};
pub use ideal::IdealPolicy;
pub use llmscaler::LlmscalerPolicy;
pub use reactive::ReactivePolicy;

use super::replay::{Autoscaler, View};

/// A fleet held at one size.
#[derive(Clone, Copy, Debug)]
pub struct StaticPolicy {
    /// Replicas held.
    pub replicas: i32,
    /// Sync period, milliseconds (only for the timeline).
    pub period_ms: i64,
}

impl Autoscaler for StaticPolicy {
    fn period_ms(&self) -> i64 {
        self.period_ms
    }
    fn reads_metrics(&self) -> bool {
        false
    }
    fn decide(&mut self, _now_ms: i64, _view: &View<'_>) -> i32 {
        self.replicas
    }
}

/// A fixed replica history (`backtest`'s "as it ran", docs/backtest.md#what-it-replays):
/// `replicas[i]` from `i × period_ms` on, the last point held to the end.
#[derive(Clone, Debug)]
pub struct SchedulePolicy {
    period_ms: i64,
    replicas: Vec<i32>,
}

impl SchedulePolicy {
    /// The schedule of `replicas` (one point per `period_ms` milliseconds, at least 1).
    pub fn new(period_ms: i64, replicas: Vec<i32>) -> Self {
        Self {
            period_ms: period_ms.max(1),
            replicas,
        }
    }
}

impl Autoscaler for SchedulePolicy {
    fn period_ms(&self) -> i64 {
        self.period_ms
    }
    fn reads_metrics(&self) -> bool {
        false
    }
    fn decide(&mut self, now_ms: i64, _view: &View<'_>) -> i32 {
        let index = usize::try_from(now_ms / self.period_ms).unwrap_or(0);
        self.replicas
            .get(index)
            .or(self.replicas.last())
            .copied()
            .unwrap_or(0)
            .max(0)
    }
}
