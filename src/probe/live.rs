//! `llmscaler probe --name NAME -n NAMESPACE`: reads the live LLMScaler and its target from the
//! cluster, evaluates every metric now, and explains the engine's steps
//! ([`super::explain`]). Reads only; writes nothing.

use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use llmscaler_api::{LLMScaler, LLMScalerSpec, ValidationErrors, apply_defaults, check_spec};

use super::explain::{Explanation, TargetView, explain_step, step_target};
use crate::controller::history::history_from_status;
use crate::controller::target::{self, Resolver, TargetError};
use crate::engine::capacity::CapacityInput;
use crate::metrics::{MetricError, MetricSource, MetricsClient, Readings};
use crate::step::{self, Acting, Scaler};

/// Why the live probe could not explain the scaler.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// No Kubernetes client: no credentials, or the API server does not answer.
    #[error(transparent)]
    Client(#[from] crate::kubeclient::ClientError),
    /// The LLMScaler could not be read.
    #[error("reading LLMScaler {namespace}/{name}: {source}")]
    Scaler {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The stored spec breaks admission rules.
    #[error("the stored spec is invalid:\n{0}")]
    Invalid(ValidationErrors),
    /// The target could not be read.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The metric source could not be built.
    #[error(transparent)]
    Source(#[from] MetricError),
}

/// Reads `namespace/name` and its target through the kubeconfig and context of `kube` (default:
/// the current ones, or in-cluster credentials), evaluates its metrics over `metrics_client` now
/// with the headers the operator sends (`serverHeaders` and the values of `serverHeadersFrom`,
/// read from their Secrets with the probe user's rights), and explains the result.
///
/// # Errors
/// [`LiveError`].
pub async fn explain_live(
    name: &str,
    namespace: &str,
    metrics_client: &MetricsClient,
    (kube, proxy): (&crate::kubeclient::KubeArgs, ProxyMode),
) -> Result<(LLMScalerSpec, Explanation), LiveError> {
    let client = kube.client().await?;
    let scaler = Api::<LLMScaler>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|source| LiveError::Scaler {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?;
    let mut spec = scaler.spec.clone();
    apply_defaults(&mut spec);
    check_spec(&spec, metrics_client.policy()).map_err(LiveError::Invalid)?;
    let resolver = Resolver::default();
    let resource = resolver.resolve(&client, &spec.target_ref).await?;
    let state = target::read(&client, &resource, namespace, &spec.target_ref).await?;
    let headers = crate::metrics::secret_headers(&client, namespace, &spec).await?;
    let source = MetricSource::with_headers(metrics_client, &spec, &headers)?;
    let mut readings = source.read(&spec).await;
    if let Some(service) = in_cluster_service(&spec.server_address, namespace)
        && proxy.wanted(&readings)
    {
        readings = read_through_proxy(&client, &service, &spec).await;
    }
    let (activation, capacity, objective) = extra_reads(&source, &spec, state.spec_replicas).await;
    // The history as persisted (the leader may hold a newer copy in memory, refreshed into status
    // at least every refresh interval); the start-up time as status says.
    let history = history_from_status(scaler.status.as_ref(), 0);
    let view = TargetView {
        kind: &spec.target_ref.kind,
        name: &spec.target_ref.name,
        observed: state.observation(),
    };
    let mut observed = observation(
        state.observation(),
        readings.signal(&spec),
        (&activation, &capacity, &objective),
        scaler.status.as_ref(),
    );
    // The pod template as the operator reads it: its hash (a rollout starts the calibration
    // over) and its `--max-num-seqs` (the objective's batch limit).
    let seen = crate::controller::target_view(&state);
    observed.target.template = seen.template;
    observed.target.max_num_seqs = seen.max_num_seqs;
    let step = Scaler::new(&spec, scaler.status.as_ref()).with_history(history.clone());
    let explanation = explain_step(&spec, &view, step, &observed, &history);
    Ok((spec, explanation))
}

/// The step's input for one probe: the target, the metric readings and [`extra_reads`]' values
/// at the current time, as an active scaler sees them; no pods, drain or deletion costs are
/// read (probe shows what the metrics ask for, not a drain).
pub(crate) fn observation<'a>(
    target: crate::engine::Observation,
    signal: crate::engine::Signal<&'a MetricError>,
    (activation, capacity, objective): ExtraRefs<'a>,
    status: Option<&'a llmscaler_api::LLMScalerStatus>,
) -> step::Observation<'a, &'a MetricError> {
    step::Observation {
        now_ms: Timestamp::now().as_millisecond(),
        target: step_target(target),
        signal,
        capacity: capacity.as_ref().map(|(arrival, backlog)| CapacityInput {
            arrival: arrival.as_ref().copied(),
            backlog: backlog.as_ref().map(|b| b.as_ref().copied()),
        }),
        objective: objective
            .as_ref()
            .map(|values| values.iter().map(|v| v.as_ref().copied()).collect()),
        activation: activation.as_ref().map(|a| a.as_ref().copied()),
        pods: None,
        in_flight: None,
        deletion_costs: None,
        activator: None,
        acting: Acting::Active,
        competitor: None,
        status,
    }
}

/// Borrowed [`ExtraReadings`].
pub(crate) type ExtraRefs<'a> = (
    &'a Option<Result<f64, MetricError>>,
    &'a Option<crate::controller::observe::CapacityReadings>,
    &'a Option<Vec<Result<f64, MetricError>>>,
);

/// The readings of one probe besides `spec.metrics`: activation, capacity, objective.
pub(crate) type ExtraReadings = (
    Option<Result<f64, MetricError>>,
    Option<crate::controller::observe::CapacityReadings>,
    Option<Vec<Result<f64, MetricError>>>,
);

/// The activation query (while the target is at zero), `spec.capacity`'s and
/// `spec.objective`'s queries, read as the operator reads them (nothing under the Custom
/// provider).
pub(crate) async fn extra_reads(
    source: &MetricSource,
    spec: &LLMScalerSpec,
    spec_replicas: i32,
) -> ExtraReadings {
    let MetricSource::Prometheus(prometheus) = source else {
        return (None, None, None);
    };
    let objective = match crate::engine::objective::queries(spec) {
        Some(queries) => {
            Some(futures::future::join_all(queries.iter().map(|q| prometheus.query(q))).await)
        }
        None => None,
    };
    let activation = match &spec.activation {
        Some(activation) if spec_replicas == 0 => Some(prometheus.query(&activation.query).await),
        _ => None,
    };
    let capacity = match &spec.capacity {
        Some(capacity) => {
            let backlog = match &capacity.backlog_query {
                Some(query) => Some(prometheus.query(query).await),
                None => None,
            };
            Some((
                prometheus.query(&capacity.arrival_rate_query).await,
                backlog,
            ))
        }
        None => None,
    };
    (activation, capacity, objective)
}

/// When to read Prometheus through the API server's service proxy.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProxyMode {
    /// When `serverAddress` names an in-cluster Service and it could not be reached directly
    /// (timeout or transport error on every metric).
    #[default]
    Auto,
    /// Always, when `serverAddress` names an in-cluster Service.
    Always,
    /// Never.
    Never,
}

