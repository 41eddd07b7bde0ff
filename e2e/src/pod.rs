//! One emulated vLLM server per pod (`vllm-emulator serve`, the image of the test chart
//! `charts/vllm-emulator`) and its graceful-drain preStop (`vllm-emulator drain`).
//!
//! `serve` answers `POST /v1/completions` (`{"max_tokens": N}`, default 16) after decoding N
//! tokens at `--tokens-per-second` (with `"stream": true`, as server-sent events, one per token), at most `--max-running` requests at once (the rest wait in
//! order), and exports `vllm:num_requests_running`, `vllm:num_requests_waiting` and
//! `vllm:request_success_total` on `/metrics`; `/health` answers 200. On SIGTERM it stops
//! accepting connections and finishes the requests it holds for at most
//! `--shutdown-timeout-seconds`, then exits (requests still running are cut).
//!
//! `drain` (the preStop hook) waits `--endpoint-sync-seconds` (the time for the pod's removal
//! from the Service's endpoints to reach every kube-proxy), then polls `/metrics` until running
//! and waiting are both 0, for at most `--drain-seconds`. It always exits 0 so the kubelet goes on
//! to SIGTERM; what it saw goes to stderr.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// Settings of `vllm-emulator serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to serve the API, `/metrics` and `/health` on.
    #[arg(long, default_value = "0.0.0.0:8000")]
    pub listen: SocketAddr,
    /// Decode speed of one request, tokens per second.
    #[arg(long, default_value_t = 100.0)]
    pub tokens_per_second: f64,
    /// Requests decoded at once; more wait.
    #[arg(long, default_value_t = 16)]
    pub max_running: usize,
    /// After SIGTERM, seconds to finish the requests held before exiting.
    #[arg(long, default_value_t = 20.0)]
    pub shutdown_timeout_seconds: f64,
    /// `model` of the answers and the `model_name` label.
    #[arg(long, default_value = "emulated")]
    pub model: String,
    /// Seconds before the server listens, as vLLM loads its model before its API server
    /// accepts connections (minutes for the tiny model on CPU, `docs/benchmarks/real-vllm.md`);
    /// `/health` is unreachable meanwhile, so the pod is not Ready. SIGTERM ends the wait.
    #[arg(long, default_value_t = 0.0)]
    pub load_seconds: f64,
}

/// Settings of `vllm-emulator drain`.
#[derive(clap::Args, Debug, Clone)]
pub struct DrainArgs {
    /// The server's metrics.
    #[arg(long, default_value = "http://127.0.0.1:8000/metrics")]
    pub metrics_url: String,
    /// Seconds to wait first, while the endpoint removal propagates.
    #[arg(long, default_value_t = 5.0)]
    pub endpoint_sync_seconds: f64,
    /// At most this many seconds waiting for running and waiting requests to reach 0.
    #[arg(long, default_value_t = 30.0)]
    pub drain_seconds: f64,
}

#[derive(Debug)]
struct Server {
    running: AtomicUsize,
    waiting: AtomicUsize,
    success: AtomicU64,
    slots: Arc<Semaphore>,
    tokens_per_second: f64,
    model: String,
}

/// Decrements a gauge when dropped, so a request cut by the client still leaves the counts right.
struct Gauge<'a>(&'a AtomicUsize);

impl<'a> Gauge<'a> {
    fn enter(gauge: &'a AtomicUsize) -> Self {
        gauge.fetch_add(1, Ordering::SeqCst);
        Self(gauge)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Decrements `running` when a streamed answer ends or its client goes away.
struct Streaming(Arc<Server>);

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A `"stream": true` answer: one server-sent event per token at the decode speed, then
/// `data: [DONE]` (vLLM's OpenAI-compatible stream).
async fn stream_completion(server: Arc<Server>, tokens: u64) -> axum::response::Response {
    let permit = {
        let _waiting = Gauge::enter(&server.waiting);
        server.slots.clone().acquire_owned().await
    };
    let Ok(permit) = permit else {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    };
    server.running.fetch_add(1, Ordering::SeqCst);
    let interval = Duration::from_secs_f64(1.0 / server.tokens_per_second);
    let state = (0_u64, Streaming(server), permit);
    let events = futures::stream::unfold(state, move |(i, running, permit)| async move {
        if i > tokens {
            return None;
        }
        if i == tokens {
            running.0.success.fetch_add(1, Ordering::SeqCst);
            let done = axum::body::Bytes::from_static(b"data: [DONE]\n\n");
            return Some((
                Ok::<_, std::convert::Infallible>(done),
                (i + 1, running, permit),
            ));
        }
        tokio::time::sleep(interval).await;
        let event = format!(
            "data: {}\n\n",
            json!({"object": "text_completion", "model": running.0.model,
                   "choices": [{"index": 0, "text": "x", "finish_reason": null}]})
        );
        Some((Ok(axum::body::Bytes::from(event)), (i + 1, running, permit)))
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        axum::body::Body::from_stream(events),
    )
        .into_response()
}

async fn completions(
    State(server): State<Arc<Server>>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let tokens = request
        .get("max_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(16)
        .min(100_000);
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        return stream_completion(server, tokens).await;
    }
    let permit = {
        let _waiting = Gauge::enter(&server.waiting);
        server.slots.acquire().await
    };
    let Ok(_permit) = permit else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": "shutting down"})),
        )
            .into_response();
    };
    {
        let _running = Gauge::enter(&server.running);
        // The emulated decode time of the request.
        tokio::time::sleep(Duration::from_secs_f64(
            tokens as f64 / server.tokens_per_second,
        ))
        .await;
    }
    server.success.fetch_add(1, Ordering::SeqCst);
    (
        StatusCode::OK,
        axum::Json(json!({
            "object": "text_completion",
            "model": server.model,
            "choices": [{"index": 0, "text": "x".repeat(tokens.min(64) as usize), "finish_reason": "length"}],
            "usage": {"completion_tokens": tokens},
        })),
    )
        .into_response()
}

/// The Prometheus text of the server's gauges and counter.
fn metrics_text(server: &Server) -> String {
    let label = format!(
        "{{model_name=\"{}\"}}",
        server.model.replace(['\\', '"', '\n'], "_")
    );
    format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
         # TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{label} {}\n\
         # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
         # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{label} {}\n\
         # HELP vllm:request_success_total Count of successfully processed requests.\n\
         # TYPE vllm:request_success_total counter\nvllm:request_success_total{label} {}\n",
        server.running.load(Ordering::SeqCst),
        server.waiting.load(Ordering::SeqCst),
        server.success.load(Ordering::SeqCst),
    )
}

