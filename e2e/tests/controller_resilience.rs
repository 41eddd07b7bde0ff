//! The controller when things move under it (issue 6): restarts inside a stabilization window,
//! leader failover, a Deployment rollout, another field manager writing replicas, the Custom
//! provider, and targets other than Deployments.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, ensure};
use axum::Json;
use axum::extract::State;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use llmscaler_e2e::fixture::{
    World, apply_crd, deployment_manifest, deployment_ref, queue_scaler_spec,
};
use llmscaler_e2e::operator::run_command;
use llmscaler_e2e::watch::{Recorder, Version, timestamp};
use llmscaler_e2e::{Check, kubectl_path, wait_for};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_restart_inside_the_stabilization_window_does_not_scale_down_early() -> anyhow::Result<()>
{
    let mut world = World::new("ctl-restart").await?;
    let window = Duration::from_secs(20);
    world
        .queue_scaled_deployment(
            4,
            "restart",
            0.5,
            (1, 10),
            json!({"scaleDown": {"stabilizationWindowSeconds": window.as_secs()}}),
        )
        .await?;
    // Every version of the Deployment and the scaler from before the operator starts.
    let deployment = world.record("vllm").await?;
    let scaler = world.record_scaler("chat").await?;
    let lease = ["--lease-duration-seconds", "3"];
    world.start_operator("restart-0", &lease).await?;
    scaler
        .wait_until("a recommendation of 4 in status", MINUTE, |v| {
            recommendations(v)
                .iter()
                .any(|&(_, r)| r == 4)
                .then_some(())
        })
        .await?;

    // The load drops: the recommendation becomes 1, the window keeps 4. The operator persists
    // the window as soon as its shape changes, so status then holds the time of the last
    // recommendation of 4 (second precision, rounded up) next to the lower one.
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"restart\"", 0.0)]);
    let last_high = scaler
        .wait_until("a lower recommendation in status", MINUTE, |v| {
            let records = recommendations(v);
            records.iter().any(|&(_, r)| r < 4).then(|| {
                records
                    .iter()
                    .filter(|&&(_, r)| r >= 4)
                    .map(|&(t, _)| t)
                    .max()
            })
        })
        .await?
        .context("status kept no recommendation of 4 next to the lower one")?;
    world.operators[0].kill();
    world.operators.clear();
    world.start_operator("restart-1", &lease).await?;
    let restarted = SystemTime::now();

    // The earliest legitimate end of the window: the last 4 was made at most 1 s before its
    // rounded-up time in status.
    let window_end = last_high - Duration::from_secs(1) + window;
    ensure!(
        restarted < window_end,
        "the restart ended {:?} after the window, so it did not test a restart inside it",
        restarted.duration_since(window_end).unwrap_or_default()
    );
    let scaled = deployment
        .wait_until("a scale-down", window + MINUTE, |v| {
            v.replicas().is_some_and(|r| r < 4).then(|| v.clone())
        })
        .await?;
    println!(
        "scale-down delivered {:?} after the last recommendation of 4 (its status time); operator \
         restarted {:?} after it; window {window:?}",
        scaled.seen_at.duration_since(last_high).unwrap_or_default(),
        restarted.duration_since(last_high).unwrap_or_default(),
    );
    ensure!(
        scaled.seen_at >= window_end,
        "scaled down {:?} before the window ended\n{}",
        window_end
            .duration_since(scaled.seen_at)
            .unwrap_or_default(),
        world.operator_logs()
    );
    deployment.wait_ready_replicas(1, MINUTE).await?;
    let walk = deployment.replica_walk()?;
    ensure!(walk == vec![4, 1], "one scale-down, 4 -> 1: {walk:?}");
    world.finish().await
}

/// `status.recommendations` of a recorded LLMScaler version as `(time, replicas)`.
fn recommendations(version: &Version) -> Vec<(SystemTime, i32)> {
    version
        .get("/status/recommendations")
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let replicas = i32::try_from(r["replicas"].as_i64()?).ok()?;
            Some((timestamp(&r["time"]).ok()?, replicas))
        })
        .collect()
}

