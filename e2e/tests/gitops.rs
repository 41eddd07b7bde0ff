//! Coexistence with GitOps tools and Helm (issue 7): the operator owns `spec.replicas` alone by
//! server-side apply, so an applier that leaves `replicas` out never fights it, and Helm 4
//! (which applies server-side) reports the conflict instead of silently taking the field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::ensure;
use llmscaler_e2e::fixture::{World, deployment_manifest, writes_of};
use llmscaler_e2e::helm_path;
use llmscaler_e2e::operator::run_command;
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_gitops_applier_without_replicas_never_flips_the_fleet() -> anyhow::Result<()> {
    let mut world = World::new("gitops-argo").await?;
    let manifest = deployment_manifest(world.namespace(), "vllm", None);
    world.apply("argocd-controller", &manifest).await?;
    world.wait_replicas("vllm", 1, MINUTE).await?;
    world.queue_scaler("argo", 0.85, (1, 5), json!({})).await?;
    // Every version of the Deployment from before the operator starts: the walk is exact.
    let deployment = world.record("vllm").await?;
    world.start_operator("argo-0", &[]).await?;

    // The GitOps applier: re-applies the manifest (no replicas) every 2 s, without force. The
    // 2 s is its cadence, not a wait; `applies` counts the applies done.
    let stop = Arc::new(AtomicBool::new(false));
    let (applied, mut applies) = tokio::sync::watch::channel(0usize);
    let applier = {
        let stop = stop.clone();
        let client = world.client.clone();
        let manifest = manifest.clone();
        let namespace = world.namespace().to_string();
        tokio::spawn(async move {
            let api: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
                kube::Api::namespaced(client, &namespace);
            while !stop.load(Ordering::Relaxed) {
                api.patch(
                    "vllm",
                    &kube::api::PatchParams::apply("argocd-controller"),
                    &kube::api::Patch::Apply(&manifest),
                )
                .await?;
                applied.send_modify(|n| *n += 1);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            anyhow::Ok(())
        })
    };

    deployment.wait_ready_replicas(5, 2 * MINUTE).await?;
    // Load drops: scale down to minReplicas while the applier keeps applying.
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"argo\"", 0.0)]);
    deployment.wait_spec_replicas(1, MINUTE).await?;
    // At least 6 applies in all, so that some fell on each phase.
    let enough = tokio::time::timeout(MINUTE, applies.wait_for(|&n| n >= 6))
        .await
        .map(|r| r.is_ok());
    stop.store(true, Ordering::Relaxed);
    // The applier's own error first (a conflict would end it).
    applier.await??;
    ensure!(
        enough == Ok(true),
        "the applier did not apply 6 times: {}",
        *applies.borrow()
    );
    let walk = deployment.replica_walk()?;
    println!(
        "replicas under a GitOps applier ({} applies): {walk:?}",
        *applies.borrow()
    );
    ensure!(
        walk == vec![1, 2, 4, 5, 1],
        "a flip under the applier (expected 1 -> 2 -> 4 -> 5 -> 1): {walk:?}\n{}",
        world.operator_logs()
    );
    let writes = writes_of(&world.operators[0].metrics().await?, "replicas");
    let changes = u64::try_from(walk.len() - 1)?;
    println!("operator replica writes: {writes}, replica changes: {changes}");
    ensure!(writes == changes, "{writes} writes for {changes} changes");
    world.finish().await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn helm_upgrade_with_replicas_reports_the_conflict_and_the_operator_value_stays()
-> anyhow::Result<()> {
    let mut world = World::new("gitops-helm").await?;
    let (_chart, chart_path) = llmscaler_e2e::fixture::workload_chart()?;
    let ns = world.namespace().to_string();
    let helm = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--namespace", &ns]);
        run_command(&helm_path(), &all, None)
    };
    helm(&[
        "install",
        "inference",
        &chart_path,
        "--set",
        "replicas=1",
        "--set",
        "revision=1",
        "--wait=false",
    ])?;
    world.wait_replicas("vllm", 1, MINUTE).await?;
    world.queue_scaler("helm", 1.0, (1, 3), json!({})).await?;
    let deployment = world.record("vllm").await?;
    world.start_operator("helm-0", &[]).await?;
    deployment.wait_ready_replicas(3, MINUTE).await?;

    let err = helm(&[
        "upgrade",
        "inference",
        &chart_path,
        "--set",
        "replicas=1",
        "--set",
        "revision=2",
    ])
    .expect_err("helm upgrade must report the conflict on spec.replicas");
    let text = err.to_string();
    println!(
        "helm upgrade with replicas rendered: {}",
        text.lines().last().unwrap_or("")
    );
    ensure!(text.contains("conflict"), "{text}");
    ensure!(text.contains(".spec.replicas"), "{text}");
    ensure!(
        text.contains("llmscaler"),
        "the error should name the llmscaler manager: {text}"
    );
    // Exact: every version since before the operator started; the refused upgrade wrote nothing.
    let walk = deployment.replica_walk()?;
    ensure!(
        walk == vec![1, 2, 3],
        "replica walk around the helm upgrade: {walk:?}"
    );
    helm(&["uninstall", "inference", "--wait=false"])?;
    world.finish().await
}

