//! Faults that lose nothing (issue 26 item 3), on the local cluster: the API server restarted
//! mid-sync, etcd paused 20 s, Prometheus restarted with its data lost, the operator SIGKILLed
//! (as the OOM killer does) in the middle of a drain, the webhook's Secret deleted while a
//! `helm upgrade` and an applier run, and two replicas whose clocks are 30 s apart.
//!
//! Each test records every version of the scaled Deployment from before the fault and asserts
//! that `spec.replicas` never went below what it held (no replica removed by mistake), that the
//! operator recovered on its own (it acts on a load change made during or right after the
//! fault), and prints the recovery time as a `measured:` line (docs/benchmarks/faults.md).
//!
//! Built with the cargo feature `faults` only (`e2e/fault-test` runs them on a cluster of its
//! own); the normal suite runs the short `fault_smoke.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, ListParams};
use llmscaler_api::names::{ROTATION_IN, ROTATION_LABEL, ROTATION_OUT};
use llmscaler_e2e::emulator::{Config, Emulator};
use llmscaler_e2e::faults::{ControlPlane, ETCD, KUBE_APISERVER, measured, never_below};
use llmscaler_e2e::fixture::{SETUP_MANAGER, World};
use llmscaler_e2e::operator::{chart_dir, run_command};
use llmscaler_e2e::prometheus::Prometheus;
use llmscaler_e2e::watch::{Recorder, Version, timestamp};
use llmscaler_e2e::{Check, helm_path, kubectl_path, wait_for};
use llmscaler_loadmodel::{Params, Request};
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
/// The fleet before every fault: 4 replicas at a queue of 0.5 against a target of 0.5.
const FLEET: i32 = 4;
/// After the load doubles: 4 x 1.0 / 0.5.
const RAISED: i32 = 8;

/// The steady state every fault starts from: Deployment `vllm` at [`FLEET`] held by the scaler
/// `chat` (queue 0.5, target 0.5, sync every second), one operator (`args`) that has synced,
/// and a recorder on the Deployment from before the fault.
async fn steady(prefix: &str, args: &[&str]) -> anyhow::Result<(World, Recorder)> {
    let mut world = World::new(prefix).await?;
    world
        .queue_scaled_deployment(FLEET, prefix, 0.5, (1, 10), json!({}))
        .await?;
    world.start_operator(&format!("{prefix}-0"), args).await?;
    world.metric_seen(0, "0.5").await?;
    world.wait_syncs(0, 2).await?;
    let deployment = world.record("vllm").await?;
    ensure!(
        deployment.latest().and_then(|v| v.replicas()) == Some(FLEET),
        "not steady at {FLEET}: {:?}",
        deployment.latest().map(|v| v.summary())
    );
    Ok((world, deployment))
}

/// Doubles the load of `tag`: a working operator scales [`FLEET`] to [`RAISED`].
fn raise_load(world: &World, tag: &str) {
    world
        .exporter
        .set_gauge("llm_queue", &[(&format!("scaler=\"{tag}\""), 1.0)]);
}

/// Waits until the Deployment holds [`RAISED`] and returns when that write arrived.
async fn raised(world: &World, deployment: &Recorder) -> anyhow::Result<SystemTime> {
    match deployment.wait_spec_replicas(RAISED, 2 * MINUTE).await {
        Ok(version) => Ok(version.seen_at),
        Err(err) => anyhow::bail!("{err}\n{}", world.operator_logs()),
    }
}

/// Waits until `GET /readyz` of the API server answers `ok` again.
async fn api_ready() -> anyhow::Result<()> {
    wait_for("the API server ready", 2 * MINUTE, || async {
        Ok(
            match run_command(
                &kubectl_path(),
                &["get", "--raw", "/readyz", "--request-timeout=2s"],
                None,
            ) {
                Ok(text) if text.trim() == "ok" => Check::Done(()),
                Ok(text) => Check::NotYet(text),
                Err(err) => Check::NotYet(err.to_string()),
            },
        )
    })
    .await
}