async fn metrics(State(server): State<Arc<Server>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics_text(&server),
    )
}

/// Serves until `shutdown`, then finishes held requests for at most the shutdown timeout.
///
/// # Errors
/// When the address cannot be bound or serving fails.
pub async fn serve(args: ServeArgs, shutdown: llmscaler::process::Shutdown) -> anyhow::Result<()> {
    let server = Arc::new(Server {
        running: AtomicUsize::new(0),
        waiting: AtomicUsize::new(0),
        success: AtomicU64::new(0),
        slots: Arc::new(Semaphore::new(args.max_running.max(1))),
        tokens_per_second: args.tokens_per_second.max(0.001),
        model: args.model.clone(),
    });
    let app = Router::new()
        .route("/v1/completions", post(completions))
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .with_state(server.clone());
    if args.load_seconds > 0.0 {
        eprintln!("vllm-emulator serve: loading for {}s", args.load_seconds);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs_f64(args.load_seconds)) => {}
            () = shutdown.requested() => return Ok(()),
        }
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    eprintln!("vllm-emulator serve: listening on {}", args.listen);
    let stop = shutdown.clone();
    let serving = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.requested().await })
        .into_future();
    tokio::pin!(serving);
    tokio::select! {
        served = &mut serving => return served.map_err(Into::into),
        () = shutdown.requested() => {}
    }
    let held = server.running.load(Ordering::SeqCst) + server.waiting.load(Ordering::SeqCst);
    eprintln!(
        "vllm-emulator serve: SIGTERM with {held} request(s) held; finishing them for at most {}s",
        args.shutdown_timeout_seconds
    );
    let timeout = Duration::from_secs_f64(args.shutdown_timeout_seconds.max(0.0));
    match tokio::time::timeout(timeout, &mut serving).await {
        Ok(served) => served.map_err(Into::into),
        Err(_) => {
            eprintln!(
                "vllm-emulator serve: shutdown timeout reached with {} running, {} waiting; exiting",
                server.running.load(Ordering::SeqCst),
                server.waiting.load(Ordering::SeqCst)
            );
            Ok(())
        }
    }
}

/// Sum of the samples of `name` (any labels) in a Prometheus text, `None` when absent.
pub(crate) fn sample_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let Some(v) = value {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// The preStop drain: endpoint-sync wait, then until running + waiting is 0 or the drain budget
/// is spent. Never fails: problems are reported on stderr.
pub async fn drain(args: DrainArgs) {
    let start = Instant::now();
    // The endpoint-sync wait is the protocol itself: kube-proxies learn of the removal
    // asynchronously and nothing on the pod can observe when they all have.
    tokio::time::sleep(Duration::from_secs_f64(args.endpoint_sync_seconds.max(0.0))).await;
    let deadline = Instant::now() + Duration::from_secs_f64(args.drain_seconds.max(0.0));
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
    {
        Ok(client) => client,
        Err(err) => {
            eprintln!("vllm-emulator drain: no HTTP client ({err}); not waiting");
            return;
        }
    };
    loop {
        let last = match client.get(&args.metrics_url).send().await {
            Ok(resp) => {
                let text = resp.text().await.unwrap_or_default();
                let running = sample_sum(&text, "vllm:num_requests_running").unwrap_or(0.0);
                let waiting = sample_sum(&text, "vllm:num_requests_waiting").unwrap_or(0.0);
                if running == 0.0 && waiting == 0.0 {
                    eprintln!(
                        "vllm-emulator drain: idle after {:.1}s",
                        start.elapsed().as_secs_f64()
                    );
                    return;
                }
                format!("{running} running, {waiting} waiting")
            }
            Err(err) => format!("metrics unreadable: {err}"),
        };
        if Instant::now() >= deadline {
            eprintln!("vllm-emulator drain: drain budget spent with {last}; letting SIGTERM come");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await; // poll interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_sum_reads_every_labelled_sample_and_nothing_else() {
        let text = "# TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_running{model_name=\"a\"} 2\n\
                    vllm:num_requests_running{model_name=\"b\"} 3\n\
                    vllm:num_requests_running_total 9\n\
                    vllm:num_requests_waiting 1\n";
        assert_eq!(sample_sum(text, "vllm:num_requests_running"), Some(5.0));
        assert_eq!(sample_sum(text, "vllm:num_requests_waiting"), Some(1.0));
        assert_eq!(sample_sum(text, "vllm:kv_cache_usage_perc"), None);
    }
}
