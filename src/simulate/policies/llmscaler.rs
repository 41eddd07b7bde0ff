//! The scaler itself: every `syncPeriodSeconds`, its `spec.metrics[]` queries are evaluated on
//! the scraped series and fed to the one decision engine (`crate::engine::decide`). Per-pod
//! metrics (runtime signals, `perPod` queries, docs/signals.md) are read as the operator reads
//! them: one series per pod, kept for the current Ready pods, averaged with the coverage rule.
//! Under `scaleDown.drain` a scale-down first takes its victims out of rotation and lowers replicas
//! once they are idle or `drainSeconds` has passed, with the controller's own rule
//! ([`crate::controller::drain::next`]); the victims are the newest pods, as without
//! `deletionCostQuery`, and their in-flight requests are read from the model (docs/simulate/README.md).

use std::collections::{BTreeMap, BTreeSet};

use llmscaler_api::signals::{self, parse_coverage};
use llmscaler_api::{LLMScalerSpec, MetricSpec};
use promql_parser::parser::Expr;

use crate::controller::drain::{self, Next};
use crate::engine::capacity::{CapacityInput, CapacityModel};
use crate::engine::startup::{self, StartupTracker};
use crate::engine::{self, Extras, History, Observation, Policy, Record, Signal};
use crate::metrics::Subject;
use crate::metrics::per_pod::{self, PodSet};
use crate::promql::{self, PromqlError, Value};
use crate::simulate::replay::{Autoscaler, View};

/// The engine on the scaler's own queries.
#[derive(Debug)]
pub struct LlmscalerPolicy {
    spec: LLMScalerSpec,
    policy: Policy,
    queries: Vec<Expr>,
    history: History,
    /// The drain in progress: the victims and when they left rotation (ms).
    drain: Option<(Vec<String>, i64)>,
    /// The pods out of rotation after the last sync.
    out: BTreeSet<String>,
    /// The namespace label of the scraped series (runtime signals select on it).
    namespace: String,
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
            drain: None,
            out: BTreeSet::new(),
            namespace: "default".to_owned(),
            capacity,
            startup: StartupTracker::default(),
        })
    }

    /// The same policy reading series labelled `namespace` (the replay's scrape labels).
    #[must_use]
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        namespace.clone_into(&mut self.namespace);
        self
    }

    /// One per-pod metric at `now_ms`, as the operator reads it (docs/signals.md).
    fn read_per_pod(
        &self,
        metric: &MetricSpec,
        fleet_expr: &Expr,
        view: &View<'_>,
        now_ms: i64,
    ) -> Result<f64, String> {
        let pods = PodSet {
            namespace: self.namespace.clone(),
            ready: view.cluster.ready_names().clone(),
        };
        let (subject, expr) = if metric.runtime.is_some() {
            let (subject, query) = per_pod::subject_and_query(metric, &pods)?;
            if pods.ready.is_empty() {
                return Err(crate::metrics::MetricError::NoReadyPods { subject }.to_string());
            }
            (subject, promql::parse(&query).map_err(|e| e.to_string())?)
        } else {
            (Subject::Query(metric.query.clone()), fleet_expr.clone())
        };
        let samples: BTreeMap<String, f64> =
            match promql::eval::eval(&expr, view.store, now_ms).map_err(|e| e.to_string())? {
                Value::Vector(v) => v
                    .into_iter()
                    .filter_map(|(labels, x)| labels.get("pod").map(|p| (p.clone(), x)))
                    .collect(),
                _ => return Err("a per-pod query must return an instant vector".to_owned()),
            };
        let coverage =
            parse_coverage(metric.coverage.as_deref()).unwrap_or(signals::DEFAULT_COVERAGE);
        per_pod::aggregate(&subject, &samples, &pods.ready, coverage).map_err(|e| e.to_string())
    }
}

/// The query of a metric over the whole fleet: `spec.metrics[].query`, or for a runtime signal
/// its [`signals::fleet_query`] (`avg` of the per-pod query over every pod).
///
/// # Errors
/// [`PromqlError::Eval`] for a signal the runtime does not publish (admission refuses it).
pub fn fleet_query(metric: &MetricSpec) -> Result<String, PromqlError> {
    match (metric.runtime, metric.signal) {
        (Some(runtime), Some(signal)) => {
            let published = signals::published(runtime, signal)
                .map_err(|why| PromqlError::Eval(why.to_owned()))?;
            Ok(signals::fleet_query(
                published,
                metric.effective_scrape_interval_seconds(),
            ))
        }
        _ => Ok(metric.query.clone()),
    }
}

/// Parses every metric's [`fleet_query`] and evaluates it once on an empty store, so that an
/// unsupported construct is an error before the run rather than a skipped metric in it.
///
/// # Errors
/// The first query's [`PromqlError::Parse`] or [`PromqlError::Unsupported`].
pub fn parse_all(spec: &LLMScalerSpec) -> Result<Vec<Expr>, PromqlError> {
    spec.metrics()
        .iter()
        .map(|m| parse_checked(&fleet_query(m)?))
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
            .zip(self.spec.metrics())
            .map(|(q, metric)| {
                if metric.is_per_pod() {
                    self.read_per_pod(metric, q, view, now_ms)
                } else {
                    promql::evaluate_single(q, view.store, now_ms).map_err(|e| e.to_string())
                }
            })
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
        self.drained(now_ms, view, replicas)
    }

    fn out_of_rotation(&self) -> Option<&BTreeSet<String>> {
        self.spec.drain().map(|_| &self.out)
    }
}

impl LlmscalerPolicy {
    /// `spec.replicas` after the drain's step on a recommendation of `wanted`.
    fn drained(&mut self, now_ms: i64, view: &View<'_>, wanted: i32) -> i32 {
        let Some(config) = self.spec.drain() else {
            return wanted;
        };
        let spec_replicas = view.spec_replicas;
        let remove_now = spec_replicas - wanted;
        if let Some((victims, started_ms)) = self.drain.clone() {
            let live: Vec<String> = victims
                .into_iter()
                .filter(|v| view.pods.iter().any(|p| &p.name == v))
                .collect();
            #[allow(clippy::cast_precision_loss)]
            let readings: BTreeMap<String, f64> = live
                .iter()
                .map(|v| (v.clone(), view.cluster.in_flight(v).unwrap_or(0) as f64))
                .collect();
            let drain_ms = i64::from(config.effective_drain_seconds()) * 1000;
            match drain::next(
                true,
                &live,
                &readings,
                remove_now,
                now_ms - started_ms,
                drain_ms,
            ) {
                Next::Wait => return spec_replicas,
                Next::Cancel => {
                    self.drain = None;
                    self.out.clear();
                    return wanted;
                }
                Next::Finish { remove, .. } => {
                    self.drain = None;
                    let n = i32::try_from(remove.len()).unwrap_or(0);
                    self.out = remove.into_iter().collect();
                    return spec_replicas - n;
                }
                Next::Vanished => self.drain = None,
            }
        }
        self.out.clear();
        if remove_now <= 0 {
            return wanted;
        }
        // The newest pods go first (names are numbered in creation order).
        let mut names: Vec<String> = view.pods.iter().map(|p| p.name.clone()).collect();
        names.sort();
        let n = usize::try_from(remove_now).unwrap_or(0).min(names.len());
        let victims = names.split_off(names.len() - n);
        self.out = victims.iter().cloned().collect();
        self.drain = Some((victims, now_ms));
        spec_replicas
    }
}
