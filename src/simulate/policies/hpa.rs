//! `hpa` and `keda`: the HorizontalPodAutoscaler v2 algorithm ([`crate::simulate::hpa`]) on the
//! scaler's own metrics, as a user would configure it through a Prometheus adapter or KEDA's
//! Prometheus scaler.
//!
//! Each `spec.metrics[]` entry becomes one HPA metric ([`MetricShape`]): a query `avg(X)` (or
//! `avg(X) or vector(..)`) is the per-pod series `X` with an `AverageValue` target (HPA: a
//! `Pods` metric; KEDA: an `External` metric whose total is `sum(X)`); any other query is an
//! `External` metric with a `Value` target.

use std::collections::BTreeMap;

use llmscaler_api::{LLMScalerSpec, parse_target};
use promql_parser::parser::token;
use promql_parser::parser::{Expr, LabelModifier};

use crate::promql::{self, PromqlError, Value};
use crate::simulate::hpa::{
    Behavior, DEFAULT_SYNC_MS, DEFAULT_TOLERANCE, Hpa, external_average_replicas,
    external_value_replicas, pods_metric_replicas,
};
use crate::simulate::replay::{Autoscaler, View};

/// How one scaler metric is offered to the HPA.
#[derive(Clone, Debug)]
pub enum MetricShape {
    /// Per-pod series (`X` of `avg(X)`), `AverageValue` target.
    PerPod {
        /// The per-pod expression.
        expr: Expr,
        /// Target per pod.
        target: f64,
    },
    /// The whole query, `Value` target.
    Whole {
        /// The query.
        expr: Expr,
        /// Target value.
        target: f64,
    },
}

fn strip(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(p) => strip(&p.expr),
        Expr::Binary(b)
            if b.op.id() == token::T_LOR
                && matches!(strip(&b.rhs), Expr::Call(c) if c.func.name == "vector") =>
        {
            strip(&b.lhs)
        }
        other => other,
    }
}

/// The HPA shape of every metric of a spec.
///
/// # Errors
/// [`PromqlError`] for a query that does not parse; a target that does not parse is
/// [`PromqlError::Eval`] (admission refuses it).
pub fn shapes(spec: &LLMScalerSpec) -> Result<Vec<MetricShape>, PromqlError> {
    let exprs = super::llmscaler::parse_all(spec)?;
    spec.metrics()
        .iter()
        .zip(exprs)
        .map(|(m, expr)| {
            let target = parse_target(&m.target).map_err(PromqlError::Eval)?;
            Ok(match strip(&expr) {
                Expr::Aggregate(a)
                    if a.op.id() == token::T_AVG
                        && a.modifier.as_ref().is_none_or(
                            |m| matches!(m, LabelModifier::Include(l) if l.labels.is_empty()),
                        ) =>
                {
                    MetricShape::PerPod {
                        expr: (*a.expr).clone(),
                        target,
                    }
                }
                _ => MetricShape::Whole { expr, target },
            })
        })
        .collect()
}

/// Per-pod values of a per-pod expression (summed by the `pod` label, as an adapter's
/// `sum by (pod)` would).
fn per_pod(expr: &Expr, view: &View<'_>, now_ms: i64) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if let Ok(Value::Vector(v)) = promql::eval::eval(expr, view.store, now_ms) {
        for (labels, x) in v {
            if let Some(pod) = labels.get("pod")
                && x.is_finite()
            {
                *out.entry(pod.clone()).or_insert(0.0) += x;
            }
        }
    }
    out
}

fn whole(expr: &Expr, view: &View<'_>, now_ms: i64) -> Option<f64> {
    promql::evaluate_single(expr, view.store, now_ms)
        .ok()
        .filter(|v| v.is_finite())
}

/// HPA's combination: the largest recommendation; `None` (no change) when every metric is
/// invalid, or some are and the rest would scale down.
fn combine(results: &[Option<i32>], current: i32) -> Option<i32> {
    let invalid = results.iter().filter(|r| r.is_none()).count();
    let best = results.iter().flatten().copied().max()?;
    if invalid > 0 && best < current {
        return None;
    }
    Some(best)
}

/// The HorizontalPodAutoscaler.
#[derive(Debug)]
pub struct HpaPolicy {
    metrics: Vec<MetricShape>,
    hpa: Hpa,
}

impl HpaPolicy {
    /// An HPA with the documented defaults on `metrics`, `minReplicas` at least 1.
    pub fn new(spec: &LLMScalerSpec, metrics: Vec<MetricShape>) -> Self {
        Self {
            metrics,
            hpa: Hpa::new(
                spec.min_replicas.max(1),
                spec.max_replicas,
                Behavior::default(),
            ),
        }
    }
}

