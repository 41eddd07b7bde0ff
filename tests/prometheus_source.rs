//! The Prometheus metric source (docs/providers.md, docs/scale-down.md deletion cost) against a
//! real Prometheus process
//! scraping a vLLM-like exporter on loopback. Needs the `prometheus` binary; fails (never skips)
//! without it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use llmscaler::metrics::{MetricError, MetricsClient};
use support::{
    HangingServer, Prometheus, TestServer, init, prometheus_source, start_bearer_proxy,
    start_exporter,
};

const TIMEOUT: Duration = Duration::from_secs(5);

fn expect_err(result: Result<f64, MetricError>, query: &str) -> MetricError {
    match result {
        Ok(v) => panic!("query `{query}` should fail, returned {v}"),
        Err(e) => {
            eprintln!("[{}] {e}", e.kind());
            e
        }
    }
}

#[tokio::test]
async fn real_prometheus_queries() {
    init();
    let exporter = start_exporter().await;
    let prometheus = Prometheus::start(exporter.addr).await;
    let client = MetricsClient::new().expect("client");
    let source = prometheus_source(&client, &format!("{}/", prometheus.url()), &[], TIMEOUT);

    // Data present for both pods, and two points of the histogram for rate().
    prometheus
        .wait_for_value(&source, "count(vllm:num_requests_waiting)", 2.0)
        .await;
    prometheus
        .wait_for_value(
            &source,
            "count(rate(vllm:time_to_first_token_seconds_bucket[1m]))",
            8.0,
        )
        .await;

    // avg(...) returns the expected value; sum and scalars too.
    assert_eq!(
        source
            .query("avg(vllm:num_requests_waiting)")
            .await
            .expect("avg waiting"),
        4.0
    );
    assert_eq!(
        source
            .query("avg(vllm:kv_cache_usage_perc)")
            .await
            .expect("avg kv"),
        0.5
    );
    assert_eq!(
        source
            .query("sum(vllm:num_requests_running{app=\"vllm\"})")
            .await
            .expect("sum running"),
        8.0
    );
    assert_eq!(
        source
            .query("scalar(avg(vllm:num_requests_waiting))")
            .await
            .expect("scalar"),
        4.0
    );

    // avg(avg_over_time(...[1m])) works.
    assert_eq!(
        source
            .query("avg(avg_over_time(vllm:kv_cache_usage_perc[1m]))")
            .await
            .expect("avg_over_time"),
        0.5
    );

    // Unaggregated: two series; the count and the label names that differ, never a value
    // (`docs/security.md#messages`).
    let query = "vllm:num_requests_waiting";
    let err = expect_err(source.query(query).await, query);
    assert_eq!(err.kind(), "multiple_series");
    assert_eq!(
        err.to_string(),
        "Prometheus query `vllm:num_requests_waiting` returned 2 series, expected exactly one; \
         they differ in `pod`: aggregate over it, e.g. sum without (pod) (...) or avg(...)"
    );
    // count_values turns every value into a label value: still only names come back.
    let query = "count_values(\"leak\", vllm:num_requests_waiting)";
    let err = expect_err(source.query(query).await, query);
    assert!(!err.to_string().contains("vllm-a"), "{err}");

    // histogram_quantile over an empty histogram is NaN: not measurable, never 0.
    let query =
        "histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))";
    let err = expect_err(source.query(query).await, query);
    assert_eq!(err.kind(), "not_measurable");
    assert_eq!(
        err.to_string(),
        format!("Prometheus query `{query}` returned NaN, which is not measurable")
    );

    // Division by zero gives +Inf: not measurable.
    let query = "avg(vllm:num_requests_waiting) / 0";
    let err = expect_err(source.query(query).await, query);
    assert_eq!(err.kind(), "not_measurable");
    assert!(err.to_string().contains("returned +Inf"), "{err}");

    // A missing series is "no data", never 0.
    let query = "avg(vllm:no_such_metric)";
    let err = expect_err(source.query(query).await, query);
    assert_eq!(err.kind(), "no_data");
    assert_eq!(
        err.to_string(),
        "Prometheus query `avg(vllm:no_such_metric)` returned no data (empty result); the \
         metric is skipped, not read as 0"
    );

    // A syntax error gives the HTTP status, Prometheus' errorType and the query; its text
    // (which can quote label values) stays in the operator's debug log.
    let query = "avg(vllm:num_requests_waiting";
    let err = expect_err(source.query(query).await, query);
    assert_eq!(err.kind(), "query_error");
    assert_eq!(
        err.to_string(),
        "Prometheus rejected query `avg(vllm:num_requests_waiting` (HTTP 400, bad_data); its \
         error text is in the operator's debug log"
    );

    // A range vector (matrix) is refused.
    let query = "vllm:kv_cache_usage_perc{pod=\"vllm-a\"}[1m]";
    let err = expect_err(source.query(query).await, query);
    assert_eq!(err.kind(), "bad_reply");
    assert!(err.to_string().contains("range vector (matrix)"), "{err}");

    // Deletion cost: one value per pod.
    let costs = source
        .query_per_pod("sum by (pod) (vllm:num_requests_running)")
        .await
        .expect("per-pod costs");
    assert_eq!(
        costs,
        BTreeMap::from([("vllm-a".to_owned(), 2.0), ("vllm-b".to_owned(), 6.0)])
    );
    let costs = source
        .query_per_pod("vllm:kv_cache_usage_perc")
        .await
        .expect("per-pod, unaggregated");
    assert_eq!(
        costs,
        BTreeMap::from([("vllm-a".to_owned(), 0.25), ("vllm-b".to_owned(), 0.75)])
    );
    // Samples without a `pod` label are an error.
    let query = "sum by (namespace) (vllm:num_requests_running)";
    let err = source.query_per_pod(query).await.expect_err("no pod label");
    eprintln!("[{}] {err}", err.kind());
    assert_eq!(err.kind(), "bad_reply");
    assert!(
        err.to_string()
            .contains("a series has no `pod` label (its labels: namespace)"),
        "{err}"
    );
    let query = "sum by (pod) (vllm:no_such_metric)";
    let err = source.query_per_pod(query).await.expect_err("empty");
    assert_eq!(err.kind(), "no_data");
}

