//! Admission latency and throughput over TLS on loopback, beside a bare rustls+axum server that
//! returns a fixed AdmissionReview (issue 5). Not a test: it prints numbers.
//!
//! `cargo bench -p llmscaler-webhooks --bench admission_tls` (release build). Knobs, from the
//! environment: `BENCH_RATE` (requests per second of the fixed-rate run, default 500),
//! `BENCH_SECONDS` (length of each run, default 5), `BENCH_CONCURRENCY` (requests in flight in
//! the throughput run, default 16), `BENCH_ROUNDS` (rounds over the three servers, default 3;
//! the figures are medians).
//!
//! For each server: a warm-up, then a fixed-rate open-loop run over keep-alive connections
//! (a request is sent at each tick whether or not earlier ones have returned; latency runs from
//! sending to the end of the response body), then a closed-loop run with `BENCH_CONCURRENCY`
//! requests in flight for the maximum throughput. Client and servers share the process and the
//! machine. Last, the cost of the pure handlers alone (`review::handle`, no network).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use llmscaler_certs::{CertConfig, pki};
use llmscaler_webhooks::server::{self, CertResolver};
use serde_json::json;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn review_body() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4",
            "kind": {"group": "autoscaling.modelsphere.dev", "version": "v1alpha1", "kind": "LLMScaler"},
            "resource": {"group": "autoscaling.modelsphere.dev", "version": "v1alpha1", "resource": "llmscalers"},
            "name": "llama-70b",
            "namespace": "inference",
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": {
                "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
                "kind": "LLMScaler",
                "metadata": {"name": "llama-70b", "namespace": "inference", "labels": {"app": "llama"}},
                "spec": {
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b"},
                    "serverAddress": "http://prometheus.monitoring:9090",
                    "minReplicas": 1,
                    "maxReplicas": 16,
                    "metrics": [
                        {"name": "queue", "query": "avg(vllm:num_requests_waiting{model=\"llama-70b\"})", "target": "4"},
                        {"name": "kv", "query": "avg(vllm:gpu_cache_usage_perc{model=\"llama-70b\"})", "target": "0.8"}
                    ],
                    "scaleDown": {"stabilizationWindowSeconds": 300}
                }
            },
            "oldObject": null,
            "dryRun": false,
        }
    }))
    .unwrap_or_default()
}

/// The bare server's fixed answer: an allowed AdmissionReview.
const FIXED_REVIEW: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"0c9a8d74-9cb7-44dd-b98e-09fd62def2f4","allowed":true,"status":{}}}"#;

async fn start_webhook(resolver: Arc<CertResolver>) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server::serve(
        listener,
        resolver,
        std::future::pending::<()>(),
        server::WebhookContext::new(llmscaler_api::OperatorPolicy::default()),
        server::DEFAULT_DRAIN,
    ));
    addr
}

async fn start_bare(resolver: Arc<CertResolver>) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let config = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(
        server::tls_config(resolver).expect("tls config"),
    ));
    let app = Router::new().route(
        "/validate",
        post(|| async { ([("content-type", "application/json")], FIXED_REVIEW) }),
    );
    tokio::spawn(async move {
        axum_server::from_tcp_rustls(listener, config)
            .expect("server")
            .serve(app.into_make_service())
            .await
    });
    addr
}

async fn one(client: &reqwest::Client, url: &str, body: &[u8]) -> bool {
    let sent = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await;
    match sent {
        Ok(response) if response.status().is_success() => response.bytes().await.is_ok(),
        _ => false,
    }
}

struct Run {
    p50: Duration,
    p99: Duration,
    errors: usize,
    throughput: f64,
}

