//! `llmscaler activator`: holds the requests of a Service whose fleet is at zero while the
//! first replica loads (docs/scaling.md#holding-requests-while-waking-from-zero; Knative's
//! activator is the anchor). The operator registers each held Service over the [`control`]
//! API and routes the Service to the activator with an EndpointSlice of its own while no
//! replica is Ready; the activator listens on one port per Service (from `--ports`), holds
//! what arrives ([`queue`]), tells the operator at once through the long poll of
//! `GET /v1/held`, and forwards the held requests in arrival order to the first Ready endpoint
//! it sees in the Service's own EndpointSlices ([`endpoints`], [`proxy`]).
//!
//! API rights: get, list and watch of EndpointSlices, nothing else (docs/security.md#activator).

pub mod control;
mod endpoints;
mod proxy;
mod queue;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, put};
use llmscaler_webhooks::listener::Limits;
use tokio::sync::{oneshot, watch};

use crate::process::Shutdown;
use control::{HeldReport, HeldService, HoldConfig, Registered};
use queue::HoldQueue;

/// Command-line arguments of `llmscaler activator`.
#[derive(clap::Args, Debug, Clone)]
pub struct ActivatorArgs {
    /// Address of the control API (`/v1/services`, `/v1/held`) and `/healthz`.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub control_addr: SocketAddr,
    /// The ports held Services are served on, `FIRST-LAST` (one per Service).
    #[arg(long, default_value = "18000-18999", value_parser = parse_ports)]
    pub ports: RangeInclusive<u16>,
    /// The address the per-Service listeners bind.
    #[arg(long, default_value = "0.0.0.0")]
    pub listen_ip: IpAddr,
    /// Largest request body forwarded, bytes; a larger one fails the forwarded request.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: usize,
}

/// Parses `FIRST-LAST` (both ports, FIRST ≤ LAST).
fn parse_ports(raw: &str) -> Result<RangeInclusive<u16>, String> {
    let (first, last) = raw
        .split_once('-')
        .ok_or_else(|| format!("{raw:?}: expected FIRST-LAST, e.g. 18000-18999"))?;
    let port = |s: &str| {
        s.trim()
            .parse::<u16>()
            .map_err(|e| format!("{raw:?}: {s:?} is not a port: {e}"))
    };
    let (first, last) = (port(first)?, port(last)?);
    if first == 0 || first > last {
        return Err(format!("{raw:?}: FIRST must be 1 or more and at most LAST"));
    }
    Ok(first..=last)
}

/// The limits of a held Service's listener (`docs/security.md#listeners`): a request may wait
/// for its answer's head up to the longest hold (600 s) plus the replica's own time, so the
/// whole-request limit is 630 s; heads and idle connections are bounded as elsewhere.
pub const HOLD_LIMITS: Limits = Limits {
    handshake: Duration::from_secs(5),
    first_request: Duration::from_secs(10),
    header_read: Duration::from_secs(10),
    idle: Duration::from_secs(60),
    body: Duration::from_secs(630),
    h2_keep_alive: Duration::from_secs(20),
    max_connections: 4096,
    max_h2_streams: 128,
    max_header_bytes: 64 * 1024,
};

/// The control listener's limits: the long poll answers within 25 s.
pub const CONTROL_LIMITS: Limits = Limits {
    body: Duration::from_secs(40),
    max_connections: 32,
    ..llmscaler_webhooks::listener::METRICS_LIMITS
};

/// Why the activator stopped.
#[derive(Debug, thiserror::Error)]
pub enum ActivatorError {
    /// No Kubernetes credentials.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// The control address is taken.
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, #[source] std::io::Error),
}

/// One held Service.
pub(crate) struct Held {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// The activator's port for it.
    pub listen_port: u16,
    /// Largest forwarded request body, bytes.
    pub max_body_bytes: usize,
    /// The forwarding client.
    pub forwarder: proxy::Forwarder,
    config: Mutex<HoldConfig>,
    queue: Mutex<HoldQueue<oneshot::Sender<()>>>,
    ready: watch::Receiver<Vec<SocketAddr>>,
    next: AtomicUsize,
    seq: watch::Sender<u64>,
    stop: watch::Sender<bool>,
}

impl Held {
    /// The config in force.
    pub(crate) fn config(&self) -> HoldConfig {
        lock(&self.config).clone()
    }

