//! Listener hardening shared by the webhook's HTTPS listener and the operator's `/metrics`
//! listener (`docs/security.md#listeners`): a TLS handshake timeout, a request-head timeout from
//! the head's first byte, an idle keep-alive timeout, a first-request timeout, a request-body
//! timeout, a connection limit and an HTTP/2 stream limit, so slow or idle clients cannot hold
//! a listener. The webhook's idle timeout outlives kube-apiserver's idle webhook connections, so
//! the server never closes a connection the API server is about to reuse ([`crate::drain`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// TLS handshake, from accept (HTTPS listeners only).
    pub handshake: Duration,
    /// The whole first request head, from the end of the handshake (covers the protocol
    /// detection bytes too).
    pub first_request: Duration,
    /// A request head (HTTP/1), from its first byte.
    pub header_read: Duration,
    /// An idle HTTP/1 keep-alive connection, from the end of an answer to the next request's
    /// head (the head included); at least `header_read`.
    pub idle: Duration,
    /// A whole request from its head: body read and answer.
    pub body: Duration,
    /// HTTP/2 keep-alive ping interval; the connection closes when a ping is not answered
    /// within the same time.
    pub h2_keep_alive: Duration,
    /// Open connections; beyond it a connection gets `503` and is closed.
    pub max_connections: usize,
    /// Concurrent streams per HTTP/2 connection.
    pub max_h2_streams: u32,
    /// Largest request head, bytes (HTTP/2 header list).
    pub max_header_bytes: u32,
}

/// How long kube-apiserver's webhook client keeps an idle connection before closing it: its
/// transport is client-go's (`k8s.io/apimachinery/pkg/util/net.SetTransportDefaults`), whose
/// `IdleConnTimeout` is Go's `http.DefaultTransport` value, 90 s; it speaks HTTP/1.1 only to
/// webhooks (`NextProtos = ["http/1.1"]` in `k8s.io/apiserver/pkg/util/webhook`), so there is no
/// `GOAWAY` to close a connection gracefully.
pub const APISERVER_IDLE_CONN_TIMEOUT: Duration = Duration::from_secs(90);

/// The admission webhook's limits: the API server sends small reviews over HTTP/1.1 keep-alive
/// connections; 5 s to send a head or a body is generous for it. An idle connection is kept
/// 120 s, 30 s longer than the API server keeps it ([`APISERVER_IDLE_CONN_TIMEOUT`]), so the
/// API server always closes first and never writes a request on a connection being closed.
pub const WEBHOOK_LIMITS: Limits = Limits {
    handshake: Duration::from_secs(5),
    first_request: Duration::from_secs(8),
    header_read: Duration::from_secs(5),
    idle: Duration::from_secs(120),
    body: Duration::from_secs(5),
    h2_keep_alive: Duration::from_secs(20),
    max_connections: 256,
    max_h2_streams: 64,
    max_header_bytes: 64 * 1024,
};

/// The `/metrics`, `/healthz`, `/readyz` listener's limits: scrapers and kubelet probes.
// The webhook's idle limit outlives the API server's, so the API server always closes first.
const _: () = assert!(WEBHOOK_LIMITS.idle.as_secs() > APISERVER_IDLE_CONN_TIMEOUT.as_secs());

/// Probes open a connection per request; idle connections are closed after 5 s.
pub const METRICS_LIMITS: Limits = Limits {
    handshake: Duration::from_secs(5),
    first_request: Duration::from_secs(8),
    header_read: Duration::from_secs(5),
    idle: Duration::from_secs(5),
    body: Duration::from_secs(5),
    h2_keep_alive: Duration::from_secs(20),
    max_connections: 64,
    max_h2_streams: 16,
    max_header_bytes: 32 * 1024,
};

/// Applies `limits` to an axum-server `server` (HTTP builder and first-request timeout). hyper's
/// header-read timer runs from the end of an answer, so it is the idle timeout here; the head's
/// own limit is [`crate::drain::Guard`]'s.
pub fn configure<A: axum_server::Address, Acc>(
    mut server: axum_server::Server<A, Acc>,
    limits: &Limits,
) -> axum_server::Server<A, Acc> {
    let builder = server.http_builder();
    builder
        .http1()
        .header_read_timeout(limits.idle.max(limits.header_read))
        .keep_alive(true);
    builder
        .http2()
        .max_concurrent_streams(limits.max_h2_streams)
        .keep_alive_interval(limits.h2_keep_alive)
        .keep_alive_timeout(limits.h2_keep_alive)
        .max_header_list_size(limits.max_header_bytes);
    server.first_request_timeout(limits.first_request)
}

/// `router` with the body timeouts of `limits`: a request whose handler (body read included)
/// has not answered within `limits.body` gets `408` and its connection is closed, and a body
/// that sends no data for `limits.body` fails. A client trickling a body a byte a second is
/// cut off by the first.
pub(crate) fn with_body_timeout(router: Router, limits: &Limits) -> Router {
    router
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            limits.body,
        ))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.body,
        ))
}

/// A make-service that hands each connection a clone of the router together with one of
/// `max_connections` slots; a connection that finds none gets `503` with `Connection: close`
/// on every request. The slot is released when the connection (and so the service) is dropped.
#[derive(Clone, Debug)]
pub(crate) struct ConnectionLimit {
    router: Router,
    slots: Arc<Semaphore>,
}

impl ConnectionLimit {
    /// At most `limits.max_connections` connections served by `router` at once.
    pub(crate) fn new(router: Router, limits: &Limits) -> Self {
        Self {
            router,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
        }
    }
}

impl<T> tower::Service<T> for ConnectionLimit {
    type Response = Limited;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Limited, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _target: T) -> Self::Future {
        let slot = self.slots.clone().try_acquire_owned().ok().map(Arc::new);
        if slot.is_none() {
            tracing::warn!("connection limit reached; answering 503");
        }
        std::future::ready(Ok(Limited {
            router: self.router.clone(),
            _slot: slot.clone(),
            admitted: slot.is_some(),
        }))
    }
}

/// One connection's service: the router when the connection holds a slot, else `503`.
#[derive(Clone, Debug)]
pub(crate) struct Limited {
    router: Router,
    _slot: Option<Arc<OwnedSemaphorePermit>>,
    admitted: bool,
}

impl<B> tower::Service<Request<B>> for Limited
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !self.admitted {
            let mut response = Response::new(Body::from("too many connections\n"));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Box::pin(std::future::ready(Ok(response)));
        }
        let mut router = self.router.clone();
        Box::pin(async move { tower::Service::call(&mut router, request.map(Body::new)).await })
    }
}

/// Serves `router` over plain HTTP on `listener` with `limits` until `shutdown`, then stops
/// accepting and gives open requests `grace` to finish. For the operator's `/metrics` listener.
///
/// # Errors
/// The listener's I/O error.
pub async fn serve_plain(
    listener: std::net::TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let handle: axum_server::Handle<SocketAddr> = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(grace));
    });
    let acceptor = crate::drain::Guard::new(
        axum_server::accept::DefaultAcceptor,
        crate::drain::Drain::new(),
        limits.header_read,
    );
    let server = configure(axum_server::from_tcp(listener)?.acceptor(acceptor), &limits);
    server
        .handle(handle)
        .serve(ConnectionLimit::new(
            with_body_timeout(router, &limits),
            &limits,
        ))
        .await
}
