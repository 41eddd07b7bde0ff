//! Coexistence with GitOps tools and Helm (issue 7): the operator owns `spec.replicas` alone by
//! server-side apply, so an applier that leaves `replicas` out never fights it, and Helm 4
//! (which applies server-side) reports the conflict instead of silently taking the field.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::ensure;
use llmscaler_e2e::fixture::{World, deployment_manifest, queue_scaler_spec};
use llmscaler_e2e::helm_path;
use llmscaler_e2e::operator::run_command;
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

fn writes_of(metrics: &str, kind: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("llmscaler_writes_total{") && l.contains(&format!("kind=\"{kind}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn a_gitops_applier_without_replicas_never_flips_the_fleet() -> anyhow::Result<()> {
    let mut world = World::new("gitops-argo").await?;
    let manifest = deployment_manifest(world.namespace(), "vllm", None);
    world.apply("argocd-controller", &manifest).await?;
    world.wait_replicas("vllm", 1, MINUTE).await?;
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"argo\"", 0.85)]);
    world
        .create_scaler(
            "chat",
            queue_scaler_spec(
                &world.prometheus.url(),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}),
                "argo",
                (1, 5),
                json!({}),
            ),
        )
        .await?;
    world.start_operator("argo-0", &[]).await?;

    // The GitOps applier: re-applies the manifest (no replicas) every 2 s, without force.
    let stop = Arc::new(AtomicBool::new(false));
    let applies = Arc::new(AtomicUsize::new(0));
    let applier = {
        let (stop, applies) = (stop.clone(), applies.clone());
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
                applies.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            anyhow::Ok(())
        })
    };

    let mut walk = vec![1];
    let mut phase_down = false;
    let deadline = std::time::Instant::now() + 2 * MINUTE;
    loop {
        ensure!(
            std::time::Instant::now() < deadline,
            "walk {walk:?}\n{}",
            world.operator_logs()
        );
        ensure!(!applier.is_finished(), "the applier stopped (a conflict?)");
        let (spec, ready, _) = world.deployment_replicas("vllm").await?;
        if walk.last() != Some(&spec) {
            walk.push(spec);
        }
        if !phase_down && spec == 5 && ready == 5 {
            // Load drops: scale down to minReplicas while the applier keeps applying.
            phase_down = true;
            world
                .exporter
                .set_gauge("llm_queue", &[("scaler=\"argo\"", 0.0)]);
        }
        if phase_down && spec == 1 && applies.load(Ordering::Relaxed) >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    applier.await??;
    println!(
        "replicas under a GitOps applier ({} applies): {walk:?}",
        applies.load(Ordering::Relaxed)
    );
    let up: Vec<i32> = walk
        .iter()
        .copied()
        .take_while(|&r| r != 5)
        .chain([5])
        .collect();
    ensure!(
        up.windows(2).all(|w| w[0] < w[1]),
        "flipped back while scaling up: {walk:?}"
    );
    ensure!(
        walk.ends_with(&[5, 1]),
        "flipped back while scaling down: {walk:?}"
    );
    let writes = writes_of(&world.operators[0].metrics().await?, "replicas");
    let changes = u64::try_from(walk.len() - 1)?;
    println!("operator replica writes: {writes}, replica changes: {changes}");
    ensure!(writes == changes, "{writes} writes for {changes} changes");
    world.finish().await
}

const WORKLOAD_CHART: &str = r#"apiVersion: v2
name: inference
version: 0.1.0
"#;

const WORKLOAD_TEMPLATE: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
  annotations:
    revision: {{ .Values.revision | quote }}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels: {app: vllm}
  template:
    metadata:
      labels: {app: vllm}
    spec:
      containers: [{name: vllm, image: "registry.invalid/vllm:fake"}]
      tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
"#;

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn helm_upgrade_with_replicas_reports_the_conflict_and_the_operator_value_stays()
-> anyhow::Result<()> {
    let mut world = World::new("gitops-helm").await?;
    let chart = tempfile::tempdir()?;
    std::fs::create_dir_all(chart.path().join("templates"))?;
    std::fs::write(chart.path().join("Chart.yaml"), WORKLOAD_CHART)?;
    std::fs::write(
        chart.path().join("templates/deployment.yaml"),
        WORKLOAD_TEMPLATE,
    )?;
    let chart_path = chart.path().to_str().unwrap_or_default().to_string();
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
    world
        .exporter
        .set_gauge("llm_queue", &[("scaler=\"helm\"", 1.0)]);
    world
        .create_scaler(
            "chat",
            queue_scaler_spec(
                &world.prometheus.url(),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"}),
                "helm",
                (1, 3),
                json!({}),
            ),
        )
        .await?;
    world.start_operator("helm-0", &[]).await?;
    world.wait_replicas("vllm", 3, MINUTE).await?;

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
    let (spec, _, _) = world.deployment_replicas("vllm").await?;
    ensure!(spec == 3, "helm changed replicas to {spec}");
    helm(&["uninstall", "inference", "--wait=false"])?;
    world.finish().await
}
