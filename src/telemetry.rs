//! The operator's own metrics (prometheus-client) and the `/metrics`, `/healthz`, `/readyz`
//! HTTP endpoints.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-scaler series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScalerLabels {
    /// The LLMScaler's namespace.
    pub namespace: String,
    /// The LLMScaler's name.
    pub name: String,
}

/// Labels of per-metric series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetricLabels {
    /// The LLMScaler's namespace.
    pub namespace: String,
    /// The LLMScaler's name.
    pub name: String,
    /// `spec.metrics[].name` (or `metric<i>`, or `decision`).
    pub metric: String,
}

/// Labels of metric errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The LLMScaler's namespace.
    pub namespace: String,
    /// The LLMScaler's name.
    pub name: String,
    /// The metric.
    pub metric: String,
    /// Short error kind (`no_data`, `multiple_series`, `not_measurable`, `timeout`, …).
    pub kind: String,
}

/// Labels of API writes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// The LLMScaler's namespace.
    pub namespace: String,
    /// The LLMScaler's name.
    pub name: String,
    /// `replicas`, `status`, `deletion_cost` or `rotation`.
    pub kind: String,
}

/// What kind of series a metric is (its exposition suffixes follow from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// One value per label set.
    Gauge,
    /// Exposed with the `_total` suffix.
    Counter,
    /// Exposed as `_bucket`, `_sum` and `_count`.
    Histogram,
}

impl MetricKind {
    /// The suffixes of the exposed series (`""` for the bare name).
    pub fn suffixes(self) -> &'static [&'static str] {
        match self {
            MetricKind::Gauge => &[""],
            MetricKind::Counter => &["_total"],
            MetricKind::Histogram => &["_bucket", "_sum", "_count"],
        }
    }
}

/// One series family the operator exports.
#[derive(Clone, Copy, Debug)]
pub struct Exported {
    /// The name without the `llmscaler_` prefix (and without a counter's `_total`).
    pub name: &'static str,
    /// The HELP text.
    pub help: &'static str,
    /// The labels, comma-separated.
    pub labels: &'static str,
    /// Gauge, counter or histogram.
    pub kind: MetricKind,
}

/// Every series the operator exports: the one list the registry, the README, `docs/metrics.md`
/// and the chart's dashboard follow (tests check the docs and the dashboard).
pub const EXPORTED: &[Exported] = &[
    Exported {
        name: "current_replicas",
        help: "Ready replicas of the target at the last sync",
        labels: "namespace, name",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "desired_replicas",
        help: "status.desiredReplicas: clamped and stabilized recommendation",
        labels: "namespace, name",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "recommended_replicas",
        help: "Largest per-metric recommendation before clamping",
        labels: "namespace, name",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "metric_value",
        help: "Last value read per metric",
        labels: "namespace, name, metric",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "metric_target",
        help: "Target value per replica of each metric (spec.metrics[].target)",
        labels: "namespace, name, metric",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "metric_errors",
        help: "Metric read failures by kind",
        labels: "namespace, name, metric, kind",
        kind: MetricKind::Counter,
    },
    Exported {
        name: "writes",
        help: "API writes by kind",
        labels: "namespace, name, kind",
        kind: MetricKind::Counter,
    },
    Exported {
        name: "reconcile_duration_seconds",
        help: "Duration of one reconcile, seconds",
        labels: "",
        kind: MetricKind::Histogram,
    },
    Exported {
        name: "evaluation_lag_seconds",
        help: "Delay from a scaler's due sync time to its evaluation, seconds",
        labels: "",
        kind: MetricKind::Histogram,
    },
];

