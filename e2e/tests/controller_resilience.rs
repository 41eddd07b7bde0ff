//! The controller when things move under it (issue 6): restarts inside a stabilization window,
//! leader failover, a Deployment rollout, another field manager writing replicas, the Custom
//! provider, and targets other than Deployments.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use axum::Json;
use axum::extract::State;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use llmscaler_e2e::fixture::{
    World, apply_crd, deployment_manifest, deployment_ref, queue_scaler_spec,
};
use llmscaler_e2e::operator::run_command;
use llmscaler_e2e::{Check, kubectl_path, wait_for};
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_restart_inside_the_stabilization_window_does_not_scale_down_early() -> anyhow::Result<()>
{
    let mut world = World::new("ctl-restart").await?;
    let window = 20;
    world
        .queue_scaled_deployment(
            4,
            "restart",
            0.5,
            (1, 10),
            json!({"scaleDown": {"stabilizationWindowSeconds": window}}),
        )
        .await?;
    let lease = ["--lease-duration-seconds", "3"];
    world.start_operator("restart-0", &lease).await?;
    world.metric_seen(0, "0.5").await?;
    wait_for("recommendations in status", MINUTE, || async {
        let status = world.scaler("chat").await?["status"].clone();
        Ok(
            if status["recommendations"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
            {
                Check::Done(())
            } else {
                Check::NotYet(status.to_string())
            },
        )
    })
    .await?;

    // The load drops: the recommendation becomes 1, the window keeps 4.
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"restart\"", 0.0)]);
    world.metric_seen(0, "0.0").await?;
    let dropped = Instant::now();
    // The last recommendation of 4 was made at most one sync (1 s) and one scrape (1 s) before
    // the operator read 0.
    let last_high = dropped
        .checked_sub(Duration::from_secs(2))
        .unwrap_or(dropped);
    world.operators[0].kill();
    world.operators.clear();
    world.start_operator("restart-1", &lease).await?;

    let window_end = last_high + Duration::from_secs(window);
    let mut scaled_at = None;
    while Instant::now() < window_end + MINUTE {
        let (spec, _, _) = world.deployment_replicas("vllm").await?;
        if spec < 4 {
            scaled_at = Some(Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let scaled_at = scaled_at.context("never scaled down after the window")?;
    println!(
        "scale-down {:?} after the load dropped (window {window} s, operator restarted inside it)",
        scaled_at - dropped
    );
    ensure!(
        scaled_at + Duration::from_millis(500) >= window_end,
        "scaled down {:?} before the window ended\n{}",
        window_end - scaled_at,
        world.operator_logs()
    );
    world.wait_replicas("vllm", 1, MINUTE).await?;
    world.finish().await
}

async fn lease_holder(world: &World) -> anyhow::Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(world.client.clone(), world.namespace());
    Ok(leases
        .get_opt("llmscaler-leader")
        .await?
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty()))
}

