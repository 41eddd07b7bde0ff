//! `spec.objective` (issue 23, docs/objective.md) on the local cluster with the vLLM emulator
//! and a real Prometheus: a scaler with only an objective (no metric, no service rate) scales
//! an overloaded one-replica fleet up, and reports in `status.capacity` the per-replica capacity
//! it learned from the fleet's own vLLM series.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use llmscaler_e2e::emulator::{Config, Emulator};
use llmscaler_e2e::fixture::{SETUP_MANAGER, World, deployment_manifest};
use llmscaler_e2e::prometheus::Prometheus;
use llmscaler_e2e::{Check, wait_for};
use llmscaler_loadmodel::{Params, Request};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(180);
const APP: &str = "vllm";

/// 20 requests per second of 800 prompt and 120 output tokens for 30 minutes: about 2.6 times
/// what one replica of the load model's defaults completes (`1 / (120 × 0.0344 / 64 + 800 /
/// 12000)` = 7.6 requests/s), so one replica queues at once.
fn trace() -> Vec<Request> {
    (0..36_000u32)
        .map(|i| Request {
            arrival_s: f64::from(i) * 0.05,
            prompt_tokens: 800,
            output_tokens: 120,
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn an_objective_alone_scales_the_fleet_and_reports_its_estimate() -> anyhow::Result<()> {
    let mut world = World::new("objective").await?;
    let ns = world.namespace().to_owned();
    world
        .apply(SETUP_MANAGER, &deployment_manifest(&ns, APP, Some(1)))
        .await?;
    world.wait_replicas(APP, 1, DEADLINE).await?;
    let emulator = Emulator::start(
        world.client.clone(),
        Config {
            requests: trace(),
            speed: 1.0,
            namespace: ns.clone(),
            selector: format!("app={APP}"),
            service: None,
            params: Params::default(),
            listen: "127.0.0.1:0".parse()?,
        },
    )
    .await?;
    emulator.begin();
    let prometheus = Prometheus::start(emulator.addr).await?;
    let recorder = world.record(APP).await?;
    world.start_operator("objective-0", &[]).await?;
    world
        .create_scaler(
            "chat",
            json!({
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
                "serverAddress": prometheus.url(),
                "minReplicas": 1,
                "maxReplicas": 8,
                "syncPeriodSeconds": 3,
                "objective": {
                    "ttftSeconds": "2",
                    "attainment": "0.99",
                    "runtime": "vllm",
                    "seriesSelector": format!("namespace=\"{ns}\",app=\"{APP}\""),
                },
            }),
        )
        .await?;

    // The overloaded replica queues; the objective (or its TTFT guardrail) raises the fleet.
    let raised = recorder
        .wait_until("spec.replicas at least 3", DEADLINE, |v| {
            v.replicas().filter(|r| *r >= 3)
        })
        .await?;
    println!("spec.replicas raised to {raised}");

    // The estimate, in status, with how it was obtained.
    let capacity = wait_for("status.capacity with an estimate", DEADLINE, || async {
        let status = world.scaler("chat").await?["status"].clone();
        let capacity = status["capacity"].clone();
        let rps = capacity["requestsPerSecond"]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok());
        let basis = capacity["basis"].as_str().unwrap_or_default().to_owned();
        Ok(match rps {
            // An estimate from the fleet's evidence (on this steady load a `lowerBound`: the
            // batch never varies enough for a line), past the first syncs' light-load reading.
            Some(rps) if rps >= 1.0 && !basis.is_empty() && capacity["template"].is_string() => {
                Check::Done(capacity)
            }
            _ => Check::NotYet(status.to_string()),
        })
    })
    .await?;
    println!("status.capacity = {capacity}");
    let rps: f64 = capacity["requestsPerSecond"].as_str().unwrap().parse()?;
    // One replica of the defaults completes about 7.6 requests/s of this mix at full load: an
    // estimate from this evidence is of that order, whichever its basis.
    anyhow::ensure!(
        (1.0..=15.0).contains(&rps),
        "requestsPerSecond {rps} is not of the order of the 7.6 one replica completes"
    );
    emulator.stop().await;
    world.finish().await
}
