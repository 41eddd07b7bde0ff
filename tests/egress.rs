//! Issue 11, item 1 (`docs/security.md#egress`): the operator-wide allow-list is enforced
//! before connecting (IP literals, names) and again after DNS resolution (a name that passed
//! the host check but resolves outside the allowed networks is never connected to); metadata
//! addresses are refused; redirects are not followed. Every check gets the policy as a value
//! (the metric client's, the validation's argument): hosts `localhost`, `*.allowed.test`,
//! networks `10.0.0.0/8` and `127.0.0.2/32`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use llmscaler::metrics::{Endpoint, MetricsClient, PrometheusSource};
use llmscaler_api::OperatorPolicy;
use llmscaler_api::policy::EgressPolicy;
use support::{TestServer, init};

fn policy() -> OperatorPolicy {
    OperatorPolicy {
        egress: EgressPolicy::parse(&["localhost", "*.allowed.test", "10.0.0.0/8", "127.0.0.2"])
            .expect("policy"),
        ..OperatorPolicy::default()
    }
}

/// A Prometheus-shaped server counting the requests it gets.
async fn counting_server() -> (TestServer, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let router = Router::new().route(
        "/api/v1/query",
        get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    r#"{"status":"success","data":{"resultType":"scalar","result":[1,"3"]}}"#,
                )
            }
        }),
    );
    (TestServer::start(router).await, hits)
}

fn source(client: &MetricsClient, address: &str) -> PrometheusSource {
    let endpoint = Endpoint::new(address, &BTreeMap::new(), client.policy())
        .expect("endpoint")
        .with_timeout(Duration::from_secs(3));
    PrometheusSource::new(client.clone(), endpoint)
}

#[tokio::test]
async fn allow_list_is_enforced_before_and_after_dns() {
    init();
    let client = MetricsClient::with_policy(policy()).expect("client");
    let (server, hits) = counting_server().await;
    let port = server.addr.port();

    // An IP literal outside the allowed networks: refused before any connection.
    let err = source(&client, &format!("http://127.0.0.1:{port}"))
        .query("up")
        .await
        .expect_err("127.0.0.1 is not allowed");
    assert_eq!(err.kind(), "egress_refused", "{err}");
    assert!(
        err.to_string().contains("allow-list of server networks"),
        "{err}"
    );

    // A name that passes the host patterns but resolves to 127.0.0.1 (outside the networks):
    // refused after resolution, so rebinding an allowed name cannot reach it.
    let err = source(&client, &format!("http://localhost:{port}"))
        .query("up")
        .await
        .expect_err("localhost resolves outside the networks");
    assert_eq!(err.kind(), "transport", "{err}");
    assert!(err.to_string().contains("egress policy"), "{err}");

    // A name outside the host patterns: refused before resolution.
    let err = source(&client, &format!("http://example.invalid:{port}"))
        .query("up")
        .await
        .expect_err("not in the host patterns");
    assert_eq!(err.kind(), "egress_refused", "{err}");

    // Metadata, whatever the allow-list.
    for address in [
        "http://169.254.169.254",
        "http://[fd00:ec2::254]",
        "http://metadata.google.internal",
    ] {
        let err = source(&client, address)
            .query("up")
            .await
            .expect_err(address);
        assert_eq!(err.kind(), "egress_refused", "{address}: {err}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "no request reached the server"
    );
}

#[test]
fn admission_names_server_address() {
    let policy = policy();
    for (address, why) in [
        ("http://169.254.169.254/", "always refused"),
        ("http://192.168.1.1:9090", "allow-list of server networks"),
        (
            "http://prometheus.other.test",
            "allow-list of server addresses",
        ),
        ("http://user:pw@localhost:9090", "must not hold user info"),
    ] {
        let yaml = format!(
            "apiVersion: autoscaling.modelsphere.dev/v1alpha1\nkind: LLMScaler\nmetadata: {{name: x}}\nspec:\n  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: vllm}}\n  serverAddress: {address}\n  minReplicas: 1\n  maxReplicas: 3\n  metrics: [{{query: avg(x), target: \"1\"}}]\n"
        );
        let scaler = llmscaler_api::validation::parse_llmscaler_yaml(&yaml).expect("parse");
        let errors = llmscaler_api::validate_spec(&scaler.spec, &policy);
        assert!(
            errors
                .iter()
                .any(|e| e.path == "spec.serverAddress" && e.message.contains(why)),
            "{address}: {errors:?}"
        );
        assert!(
            errors.iter().all(|e| !e.message.contains("pw")),
            "{errors:?}"
        );
    }
    let yaml = "apiVersion: autoscaling.modelsphere.dev/v1alpha1\nkind: LLMScaler\nmetadata: {name: x}\nspec:\n  targetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}\n  serverAddress: http://prom.allowed.test:9090\n  minReplicas: 1\n  maxReplicas: 3\n  metrics: [{query: avg(x), target: \"1\"}]\n";
    let scaler = llmscaler_api::validation::parse_llmscaler_yaml(yaml).expect("parse");
    assert_eq!(llmscaler_api::validate_spec(&scaler.spec, &policy), vec![]);
}
