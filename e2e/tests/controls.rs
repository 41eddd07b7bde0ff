//! Operator controls on the local cluster (issue 16): a paused scaler and an advisory scaler
//! write nothing to their target over 5 syncs while their status keeps up, both resume from the
//! current replicas, and `--log-format json` writes one JSON object per line with the scaler's
//! namespace and name.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use anyhow::ensure;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use llmscaler_e2e::fixture::{World, scaler_resource, writes_of};
use llmscaler_e2e::{Check, wait_for};
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

fn scalers(world: &World) -> Api<DynamicObject> {
    Api::namespaced_with(world.client.clone(), world.namespace(), &scaler_resource())
}

async fn merge(world: &World, patch: Value) -> anyhow::Result<()> {
    scalers(world)
        .patch("chat", &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Waits until the scaler's status shows `desiredReplicas == desired` and `paused.by`
/// containing `by`.
async fn wait_passive(world: &World, desired: i64, by: &str) -> anyhow::Result<Value> {
    wait_for(
        &format!("status desired {desired} and paused by {by:?}"),
        MINUTE,
        || async {
            let status = world.scaler("chat").await?["status"].clone();
            let ok = status["desiredReplicas"].as_i64() == Some(desired)
                && status["paused"]["by"]
                    .as_str()
                    .is_some_and(|b| b.contains(by));
            Ok(if ok {
                Check::Done(status)
            } else {
                Check::NotYet(status.to_string())
            })
        },
    )
    .await
}

/// Over 5 more syncs of operator 0, the Deployment keeps `replicas` (every version watched) and
/// the operator writes no replicas.
async fn no_writes_over_5_syncs(world: &World, replicas: i32) -> anyhow::Result<()> {
    let recorder = world.record("vllm").await?;
    let before = writes_of(&world.operators[0].metrics().await?, "replicas");
    world.wait_syncs(0, 5).await?;
    let walk = recorder.replica_walk()?;
    ensure!(walk == [replicas], "the target moved: {walk:?}");
    let after = writes_of(&world.operators[0].metrics().await?, "replicas");
    ensure!(
        after == before,
        "{} replica writes while not acting",
        after - before
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_paused_scaler_writes_nothing_and_resumes_when_unpaused() -> anyhow::Result<()> {
    let mut world = World::new("ctl-pause").await?;
    world
        .queue_scaled_deployment(2, "pause", 0.5, (1, 10), json!({}))
        .await?;
    world
        .start_operator("pause-0", &["--log-format", "json"])
        .await?;
    world.metric_seen(0, "0.5").await?;

    merge(
        &world,
        json!({"metadata": {"annotations": {"autoscaling.modelsphere.dev/paused": "true"}}}),
    )
    .await?;
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"pause\"", 1.0)]);
    let status = wait_passive(&world, 4, "annotation autoscaling.modelsphere.dev/paused").await?;
    println!("paused: {}", status["paused"]);
    no_writes_over_5_syncs(&world, 2).await?;
    world
        .wait_condition(
            "chat",
            "AbleToScale",
            "False",
            "would scale Deployment vllm 2 -> 4",
            MINUTE,
        )
        .await?;

    merge(
        &world,
        json!({"metadata": {"annotations": {"autoscaling.modelsphere.dev/paused": null}}}),
    )
    .await?;
    world.wait_replicas("vllm", 4, MINUTE).await?;
    ensure!(world.scaler("chat").await?["status"]["paused"].is_null());

    // Every log line is one JSON object; the sync lines name the scaler.
    let log = std::fs::read_to_string(world.operators[0].stderr_path())?;
    let mut syncs = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let object: Value = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("not a JSON line ({e}): {line}"))?;
        if object["message"] == "sync" {
            ensure!(
                object["namespace"] == world.namespace() && object["name"] == "chat",
                "{line}"
            );
            syncs += 1;
        }
    }
    ensure!(syncs > 5, "only {syncs} sync lines in\n{log}");
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn an_advisory_scaler_reports_without_writing_and_resumes_without_a_jump()
-> anyhow::Result<()> {
    let mut world = World::new("ctl-advisory").await?;
    world
        .queue_scaled_deployment(
            2,
            "advisory",
            0.5,
            (1, 10),
            json!({"mode": "Advisory", "scaleDown": {"stabilizationWindowSeconds": 30}}),
        )
        .await?;
    world.start_operator("advisory-0", &[]).await?;
    world.metric_seen(0, "0.5").await?;
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"advisory\"", 2.0)]);
    // 2.0 against 0.5 asks 8 of the 2 Ready; the evidence bound allows 2 × 2 = 4 per step
    // (docs/guards.md#evidence-bound), and nothing is written, so the advice stays at 4.
    wait_passive(&world, 4, "spec.mode: Advisory").await?;
    no_writes_over_5_syncs(&world, 2).await?;
    // Advice is published as an Event when it changes.
    wait_for("an AdvisoryMode Event", MINUTE, || async {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(world.client.clone(), world.namespace());
        let list = events.list(&Default::default()).await?;
        Ok(
            match list
                .items
                .iter()
                .find(|e| e.reason.as_deref() == Some("AdvisoryMode"))
            {
                Some(e) => Check::Done(e.note.clone().unwrap_or_default()),
                None => Check::NotYet(format!("{} events", list.items.len())),
            },
        )
    })
    .await?;

    // While still advisory the load drops: the advice would go down to 1. Back to Active with
    // the load at 0.5 per replica: the fleet stays at 2 (resumes from the current replicas; the
    // window starts afresh, so nothing recommended while advisory makes it jump).
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"advisory\"", 0.5)]);
    wait_passive(&world, 2, "spec.mode: Advisory").await?;
    let recorder = world.record("vllm").await?;
    merge(&world, json!({"spec": {"mode": "Active"}})).await?;
    wait_for("status without paused", MINUTE, || async {
        let status = world.scaler("chat").await?["status"].clone();
        Ok(if status["paused"].is_null() {
            Check::Done(())
        } else {
            Check::NotYet(status.to_string())
        })
    })
    .await?;
    world.wait_syncs(0, 3).await?;
    let walk = recorder.replica_walk()?;
    ensure!(walk == [2], "resumed with a jump: {walk:?}");
    // And it acts again: more load scales up at once.
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"advisory\"", 1.0)]);
    world.wait_replicas("vllm", 4, MINUTE).await?;
    world.finish().await
}

