//! The decision-server metric source (docs/providers.md#custom-provider-decision-server) against a
//! real axum HTTP server on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use llmscaler::metrics::{
    DECISION_API_VERSION, DecisionSource, Endpoint, MetricError, MetricsClient,
};
use support::{HangingServer, TestServer, free_port, init};

/// What the test server received.
#[derive(Clone, Debug)]
struct Seen {
    path_and_query: String,
    headers: BTreeMap<String, String>,
}

#[derive(Clone)]
struct Canned {
    status: StatusCode,
    content_type: &'static str,
    body: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn answer(State(canned): State<Canned>, request: Request) -> Response {
    let seen = Seen {
        path_and_query: request
            .uri()
            .path_and_query()
            .map(|pq| pq.as_str().to_owned())
            .unwrap_or_default(),
        headers: request
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("?").to_owned()))
            .collect(),
    };
    canned.seen.lock().expect("lock").push(seen);
    (
        canned.status,
        [(header::CONTENT_TYPE, canned.content_type)],
        canned.body.clone(),
    )
        .into_response()
}

/// A decision server that answers every request with `status` and `body`.
struct DecisionServer {
    server: TestServer,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl DecisionServer {
    async fn start(status: StatusCode, content_type: &'static str, body: String) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let canned = Canned {
            status,
            content_type,
            body,
            seen: seen.clone(),
        };
        let router = Router::new().fallback(answer).with_state(canned);
        Self {
            server: TestServer::start(router).await,
            seen,
        }
    }

    async fn json(body: String) -> Self {
        Self::start(StatusCode::OK, "application/json", body).await
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

fn reply(decisions: &str) -> String {
    format!(r#"{{"apiVersion":"{DECISION_API_VERSION}","decisions":{decisions}}}"#)
}

struct Config<'a> {
    service_id: &'a str,
    namespace: Option<&'a str>,
    path: Option<&'a str>,
    headers: &'a [(&'a str, &'a str)],
    timeout: Duration,
}

impl Default for Config<'_> {
    fn default() -> Self {
        Self {
            service_id: "llama-8b",
            namespace: None,
            path: None,
            headers: &[],
            timeout: Duration::from_secs(5),
        }
    }
}

fn source(client: &MetricsClient, url: &str, config: &Config<'_>) -> DecisionSource {
    let headers = config
        .headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let endpoint = Endpoint::new(url, &headers, client.policy())
        .expect("endpoint")
        .with_timeout(config.timeout);
    DecisionSource::new(
        client.clone(),
        endpoint,
        config.service_id,
        config.namespace.map(str::to_owned),
        config.path,
    )
}

async fn decide(url: &str, config: &Config<'_>) -> Result<i32, MetricError> {
    let client = MetricsClient::new().expect("client");
    source(&client, url, config).decide().await
}

fn expect_err(result: Result<i32, MetricError>, what: &str) -> MetricError {
    match result {
        Ok(v) => panic!("{what}: expected an error, got {v}"),
        Err(e) => {
            eprintln!("[{}] {e}", e.kind());
            e
        }
    }
}

#[tokio::test]
async fn one_matching_decision_gives_active_and_sends_service_id_and_headers() {
    init();
    let server = DecisionServer::json(reply(
        r#"[{"namespace":"llm","serviceId":"other","replicas":{"active":3}},
            {"namespace":"llm","serviceId":"llama-8b","replicas":{"active":15}}]"#,
    ))
    .await;
    let config = Config {
        headers: &[("Authorization", "Bearer s3cret"), ("X-Tenant", "team-a")],
        ..Config::default()
    };
    assert_eq!(decide(&server.url(), &config).await.expect("decision"), 15);
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path_and_query, "/decisions?serviceId=llama-8b");
    assert_eq!(
        seen[0].headers.get("authorization").map(String::as_str),
        Some("Bearer s3cret")
    );
    assert_eq!(
        seen[0].headers.get("x-tenant").map(String::as_str),
        Some("team-a")
    );

    // With the namespace configured, it must match too.
    let config = Config {
        namespace: Some("llm"),
        ..Config::default()
    };
    assert_eq!(decide(&server.url(), &config).await.expect("in llm"), 15);
    let config = Config {
        namespace: Some("prod"),
        ..Config::default()
    };
    let err = expect_err(decide(&server.url(), &config).await, "other namespace");
    assert_eq!(err.kind(), "no_decision");
    assert_eq!(
        err.to_string(),
        "decision server returned no decision for serviceId `llama-8b` in namespace `prod` (2 \
         other decision(s) in the reply); the fleet is held"
    );
}

