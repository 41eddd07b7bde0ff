//! [`MetricSource`]: the source of one scaler, chosen by its `metricProvider` (docs/resource.md),
//! and its
//! [`Readings`] as the engine's [`Signal`].

use std::collections::BTreeMap;

use llmscaler_api::{LLMScalerSpec, MetricProvider};
use tokio::task::JoinSet;

use super::per_pod::PodSet;
use super::{DecisionSource, Endpoint, MetricError, MetricsClient, PrometheusSource};
use crate::engine::Signal;

/// The metric source of one scaler: Prometheus queries (docs/providers.md#prometheus-provider) or a
/// decision server (docs/providers.md#custom-provider-decision-server),
/// never both (no fallback from one to the other).
#[derive(Clone, Debug)]
pub enum MetricSource {
    /// `metricProvider: Prometheus`: one instant query per `spec.metrics[]` entry.
    Prometheus(PrometheusSource),
    /// `metricProvider: Custom`: one request to the decision server.
    Decision(DecisionSource),
}

/// `spec.serverHeaders` plus the values of `spec.serverHeadersFrom`, each read now from its
/// Secret in `namespace` (`docs/security.md#credentials`): a rotated Secret is used at the next
/// sync. Values are never logged; errors name the header, Secret and key only.
///
/// # Errors
/// [`MetricError::SecretHeader`] when a Secret or key cannot be read or is not valid UTF-8.
pub async fn secret_headers(
    client: &kube::Client,
    namespace: &str,
    spec: &LLMScalerSpec,
) -> Result<BTreeMap<String, String>, MetricError> {
    let mut headers = spec.server_headers.clone().unwrap_or_default();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), namespace);
    for entry in spec.server_headers_from.iter().flatten() {
        let reference = &entry.secret_key_ref;
        let failed = |reason: String| MetricError::SecretHeader {
            header: entry.name.clone(),
            secret: reference.name.clone(),
            key: reference.key.clone(),
            reason,
        };
        let secret = match secrets.get_opt(&reference.name).await {
            Ok(Some(secret)) => secret,
            Ok(None) => return Err(failed("no such Secret".to_owned())),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                return Err(failed(
                    "the operator may not read it (grant it `get` on this Secret, \
                     docs/security.md#credentials)"
                        .to_owned(),
                ));
            }
            Err(err) => return Err(failed(format!("API error ({})", error_class(&err)))),
        };
        let value = secret
            .data
            .as_ref()
            .and_then(|data| data.get(&reference.key))
            .ok_or_else(|| failed("no such key".to_owned()))?;
        let text = String::from_utf8(value.0.clone())
            .map_err(|_| failed("the value is not UTF-8".to_owned()))?;
        headers.insert(
            entry.name.clone(),
            text.trim_end_matches(['\r', '\n']).to_owned(),
        );
    }
    Ok(headers)
}