    /// The hold queue.
    pub(crate) fn queue(&self) -> MutexGuard<'_, HoldQueue<oneshot::Sender<()>>> {
        lock(&self.queue)
    }

    /// Whether a Ready endpoint is known now.
    pub(crate) fn ready_now(&self) -> bool {
        !self.ready.borrow().is_empty()
    }

    /// The next Ready endpoint, round robin; `None` when there is none.
    pub(crate) fn pick(&self) -> Option<SocketAddr> {
        let ready = self.ready.borrow();
        if ready.is_empty() {
            return None;
        }
        let at = self.next.fetch_add(1, Ordering::Relaxed) % ready.len();
        ready.get(at).copied()
    }

    /// Tells long polls that the report changed.
    pub(crate) fn changed(&self) {
        self.seq.send_modify(|s| *s += 1);
    }

    fn report(&self) -> HeldService {
        let queue = self.queue();
        HeldService {
            namespace: self.namespace.clone(),
            service: self.service.clone(),
            listen_port: self.listen_port,
            held: u64::try_from(queue.len()).unwrap_or(u64::MAX),
            held_total: queue.held_total(),
            refused_total: queue.refused_total(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every held Service of this activator.
struct Registry {
    client: kube::Client,
    args: ActivatorArgs,
    forwarder: proxy::Forwarder,
    services: Mutex<BTreeMap<(String, String), Arc<Held>>>,
    seq: watch::Sender<u64>,
}

impl Registry {
    fn report(&self) -> HeldReport {
        let services: Vec<Arc<Held>> = lock(&self.services).values().cloned().collect();
        HeldReport {
            seq: *self.seq.borrow(),
            services: services.iter().map(|h| h.report()).collect(),
        }
    }

    /// Registers (or updates) a Service: binds a free port of the range, starts its endpoints
    /// watch, its releaser and its listener.
    fn register(
        self: &Arc<Self>,
        namespace: &str,
        service: &str,
        config: HoldConfig,
    ) -> Result<Registered, String> {
        control::check_registration(namespace, service, &config)?;
        let key = (namespace.to_owned(), service.to_owned());
        let mut services = lock(&self.services);
        if let Some(held) = services.get(&key) {
            let port_changed = held.config().port != config.port;
            if !port_changed {
                held.queue().set_max(config.max_held_requests as usize);
                *lock(&held.config) = config;
                return Ok(Registered {
                    listen_port: held.listen_port,
                });
            }
            // Another Service port: a new endpoints watch.
            let _ = held.stop.send(true);
            services.remove(&key);
        }
        let taken: Vec<u16> = services.values().map(|h| h.listen_port).collect();
        let (listener, listen_port) = self
            .args
            .ports
            .clone()
            .filter(|p| !taken.contains(p))
            .find_map(|p| {
                std::net::TcpListener::bind(SocketAddr::new(self.args.listen_ip, p))
                    .ok()
                    .map(|l| (l, p))
            })
            .ok_or_else(|| "no free port left in --ports".to_owned())?;
        let (ready_tx, ready_rx) = watch::channel(Vec::new());
        let (stop, stop_rx) = watch::channel(false);
        let held = Arc::new(Held {
            namespace: namespace.to_owned(),
            service: service.to_owned(),
            listen_port,
            max_body_bytes: self.args.max_body_bytes,
            forwarder: self.forwarder.clone(),
            queue: Mutex::new(HoldQueue::new(config.max_held_requests as usize)),
            config: Mutex::new(config.clone()),
            ready: ready_rx,
            next: AtomicUsize::new(0),
            seq: self.seq.clone(),
            stop,
        });
        tokio::spawn(endpoints::watch_ready(
            self.client.clone(),
            namespace.to_owned(),
            service.to_owned(),
            config.port.clone(),
            ready_tx,
        ));
        tokio::spawn(release_when_ready(held.clone(), stop_rx.clone()));
        let router = Router::new()
            .fallback(proxy::handle)
            .with_state(held.clone());
        let mut stopped = stop_rx;
        tokio::spawn(async move {
            let served = llmscaler_webhooks::listener::serve_plain(
                listener,
                router,
                HOLD_LIMITS,
                async move {
                    let _ = stopped.wait_for(|s| *s).await;
                },
                Duration::from_secs(30),
            )
            .await;
            if let Err(err) = served {
                tracing::error!(port = listen_port, error = %err, "a held Service's listener failed");
            }
        });
        tracing::info!(
            namespace,
            service,
            port = listen_port,
            "holding the Service's requests"
        );
        services.insert(key, held);
        drop(services);
        self.seq.send_modify(|s| *s += 1);
        Ok(Registered { listen_port })
    }

    fn unregister(&self, namespace: &str, service: &str) -> bool {
        let removed = lock(&self.services).remove(&(namespace.to_owned(), service.to_owned()));
        if let Some(held) = &removed {
            let _ = held.stop.send(true);
            self.seq.send_modify(|s| *s += 1);
        }
        removed.is_some()
    }
}

/// Releases every held request of `held`, in arrival order, whenever a Ready endpoint is known.
async fn release_when_ready(held: Arc<Held>, mut stop: watch::Receiver<bool>) {
    let mut ready = held.ready.clone();
    loop {
        let waiting = {
            let mut queue = held.queue();
            if held.ready_now() {
                queue.release_all()
            } else {
                Vec::new()
            }
        };
        if !waiting.is_empty() {
            tracing::info!(
                namespace = held.namespace,
                service = held.service,
                released = waiting.len(),
                "a replica is Ready: releasing the held requests"
            );
            for waiter in waiting {
                let _ = waiter.send(());
            }
            held.changed();
        }
        tokio::select! {
            changed = ready.changed() => if changed.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn put_service(
    State(registry): State<Arc<Registry>>,
    Path((namespace, service)): Path<(String, String)>,
    Json(config): Json<HoldConfig>,
) -> axum::response::Response {
    match registry.register(&namespace, &service, config) {
        Ok(registered) => Json(registered).into_response(),
        Err(why) => (StatusCode::UNPROCESSABLE_ENTITY, why).into_response(),
    }
}

async fn delete_service(
    State(registry): State<Arc<Registry>>,
    Path((namespace, service)): Path<(String, String)>,
) -> StatusCode {
    if registry.unregister(&namespace, &service) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
}

async fn held(
    State(registry): State<Arc<Registry>>,
    Query(since): Query<control::Since>,
) -> Json<HeldReport> {
    if let Some(since) = since.since {
        let mut seq = registry.seq.subscribe();
        // A sequence other than `since` answers at once: a later one is news, an earlier one
        // means this activator restarted since the caller's last report.
        let _ = tokio::time::timeout(control::LONG_POLL, seq.wait_for(|s| *s != since)).await;
    }
    Json(registry.report())
}

/// Runs the activator until `shutdown`.
///
/// # Errors
/// [`ActivatorError`] when the client or the control listener cannot be set up.
pub async fn run(args: ActivatorArgs, shutdown: Shutdown) -> Result<(), ActivatorError> {
    let client = kube::Client::try_default()
        .await
        .map_err(ActivatorError::Client)?;
    let control_addr = args.control_addr;
    let listener = std::net::TcpListener::bind(control_addr)
        .map_err(|e| ActivatorError::Listen(control_addr, e))?;
    let (seq, _) = watch::channel(0_u64);
    let registry = Arc::new(Registry {
        client,
        args,
        forwarder: proxy::forwarder(),
        services: Mutex::new(BTreeMap::new()),
        seq,
    });
    let router = Router::new()
        .route(
            "/v1/services/{namespace}/{service}",
            put(put_service).delete(delete_service),
        )
        .route("/v1/held", get(held))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(registry.clone());
    tracing::info!(addr = %control_addr, "activator control API listening");
    let stop = shutdown.clone();
    let served = llmscaler_webhooks::listener::serve_plain(
        listener,
        router,
        CONTROL_LIMITS,
        async move { stop.wait().await },
        Duration::from_secs(5),
    )
    .await;
    let keys: Vec<(String, String)> = lock(&registry.services).keys().cloned().collect();
    for (namespace, service) in keys {
        registry.unregister(&namespace, &service);
    }
    served.map_err(|e| ActivatorError::Listen(control_addr, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ranges_parse_or_say_why_not() {
        assert_eq!(parse_ports("18000-18999"), Ok(18000..=18999));
        assert!(parse_ports("18000").is_err());
        assert!(parse_ports("0-10").is_err());
        assert!(parse_ports("20-10").is_err());
        assert!(parse_ports("a-b").is_err());
    }
}

/// The data path without a cluster: a held Service whose Ready endpoints the test sets by hand.
#[cfg(test)]
mod data_path_tests {
    use super::*;
    use axum::body::Body;
    use std::time::Instant;

    /// A replica streaming three events 100 ms apart.
    async fn replica() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(|| async {
            let events = futures::stream::unfold(0, |i| async move {
                if i == 3 {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                Some((
                    Ok::<_, std::convert::Infallible>(format!("data: {i}\n\n")),
                    i + 1,
                ))
            });
            Body::from_stream(events)
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    /// A held Service (at most `max` held, `timeout_s` each) served on a loopback port; the
    /// sender sets its Ready endpoints.
    async fn held_service(
        max: u32,
        timeout_s: u32,
    ) -> (Arc<Held>, watch::Sender<Vec<SocketAddr>>, SocketAddr) {
        crate::process::install_crypto_provider();
        let (ready_tx, ready) = watch::channel(Vec::new());
        let (seq, _) = watch::channel(0);
        let (stop, stop_rx) = watch::channel(false);
        let held = Arc::new(Held {
            namespace: "team-a".into(),
            service: "vllm".into(),
            listen_port: 0,
            max_body_bytes: 1024,
            forwarder: proxy::forwarder(),
            config: Mutex::new(HoldConfig {
                port: String::new(),
                max_held_requests: max,
                hold_timeout_seconds: timeout_s,
            }),
            queue: Mutex::new(HoldQueue::new(max as usize)),
            ready,
            next: AtomicUsize::new(0),
            seq,
            stop,
        });
        tokio::spawn(release_when_ready(held.clone(), stop_rx));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .fallback(proxy::handle)
            .with_state(held.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (held, ready_tx, addr)
    }

    /// Waits (on the report's sequence, no polling) until `held` holds `n` requests.
    async fn until_held(held: &Held, n: usize) {
        let mut seq = held.seq.subscribe();
        tokio::time::timeout(Duration::from_secs(10), async {
            while held.queue().len() != n {
                seq.changed().await.unwrap();
            }
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn holds_up_to_the_bound_then_streams_the_held_requests_once_a_replica_is_ready() {
        let replica = replica().await;
        let (held, ready, addr) = held_service(2, 30).await;
        let http = reqwest::Client::new();
        let send = |http: reqwest::Client| async move {
            let sent = Instant::now();
            let mut response = http
                .get(format!("http://{addr}/v1/x"))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let retry = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let (mut body, mut first) = (String::new(), None);
            while let Some(chunk) = response.chunk().await.unwrap() {
                first.get_or_insert_with(|| sent.elapsed());
                body.push_str(&String::from_utf8_lossy(&chunk));
            }
            (status, retry, body, first, sent.elapsed())
        };
        let a = tokio::spawn(send(http.clone()));
        until_held(&held, 1).await;
        let b = tokio::spawn(send(http.clone()));
        until_held(&held, 2).await;
        // The bound: the third is refused at once.
        let (status, retry, body, _, _) = send(http.clone()).await;
        assert_eq!((status, retry.as_deref()), (503, Some("30")), "{body}");
        assert_eq!(held.report().refused_total, 1);
        // A replica is Ready: both held requests go, and stream.
        ready.send(vec![replica]).unwrap();
        for task in [a, b] {
            let (status, _, body, first, total) = task.await.unwrap();
            assert_eq!(status, 200);
            assert_eq!(body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
            let first = first.unwrap();
            assert!(
                total - first >= Duration::from_millis(150),
                "streamed, not buffered: first event at {first:?}, end at {total:?}"
            );
        }
        assert_eq!(held.report().held, 0);
        // Ready: forwarded at once, nothing held.
        let (status, ..) = send(http).await;
        assert_eq!(status, 200);
        assert_eq!(held.report().held_total, 2);
    }

    #[tokio::test]
    async fn a_hold_times_out_with_retry_after_and_leaves_the_queue() {
        let (held, _ready, addr) = held_service(5, 1).await;
        let response = reqwest::get(format!("http://{addr}/")).await.unwrap();
        assert_eq!(response.status().as_u16(), 503);
        assert_eq!(response.headers()["retry-after"], "1");
        assert_eq!(held.report().held, 0);
        assert_eq!(held.report().held_total, 1);
    }

    #[tokio::test]
    async fn a_client_that_goes_away_leaves_the_queue() {
        let (held, _ready, addr) = held_service(5, 30).await;
        let request = tokio::spawn(reqwest::get(format!("http://{addr}/")));
        until_held(&held, 1).await;
        request.abort();
        until_held(&held, 0).await;
    }
}
