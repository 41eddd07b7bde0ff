//! `llmscaler probe` end to end: the real binary against a real Prometheus and a real decision
//! server on loopback; exit statuses 0 (recommendation), 4 (recommendation with a metric skipped),
//! 3 (hold), 2
//! (invalid spec).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

mod support;

use std::path::Path;

use axum::Router;
use axum::http::{StatusCode, header};
use serde_json::{Value, json};
use support::{Prometheus, TestServer, init, prometheus_source, start_exporter};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("stdout is not JSON ({e}): {}\n{}", self.stdout, self.stderr)
        })
    }
}

async fn probe(manifest: &str, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("scaler.yaml");
    std::fs::write(&path, manifest).expect("write manifest");
    run_probe(&path, args).await
}

async fn run_probe(path: &Path, args: &[&str]) -> Run {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_llmscaler"))
        .arg("probe")
        .arg("--scaler")
        .arg(path)
        .args(args)
        .output()
        .await
        .expect("run llmscaler probe");
    let run = Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    eprintln!(
        "probe {args:?} -> {:?}\n{}{}",
        run.code, run.stdout, run.stderr
    );
    run
}

fn prometheus_manifest(server: &str, metrics: &str) -> String {
    format!(
        "apiVersion: autoscaling.modelsphere.dev/v1alpha1\nkind: LLMScaler\nmetadata:\n  \
         name: vllm\n  namespace: llm\nspec:\n  targetRef:\n    apiVersion: apps/v1\n    \
         kind: Deployment\n    name: vllm\n  serverAddress: {server}\n  minReplicas: 1\n  \
         maxReplicas: 5\n  metrics:\n{metrics}"
    )
}

fn custom_manifest(server: &str, min: i32, max: i32) -> String {
    format!(
        "apiVersion: autoscaling.modelsphere.dev/v1alpha1\nkind: LLMScaler\nmetadata:\n  \
         name: vllm\n  namespace: llm\nspec:\n  targetRef:\n    apiVersion: apps/v1\n    \
         kind: Deployment\n    name: vllm\n  metricProvider: Custom\n  customProvider:\n    \
         serviceId: llama-8b\n  serverAddress: {server}\n  serverHeaders:\n    \
         Authorization: Bearer probe-token\n  minReplicas: {min}\n  maxReplicas: {max}\n"
    )
}

