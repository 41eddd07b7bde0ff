//! The operator's own metrics (prometheus-client) and the `/metrics`, `/healthz`, `/readyz`
//! HTTP endpoints.

use std::collections::HashMap;
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

/// Labels of per-scaler series. Label values are interned ([`Metrics`] keeps one copy of each
/// string, shared by every series that carries it: issue 26, memory per scaler).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScalerLabels {
    /// The LLMScaler's namespace.
    pub namespace: Arc<str>,
    /// The LLMScaler's name.
    pub name: Arc<str>,
}

/// Labels of per-metric series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MetricLabels {
    /// The LLMScaler's namespace.
    pub namespace: Arc<str>,
    /// The LLMScaler's name.
    pub name: Arc<str>,
    /// `spec.metrics[].name` (or `metric<i>`, or `decision`).
    pub metric: Arc<str>,
}

/// Labels of metric errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The LLMScaler's namespace.
    pub namespace: Arc<str>,
    /// The LLMScaler's name.
    pub name: Arc<str>,
    /// The metric.
    pub metric: Arc<str>,
    /// Short error kind (`no_data`, `multiple_series`, `not_measurable`, `timeout`, …).
    pub kind: Arc<str>,
}

/// Labels of the per-condition series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    /// The LLMScaler's namespace.
    pub namespace: Arc<str>,
    /// The LLMScaler's name.
    pub name: Arc<str>,
    /// The condition type (`Ready`, `ScalingActive`, `AbleToScale`, `ScalingLimited`,
    /// `ReplicasContested`).
    pub r#type: Arc<str>,
    /// The condition's reason (docs/conditions.md).
    pub reason: Arc<str>,
}

/// Labels of the build information.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The operator's version (`Cargo.toml`, the chart's `appVersion`).
    pub version: String,
}

/// Labels of API writes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// The LLMScaler's namespace.
    pub namespace: Arc<str>,
    /// The LLMScaler's name.
    pub name: Arc<str>,
    /// `replicas`, `status`, `deletion_cost` or `rotation`.
    pub kind: Arc<str>,
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
        name: "condition",
        help: "Each condition of a scaler: 1 when True, 0 when False, labelled with its reason",
        labels: "namespace, name, type, reason",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "held_syncs",
        help: "Consecutive syncs that held the fleet (nothing measurable), 0 once one measures",
        labels: "namespace, name",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "leader",
        help: "1 while this process holds the leader Lease (it alone syncs and writes), else 0",
        labels: "",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "build_info",
        help: "Always 1, labelled with the operator's version",
        labels: "version",
        kind: MetricKind::Gauge,
    },
    Exported {
        name: "webhook_certificate_expiry_timestamp_seconds",
        help: "Expiry of the webhook serving certificate this process serves, Unix seconds",
        labels: "",
        kind: MetricKind::Gauge,
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
    /// Each condition: 1 True, 0 False, labelled with its reason.
    pub condition: Family<ConditionLabels, Gauge>,
    /// Consecutive held syncs per scaler.
    pub held_syncs: Family<ScalerLabels, Gauge>,
    /// 1 while leader.
    pub leader: Gauge,
    /// 1, labelled with the version.
    pub build_info: Family<BuildLabels, Gauge>,
    /// Expiry of the served webhook certificate, Unix seconds (absent until one is served).
    pub webhook_certificate_expiry: Gauge,
    /// Reconcile duration, seconds.
    pub reconcile_duration: Histogram,
    /// Delay from a scaler's due sync time to its evaluation, seconds (one series for every
    /// scaler: bounded at any number of scalers; `docs/scaling.md#pacing`).
    pub evaluation_lag: Histogram,
    /// The label sets created per scaler, so [`Metrics::forget`] can remove them, and the one
    /// copy of every label value.
    created: Mutex<Created>,
    ready: AtomicBool,
    healthy: AtomicBool,
}

/// One copy of each label value (namespace, name, metric, condition type and reason, kind),
/// shared by every series that carries it.
#[derive(Default)]
struct Interner(std::collections::HashSet<Arc<str>>);

impl Interner {
    /// The shared copy of `value`.
    fn intern(&mut self, value: &str) -> Arc<str> {
        if let Some(shared) = self.0.get(value) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(value);
        self.0.insert(shared.clone());
        shared
    }