#[tokio::test]
async fn zero_is_a_decision() {
    init();
    let server = DecisionServer::json(reply(
        r#"[{"serviceId":"llama-8b","replicas":{"active":0}}]"#,
    ))
    .await;
    assert_eq!(
        decide(&server.url(), &Config::default()).await.expect("0"),
        0
    );
}

#[tokio::test]
async fn path_is_normalised_and_service_id_encoded() {
    init();
    let server =
        DecisionServer::json(reply(r#"[{"serviceId":"a b/c","replicas":{"active":2}}]"#)).await;
    let base = server.url();
    let cases = [
        (format!("{base}/"), None, "/decisions"),
        (base.clone(), Some(""), "/decisions"),
        (format!("{base}/"), Some("/decisions"), "/decisions"),
        (base.clone(), Some("decisions"), "/decisions"),
        (format!("{base}/"), Some("//v1//decide/"), "/v1/decide"),
        (
            format!("{base}/prefix/"),
            Some("/decisions"),
            "/prefix/decisions",
        ),
    ];
    for (url, path, _) in &cases {
        let config = Config {
            service_id: "a b/c",
            path: *path,
            ..Config::default()
        };
        assert_eq!(
            decide(url, &config).await.expect("decision"),
            2,
            "{url} {path:?}"
        );
    }
    let seen: Vec<String> = server
        .seen()
        .into_iter()
        .map(|s| s.path_and_query)
        .collect();
    let want: Vec<String> = cases
        .iter()
        .map(|(_, _, p)| format!("{p}?serviceId=a+b%2Fc"))
        .collect();
    assert_eq!(seen, want);
}

#[tokio::test]
async fn reply_for_another_service_id_is_no_decision() {
    init();
    let server = DecisionServer::json(reply(
        r#"[{"serviceId":"mistral-7b","replicas":{"active":4}}]"#,
    ))
    .await;
    let err = expect_err(decide(&server.url(), &Config::default()).await, "other id");
    assert_eq!(err.kind(), "no_decision");
    assert_eq!(
        err.to_string(),
        "decision server returned no decision for serviceId `llama-8b` (1 other \
         decision(s) in the reply); the fleet is held"
    );
    let server = DecisionServer::json(reply("[]")).await;
    let err = expect_err(decide(&server.url(), &Config::default()).await, "empty");
    assert_eq!(
        err.to_string(),
        "decision server returned no decision for serviceId `llama-8b` (0 other \
         decision(s) in the reply); the fleet is held"
    );
}

#[tokio::test]
async fn two_matches_without_namespace_are_ambiguous() {
    init();
    let server = DecisionServer::json(reply(
        r#"[{"namespace":"a","serviceId":"llama-8b","replicas":{"active":1}},
            {"namespace":"b","serviceId":"llama-8b","replicas":{"active":7}}]"#,
    ))
    .await;
    let err = expect_err(decide(&server.url(), &Config::default()).await, "two");
    assert_eq!(err.kind(), "ambiguous_decision");
    assert_eq!(
        err.to_string(),
        "decision server returned 2 decisions for serviceId `llama-8b`, expected exactly one; \
         set customProvider.namespace to pick one; the fleet is held"
    );
    let config = Config {
        namespace: Some("b"),
        ..Config::default()
    };
    assert_eq!(decide(&server.url(), &config).await.expect("b"), 7);

    // Two matches even with the namespace set.
    let server = DecisionServer::json(reply(
        r#"[{"namespace":"a","serviceId":"llama-8b","replicas":{"active":1}},
            {"namespace":"a","serviceId":"llama-8b","replicas":{"active":7}}]"#,
    ))
    .await;
    let config = Config {
        namespace: Some("a"),
        ..Config::default()
    };
    let err = expect_err(decide(&server.url(), &config).await, "two in a");
    assert_eq!(
        err.to_string(),
        "decision server returned 2 decisions for serviceId `llama-8b` in namespace `a`, \
         expected exactly one; the fleet is held"
    );
}

