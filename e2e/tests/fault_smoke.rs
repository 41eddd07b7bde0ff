//! The short fault of the normal suite (issue 26 item 3; the others are in `faults.rs`, feature
//! `faults`): Prometheus restarted with its data lost. An empty TSDB answers every query with
//! nothing until it has scraped again; the operator must read that as "not measurable" and hold
//! the fleet (a zero would scale it to `minReplicas`), then act again on its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::{Duration, SystemTime};

use anyhow::ensure;
use llmscaler_e2e::faults::{measured, never_below};
use llmscaler_e2e::fixture::World;
use serde_json::json;

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn prometheus_restarted_with_data_lost_holds_the_fleet_and_recovers() -> anyhow::Result<()> {
    let mut world = World::new("fault-smoke").await?;
    world
        .queue_scaled_deployment(4, "smoke", 0.5, (1, 10), json!({}))
        .await?;
    world.start_operator("smoke-0", &[]).await?;
    world.metric_seen(0, "0.5").await?;
    let deployment = world.record("vllm").await?;
    let down = world.prometheus.restart_with_data_lost().await?;
    let restarted = SystemTime::now();
    // Three syncs against the empty Prometheus (its first scrape comes within a second).
    world.wait_syncs(0, 3).await?;
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"smoke\"", 1.0)]);
    let scaled = deployment
        .wait_spec_replicas(8, Duration::from_secs(60))
        .await?;
    ensure!(!world.operators[0].exited(), "the operator exited");
    never_below(&deployment, 4)?;
    let walk = deployment.replica_walk()?;
    ensure!(walk == vec![4, 8], "held at 4, then 8: {walk:?}");
    measured("Prometheus restarted, data lost (smoke)", "down", down);
    measured(
        "Prometheus restarted, data lost (smoke)",
        "recovery (ready to the scale-up write)",
        scaled.seen_at.duration_since(restarted).unwrap_or_default(),
    );
    world.finish().await
}
