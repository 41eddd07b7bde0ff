//! The operator's side of the activator (docs/scaling.md#holding-requests-while-waking-from-zero):
//! - [`ActivatorLink::observe`]: per sync of a scaler with `scaleToZero.holdRequests`, registers
//!   its Service with the activator (idempotent) and reads whether the route exists and how
//!   many requests are held, for the step;
//! - [`ActivatorLink::set_route`]: carries out the step's `ActivatorRoute` effect: an
//!   EndpointSlice of the Service (label `endpointslice.kubernetes.io/managed-by: llmscaler`)
//!   pointing at the activator's Ready pods on the Service's port, created by server-side apply
//!   or deleted;
//! - [`ActivatorLink::poll`]: the long poll of the activator's `GET /v1/held`, which wakes the
//!   scaler of a Service at its first held request ([`ActivatorLink::subscribe`]) instead of
//!   waiting for the next sync.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use llmscaler_api::LLMScalerSpec;
use llmscaler_api::names::{ENDPOINTSLICE_MANAGED_BY_LABEL, ENDPOINTSLICE_MANAGER, FIELD_MANAGER};
use tokio::sync::broadcast;

use crate::activator::control::{HeldReport, HoldConfig, Registered};
use crate::step::ActivatorView;

/// The label of an EndpointSlice naming its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service: namespace and name.
pub type ServiceKey = (String, String);

/// The operator's handle on the activator (`--activator`, `--activator-control-url`).
pub struct ActivatorLink {
    /// The activator's own Service (namespace, name): its Ready pods are the route's endpoints.
    pub service: ServiceKey,
    control_url: url::Url,
    http: reqwest::Client,
    /// The last report of `GET /v1/held`.
    report: Mutex<HeldReport>,
    /// The activator's port per registered Service.
    ports: Mutex<HashMap<ServiceKey, u16>>,
    woken: broadcast::Sender<ServiceKey>,
}