#[tokio::test]
async fn wrong_or_missing_api_version_is_refused() {
    init();
    for (body, reason) in [
        (
            r#"{"apiVersion":"llmscaling.inference.x-k8s.io/v1beta1","decisions":[{"serviceId":"llama-8b","replicas":{"active":1}}]}"#,
            "apiVersion is not supported, expected `llmscaling.inference.x-k8s.io/v1alpha1`",
        ),
        (
            r#"{"decisions":[{"serviceId":"llama-8b","replicas":{"active":1}}]}"#,
            "apiVersion is missing, expected `llmscaling.inference.x-k8s.io/v1alpha1`",
        ),
        (
            r#"{"apiVersion":"llmscaling.inference.x-k8s.io/v1alpha1"}"#,
            "`decisions` is missing",
        ),
    ] {
        let server = DecisionServer::json(body.to_owned()).await;
        let err = expect_err(decide(&server.url(), &Config::default()).await, body);
        assert_eq!(err.kind(), "bad_reply");
        assert_eq!(
            err.to_string(),
            format!("decision server reply for serviceId `llama-8b` is unusable: {reason}")
        );
    }
}

#[tokio::test]
async fn replicas_active_must_be_present_and_in_range() {
    init();
    for (replicas, reason) in [
        (r#"{}"#, "replicas.active is missing"),
        (r#"{"active":-1}"#, "it is negative"),
        (
            r#"{"active":2147483648}"#,
            "it is over the int32 maximum 2147483647",
        ),
        (r#"{"active":1.5}"#, "it is not a whole number"),
        (r#"{"active":"4"}"#, "it is a string, not a number"),
    ] {
        let server = DecisionServer::json(reply(&format!(
            r#"[{{"serviceId":"llama-8b","replicas":{replicas}}}]"#
        )))
        .await;
        let err = expect_err(decide(&server.url(), &Config::default()).await, replicas);
        assert_eq!(err.kind(), "bad_replicas");
        assert_eq!(
            err.to_string(),
            format!(
                "decision server reply for serviceId `llama-8b` has an unusable \
                 replicas.active: {reason}"
            )
        );
    }
    let server = DecisionServer::json(reply(
        r#"[{"serviceId":"llama-8b","replicas":{"active":2147483647}}]"#,
    ))
    .await;
    assert_eq!(
        decide(&server.url(), &Config::default())
            .await
            .expect("int32 max"),
        i32::MAX
    );
}

#[tokio::test]
async fn html_instead_of_json_is_a_decode_error() {
    init();
    let server = DecisionServer::start(
        StatusCode::OK,
        "text/html; charset=utf-8",
        "<!DOCTYPE html><html><body><h1>Sign in</h1></body></html>".to_owned(),
    )
    .await;
    let err = expect_err(decide(&server.url(), &Config::default()).await, "html");
    assert_eq!(err.kind(), "decode");
    assert_eq!(
        err.to_string(),
        "decision server reply for serviceId `llama-8b` cannot be decoded (HTTP 200, \
         content-type `text/html`, 57 bytes; body not shown): not JSON at line 1 column 1"
    );
}

#[tokio::test]
async fn http_503_names_the_status() {
    init();
    let server = DecisionServer::start(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain",
        "no capacity model loaded".to_owned(),
    )
    .await;
    let err = expect_err(decide(&server.url(), &Config::default()).await, "503");
    assert_eq!(err.kind(), "http_status");
    assert_eq!(
        err.to_string(),
        format!(
            "decision server at {}/decisions answered HTTP 503 for serviceId `llama-8b` \
             (content-type `text/plain`, 24 bytes; body not shown)",
            server.url()
        )
    );
}

#[tokio::test]
async fn hanging_server_times_out_without_delaying_a_healthy_one() {
    init();
    let hanging = HangingServer::start().await;
    let healthy = DecisionServer::json(reply(
        r#"[{"serviceId":"llama-8b","replicas":{"active":5}}]"#,
    ))
    .await;
    let client = MetricsClient::new().expect("client");
    let timeout = Duration::from_secs(3);
    let slow = source(
        &client,
        &hanging.url(),
        &Config {
            timeout,
            ..Config::default()
        },
    );
    let good = source(&client, &healthy.url(), &Config::default());

    let started = Instant::now();
    let ((slow_result, slow_elapsed), (good_result, good_elapsed)) =
        tokio::join!(async { (slow.decide().await, started.elapsed()) }, async {
            (good.decide().await, started.elapsed())
        },);
    assert_eq!(good_result.expect("healthy"), 5);
    assert!(
        good_elapsed < timeout / 2,
        "healthy server took {good_elapsed:?} next to a hanging one"
    );
    let err = expect_err(slow_result, "hanging");
    assert_eq!(err.kind(), "timeout");
    assert_eq!(
        err.to_string(),
        format!(
            "decision server at {}/decisions did not answer serviceId `llama-8b` within 3s \
             (timeout)",
            hanging.url()
        )
    );
    assert!(
        slow_elapsed >= timeout && slow_elapsed < timeout + Duration::from_secs(2),
        "timeout fired after {slow_elapsed:?}"
    );
}

#[tokio::test]
async fn body_that_stalls_after_the_headers_times_out() {
    init();
    let stalled = HangingServer::start_with(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"apiV",
    )
    .await;
    let config = Config {
        timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let started = Instant::now();
    let err = expect_err(decide(&stalled.url(), &config).await, "stalled body");
    let elapsed = started.elapsed();
    assert_eq!(err.kind(), "timeout");
    assert_eq!(
        err.to_string(),
        format!(
            "decision server at {}/decisions did not answer serviceId `llama-8b` within 1s \
             (timeout)",
            stalled.url()
        )
    );
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}

#[tokio::test]
async fn refused_connection_is_a_transport_error() {
    init();
    let url = format!("http://127.0.0.1:{}", free_port());
    let err = expect_err(decide(&url, &Config::default()).await, "refused");
    assert_eq!(err.kind(), "transport");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot reach decision server at {url}/decisions for serviceId `llama-8b`: "
        )),
        "{text}"
    );
    assert!(text.to_lowercase().contains("connect"), "{text}");
}

#[tokio::test]
async fn header_values_never_show_in_debug_or_errors() {
    init();
    let server =
        DecisionServer::start(StatusCode::FORBIDDEN, "text/plain", "forbidden".to_owned()).await;
    let client = MetricsClient::new().expect("client");
    let config = Config {
        headers: &[("Authorization", "Bearer very-secret-token")],
        ..Config::default()
    };
    let source = source(&client, &server.url(), &config);
    let debug = format!("{source:?}");
    assert!(!debug.contains("very-secret-token"), "{debug}");
    assert!(debug.contains("authorization"), "{debug}");
    let err = expect_err(source.decide().await, "403");
    assert!(!err.to_string().contains("very-secret-token"));
    assert!(!format!("{err:?}").contains("very-secret-token"));
    assert_eq!(
        server.seen()[0]
            .headers
            .get("authorization")
            .map(String::as_str),
        Some("Bearer very-secret-token")
    );
}
