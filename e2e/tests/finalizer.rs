//! The operator's finalizer (docs/uninstall.md#deleting-an-llmscaler) on the local cluster: an
//! LLMScaler deleted while it drains puts its pods back in rotation and clears its pod marks
//! within one sync period, the target keeping its replicas; deleted while the operator is
//! stopped, the same happens when the operator comes back. A scaler paused mid-drain puts its
//! drained pods back in rotation (docs/scale-down.md#drain).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use llmscaler_api::names::{
    FIELD_MANAGER, POD_DELETION_COST, ROTATION_IN, ROTATION_LABEL, ROTATION_OUT,
};
use llmscaler_e2e::fixture::{SETUP_MANAGER, World, scaler_resource};
use llmscaler_e2e::{Check, wait_for};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);
/// The scalers' `syncPeriodSeconds`: the clean-up must be done within one.
const SYNC_PERIOD: Duration = Duration::from_secs(15);
const FINALIZER: &str = "autoscaling.modelsphere.dev/cleanup";

/// Deployment `name` of 4 pods whose template carries the rotation label `in`.
fn deployment(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, ROTATION_LABEL: ROTATION_IN}},
                "spec": {
                    "containers": [{"name": "vllm", "image": "registry.invalid/vllm:fake"}],
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
                }
            }
        }
    })
}

/// A scaler of `target` that recommends its floor, 2, and drains for up to 10 minutes (the
/// drained pods' in-flight requests are never read as 0: no vLLM series exists here).
fn scaler_spec(world: &World, target: &str) -> Value {
    json!({
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        "serverAddress": world.prometheus.url(),
        "minReplicas": 2, "maxReplicas": 4,
        "syncPeriodSeconds": SYNC_PERIOD.as_secs(),
        "metrics": [{"name": "idle", "query": "vector(0)", "target": "1"}],
        "scaleDown": {"drain": {"drainSeconds": 600}}
    })
}

/// Pod name → (rotation label, pod-deletion-cost) of `app`'s pods.
async fn pods_of(
    pods: &Api<Pod>,
    app: &str,
) -> anyhow::Result<BTreeMap<String, (Option<String>, Option<String>)>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .into_iter()
        .map(|p| {
            let rotation = p.labels().get(ROTATION_LABEL).cloned();
            let cost = p.annotations().get(POD_DELETION_COST).cloned();
            (p.name_any(), (rotation, cost))
        })
        .collect())
}

/// Creates `scaler` on `target`, marks one pod as an earlier scale-down would have (cost under
/// the operator's field manager), and waits until two pods are out of rotation.
async fn draining(world: &World, scaler: &str, target: &str) -> anyhow::Result<()> {
    let ns = world.namespace().to_owned();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &ns);
    world.apply(SETUP_MANAGER, &deployment(&ns, target)).await?;
    world.wait_replicas(target, 4, DEADLINE).await?;
    let first = pods_of(&pods, target)
        .await?
        .into_keys()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no pod of {target}"))?;
    let mark = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": first, "annotations": {POD_DELETION_COST: "-100"}}});
    pods.patch(
        &first,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&mark),
    )
    .await?;
    world
        .create_scaler(scaler, scaler_spec(world, target))
        .await?;
    wait_for(
        &format!("two pods of {target} out of rotation"),
        DEADLINE,
        || async {
            let seen = pods_of(&pods, target).await?;
            let out = seen
                .values()
                .filter(|(r, _)| r.as_deref() == Some(ROTATION_OUT))
                .count();
            Ok(if out == 2 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{seen:?}"))
            })
        },
    )
    .await?;
    let finalizers = world.scaler(scaler).await?["metadata"]["finalizers"].clone();
    anyhow::ensure!(
        finalizers == json!([FINALIZER]),
        "the operator keeps its finalizer on {scaler}: {finalizers}"
    );
    Ok(())
}

