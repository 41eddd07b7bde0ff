//! Real servers on loopback for the metric-source tests: an HTTP server wrapper for axum
//! routers, a vLLM-like exporter, a real Prometheus process scraping it, a bearer-token reverse
//! proxy and a server that accepts connections and never answers.
#![allow(dead_code)] // Each test binary uses a different subset.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use llmscaler::metrics::{Endpoint, MetricsClient, PrometheusSource};
use llmscaler_testkit::{Check, wait_for};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How long to wait for a server (Prometheus start-up, first scrapes) before failing, in seconds.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(90);

/// Installs the crypto provider, as `main` does.
pub fn init() {
    llmscaler::metrics::ensure_crypto_provider();
}

/// An axum router served on `127.0.0.1:<free port>`, stopped on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl TestServer {
    /// Serves `router` on a fresh loopback port.
    pub async fn start(router: Router) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.expect("serve");
        });
        Self { addr, task }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TCP server that accepts every connection, reads nothing and never answers.
pub struct HangingServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl HangingServer {
    /// Accepts connections and never writes a byte.
    pub async fn start() -> Self {
        Self::start_with(b"").await
    }

    /// Accepts connections, writes `prefix` (e.g. a status line, headers and part of a body),
    /// then stalls forever.
    pub async fn start_with(prefix: &'static [u8]) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                if !prefix.is_empty() {
                    // Read the request head first, as a real server does.
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = socket.write_all(prefix).await;
                }
                held.push(socket);
            }
        });
        Self { addr, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for HangingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The exposition text the exporter serves: two vLLM pods with `pod`, `namespace`, `app` labels.
///
/// - `vllm:num_requests_waiting`: 3 and 5 (avg 4)
/// - `vllm:kv_cache_usage_perc`: 0.25 and 0.75 (avg 0.5)
/// - `vllm:num_requests_running`: 2 and 6 (sum 8)
/// - `vllm:time_to_first_token_seconds`: a histogram with every bucket at 0 (no request yet)
pub const EXPORTER_TEXT: &str = r#"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{pod="vllm-a",namespace="llm",app="vllm"} 3
vllm:num_requests_waiting{pod="vllm-b",namespace="llm",app="vllm"} 5
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{pod="vllm-a",namespace="llm",app="vllm"} 0.25
vllm:kv_cache_usage_perc{pod="vllm-b",namespace="llm",app="vllm"} 0.75
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{pod="vllm-a",namespace="llm",app="vllm"} 2
vllm:num_requests_running{pod="vllm-b",namespace="llm",app="vllm"} 6
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{pod="vllm-a",namespace="llm",app="vllm",le="0.1"} 0
vllm:time_to_first_token_seconds_bucket{pod="vllm-a",namespace="llm",app="vllm",le="0.5"} 0
vllm:time_to_first_token_seconds_bucket{pod="vllm-a",namespace="llm",app="vllm",le="1"} 0
vllm:time_to_first_token_seconds_bucket{pod="vllm-a",namespace="llm",app="vllm",le="+Inf"} 0
vllm:time_to_first_token_seconds_sum{pod="vllm-a",namespace="llm",app="vllm"} 0
vllm:time_to_first_token_seconds_count{pod="vllm-a",namespace="llm",app="vllm"} 0
vllm:time_to_first_token_seconds_bucket{pod="vllm-b",namespace="llm",app="vllm",le="0.1"} 0
vllm:time_to_first_token_seconds_bucket{pod="vllm-b",namespace="llm",app="vllm",le="0.5"} 0
vllm:time_to_first_token_seconds_bucket{pod="vllm-b",namespace="llm",app="vllm",le="1"} 0
vllm:time_to_first_token_seconds_bucket{pod="vllm-b",namespace="llm",app="vllm",le="+Inf"} 0
vllm:time_to_first_token_seconds_sum{pod="vllm-b",namespace="llm",app="vllm"} 0
vllm:time_to_first_token_seconds_count{pod="vllm-b",namespace="llm",app="vllm"} 0
"#;

/// Starts the vLLM-like exporter (`GET /metrics`).
pub async fn start_exporter() -> TestServer {
    let router = Router::new().route(
        "/metrics",
        axum::routing::get(|| async {
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                EXPORTER_TEXT,
            )
        }),
    );
    TestServer::start(router).await
}

/// A real Prometheus process on a loopback port, scraping one target every second; the
/// launcher is shared with the end-to-end tests (`llmscaler_testkit::prometheus`). Killed on
/// drop.
pub struct Prometheus(llmscaler_testkit::prometheus::Prometheus);

impl Prometheus {
    /// Starts Prometheus scraping `http://{target}/metrics` every second and waits until its
    /// HTTP API answers. Panics with Prometheus' log when it cannot start: these tests never
    /// skip.
    pub async fn start(target: SocketAddr) -> Self {
        match llmscaler_testkit::prometheus::Prometheus::start(target).await {
            Ok(prometheus) => Self(prometheus),
            Err(err) => panic!("{err:#}"),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// The last lines of Prometheus' log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.0.log_tail()
    }

    /// Waits (at most [`STARTUP_DEADLINE`]) until `query` returns exactly `want` through the
    /// source under test; panics with what it last saw otherwise.
    pub async fn wait_for_value(&self, source: &PrometheusSource, query: &str, want: f64) {
        let waited = wait_for(
            &format!("`{query}` to return {want} (prometheus at {})", self.url()),
            STARTUP_DEADLINE,
            || async move {
                Ok(match source.query(query).await {
                    Ok(v) if v == want => Check::Done(()),
                    Ok(v) => Check::NotYet(format!("got {v}")),
                    Err(e) => Check::NotYet(e.to_string()),
                })
            },
        )
        .await;
        if let Err(err) = waited {
            panic!("{err:#}; prometheus log:\n{}", self.log_tail());
        }
    }
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    llmscaler_testkit::free_port().expect("bind a loopback port")
}

/// A Prometheus source on the shared client with the given headers and timeout.
pub fn prometheus_source(
    client: &MetricsClient,
    url: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> PrometheusSource {
    let headers = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let endpoint = Endpoint::new(url, &headers, client.policy())
        .expect("endpoint")
        .with_timeout(timeout);
    PrometheusSource::new(client.clone(), endpoint)
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    token: String,
    http: reqwest::Client,
}

/// A reverse proxy in front of `upstream` that demands `Authorization: Bearer <token>` and
/// answers 401 otherwise.
pub async fn start_bearer_proxy(upstream: &str, token: &str) -> TestServer {
    let state = ProxyState {
        upstream: upstream.trim_end_matches('/').to_owned(),
        token: token.to_owned(),
        http: reqwest::Client::new(),
    };
    let router = Router::new().fallback(proxy).with_state(state);
    TestServer::start(router).await
}

async fn proxy(State(state): State<ProxyState>, headers: HeaderMap, request: Request) -> Response {
    let expected = format!("Bearer {}", state.token);
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == expected);
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized\n",
        )
            .into_response();
    }
    let path_and_query = request
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    let upstream = match state
        .http
        .get(format!("{}{path_and_query}", state.upstream))
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status =
        StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = upstream
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    let body = upstream.bytes().await.unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
