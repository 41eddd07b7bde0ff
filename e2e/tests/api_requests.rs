//! A steady scaler makes no API request per sync (issue 14): the target comes from a watch cache,
//! status is written only on change. Counted from the API server's own
//! `apiserver_request_total`, not from the operator's counters. Alone in its test binary so no
//! other test's requests are counted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use anyhow::ensure;
use llmscaler_e2e::fixture::World;
use llmscaler_e2e::kubectl_path;
use llmscaler_e2e::operator::run_command;
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

/// The API server's count of `verb` requests on `resource` (all codes, all scopes).
fn requests(verb: &str, resource: &str) -> anyhow::Result<f64> {
    let metrics = run_command(&kubectl_path(), &["get", "--raw", "/metrics"], None)?;
    Ok(metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            l.contains(&format!("verb=\"{verb}\""))
                && l.contains(&format!("resource=\"{resource}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_steady_scaler_makes_no_api_request_over_10_syncs() -> anyhow::Result<()> {
    let mut world = World::new("ctl-requests").await?;
    world
        .queue_scaled_deployment(2, "steady", 0.5, (1, 10), json!({}))
        .await?;
    world.start_operator("requests-0", &[]).await?;
    world.metric_seen(0, "0.5").await?;
    world.wait_syncs(0, 3).await?;
    let counted = [
        ("GET", "deployments"),
        ("PATCH", "deployments"),
        ("LIST", "deployments"),
        ("GET", "llmscalers"),
        ("PATCH", "llmscalers"),
        ("GET", "horizontalpodautoscalers"),
    ];
    let before: Vec<f64> = counted
        .iter()
        .map(|(verb, resource)| requests(verb, resource))
        .collect::<anyhow::Result<_>>()?;
    world.wait_syncs(0, 10).await?;
    for ((verb, resource), before) in counted.iter().zip(before) {
        let after = requests(verb, resource)?;
        println!("{verb} {resource}: {} over 10 syncs", after - before);
        ensure!(
            after == before,
            "{} {verb} {resource} requests over 10 steady syncs",
            after - before
        );
    }
    // Scaling still works from the cache.
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"steady\"", 1.0)]);
    world.wait_replicas("vllm", 4, MINUTE).await?;
    world.finish().await
}
