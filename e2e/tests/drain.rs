//! Scale-down that drains first (`scaleDown.drain`, docs/scale-down.md#drain) on the local
//! cluster, with the vLLM emulator routing over the Service's EndpointSlices as a gateway does:
//! scaling 8 -> 2 under load drops no request with the drain, and the same run without it drops
//! the requests in flight on the deleted pods.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use llmscaler_api::names::{ROTATION_IN, ROTATION_LABEL, ROTATION_OUT};
use llmscaler_e2e::emulator::{Config, Emulator};
use llmscaler_e2e::fixture::{SETUP_MANAGER, World};
use llmscaler_e2e::prometheus::Prometheus;
use llmscaler_e2e::{Check, wait_for};
use llmscaler_loadmodel::{Params, Request};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(120);
const APP: &str = "vllm";
/// Trace seconds per wall second.
const SPEED: f64 = 4.0;

/// A steady load of long generations: one request every 0.25 trace seconds for 30 minutes, 200
/// prompt and 1500 output tokens each (about 20 trace seconds per request), so every pod always
/// has requests in flight.
fn trace() -> Vec<Request> {
    (0..7200u32)
        .map(|i| Request {
            arrival_s: f64::from(i) * 0.25,
            prompt_tokens: 200,
            output_tokens: 1500,
        })
        .collect()
}

fn deployment(ns: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": ns},
        "spec": {
            "replicas": 8,
            // The rotation label is not in the selector: relabelling must not orphan a pod.
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP, ROTATION_LABEL: ROTATION_IN}},
                "spec": {
                    "containers": [{"name": "vllm", "image": "registry.invalid/vllm:fake",
                                    "ports": [{"containerPort": 8000}]}],
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
                }
            }
        }
    })
}

fn service(ns: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": APP, "namespace": ns},
        "spec": {
            "selector": {"app": APP, ROTATION_LABEL: ROTATION_IN},
            "ports": [{"port": 8000, "targetPort": 8000}]
        }
    })
}

/// `pod` → value of every `name{...}` series of the exposition.
fn per_pod(text: &str, name: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|line| line.strip_prefix(&format!("{name}{{")))
        .filter_map(|rest| {
            let (labels, value) = rest.split_once("} ")?;
            let pod = labels
                .split(',')
                .find_map(|kv| kv.strip_prefix("pod="))?
                .trim_matches('"')
                .to_owned();
            Some((pod, value.trim().parse().ok()?))
        })
        .collect()
}

/// Running + waiting requests of `pods` in the exposition.
fn in_flight(text: &str, pods: &BTreeSet<String>) -> f64 {
    let waiting = per_pod(text, "vllm:num_requests_waiting");
    per_pod(text, "vllm:num_requests_running")
        .iter()
        .filter(|(pod, _)| pods.contains(*pod))
        .map(|(pod, v)| v + waiting.get(pod).copied().unwrap_or(0.0))
        .sum()
}

/// Names of the Service's ready endpoints.
async fn endpoints(slices: &Api<EndpointSlice>) -> anyhow::Result<BTreeSet<String>> {
    Ok(slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={APP}")))
        .await?
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .filter_map(|e| e.target_ref.as_ref().and_then(|r| r.name.clone()))
        .collect())
}

/// What one run saw.
#[derive(Debug)]
struct Run {
    /// Requests dropped by the emulator (in flight on a deleted pod).
    dropped: u64,
    /// Requests in flight on the pods that were removed, just before the scale-down.
    in_flight_before: f64,
    /// Pods out of rotation while the drain waited (empty without drain).
    drained: BTreeSet<String>,
}

