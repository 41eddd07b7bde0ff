//! The scaler itself: every `syncPeriodSeconds` it reads what the operator reads — its
//! `spec.metrics[]` queries on the scraped series (per-pod metrics as the operator reads them:
//! one series per pod, kept for the current Ready pods, averaged with the coverage rule,
//! docs/signals.md), `spec.capacity`'s and `spec.activation`'s queries, and what the step asks
//! for (the drain's in-flight query, `deletionCostQuery`) — and runs the operator's own step
//! ([`crate::step::Scaler`]), then carries out its plan on the modelled cluster: rotation labels,
//! pod-deletion-cost marks (which the modelled ReplicaSet honours) and `spec.replicas`
//! (docs/simulate/README.md).

use std::collections::{BTreeMap, BTreeSet};

use llmscaler_api::signals::{self, parse_coverage};
use llmscaler_api::{LLMScalerSpec, MetricSpec};
use promql_parser::parser::Expr;

use crate::engine::capacity::CapacityInput;
use crate::engine::{History, Record, Signal};
use crate::metrics::Subject;
use crate::metrics::per_pod::{self, PodSet};
use crate::promql::{self, PromqlError, Value};
use crate::simulate::replay::{Autoscaler, CapacityPoint, View};
use crate::step::{self, Acting, Effect, Scaler, Target};

/// The engine on the scaler's own queries.
#[derive(Debug)]
pub struct LlmscalerPolicy {
    scaler: Scaler,
    queries: Vec<Expr>,
    /// The pods out of rotation after the last sync.
    out: BTreeSet<String>,
    /// The pod-deletion-cost marks after the last sync.
    costs: BTreeMap<String, i32>,
    /// The namespace label of the scraped series (runtime signals select on it).
    namespace: String,
    /// `spec.capacity`'s arrival-rate and backlog queries.
    capacity: Option<(Expr, Option<Expr>)>,
    /// `spec.objective`'s queries, in order.
    objective: Option<Vec<Expr>>,
    /// Every sync's observation and plan, when recording ([`LlmscalerPolicy::recording`]).
    record: Option<Vec<Synced>>,
    /// `spec.objective`'s capacity estimate at every sync that had one.
    estimates: Vec<CapacityPoint>,
    /// The `--max-num-seqs` the target's pod template states ([`Self::stating_max_num_seqs`]).
    max_num_seqs: Option<u32>,
}

/// One sync of the replay, as recorded: what the step was given and what it planned.
#[derive(Clone, Debug)]
pub struct Synced {
    /// The observation.
    pub observed: step::Observation<'static, String>,
    /// `spec.replicas` after the sync.
    pub replicas: i32,
    /// The rotation changes of the sync: `(pod, "in" | "out")`.
    pub rotation: Vec<(String, &'static str)>,
}

impl LlmscalerPolicy {
    /// The policy of a defaulted, valid Prometheus-provider spec.
    ///
    /// # Errors
    /// [`PromqlError`] for a query that does not parse or leaves the supported subset
    /// (checked once against an empty store).
    pub fn new(spec: &LLMScalerSpec) -> Result<Self, PromqlError> {
        let queries = parse_all(spec)?;
        let capacity = match &spec.capacity {
            Some(c) => Some((
                parse_checked(&c.arrival_rate_query)?,
                c.backlog_query.as_deref().map(parse_checked).transpose()?,
            )),
            None => None,
        };
        let objective = crate::engine::objective::queries(spec)
            .map(|queries| queries.iter().map(|q| parse_checked(q)).collect())
            .transpose()?;
        for query in [
            spec.activation.as_ref().map(|a| a.query.as_str()),
            spec.drain().and_then(|d| d.in_flight_query.as_deref()),
            spec.scale_down
                .as_ref()
                .and_then(|s| s.deletion_cost_query.as_deref()),
        ]
        .into_iter()
        .flatten()
        {
            parse_checked(query)?;
        }
        Ok(Self {
            scaler: Scaler::new(spec, None),
            queries,
            out: BTreeSet::new(),
            costs: BTreeMap::new(),
            namespace: "default".to_owned(),
            capacity,
            objective,
            record: None,
            estimates: Vec::new(),
            max_num_seqs: None,
        })
    }

    /// The same policy on a target whose pod template states vLLM's `--max-num-seqs` as
    /// `max_num_seqs` (the replayed model's batch limit, docs/objective.md#calibration).
    #[must_use]
    pub fn stating_max_num_seqs(mut self, max_num_seqs: usize) -> Self {
        self.max_num_seqs = u32::try_from(max_num_seqs).ok();
        self
    }

    /// The same policy reading series labelled `namespace` (the replay's scrape labels).
    #[must_use]
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        namespace.clone_into(&mut self.namespace);
        self
    }