    /// Drops the values no series carries any more.
    fn sweep(&mut self) {
        self.0.retain(|s| Arc::strong_count(s) > 1);
    }
}

/// Every scaler's created series, and the label values they share.
#[derive(Default)]
struct Created {
    strings: Interner,
    /// Namespace → name → the scaler's series.
    scalers: HashMap<Arc<str>, HashMap<Arc<str>, CreatedSeries>>,
}

/// The label sets created for one scaler (few per scaler: small vectors, not trees).
struct CreatedSeries {
    namespace: Arc<str>,
    name: Arc<str>,
    metrics: Vec<Arc<str>>,
    errors: Vec<(Arc<str>, Arc<str>)>,
    writes: Vec<Arc<str>>,
    /// Condition type → the reason its series carries now.
    conditions: Vec<(Arc<str>, Arc<str>)>,
}

impl CreatedSeries {
    fn new(namespace: Arc<str>, name: Arc<str>) -> Self {
        Self {
            namespace,
            name,
            metrics: Vec::new(),
            errors: Vec::new(),
            writes: Vec::new(),
            conditions: Vec::new(),
        }
    }

    fn scaler_labels(&self) -> ScalerLabels {
        ScalerLabels {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// The entry of `value` in `list`, added (interned) when absent.
fn listed(list: &mut Vec<Arc<str>>, strings: &mut Interner, value: &str) -> Arc<str> {
    if let Some(found) = list.iter().find(|v| &***v == value) {
        return found.clone();
    }
    let shared = strings.intern(value);
    list.push(shared.clone());
    shared
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
        let condition = Family::default();
        let held_syncs = Family::default();
        let leader = Gauge::default();
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        let webhook_certificate_expiry = Gauge::default();
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
        registry.register("condition", help("condition"), condition.clone());
        registry.register("held_syncs", help("held_syncs"), held_syncs.clone());
        registry.register("leader", help("leader"), leader.clone());
        registry.register("build_info", help("build_info"), build_info.clone());
        registry.register(
            "webhook_certificate_expiry_timestamp_seconds",
            help("webhook_certificate_expiry_timestamp_seconds"),
            webhook_certificate_expiry.clone(),
        );
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
            condition,
            held_syncs,
            leader,
            build_info,
            webhook_certificate_expiry,
            reconcile_duration,
            evaluation_lag,
            created: Mutex::new(Created::default()),
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

    /// Runs `f` on the created series of `namespace/name` (made empty first if new) with the
    /// interner, under the lock.
    fn note<R>(
        &self,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&mut CreatedSeries, &mut Interner) -> R,
    ) -> R {
        let mut created = self
            .created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Created { strings, scalers } = &mut *created;
        let (ns, nm) = (strings.intern(namespace), strings.intern(name));
        let series = scalers
            .entry(ns.clone())
            .or_default()
            .entry(nm.clone())
            .or_insert_with(|| CreatedSeries::new(ns, nm));
        f(series, strings)
    }

    /// Counts one write of `kind` (`replicas`, `status`, `deletion_cost`, `rotation`).
    pub(crate) fn count_write(&self, namespace: &str, name: &str, kind: &str) {
        self.note(namespace, name, |c, strings| {
            let kind = listed(&mut c.writes, strings, kind);
            self.writes
                .get_or_create(&WriteLabels {
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    kind,
                })
                .inc();
        });
    }

    /// The labels of `metric` of a scaler, noted for [`Metrics::forget`].
    fn metric_labels(&self, namespace: &str, name: &str, metric: &str) -> MetricLabels {
        self.note(namespace, name, |c, strings| MetricLabels {
            metric: listed(&mut c.metrics, strings, metric),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
        })
    }

    /// Sets the last value read of `metric`.
    pub(crate) fn set_metric_value(&self, namespace: &str, name: &str, metric: &str, value: f64) {
        self.metric_value
            .get_or_create(&self.metric_labels(namespace, name, metric))
            .set(value);
    }

    /// Sets the target per replica of `metric`.
    pub(crate) fn set_metric_target(&self, namespace: &str, name: &str, metric: &str, target: f64) {
        self.metric_target
            .get_or_create(&self.metric_labels(namespace, name, metric))
            .set(target);
    }

    /// Counts one failed read of `metric`, by error `kind`.
    pub(crate) fn count_metric_error(&self, namespace: &str, name: &str, metric: &str, kind: &str) {
        let labels = self.note(namespace, name, |c, strings| {
            let found = c
                .errors
                .iter()
                .find(|(m, k)| &**m == metric && &**k == kind)
                .cloned();
            let (metric, kind) = found.unwrap_or_else(|| {
                let pair = (strings.intern(metric), strings.intern(kind));
                c.errors.push(pair.clone());
                pair
            });
            ErrorLabels {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                metric,
                kind,
            }
        });
        self.metric_errors.get_or_create(&labels).inc();
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
        let labels = self.note(namespace, name, |c, _| c.scaler_labels());
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

    /// Sets the condition series of a scaler from its status conditions (`(type, status,
    /// reason)` each), replacing a type's series when its reason changed, and counts a held sync
    /// (`ScalingActive` `False` with `MetricsUnavailable`) in `held_syncs` (reset by any other).
    pub fn set_conditions<'a>(
        &self,
        namespace: &str,
        name: &str,
        conditions: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) {
        let mut held = false;
        let scaler = self.note(namespace, name, |c, strings| {
            for (type_, status, reason) in conditions {
                held |=
                    type_ == "ScalingActive" && status == "False" && reason == "MetricsUnavailable";
                let labels = |type_: &Arc<str>, reason: &Arc<str>| ConditionLabels {
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    r#type: type_.clone(),
                    reason: reason.clone(),
                };
                let current = match c.conditions.iter().position(|(t, _)| &**t == type_) {
                    Some(at) => {
                        let (known, old) = &c.conditions[at];
                        if &**old == reason {
                            labels(known, old)
                        } else {
                            self.condition.remove(&labels(known, old));
                            let now = (known.clone(), strings.intern(reason));
                            let current = labels(&now.0, &now.1);
                            c.conditions[at] = now;
                            current
                        }
                    }
                    None => {
                        let now = (strings.intern(type_), strings.intern(reason));
                        let current = labels(&now.0, &now.1);
                        c.conditions.push(now);
                        current
                    }
                };
                self.condition
                    .get_or_create(&current)
                    .set(i64::from(status == "True"));
            }
            c.scaler_labels()
        });
        let gauge = self.held_syncs.get_or_create(&scaler);
        if held {
            gauge.inc();
        } else {
            gauge.set(0);
        }
    }

    /// Marks this process leader (1) or not (0).
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Sets the expiry of the webhook certificate this process serves, Unix seconds.
    pub fn set_webhook_certificate_expiry(&self, unix_seconds: i64) {
        self.webhook_certificate_expiry.set(unix_seconds);
    }

    /// Removes the series of every scaler (leadership lost: another process syncs them now, and
    /// stale values from here would double or contradict its). Returns how many were removed.
    pub fn forget_all(&self) -> usize {
        let mut created = self
            .created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let removed = std::mem::take(&mut created.scalers)
            .into_values()
            .flat_map(HashMap::into_values)
            .map(|series| self.remove_series(series))
            .sum();
        created.strings.sweep();
        removed
    }

    /// Removes every series of a deleted scaler. Returns how many were removed.
    pub fn forget(&self, namespace: &str, name: &str) -> usize {
        let mut created = self
            .created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(names) = created.scalers.get_mut(namespace) else {
            return 0;
        };
        let Some(series) = names.remove(name) else {
            return 0;
        };
        if names.is_empty() {
            created.scalers.remove(namespace);
        }
        let removed = self.remove_series(series);
        created.strings.sweep();
        removed
    }

    /// Removes the series `created` lists.
    fn remove_series(&self, created: CreatedSeries) -> usize {
        let scaler = created.scaler_labels();
        let mut removed = usize::from(self.current_replicas.remove(&scaler))
            + usize::from(self.desired_replicas.remove(&scaler))
            + usize::from(self.recommended_replicas.remove(&scaler))
            + usize::from(self.held_syncs.remove(&scaler));
        let CreatedSeries {
            namespace,
            name,
            metrics,
            errors,
            writes,
            conditions,
        } = created;
        for (type_, reason) in conditions {
            removed += usize::from(self.condition.remove(&ConditionLabels {
                namespace: namespace.clone(),
                name: name.clone(),
                r#type: type_,
                reason,
            }));
        }
        for metric in metrics {
            let labels = MetricLabels {
                namespace: namespace.clone(),
                name: name.clone(),
                metric,
            };
            removed += usize::from(self.metric_value.remove(&labels))
                + usize::from(self.metric_target.remove(&labels));
        }
        for (metric, kind) in errors {
            removed += usize::from(self.metric_errors.remove(&ErrorLabels {
                namespace: namespace.clone(),
                name: name.clone(),
                metric,
                kind,
            }));
        }
        for kind in writes {
            removed += usize::from(self.writes.remove(&WriteLabels {
                namespace: namespace.clone(),
                name: name.clone(),
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
    fn label_values_are_shared_and_dropped_with_their_series() {
        let metrics = Metrics::new();
        for name in ["a", "b"] {
            metrics.set_replicas("ns", name, 1, 1, Some(1));
            metrics.set_metric_value("ns", name, "queue", 0.5);
            metrics.set_conditions("ns", name, [("Ready", "True", "AsExpected")]);
        }
        let interned = |m: &Metrics| {
            m.created
                .lock()
                .map(|c| {
                    let mut v: Vec<String> = c.strings.0.iter().map(|s| s.to_string()).collect();
                    v.sort();
                    v
                })
                .unwrap_or_default()
        };
        // One copy each of ns, a, b, queue, Ready, AsExpected.
        assert_eq!(
            interned(&metrics),
            ["AsExpected", "Ready", "a", "b", "ns", "queue"]
        );
        let text = metrics.encode().expect("encodes");
        assert!(
            text.contains(
                "llmscaler_metric_value{namespace=\"ns\",name=\"b\",metric=\"queue\"} 0.5"
            ),
            "{text}"
        );
        assert_eq!(metrics.forget("ns", "a"), 6);
        assert_eq!(
            interned(&metrics),
            ["AsExpected", "Ready", "b", "ns", "queue"]
        );
        metrics.forget_all();
        assert!(interned(&metrics).is_empty());
    }

    #[test]
    fn a_demoted_leader_exports_no_scaler_series() {
        let metrics = Metrics::new();
        metrics.set_leader(true);
        metrics.set_replicas("ns", "a", 2, 3, Some(4));
        metrics.set_conditions("ns", "a", [("Ready", "True", "AsExpected")]);
        metrics.set_replicas("ns2", "b", 1, 1, None);
        metrics.count_write("ns2", "b", "replicas");
        assert!(metrics.forget_all() >= 6);
        metrics.set_leader(false);
        let text = metrics.encode().expect("encodes");
        assert!(!text.contains("name=\"a\""), "{text}");
        assert!(!text.contains("name=\"b\""), "{text}");
        assert!(text.contains("llmscaler_leader 0"), "{text}");
        assert!(
            text.contains(&format!(
                "llmscaler_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
    }

    #[test]
    fn conditions_carry_their_reason_and_held_syncs_count_in_a_row() {
        let metrics = Metrics::new();
        let held = [
            ("Ready", "False", "MetricsUnavailable"),
            ("ScalingActive", "False", "MetricsUnavailable"),
        ];
        metrics.set_conditions("ns", "a", held);
        metrics.set_conditions("ns", "a", held);
        let text = metrics.encode().expect("encodes");
        assert!(
            text.contains("llmscaler_condition{namespace=\"ns\",name=\"a\",type=\"Ready\",reason=\"MetricsUnavailable\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("llmscaler_held_syncs{namespace=\"ns\",name=\"a\"} 2"),
            "{text}"
        );
        metrics.set_conditions(
            "ns",
            "a",
            [
                ("Ready", "True", "AsExpected"),
                ("ScalingActive", "True", "ValidMetrics"),
            ],
        );
        let text = metrics.encode().expect("encodes");
        assert!(
            !text.contains("MetricsUnavailable"),
            "the old reason's series left: {text}"
        );
        assert!(
            text.contains("llmscaler_condition{namespace=\"ns\",name=\"a\",type=\"Ready\",reason=\"AsExpected\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("llmscaler_held_syncs{namespace=\"ns\",name=\"a\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn every_registered_series_is_in_the_exported_list() {
        let metrics = Metrics::new();
        metrics.set_replicas("ns", "a", 1, 1, Some(1));
        metrics.set_metric_value("ns", "a", "m", 1.0);
        metrics.set_metric_target("ns", "a", "m", 2.0);
        metrics.count_metric_error("ns", "a", "m", "no_data");
        metrics.count_write("ns", "a", "status");
        metrics.set_conditions("ns", "a", [("Ready", "True", "AsExpected")]);
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