/// Deployment `vllm` (8 pods) behind Service `vllm`, the emulator replaying `requests` over the
/// Service's EndpointSlices, and a Prometheus scraping it; returns once every pod has requests
/// in flight, with the 8 pod names.
async fn serve(
    world: &World,
    requests: Vec<Request>,
) -> anyhow::Result<(Emulator, Prometheus, BTreeSet<String>)> {
    let ns = world.namespace().to_owned();
    let slices: Api<EndpointSlice> = Api::namespaced(world.client.clone(), &ns);
    world.apply(SETUP_MANAGER, &deployment(&ns)).await?;
    world.apply(SETUP_MANAGER, &service(&ns)).await?;
    world.wait_replicas(APP, 8, DEADLINE).await?;
    // The EndpointSlice controller lists the kwok pods (kwok gives each an IP).
    let eight = wait_for("8 ready endpoints", DEADLINE, || async {
        let ready = endpoints(&slices).await?;
        Ok(if ready.len() == 8 {
            Check::Done(ready)
        } else {
            Check::NotYet(format!("{ready:?}"))
        })
    })
    .await?;
    let params = Params {
        // Killed at once, as vLLM's default `--shutdown-timeout=0` does on SIGTERM.
        drain_s: 0.0,
        ..Params::default()
    };
    let emulator = Emulator::start(
        world.client.clone(),
        Config {
            requests,
            speed: SPEED,
            namespace: ns.clone(),
            selector: format!("app={APP}"),
            service: Some(APP.to_owned()),
            params,
            listen: "127.0.0.1:0".parse()?,
        },
    )
    .await?;
    wait_for(
        "the emulator routes to the 8 endpoints",
        DEADLINE,
        || async {
            let ready: BTreeSet<String> = emulator.status().ready.into_iter().collect();
            Ok(if ready == eight {
                Check::Done(())
            } else {
                Check::NotYet(format!("{ready:?}"))
            })
        },
    )
    .await?;
    emulator.begin();
    let prometheus = Prometheus::start(emulator.addr).await?;
    wait_for("every pod has requests in flight", DEADLINE, || async {
        let running = per_pod(&emulator.metrics_text(), "vllm:num_requests_running");
        Ok(
            if running.len() == 8 && running.values().all(|&n| n >= 3.0) {
                Check::Done(())
            } else {
                Check::NotYet(format!("{running:?}"))
            },
        )
    })
    .await?;
    Ok((emulator, prometheus, eight))
}

/// The scaler: recommends the floor, 2, under any load this test makes; with
/// `scaleDown.drain` when `drain_seconds` is set.
fn scaler_spec(ns: &str, prometheus: &Prometheus, drain_seconds: Option<u32>) -> Value {
    let mut spec = json!({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
        "serverAddress": prometheus.url(),
        "minReplicas": 2,
        "maxReplicas": 8,
        "syncPeriodSeconds": 2,
        // Far above what a pod runs: the recommendation is the floor, 2.
        "metrics": [{"name": "running",
                     "query": format!("avg(vllm:num_requests_running{{namespace=\"{ns}\"}})"),
                     "target": "1000"}],
    });
    if let Some(seconds) = drain_seconds {
        spec["scaleDown"] = json!({"drain": {"drainSeconds": seconds}});
    }
    spec
}

/// The pods labelled out of rotation.
async fn out_of_rotation(pods: &Api<Pod>) -> anyhow::Result<BTreeSet<String>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={APP},{ROTATION_LABEL}={ROTATION_OUT}")))
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect())
}

