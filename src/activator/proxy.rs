//! The data path of one held Service: a request that finds a Ready endpoint is forwarded at
//! once; otherwise it is held in the Service's [`HoldQueue`](super::queue::HoldQueue) until the
//! endpoints watch sees one (then every held request is released in arrival order), its hold
//! times out (`503` + `Retry-After`), or its client goes away. A full queue answers `503` +
//! `Retry-After` at once. Forwarding streams both bodies: the request body through a byte
//! bound, the response (SSE, chunked) frame by frame as the replica sends it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::Held;
use super::queue::retry_after_seconds;

/// The HTTP client of every forwarded request (HTTP/1.1, pooled per endpoint).
pub(crate) type Forwarder = Client<HttpConnector, Body>;

/// A client for forwarding: no timeouts of its own on the answer (a model's first token may
/// take long; the listener's limits bound the head), a connect timeout of 5 s.
pub(crate) fn forwarder() -> Forwarder {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// Headers that belong to one hop only (RFC 9110 §7.6.1) and are not forwarded.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .copied()
        .chain(named.iter().map(String::as_str))
    {
        headers.remove(name);
    }
}

/// A `503` with `Retry-After` and a one-line reason.
fn unavailable(retry_after: u64, why: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("{why}\n")));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    if let Ok(value) = HeaderValue::from_str(&retry_after.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// Removes a held request from its queue when its handler ends before the release (the
/// client went away, or the hold timed out).
struct Place {
    held: Arc<Held>,
    ticket: Option<super::queue::Ticket>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take()
            && self.held.queue().remove(ticket)
        {
            self.held.changed();
        }
    }
}

/// Every request to a held Service's port.
pub(crate) async fn handle(
    State(held): State<Arc<Held>>,
    request: Request<Body>,
) -> Response<Body> {
    let config = held.config();
    let timeout = Duration::from_secs(u64::from(config.hold_timeout_seconds));
    let retry = retry_after_seconds(u64::from(config.hold_timeout_seconds));
    let target = match held.pick() {
        Some(addr) => addr,
        None => {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            // The Ready check and the hold under one lock: a release between them is not lost.
            let ticket = {
                let mut queue = held.queue();
                if held.ready_now() {
                    None
                } else {
                    match queue.hold(tx) {
                        Ok(ticket) => Some(ticket),
                        Err(_) => {
                            drop(queue);
                            held.changed();
                            tracing::info!(
                                namespace = held.namespace,
                                service = held.service,
                                "hold queue full: 503"
                            );
                            return unavailable(
                                retry,
                                "the service is waking from zero and holds as many requests as it may; retry later",
                            );
                        }
                    }
                }
            };
            if let Some(ticket) = ticket {
                held.changed();
                let mut place = Place {
                    held: held.clone(),
                    ticket: Some(ticket),
                };
                match tokio::time::timeout(timeout, rx).await {
                    Ok(Ok(())) => place.ticket = None,
                    Ok(Err(_)) | Err(_) => {
                        drop(place);
                        tracing::info!(
                            namespace = held.namespace,
                            service = held.service,
                            "held request timed out: 503"
                        );
                        return unavailable(
                            retry,
                            "the service did not become ready within the hold timeout; retry later",
                        );
                    }
                }
            }
            match held.pick() {
                Some(addr) => addr,
                None => {
                    return unavailable(retry, "the service has no ready endpoint; retry later");
                }
            }
        }
    };
    forward(&held, target, request).await
}

/// Forwards `request` to `target` and streams the answer back.
async fn forward(held: &Held, target: SocketAddr, request: Request<Body>) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let uri = match Uri::builder()
        .scheme("http")
        .authority(target.to_string())
        .path_and_query(path)
        .build()
    {
        Ok(uri) => uri,
        Err(err) => {
            let mut response = Response::new(Body::from(format!("bad request target: {err}\n")));
            *response.status_mut() = StatusCode::BAD_REQUEST;
            return response;
        }
    };
    parts.uri = uri;
    parts.version = axum::http::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    let body = Body::new(
        http_body_util::Limited::new(body, held.max_body_bytes).map_err(axum::Error::new),
    );
    match held
        .forwarder
        .request(Request::from_parts(parts, body))
        .await
    {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Err(err) => {
            tracing::warn!(namespace = held.namespace, service = held.service, endpoint = %target, error = %err, "forwarding failed: 502");
            let mut response = Response::new(Body::from(format!(
                "the activator could not reach the replica: {err}\n"
            )));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-secret-hop"),
        );
        headers.insert("x-secret-hop", HeaderValue::from_static("1"));
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key(header::CONTENT_TYPE));
    }

    #[test]
    fn refusals_say_when_to_retry() {
        let response = unavailable(7, "full");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
    }
}
