//! [`MetricSource`]: the source of one scaler, chosen by its `metricProvider` (spec §1), and its
//! [`Readings`] as the engine's [`Signal`].

use std::collections::BTreeMap;

use llmscaler_api::{LLMScalerSpec, MetricProvider};
use tokio::task::JoinSet;

use super::{DecisionSource, Endpoint, MetricError, MetricsClient, PrometheusSource};
use crate::engine::{Signal, signal_for};

/// The metric source of one scaler: Prometheus queries (spec §3) or a decision server (spec §4),
/// never both (no fallback from one to the other).
#[derive(Clone, Debug)]
pub enum MetricSource {
    /// `metricProvider: Prometheus`: one instant query per `spec.metrics[]` entry.
    Prometheus(PrometheusSource),
    /// `metricProvider: Custom`: one request to the decision server.
    Decision(DecisionSource),
}

/// What one evaluation read, before the engine turns it into replicas.
#[derive(Debug)]
pub enum Readings {
    /// Prometheus: one result per `spec.metrics[]` entry, in spec order.
    Metrics(Vec<Result<f64, MetricError>>),
    /// Custom: `replicas.active` of the matching decision.
    Decision(Result<i32, MetricError>),
}

impl MetricSource {
    /// Builds the source a (defaulted, validated) spec asks for, on the shared `client`, with the
    /// default per-request timeout of 5 seconds.
    ///
    /// # Errors
    /// [`MetricError::InvalidAddress`] for an unusable `serverAddress`,
    /// [`MetricError::InvalidHeader`] for an unusable `serverHeaders` entry (named, value never
    /// shown).
    pub fn from_spec(client: &MetricsClient, spec: &LLMScalerSpec) -> Result<Self, MetricError> {
        let empty = BTreeMap::new();
        let endpoint = Endpoint::new(
            &spec.server_address,
            spec.server_headers.as_ref().unwrap_or(&empty),
        )?;
        Ok(match spec.effective_provider() {
            MetricProvider::Prometheus => {
                MetricSource::Prometheus(PrometheusSource::new(client.clone(), endpoint))
            }
            MetricProvider::Custom => {
                let custom = spec.custom_provider.clone().unwrap_or_default();
                MetricSource::Decision(DecisionSource::new(
                    client.clone(),
                    endpoint,
                    custom.service_id,
                    custom.namespace,
                    custom.path.as_deref(),
                ))
            }
        })
    }

    /// Reads everything `spec` needs once: every `spec.metrics[]` query concurrently under
    /// Prometheus, or the decision under Custom. Each request is bounded by the source's timeout
    /// (seconds), so this returns within about one timeout. Failures are per reading, never
    /// read as zero.
    pub async fn read(&self, spec: &LLMScalerSpec) -> Readings {
        match self {
            MetricSource::Prometheus(source) => {
                let mut tasks = JoinSet::new();
                for (i, metric) in spec.metrics().iter().enumerate() {
                    let source = source.clone();
                    let query = metric.query.clone();
                    tasks.spawn(async move { (i, source.query(&query).await) });
                }
                let mut values: Vec<Option<Result<f64, MetricError>>> =
                    (0..spec.metrics().len()).map(|_| None).collect();
                while let Some(joined) = tasks.join_next().await {
                    match joined {
                        Ok((i, result)) => values[i] = Some(result),
                        // A panicking or cancelled task leaves its slot empty: reported below.
                        Err(e) => tracing::warn!(error = %e, "metric query task failed"),
                    }
                }
                Readings::Metrics(
                    values
                        .into_iter()
                        .zip(spec.metrics())
                        .map(|(value, metric)| {
                            value.unwrap_or_else(|| {
                                Err(MetricError::BadReply {
                                    subject: super::Subject::Query(metric.query.clone()),
                                    reason: "the query task did not complete".to_owned(),
                                })
                            })
                        })
                        .collect(),
                )
            }
            MetricSource::Decision(source) => Readings::Decision(source.decide().await),
        }
    }
}

impl Readings {
    /// The engine's input for `spec` (spec §2 step 3): error texts become skip reasons.
    pub fn signal(&self, spec: &LLMScalerSpec) -> Signal {
        match self {
            Readings::Metrics(values) => signal_for(
                spec,
                values
                    .iter()
                    .map(|v| v.as_ref().copied().map_err(ToString::to_string))
                    .collect(),
                Err("unused under Prometheus".to_owned()),
            ),
            Readings::Decision(decision) => signal_for(
                spec,
                Vec::new(),
                decision
                    .as_ref()
                    .map(|&n| i64::from(n))
                    .map_err(ToString::to_string),
            ),
        }
    }

    /// The failed readings with the metric's display name (`decision` under Custom), for
    /// conditions, Events and the operator's error counter (by [`MetricError::kind`]).
    pub fn errors<'a>(&'a self, spec: &'a LLMScalerSpec) -> Vec<(String, &'a MetricError)> {
        match self {
            Readings::Metrics(values) => values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    let name = spec
                        .metrics()
                        .get(i)
                        .map(|m| m.display_name(i))
                        .unwrap_or_else(|| format!("metric{i}"));
                    v.as_ref().err().map(|e| (name, e))
                })
                .collect(),
            Readings::Decision(Err(e)) => vec![("decision".to_owned(), e)],
            Readings::Decision(Ok(_)) => Vec::new(),
        }
    }
}