async fn lease_holder(world: &World) -> anyhow::Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(world.client.clone(), world.namespace());
    Ok(leases
        .get_opt("llmscaler-leader")
        .await?
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// The non-empty `spec.holderIdentity` of a recorded Lease version.
fn holder_of(version: &Version) -> Option<String> {
    version
        .get("/spec/holderIdentity")
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_string)
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
    // Every version of the Lease from before either operator starts.
    let lease_record = Recorder::start(
        &world.client,
        world.namespace(),
        &ApiResource::erase::<Lease>(&()),
        "llmscaler-leader",
    )
    .await?;
    world.start_operator("leader-a", &lease).await?;
    world.start_operator("leader-b", &lease).await?;
    let holder = lease_record
        .wait_until("a lease holder", MINUTE, holder_of)
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
    let killed = SystemTime::now();
    let follower_name = if follower == 0 {
        "leader-a"
    } else {
        "leader-b"
    };
    let taken = lease_record
        .wait_until("the follower to hold the lease", MINUTE, |v| {
            (holder_of(v)? == follower_name).then(|| v.clone())
        })
        .await?;
    // When the follower's write of the Lease arrived (a few milliseconds after it at most).
    let takeover = taken.seen_at.duration_since(killed)?;
    let holders: Vec<Option<String>> = lease_record.versions().iter().map(holder_of).collect();
    println!("lease holders, every version: {holders:?}");
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
async fn a_rollout_lets_a_spike_scale_up_and_defers_scale_down_until_it_completes()
-> anyhow::Result<()> {
    let mut world = World::new("ctl-rollout").await?;
    world
        .queue_scaled_deployment(2, "rollout", 0.5, (1, 10), json!({}))
        .await?;
    let deployment = world.record("vllm").await?;
    world.start_operator("rollout-0", &[]).await?;
    world.metric_seen(0, "0.5").await?;

    // A new template whose pods cannot be scheduled: the rollout stays in progress.
    let mut stuck = deployment_manifest(world.namespace(), "vllm", None);
    stuck["spec"]["template"]["spec"]["nodeSelector"] = json!({"no-such-node": "true"});
    world.apply("e2e-setup", &stuck).await?;
    deployment
        .wait_until("the rollout to be in progress", MINUTE, |v| {
            rollout_in_progress(v).then_some(())
        })
        .await?;

    // A traffic spike during the (slow) rollout still gets replicas: 2 x 1.0 / 0.5 = 4.
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"rollout\"", 1.0)]);
    deployment
        .wait_until("a scale-up during the rollout", MINUTE, |v| {
            v.replicas().is_some_and(|r| r >= 4).then_some(())
        })
        .await?;
    let versions = deployment.versions();
    let first_change = versions
        .iter()
        .position(|v| v.replicas() != Some(2))
        .context("no change recorded")?;
    ensure!(
        rollout_in_progress(&versions[first_change - 1]),
        "the scale-up was not during the rollout: {}",
        versions[first_change - 1].summary()
    );

    // The load drops: the scale-down waits for the rollout (AbleToScale=False RolloutInProgress).
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"rollout\"", 0.0)]);
    let condition = world
        .wait_condition("chat", "AbleToScale", "False", "rollout", MINUTE)
        .await?;
    println!("during the rollout: {condition}");
    let high = deployment.latest().and_then(|v| v.replicas()).unwrap_or(0);
    world.wait_syncs(0, 3).await?;
    let now = deployment.latest().and_then(|v| v.replicas()).unwrap_or(0);
    ensure!(
        now >= high,
        "scaled down from {high} to {now} during the rollout"
    );

    // The rollout completes: the deferred scale-down happens.
    world
        .apply(
            "e2e-setup",
            &deployment_manifest(world.namespace(), "vllm", None),
        )
        .await?;
    world.wait_replicas("vllm", 1, 2 * MINUTE).await?;
    let walk = deployment.replica_walk()?;
    println!("replica walk across the rollout: {walk:?}");
    ensure!(walk.last() == Some(&1) && walk[1] >= 4, "walk {walk:?}");
    world.finish().await
}

