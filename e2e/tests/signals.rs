//! Runtime signals over the live pod set and guardrails (issue 15 items 1 and 2,
//! docs/signals.md) against the local control plane and a real Prometheus: the exporter serves
//! one series per pod, labelled `namespace` and `pod` as a PodMonitor would, and the real
//! `llmscaler run` binary reads them over the Deployment's current Ready pods.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use llmscaler_e2e::fixture::{World, deployment_ref};
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

/// The Ready (not deleting) pods of Deployment `vllm`, sorted.
async fn pod_names(world: &World) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), world.namespace());
    let mut names: Vec<String> = pods
        .list(&ListParams::default().labels("app=vllm"))
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    Ok(names)
}

/// Exposition text: one sample of `metric` per `(pod, value)`, labelled with the test's
/// namespace and the pod (NaN written as Prometheus writes it).
fn per_pod(namespace: &str, metric: &str, samples: &[(&str, f64)]) -> String {
    let mut text = format!("# TYPE {metric} gauge\n");
    for (pod, value) in samples {
        let v = if value.is_nan() {
            "NaN".to_owned()
        } else {
            value.to_string()
        };
        text.push_str(&format!(
            "{metric}{{namespace=\"{namespace}\",pod=\"{pod}\"}} {v}\n"
        ));
    }
    text
}

/// A scaler on Deployment `vllm` with `metrics`, syncing every second.
fn scaler_spec(world: &World, (min, max): (i32, i32), metrics: Value) -> Value {
    json!({
        "targetRef": deployment_ref("vllm"),
        "serverAddress": world.prometheus.url(),
        "minReplicas": min,
        "maxReplicas": max,
        "syncPeriodSeconds": 1,
        "retryPeriodSeconds": 1,
        "metrics": metrics,
    })
}