impl Autoscaler for HpaPolicy {
    fn period_ms(&self) -> i64 {
        DEFAULT_SYNC_MS
    }

    fn warm_start(&mut self, replicas: i32) {
        self.hpa.remember(0, replicas);
    }

    fn decide(&mut self, now_ms: i64, view: &View<'_>) -> i32 {
        let current = view.spec_replicas;
        let results: Vec<Option<i32>> = self
            .metrics
            .iter()
            .map(|m| match m {
                MetricShape::PerPod { expr, target } => pods_metric_replicas(
                    current,
                    &view.pods,
                    &per_pod(expr, view, now_ms),
                    *target,
                    DEFAULT_TOLERANCE,
                ),
                MetricShape::Whole { expr, target } => whole(expr, view, now_ms).map(|v| {
                    external_value_replicas(
                        current,
                        view.ready_replicas,
                        v,
                        *target,
                        DEFAULT_TOLERANCE,
                    )
                }),
            })
            .collect();
        let desired = combine(&results, current);
        self.hpa.reconcile(now_ms, current, desired)
    }
}

/// KEDA's polling interval default, milliseconds.
pub const KEDA_POLLING_MS: i64 = 30_000;
/// KEDA's `cooldownPeriod` default (seconds before 1 → 0), milliseconds.
pub const KEDA_COOLDOWN_MS: i64 = 300_000;

/// KEDA: a ScaledObject with one Prometheus trigger per metric; the HPA it creates reads the
/// values KEDA polled (every 30 s), and KEDA itself scales 0 → 1 on activity and 1 → 0 after
/// the cooldown when `minReplicas` is 0.
#[derive(Debug)]
pub struct KedaPolicy {
    metrics: Vec<MetricShape>,
    hpa: Hpa,
    min_replicas: i32,
    /// Polled values: `(total or value, target, per-pod)` per metric.
    polled: Vec<Option<f64>>,
    next_poll_ms: i64,
    last_active_ms: i64,
}

impl KedaPolicy {
    /// KEDA with its defaults on `metrics`.
    pub fn new(spec: &LLMScalerSpec, metrics: Vec<MetricShape>) -> Self {
        let n = metrics.len();
        Self {
            metrics,
            hpa: Hpa::new(
                spec.min_replicas.max(1),
                spec.max_replicas,
                Behavior::default(),
            ),
            min_replicas: spec.min_replicas,
            polled: vec![None; n],
            next_poll_ms: 0,
            last_active_ms: 0,
        }
    }

    fn poll(&mut self, now_ms: i64, view: &View<'_>) {
        self.polled = self
            .metrics
            .iter()
            .map(|m| match m {
                MetricShape::PerPod { expr, .. } => {
                    let values = per_pod(expr, view, now_ms);
                    if values.is_empty() {
                        None
                    } else {
                        Some(values.values().sum())
                    }
                }
                MetricShape::Whole { expr, .. } => whole(expr, view, now_ms),
            })
            .collect();
        if self.polled.iter().flatten().any(|v| *v > 0.0) {
            self.last_active_ms = now_ms;
        }
    }
}

impl Autoscaler for KedaPolicy {
    fn period_ms(&self) -> i64 {
        DEFAULT_SYNC_MS
    }

    fn warm_start(&mut self, replicas: i32) {
        self.hpa.remember(0, replicas);
    }

    fn decide(&mut self, now_ms: i64, view: &View<'_>) -> i32 {
        let current = view.spec_replicas;
        if now_ms >= self.next_poll_ms {
            self.poll(now_ms, view);
            self.next_poll_ms = now_ms + KEDA_POLLING_MS;
            let active = self.last_active_ms == now_ms;
            if current == 0 {
                // Activation: KEDA scales 0 → 1 itself; the HPA takes over from there.
                return if active { 1 } else { 0 };
            }
            if self.min_replicas == 0 && now_ms - self.last_active_ms >= KEDA_COOLDOWN_MS {
                return 0;
            }
        }
        if current == 0 {
            return 0;
        }
        let results: Vec<Option<i32>> = self
            .metrics
            .iter()
            .zip(&self.polled)
            .map(|(m, polled)| {
                let v = (*polled)?;
                Some(match m {
                    MetricShape::PerPod { target, .. } => {
                        external_average_replicas(current, v, *target, DEFAULT_TOLERANCE)
                    }
                    MetricShape::Whole { target, .. } => external_value_replicas(
                        current,
                        view.ready_replicas,
                        v,
                        *target,
                        DEFAULT_TOLERANCE,
                    ),
                })
            })
            .collect();
        let desired = combine(&results, current);
        self.hpa.reconcile(now_ms, current, desired)
    }
}
