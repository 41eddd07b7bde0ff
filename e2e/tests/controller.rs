//! The controller against the local control plane and a real Prometheus (issue 6): every test
//! runs the real `llmscaler run` binary with a token of the chart's ServiceAccount.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::{Duration, Instant, SystemTime};

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use llmscaler_e2e::fixture::{
    World, deployment_ref, queue_scaler_spec, reconcile_count, writes_of,
};
use llmscaler_e2e::{Check, wait_for};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

/// The managers owning `f:spec.f:replicas` of a Deployment, and llmscaler's whole fieldsV1.
async fn replicas_ownership(
    world: &World,
    name: &str,
) -> anyhow::Result<(Vec<String>, Option<serde_json::Value>)> {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(world.client.clone(), world.namespace());
    let d = api.get(name).await?;
    let mut owners = Vec::new();
    let mut ours = None;
    for entry in d.metadata.managed_fields.unwrap_or_default() {
        let fields = entry.fields_v1.map(|f| f.0).unwrap_or_default();
        let manager = entry.manager.unwrap_or_default();
        if fields.pointer("/f:spec/f:replicas").is_some() {
            owners.push(manager.clone());
        }
        if manager == "llmscaler" {
            ours = Some(fields);
        }
    }
    Ok((owners, ours))
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn scales_by_the_spec_numbers_owns_replicas_and_is_quiet_when_steady() -> anyhow::Result<()> {
    let mut world = World::new("ctl-basic").await?;
    world
        .queue_scaled_deployment(1, "basic", 0.85, (1, 5), json!({}))
        .await?;
    // Every version of the Deployment from before the operator starts: the walk is exact.
    let deployment = world.record("vllm").await?;
    world.start_operator("basic-0", &[]).await?;

    // ready 1, value 0.85, target 0.5 -> 2; then 2 -> ceil(2*1.7) = 4; then 4 -> 7 clamped to 5.
    deployment.wait_ready_replicas(5, MINUTE).await?;
    let walk = deployment.replica_walk()?;
    println!("replica walk at 0.85: {walk:?}");
    assert_eq!(walk, vec![1, 2, 4, 5]);
    world
        .wait_condition("chat", "ScalingLimited", "True", "maxReplicas 5", MINUTE)
        .await?;

    // spec 5 all ready, value 0, min 1 -> 1.
    let changed = SystemTime::now();
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"basic\"", 0.0)]);
    let written = deployment.wait_spec_replicas(1, MINUTE).await?;
    println!(
        "reaction time (exporter value changed -> spec.replicas write delivered): {:?}",
        written.seen_at.duration_since(changed)?
    );
    deployment.wait_ready_replicas(1, MINUTE).await?;
    assert_eq!(deployment.replica_walk()?, vec![1, 2, 4, 5, 1]);

    let (owners, ours) = replicas_ownership(&world, "vllm").await?;
    println!("spec.replicas owners: {owners:?}; llmscaler fieldsV1: {ours:?}");
    assert_eq!(owners, vec!["llmscaler"]);
    assert_eq!(ours, Some(json!({"f:spec": {"f:replicas": {}}})));

    // Steady state: no write to the Deployment or the scaler over five sync periods, while the
    // operator keeps syncing (its reconcile histogram keeps counting). First let the status
    // catch up with the last change (it reports the ready count of the sync after it).
    wait_for("status.currentReplicas 1", MINUTE, || async {
        let status = world.scaler("chat").await?["status"].clone();
        Ok(if status["currentReplicas"] == 1 {
            Check::Done(())
        } else {
            Check::NotYet(status.to_string())
        })
    })
    .await?;
    let scaler = world.record_scaler("chat").await?;
    let (deployment_versions, scaler_versions) =
        (deployment.versions().len(), scaler.versions().len());
    world.wait_syncs(0, 5).await?;
    assert_eq!(
        deployment.versions().len(),
        deployment_versions,
        "the Deployment was written in steady state: {:?}",
        deployment.versions().last().map(|v| v.summary())
    );
    assert_eq!(
        scaler.versions().len(),
        scaler_versions,
        "the scaler status was written in steady state: {:?}\n{}",
        scaler.versions().last().map(|v| v.summary()),
        world.operator_logs()
    );
    let metrics = world.operators[0].metrics().await?;
    println!(
        "writes: replicas {}, status {}, deletion_cost {}",
        writes_of(&metrics, "replicas"),
        writes_of(&metrics, "status"),
        writes_of(&metrics, "deletion_cost")
    );
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn cache_aware_scale_down_removes_the_lowest_cost_pod() -> anyhow::Result<()> {
    let mut world = World::new("ctl-cache").await?;
    world.create_deployment("vllm", 3).await?;
    world.wait_replicas("vllm", 3, MINUTE).await?;
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), world.namespace());
    let names: Vec<String> = pods
        .list(&ListParams::default().labels("app=vllm"))
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    ensure!(names.len() == 3, "pods: {names:?}");
    // The pod with the coldest cache (lowest value) must go; pick the middle one by name so that
    // neither newest-first nor the ReplicaSet's own ranking would choose it by accident.
    let mut sorted = names.clone();
    sorted.sort();
    let cold = sorted[1].clone();
    let cache_samples: Vec<(String, f64)> = sorted
        .iter()
        .map(|p| (format!("pod=\"{p}\""), if *p == cold { 1.0 } else { 50.0 }))
        .collect();
    let queue = "# TYPE llm_queue gauge\nllm_queue{scaler=\"cache\"} 0.5\n".to_string();
    let cache: String = cache_samples
        .iter()
        .map(|(labels, v)| format!("llm_cache{{{labels}}} {v}\n"))
        .collect();
    world
        .exporter
        .set(format!("{queue}# TYPE llm_cache gauge\n{cache}"));
    world
        .create_scaler(
            "chat",
            queue_scaler_spec(
                &world.prometheus.url(),
                deployment_ref("vllm"),
                "cache",
                (1, 5),
                json!({"scaleDown": {"deletionCostQuery": "llm_cache"}}),
            ),
        )
        .await?;
    let deployment = world.record("vllm").await?;
    world.start_operator("cache-0", &[]).await?;
    // ready 3 x 0.5 / 0.5 = 3: steady. Now 0.3 -> ceil(1.8) = 2.
    world
        .wait_condition("chat", "Ready", "True", "", MINUTE)
        .await?;
    world.exporter.set(format!(
        "# TYPE llm_queue gauge\nllm_queue{{scaler=\"cache\"}} 0.3\n# TYPE llm_cache gauge\n{cache}"
    ));
    deployment.wait_ready_replicas(2, MINUTE).await?;
    assert_eq!(
        deployment.replica_walk()?,
        vec![3, 2],
        "one scale-down, 3 -> 2"
    );
    let left: Vec<(String, Option<String>)> = pods
        .list(&ListParams::default().labels("app=vllm"))
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                p.name_any(),
                p.annotations()
                    .get("controller.kubernetes.io/pod-deletion-cost")
                    .cloned(),
            )
        })
        .collect();
    println!("cold pod {cold}; pods left with their costs: {left:?}");
    assert!(
        left.iter().all(|(name, _)| *name != cold),
        "the cold pod {cold} is still there: {left:?}"
    );
    assert!(
        left.iter().all(|(_, cost)| cost.as_deref() == Some("50")),
        "{left:?}"
    );
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn unmeasurable_metrics_and_a_stopped_prometheus_hold_the_fleet() -> anyhow::Result<()> {
    let mut world = World::new("ctl-hold").await?;
    world.create_deployment("vllm", 3).await?;
    world.wait_replicas("vllm", 3, MINUTE).await?;
    // Unaggregated on purpose, so that two series are possible.
    let query = "llm_queue{scaler=\"hold\"}";
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"hold\"", 0.5)]);
    world
        .create_scaler(
            "chat",
            queue_scaler_spec(
                &world.prometheus.url(),
                deployment_ref("vllm"),
                "hold",
                (1, 10),
                json!({"metrics": [{"name": "queue", "query": query, "target": "0.5"}]}),
            ),
        )
        .await?;
    // Every version of the Deployment from before the operator starts: any move is seen.
    let deployment = world.record("vllm").await?;
    world.start_operator("hold-0", &[]).await?;
    world
        .wait_condition("chat", "ScalingActive", "True", "", MINUTE)
        .await?;

    let cases: [(&str, &[(&str, f64)]); 3] = [
        ("not measurable", &[("scaler=\"hold\"", f64::NAN)]),
        (
            "series",
            &[
                ("scaler=\"hold\",pod=\"a\"", 0.1),
                ("scaler=\"hold\",pod=\"b\"", 0.1),
            ],
        ),
        ("no data", &[("scaler=\"other\"", 0.1)]),
    ];
    for (message, samples) in cases {
        world.exporter.set_gauge("llm_queue", samples);
        let condition = world
            .wait_condition("chat", "ScalingActive", "False", message, MINUTE)
            .await?;
        println!("hold on {message:?}: {}", condition["message"]);
        assert_eq!(
            deployment.replica_walk()?,
            vec![3],
            "the fleet moved while {message}"
        );
        // Back to a healthy value between cases so each condition flips anew.
        world
            .exporter
            .set_gauge("llm_queue", &[("scaler=\"hold\"", 0.5)]);
        world
            .wait_condition("chat", "ScalingActive", "True", "", MINUTE)
            .await?;
    }

    world.prometheus.stop();
    let condition = world
        .wait_condition("chat", "ScalingActive", "False", "holding at 3", MINUTE)
        .await?;
    println!("hold with Prometheus stopped: {}", condition["message"]);
    let errors_before = world.operators[0].metrics().await?;
    let count = |m: &str| {
        m.lines()
            .filter(|l| l.starts_with("llmscaler_metric_errors_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    let before = count(&errors_before);
    wait_for("three more failing syncs", MINUTE, || async {
        let now = count(&world.operators[0].metrics().await?);
        Ok(if now >= before + 3 {
            Check::Done(())
        } else {
            Check::NotYet(format!("{now} errors"))
        })
    })
    .await?;
    assert_eq!(
        deployment.replica_walk()?,
        vec![3],
        "the fleet moved while Prometheus was down"
    );
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn scales_to_zero_and_wakes_then_steps_down_with_the_settle_guard() -> anyhow::Result<()> {
    let mut world = World::new("ctl-zero").await?;
    world.create_deployment("vllm", 2).await?;
    world.create_deployment("big", 5).await?;
    world.wait_replicas("vllm", 2, MINUTE).await?;
    world.wait_replicas("big", 5, MINUTE).await?;
    world.exporter.set_gauge(
        "llm_queue",
        &[("scaler=\"zero\"", 0.0), ("scaler=\"step\"", 0.5)],
    );
    world
        .create_scaler(
            "zero",
            queue_scaler_spec(
                &world.prometheus.url(),
                deployment_ref("vllm"),
                "zero",
                (0, 5),
                json!({}),
            ),
        )
        .await?;
    world
        .create_scaler(
            "step",
            queue_scaler_spec(
                &world.prometheus.url(),
                deployment_ref("big"),
                "step",
                (1, 10),
                json!({"scaleDown": {"maxStepReplicas": 2}}),
            ),
        )
        .await?;
    // Both Deployments recorded from before the operator starts: the walks are exact.
    let (vllm, big) = (world.record("vllm").await?, world.record("big").await?);
    world.start_operator("zero-0", &[]).await?;

    // spec 2, value 0, min 0 -> 0.
    vllm.wait_ready_replicas(0, MINUTE).await?;
    // spec 0, value 0.85 -> 2 (baseline 1).
    world.exporter.set_gauge(
        "llm_queue",
        &[("scaler=\"zero\"", 0.85), ("scaler=\"step\"", 0.5)],
    );
    vllm.wait_spec_replicas(2, MINUTE).await?;
    assert_eq!(vllm.replica_walk()?, vec![2, 0, 2]);

    // maxStep 2, spec 5 all ready, value 0 -> 3 (status desired 1), then 1 once settled.
    ensure!(
        big.replica_walk()? == vec![5],
        "big moved at 0.5: {:?}",
        big.replica_walk()?
    );
    let step = world.record_scaler("step").await?;
    world.exporter.set_gauge(
        "llm_queue",
        &[("scaler=\"zero\"", 0.85), ("scaler=\"step\"", 0.0)],
    );
    big.wait_spec_replicas(3, MINUTE).await?;
    step.wait_until(
        "status.desiredReplicas 1 while the step cap holds 3",
        MINUTE,
        |v| (v.get("/status/desiredReplicas") == 1).then_some(()),
    )
    .await?;
    big.wait_ready_replicas(1, MINUTE).await?;
    let walk = big.replica_walk()?;
    println!("step-capped walk: {walk:?}");
    assert_eq!(walk, vec![5, 3, 1]);
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn steady_state_with_a_window_writes_status_once_per_refresh_interval() -> anyhow::Result<()>
{
    let mut world = World::new("ctl-steady").await?;
    // window 20 s, sync 1 s: the history is refreshed in status every 5 s (a quarter window).
    world
        .queue_scaled_deployment(
            2,
            "steady",
            0.5,
            (1, 5),
            json!({"scaleDown": {"stabilizationWindowSeconds": 20}}),
        )
        .await?;
    world.start_operator("steady-0", &[]).await?;
    world
        .wait_condition("chat", "Ready", "True", "", MINUTE)
        .await?;
    // Every write from here on, as the API server sees it: a status write is a new version of
    // the scaler, any write to the Deployment a new version of it.
    let scaler = world.record_scaler("chat").await?;
    let deployment = world.record("vllm").await?;
    let before = world.operators[0].metrics().await?;
    let started = Instant::now();
    let first = reconcile_count(&before);
    world.wait_syncs(0, 20).await?;
    let elapsed = started.elapsed();
    let after = world.operators[0].metrics().await?;
    let status_writes = u64::try_from(scaler.versions().len() - 1)?;
    let deployment_writes = deployment.versions().len() - 1;
    let counted = writes_of(&after, "status") - writes_of(&before, "status");
    let replica_writes = writes_of(&after, "replicas") - writes_of(&before, "replicas");
    let n = reconcile_count(&after) - first;
    #[allow(clippy::cast_precision_loss)]
    let per_hour = status_writes as f64 / elapsed.as_secs_f64() * 3600.0;
    println!(
        "steady state with a 20 s window, 1 s sync: {status_writes} scaler versions ({counted} status writes counted by the operator) and {deployment_writes} Deployment versions in {n} syncs ({elapsed:?}), {per_hour:.0} status writes/hour"
    );
    assert_eq!(
        deployment_writes,
        0,
        "the Deployment was written: {:?}",
        deployment.latest().map(|v| v.summary())
    );
    assert_eq!(replica_writes, 0);
    // One refresh per 5 s, plus one for a refresh boundary falling inside the interval.
    let bound = elapsed.as_secs() / 5 + 1;
    assert!(
        status_writes <= bound,
        "{status_writes} status writes in {elapsed:?} (bound {bound})"
    );
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn an_invalid_spec_that_bypassed_admission_is_refused_with_a_condition() -> anyhow::Result<()>
{
    let mut world = World::new("ctl-invalid").await?;
    world
        .queue_scaled_deployment(
            3,
            "invalid",
            0.0,
            (1, 5),
            json!({"metrics": [{"name": "queue", "query": "avg(llm_queue{scaler=\"invalid\"})", "target": "80%"}]}),
        )
        .await?;
    let deployment = world.record("vllm").await?;
    world.start_operator("invalid-0", &[]).await?;
    let condition = world
        .wait_condition("chat", "Ready", "False", "spec.metrics[0].target", MINUTE)
        .await?;
    println!("invalid spec: {condition}");
    assert_eq!(condition["reason"], "InvalidSpec");
    world.wait_syncs(0, 3).await?;
    assert_eq!(
        deployment.replica_walk()?,
        vec![3],
        "an invalid spec must not actuate (value 0 would have scaled to 1)"
    );
    assert_eq!(
        writes_of(&world.operators[0].metrics().await?, "replicas"),
        0
    );
    world.finish().await
}
