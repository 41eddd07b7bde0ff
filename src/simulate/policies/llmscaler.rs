//! The scaler itself: every `syncPeriodSeconds`, its `spec.metrics[]` queries are evaluated on
//! the scraped series and fed to the one decision engine (`crate::engine::decide`).

use llmscaler_api::LLMScalerSpec;
use promql_parser::parser::Expr;

use crate::engine::{self, History, Observation, Policy, Record, Signal};
use crate::promql::{self, PromqlError};
use crate::simulate::replay::{Autoscaler, View};

/// The engine on the scaler's own queries.
#[derive(Debug)]
pub struct LlmscalerPolicy {
    spec: LLMScalerSpec,
    policy: Policy,
    queries: Vec<Expr>,
    history: History,
}

impl LlmscalerPolicy {
    /// The policy of a defaulted, valid Prometheus-provider spec.
    ///
    /// # Errors
    /// [`PromqlError`] for a query that does not parse or leaves the supported subset
    /// (checked once against an empty store).
    pub fn new(spec: &LLMScalerSpec) -> Result<Self, PromqlError> {
        let queries = parse_all(spec)?;
        Ok(Self {
            spec: spec.clone(),
            policy: Policy::from_spec(spec),
            queries,
            history: History::default(),
        })
    }
}

/// Parses every `spec.metrics[].query` and evaluates it once on an empty store, so that an
/// unsupported construct is an error before the run rather than a skipped metric in it.
///
/// # Errors
/// The first query's [`PromqlError::Parse`] or [`PromqlError::Unsupported`].
pub fn parse_all(spec: &LLMScalerSpec) -> Result<Vec<Expr>, PromqlError> {
    let empty = promql::Store::new();
    spec.metrics()
        .iter()
        .map(|m| {
            let expr = promql::parse(&m.query)?;
            match promql::evaluate_single(&expr, &empty, 0) {
                Err(e @ (PromqlError::Unsupported { .. } | PromqlError::Parse { .. })) => Err(e),
                _ => Ok(expr),
            }
        })
        .collect()
}

impl Autoscaler for LlmscalerPolicy {
    fn period_ms(&self) -> i64 {
        i64::from(self.spec.effective_sync_period_seconds().max(1)) * 1000
    }

    fn warm_start(&mut self, replicas: i32) {
        self.history = History::from_records(vec![Record { at_ms: 0, replicas }]);
    }

    fn decide(&mut self, now_ms: i64, view: &View<'_>) -> i32 {
        let values: Vec<Result<f64, String>> = self
            .queries
            .iter()
            .map(|q| promql::evaluate_single(q, view.store, now_ms).map_err(|e| e.to_string()))
            .collect();
        let signal = Signal::metrics(&self.spec, values);
        let observed = Observation {
            spec_replicas: view.spec_replicas,
            ready_replicas: view.ready_replicas,
            rollout_in_progress: false,
        };
        engine::decide(&self.policy, &observed, &signal, &mut self.history, now_ms).replicas
    }
}