/// Every series the operator exports ([`EXPORTED`]).
pub struct Metrics {
    registry: Registry,
    /// Ready replicas of the target at the last sync.
    pub current_replicas: Family<ScalerLabels, Gauge>,
    /// status.desiredReplicas.
    pub desired_replicas: Family<ScalerLabels, Gauge>,
    /// Largest recommendation before clamping.
    pub recommended_replicas: Family<ScalerLabels, Gauge>,
    /// Last value read per metric.
    pub metric_value: Family<MetricLabels, Gauge<f64, AtomicU64>>,
    /// Target per replica of each metric.
    pub metric_target: Family<MetricLabels, Gauge<f64, AtomicU64>>,
    /// Metric read failures by kind.
    pub metric_errors: Family<ErrorLabels, Counter>,
    /// API writes by kind.
    pub writes: Family<WriteLabels, Counter>,
    /// Reconcile duration, seconds.
    pub reconcile_duration: Histogram,
    /// Delay from a scaler's due sync time to its evaluation, seconds (one series for every
    /// scaler: bounded at any number of scalers; `docs/scaling.md#pacing`).
    pub evaluation_lag: Histogram,
    /// The label sets created per scaler, so [`Metrics::forget`] can remove them.
    created: Mutex<HashMap<(String, String), CreatedSeries>>,
    ready: AtomicBool,
    healthy: AtomicBool,
}