/// Starts again the control-plane components that exited during a fault (as the kubelet
/// restarts a static control plane) and says which.
fn revive(plane: &ControlPlane) -> anyhow::Result<()> {
    let revived = plane.revive()?;
    if !revived.is_empty() {
        println!(
            "control-plane components that exited during the fault, started again: {revived:?}"
        );
    }
    Ok(())
}

fn since(at: SystemTime, start: SystemTime) -> Duration {
    at.duration_since(start).unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn api_server_restarted_mid_sync_loses_nothing() -> anyhow::Result<()> {
    let (mut world, deployment) = steady("fault-api", &[]).await?;
    let plane = ControlPlane::from_env()?;
    // The restart is SIGTERM (the API server drains), then the same command line again; the
    // load doubles while it is down, so a sync is in flight or due at every moment of it.
    let stopped = SystemTime::now();
    let restart = tokio::task::spawn_blocking(move || {
        plane.restart(KUBE_APISERVER)?;
        anyhow::Ok(plane)
    });
    raise_load(&world, "fault-api");
    let plane = restart.await??;
    api_ready().await?;
    let ready = SystemTime::now();
    revive(&plane)?;
    let scaled = raised(&world, &deployment).await?;
    ensure!(
        !world.operators[0].exited(),
        "the operator exited\n{}",
        world.operator_logs()
    );
    never_below(&deployment, FLEET)?;
    measured(
        "API server restarted",
        "down (SIGTERM to /readyz ok)",
        since(ready, stopped),
    );
    measured(
        "API server restarted",
        "recovery (/readyz ok to the scale-up write)",
        since(scaled, ready),
    );
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn etcd_paused_20s_loses_nothing() -> anyhow::Result<()> {
    let (mut world, deployment) = steady("fault-etcd", &[]).await?;
    let plane = ControlPlane::from_env()?;
    let frozen = plane.pause(ETCD)?;
    let paused = Instant::now();
    raise_load(&world, "fault-etcd");
    // The fault's length (20 s of a frozen etcd), not a wait for a condition.
    tokio::time::sleep(Duration::from_secs(20)).await;
    plane.resume(ETCD)?;
    drop(frozen);
    let resumed = SystemTime::now();
    let held_for = paused.elapsed();
    let scaled = raised(&world, &deployment).await?;
    api_ready().await?;
    revive(&plane)?;
    ensure!(
        !world.operators[0].exited(),
        "the operator exited\n{}",
        world.operator_logs()
    );
    never_below(&deployment, FLEET)?;
    measured("etcd paused", "paused", held_for);
    measured(
        "etcd paused",
        "recovery (SIGCONT to the scale-up write)",
        since(scaled, resumed),
    );
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn prometheus_restarted_with_its_data_lost_holds_then_recovers() -> anyhow::Result<()> {
    let (mut world, deployment) = steady("fault-prom", &[]).await?;
    // An empty TSDB answers every query with nothing until its first scrape: read as "not
    // measurable", the fleet holds (a zero would scale it to minReplicas, 1).
    let down = world.prometheus.restart_with_data_lost().await?;
    let restarted = SystemTime::now();
    world.wait_syncs(0, 3).await?;
    raise_load(&world, "fault-prom");
    let scaled = raised(&world, &deployment).await?;
    ensure!(!world.operators[0].exited(), "the operator exited");
    never_below(&deployment, FLEET)?;
    measured("Prometheus restarted, data lost", "down", down);
    measured(
        "Prometheus restarted, data lost",
        "recovery (ready to the scale-up write, 3 syncs and a scrape included)",
        since(scaled, restarted),
    );
    world.finish().await
}

// ---- the operator SIGKILLed in the middle of a drain ------------------------------------------

const APP: &str = "vllm";
const DRAIN_SECONDS: u64 = 20;

fn drained_deployment(ns: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP, "namespace": ns},
        "spec": {
            "replicas": 8,
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

async fn out_of_rotation(pods: &Api<Pod>) -> anyhow::Result<BTreeSet<String>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={APP},{ROTATION_LABEL}={ROTATION_OUT}")))
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect())
}

/// A drain of 6 of 8 busy pods (generations that never end, `drainSeconds` 20); the leader is
/// SIGKILLed 5 s into it and started again (as the kubelet restarts an OOM-killed container):
/// the new process resumes the drain with the first one's clock, keeps the pods out of
/// rotation, and lowers `spec.replicas` once, 8 -> 2, no earlier than the budget allows.
#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn operator_killed_mid_drain_resumes_it_without_losing_a_pod_early() -> anyhow::Result<()> {
    let mut world = World::new("fault-oom").await?;
    let ns = world.namespace().to_owned();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(world.client.clone(), &ns);
    world.apply(SETUP_MANAGER, &drained_deployment(&ns)).await?;
    world
        .apply(
            SETUP_MANAGER,
            &json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": APP, "namespace": ns},
                "spec": {"selector": {"app": APP, ROTATION_LABEL: ROTATION_IN},
                         "ports": [{"port": 8000, "targetPort": 8000}]}}),
        )
        .await?;
    world.wait_replicas(APP, 8, MINUTE).await?;
    let endless: Vec<Request> = (0..400u32)
        .map(|i| Request {
            arrival_s: f64::from(i) * 0.25,
            prompt_tokens: 200,
            output_tokens: 1_000_000,
        })
        .collect();
    let emulator = Emulator::start(
        world.client.clone(),
        Config {
            requests: endless,
            speed: 4.0,
            namespace: ns.clone(),
            selector: format!("app={APP}"),
            service: Some(APP.to_owned()),
            params: Params {
                drain_s: 0.0,
                ..Params::default()
            },
            listen: "127.0.0.1:0".parse()?,
        },
    )
    .await?;
    wait_for("the emulator routes to 8 pods", MINUTE, || async {
        let n = emulator.status().ready.len();
        Ok(if n == 8 {
            Check::Done(())
        } else {
            Check::NotYet(format!("{n} pods"))
        })
    })
    .await?;
    emulator.begin();
    let prometheus = Prometheus::start(emulator.addr).await?;
    let lease = ["--lease-duration-seconds", "3"];
    world.start_operator("oom-first", &lease).await?;
    let deployment = world.record(APP).await?;
    world
        .create_scaler(
            "chat",
            json!({
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
                "serverAddress": prometheus.url(),
                "minReplicas": 2, "maxReplicas": 8, "syncPeriodSeconds": 1,
                "metrics": [{"name": "running",
                             "query": format!("avg(vllm:num_requests_running{{namespace=\"{ns}\"}})"),
                             "target": "1000"}],
                "scaleDown": {"drain": {"drainSeconds": DRAIN_SECONDS}},
            }),
        )
        .await?;
    let scalers = world.record_scaler("chat").await?;
    let (drained, since_text) = scalers
        .wait_until("status.draining lists six pods", MINUTE, |v| {
            let status = &v.object.data["status"]["draining"];
            let listed: BTreeSet<String> = status["pods"]
                .as_array()?
                .iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect();
            (listed.len() == 6).then(|| (listed, status["since"].clone()))
        })
        .await?;
    let drain_started = timestamp(&since_text)?;
    ensure!(out_of_rotation(&pods).await? == drained);

    // 5 s into the drain: SIGKILL (no Lease release, no clean-up), then a new process.
    tokio::time::sleep(Duration::from_secs(5)).await;
    world.operators[0].kill();
    let killed = SystemTime::now();
    world.start_operator("oom-second", &lease).await?;
    let resumed = wait_for("a DrainResumed Event", MINUTE, || async {
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
    let resumed_at = SystemTime::now();
    ensure!(
        drained.iter().all(|p| resumed.contains(p.as_str())),
        "the Event names the drained pods: {resumed}"
    );
    let lowered = deployment.wait_spec_replicas(2, 2 * MINUTE).await?;
    let walk = deployment.replica_walk()?;
    ensure!(walk == vec![8, 2], "one lowering, 8 -> 2: {walk:?}");
    let budget_end = drain_started + Duration::from_secs(DRAIN_SECONDS);
    ensure!(
        lowered.seen_at + Duration::from_secs(1) >= budget_end,
        "lowered {:?} before the drain's budget ran out (the restart reset or advanced its clock)",
        budget_end
            .duration_since(lowered.seen_at)
            .unwrap_or_default()
    );
    // The two pods kept are the two that never left rotation.
    let left = wait_for("2 pods left", MINUTE, || async {
        let left: BTreeSet<String> = pods
            .list(&ListParams::default().labels(&format!("app={APP}")))
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        Ok(if left.len() == 2 {
            Check::Done(left)
        } else {
            Check::NotYet(format!("{left:?}"))
        })
    })
    .await?;
    ensure!(
        left.is_disjoint(&drained),
        "a pod still in rotation was removed: left {left:?}, drained {drained:?}"
    );
    measured(
        "operator SIGKILLed mid-drain",
        "recovery (SIGKILL to DrainResumed, new process start included)",
        since(resumed_at, killed),
    );
    measured(
        "operator SIGKILLed mid-drain",
        "lowering after the budget's end (20 s drain)",
        since(lowered.seen_at, budget_end),
    );
    emulator.stop().await;
    world.finish().await
}

// ---- the webhook's Secret deleted while `helm upgrade` runs -----------------------------------

/// The caBundles of the validating and mutating configurations named `name`.
fn ca_bundles(name: &str) -> anyhow::Result<Vec<String>> {
    [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ]
    .iter()
    .map(|kind| {
        run_command(
            &kubectl_path(),
            &[
                "get",
                kind,
                name,
                "-o",
                "jsonpath={.webhooks[*].clientConfig.caBundle}",
            ],
            None,
        )
    })
    .collect()
}

/// The chart out of cluster (webhook configurations calling the operator on loopback), the
/// operator with its webhook, an applier writing an LLMScaler every second; then the Secret is
/// deleted and `helm upgrade` runs at once (it puts the chart's empty Secret back). No
/// admission may fail, the caBundle stays, and the Secret holds the same CA again.
#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn webhook_secret_deleted_during_helm_upgrade_fails_no_admission() -> anyhow::Result<()> {
    let (mut world, deployment) = steady("fault-secret", &[]).await?;
    let ns = world.namespace().to_owned();
    let port = llmscaler_e2e::free_port()?;
    let release = ns.clone();
    let name = format!("{release}-llmscaler");
    let chart = chart_dir().to_str().unwrap_or_default().to_owned();
    let selector =
        format!("webhook.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name={ns}");
    let url = format!("outOfCluster.url=https://127.0.0.1:{port}");
    let helm = |extra: &[&str]| {
        let mut args = vec![
            "upgrade",
            "--install",
            release.as_str(),
            chart.as_str(),
            "--namespace",
            ns.as_str(),
            "--set",
            "outOfCluster.enabled=true",
            "--set",
            url.as_str(),
            "--set",
            selector.as_str(),
            "--set",
            "rbac.create=false",
            "--set",
            "serviceAccount.create=false",
        ];
        args.extend_from_slice(extra);
        run_command(&helm_path(), &args, None)
    };
    helm(&[])?;
    let secret_name = format!("{name}-webhook-tls");
    let listen = format!("--webhook-listen=127.0.0.1:{port}");
    let validating = format!("--validating-webhook-configuration={name}");
    let mutating = format!("--mutating-webhook-configuration={name}");
    let secret_flag = format!("--cert-secret={secret_name}");
    // The steady operator has no webhook: a second one serves it (the Lease keeps writes to one).
    world
        .start_operator(
            "fault-secret-webhook",
            &[
                &listen,
                "--webhook-extra-san=127.0.0.1",
                &validating,
                &mutating,
                &secret_flag,
                "--webhook-cert-check-seconds=2",
            ],
        )
        .await?;
    let injected = wait_for("caBundle injected", MINUTE, || async {
        let bundles = ca_bundles(&name)?;
        Ok(if bundles.iter().all(|b| !b.is_empty()) {
            Check::Done(bundles)
        } else {
            Check::NotYet(format!("{bundles:?}"))
        })
    })
    .await?;
    let secrets: Api<Secret> = Api::namespaced(world.client.clone(), &ns);
    let ca_of = |secret: &Secret| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(llmscaler_certs::CA_CERT))
            .map(|b| b.0.clone())
    };
    let first_ca = ca_of(&secrets.get(&secret_name).await?).context("no CA in the Secret")?;

    // The applier: an LLMScaler written every second (through both webhooks).
    let manifest = json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": {"name": "applied", "namespace": ns},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
                 "serverAddress": "http://127.0.0.1:9090", "minReplicas": 1, "maxReplicas": 2,
                 "metrics": [{"query": "avg(q)", "target": "1"}]}});
    let stop = Arc::new(AtomicBool::new(false));
    // Stops the applier however the test ends (a blocking task would hold the runtime open).
    let _stop_on_drop = StopOnDrop(stop.clone());
    let attempts = Arc::new(AtomicU32::new(0));
    let applier = {
        let (stop, attempts) = (stop.clone(), attempts.clone());
        tokio::task::spawn_blocking(move || {
            let (mut ok, mut failed) = (0u32, Vec::new());
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let mut m = manifest.clone();
                m["spec"]["maxReplicas"] = json!(2 + i % 3);
                match run_command(&kubectl_path(), &["apply", "-f", "-"], Some(&m.to_string())) {
                    Ok(_) => ok += 1,
                    Err(err) => failed.push(err.to_string()),
                }
                attempts.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_secs(1));
            }
            (ok, failed)
        })
    };
    let applies = |n: u32| {
        let attempts = attempts.clone();
        async move {
            let target = attempts.load(Ordering::Relaxed) + n;
            wait_for(&format!("{n} more applies"), MINUTE, || async {
                let done = attempts.load(Ordering::Relaxed);
                Ok(if done >= target {
                    Check::Done(())
                } else {
                    Check::NotYet(format!("{done} applies"))
                })
            })
            .await
        }
    };
    applies(2).await?;
    // Both orders: `helm upgrade` at once (it puts the chart's empty Secret back before the
    // operator refills it, or after), then `helm upgrade` only once the operator has refilled
    // it (Helm must still own the Secret the operator wrote).
    let mut recoveries = Vec::new();
    for (round, upgrade_at_once) in [(5, true), (6, false)] {
        secrets
            .delete(&secret_name, &DeleteParams::default())
            .await?;
        let deleted = Instant::now();
        if upgrade_at_once {
            helm(&["--set", &format!("webhook.timeoutSeconds={round}")])?;
        }
        let refilled = wait_for("the Secret holding a CA again", MINUTE, || async {
            Ok(
                match secrets
                    .get_opt(&secret_name)
                    .await?
                    .as_ref()
                    .and_then(ca_of)
                {
                    Some(ca) => Check::Done(ca),
                    None => Check::NotYet("no CA in the Secret".into()),
                },
            )
        })
        .await?;
        recoveries.push(deleted.elapsed());
        if !upgrade_at_once {
            helm(&["--set", &format!("webhook.timeoutSeconds={round}")])?;
        }
        ensure!(
            refilled == first_ca,
            "the Secret came back with another CA: the caBundle the API server trusts would change"
        );
        applies(2).await?;
    }
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = applier.await?;
    println!("applies: {ok} ok, {} failed", failed.len());
    ensure!(failed.is_empty(), "admission failed: {failed:?}");
    ensure!(ok >= 6, "only {ok} applies went through");
    let bundles = ca_bundles(&name)?;
    ensure!(bundles == injected, "caBundle changed: {bundles:?}");
    never_below(&deployment, FLEET)?;
    for (took, order) in recoveries
        .iter()
        .zip(["helm upgrade at once", "helm upgrade after"])
    {
        measured(
            "webhook Secret deleted during helm upgrade",
            &format!("recovery, {order} (delete to the Secret holding its CA again)"),
            *took,
        );
    }
    run_command(
        &helm_path(),
        &["uninstall", &release, "--namespace", &ns],
        None,
    )?;
    world.finish().await
}

