//! The scaler itself: every `syncPeriodSeconds`, its `spec.metrics[]` queries are evaluated on
//! the scraped series and fed to the one decision engine (`crate::engine::decide`).

use llmscaler_api::LLMScalerSpec;
use promql_parser::parser::Expr;

use crate::engine::capacity::{CapacityInput, CapacityModel};
use crate::engine::startup::{self, StartupTracker};
use crate::engine::{self, Extras, History, Observation, Policy, Record, Signal};
use crate::promql::{self, PromqlError};
use crate::simulate::replay::{Autoscaler, View};

/// The engine on the scaler's own queries.
#[derive(Debug)]
pub struct LlmscalerPolicy {
    spec: LLMScalerSpec,
    policy: Policy,
    queries: Vec<Expr>,
    history: History,
    /// `spec.capacity`: the model and its arrival-rate and backlog queries.
    capacity: Option<(CapacityModel, Expr, Option<Expr>)>,
    /// The measured start-up time (`spec.startup`).
    startup: StartupTracker,
}

impl LlmscalerPolicy {
    /// The policy of a defaulted, valid Prometheus-provider spec.
    ///
    /// # Errors
    /// [`PromqlError`] for a query that does not parse or leaves the supported subset
    /// (checked once against an empty store).
    pub fn new(spec: &LLMScalerSpec) -> Result<Self, PromqlError> {
        let queries = parse_all(spec)?;
        let capacity = match (&spec.capacity, CapacityModel::from_spec(spec)) {
            (Some(c), Some(model)) => Some((
                model,
                parse_checked(&c.arrival_rate_query)?,
                c.backlog_query.as_deref().map(parse_checked).transpose()?,
            )),
            _ => None,
        };
        Ok(Self {
            spec: spec.clone(),
            policy: Policy::from_spec(spec),
            queries,
            history: History::default(),
            capacity,
            startup: StartupTracker::default(),
        })
    }
}

/// Parses every `spec.metrics[].query` and evaluates it once on an empty store, so that an
/// unsupported construct is an error before the run rather than a skipped metric in it.
///
/// # Errors
/// The first query's [`PromqlError::Parse`] or [`PromqlError::Unsupported`].
pub fn parse_all(spec: &LLMScalerSpec) -> Result<Vec<Expr>, PromqlError> {
    spec.metrics()
        .iter()
        .map(|m| parse_checked(&m.query))
        .collect()
}

/// Parses one query and evaluates it once on an empty store (see [`parse_all`]).
///
/// # Errors
/// [`PromqlError::Parse`] or [`PromqlError::Unsupported`].
pub fn parse_checked(query: &str) -> Result<Expr, PromqlError> {
    let empty = promql::Store::new();
    let expr = promql::parse(query)?;
    match promql::evaluate_single(&expr, &empty, 0) {
        Err(e @ (PromqlError::Unsupported { .. } | PromqlError::Parse { .. })) => Err(e),
        _ => Ok(expr),
    }
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
        self.startup
            .observe(now_ms, view.spec_replicas, view.ready_replicas);
        let read =
            |q: &Expr| promql::evaluate_single(q, view.store, now_ms).map_err(|e| e.to_string());
        let extras = Extras {
            capacity: self.capacity.as_ref().map(|(model, arrival, backlog)| {
                (
                    *model,
                    CapacityInput {
                        arrival: read(arrival),
                        backlog: backlog.as_ref().map(read),
                    },
                )
            }),
            hold_metric_scale_up: startup::holds_scale_up(
                &self.spec,
                &self.startup,
                now_ms,
                view.spec_replicas,
                view.ready_replicas,
            ),
        };
        let mut policy = self.policy.clone();
        policy.window_ms = startup::window_ms(&self.spec, policy.window_ms, &self.startup);
        let replicas = engine::decide_with(
            &policy,
            &observed,
            &signal,
            &extras,
            &mut self.history,
            now_ms,
        )
        .replicas;
        if replicas > view.spec_replicas {
            self.startup.note_scale_up(now_ms, replicas);
        }
        replicas
    }
}
