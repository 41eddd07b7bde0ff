//! The operator's own metrics (prometheus-client) and the `/metrics`, `/healthz`, `/readyz`
//! HTTP endpoints.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    /// `replicas`, `status` or `deletion_cost`.
    pub kind: String,
}

/// Every series the operator exports.
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
    /// Metric read failures by kind.
    pub metric_errors: Family<ErrorLabels, Counter>,
    /// API writes by kind.
    pub writes: Family<WriteLabels, Counter>,
    /// Reconcile duration, seconds.
    pub reconcile_duration: Histogram,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every series registered under the `llmscaler_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("llmscaler");
        let current_replicas = Family::default();
        let desired_replicas = Family::default();
        let recommended_replicas = Family::default();
        let metric_value = Family::default();
        let metric_errors = Family::default();
        let writes = Family::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.005, 2.0, 12));
        registry.register(
            "current_replicas",
            "Ready replicas of the target at the last sync",
            current_replicas.clone(),
        );
        registry.register(
            "desired_replicas",
            "status.desiredReplicas: clamped and stabilized recommendation",
            desired_replicas.clone(),
        );
        registry.register(
            "recommended_replicas",
            "Largest per-metric recommendation before clamping",
            recommended_replicas.clone(),
        );
        registry.register(
            "metric_value",
            "Last value read per metric",
            metric_value.clone(),
        );
        registry.register(
            "metric_errors",
            "Metric read failures by kind",
            metric_errors.clone(),
        );
        registry.register("writes", "API writes by kind", writes.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile, seconds",
            reconcile_duration.clone(),
        );
        Self {
            registry,
            current_replicas,
            desired_replicas,
            recommended_replicas,
            metric_value,
            metric_errors,
            writes,
            reconcile_duration,
            ready: AtomicBool::new(false),
        }
    }

    /// Marks the process ready (`/readyz` answers 200 from then on).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Counts one write.
    pub fn count_write(&self, namespace: &str, name: &str, kind: &str) {
        self.writes
            .get_or_create(&WriteLabels {
                namespace: namespace.to_string(),
                name: name.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// The text exposition of every series.
    ///
    /// # Errors
    /// Only a formatting error of the encoder (not expected).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// `/metrics`, `/healthz` and `/readyz`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(|| async { "ok" }))
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

async fn serve_ready(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    if metrics.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}