/// The vLLM `waiting` signal, target 1 per pod, Prometheus scraping every second (the
/// operator's window: 2 × 2 s).
fn waiting(coverage: &str) -> Value {
    json!({"name": "waiting", "runtime": "vllm", "signal": "waiting", "coverage": coverage,
           "scrapeIntervalSeconds": 2, "target": "1"})
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn coverage_hold_names_the_pod_whose_series_is_gone() -> anyhow::Result<()> {
    let mut world = World::new("sig-cover").await?;
    world.create_deployment("vllm", 4).await?;
    world.wait_replicas("vllm", 4, MINUTE).await?;
    let pods = pod_names(&world).await?;
    ensure!(pods.len() == 4, "pods: {pods:?}");
    let ns = world.namespace().to_owned();
    let all: Vec<(&str, f64)> = pods.iter().map(|p| (p.as_str(), 1.0)).collect();
    world
        .exporter
        .set(per_pod(&ns, "vllm:num_requests_waiting", &all));
    world
        .create_scaler("chat", scaler_spec(&world, (1, 8), json!([waiting("0.9")])))
        .await?;
    let deployment = world.record("vllm").await?;
    world.start_operator("cover-0", &[]).await?;
    // 4 pods × 1 waiting / target 1 = 4: steady, every metric measured.
    world
        .wait_condition("chat", "ScalingActive", "True", "every metric", MINUTE)
        .await?;

    // One pod's series disappears. Coverage 0.9 of 4 pods needs all four: once its last sample
    // is older than two scrape intervals the metric is unmeasurable, the scaler holds and names
    // the missing pod.
    let gone = pods[2].clone();
    let rest = |value: f64| -> Vec<(&str, f64)> {
        pods.iter()
            .filter(|p| **p != gone)
            .map(|p| (p.as_str(), value))
            .collect()
    };
    world
        .exporter
        .set(per_pod(&ns, "vllm:num_requests_waiting", &rest(1.0)));
    let held = world
        .wait_condition("chat", "ScalingActive", "False", &gone, MINUTE)
        .await?;
    println!("held: {}", held["message"]);
    let message = held["message"].as_str().unwrap_or_default();
    ensure!(
        message.contains("3 of 4 Ready pods report a fresh sample, below coverage 0.9"),
        "{message}"
    );
    ensure!(held["reason"] == "MetricsUnavailable", "{held}");
    // The others read 0: averaging over the pods that are left would scale down to 1; the
    // scaler keeps holding.
    world
        .exporter
        .set(per_pod(&ns, "vllm:num_requests_waiting", &rest(0.0)));
    world.wait_syncs(0, 8).await?;
    world
        .wait_condition("chat", "ScalingActive", "False", &gone, MINUTE)
        .await?;
    ensure!(
        deployment.replica_walk()? == vec![4],
        "the fleet moved while the metric was unmeasurable: {:?}",
        deployment.replica_walk()?
    );

    // The pod reports again: the average is 0 and the fleet scales down to the minimum.
    let back: Vec<(&str, f64)> = pods.iter().map(|p| (p.as_str(), 0.0)).collect();
    world
        .exporter
        .set(per_pod(&ns, "vllm:num_requests_waiting", &back));
    deployment.wait_spec_replicas(1, MINUTE).await?;
    assert_eq!(deployment.replica_walk()?, vec![4, 1]);
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn series_of_deleted_pods_never_hold_the_fleet_up() -> anyhow::Result<()> {
    let mut world = World::new("sig-stale").await?;
    world.create_deployment("vllm", 3).await?;
    world.wait_replicas("vllm", 3, MINUTE).await?;
    let pods = pod_names(&world).await?;
    ensure!(pods.len() == 3, "pods: {pods:?}");
    let ns = world.namespace().to_owned();
    // A pod deleted before the test still has a series in Prometheus, at a high value: the
    // "one-way ratchet" of a plain avg() over every series.
    let ghost = "vllm-6b7f9c5d4-ghost1";
    let mut samples: Vec<(&str, f64)> = pods.iter().map(|p| (p.as_str(), 1.0)).collect();
    samples.push((ghost, 100.0));
    world
        .exporter
        .set(per_pod(&ns, "vllm:num_requests_waiting", &samples));
    world
        .create_scaler("chat", scaler_spec(&world, (1, 8), json!([waiting("0.5")])))
        .await?;
    let deployment = world.record("vllm").await?;
    world.start_operator("stale-0", &[]).await?;
    // avg over the 3 Ready pods = 1 -> 3 (a plain avg() would read 25.75 and go to 8).
    world
        .wait_condition("chat", "ScalingActive", "True", "every metric", MINUTE)
        .await?;
    world.wait_syncs(0, 3).await?;
    ensure!(
        deployment.replica_walk()? == vec![3],
        "the ghost pod's series moved the fleet: {:?}",
        deployment.replica_walk()?
    );

    // Load drops to 0.3 per pod: ceil(3 × 0.3) = 1. The pods removed by the scale-down keep
    // their series, now high: they are gone from the Ready set, so they are ignored.
    let low: Vec<(&str, f64)> = pods.iter().map(|p| (p.as_str(), 0.3)).collect();
    let mut with_ghost = low.clone();
    with_ghost.push((ghost, 100.0));
    world
        .exporter
        .set(per_pod(&ns, "vllm:num_requests_waiting", &with_ghost));
    deployment.wait_ready_replicas(1, MINUTE).await?;
    let survivor = pod_names(&world).await?;
    ensure!(survivor.len() == 1, "pods after scale-down: {survivor:?}");
    let mut after: Vec<(&str, f64)> = pods
        .iter()
        .map(|p| (p.as_str(), if *p == survivor[0] { 0.3 } else { 100.0 }))
        .collect();
    after.push((ghost, 100.0));
    world
        .exporter
        .set(per_pod(&ns, "vllm:num_requests_waiting", &after));
    world.wait_syncs(0, 5).await?;
    let walk = deployment.replica_walk()?;
    println!("survivor {survivor:?}; walk {walk:?}");
    assert_eq!(
        walk,
        vec![3, 1],
        "deleted pods' series brought the fleet back up"
    );
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn guardrail_blocks_a_scale_down_and_never_causes_one() -> anyhow::Result<()> {
    let mut world = World::new("sig-guard").await?;
    world.create_deployment("vllm", 4).await?;
    world.wait_replicas("vllm", 4, MINUTE).await?;
    let pods = pod_names(&world).await?;
    ensure!(pods.len() == 4, "pods: {pods:?}");
    let ns = world.namespace().to_owned();
    let exposition = |queue: f64, ttft: f64| {
        let q: Vec<(&str, f64)> = pods.iter().map(|p| (p.as_str(), queue)).collect();
        let t: Vec<(&str, f64)> = pods.iter().map(|p| (p.as_str(), ttft)).collect();
        format!(
            "{}{}",
            per_pod(&ns, "vllm:num_requests_waiting", &q),
            per_pod(&ns, "llm_ttft_p90_seconds", &t)
        )
    };
    // The queue asks for 4 (1 per pod); the TTFT P90 (a per-pod gauge here, so the test sets
    // it directly) is far below its 2 s target: a guardrail below target never lowers.
    world.exporter.set(exposition(1.0, 0.1));
    let guardrail = json!({
        "name": "ttft", "role": "Guardrail", "perPod": true, "target": "2",
        "query": format!("max by (pod) (llm_ttft_p90_seconds{{namespace=\"{ns}\"}})"),
    });
    world
        .create_scaler(
            "chat",
            scaler_spec(&world, (1, 4), json!([waiting("0.5"), guardrail])),
        )
        .await?;
    let deployment = world.record("vllm").await?;
    world.start_operator("guard-0", &[]).await?;
    world
        .wait_condition("chat", "ScalingActive", "True", "every metric", MINUTE)
        .await?;
    world.wait_syncs(0, 5).await?;
    ensure!(
        deployment.replica_walk()? == vec![4],
        "a guardrail below target moved the fleet: {:?}",
        deployment.replica_walk()?
    );

    // The queue empties (alone it would scale down to 1) but TTFT is above target: held.
    world.exporter.set(exposition(0.0, 3.0));
    world
        .wait_condition("chat", "ScalingLimited", "True", "maxReplicas 4", MINUTE)
        .await?;
    world.wait_syncs(0, 5).await?;
    ensure!(
        deployment.replica_walk()? == vec![4],
        "the scale-down went through above the guardrail's target: {:?}",
        deployment.replica_walk()?
    );

    // Idle window: histogram_quantile gives NaN on every pod. An unmeasurable guardrail neither
    // holds nor lowers: the queue's scale-down goes through.
    world.exporter.set(exposition(0.0, f64::NAN));
    let skipped = world
        .wait_condition(
            "chat",
            "ScalingActive",
            "True",
            "ttft (guardrail: neither holds nor lowers)",
            MINUTE,
        )
        .await?;
    println!("guardrail skipped: {}", skipped["message"]);
    deployment.wait_spec_replicas(1, MINUTE).await?;
    assert_eq!(deployment.replica_walk()?, vec![4, 1]);
    world.finish().await
}