// ---- two replicas 30 s apart -------------------------------------------------------------------

/// The non-empty `spec.holderIdentity` of a recorded Lease version.
fn holder_of(version: &Version) -> Option<String> {
    version
        .get("/spec/holderIdentity")
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
}

/// Two operators whose clocks are 30 s apart (`--test-clock-offset-seconds -30` on the first):
/// the first leads and persists a stabilization window of 40 s after the load drops; it hands
/// over on SIGTERM, and the second (30 s ahead) must not scale down before the window really
/// ends (it moves the first one's times later by the skew it read from the Lease); it must not
/// take the Lease early either when the holder is SIGKILLed.
#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn clock_skew_of_30s_between_replicas_removes_nothing_early() -> anyhow::Result<()> {
    let window = Duration::from_secs(40);
    let mut world = World::new("fault-skew").await?;
    world
        .queue_scaled_deployment(
            FLEET,
            "fault-skew",
            0.5,
            (1, 10),
            json!({"scaleDown": {"stabilizationWindowSeconds": window.as_secs()}}),
        )
        .await?;
    let leases = Recorder::start(
        &world.client,
        world.namespace(),
        &ApiResource::erase::<Lease>(&()),
        "llmscaler-leader",
    )
    .await?;
    let lease_args = ["--lease-duration-seconds", "6"];
    world
        .start_operator(
            "skew-behind",
            &[
                lease_args[0],
                lease_args[1],
                "--test-clock-offset-seconds=-30",
            ],
        )
        .await?;
    leases
        .wait_until("skew-behind to hold the Lease", MINUTE, |v| {
            (holder_of(v)?.as_str() == "skew-behind").then_some(())
        })
        .await?;
    world.start_operator("skew-ahead", &lease_args).await?;
    // Two renewals of the holder seen after the second started (one is enough for its estimate).
    let started = leases.versions().len();
    leases
        .wait_record("two renewals after the follower started", MINUTE, |v| {
            (v.len() >= started + 2).then_some(())
        })
        .await?;
    let deployment = world.record("vllm").await?;
    let scaler = world.record_scaler("chat").await?;

    // The load drops: the window holds 4 for 40 s from the last recommendation of 4, which
    // comes no earlier than now.
    let dropped = SystemTime::now();
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"fault-skew\"", 0.0)]);
    scaler
        .wait_until("a lower recommendation persisted", MINUTE, |v| {
            v.get("/status/recommendations")
                .as_array()?
                .iter()
                .any(|r| r["replicas"].as_i64().is_some_and(|n| n < 4))
                .then_some(())
        })
        .await?;
    let handover = SystemTime::now();
    ensure!(world.operators[0].terminate(MINUTE).await?);
    let taken = leases
        .wait_until("skew-ahead to hold the Lease", MINUTE, |v| {
            (holder_of(v)?.as_str() == "skew-ahead").then_some(v.seen_at)
        })
        .await?;
    let lowered = deployment
        .wait_until("the scale-down", window + MINUTE, |v| {
            v.replicas().is_some_and(|r| r < FLEET).then_some(v.seen_at)
        })
        .await?;
    let window_end = dropped + window;
    let estimate = world.operators[1]
        .log()
        .lines()
        .find(|l| l.contains("clock ran behind"))
        .map(str::to_owned)
        .context("the new leader logged no clock estimate from the Lease")?;
    println!("the new leader's estimate: {estimate}");
    println!(
        "handover {:?}; scale-down {:?} after the load dropped (window {window:?})\n{}",
        since(taken, handover),
        since(lowered, dropped),
        world.operator_logs()
    );
    ensure!(
        lowered + Duration::from_secs(1) >= window_end,
        "scaled down {:?} before the window ended (the new leader read the old one's times on \
         its own clock)",
        window_end.duration_since(lowered).unwrap_or_default()
    );
    measured(
        "clock skew 30 s",
        "SIGTERM handover to the leader 30 s ahead",
        since(taken, handover),
    );
    measured(
        "clock skew 30 s",
        "scale-down after the window's real end",
        since(lowered, window_end),
    );

    // The other way: the leader 30 s ahead is SIGKILLed; a new process 30 s behind must wait
    // the whole Lease duration (on its own clock) before it takes over.
    world
        .start_operator(
            "skew-behind-2",
            &[
                lease_args[0],
                lease_args[1],
                "--test-clock-offset-seconds=-30",
            ],
        )
        .await?;
    let started = leases.versions().len();
    leases
        .wait_record("two renewals after the new follower started", MINUTE, |v| {
            (v.len() >= started + 2).then_some(())
        })
        .await?;
    let last_renewal = leases.latest().map(|v| v.seen_at).context("no Lease")?;
    world.operators[1].kill();
    let killed = SystemTime::now();
    let taken = leases
        .wait_until("skew-behind-2 to hold the Lease", MINUTE, |v| {
            (holder_of(v)?.as_str() == "skew-behind-2").then_some(v.seen_at)
        })
        .await?;
    ensure!(
        since(taken, last_renewal) + Duration::from_millis(500) >= Duration::from_secs(6),
        "taken {:?} after the last renewal, before the 6 s Lease ran out",
        since(taken, last_renewal)
    );
    measured(
        "clock skew 30 s",
        "SIGKILL takeover by the leader 30 s behind (6 s Lease)",
        since(taken, killed),
    );
    never_below(&deployment, 1)?;
    world.finish().await
}

