//! The exactness the controller tests rely on: a `watch::Recorder` started before a burst of
//! writes records every one of them, in order, even writes a few milliseconds apart that a
//! timer sampling the object would miss.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use llmscaler_e2e::fixture::{World, deployment_manifest};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn the_recorder_sees_every_write_of_a_burst_in_order() -> anyhow::Result<()> {
    let world = World::new("watch-burst").await?;
    world
        .apply(
            "e2e-setup",
            &deployment_manifest(world.namespace(), "vllm", Some(1)),
        )
        .await?;
    let deployment = world.record("vllm").await?;
    let api: Api<Deployment> = Api::namespaced(world.client.clone(), world.namespace());
    // Back to back, no pause: 1 -> 2 -> 3 -> 1 -> 3 -> 0 within milliseconds.
    let burst = [2, 3, 1, 3, 0];
    let mut rvs = Vec::new();
    for replicas in burst {
        let written = api
            .patch(
                "vllm",
                &PatchParams::apply("e2e-burst").force(),
                &Patch::Apply(json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "spec": {"replicas": replicas}
                })),
            )
            .await?;
        rvs.push(written.metadata.resource_version.unwrap_or_default());
    }
    let last_rv = rvs.last().cloned().unwrap_or_default();
    deployment
        .wait_record("the burst's last write", MINUTE, |versions| {
            versions
                .iter()
                .any(|v| v.resource_version() == last_rv)
                .then_some(())
        })
        .await?;
    let walk = deployment.replica_walk()?;
    println!(
        "replica walk of a burst of {} writes: {walk:?}",
        burst.len()
    );
    ensure!(walk == vec![1, 2, 3, 1, 3, 0], "walk {walk:?}");
    // Every write's resourceVersion is among the recorded versions, in the order written.
    let recorded: Vec<String> = deployment
        .versions()
        .iter()
        .map(|v| v.resource_version())
        .collect();
    let positions: Vec<Option<usize>> = rvs
        .iter()
        .map(|rv| recorded.iter().position(|r| r == rv))
        .collect();
    ensure!(
        positions.iter().all(Option::is_some) && positions.windows(2).all(|w| w[0] < w[1]),
        "written {rvs:?}, recorded {recorded:?}"
    );
    world.finish().await
}