fn replica_writes(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("llmscaler_writes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn the_follower_takes_over_within_the_lease_duration_and_never_writes_before()
-> anyhow::Result<()> {
    let mut world = World::new("ctl-leader").await?;
    world
        .queue_scaled_deployment(1, "leader", 0.85, (1, 2), json!({}))
        .await?;
    let lease_seconds = 6;
    let lease = ["--lease-duration-seconds", "6"];
    world.start_operator("leader-a", &lease).await?;
    world.start_operator("leader-b", &lease).await?;
    let holder = wait_for("a lease holder", MINUTE, || async {
        Ok(match lease_holder(&world).await? {
            Some(h) => Check::Done(h),
            None => Check::NotYet("no holder".into()),
        })
    })
    .await?;
    let (leader, follower) = if holder == "leader-a" { (0, 1) } else { (1, 0) };
    world.wait_replicas("vllm", 2, MINUTE).await?;
    let follower_writes = replica_writes(&world.operators[follower].metrics().await?);
    ensure!(
        follower_writes == 0,
        "the follower wrote {follower_writes} times"
    );
    ensure!(
        replica_writes(&world.operators[leader].metrics().await?) > 0,
        "the leader never wrote"
    );

    world.operators[leader].kill();
    let killed = Instant::now();
    let follower_name = if follower == 0 {
        "leader-a"
    } else {
        "leader-b"
    };
    wait_for("the follower to hold the lease", MINUTE, || async {
        Ok(match lease_holder(&world).await? {
            Some(h) if h == follower_name => Check::Done(()),
            other => Check::NotYet(format!("{other:?}")),
        })
    })
    .await?;
    let takeover = killed.elapsed();
    println!("takeover after SIGKILL of the leader: {takeover:?} (lease {lease_seconds} s)");
    ensure!(
        takeover <= Duration::from_secs(lease_seconds + 2),
        "takeover took {takeover:?}, lease duration {lease_seconds} s"
    );
    // The new leader acts: load drops to 0 -> minReplicas 1.
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"leader\"", 0.0)]);
    world.wait_replicas("vllm", 1, MINUTE).await?;

    // SIGTERM: a clean exit that releases the lease.
    let clean = world.operators[follower]
        .terminate(Duration::from_secs(20))
        .await?;
    ensure!(clean, "the operator did not exit 0 on SIGTERM");
    let holder = lease_holder(&world).await?;
    ensure!(
        holder.is_none(),
        "the lease is still held by {holder:?} after SIGTERM"
    );
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_rollout_defers_scaling_until_it_completes() -> anyhow::Result<()> {
    let mut world = World::new("ctl-rollout").await?;
    world
        .queue_scaled_deployment(2, "rollout", 0.5, (1, 10), json!({}))
        .await?;
    world.start_operator("rollout-0", &[]).await?;
    world.metric_seen(0, "0.5").await?;

    // A new template whose pods cannot be scheduled: the rollout stays in progress.
    let mut stuck = deployment_manifest(world.namespace(), "vllm", None);
    stuck["spec"]["template"]["spec"]["nodeSelector"] = json!({"no-such-node": "true"});
    world.apply("e2e-setup", &stuck).await?;
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"rollout\"", 1.0)]);
    let condition = world
        .wait_condition("chat", "AbleToScale", "False", "rollout", MINUTE)
        .await?;
    println!("during the rollout: {condition}");
    let (spec, _, _) = world.deployment_replicas("vllm").await?;
    ensure!(spec == 2, "replicas changed to {spec} during the rollout");

    // The rollout completes: the deferred scale-up happens (ready 2 x 1.0 / 0.5 = 4).
    world
        .apply(
            "e2e-setup",
            &deployment_manifest(world.namespace(), "vllm", None),
        )
        .await?;
    wait_for("the scale-up after the rollout", MINUTE, || async {
        let (spec, _, _) = world.deployment_replicas("vllm").await?;
        Ok(if spec >= 4 {
            Check::Done(())
        } else {
            Check::NotYet(format!("spec {spec}"))
        })
    })
    .await?;
    world.finish().await
}

