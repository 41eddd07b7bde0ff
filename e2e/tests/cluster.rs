//! Proves that the cluster started by `e2e/cluster up` is a real control plane: the scheduler
//! binds a Deployment's pods to the kwok nodes, kwok marks them Ready, server-side apply records
//! field ownership of `spec.replicas`, and the ReplicaSet controller honours
//! `controller.kubernetes.io/pod-deletion-cost` when it scales down.
//!
//! Run with `./e2e/test`, or by hand:
//! `e2e/cluster up && eval "$(e2e/cluster env)" && cargo test -p llmscaler-e2e -- --ignored
//! --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use llmscaler_e2e::{Check, TestNamespace, client, ready_kwok_nodes, wait_for};
use serde_json::json;

const FIELD_MANAGER: &str = "llmscaler";
const DEPLOYMENT: &str = "web";
const APP_LABEL: &str = "app=web";
const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
const TIMEOUT: Duration = Duration::from_secs(120);

fn deployment(namespace: &str, replicas: i32) -> anyhow::Result<Deployment> {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": DEPLOYMENT, "namespace": namespace },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": {
                    "containers": [{ "name": "server", "image": "registry.invalid/llm-server:fake" }],
                    "tolerations": [{ "key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule" }]
                }
            }
        }
    }))
    .context("building the test Deployment")
}

/// Server-side apply of a partial Deployment that holds only `spec.replicas`.
async fn apply_replicas(
    deployments: &Api<Deployment>,
    namespace: &str,
    replicas: i32,
) -> anyhow::Result<Deployment> {
    let partial = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": DEPLOYMENT, "namespace": namespace },
        "spec": { "replicas": replicas }
    });
    deployments
        .patch(
            DEPLOYMENT,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&partial),
        )
        .await
        .with_context(|| {
            format!("server-side apply of spec.replicas={replicas} as {FIELD_MANAGER}")
        })
}

/// Asserts that `llmscaler` has exactly one managedFields entry, an Apply owning `spec.replicas`
/// alone.
fn assert_owns_only_replicas(deployment: &Deployment) -> anyhow::Result<serde_json::Value> {
    let entries: Vec<_> = deployment
        .managed_fields()
        .iter()
        .filter(|e| e.manager.as_deref() == Some(FIELD_MANAGER))
        .collect();
    ensure!(
        entries.len() == 1,
        "expected one managedFields entry for {FIELD_MANAGER}, got {entries:?}"
    );
    let entry = entries[0];
    ensure!(
        entry.operation.as_deref() == Some("Apply"),
        "expected an Apply entry, got {entry:?}"
    );
    let fields = entry
        .fields_v1
        .as_ref()
        .map(|f| f.0.clone())
        .unwrap_or_default();
    ensure!(
        fields == json!({ "f:spec": { "f:replicas": {} } }),
        "{FIELD_MANAGER} should own spec.replicas and nothing else, owns {fields}"
    );
    Ok(serde_json::to_value(entry)?)
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn ready_time(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.to_string())
        .unwrap_or_default()
}

fn describe(pods: &[Pod]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} node={} phase={} ready={} deleting={}",
                p.name_any(),
                node_of(p).unwrap_or("-"),
                p.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or("-"),
                is_ready(p),
                p.metadata.deletion_timestamp.is_some()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Waits until exactly `count` pods of the Deployment exist (none terminating), all Ready and
/// bound to one of `nodes`.
async fn wait_for_ready_pods(
    pods: &Api<Pod>,
    count: usize,
    nodes: &[String],
) -> anyhow::Result<Vec<Pod>> {
    wait_for(
        &format!("{count} Ready pods on kwok nodes"),
        TIMEOUT,
        || async {
            let list = pods
                .list(&ListParams::default().labels(APP_LABEL))
                .await?
                .items;
            let done = list.len() == count
                && list.iter().all(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && is_ready(p)
                        && node_of(p).is_some_and(|n| nodes.iter().any(|k| k == n))
                });
            Ok(if done {
                Check::Done(list)
            } else {
                Check::NotYet(describe(&list))
            })
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn deployment_scheduling_ssa_ownership_and_pod_deletion_cost() -> anyhow::Result<()> {
    let client: Client = client().await?;

    let version = client.apiserver_version().await.context("GET /version")?;
    println!(
        "cluster /version: gitVersion={} platform={}",
        version.git_version, version.platform
    );
    ensure!(
        version.git_version.starts_with("v1.36."),
        "expected Kubernetes v1.36.x, got {}",
        version.git_version
    );

    let nodes = wait_for("2 Ready kwok nodes", TIMEOUT, || async {
        let ready = ready_kwok_nodes(&client).await?;
        Ok(if ready.len() >= 2 {
            Check::Done(ready)
        } else {
            Check::NotYet(format!("{ready:?}"))
        })
    })
    .await?;
    println!("kwok nodes Ready: {nodes:?}");

    let ns = TestNamespace::create(&client, "e2e-cluster").await?;
    let namespace = ns.name().to_owned();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);

    // 1. A Deployment of 3 replicas: 3 pods scheduled onto kwok nodes and marked Ready by kwok.
    let create = PostParams {
        field_manager: Some("e2e-setup".to_owned()),
        ..PostParams::default()
    };
    deployments
        .create(&create, &deployment(&namespace, 3)?)
        .await
        .context("creating the Deployment")?;
    let ready = wait_for_ready_pods(&pods, 3, &nodes).await?;
    for pod in &ready {
        println!(
            "pod {} Ready on node {}",
            pod.name_any(),
            node_of(pod).unwrap_or("-")
        );
    }

    // 2. Server-side apply of spec.replicas alone, forced, under the llmscaler field manager.
    let applied = apply_replicas(&deployments, &namespace, 3).await?;
    let entry = assert_owns_only_replicas(&applied)?;
    println!("managedFields entry of {FIELD_MANAGER}: {entry}");

    // 3. Deletion cost: the pod the default ranking would keep longest (fewest neighbours on its
    //    node, Ready first) gets the lowest cost, so only the annotation can make it the victim.
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for pod in &ready {
        *per_node
            .entry(node_of(pod).unwrap_or_default())
            .or_default() += 1;
    }
    let victim = ready
        .iter()
        .min_by_key(|p| {
            (
                per_node[node_of(p).unwrap_or_default()],
                ready_time(p),
                p.name_any(),
            )
        })
        .map(|p| p.name_any())
        .context("no pods")?;
    for pod in &ready {
        let cost = if pod.name_any() == victim {
            "-100"
        } else {
            "100"
        };
        let patch = json!({ "metadata": { "annotations": { DELETION_COST: cost } } });
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .with_context(|| {
            format!(
                "annotating pod {} with {DELETION_COST}={cost}",
                pod.name_any()
            )
        })?;
        println!("pod {} annotated {DELETION_COST}={cost}", pod.name_any());
    }
    let survivors_expected: BTreeSet<String> = ready
        .iter()
        .map(|p| p.name_any())
        .filter(|n| *n != victim)
        .collect();

    let applied = apply_replicas(&deployments, &namespace, 2).await?;
    assert_owns_only_replicas(&applied)?;
    let remaining = wait_for_ready_pods(&pods, 2, &nodes).await?;
    let survivors: BTreeSet<String> = remaining.iter().map(|p| p.name_any()).collect();
    ensure!(
        survivors == survivors_expected,
        "scale-down should delete only {victim} (cost -100); remaining pods are {survivors:?}"
    );
    println!("scale 3 -> 2 deleted pod {victim} (lowest {DELETION_COST}); kept {survivors:?}");

    ns.delete().await
}