impl ProxyMode {
    fn wanted(self, readings: &Readings) -> bool {
        match self {
            ProxyMode::Always => true,
            ProxyMode::Never => false,
            ProxyMode::Auto => match readings {
                Readings::Metrics(values) => {
                    !values.is_empty()
                        && values.iter().all(|v| {
                            matches!(
                                v,
                                Err(MetricError::Transport { .. } | MetricError::Timeout { .. })
                            )
                        })
                }
                Readings::Decision(_) => false,
            },
        }
    }
}

/// A Service that `serverAddress` names: `scheme`, `name`, `namespace`, `port`, and the path
/// prefix under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRef {
    /// `http` or `https`.
    pub scheme: String,
    /// The Service's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// The port, as written or the scheme's default.
    pub port: u16,
    /// The base path of `serverAddress` (without a trailing `/`).
    pub path: String,
}

impl ServiceRef {
    /// The API server path that proxies `{path}/api/v1/query?query=...` to the Service.
    pub fn query_path(&self, query: &str) -> String {
        let encoded: String = url::form_urlencoded::byte_serialize(query.as_bytes()).collect();
        format!(
            "/api/v1/namespaces/{}/services/{}:{}:{}/proxy{}/api/v1/query?query={encoded}",
            self.namespace, self.scheme, self.name, self.port, self.path
        )
    }
}