async fn run(drain: bool) -> anyhow::Result<Run> {
    let mut world = World::new(if drain { "drain" } else { "no-drain" }).await?;
    let ns = world.namespace().to_owned();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(world.client.clone(), &ns);
    let (emulator, prometheus, eight) = serve(&world, trace()).await?;
    world.start_operator("drain-test", &[]).await?;
    let spec = scaler_spec(&ns, &prometheus, drain.then_some(120));
    let recorder = world.record(APP).await?;
    // Without drain: in flight on the pods just before the scaler exists (every pod is busy, so
    // whichever six go hold requests).
    let mut in_flight_before = in_flight(&emulator.metrics_text(), &eight);
    world.create_scaler("chat", spec).await?;

    let mut drained = BTreeSet::new();
    if drain {
        // Six pods leave rotation (labelled out, gone from the EndpointSlices, no longer routed
        // to) while spec.replicas stays 8.
        (drained, in_flight_before) = wait_for("six pods out of rotation", DEADLINE, || async {
            let out = out_of_rotation(&pods).await?;
            let ready = endpoints(&slices).await?;
            let routed: BTreeSet<String> = emulator.status().ready.into_iter().collect();
            Ok(
                if out.len() == 6 && ready.len() == 2 && routed == ready && out.is_disjoint(&ready)
                {
                    let held = in_flight(&emulator.metrics_text(), &out);
                    Check::Done((out, held))
                } else {
                    Check::NotYet(format!(
                        "out {out:?}, endpoints {ready:?}, routed {routed:?}"
                    ))
                },
            )
        })
        .await?;
        let scaler = world.scaler("chat").await?;
        let draining = &scaler["status"]["draining"]["pods"];
        let listed: BTreeSet<String> = draining
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        anyhow::ensure!(
            listed == drained,
            "status.draining.pods {draining} != the pods out of rotation {drained:?}"
        );
        let walk = recorder.replica_walk()?;
        anyhow::ensure!(
            walk == vec![8],
            "spec.replicas stays 8 while draining: {walk:?}"
        );
    }

    recorder.wait_ready_replicas(2, DEADLINE).await?;
    // Every removed pod is gone, and the emulator has seen it go.
    wait_for("2 pods left, seen by the emulator", DEADLINE, || async {
        let left = pods
            .list(&ListParams::default().labels(&format!("app={APP}")))
            .await?;
        let names: BTreeSet<String> = left.items.iter().map(ResourceExt::name_any).collect();
        let scraped: BTreeSet<String> =
            per_pod(&emulator.metrics_text(), "vllm:num_requests_running")
                .into_keys()
                .collect();
        Ok(if names.len() == 2 && scraped == names {
            Check::Done(())
        } else {
            Check::NotYet(format!("pods {names:?}, scraped {scraped:?}"))
        })
    })
    .await?;
    let report = emulator.status().report;
    println!("drain={drain}: {report:?}");
    if drain {
        // The survivors are the two pods that never left rotation.
        let left: BTreeSet<String> = pods
            .list(&ListParams::default().labels(&format!("app={APP}")))
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        anyhow::ensure!(
            left.is_disjoint(&drained),
            "the drained pods were the ones removed: left {left:?}, drained {drained:?}"
        );
    }
    let out = Run {
        dropped: report.failed,
        in_flight_before,
        drained,
    };
    emulator.stop().await;
    world.finish().await?;
    Ok(out)
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn scaling_8_to_2_under_load_drops_nothing_with_drain_and_some_without() -> anyhow::Result<()>
{
    let without = run(false).await?;
    println!("without drain: {without:?}");
    anyhow::ensure!(
        without.in_flight_before > 0.0 && without.dropped > 0,
        "without drain the deleted pods' requests are dropped: {without:?}"
    );
    let with = run(true).await?;
    println!("with drain: {with:?}");
    anyhow::ensure!(with.drained.len() == 6, "six pods were drained: {with:?}");
    anyhow::ensure!(
        with.in_flight_before > 0.0,
        "the drained pods had requests in flight when they left rotation: {with:?}"
    );
    anyhow::ensure!(with.dropped == 0, "with drain nothing is dropped: {with:?}");
    Ok(())
}

/// A drain in progress survives an operator restart (the new process finds the pods out of
/// rotation from their labels and keeps them out), and when the recommendation is no longer
/// below `spec.replicas` (here: `minReplicas` raised to 8, as load coming back would) the drained
/// pods go back into rotation instead of new pods being started.
#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_drain_survives_a_restart_and_load_coming_back_puts_the_pods_back() -> anyhow::Result<()>
{
    let mut world = World::new("drain-restart").await?;
    let ns = world.namespace().to_owned();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(world.client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(world.client.clone(), &ns);
    // Generations that never finish within the test: the drain keeps waiting.
    let endless: Vec<Request> = (0..400u32)
        .map(|i| Request {
            arrival_s: f64::from(i) * 0.25,
            prompt_tokens: 200,
            output_tokens: 1_000_000,
        })
        .collect();
    let (emulator, prometheus, eight) = serve(&world, endless).await?;
    world.start_operator("drain-first", &[]).await?;
    let recorder = world.record(APP).await?;
    world
        .create_scaler("chat", scaler_spec(&ns, &prometheus, Some(3600)))
        .await?;
    let scalers = world.record_scaler("chat").await?;
    let (drained, since) = scalers
        .wait_until("status.draining lists six pods", DEADLINE, |v| {
            let status = &v.object.data["status"]["draining"];
            let listed: BTreeSet<String> = status["pods"]
                .as_array()?
                .iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect();
            (listed.len() == 6).then(|| (listed, status["since"].as_str().unwrap_or("").to_owned()))
        })
        .await?;
    anyhow::ensure!(out_of_rotation(&pods).await? == drained);

    // Restart: the first operator exits cleanly (releasing its Lease), a second one takes over.
    world.operators[0]
        .terminate(Duration::from_secs(30))
        .await?;
    world.start_operator("drain-second", &[]).await?;
    // The new leader finds the drain from the pod labels (Event `DrainResumed`) and keeps its
    // clock: `status.draining.since` is the first leader's.
    let note = wait_for("a DrainResumed Event", DEADLINE, || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(
            match list
                .items
                .iter()
                .find(|e| e.reason.as_deref() == Some("DrainResumed"))
            {
                Some(e) => Check::Done(e.note.clone().unwrap_or_default()),
                None => Check::NotYet(format!("{} events", list.items.len())),
            },
        )
    })
    .await?;
    println!("DrainResumed: {note}");
    anyhow::ensure!(
        drained.iter().all(|p| note.contains(p.as_str())),
        "the Event names the drained pods: {note}"
    );
    let status = world.scaler("chat").await?["status"]["draining"].clone();
    anyhow::ensure!(
        status["since"].as_str() == Some(since.as_str()),
        "the drain's clock continues across the restart: since {} then {}",
        since,
        status["since"]
    );
    anyhow::ensure!(
        out_of_rotation(&pods).await? == drained,
        "the drained pods stay out of rotation across the restart"
    );
    // A drained pod put back in rotation by hand is taken out again.
    let first = drained.iter().next().cloned().unwrap_or_default();
    pods.patch(
        &first,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {ROTATION_LABEL: ROTATION_IN}}})),
    )
    .await?;
    wait_for(
        "the relabelled pod out of rotation again",
        DEADLINE,
        || async {
            let out = out_of_rotation(&pods).await?;
            Ok(if out == drained {
                Check::Done(())
            } else {
                Check::NotYet(format!("out {out:?}"))
            })
        },
    )
    .await?;
    let walk = recorder.replica_walk()?;
    anyhow::ensure!(walk == vec![8], "nothing lowered while draining: {walk:?}");

    // The recommendation comes back to 8: the drained pods return to rotation.
    let mut spec = scaler_spec(&ns, &prometheus, Some(3600));
    spec["minReplicas"] = json!(8);
    world.create_scaler("chat", spec).await?;
    wait_for("the drained pods back in rotation", DEADLINE, || async {
        let out = out_of_rotation(&pods).await?;
        let ready = endpoints(&slices).await?;
        let routed: BTreeSet<String> = emulator.status().ready.into_iter().collect();
        Ok(if out.is_empty() && ready == eight && routed == eight {
            Check::Done(())
        } else {
            Check::NotYet(format!(
                "out {out:?}, endpoints {ready:?}, routed {routed:?}"
            ))
        })
    })
    .await?;
    scalers
        .wait_until("status.draining cleared", DEADLINE, |v| {
            v.object.data["status"]
                .get("draining")
                .is_none()
                .then_some(())
        })
        .await?;
    let walk = recorder.replica_walk()?;
    anyhow::ensure!(walk == vec![8], "no pod was started or removed: {walk:?}");
    anyhow::ensure!(emulator.status().report.failed == 0, "nothing was dropped");
    emulator.stop().await;
    world.finish().await
}
