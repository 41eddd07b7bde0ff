//! The per-namespace query budget (issue 28 item 9, docs/security.md#query-budget) against the
//! local control plane and a real Prometheus: a scaler syncing every second under a budget of
//! 0.3 queries per second is delayed, says so in `ScalingActive` (`QueryBudgetExceeded`), still
//! scales, and the Prometheus counts no more queries than the budget allows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use llmscaler_e2e::fixture::World;
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

/// `/api/v1/query` requests Prometheus has answered (its own
/// `prometheus_http_requests_total`, every status code).
async fn instant_queries(world: &World) -> anyhow::Result<f64> {
    let text = reqwest::get(format!("{}/metrics", world.prometheus.url()))
        .await?
        .text()
        .await?;
    let mut total = 0.0;
    for line in text.lines().filter(|l| {
        l.starts_with("prometheus_http_requests_total{") && l.contains("handler=\"/api/v1/query\"")
    }) {
        let value = line
            .rsplit(' ')
            .next()
            .context("a sample line has a value")?;
        total += value.parse::<f64>()?;
    }
    Ok(total)
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_namespace_over_its_query_budget_is_delayed_and_says_so() -> anyhow::Result<()> {
    let mut world = World::new("budget").await?;
    // One query per sync every second; the budget allows 0.3 per second (a bucket of 1.5).
    world
        .queue_scaled_deployment(2, "budget", 4.0, (1, 8), json!({}))
        .await?;
    let deployment = world.record("vllm").await?;
    world
        .start_operator("budget-0", &["--namespace-query-budget", "0.3"])
        .await?;
    let delayed = world
        .wait_condition(
            "chat",
            "ScalingActive",
            "False",
            "spent its query budget of 0.3 queries per second",
            MINUTE,
        )
        .await?;
    println!("delayed: {}", delayed["message"]);
    ensure!(delayed["reason"] == "QueryBudgetExceeded", "{delayed}");
    let message = delayed["message"].as_str().unwrap_or_default();
    ensure!(
        message.contains(&format!("namespace {}", world.namespace()))
            && message.contains("this scaler's 1 queries per sync"),
        "{message}"
    );
    // Delayed, not stopped: queue 4 over target 0.5 still raises the fleet to its maximum, and
    // nothing lowered it on the way.
    deployment.wait_spec_replicas(8, MINUTE).await?;
    let walk = deployment.replica_walk()?;
    ensure!(
        walk.windows(2).all(|w| w[1] >= w[0]),
        "replicas went down: {walk:?}"
    );
    // The Prometheus' own count over a window: at most 0.3 per second plus the bucket.
    let before = instant_queries(&world).await?;
    let started = Instant::now();
    world.wait_syncs(0, 15).await?;
    let seconds = started.elapsed().as_secs_f64();
    let sent = instant_queries(&world).await? - before;
    println!("{sent} queries in {seconds:.1} s (budget 0.3/s, bucket 1.5)");
    ensure!(
        sent <= 0.3 * seconds + 1.5 + 1.0,
        "{sent} queries in {seconds:.1} s"
    );
    ensure!(
        sent >= 1.0,
        "the scaler stopped querying: {sent} in {seconds:.1} s"
    );
    world.finish().await
}