// ---- the network between the operator pod and the API server cut for 30 s (real node) ---------

/// The real node's pieces the network cut needs (as in `in_cluster.rs`).
#[cfg(feature = "real-node")]
mod real_node {
    use anyhow::Context;

    pub use llmscaler_e2e::realnode::{
        NODE_VALUES, Release, container_process, wait_admission_working,
    };

    /// Every packet from the network namespace of process `pid` to the API server's Service
    /// address (`kubernetes.default`, 10.0.0.1:443) dropped while the guard lives.
    pub struct Cut {
        pid: String,
        rule: Vec<&'static str>,
    }

    impl Cut {
        pub fn start(pid: u32) -> anyhow::Result<Self> {
            let cut = Self {
                pid: pid.to_string(),
                rule: vec![
                    "OUTPUT",
                    "-d",
                    "10.0.0.1/32",
                    "-p",
                    "tcp",
                    "--dport",
                    "443",
                    "-j",
                    "DROP",
                ],
            };
            cut.iptables("-I")
                .context("adding the DROP rule in the pod's netns")?;
            Ok(cut)
        }

        fn iptables(&self, op: &str) -> anyhow::Result<()> {
            let mut args = vec!["-t", self.pid.as_str(), "-n", "iptables", "-w", op];
            args.extend(self.rule.iter().copied());
            llmscaler_e2e::operator::run_command("nsenter", &args, None).map(drop)
        }
    }

