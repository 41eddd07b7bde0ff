//! The upgrade from the last release (issue 26 item 4), on the local cluster: the previous
//! release's CRD, chart and binary installed (out of cluster: the chart's RBAC, Lease, Secret and
//! webhook configurations, the operator as a process with the chart's ServiceAccount), a live
//! scaler holding a Deployment and an applier writing an LLMScaler every second; then the
//! upgrade as docs/upgrade.md says: the new CRD applied, the new operator started beside the old
//! one (as a rolling update starts the new pod first), `helm upgrade` to this chart, SIGTERM to
//! the old operator. No admission may fail, `spec.replicas` may not change, the Lease goes to
//! the new operator, which then acts, and the CRD's stored versions stay readable.
//!
//! Feature `upgrade`; `e2e/upgrade-test [--from REF]` builds REF's binary and passes its chart,
//! CRD and binary in `LLMSCALER_UPGRADE_FROM_{CHART,CRD,BIN}`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ApiResource;
use llmscaler_e2e::exporter::Exporter;
use llmscaler_e2e::faults::{measured, never_below};
use llmscaler_e2e::fixture::{
    apply_crd, deployment_manifest, deployment_ref, install_crd, queue_scaler_spec, reconcile_count,
};
use llmscaler_e2e::operator::{Operator, Rbac, binary, chart_dir, run_command};
use llmscaler_e2e::prometheus::Prometheus;
use llmscaler_e2e::session::apply_as;
use llmscaler_e2e::watch::{Recorder, Version};
use llmscaler_e2e::{Check, TestNamespace, client, helm_path, kubectl_path, unique_name, wait_for};
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
const CRD: &str = "llmscalers.autoscaling.modelsphere.dev";

fn from_env(name: &str) -> anyhow::Result<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .with_context(|| format!("${name} is not set: run e2e/upgrade-test"))
}

/// The versions a CRD manifest serves, and the one it stores.
fn versions(crd: &Value) -> (Vec<String>, Option<String>) {
    let list = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let served = list
        .iter()
        .filter(|v| v["served"] == true)
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect();
    let stored = list
        .iter()
        .find(|v| v["storage"] == true)
        .and_then(|v| v["name"].as_str().map(str::to_owned));
    (served, stored)
}

fn crd_file(path: &std::path::Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_yaml::from_str(&text)?)
}

fn holder_of(version: &Version) -> Option<String> {
    version
        .get("/spec/holderIdentity")
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
}

/// The webhook flags of an out-of-cluster operator of release `name` listening on `port`.
fn webhook_flags(name: &str, port: u16) -> Vec<String> {
    vec![
        format!("--webhook-listen=127.0.0.1:{port}"),
        "--webhook-extra-san=127.0.0.1".to_owned(),
        format!("--cert-secret={name}-webhook-tls"),
        format!("--webhook-service={name}"),
        format!("--validating-webhook-configuration={name}"),
        format!("--mutating-webhook-configuration={name}"),
        "--webhook-cert-check-seconds=2".to_owned(),
    ]
}

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