fn error_class(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("HTTP {}", status.code),
        _ => "unreachable".to_owned(),
    }
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
    pub(crate) fn from_spec(
        client: &MetricsClient,
        spec: &LLMScalerSpec,
    ) -> Result<Self, MetricError> {
        let empty = BTreeMap::new();
        Self::with_headers(client, spec, spec.server_headers.as_ref().unwrap_or(&empty))
    }

    /// [`MetricSource::from_spec`] with the headers given (`serverHeaders` merged with the
    /// values of `serverHeadersFrom`, [`secret_headers`]) instead of `spec.serverHeaders`.
    ///
    /// # Errors
    /// As [`MetricSource::from_spec`].
    pub(crate) fn with_headers(
        client: &MetricsClient,
        spec: &LLMScalerSpec,
        headers: &BTreeMap<String, String>,
    ) -> Result<Self, MetricError> {
        let endpoint = Endpoint::new(&spec.server_address, headers, client.policy())?;
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
        self.read_with_pods(spec, None).await
    }

    /// [`MetricSource::read`] with the target's pods for the per-pod metrics (runtime signals
    /// and `perPod` queries, docs/signals.md): `None` or `Some(Err(why))` when they are not
    /// known, which skips those metrics with [`MetricError::NoPodSelector`].
    pub(crate) async fn read_with_pods(
        &self,
        spec: &LLMScalerSpec,
        pods: Option<&Result<PodSet, String>>,
    ) -> Readings {
        match self {
            MetricSource::Prometheus(source) => {
                let mut tasks = JoinSet::new();
                for (i, metric) in spec.metrics().iter().enumerate() {
                    let source = source.clone();
                    if metric.is_per_pod() {
                        let metric = metric.clone();
                        let pods = match pods {
                            Some(Ok(pods)) => Ok(pods.clone()),
                            Some(Err(why)) => Err(why.clone()),
                            None => Err("the target's pods are not known here (per-pod metrics \
                                         are read by the operator in the cluster)"
                                .to_owned()),
                        };
                        tasks.spawn(async move {
                            let value = match pods {
                                Ok(pods) => super::per_pod::read(&source, &metric, &pods).await,
                                Err(reason) => Err(MetricError::NoPodSelector {
                                    subject: per_pod_subject(&metric),
                                    reason,
                                }),
                            };
                            (i, value)
                        });
                        continue;
                    }
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

/// The subject of a per-pod metric before its pods are known: the signal, or the query.
fn per_pod_subject(metric: &llmscaler_api::MetricSpec) -> super::Subject {
    match (metric.runtime, metric.signal) {
        (Some(runtime), Some(signal)) => super::Subject::Signal(format!(
            "{} {}",
            llmscaler_api::signals::runtime_name(runtime),
            llmscaler_api::signals::signal_name(signal)
        )),
        _ => super::Subject::Query(metric.query.clone()),
    }
}

impl Readings {
    /// The engine's input for `spec` (`docs/scaling.md` step 3), borrowing the typed errors.
    pub fn signal(&self, spec: &LLMScalerSpec) -> Signal<&MetricError> {
        match self {
            Readings::Metrics(values) => {
                Signal::metrics(spec, values.iter().map(|v| v.as_ref().copied()).collect())
            }
            Readings::Decision(decision) => Signal::Decision(decision.as_ref().copied()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Signal;
    use crate::metrics::Subject;

    fn spec(value: serde_json::Value) -> LLMScalerSpec {
        serde_json::from_value(value).expect("spec")
    }

    fn prometheus_spec() -> LLMScalerSpec {
        spec(serde_json::json!({
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "serverAddress": "http://prometheus:9090",
            "serverHeaders": {"Authorization": "Bearer tok"},
            "minReplicas": 1,
            "maxReplicas": 5,
            "metrics": [
                {"name": "waiting", "query": "avg(w)", "target": "2"},
                {"query": "avg(kv)", "target": "0.8"}
            ]
        }))
    }

    #[test]
    fn from_spec_picks_the_provider() {
        let client = MetricsClient::new().expect("client");
        let source = MetricSource::from_spec(&client, &prometheus_spec()).expect("source");
        assert!(matches!(source, MetricSource::Prometheus(_)));
        assert!(!format!("{source:?}").contains("Bearer tok"));

        let custom = spec(serde_json::json!({
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "metricProvider": "Custom",
            "customProvider": {"serviceId": "llama", "path": "v1/decide"},
            "serverAddress": "http://decider:8080/",
            "minReplicas": 0,
            "maxReplicas": 5
        }));
        match MetricSource::from_spec(&client, &custom).expect("source") {
            MetricSource::Decision(d) => assert_eq!(
                d.url().expect("url").as_str(),
                "http://decider:8080/v1/decide?serviceId=llama"
            ),
            other => panic!("expected a decision source, got {other:?}"),
        }

        let mut bad = prometheus_spec();
        bad.server_address = "prometheus:9090".to_owned();
        assert_eq!(
            MetricSource::from_spec(&client, &bad)
                .expect_err("no scheme")
                .kind(),
            "invalid_config"
        );
    }

    #[test]
    fn readings_become_the_engine_signal_and_named_errors() {
        let spec = prometheus_spec();
        let readings = Readings::Metrics(vec![
            Ok(3.0),
            Err(MetricError::NoData {
                subject: Subject::Query("avg(kv)".to_owned()),
            }),
        ]);
        let no_data = "Prometheus query `avg(kv)` returned no data (empty result); the metric \
                       is skipped, not read as 0";
        // The engine gets the typed error itself; its text is written only for a message.
        let Signal::Metrics(inputs) = readings.signal(&spec) else {
            panic!("a Prometheus spec gives a metrics signal");
        };
        let seen: Vec<(String, String, Result<f64, String>)> = inputs
            .into_iter()
            .map(|i| {
                (
                    i.name,
                    i.target,
                    i.value.map_err(|e| format!("{}: {e}", e.kind())),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("waiting".to_owned(), "2".to_owned(), Ok(3.0)),
                (
                    "metric1".to_owned(),
                    "0.8".to_owned(),
                    Err(format!("no_data: {no_data}"))
                ),
            ]
        );
        let decision = Readings::Decision(Ok(7));
        assert!(matches!(decision.signal(&spec), Signal::Decision(Ok(7))));
        let errors = readings.errors(&spec);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, "metric1");
        assert_eq!(errors[0].1.kind(), "no_data");

        let decision = Readings::Decision(Ok(7));
        assert!(decision.errors(&spec).is_empty());
    }
}