/// Waits until `scaler` is gone and every pod of `target` is back in rotation and unmarked;
/// returns how long it took. The Deployment keeps its 4 replicas.
async fn handed_back(world: &World, scaler: &str, target: &str) -> anyhow::Result<Duration> {
    let ns = world.namespace().to_owned();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &ns);
    let scalers: Api<DynamicObject> =
        Api::namespaced_with(world.client.clone(), &ns, &scaler_resource());
    let start = Instant::now();
    wait_for(
        &format!("{target} handed back by {scaler}"),
        DEADLINE,
        || async {
            let seen = pods_of(&pods, target).await?;
            let clean = seen.len() == 4
                && seen
                    .values()
                    .all(|(r, c)| r.as_deref() == Some(ROTATION_IN) && c.is_none());
            let gone = scalers.get_opt(scaler).await?.is_none();
            Ok(if clean && gone {
                Check::Done(())
            } else {
                Check::NotYet(format!("scaler gone {gone}, pods {seen:?}"))
            })
        },
    )
    .await?;
    let took = start.elapsed();
    let deployment = Api::<Deployment>::namespaced(world.client.clone(), &ns)
        .get(target)
        .await?;
    let replicas = deployment.spec.and_then(|s| s.replicas);
    anyhow::ensure!(
        replicas == Some(4),
        "{target} keeps its replicas: {replicas:?}"
    );
    Ok(took)
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_paused_or_deleted_scaler_puts_its_drained_pods_back_even_when_deleted_while_down()
-> anyhow::Result<()> {
    let mut world = World::new("finalizer").await?;
    let ns = world.namespace().to_owned();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &ns);
    let scalers: Api<DynamicObject> =
        Api::namespaced_with(world.client.clone(), &ns, &scaler_resource());
    world.start_operator("finalizer-1", &[]).await?;

    // Paused mid-drain: the drained pods go back in rotation at once (nothing else is written).
    draining(&world, "chat-p", "vllm-p").await?;
    let pause =
        json!({"metadata": {"annotations": {"autoscaling.modelsphere.dev/paused": "true"}}});
    scalers
        .patch("chat-p", &PatchParams::default(), &Patch::Merge(&pause))
        .await?;
    let start = Instant::now();
    wait_for(
        "the paused scaler's pods back in rotation",
        DEADLINE,
        || async {
            let seen = pods_of(&pods, "vllm-p").await?;
            let all_in = seen.len() == 4
                && seen
                    .values()
                    .all(|(r, _)| r.as_deref() == Some(ROTATION_IN));
            Ok(if all_in {
                Check::Done(())
            } else {
                Check::NotYet(format!("{seen:?}"))
            })
        },
    )
    .await?;
    println!(
        "paused mid-drain -> pods back in rotation: {:?}",
        start.elapsed()
    );

    // Deleted mid-drain while the operator runs.
    draining(&world, "chat", "vllm").await?;
    scalers.delete("chat", &DeleteParams::default()).await?;
    let took = handed_back(&world, "chat", "vllm").await?;
    println!("deleted mid-drain -> pods back in rotation and unmarked: {took:?}");
    anyhow::ensure!(
        took <= SYNC_PERIOD,
        "handed back within one sync period ({SYNC_PERIOD:?}): took {took:?}\n{}",
        world.operator_logs()
    );

    // Deleted mid-drain while the operator is stopped: nothing happens until it is back.
    draining(&world, "chat-b", "vllm-b").await?;
    if let Some(operator) = world.operators.last_mut() {
        operator.terminate(Duration::from_secs(20)).await?;
    }
    scalers.delete("chat-b", &DeleteParams::default()).await?;
    let stuck = world.scaler("chat-b").await?;
    anyhow::ensure!(
        !stuck["metadata"]["deletionTimestamp"].is_null(),
        "the finalizer holds the deleted scaler while the operator is down: {stuck}"
    );
    let out = pods_of(&pods, "vllm-b")
        .await?
        .values()
        .filter(|(r, _)| r.as_deref() == Some(ROTATION_OUT))
        .count();
    anyhow::ensure!(out == 2, "the drained pods stay out while nobody cleans up");
    world.start_operator("finalizer-2", &[]).await?;
    let took = handed_back(&world, "chat-b", "vllm-b").await?;
    println!("deleted while the operator was down -> handed back after restart: {took:?}");
    world.finish().await
}
