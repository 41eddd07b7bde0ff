//! Start-up awareness (issue 15, item 4; docs/guards.md#start-up-awareness) against the local
//! control plane and a real Prometheus: the operator measures the time from its scale-up to the
//! replicas Ready, shows it in `status.startupSeconds`, and the scale-down stabilization window
//! follows it (`startup.windowMultiple`).
//!
//! The pods carry kwok's delay annotation, so on a cluster started with
//! `LLMSCALER_E2E_POD_READY_DELAY=1` they become Ready about [`DELAY`] after creation; on one
//! without the delay stage they are Ready at once. The assertions compare the operator's
//! figure with the lag the Deployment itself showed, so they hold (and can fail) in both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use anyhow::ensure;
use llmscaler_e2e::fixture::{SETUP_MANAGER, World, deployment_manifest};
use llmscaler_e2e::{Check, wait_for};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);
/// kwok's pod-ready delay written on the pods (a Go duration).
const DELAY: &str = "6s";

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn measures_start_up_and_the_window_follows_it() -> anyhow::Result<()> {
    let mut world = World::new("ctl-startup").await?;
    let mut manifest = deployment_manifest(world.namespace(), "vllm", Some(1));
    manifest["spec"]["template"]["metadata"]["annotations"] =
        json!({"pod-ready.stage.kwok.x-k8s.io/delay": DELAY});
    world.apply(SETUP_MANAGER, &manifest).await?;
    world
        .wait_replicas("vllm", 1, Duration::from_secs(90))
        .await?;
    // ready 1, value 0.85, target 0.5 -> 2 (the maximum).
    world
        .queue_scaler(
            "startup",
            0.85,
            (1, 2),
            json!({"startup": {"initialSeconds": 0, "windowMultiple": "2"}}),
        )
        .await?;
    let deployment = world.record("vllm").await?;
    world.start_operator("startup-0", &[]).await?;

    // The lag the Deployment showed: from spec.replicas 2 (the operator's write) to 2 Ready.
    let asked = deployment.wait_spec_replicas(2, MINUTE).await?;
    let ready = deployment.wait_ready_replicas(2, MINUTE).await?;
    let lag = ready.seen_at.duration_since(asked.seen_at)?.as_secs_f64();
    println!("scale-up 1 -> 2 became Ready after {lag:.1} s (kwok delay {DELAY} if enabled)");

    // The operator's measurement: at sync resolution (1 s here), rounded to whole seconds.
    let measured = wait_for("status.startupSeconds", MINUTE, || async {
        let status = world.scaler("chat").await?["status"].clone();
        Ok(match status["startupSeconds"].as_i64() {
            Some(s) => Check::Done(s),
            None => Check::NotYet(status.to_string()),
        })
    })
    .await?;
    println!("status.startupSeconds = {measured}");
    #[allow(clippy::cast_precision_loss)]
    let measured_s = measured as f64;
    ensure!(
        measured_s >= lag - 1.0 && measured_s <= lag + 3.0,
        "startupSeconds {measured} is not the observed lag {lag:.1} s (± a sync period)"
    );

    // The window is 2 × startupSeconds: the scale-down comes no earlier than that after the
    // load went away (the last high recommendation is at or after the change).
    let changed = std::time::SystemTime::now();
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"startup\"", 0.0)]);
    let down = deployment
        .wait_spec_replicas(1, MINUTE + Duration::from_secs(2 * 60))
        .await?;
    let waited = down.seen_at.duration_since(changed)?.as_secs_f64();
    let window = 2.0 * measured_s;
    println!("scale-down 2 -> 1 after {waited:.1} s; window 2 × {measured} = {window} s");
    ensure!(
        waited >= window - 0.5,
        "scaled down after {waited:.1} s, inside the {window} s window"
    );
    ensure!(
        waited <= window + 30.0,
        "scaled down only after {waited:.1} s, long after the {window} s window"
    );
    world.finish().await
}