/// The caBundles of the validating and mutating configurations named `name`.
fn ca_bundles(name: &str) -> anyhow::Result<Vec<String>> {
    let mut bundles = Vec::new();
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let out = run_command(
            &llmscaler_e2e::kubectl_path(),
            &[
                "get",
                kind,
                name,
                "-o",
                "jsonpath={.webhooks[*].clientConfig.caBundle}",
            ],
            None,
        )?;
        bundles.push(out);
    }
    Ok(bundles)
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn helm_upgrade_twice_keeps_the_ca_bundle_and_admission_never_fails() -> anyhow::Result<()> {
    let mut world = World::new("gitops-upgrade").await?;
    let ns = world.namespace().to_string();
    let port = llmscaler_e2e::free_port()?;
    let release = ns.clone();
    let name = format!("{release}-llmscaler");
    let chart = llmscaler_e2e::operator::chart_dir();
    let chart = chart.to_str().unwrap_or_default().to_string();
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
    let listen = format!("--webhook-listen=127.0.0.1:{port}");
    let configuration = format!("--validating-webhook-configuration={name}");
    let mutating = format!("--mutating-webhook-configuration={name}");
    // The chart's Secret name: the RBAC allows only it (docs/security.md#rbac).
    let secret = format!("--cert-secret={name}-webhook-tls");
    world
        .start_operator(
            "upgrade-0",
            &[
                &listen,
                "--webhook-extra-san=127.0.0.1",
                &configuration,
                &mutating,
                &secret,
                "--webhook-cert-check-seconds=1",
            ],
        )
        .await?;
    let injected = llmscaler_e2e::wait_for("caBundle injected", MINUTE, || async {
        let bundles = ca_bundles(&name)?;
        Ok(if bundles.iter().all(|b| !b.is_empty()) {
            llmscaler_e2e::Check::Done(bundles)
        } else {
            llmscaler_e2e::Check::NotYet(format!("{bundles:?}"))
        })
    })
    .await?;

    // A stream of admissions (server-side dry runs go through both webhooks) during two upgrades.
    let valid = json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                 "serverAddress": "http://127.0.0.1:9090", "minReplicas": 1, "maxReplicas": 2,
                 "metrics": [{"query": "avg(q)", "target": "1"}]}})
    .to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let stream = {
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match run_command(
                    &llmscaler_e2e::kubectl_path(),
                    &["apply", "--dry-run=server", "-f", "-"],
                    Some(&valid),
                ) {
                    Ok(_) => ok += 1,
                    Err(err) => failed.push(err.to_string()),
                }
            }
            (ok, failed)
        })
    };
    for timeout in ["5", "7"] {
        helm(&["--set", &format!("webhook.timeoutSeconds={timeout}")])?;
        let bundles = ca_bundles(&name)?;
        ensure!(
            bundles == injected,
            "caBundle changed by helm upgrade: {bundles:?} vs {injected:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = stream.await?;
    println!(
        "admissions during two helm upgrades: {ok} ok, {} failed",
        failed.len()
    );
    ensure!(failed.is_empty(), "admission failed: {failed:?}");
    ensure!(ok > 0, "no admission went through");
    // An invalid spec is still refused with its field path.
    let mut invalid: serde_json::Value = serde_json::from_str(&valid_spec_with_target(&ns, "80%"))?;
    invalid["metadata"]["name"] = json!("bad");
    let err = run_command(
        &llmscaler_e2e::kubectl_path(),
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&invalid.to_string()),
    )
    .expect_err("80% must be refused");
    ensure!(err.to_string().contains("spec.metrics[0].target"), "{err}");
    run_command(
        &helm_path(),
        &["uninstall", &release, "--namespace", &ns],
        None,
    )?;
    world.finish().await
}

fn valid_spec_with_target(ns: &str, target: &str) -> String {
    json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                 "serverAddress": "http://127.0.0.1:9090", "minReplicas": 1, "maxReplicas": 2,
                 "metrics": [{"query": "avg(q)", "target": target}]}})
    .to_string()
}
