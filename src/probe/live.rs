//! `llmscaler probe --name NAME -n NAMESPACE`: reads the live LLMScaler and its target from the
//! cluster, evaluates every metric now, and explains the engine's steps
//! ([`super::explain`]). Reads only; writes nothing.

use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use llmscaler_api::{LLMScaler, LLMScalerSpec, ValidationErrors, apply_defaults, check_spec};

use super::explain::{Explanation, TargetView, explain};
use crate::controller::history::history_from_status;
use crate::controller::target::{self, Resolver, TargetError};
use crate::metrics::{MetricError, MetricSource, MetricsClient};

/// Why the live probe could not explain the scaler.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// No Kubernetes credentials.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
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

/// Reads `namespace/name` and its target through the current kubeconfig (or in-cluster
/// credentials), evaluates its metrics over `metrics_client` now, and explains the result.
///
/// # Errors
/// [`LiveError`].
pub async fn explain_live(
    name: &str,
    namespace: &str,
    metrics_client: &MetricsClient,
) -> Result<(LLMScalerSpec, Explanation), LiveError> {
    let client = kube::Client::try_default()
        .await
        .map_err(LiveError::Client)?;
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
    check_spec(&spec).map_err(LiveError::Invalid)?;
    let resolver = Resolver::default();
    let resource = resolver.resolve(&client, &spec.target_ref).await?;
    let state = target::read(&client, &resource, namespace, &spec.target_ref).await?;
    let readings = MetricSource::from_spec(metrics_client, &spec)?
        .read(&spec)
        .await;
    // The history as persisted (the leader may hold a newer copy in memory, refreshed into status
    // at least every refresh interval).
    let history = history_from_status(scaler.status.as_ref(), 0);
    let view = TargetView {
        kind: &spec.target_ref.kind,
        name: &spec.target_ref.name,
        observed: state.observation(),
    };
    let explanation = explain(
        &spec,
        &view,
        &readings.signal(&spec),
        &history,
        Timestamp::now(),
    );
    Ok((spec, explanation))
}