/// Whether a recorded Deployment version shows a rollout in progress: `status.observedGeneration
/// < metadata.generation`, or `status.updatedReplicas < spec.replicas`, or `status.replicas >
/// status.updatedReplicas` (the contract's rollout guard).
fn rollout_in_progress(version: &Version) -> bool {
    let status = |field: &str| {
        version
            .get(&format!("/status/{field}"))
            .as_i64()
            .unwrap_or(0)
    };
    let generation = version.object.metadata.generation.unwrap_or(0);
    let updated = status("updatedReplicas");
    status("observedGeneration") < generation
        || updated < i64::from(version.replicas().unwrap_or(1))
        || status("replicas") > updated
}

/// A decision server (docs/providers.md#custom-provider-decision-server) whose answer the test
/// sets.
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
    // Every version of the Deployment from before the write behind the operator's back.
    let deployment = world.record("vllm").await?;
    run_command(
        &kubectl_path(),
        &["apply", "-n", world.namespace(), "-f", "-"],
        Some(&manual.to_string()),
    )?;
    let reasserted = deployment
        .wait_record("1 written, then 3 re-asserted", MINUTE, |versions| {
            let written = versions.iter().position(|v| v.replicas() == Some(1))?;
            versions[written..]
                .iter()
                .find(|v| v.replicas() == Some(3))
                .cloned()
        })
        .await?;
    println!("re-asserted by {:?}", reasserted.replicas_managers());
    ensure!(
        reasserted.replicas_managers() == vec!["llmscaler".to_string()],
        "spec.replicas owners after the re-assert: {:?}",
        reasserted.replicas_managers()
    );
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
    let events = wait_for("a ReplicasReasserted event", MINUTE, || async {
        let n = reasserted_events(&world).await?;
        Ok(if n > 0 {
            Check::Done(n)
        } else {
            Check::NotYet("no event".into())
        })
    })
    .await?;
    ensure!(events == 1, "ReplicasReasserted events: {events}");
    // Exact: every version since the kubectl write, so one flip back and no fight.
    let walk = deployment.replica_walk()?;
    println!("replicas after kubectl apply replicas=1: {walk:?}");
    ensure!(walk == vec![3, 1, 3], "not exactly one re-assert: {walk:?}");

    // Custom rows of docs/scaling.md#worked-numbers: active 7 with max 5 -> 5; active 0 with min 2
    // -> 2.
    *active
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = 7;
    deployment.wait_ready_replicas(5, MINUTE).await?;
    *active
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = 0;
    deployment.wait_ready_replicas(2, MINUTE).await?;
    // Still one re-assert over the whole test, and one event.
    let walk = deployment.replica_walk()?;
    ensure!(walk == vec![3, 1, 3, 5, 2], "replica walk: {walk:?}");
    let events = reasserted_events(&world).await?;
    ensure!(
        events == 1,
        "ReplicasReasserted events at the end: {events}"
    );
    world.finish().await
}

/// How many `ReplicasReasserted` events (events.k8s.io) the test's namespace holds.
async fn reasserted_events(world: &World) -> anyhow::Result<usize> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(world.client.clone(), world.namespace());
    Ok(events
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ReplicasReasserted"))
        .count())
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
    // Both targets recorded from before the operator starts: the walks are exact.
    let sts_record = Recorder::start(
        &world.client,
        &ns,
        &ApiResource::erase::<k8s_openapi::api::apps::v1::StatefulSet>(&()),
        "db",
    )
    .await?;
    let lws_record = Recorder::start(&world.client, &ns, &resource, "lws").await?;
    world.start_operator("kinds-0", &[]).await?;

    // StatefulSet: ready 1 -> 2 -> 3 (max).
    sts_record.wait_spec_replicas(3, MINUTE).await?;
    let walk = sts_record.replica_walk()?;
    ensure!(walk == vec![1, 2, 3], "StatefulSet walk: {walk:?}");
    // LeaderWorkerSet: ready stays 1 -> ceil(1 x 0.85 / 0.5) = 2, owned by llmscaler alone.
    let object = lws_record.wait_spec_replicas(2, MINUTE).await?.object;
    let walk = lws_record.replica_walk()?;
    ensure!(walk == vec![1, 2], "LeaderWorkerSet walk: {walk:?}");
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