#[tokio::test]
async fn prometheus_behind_bearer_token_proxy() {
    init();
    let exporter = start_exporter().await;
    let prometheus = Prometheus::start(exporter.addr).await;
    let proxy = start_bearer_proxy(&prometheus.url(), "t0ken-abc").await;
    let client = MetricsClient::new().expect("client");

    let with_token = prometheus_source(
        &client,
        &proxy.url(),
        &[("Authorization", "Bearer t0ken-abc")],
        TIMEOUT,
    );
    prometheus
        .wait_for_value(&with_token, "count(vllm:num_requests_waiting)", 2.0)
        .await;
    assert_eq!(
        with_token
            .query("avg(vllm:num_requests_waiting)")
            .await
            .expect("with the header"),
        4.0
    );
    // The source's Debug never shows the token.
    let debug = format!("{with_token:?}");
    assert!(!debug.contains("t0ken-abc"), "{debug}");

    let query = "avg(vllm:num_requests_waiting)";
    for (label, headers) in [
        ("no header", &[][..]),
        ("wrong token", &[("Authorization", "Bearer wrong")][..]),
    ] {
        let source = prometheus_source(&client, &proxy.url(), headers, TIMEOUT);
        let err = expect_err(source.query(query).await, label);
        assert_eq!(err.kind(), "http_status", "{label}");
        assert_eq!(
            err.to_string(),
            format!(
                "Prometheus at {}/api/v1/query answered HTTP 401 for query \
                 `avg(vllm:num_requests_waiting)` (content-type `text/plain`, 13 bytes; body \
                 not shown)",
                proxy.url()
            ),
            "{label}"
        );
        assert!(!err.to_string().contains("wrong"), "{label}: {err}");
    }
}

/// One hanging server does not delay a query to a healthy one on the same shared client.
#[tokio::test]
async fn hanging_prometheus_does_not_delay_others() {
    init();
    let exporter = start_exporter().await;
    let prometheus = Prometheus::start(exporter.addr).await;
    let hanging = HangingServer::start().await;
    let client = MetricsClient::new().expect("client");
    let good = prometheus_source(&client, &prometheus.url(), &[], TIMEOUT);
    prometheus
        .wait_for_value(&good, "count(vllm:num_requests_waiting)", 2.0)
        .await;
    let slow_timeout = Duration::from_secs(3);
    let slow = prometheus_source(&client, &hanging.url(), &[], slow_timeout);

    let started = Instant::now();
    let (slow_result, good_result) = tokio::join!(
        async {
            let r = slow.query("avg(vllm:num_requests_waiting)").await;
            (r, started.elapsed())
        },
        async {
            let r = good.query("avg(vllm:num_requests_waiting)").await;
            (r, started.elapsed())
        },
    );
    let (good_value, good_elapsed) = good_result;
    assert_eq!(good_value.expect("good server"), 4.0);
    assert!(
        good_elapsed < slow_timeout / 2,
        "healthy server took {good_elapsed:?} next to a hanging one"
    );
    let (slow_value, slow_elapsed) = slow_result;
    let err = expect_err(slow_value, "hanging");
    assert_eq!(err.kind(), "timeout");
    assert_eq!(
        err.to_string(),
        format!(
            "Prometheus at {}/api/v1/query did not answer query \
             `avg(vllm:num_requests_waiting)` within 3s (timeout)",
            hanging.url()
        )
    );
    assert!(
        slow_elapsed >= slow_timeout && slow_elapsed < slow_timeout + Duration::from_secs(2),
        "timeout fired after {slow_elapsed:?}"
    );
}

/// Issue 11 (`docs/security.md#egress`): a 3xx is an error naming the status; the redirect is
/// never followed (here to a second server that counts requests), and nothing of the body is
/// shown.
#[tokio::test]
async fn redirects_are_not_followed() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    init();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let elsewhere = TestServer::start(axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { "internal" }
    }))
    .await;
    let location = format!("{}/secret", elsewhere.url());
    let redirecting = TestServer::start(axum::Router::new().fallback(move || {
        let location = location.clone();
        async move {
            (
                axum::http::StatusCode::FOUND,
                [(axum::http::header::LOCATION, location)],
                "moved to the internal host",
            )
        }
    }))
    .await;
    let client = MetricsClient::new().expect("client");
    let source = prometheus_source(&client, &redirecting.url(), &[], TIMEOUT);
    let err = expect_err(source.query("up").await, "redirect");
    assert_eq!(err.kind(), "http_status");
    let text = err.to_string();
    assert!(text.contains("answered HTTP 302"), "{text}");
    assert!(text.contains("redirects are not followed"), "{text}");
    assert!(!text.contains("internal host"), "{text}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the redirect was followed");
}
