//! The policies of `simulate --requests`: `llmscaler` (the engine on the scaler's own queries)
//! and the comparators `hpa`, `keda`, `ideal` and `static`
//! (`docs/simulate/README.md#comparators`).

mod hpa;
mod ideal;
mod llmscaler;

pub use hpa::{HpaPolicy, KedaPolicy, MetricShape, shapes};
pub use ideal::IdealPolicy;
pub use llmscaler::LlmscalerPolicy;

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