async fn syncs(operator: &Operator, n: u64) -> anyhow::Result<()> {
    let before = reconcile_count(&operator.metrics().await?);
    wait_for(&format!("{n} more syncs"), MINUTE, || async {
        let now = reconcile_count(&operator.metrics().await?);
        Ok(if now >= before + n {
            Check::Done(())
        } else {
            Check::NotYet(format!("{now} syncs"))
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs e2e/cluster up and e2e/upgrade-test"]
async fn helm_upgrade_from_the_last_release_fails_no_admission_and_moves_no_replica()
-> anyhow::Result<()> {
    let from = std::env::var("LLMSCALER_UPGRADE_FROM").unwrap_or_else(|_| "?".into());
    let old_bin = from_env("LLMSCALER_UPGRADE_FROM_BIN")?;
    let old_chart = from_env("LLMSCALER_UPGRADE_FROM_CHART")?;
    let old_crd_path = from_env("LLMSCALER_UPGRADE_FROM_CRD")?;
    let old_crd = crd_file(&old_crd_path)?;
    let new_crd = crd_file(&chart_dir().join("../../crds/llmscaler.yaml"))?;

    // The previous release: CRD, chart, operator.
    apply_crd(&std::fs::read_to_string(&old_crd_path)?, CRD)?;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "upgrade").await?;
    let namespace = ns.name().to_owned();
    let release = unique_name("up");
    let name = Rbac::service_account(&release);
    let old_port = llmscaler_e2e::free_port()?;
    let rbac = Rbac::helm_install_chart(&old_chart, &release, &namespace, old_port)?;
    let old_flags = webhook_flags(&name, old_port);
    let old_flags: Vec<&str> = old_flags.iter().map(String::as_str).collect();
    let mut old =
        Operator::start_binary(&old_bin, &rbac.kubeconfig, &namespace, "old", &old_flags).await?;
    let injected = wait_for("caBundle injected", MINUTE, || async {
        let bundles = ca_bundles(&name)?;
        Ok(if bundles.iter().all(|b| !b.is_empty()) {
            Check::Done(bundles)
        } else {
            Check::NotYet(format!("{bundles:?}"))
        })
    })
    .await?;

    // A live scaler holding Deployment vllm at 4 (queue 0.5, target 0.5).
    let exporter = Exporter::start().await?;
    exporter.set_gauge("llm_queue", &[("scaler=\"upgrade\"", 0.5)]);
    let prometheus = Prometheus::start(exporter.addr).await?;
    apply_as(
        "e2e-setup",
        &deployment_manifest(&namespace, "vllm", Some(4)),
    )?;
    let deployment = Recorder::deployment(&client, &namespace, "vllm").await?;
    deployment.wait_ready_replicas(4, MINUTE).await?;
    let scaler = json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": {"name": "chat", "namespace": namespace},
        "spec": queue_scaler_spec(&prometheus.url(), deployment_ref("vllm"), "upgrade", (1, 10), json!({}))});
    apply_as("e2e-user", &scaler)?;
    syncs(&old, 3).await?;
    let lease = Recorder::start(
        &client,
        &namespace,
        &ApiResource::erase::<Lease>(&()),
        "llmscaler-leader",
    )
    .await?;
    ensure!(
        lease.latest().as_ref().and_then(holder_of).as_deref() == Some("old"),
        "the old operator does not lead"
    );

    // The applier: one LLMScaler written every second, through both webhooks.
    let stop = Arc::new(AtomicBool::new(false));
    // Stops the applier however the test ends (a blocking task would hold the runtime open).
    let _stop_on_drop = StopOnDrop(stop.clone());
    let applied = Arc::new(AtomicU32::new(0));
    let applier = {
        let (stop, namespace, count) = (stop.clone(), namespace.clone(), applied.clone());
        tokio::task::spawn_blocking(move || {
            let (mut ok, mut failed) = (0u32, Vec::new());
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let applied = json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
                    "kind": "LLMScaler", "metadata": {"name": "applied", "namespace": namespace},
                    "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
                             "serverAddress": "http://127.0.0.1:9090", "minReplicas": 1,
                             "maxReplicas": 2 + i % 3,
                             "metrics": [{"query": "avg(q)", "target": "1"}]}});
                match run_command(
                    &kubectl_path(),
                    &["apply", "-f", "-"],
                    Some(&applied.to_string()),
                ) {
                    Ok(_) => ok += 1,
                    Err(err) => failed.push(err.to_string()),
                }
                count.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_secs(1));
            }
            (ok, failed)
        })
    };
    let applies = |n: u32| {
        let applied = applied.clone();
        async move {
            let target = applied.load(Ordering::Relaxed) + n;
            wait_for(&format!("{n} more applies"), MINUTE, || async {
                let done = applied.load(Ordering::Relaxed);
                Ok(if done >= target {
                    Check::Done(())
                } else {
                    Check::NotYet(format!("{done} applies"))
                })
            })
            .await
        }
    };
    applies(3).await?;

    // The upgrade (docs/upgrade.md): the CRD first, the new operator beside the old one, the
    // chart, then the old operator stopped.
    let started = SystemTime::now();
    install_crd()?;
    let new_port = llmscaler_e2e::free_port()?;
    let new_flags = webhook_flags(&name, new_port);
    let new_flags: Vec<&str> = new_flags.iter().map(String::as_str).collect();
    let new =
        Operator::start_binary(&binary(), &rbac.kubeconfig, &namespace, "new", &new_flags).await?;
    let chart = chart_dir();
    let selector = format!(
        "webhook.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name={namespace}"
    );
    run_command(
        &helm_path(),
        &[
            "upgrade",
            &release,
            chart.to_str().context("chart path")?,
            "--namespace",
            &namespace,
            "--set",
            "outOfCluster.enabled=true",
            "--set",
            "leaseName=llmscaler-leader",
            "--set",
            &format!("outOfCluster.url=https://127.0.0.1:{new_port}"),
            "--set",
            &selector,
        ],
        None,
    )?;
    let stopped = SystemTime::now();
    ensure!(
        old.terminate(MINUTE).await?,
        "the old operator did not exit 0"
    );
    let handed = lease
        .wait_until("the new operator to hold the Lease", MINUTE, |v| {
            (holder_of(v)?.as_str() == "new").then_some(v.seen_at)
        })
        .await?;
    syncs(&new, 3).await?;
    let upgraded = SystemTime::now();
    applies(3).await?;
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = applier.await?;

    println!(
        "upgrade from {from}: {ok} applies ok, {} failed",
        failed.len()
    );
    ensure!(
        failed.is_empty(),
        "admission failed during the upgrade: {failed:?}"
    );
    ensure!(ok >= 6, "only {ok} applies");
    let walk = deployment.replica_walk()?;
    ensure!(
        walk == vec![4],
        "spec.replicas changed during the upgrade: {walk:?}"
    );
    ensure!(ca_bundles(&name)? == injected, "the caBundle changed");

    // The CRD: every version the old one served is still served, the stored version is one the
    // new CRD serves, and the stored objects read back.
    let (old_served, old_stored) = versions(&old_crd);
    let (new_served, _) = versions(&new_crd);
    for version in &old_served {
        ensure!(
            new_served.contains(version),
            "the new CRD stops serving {version} (add a version with conversion instead)"
        );
    }
    let stored = run_command(
        &kubectl_path(),
        &["get", "crd", CRD, "-o", "jsonpath={.status.storedVersions}"],
        None,
    )?;
    println!("CRD stored versions after the upgrade: {stored}; old stored {old_stored:?}");
    let stored: Vec<String> = serde_json::from_str(&stored)?;
    ensure!(
        stored.iter().all(|v| new_served.contains(v)),
        "objects are stored in {stored:?}, not all served by the new CRD {new_served:?}"
    );
    run_command(
        &kubectl_path(),
        &["get", "llmscalers", "-n", &namespace, "-o", "name"],
        None,
    )?;

    // The new leader acts: the load doubles, 4 -> 8.
    let raised = SystemTime::now();
    exporter.set_gauge("llm_queue", &[("scaler=\"upgrade\"", 1.0)]);
    let scaled = deployment.wait_spec_replicas(8, MINUTE).await?;
    never_below(&deployment, 4)?;
    let secs = |a: SystemTime, b: SystemTime| a.duration_since(b).unwrap_or_default();
    measured(
        "upgrade",
        "whole upgrade (CRD to 3 syncs of the new leader)",
        secs(upgraded, started),
    );
    measured(
        "upgrade",
        "Lease handover (SIGTERM of the old operator)",
        secs(handed, stopped),
    );
    measured(
        "upgrade",
        "load doubled to the new leader's scale-up write",
        secs(scaled.seen_at, raised),
    );

    drop(new);
    llmscaler_e2e::drop_scaler_finalizers(&client, &namespace).await;
    rbac.delete()?;
    ns.delete().await
}
