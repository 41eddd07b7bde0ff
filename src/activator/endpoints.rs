//! Where held requests go: the Ready endpoints of one Service, from its EndpointSlices (label
//! `kubernetes.io/service-name`), leaving out the slices llmscaler itself writes (the
//! activator's own route), so the activator never forwards to itself. Only slices of the
//! Service's own namespace are read: a scaler cannot send the activator to another
//! namespace's pods (docs/security.md#activator).

use std::net::{IpAddr, SocketAddr};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use llmscaler_api::names::{ENDPOINTSLICE_MANAGED_BY_LABEL, ENDPOINTSLICE_MANAGER};
use tokio::sync::watch;

/// The label of an EndpointSlice naming its Service.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The label selector of `service`'s slices written by others than llmscaler.
pub(crate) fn selector(service: &str) -> String {
    format!(
        "{SERVICE_NAME_LABEL}={service},{ENDPOINTSLICE_MANAGED_BY_LABEL}!={ENDPOINTSLICE_MANAGER}"
    )
}

/// The addresses of the Ready endpoints of `slices` on the port named `port_name` (`""`: the
/// unnamed port), in slice and endpoint order, without duplicates. An endpoint whose `ready`
/// condition is unset counts as Ready (the API's rule); terminating ones do not. Slices of
/// llmscaler are skipped even when a selector let them through.
pub(crate) fn ready_addresses<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    port_name: &str,
) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for slice in slices {
        let ours = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ENDPOINTSLICE_MANAGED_BY_LABEL))
            .is_some_and(|m| m == ENDPOINTSLICE_MANAGER);
        if ours || !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
            continue;
        }
        let Some(port) = slice.ports.iter().flatten().find_map(|p| {
            (p.name.as_deref().unwrap_or("") == port_name)
                .then_some(p.port)
                .flatten()
                .and_then(|p| u16::try_from(p).ok())
        }) else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let conditions = endpoint.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true)
                && !conditions.and_then(|c| c.terminating).unwrap_or(false);
            if !ready {
                continue;
            }
            for address in &endpoint.addresses {
                if let Ok(ip) = address.parse::<IpAddr>() {
                    let addr = SocketAddr::new(ip, port);
                    if !out.contains(&addr) {
                        out.push(addr);
                    }
                }
            }
        }
    }
    out
}

/// Watches `service`'s slices in `namespace` and publishes its Ready addresses on port
/// `port_name` into `tx` at every change, until the receivers are gone. A failing watch
/// retries with back-off (logged); the last addresses stay meanwhile.
pub(crate) async fn watch_ready(
    client: kube::Client,
    namespace: String,
    service: String,
    port_name: String,
    tx: watch::Sender<Vec<SocketAddr>>,
) {
    let api: Api<EndpointSlice> = Api::namespaced(client, &namespace);
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(&selector(&service));
    let stream = watcher(api, config).default_backoff().reflect(writer);
    futures::pin_mut!(stream);
    loop {
        tokio::select! {
            () = tx.closed() => return,
            event = stream.next() => match event {
                Some(Ok(_)) => {
                    let state = reader.state();
                    let ready = ready_addresses(state.iter().map(AsRef::as_ref), &port_name);
                    tx.send_if_modified(|now| {
                        let changed = *now != ready;
                        if changed {
                            tracing::info!(namespace, service, ready = ?ready, "Ready endpoints changed");
                            *now = ready;
                        }
                        changed
                    });
                }
                Some(Err(err)) => {
                    tracing::warn!(namespace, service, error = %err, "watching EndpointSlices failed; retrying");
                }
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use kube::api::ObjectMeta;

    fn slice(
        ours: bool,
        port: (&str, i32),
        endpoints: &[(&str, Option<bool>, bool)],
    ) -> EndpointSlice {
        let mut labels = std::collections::BTreeMap::new();
        labels.insert(SERVICE_NAME_LABEL.to_owned(), "vllm".to_owned());
        if ours {
            labels.insert(
                ENDPOINTSLICE_MANAGED_BY_LABEL.to_owned(),
                ENDPOINTSLICE_MANAGER.to_owned(),
            );
        }
        EndpointSlice {
            metadata: ObjectMeta {
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".to_owned(),
            ports: Some(vec![EndpointPort {
                name: Some(port.0.to_owned()),
                port: Some(port.1),
                ..EndpointPort::default()
            }]),
            endpoints: endpoints
                .iter()
                .map(|(ip, ready, terminating)| Endpoint {
                    addresses: vec![(*ip).to_owned()],
                    conditions: Some(EndpointConditions {
                        ready: *ready,
                        terminating: Some(*terminating),
                        ..EndpointConditions::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
        }
    }

    #[test]
    fn only_ready_endpoints_of_the_named_port_and_never_our_own_slice() {
        let slices = [
            slice(true, ("", 18000), &[("10.0.0.9", Some(true), false)]),
            slice(
                false,
                ("", 8000),
                &[
                    ("10.0.0.1", Some(true), false),
                    ("10.0.0.2", Some(false), false),
                    ("10.0.0.3", None, false),
                    ("10.0.0.4", Some(true), true),
                    ("not-an-ip", Some(true), false),
                ],
            ),
            slice(false, ("metrics", 9000), &[("10.0.0.5", Some(true), false)]),
        ];
        let addrs: Vec<String> = ready_addresses(&slices, "")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(addrs, ["10.0.0.1:8000", "10.0.0.3:8000"]);
        let named: Vec<String> = ready_addresses(&slices, "metrics")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(named, ["10.0.0.5:9000"]);
    }

    #[test]
    fn the_selector_leaves_our_slices_out() {
        assert_eq!(
            selector("vllm"),
            "kubernetes.io/service-name=vllm,endpointslice.kubernetes.io/managed-by!=llmscaler"
        );
    }
}