/// The per-metric label sets created for one scaler.
#[derive(Default)]
struct CreatedSeries {
    metrics: BTreeSet<String>,
    errors: BTreeSet<(String, String)>,
    writes: BTreeSet<String>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every series of [`EXPORTED`] registered under the `llmscaler_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("llmscaler");
        let current_replicas = Family::default();
        let desired_replicas = Family::default();
        let recommended_replicas = Family::default();
        let metric_value = Family::default();
        let metric_target = Family::default();
        let metric_errors = Family::default();
        let writes = Family::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.005, 2.0, 12));
        let evaluation_lag = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let help = |name: &str| {
            EXPORTED
                .iter()
                .find(|e| e.name == name)
                .map_or("", |e| e.help)
        };
        registry.register(
            "current_replicas",
            help("current_replicas"),
            current_replicas.clone(),
        );
        registry.register(
            "desired_replicas",
            help("desired_replicas"),
            desired_replicas.clone(),
        );
        registry.register(
            "recommended_replicas",
            help("recommended_replicas"),
            recommended_replicas.clone(),
        );
        registry.register("metric_value", help("metric_value"), metric_value.clone());
        registry.register(
            "metric_target",
            help("metric_target"),
            metric_target.clone(),
        );
        registry.register(
            "metric_errors",
            help("metric_errors"),
            metric_errors.clone(),
        );
        registry.register("writes", help("writes"), writes.clone());
        registry.register(
            "reconcile_duration_seconds",
            help("reconcile_duration_seconds"),
            reconcile_duration.clone(),
        );
        registry.register(
            "evaluation_lag_seconds",
            help("evaluation_lag_seconds"),
            evaluation_lag.clone(),
        );
        Self {
            registry,
            current_replicas,
            desired_replicas,
            recommended_replicas,
            metric_value,
            metric_target,
            metric_errors,
            writes,
            reconcile_duration,
            evaluation_lag,
            created: Mutex::new(HashMap::new()),
            ready: AtomicBool::new(false),
            healthy: AtomicBool::new(true),
        }
    }

    /// Marks the process ready (`/readyz` answers 200 from then on).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Marks the process unhealthy for good (`/healthz` answers 503): a task it needs has died.
    pub(crate) fn set_unhealthy(&self) {
        self.healthy.store(false, Ordering::Relaxed);
    }

    /// Whether `/healthz` answers 200.
    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    fn note(&self, namespace: &str, name: &str, f: impl FnOnce(&mut CreatedSeries)) {
        let mut created = self
            .created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(created
            .entry((namespace.to_owned(), name.to_owned()))
            .or_default());
    }

    /// Counts one write of `kind` (`replicas`, `status`, `deletion_cost`, `rotation`).
    pub(crate) fn count_write(&self, namespace: &str, name: &str, kind: &str) {
        self.note(namespace, name, |c| {
            c.writes.insert(kind.to_owned());
        });
        self.writes
            .get_or_create(&WriteLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Sets the last value read of `metric`.
    pub(crate) fn set_metric_value(&self, namespace: &str, name: &str, metric: &str, value: f64) {
        self.note(namespace, name, |c| {
            c.metrics.insert(metric.to_owned());
        });
        self.metric_value
            .get_or_create(&MetricLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                metric: metric.to_owned(),
            })
            .set(value);
    }

    /// Sets the target per replica of `metric`.
    pub(crate) fn set_metric_target(&self, namespace: &str, name: &str, metric: &str, target: f64) {
        self.note(namespace, name, |c| {
            c.metrics.insert(metric.to_owned());
        });
        self.metric_target
            .get_or_create(&MetricLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                metric: metric.to_owned(),
            })
            .set(target);
    }

    /// Counts one failed read of `metric`, by error `kind`.
    pub(crate) fn count_metric_error(&self, namespace: &str, name: &str, metric: &str, kind: &str) {
        self.note(namespace, name, |c| {
            c.errors.insert((metric.to_owned(), kind.to_owned()));
        });
        self.metric_errors
            .get_or_create(&ErrorLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                metric: metric.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Sets the replica gauges of a scaler: ready, desired and (unless holding) recommended.
    pub(crate) fn set_replicas(
        &self,
        namespace: &str,
        name: &str,
        current: i32,
        desired: i32,
        recommended: Option<i32>,
    ) {
        let labels = ScalerLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        self.note(namespace, name, |_| {});
        self.current_replicas
            .get_or_create(&labels)
            .set(i64::from(current));
        self.desired_replicas
            .get_or_create(&labels)
            .set(i64::from(desired));
        if let Some(r) = recommended {
            self.recommended_replicas
                .get_or_create(&labels)
                .set(i64::from(r));
        }
    }

    /// Removes every series of a deleted scaler. Returns how many were removed.
    pub fn forget(&self, namespace: &str, name: &str) -> usize {
        let Some(created) = self
            .created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&(namespace.to_owned(), name.to_owned()))
        else {
            return 0;
        };
        let scaler = ScalerLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let mut removed = usize::from(self.current_replicas.remove(&scaler))
            + usize::from(self.desired_replicas.remove(&scaler))
            + usize::from(self.recommended_replicas.remove(&scaler));
        for metric in created.metrics {
            let labels = MetricLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                metric,
            };
            removed += usize::from(self.metric_value.remove(&labels))
                + usize::from(self.metric_target.remove(&labels));
        }
        for (metric, kind) in created.errors {
            removed += usize::from(self.metric_errors.remove(&ErrorLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                metric,
                kind,
            }));
        }
        for kind in created.writes {
            removed += usize::from(self.writes.remove(&WriteLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                kind,
            }));
        }
        removed
    }

    /// The text exposition of every series.
    ///
    /// # Errors
    /// Only a formatting error of the encoder (not expected).
    pub(crate) fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// `/metrics`, `/healthz` and `/readyz`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(serve_health))
        .route("/readyz", get(serve_ready))
        .with_state(metrics)
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    match metrics.encode() {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn serve_health(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    if metrics.is_healthy() {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "a task of the operator died; see its log",
        )
    }
}

async fn serve_ready(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    if metrics.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_scaler_leaves_no_series() {
        let metrics = Metrics::new();
        metrics.set_replicas("ns", "a", 2, 3, Some(4));
        metrics.set_metric_value("ns", "a", "waiting", 1.5);
        metrics.count_metric_error("ns", "a", "kv", "no_data");
        metrics.count_write("ns", "a", "replicas");
        metrics.set_replicas("ns", "b", 1, 1, None);
        let text = metrics.encode().expect("encodes");
        assert!(text.contains("name=\"a\""));
        assert_eq!(metrics.forget("ns", "a"), 6);
        let text = metrics.encode().expect("encodes");
        assert!(!text.contains("name=\"a\""), "{text}");
        assert!(text.contains("name=\"b\""));
        assert_eq!(metrics.forget("ns", "a"), 0);
    }

    #[test]
    fn every_registered_series_is_in_the_exported_list() {
        let metrics = Metrics::new();
        metrics.set_replicas("ns", "a", 1, 1, Some(1));
        metrics.set_metric_value("ns", "a", "m", 1.0);
        metrics.set_metric_target("ns", "a", "m", 2.0);
        metrics.count_metric_error("ns", "a", "m", "no_data");
        metrics.count_write("ns", "a", "status");
        let text = metrics.encode().expect("encodes");
        for line in text.lines().filter(|l| l.starts_with("# HELP ")) {
            let name = line["# HELP llmscaler_".len()..]
                .split(' ')
                .next()
                .unwrap_or_default();
            assert!(
                EXPORTED.iter().any(|e| e.name == name),
                "{name} is not in EXPORTED"
            );
        }
        assert_eq!(text.matches("# HELP ").count(), EXPORTED.len());
    }
}