    /// The same policy recording every sync ([`LlmscalerPolicy::recorded`]).
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.record = Some(Vec::new());
        self
    }

    /// The syncs recorded so far.
    pub fn recorded(&self) -> &[Synced] {
        self.record.as_deref().unwrap_or_default()
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
        i64::from(self.scaler.spec().effective_sync_period_seconds().max(1)) * 1000
    }

    fn warm_start(&mut self, replicas: i32) {
        let history = History::from_records(vec![Record { at_ms: 0, replicas }]);
        self.scaler = self.scaler.clone().with_history(history);
    }

    fn decide(&mut self, now_ms: i64, view: &View<'_>) -> i32 {
        let observed = self.observe(now_ms, view);
        let plan = self.scaler.step(&observed);
        let mut rotation = Vec::new();
        for effect in &plan.effects {
            match effect {
                Effect::Rotation { pods, value } => {
                    for pod in pods {
                        rotation.push((pod.clone(), *value));
                        if *value == llmscaler_api::names::ROTATION_OUT {
                            self.out.insert(pod.clone());
                        } else {
                            self.out.remove(pod);
                        }
                    }
                }
                Effect::Marks(marks) => {
                    self.costs
                        .extend(marks.set.iter().map(|(p, c)| (p.clone(), *c)));
                    for pod in &marks.clear {
                        self.costs.remove(pod);
                    }
                }
                Effect::Replicas { .. } | Effect::Event(_) | Effect::ActivatorRoute { .. } => {}
            }
        }
        let replicas = plan.replicas_after(view.spec_replicas);
        if let Some(c) = &plan.capacity
            && let Ok(rps) = c.requests_per_second.parse::<f64>()
        {
            #[allow(clippy::cast_precision_loss)]
            let t_seconds = now_ms as f64 / 1000.0;
            self.estimates.push(CapacityPoint {
                t_seconds,
                basis: c.basis.clone(),
                requests_per_second: rps,
            });
        }
        if let Some(record) = self.record.as_mut() {
            record.push(Synced {
                observed: observed.clone(),
                replicas,
                rotation,
            });
        }
        replicas
    }

    fn out_of_rotation(&self) -> Option<&BTreeSet<String>> {
        Some(&self.out)
    }

    fn deletion_costs(&self) -> Option<&BTreeMap<String, i32>> {
        Some(&self.costs)
    }

    fn capacity(&self) -> &[CapacityPoint] {
        &self.estimates
    }
}

impl LlmscalerPolicy {
    /// What the operator would read at `now_ms`: the target (a Deployment the operator owns),
    /// its pods with their labels and marks, the metrics, and what the step asks for.
    fn observe(&self, now_ms: i64, view: &View<'_>) -> step::Observation<'static, String> {
        let spec = self.scaler.spec();
        let target = Target {
            spec_replicas: view.spec_replicas,
            ready_replicas: view.ready_replicas,
            rollout_in_progress: false,
            is_deployment: true,
            owns_replicas: true,
            other_replicas_managers: Vec::new(),
            template: Some("replay".to_owned()),
            max_num_seqs: self.max_num_seqs,
        };
        let reads = self.scaler.reads(&target, &self.namespace, now_ms);
        let values: Vec<Result<f64, String>> = self
            .queries
            .iter()
            .zip(spec.metrics())
            .map(|(q, metric)| {
                if metric.is_per_pod() {
                    self.read_per_pod(metric, q, view, now_ms)
                } else {
                    promql::evaluate_single(q, view.store, now_ms).map_err(|e| e.to_string())
                }
            })
            .collect();
        let read =
            |q: &Expr| promql::evaluate_single(q, view.store, now_ms).map_err(|e| e.to_string());
        let pods = view
            .cluster
            .step_pods()
            .into_iter()
            .map(|mut p| {
                p.deletion_cost = self.costs.get(&p.name).map(ToString::to_string);
                if self.out.contains(&p.name) {
                    p.rotation = Some(llmscaler_api::names::ROTATION_OUT.to_owned());
                }
                p
            })
            .collect();
        step::Observation {
            now_ms,
            signal: Signal::metrics(spec, values),
            capacity: self
                .capacity
                .as_ref()
                .map(|(arrival, backlog)| CapacityInput {
                    arrival: read(arrival),
                    backlog: backlog.as_ref().map(read),
                }),
            objective: self
                .objective
                .as_ref()
                .map(|queries| queries.iter().map(read).collect()),
            activation: reads
                .activation
                .as_deref()
                .map(|q| eval_text(q, view, now_ms)),
            pods: reads.pods.then_some(Ok(pods)),
            in_flight: reads.in_flight.as_ref().map(|(q, pods)| {
                per_pod_text(q, view, now_ms).map(|mut values| {
                    values.retain(|pod, _| pods.contains(pod));
                    values
                })
            }),
            deletion_costs: reads
                .deletion_costs
                .as_deref()
                .map(|q| per_pod_text(q, view, now_ms)),
            acting: Acting::of_spec(spec),
            competitor: None,
            status: None,
            activator: None,
            target,
        }
    }
}

/// One query's single value at `now_ms` (as the operator's Prometheus client reads it).
fn eval_text(query: &str, view: &View<'_>, now_ms: i64) -> Result<f64, String> {
    let expr = promql::parse(query).map_err(|e| e.to_string())?;
    promql::evaluate_single(&expr, view.store, now_ms).map_err(|e| e.to_string())
}

/// One query's value per `pod` label at `now_ms`.
fn per_pod_text(
    query: &str,
    view: &View<'_>,
    now_ms: i64,
) -> Result<BTreeMap<String, f64>, String> {
    let expr = promql::parse(query).map_err(|e| e.to_string())?;
    match promql::eval::eval(&expr, view.store, now_ms).map_err(|e| e.to_string())? {
        Value::Vector(v) => Ok(v
            .into_iter()
            .filter_map(|(labels, x)| labels.get("pod").map(|p| (p.clone(), x)))
            .collect()),
        _ => Err(format!(
            "{query}: a per-pod query must return an instant vector"
        )),
    }
}