/// A decision server (spec §4) whose answer the test sets.
async fn decision_server(namespace: String, active: Arc<Mutex<i64>>) -> anyhow::Result<String> {
    let router = axum::Router::new()
        .route(
            "/decisions",
            axum::routing::get(
                |State((ns, active)): State<(String, Arc<Mutex<i64>>)>| async move {
                    let n = *active
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    Json(json!({
                        "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
                        "decisions": [
                            {"namespace": ns, "serviceId": "llama", "replicas": {"active": n}},
                            {"namespace": ns, "serviceId": "other", "replicas": {"active": 9}}
                        ]
                    }))
                },
            ),
        )
        .with_state((namespace, active));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{addr}"))
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn custom_provider_end_to_end_and_a_contested_field_is_reasserted_once() -> anyhow::Result<()>
{
    let mut world = World::new("ctl-custom").await?;
    world.create_deployment("vllm", 1).await?;
    world.wait_replicas("vllm", 1, MINUTE).await?;
    let active = Arc::new(Mutex::new(3));
    let url = decision_server(world.namespace().to_string(), active.clone()).await?;
    world
        .create_scaler(
            "chat",
            json!({
                "targetRef": deployment_ref("vllm"),
                "metricProvider": "Custom",
                "customProvider": {"serviceId": "llama", "path": "decisions/"},
                "serverAddress": url,
                "minReplicas": 2,
                "maxReplicas": 5,
                "syncPeriodSeconds": 2,
            }),
        )
        .await?;
    world.start_operator("custom-0", &[]).await?;
    world.wait_replicas("vllm", 3, MINUTE).await?;

    // Behind the operator's back: a client-side kubectl apply with replicas 1.
    let mut manual = deployment_manifest(world.namespace(), "vllm", Some(1));
    manual["metadata"]
        .as_object_mut()
        .map(|m| m.remove("namespace"));
    let written = Instant::now();
    run_command(
        &kubectl_path(),
        &["apply", "-n", world.namespace(), "-f", "-"],
        Some(&manual.to_string()),
    )?;
    let mut walk = vec![3];
    while written.elapsed() < Duration::from_secs(8) {
        let (spec, _, _) = world.deployment_replicas("vllm").await?;
        if walk.last() != Some(&spec) {
            walk.push(spec);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("replicas after kubectl apply replicas=1: {walk:?}");
    ensure!(walk.last() == Some(&3), "not re-asserted: {walk:?}");
    let flips_back = walk.windows(2).filter(|w| w[0] == 1 && w[1] == 3).count();
    ensure!(flips_back == 1, "re-asserted {flips_back} times: {walk:?}");
    let condition = world
        .wait_condition(
            "chat",
            "ReplicasContested",
            "True",
            "kubectl-client-side-apply",
            MINUTE,
        )
        .await?;
    println!("ReplicasContested: {}", condition["message"]);
    let events = run_command(
        &kubectl_path(),
        &[
            "get",
            "events.events.k8s.io",
            "-n",
            world.namespace(),
            "-o",
            "json",
        ],
        None,
    )?;
    let events: Value = serde_json::from_str(&events)?;
    let reasserted = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "ReplicasReasserted")
        .count();
    ensure!(reasserted == 1, "ReplicasReasserted events: {reasserted}");

    // Custom rows of spec §2: active 7 with max 5 -> 5; active 0 with min 2 -> 2.
    *active
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = 7;
    world.wait_replicas("vllm", 5, MINUTE).await?;
    *active
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = 0;
    world.wait_replicas("vllm", 2, MINUTE).await?;
    world.finish().await
}

const LWS_CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
  "spec": {
    "group": "leaderworkerset.x-k8s.io",
    "names": {"kind": "LeaderWorkerSet", "plural": "leaderworkersets", "singular": "leaderworkerset"},
    "scope": "Namespaced",
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "format": "int32"}}},
        "status": {"type": "object", "properties": {"readyReplicas": {"type": "integer", "format": "int32"}}}
      }}}
    }]
  }
}"#;

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn statefulset_and_leaderworkerset_shaped_targets_are_scaled_generically()
-> anyhow::Result<()> {
    let mut world = World::new("ctl-kinds").await?;
    apply_crd(LWS_CRD, "leaderworkersets.leaderworkerset.x-k8s.io")?;
    let ns = world.namespace().to_string();
    let mut sts = deployment_manifest(&ns, "db", Some(1));
    sts["kind"] = json!("StatefulSet");
    sts["spec"]["serviceName"] = json!("db");
    world.apply("e2e-setup", &sts).await?;
    let lws = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "lws", "namespace": ns}, "spec": {"replicas": 1}});
    world.apply("e2e-setup", &lws).await?;
    // Nothing runs LeaderWorkerSets here: the test plays its controller and reports 1 ready.
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
        "leaderworkersets",
    );
    let lws_api: Api<DynamicObject> = Api::namespaced_with(world.client.clone(), &ns, &resource);
    lws_api
        .patch_status(
            "lws",
            &PatchParams::apply("e2e-lws-controller").force(),
            &Patch::Apply(
                json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "status": {"readyReplicas": 1}}),
            ),
        )
        .await?;

    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"kinds\"", 0.85)]);
    for (name, target) in [
        (
            "sts",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}),
        ),
        (
            "lws",
            json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "lws"}),
        ),
    ] {
        world
            .create_scaler(
                name,
                queue_scaler_spec(&world.prometheus.url(), target, "kinds", (1, 3), json!({})),
            )
            .await?;
    }
    world.start_operator("kinds-0", &[]).await?;

    // StatefulSet: ready 1 -> 2 -> 3 (max).
    wait_for("StatefulSet db at 3", MINUTE, || async {
        let api: Api<k8s_openapi::api::apps::v1::StatefulSet> =
            Api::namespaced(world.client.clone(), &ns);
        let spec = api
            .get("db")
            .await?
            .spec
            .and_then(|s| s.replicas)
            .unwrap_or(1);
        Ok(if spec == 3 {
            Check::Done(())
        } else {
            Check::NotYet(format!("spec {spec}"))
        })
    })
    .await?;
    // LeaderWorkerSet: ready stays 1 -> ceil(1 x 0.85 / 0.5) = 2, owned by llmscaler alone.
    let object = wait_for("LeaderWorkerSet lws at 2", MINUTE, || async {
        let object = lws_api.get("lws").await?;
        Ok(if object.data["spec"]["replicas"] == 2 {
            Check::Done(object)
        } else {
            Check::NotYet(object.data["spec"].to_string())
        })
    })
    .await?;
    let owners: Vec<String> = object
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
        })
        .filter_map(|e| e.manager)
        .collect();
    ensure!(
        owners == vec!["llmscaler".to_string()],
        "spec.replicas owners: {owners:?}"
    );
    world.finish().await
}