#[tokio::test]
async fn probe_against_real_prometheus() {
    init();
    let exporter = start_exporter().await;
    let prometheus = Prometheus::start(exporter.addr).await;
    let client = llmscaler::metrics::MetricsClient::new().expect("client");
    let source = prometheus_source(
        &client,
        &prometheus.url(),
        &[],
        std::time::Duration::from_secs(5),
    );
    prometheus
        .wait_for_value(&source, "count(vllm:kv_cache_usage_perc)", 2.0)
        .await;

    // waiting: ceil(3 × 4 / 2) = 6; kv: ceil(3 × 0.5 / 0.5) = 3; missing: skipped.
    // Largest is 6, clamped to maxReplicas 5.
    let metrics = "  - name: waiting\n    query: avg(vllm:num_requests_waiting)\n    target: \"2\"\n\
                   \x20 - name: kv\n    query: avg(vllm:kv_cache_usage_perc)\n    target: \"0.5\"\n\
                   \x20 - name: missing\n    query: avg(vllm:nothing_here)\n    target: \"1\"\n";
    let manifest = prometheus_manifest(&prometheus.url(), metrics);
    // One metric skipped, the others decided: exit 4.
    let run = probe(&manifest, &["--ready", "3", "--output", "json"]).await;
    assert_eq!(run.code, Some(4), "{}", run.stderr);
    assert_eq!(
        run.json(),
        json!({
            "metrics": [
                {"name": "waiting", "value": 4.0, "error": null, "desired": 6},
                {"name": "kv", "value": 0.5, "error": null, "desired": 3},
                {"name": "missing", "value": null, "desired": null,
                 "error": "Prometheus query `avg(vllm:nothing_here)` returned no data (empty \
                           result); the metric is skipped, not read as 0"},
            ],
            "desired": 5,
            "hold": false
        })
    );

    // Text output, default --ready (minReplicas 1): waiting ceil(1 × 4 / 2) = 2.
    let run = probe(&manifest, &[]).await;
    assert_eq!(run.code, Some(4), "{}", run.stderr);
    assert!(
        run.stdout
            .contains("waiting: value 4, target 2 -> 2 replica(s)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("missing: skipped: Prometheus query"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("desired replicas: 2"), "{}", run.stdout);

    // Every metric measured: exit 0.
    let metrics =
        "  - name: waiting\n    query: avg(vllm:num_requests_waiting)\n    target: \"2\"\n";
    let run = probe(
        &prometheus_manifest(&prometheus.url(), metrics),
        &["--ready", "3"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("desired replicas: 5"), "{}", run.stdout);

    // Nothing measurable: hold, exit 3.
    let metrics = "  - query: vllm:num_requests_waiting\n    target: \"2\"\n\
                   \x20 - query: avg(vllm:nothing_here)\n    target: \"1\"\n";
    let run = probe(
        &prometheus_manifest(&prometheus.url(), metrics),
        &["--output", "json"],
    )
    .await;
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    let report = run.json();
    assert_eq!(report["hold"], json!(true));
    assert_eq!(report["desired"], Value::Null);
    assert_eq!(report["metrics"][0]["name"], json!("metric0"));
    assert!(
        report["metrics"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("returned 2 series")),
        "{report}"
    );
}

async fn decision_server(status: StatusCode, body: String) -> TestServer {
    let router = Router::new().route(
        "/decisions",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let body = body.clone();
            async move {
                // Headers from serverHeaders reach the server.
                if headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    != Some("Bearer probe-token")
                {
                    return (StatusCode::UNAUTHORIZED, "no token".to_owned());
                }
                (status, body)
            }
        }),
    );
    TestServer::start(router).await
}

fn decisions(active: i64) -> String {
    json!({
        "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
        "decisions": [{"namespace": "llm", "serviceId": "llama-8b", "replicas": {"active": active}}]
    })
    .to_string()
}

#[tokio::test]
async fn probe_against_decision_server() {
    init();
    let server = decision_server(StatusCode::OK, decisions(15)).await;
    // docs/scaling.md#worked-numbers: active 15 with min 1 max 20 / max 5.
    for (max, desired) in [(20, 15), (5, 5)] {
        let run = probe(
            &custom_manifest(&server.url(), 1, max),
            &["--output", "json"],
        )
        .await;
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert_eq!(
            run.json(),
            json!({
                "metrics": [{"name": "decision", "value": 15.0, "error": null, "desired": 15}],
                "desired": desired,
                "hold": false
            })
        );
    }
    // active 0 with min 2 → 2.
    let zero = decision_server(StatusCode::OK, decisions(0)).await;
    let run = probe(&custom_manifest(&zero.url(), 2, 20), &["--output", "json"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.json()["desired"], json!(2));

    // The token never shows in the output.
    let run = probe(&custom_manifest(&server.url(), 1, 20), &[]).await;
    assert!(!run.stdout.contains("probe-token") && !run.stderr.contains("probe-token"));
    assert!(run.stdout.contains("decision: value 15"), "{}", run.stdout);
}

#[tokio::test]
async fn probe_holds_when_the_decision_server_fails() {
    init();
    let server = decision_server(StatusCode::SERVICE_UNAVAILABLE, "overloaded".to_owned()).await;
    let run = probe(
        &custom_manifest(&server.url(), 1, 20),
        &["--output", "json"],
    )
    .await;
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    assert_eq!(
        run.json(),
        json!({
            "metrics": [{"name": "decision", "value": null, "desired": null,
                         "error": format!("decision server at {}/decisions answered HTTP 503 for \
                                          serviceId `llama-8b` (content-type `text/plain`, 10 \
                                          bytes; body not shown)", server.url())}],
            "desired": null,
            "hold": true
        })
    );
    let run = probe(&custom_manifest(&server.url(), 1, 20), &[]).await;
    assert_eq!(run.code, Some(3));
    assert!(
        run.stdout.contains("hold: nothing was measurable"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn probe_refuses_an_invalid_spec_with_field_paths() {
    init();
    let metrics = "  - query: avg(x)\n    target: \"80%\"\n";
    let manifest = prometheus_manifest("http://127.0.0.1:1", metrics);
    let run = probe(&manifest, &["--output", "json"]).await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("spec.metrics[0].target"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);

    let manifest = prometheus_manifest("not a url", "  - query: avg(x)\n    target: \"1\"\n");
    let run = probe(&manifest, &[]).await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("serverAddress"), "{}", run.stderr);
}