/// Why the activator could not be reached or the route not written.
#[derive(Debug, thiserror::Error)]
pub enum ActivatorLinkError {
    /// The control API failed (with the URL).
    #[error("activator control API {url}: {message}")]
    Control {
        /// The request's URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// An API request on EndpointSlices failed.
    #[error("{operation} EndpointSlice {namespace}/{name}: {source}")]
    Api {
        /// `apply`, `delete`, `get` or `list`.
        operation: &'static str,
        /// The slice's namespace.
        namespace: String,
        /// The slice's (or the activator Service's) name.
        name: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The activator has no Ready pod to route to.
    #[error("the activator Service {0}/{1} has no Ready endpoint; the route waits for one")]
    NoActivator(String, String),
}

/// The name of the operator's EndpointSlice for `service`.
pub fn route_slice_name(service: &str) -> String {
    format!("{service}-llmscaler-activator")
}

/// The [`HoldConfig`] of a scaler's `spec.scaleToZero`.
fn hold_config(spec: &LLMScalerSpec) -> Option<(String, HoldConfig)> {
    let stz = spec.scale_to_zero.as_ref().filter(|s| s.holds())?;
    let service = stz.service.clone()?;
    Some((
        service,
        HoldConfig {
            port: stz.effective_port().to_owned(),
            max_held_requests: u32::try_from(stz.effective_max_held_requests().max(1)).unwrap_or(1),
            hold_timeout_seconds: u32::try_from(stz.effective_hold_timeout_seconds().max(1))
                .unwrap_or(1),
        },
    ))
}

/// The Ready addresses of `slices`' endpoints, whatever their port, without duplicates.
fn ready_ips(slices: &[EndpointSlice]) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for endpoint in slices.iter().flat_map(|s| &s.endpoints) {
        let conditions = endpoint.conditions.as_ref();
        if !conditions.and_then(|c| c.ready).unwrap_or(true)
            || conditions.and_then(|c| c.terminating).unwrap_or(false)
        {
            continue;
        }
        for ip in endpoint
            .addresses
            .iter()
            .filter_map(|a| a.parse::<IpAddr>().ok())
        {
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    out
}

/// Whether the route `slice` points at the activator's `port`.
fn routes_to(slice: &EndpointSlice, port: u16) -> bool {
    slice
        .ports
        .iter()
        .flatten()
        .any(|p| p.port == Some(i32::from(port)))
        && !slice.endpoints.is_empty()
}

/// The route's EndpointSlice: `service`'s port `port_name` served by `activators` on `port`.
pub fn route_slice(
    namespace: &str,
    service: &str,
    port_name: &str,
    port: u16,
    activators: &[IpAddr],
) -> EndpointSlice {
    let v6 = activators.first().is_some_and(IpAddr::is_ipv6);
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(route_slice_name(service)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                (SERVICE_NAME_LABEL.to_owned(), service.to_owned()),
                (
                    ENDPOINTSLICE_MANAGED_BY_LABEL.to_owned(),
                    ENDPOINTSLICE_MANAGER.to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        address_type: if v6 { "IPv6" } else { "IPv4" }.to_owned(),
        endpoints: activators
            .iter()
            .filter(|ip| ip.is_ipv6() == v6)
            .map(|ip| Endpoint {
                addresses: vec![ip.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    serving: Some(true),
                    terminating: Some(false),
                }),
                ..Endpoint::default()
            })
            .collect(),
        ports: Some(vec![EndpointPort {
            name: Some(port_name.to_owned()),
            port: Some(i32::from(port)),
            protocol: Some("TCP".to_owned()),
            app_protocol: None,
        }]),
    }
}

impl ActivatorLink {
    /// A link to the activator whose Service is `service` and whose control API is at
    /// `control_url` (e.g. `http://llmscaler-activator.llmscaler-system:9090`).
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(service: ServiceKey, control_url: url::Url) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("llmscaler/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let (woken, _) = broadcast::channel(256);
        Ok(Self {
            service,
            control_url,
            http,
            report: Mutex::new(HeldReport::default()),
            ports: Mutex::new(HashMap::new()),
            woken,
        })
    }

    /// The Services whose first request was just held, as the long poll sees them.
    pub fn subscribe(&self) -> broadcast::Receiver<ServiceKey> {
        self.woken.subscribe()
    }

    fn url(&self, path: &str) -> Result<url::Url, ActivatorLinkError> {
        self.control_url
            .join(path)
            .map_err(|e| ActivatorLinkError::Control {
                url: format!("{}{path}", self.control_url),
                message: e.to_string(),
            })
    }

    /// Registers `service` in `namespace` with `config`; the activator's port for it.
    async fn register(
        &self,
        namespace: &str,
        service: &str,
        config: &HoldConfig,
    ) -> Result<u16, ActivatorLinkError> {
        let url = self.url(&format!("v1/services/{namespace}/{service}"))?;
        let failed = |message: String| ActivatorLinkError::Control {
            url: url.to_string(),
            message,
        };
        let response = self
            .http
            .put(url.clone())
            .timeout(Duration::from_secs(5))
            .json(config)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(failed(format!(
                "HTTP {status}: {}",
                body.chars().take(256).collect::<String>()
            )));
        }
        let registered: Registered = response.json().await.map_err(|e| failed(e.to_string()))?;
        lock(&self.ports).insert(
            (namespace.to_owned(), service.to_owned()),
            registered.listen_port,
        );
        Ok(registered.listen_port)
    }

    /// What the step needs of the activator for a scaler of `namespace` with `spec`: `None`
    /// without `scaleToZero.holdRequests`.
    ///
    /// # Errors
    /// When the activator or the API server cannot be reached.
    pub async fn observe(
        &self,
        client: &kube::Client,
        namespace: &str,
        spec: &LLMScalerSpec,
    ) -> Result<Option<ActivatorView>, ActivatorLinkError> {
        let Some((service, config)) = hold_config(spec) else {
            return Ok(None);
        };
        let port = self.register(namespace, &service, &config).await?;
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
        let name = route_slice_name(&service);
        let slice = slices
            .get_opt(&name)
            .await
            .map_err(|source| ActivatorLinkError::Api {
                operation: "get",
                namespace: namespace.to_owned(),
                name: name.clone(),
                source: Box::new(source),
            })?;
        // A route to another port (the activator restarted and numbered its ports anew) is no
        // route: the step writes it again.
        let routed = slice.is_some_and(|s| routes_to(&s, port));
        let held = lock(&self.report)
            .services
            .iter()
            .find(|s| s.namespace == namespace && s.service == service)
            .map_or(0, |s| s.held);
        Ok(Some(ActivatorView { held, routed }))
    }

    /// Creates (`on`) or deletes the route of `spec`'s Service in `namespace`.
    ///
    /// # Errors
    /// API errors, or no Ready activator pod to route to.
    pub async fn set_route(
        &self,
        client: &kube::Client,
        namespace: &str,
        spec: &LLMScalerSpec,
        on: bool,
    ) -> Result<(), ActivatorLinkError> {
        let Some((service, config)) = hold_config(spec) else {
            return Ok(());
        };
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
        let name = route_slice_name(&service);
        let api_error = |operation, source| ActivatorLinkError::Api {
            operation,
            namespace: namespace.to_owned(),
            name: name.clone(),
            source: Box::new(source),
        };
        if !on {
            return match slices.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(source) => Err(api_error("delete", source)),
            };
        }
        let cached = lock(&self.ports)
            .get(&(namespace.to_owned(), service.clone()))
            .copied();
        let port = match cached {
            Some(port) => port,
            None => self.register(namespace, &service, &config).await?,
        };
        let (activator_ns, activator_name) = &self.service;
        let activator_slices: Api<EndpointSlice> = Api::namespaced(client.clone(), activator_ns);
        let listed = activator_slices
            .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={activator_name}")))
            .await
            .map_err(|source| ActivatorLinkError::Api {
                operation: "list",
                namespace: activator_ns.clone(),
                name: activator_name.clone(),
                source: Box::new(source),
            })?;
        let ips = ready_ips(&listed.items);
        if ips.is_empty() {
            return Err(ActivatorLinkError::NoActivator(
                activator_ns.clone(),
                activator_name.clone(),
            ));
        }
        let slice = route_slice(namespace, &service, &config.port, port, &ips);
        slices
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&slice),
            )
            .await
            .map_err(|source| api_error("apply", source))?;
        Ok(())
    }

    /// Long-polls the activator's `GET /v1/held` until the process ends, keeping the last
    /// report and announcing each Service whose held count rose from zero or whose held total
    /// grew while requests are held. A failed poll is retried after a second.
    pub async fn poll(&self) {
        let mut since: Option<u64> = None;
        loop {
            let path = match since {
                Some(seq) => format!("v1/held?since={seq}"),
                None => "v1/held".to_owned(),
            };
            let report = match self.fetch(&path).await {
                Ok(report) => report,
                Err(err) => {
                    tracing::warn!(error = %err, "polling the activator failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    since = None;
                    continue;
                }
            };
            since = Some(report.seq);
            let woken: Vec<ServiceKey> = {
                let mut last = lock(&self.report);
                let woken = report
                    .services
                    .iter()
                    .filter(|s| {
                        s.held > 0
                            && !last.services.iter().any(|p| {
                                p.namespace == s.namespace
                                    && p.service == s.service
                                    && p.held > 0
                                    && p.held_total == s.held_total
                            })
                    })
                    .map(|s| (s.namespace.clone(), s.service.clone()))
                    .collect();
                *last = report;
                woken
            };
            for key in woken {
                tracing::info!(namespace = %key.0, service = %key.1, "the activator holds a request: syncing its scaler now");
                let _ = self.woken.send(key);
            }
        }
    }

    async fn fetch(&self, path: &str) -> Result<HeldReport, ActivatorLinkError> {
        let url = self.url(path)?;
        let failed = |message: String| ActivatorLinkError::Control {
            url: url.to_string(),
            message,
        };
        let response = self
            .http
            .get(url.clone())
            .timeout(crate::activator::control::LONG_POLL + Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        // A report of a few hundred Services is small; a larger answer is refused.
        let bytes = response.bytes().await.map_err(|e| failed(e.to_string()))?;
        if bytes.len() > 4 * 1024 * 1024 {
            return Err(failed(format!(
                "answer of {} bytes is over 4 MiB",
                bytes.len()
            )));
        }
        serde_json::from_slice(&bytes).map_err(|e| failed(e.to_string()))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_slice_names_its_service_and_manager_and_points_at_the_activators() {
        let ips: Vec<IpAddr> = vec!["10.1.0.7".parse().unwrap(), "10.1.0.8".parse().unwrap()];
        let slice = route_slice("team-a", "vllm", "http", 18003, &ips);
        assert_eq!(
            slice.metadata.name.as_deref(),
            Some("vllm-llmscaler-activator")
        );
        assert!(routes_to(&slice, 18003));
        assert!(
            !routes_to(&slice, 18004),
            "the activator renumbered its ports"
        );
        let labels = slice.metadata.labels.clone().unwrap();
        assert_eq!(labels[SERVICE_NAME_LABEL], "vllm");
        assert_eq!(labels[ENDPOINTSLICE_MANAGED_BY_LABEL], "llmscaler");
        assert_eq!(slice.address_type, "IPv4");
        assert_eq!(slice.endpoints.len(), 2);
        let port = &slice.ports.unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.port),
            (Some("http"), Some(18003))
        );
    }

    #[test]
    fn only_holding_scalers_have_a_config() {
        let target = llmscaler_api::TargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "vllm".into(),
        };
        let mut spec = LLMScalerSpec::new(target, "http://prometheus:9090", 0, 2);
        assert!(hold_config(&spec).is_none());
        spec.scale_to_zero = Some(llmscaler_api::ScaleToZero {
            hold_requests: Some(true),
            service: Some("vllm".into()),
            ..Default::default()
        });
        let (service, config) = hold_config(&spec).unwrap();
        assert_eq!(service, "vllm");
        assert_eq!(
            (
                config.port.as_str(),
                config.max_held_requests,
                config.hold_timeout_seconds
            ),
            ("", 100, 300)
        );
    }
}