/// Runs `llmscaler probe --name NAME -n NAMESPACE` with the test's kubeconfig; returns the exit
/// code and stdout.
fn probe_name(world: &World, name: &str) -> anyhow::Result<(i32, String)> {
    let output = std::process::Command::new(llmscaler_e2e::operator::binary())
        .args(["probe", "--name", name, "-n", world.namespace()])
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(output.status.code().is_some(), "probe was killed: {stderr}");
    println!("--- probe --name {name}\n{stdout}{stderr}");
    Ok((output.status.code().unwrap_or(-1), stdout))
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn probe_name_explains_a_held_a_clamped_and_a_window_held_scaler() -> anyhow::Result<()> {
    use llmscaler_e2e::fixture::{deployment_ref, queue_scaler_spec};
    let mut world = World::new("ctl-probe").await?;
    let url = world.prometheus.url();
    for (name, replicas) in [("held", 2), ("clamped", 1), ("windowed", 3)] {
        world.create_deployment(name, replicas).await?;
        world.wait_replicas(name, replicas, MINUTE).await?;
    }
    world.exporter.set_gauge(
        "llm_queue",
        &[("scaler=\"clamped\"", 5.0), ("scaler=\"windowed\"", 0.5)],
    );
    let scaler = |name: &str, tag: &str, bounds, extra| {
        queue_scaler_spec(&url, deployment_ref(name), tag, bounds, extra)
    };
    world
        .create_scaler("held", scaler("held", "missing", (1, 10), json!({})))
        .await?;
    world
        .create_scaler(
            "clamped",
            // A second metric with no series: skipped, the first still decides (probe exit 4).
            scaler(
                "clamped",
                "clamped",
                (1, 2),
                json!({"metrics": [
                    {"name": "queue", "query": "avg(llm_queue{scaler=\"clamped\"})", "target": "0.5"},
                    {"name": "absent", "query": "avg(llm_queue{scaler=\"absent\"})", "target": "1"},
                ]}),
            ),
        )
        .await?;
    world
        .create_scaler(
            "windowed",
            scaler(
                "windowed",
                "windowed",
                (1, 10),
                json!({"scaleDown": {"stabilizationWindowSeconds": 300}}),
            ),
        )
        .await?;
    world.start_operator("probe-0", &[]).await?;
    world.wait_replicas("clamped", 2, MINUTE).await?;
    wait_for("the window's history in status", MINUTE, || async {
        let status = world.scaler("windowed").await?["status"].clone();
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
    // set_gauge replaces the family: keep the clamped scaler's series.
    world.exporter.set_gauge(
        "llm_queue",
        &[("scaler=\"clamped\"", 5.0), ("scaler=\"windowed\"", 0.0)],
    );
    wait_for("the exporter's 0 to reach Prometheus", MINUTE, || async {
        let (_, out) = probe_name(&world, "windowed")?;
        Ok(if out.contains("value 0 target 0.5") {
            Check::Done(())
        } else {
            Check::NotYet(out)
        })
    })
    .await?;

    let (code, held) = probe_name(&world, "held")?;
    ensure!(code == 3, "held: exit {code}");
    ensure!(held.contains("skipped, never read as 0"), "{held}");
    ensure!(
        held.contains("nothing measurable: hold at spec.replicas 2"),
        "{held}"
    );
    ensure!(
        held.contains("=> spec.replicas stays 2 (MetricsUnavailable)"),
        "{held}"
    );

    let (code, clamped) = probe_name(&world, "clamped")?;
    ensure!(code == 4, "clamped with a skipped metric: exit {code}");
    ensure!(
        clamped.contains("absent: skipped, never read as 0"),
        "{clamped}"
    );
    ensure!(
        clamped.contains("clamp to [1, 2]: 2 (lowered to the ceiling 2)"),
        "{clamped}"
    );
    ensure!(clamped.contains("=> spec.replicas stays 2"), "{clamped}");

    let (code, windowed) = probe_name(&world, "windowed")?;
    ensure!(code == 0, "windowed: exit {code}");
    ensure!(
        windowed.contains("stabilization window 300 s: maximum 3 holds until"),
        "{windowed}"
    );
    ensure!(
        windowed.contains("=> spec.replicas stays 3 (ScaleDownStabilized)"),
        "{windowed}"
    );
    ensure!(windowed.contains("next: a scale-down at"), "{windowed}");

    let (code, _) = probe_name(&world, "no-such-scaler")?;
    ensure!(code == 1, "a missing scaler: exit {code}");
    world.finish().await
}

/// The exporter serves one exposition: the per-pod queue (absent at zero pods, as vLLM's series
/// are) and the gateway's queue, which exists without pods.
fn serve_wake(world: &World, queue: Option<f64>, gateway: f64) {
    let mut text =
        format!("# TYPE gateway_queue gauge\ngateway_queue{{scaler=\"wake\"}} {gateway}\n");
    if let Some(q) = queue {
        text.push_str(&format!(
            "# TYPE llm_queue gauge\nllm_queue{{scaler=\"wake\"}} {q}\n"
        ));
    }
    world.exporter.set(text);
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_fleet_scaled_to_zero_wakes_on_the_activation_signal() -> anyhow::Result<()> {
    let mut world = World::new("ctl-wake").await?;
    world
        .queue_scaled_deployment(
            2,
            "wake",
            0.0,
            (0, 5),
            json!({"activation": {"query": "sum(gateway_queue{scaler=\"wake\"})"}}),
        )
        .await?;
    // The exporter serves one exposition: the per-pod queue and the gateway's queue together.
    let serve = |queue: Option<f64>, gateway: f64| {
        let mut text = String::from("# TYPE gateway_queue gauge\n");
        text.push_str(&format!("gateway_queue{{scaler=\"wake\"}} {gateway}\n"));
        if let Some(q) = queue {
            text.push_str(&format!(
                "# TYPE llm_queue gauge\nllm_queue{{scaler=\"wake\"}} {q}\n"
            ));
        }
        world.exporter.set(text);
    };
    serve(Some(0.0), 0.0);
    let recorder = world.record("vllm").await?;
    world.start_operator("wake-0", &[]).await?;
    if let Err(err) = world.wait_replicas("vllm", 0, MINUTE).await {
        anyhow::bail!(
            "{err}\n{}\n{}",
            world.scaler("chat").await?["status"],
            world.operator_logs()
        );
    }
    // At zero pods a vLLM fleet publishes no per-pod series: the queue metric disappears, every
    // metric is skipped and the fleet is held at zero...
    serve_wake(&world, None, 0.0);
    world.wait_syncs(0, 3).await?;
    ensure!(
        recorder.replica_walk()? == [2, 0],
        "{:?}",
        recorder.replica_walk()?
    );
    // ...until the gateway's queue (a series that exists without pods) shows a request.
    serve_wake(&world, None, 1.0);
    world.wait_replicas("vllm", 1, MINUTE).await?;
    ensure!(
        recorder.replica_walk()? == [2, 0, 1],
        "{:?}",
        recorder.replica_walk()?
    );
    world
        .wait_condition("chat", "ScalingLimited", "True", "activation", MINUTE)
        .await?;
    world.finish().await
}
