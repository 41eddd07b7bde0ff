//! Two autoscalers on one workload (issue 17): a real HorizontalPodAutoscaler from the cluster's
//! kube-controller-manager holds a Deployment at its minReplicas 3 while an LLMScaler wants 1.
//! The operator sees the HPA, holds and writes nothing: the fleet does not flip-flop, and the
//! condition names the HPA.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use anyhow::ensure;
use llmscaler_e2e::fixture::{World, writes_of};
use llmscaler_e2e::{Check, wait_for};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn an_hpa_on_the_same_deployment_makes_the_operator_hold_without_a_write_war()
-> anyhow::Result<()> {
    let mut world = World::new("ctl-hpa").await?;
    world
        .queue_scaled_deployment(3, "hpa", 0.0, (1, 10), json!({}))
        .await?;
    let recorder = world.record("vllm").await?;
    world.start_operator("hpa-0", &[]).await?;
    world.wait_replicas("vllm", 1, MINUTE).await?;

    // The HPA's minReplicas 3 is enforced by the controller-manager whatever its metrics say.
    world
        .apply(
            "e2e-hpa-user",
            &json!({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "vllm-hpa", "namespace": world.namespace()},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                    "minReplicas": 3, "maxReplicas": 5,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50}}}]
                }
            }),
        )
        .await?;
    let condition = world
        .wait_condition(
            "chat",
            "ReplicasContested",
            "True",
            "HorizontalPodAutoscaler vllm-hpa",
            2 * MINUTE,
        )
        .await?;
    println!("{condition}");
    world.wait_replicas("vllm", 3, 2 * MINUTE).await?;

    // From here on: no write war. Over 10 syncs (and at least one HPA sync period of 15 s)
    // the operator writes nothing and the fleet stays at the HPA's 3.
    let before = writes_of(&world.operators[0].metrics().await?, "replicas");
    let steady = world.record("vllm").await?;
    let started = std::time::Instant::now();
    world.wait_syncs(0, 10).await?;
    wait_for("an HPA sync period to pass", MINUTE, || async {
        Ok(if started.elapsed() >= Duration::from_secs(16) {
            Check::Done(())
        } else {
            world.wait_syncs(0, 1).await?;
            Check::NotYet(format!("{:?}", started.elapsed()))
        })
    })
    .await?;
    ensure!(
        steady.replica_walk()? == [3],
        "flip-flop: {:?}",
        steady.replica_walk()?
    );
    let after = writes_of(&world.operators[0].metrics().await?, "replicas");
    ensure!(
        after == before,
        "{} operator writes against the HPA",
        after - before
    );
    let walk = recorder.replica_walk()?;
    ensure!(walk == [3, 1, 3], "walk {walk:?}");

    // One Warning Event for the competitor, not one per sync.
    let events: kube::api::Api<k8s_openapi::api::events::v1::Event> =
        kube::api::Api::namespaced(world.client.clone(), world.namespace());
    let competing = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CompetingAutoscaler"))
        .map(|e| {
            e.deprecated_count
                .unwrap_or(1)
                .max(e.series.map_or(1, |s| s.count))
        })
        .sum::<i32>();
    ensure!(competing == 1, "{competing} CompetingAutoscaler Events");
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_second_llmscaler_on_the_same_target_holds_naming_the_first() -> anyhow::Result<()> {
    use llmscaler_e2e::fixture::{deployment_ref, queue_scaler_spec};
    let mut world = World::new("ctl-two").await?;
    world
        .queue_scaled_deployment(2, "two", 0.5, (1, 10), json!({}))
        .await?;
    // Created later (as when the webhook was down): it must not fight `chat`.
    world
        .create_scaler(
            "second",
            queue_scaler_spec(
                &world.prometheus.url(),
                deployment_ref("vllm"),
                "two",
                (5, 10),
                json!({}),
            ),
        )
        .await?;
    let recorder = world.record("vllm").await?;
    world.start_operator("two-0", &[]).await?;
    world
        .wait_condition(
            "second",
            "ReplicasContested",
            "True",
            "LLMScaler chat",
            MINUTE,
        )
        .await?;
    world.wait_syncs(0, 5).await?;
    let walk = recorder.replica_walk()?;
    ensure!(walk == [2], "the second scaler wrote: {walk:?}");
    world.finish().await
}