    impl Drop for Cut {
        fn drop(&mut self) {
            let _ = self.iptables("-D");
        }
    }
}

/// The chart in-cluster on the real node (2 replicas, 15 s Lease); a scaler holds a kwok
/// Deployment at 4; every packet from the leader pod to the API server is dropped for 30 s.
/// The leader steps down before its Lease runs out, the other pod takes over and acts on a load
/// change made during the cut; no replica is removed; when the network comes back the old
/// leader follows (no second writer).
#[cfg(feature = "real-node")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs e2e/cluster up --real-node"]
async fn network_cut_30s_between_the_leader_pod_and_the_api_server() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    use llmscaler_e2e::exporter::Exporter;
    use llmscaler_e2e::fixture::{
        deployment_manifest, deployment_ref, install_crd, queue_scaler_spec,
    };
    use llmscaler_e2e::{TestNamespace, client, unique_name};

    let client = client().await?;
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get("llmscaler-real-node")
        .await
        .context("the real node is missing: run e2e/cluster up --real-node")?;
    let gateway: std::net::IpAddr = node
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .find(|a| a.type_ == "InternalIP")
        .context("the real node has no InternalIP")?
        .address
        .parse()?;
    install_crd()?;
    let ns = TestNamespace::create(&client, "fault-netcut").await?;
    let namespace = ns.name().to_owned();
    let release = unique_name("nc");
    let fullname = format!("{release}-llmscaler");
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("node.yaml");
    std::fs::write(&values, real_node::NODE_VALUES)?;
    // Uninstalled on drop: a failed run must not leave cluster-wide webhook configurations
    // calling a deleted namespace behind.
    let installed = real_node::Release::install(
        &release,
        chart_dir().to_str().context("chart path")?,
        &namespace,
        &["-f", values.to_str().context("values path")?],
    )?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let selector = format!("app.kubernetes.io/instance={release}");
    wait_for("2 operator pods Ready", 2 * MINUTE, || async {
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        let ready = list
            .items
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        Ok(if ready == 2 {
            Check::Done(())
        } else {
            Check::NotYet(format!("{ready} Ready"))
        })
    })
    .await?;
    // Ready pods are not yet a routed Service: kube-proxy may still refuse its ClusterIP.
    real_node::wait_admission_working(&namespace).await?;

    let exporter = Exporter::start().await?;
    let prometheus = Prometheus::start_on(gateway, exporter.addr).await?;
    exporter.set_gauge("llm_queue", &[("scaler=\"netcut\"", 0.5)]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    deployments
        .patch(
            "vllm",
            &PatchParams::apply("e2e-setup").force(),
            &Patch::Apply(&deployment_manifest(&namespace, "vllm", Some(FLEET))),
        )
        .await?;
    let deployment = Recorder::deployment(&client, &namespace, "vllm").await?;
    deployment.wait_ready_replicas(FLEET, MINUTE).await?;
    let scalers: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &namespace,
        &llmscaler_e2e::fixture::scaler_resource(),
    );
    scalers
        .patch(
            "chat",
            &PatchParams::apply("e2e-user").force(),
            &Patch::Apply(json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
                "kind": "LLMScaler", "metadata": {"name": "chat", "namespace": namespace},
                "spec": queue_scaler_spec(&prometheus.url(), deployment_ref("vllm"), "netcut", (FLEET, RAISED), json!({}))})),
        )
        .await?;
    let lease = Recorder::start(
        &client,
        &namespace,
        &ApiResource::erase::<Lease>(&()),
        &format!("{fullname}-leader"),
    )
    .await?;
    let leader = lease
        .wait_until("a Lease holder", MINUTE, holder_of)
        .await?;
    let leader_pod = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .find(|p| leader == p.name_any() || leader.starts_with(&format!("{}-", p.name_any())))
        .with_context(|| format!("holder {leader} is none of the operator pods"))?;
    let container = leader_pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.clone())
        .context("no container id")?;
    let pid = real_node::container_process(&container)?;

    let cut = real_node::Cut::start(pid)?;
    let cut_at = SystemTime::now();
    exporter.set_gauge("llm_queue", &[("scaler=\"netcut\"", 1.0)]);
    let taken = lease
        .wait_until("another pod to take the Lease", MINUTE, |v| {
            holder_of(v).filter(|h| *h != leader).map(|_| v.seen_at)
        })
        .await?;
    let scaled = deployment.wait_spec_replicas(RAISED, MINUTE).await?;
    // The rest of the 30 s cut, then the network back.
    let left = Duration::from_secs(30).saturating_sub(since(SystemTime::now(), cut_at));
    tokio::time::sleep(left).await;
    drop(cut);
    let restored = SystemTime::now();
    // The old leader comes back as a follower: the load halves (8 ready x 0.25 / 0.5 = 4) and
    // one leader writes 8 -> 4 (a second writer would show as another value or a contest).
    // The bounds [FLEET, RAISED] keep the synthetic queue, which does not shrink as replicas
    // are added, from compounding past 8 or below 4.
    exporter.set_gauge("llm_queue", &[("scaler=\"netcut\"", 0.25)]);
    deployment.wait_spec_replicas(FLEET, 2 * MINUTE).await?;
    let walk = deployment.replica_walk()?;
    ensure!(walk == vec![FLEET, RAISED, FLEET], "walk {walk:?}");
    never_below(&deployment, FLEET)?;
    measured(
        "network cut 30 s (leader pod)",
        "new leader (cut to its Lease write)",
        since(taken, cut_at),
    );
    measured(
        "network cut 30 s (leader pod)",
        "recovery (cut to the scale-up write)",
        since(scaled.seen_at, cut_at),
    );
    measured(
        "network cut 30 s (leader pod)",
        "network back to the scale-down write",
        since(SystemTime::now(), restored),
    );
    installed.uninstall()?;
    ns.delete().await
}