/// The Service `address` names when it is cluster-internal: `name`, `name.ns`, `name.ns.svc`
/// or `name.ns.svc.cluster.local` (a bare `name` is in `scaler_namespace`). `None` for IPs and
/// other hosts.
pub fn in_cluster_service(address: &str, scaler_namespace: &str) -> Option<ServiceRef> {
    let url = url::Url::parse(address).ok()?;
    let host = url.host_str()?;
    if host.parse::<std::net::IpAddr>().is_ok() || host == "localhost" {
        return None;
    }
    let labels: Vec<&str> = host.split('.').collect();
    let (name, namespace) = match labels.as_slice() {
        [name] => (*name, scaler_namespace),
        [name, ns] | [name, ns, "svc"] | [name, ns, "svc", "cluster", "local"] => (*name, *ns),
        _ => return None,
    };
    Some(ServiceRef {
        scheme: url.scheme().to_owned(),
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        port: url.port_or_known_default()?,
        path: url.path().trim_end_matches('/').to_owned(),
    })
}

/// Every metric of `spec` read through the API server's service proxy (the probe user's own
/// rights: `get` on `services/proxy` in the Service's namespace).
async fn read_through_proxy(
    client: &kube::Client,
    service: &ServiceRef,
    spec: &LLMScalerSpec,
) -> Readings {
    let mut values = Vec::new();
    for metric in spec.metrics() {
        if metric.is_per_pod() {
            values.push(Err(MetricError::NoPodSelector {
                subject: crate::metrics::Subject::Query(metric.query.clone()),
                reason: "per-pod metrics (runtime signals, perPod queries) are read over the \
                         target's Ready pods by the operator only (docs/signals.md)"
                    .to_owned(),
            }));
            continue;
        }
        let request = http::Request::get(service.query_path(&metric.query)).body(Vec::new());
        let value = match request {
            Ok(request) => match client.request_text(request).await {
                Ok(body) => crate::metrics::decode_instant_body(&metric.query, body.as_bytes()),
                Err(err) => Err(MetricError::BadReply {
                    subject: crate::metrics::Subject::Query(metric.query.clone()),
                    reason: format!("through the API server's service proxy: {err}"),
                }),
            },
            Err(err) => Err(MetricError::BadReply {
                subject: crate::metrics::Subject::Query(metric.query.clone()),
                reason: format!("cannot build the proxy request: {err}"),
            }),
        };
        values.push(value);
    }
    Readings::Metrics(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_cluster_addresses_map_to_the_service_proxy() {
        let svc = in_cluster_service("http://prometheus.monitoring.svc:9090", "inference")
            .expect("a Service");
        assert_eq!(
            svc.query_path("avg(vllm:num_requests_waiting)"),
            "/api/v1/namespaces/monitoring/services/http:prometheus:9090/proxy/api/v1/query?query=avg%28vllm%3Anum_requests_waiting%29"
        );
        let bare = in_cluster_service("https://prom/", "inference").expect("a Service");
        assert_eq!((bare.namespace.as_str(), bare.port), ("inference", 443));
        let long = in_cluster_service("http://thanos.obs.svc.cluster.local:10902/prefix", "x")
            .expect("a Service");
        assert_eq!(
            (long.name.as_str(), long.path.as_str()),
            ("thanos", "/prefix")
        );
        assert_eq!(in_cluster_service("http://10.0.0.5:9090", "x"), None);
        assert_eq!(in_cluster_service("http://127.0.0.1:9090", "x"), None);
        assert_eq!(
            in_cluster_service("https://prometheus.example.com", "x"),
            None
        );
    }

    #[test]
    fn auto_goes_through_the_proxy_only_when_nothing_was_reachable() {
        let unreachable = |q: &str| {
            Err(MetricError::Transport {
                server: "http://prometheus.monitoring.svc:9090".into(),
                subject: crate::metrics::Subject::Query(q.into()),
                reason: "dns error".into(),
            })
        };
        let all_down = Readings::Metrics(vec![unreachable("a"), unreachable("b")]);
        assert!(ProxyMode::Auto.wanted(&all_down));
        assert!(!ProxyMode::Never.wanted(&all_down));
        let one_up = Readings::Metrics(vec![unreachable("a"), Ok(1.0)]);
        assert!(!ProxyMode::Auto.wanted(&one_up));
        assert!(ProxyMode::Always.wanted(&one_up));
    }
}