async fn measure(
    client: &reqwest::Client,
    url: &str,
    body: &[u8],
    rate: u64,
    seconds: u64,
    concurrency: u64,
) -> Run {
    // Warm-up: connections, TLS sessions, caches.
    for _ in 0..200 {
        one(client, url, body).await;
    }
    // Fixed-rate, open loop.
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..rate * seconds {
        tokio::time::sleep_until(start + period * i as u32).await;
        let dispatched = Instant::now();
        let (client, url, body) = (client.clone(), url.to_string(), body.to_vec());
        tasks.push(tokio::spawn(async move {
            let ok = one(&client, &url, &body).await;
            (ok, dispatched.elapsed())
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        match task.await {
            Ok((true, latency)) => latencies.push(latency),
            _ => errors += 1,
        }
    }
    latencies.sort();
    let pick = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let (p50, p99) = (pick(0.50), pick(0.99));
    // Closed loop, `concurrency` in flight.
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    let began = Instant::now();
    for _ in 0..concurrency {
        let (client, url, body) = (client.clone(), url.to_string(), body.to_vec());
        workers.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                if one(&client, &url, &body).await {
                    done += 1;
                }
            }
            done
        }));
    }
    let mut total = 0;
    for worker in workers {
        total += worker.await.unwrap_or(0);
    }
    Run {
        p50,
        p99,
        errors,
        throughput: total as f64 / began.elapsed().as_secs_f64(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let rate = env_or("BENCH_RATE", 500);
    let seconds = env_or("BENCH_SECONDS", 5);
    let concurrency = env_or("BENCH_CONCURRENCY", 16);
    let rounds_wanted = env_or("BENCH_ROUNDS", 3);

    let mut cfg = CertConfig::new("bench", "unused", "llmscaler-webhook");
    cfg.extra_sans = vec!["127.0.0.1".to_string()];
    let certs = pki::new_state(&cfg, time::OffsetDateTime::now_utc()).expect("certificates");
    let resolver =
        CertResolver::from_pem(certs.tls_cert_pem.as_bytes(), certs.tls_key_pem.as_bytes())
            .expect("resolver");
    let webhook = start_webhook(resolver.clone()).await;
    let bare = start_bare(resolver).await;
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(certs.ca_cert_pem.as_bytes()).expect("ca")])
        .pool_max_idle_per_host(64)
        .build()
        .expect("client");
    let body = review_body();

    println!(
        "admission over TLS on loopback, HTTP/1.1 keep-alive, {} byte review; fixed rate {rate}/s for {seconds}s, then {concurrency} in flight for {seconds}s; {} CPUs",
        body.len(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!(
        "{:<18} {:>9} {:>9} {:>7} {:>12}",
        "server", "p50 ms", "p99 ms", "errors", "max req/s"
    );
    let targets = [
        ("bare rustls+axum", format!("https://{bare}/validate")),
        ("webhook /validate", format!("https://{webhook}/validate")),
        ("webhook /mutate", format!("https://{webhook}/mutate")),
    ];
    // Rounds interleave the servers so that load from elsewhere on the machine hits them alike;
    // each figure is the median over the rounds.
    let mut rounds: Vec<Vec<Run>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds_wanted {
        for ((name, url), runs) in targets.iter().zip(rounds.iter_mut()) {
            let run = measure(&client, url, &body, rate, seconds, concurrency).await;
            println!(
                "{:<18} {:>9.3} {:>9.3} {:>7} {:>12.0}   (round {})",
                name,
                ms(run.p50),
                ms(run.p99),
                run.errors,
                run.throughput,
                round + 1
            );
            runs.push(run);
        }
    }
    println!("median of {rounds_wanted} rounds:");
    let mut results = Vec::new();
    for ((name, _), runs) in targets.iter().zip(rounds) {
        let median = |f: fn(&Run) -> f64| {
            let mut values: Vec<f64> = runs.iter().map(f).collect();
            values.sort_by(f64::total_cmp);
            values.get(values.len() / 2).copied().unwrap_or_default()
        };
        let run = Run {
            p50: Duration::from_secs_f64(median(|r| r.p50.as_secs_f64())),
            p99: Duration::from_secs_f64(median(|r| r.p99.as_secs_f64())),
            errors: runs.iter().map(|r| r.errors).sum(),
            throughput: median(|r| r.throughput),
        };
        println!(
            "{name:<18} {:>9.3} {:>9.3} {:>7} {:>12.0}",
            ms(run.p50),
            ms(run.p99),
            run.errors,
            run.throughput
        );
        results.push(run);
    }
    let iterations = 20_000u32;
    let policy = llmscaler_api::OperatorPolicy::default();
    for (name, endpoint) in [
        ("validate", llmscaler_webhooks::review::Endpoint::Validate),
        ("mutate", llmscaler_webhooks::review::Endpoint::Mutate),
    ] {
        let began = Instant::now();
        for _ in 0..iterations {
            std::hint::black_box(llmscaler_webhooks::review::handle(
                endpoint,
                &policy,
                Some("application/json"),
                std::hint::black_box(&body),
            ));
        }
        println!(
            "{name} handler alone (parse, check, answer; no network): {:.1} us per review",
            began.elapsed().as_secs_f64() * 1e6 / f64::from(iterations)
        );
    }
    let bare = &results[0];
    for (name, run) in [("validate", &results[1]), ("mutate", &results[2])] {
        println!(
            "{name}: p50 x{:.2}, p99 x{:.2}, max throughput x{:.2} of the bare server",
            ms(run.p50) / ms(bare.p50),
            ms(run.p99) / ms(bare.p99),
            run.throughput / bare.throughput
        );
    }
}
