//! `llmscaler release` (issue 17): after the operator scaled a Helm-installed Deployment and
//! marked its pods, `release` leaves `spec.replicas` at its value with no `llmscaler`
//! ownership, the pods without llmscaler's `pod-deletion-cost` marks, and a Helm 4 upgrade that
//! renders `replicas` (server-side apply, no force) then succeeds where it conflicted before.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use llmscaler_e2e::fixture::World;
use llmscaler_e2e::operator::run_command;
use llmscaler_e2e::{Check, helm_path, wait_for};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);
/// The operator's field manager and annotations (crds/src/names.rs).
const FIELD_MANAGER: &str = "llmscaler";
const PAUSED_ANNOTATION: &str = "autoscaling.modelsphere.dev/paused";
const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Whether `manager` owns `spec.replicas` in `managedFields` (JSON).
fn owns_replicas(managed_fields: &serde_json::Value, manager: &str) -> bool {
    managed_fields
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["manager"] == manager && !e["fieldsV1"]["f:spec"]["f:replicas"].is_null())
}

/// Pods of app `vllm` carrying a `pod-deletion-cost` annotation owned by `llmscaler`.
async fn marked_pods(pods: &Api<Pod>) -> anyhow::Result<Vec<String>> {
    let list = pods.list(&ListParams::default().labels("app=vllm")).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let owned = p.metadata.managed_fields.iter().flatten().any(|e| {
                e.manager.as_deref() == Some(FIELD_MANAGER)
                    && e.fields_v1.as_ref().is_some_and(|f| {
                        f.0["f:metadata"]["f:annotations"]
                            .get(format!("f:{POD_DELETION_COST}"))
                            .is_some()
                    })
            });
            let annotated = p
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(POD_DELETION_COST));
            owned || annotated
        })
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// `llmscaler release` as a process with the cluster's kubeconfig; exit code and output.
fn release(namespace: &str) -> anyhow::Result<(i32, String)> {
    let output = std::process::Command::new(llmscaler_e2e::operator::binary())
        .args(["release", "--target", "deployment/vllm", "-n", namespace])
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("--- llmscaler release\n{text}");
    Ok((output.status.code().context("release was killed")?, text))
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn release_hands_replicas_and_marks_back_and_helm_then_applies_without_conflict()
-> anyhow::Result<()> {
    let mut world = World::new("release").await?;
    let ns = world.namespace().to_string();
    let (_chart, chart_path) = llmscaler_e2e::fixture::workload_chart()?;
    let helm = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--namespace", &ns]);
        run_command(&helm_path(), &all, None)
    };
    let upgrade = |revision: &str| {
        helm(&[
            "upgrade",
            "inference",
            &chart_path,
            "--set",
            "replicas=1",
            "--set",
            &format!("revision={revision}"),
        ])
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
    // Every pod the deletion-cost query returns gets a mark, survivors included.
    world
        .queue_scaler(
            "release",
            1.0,
            (1, 3),
            json!({"scaleDown": {"deletionCostQuery": "sum by (pod) (pod_cost)"}}),
        )
        .await?;
    world.start_operator("release-0", &[]).await?;
    world.wait_replicas("vllm", 3, MINUTE).await?;

    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &ns);
    let names: Vec<String> = pods
        .list(&ListParams::default().labels("app=vllm"))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    // One exposition text for both families (the exporter serves one text).
    let exposition = |queue: f64| {
        let mut text = format!(
            "# TYPE llm_queue gauge\nllm_queue{{scaler=\"release\"}} {queue}\n# TYPE pod_cost gauge\n"
        );
        for (name, cost) in names.iter().zip(1..) {
            text.push_str(&format!("pod_cost{{pod=\"{name}\"}} {cost}\n"));
        }
        text
    };
    world.exporter.set(exposition(1.0));
    let url = format!(
        "{}/api/v1/query?query=count(pod_cost)",
        world.prometheus.url()
    );
    wait_for("Prometheus to hold pod_cost for 3 pods", MINUTE, || async {
        let body: serde_json::Value = reqwest::get(&url).await?.json().await?;
        let count = body["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_owned);
        Ok(if count.as_deref() == Some("3") {
            Check::Done(())
        } else {
            Check::NotYet(format!("{count:?}"))
        })
    })
    .await?;
    // Load down: 3 -> 2; the operator marks the three pods (the cheapest goes).
    world.exporter.set(exposition(0.3));
    if let Err(err) = world.wait_replicas("vllm", 2, MINUTE).await {
        let status = world.scaler("chat").await?["status"].clone();
        anyhow::bail!("{err}\nstatus: {status:#}\n{}", world.operator_logs());
    }
    let marked = wait_for(
        "llmscaler's marks on the surviving pods",
        MINUTE,
        || async {
            let marked = marked_pods(&pods).await?;
            Ok(if marked.len() == 2 {
                Check::Done(marked)
            } else {
                Check::NotYet(format!("{marked:?}"))
            })
        },
    )
    .await?;
    println!("marked pods: {marked:?}");
    let deployments: Api<Deployment> = Api::namespaced(world.client.clone(), &ns);
    let before = serde_json::to_value(deployments.get("vllm").await?.metadata.managed_fields)?;
    ensure!(owns_replicas(&before, FIELD_MANAGER), "{before:#}");
    // Before the release Helm 4 conflicts with llmscaler (e2e/tests/gitops.rs).
    let err = upgrade("2").expect_err("helm upgrade must conflict before the release");
    ensure!(err.to_string().contains("llmscaler"), "{err}");

    // An active scaler still targets it: refused, nothing changed.
    let (code, text) = release(&ns)?;
    ensure!(code == 2, "release with an active scaler: exit {code}");
    ensure!(text.contains("still scales Deployment vllm"), "{text}");
    run_command(
        &llmscaler_e2e::kubectl_path(),
        &[
            "annotate",
            "llmscaler",
            "chat",
            "-n",
            &ns,
            &format!("{PAUSED_ANNOTATION}=true"),
        ],
        None,
    )?;
    let (code, text) = release(&ns)?;
    ensure!(code == 0, "release: exit {code}");
    ensure!(
        text.contains("spec.replicas (2) is no longer owned by llmscaler"),
        "{text}"
    );
    ensure!(text.contains("marks cleared on 2 pod(s)"), "{text}");

    let deployment = deployments.get("vllm").await?;
    let after = serde_json::to_value(&deployment.metadata.managed_fields)?;
    ensure!(!owns_replicas(&after, FIELD_MANAGER), "{after:#}");
    let replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
    ensure!(replicas == Some(2), "the value must stay: {replicas:?}");
    let marked = marked_pods(&pods).await?;
    ensure!(marked.is_empty(), "marks left: {marked:?}");
    // A second release finds nothing to do.
    let (code, text) = release(&ns)?;
    ensure!(code == 0, "second release: exit {code}");
    ensure!(
        text.contains("llmscaler did not own spec.replicas (2)"),
        "{text}"
    );

    // Helm 4 now applies replicas without --force and without conflict.
    upgrade("3")?;
    world.wait_replicas("vllm", 1, MINUTE).await?;
    let after = serde_json::to_value(deployments.get("vllm").await?.metadata.managed_fields)?;
    ensure!(!owns_replicas(&after, FIELD_MANAGER), "{after:#}");
    helm(&["uninstall", "inference", "--wait=false"])?;
    world.finish().await
}
