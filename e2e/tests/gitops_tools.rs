//! The real GitOps tools next to the operator (issue 28, "The real GitOps tools"): Argo CD
//! (auto-sync with self-heal, client-side apply) and Flux (a Kustomization reconciling every
//! 10 s, server-side apply), each deploying from a Git repository on loopback a Deployment whose
//! manifest carries `replicas: 1` and an LLMScaler on it, while load holds the scaler at 4.
//! Each tool runs without and with the settings of docs/migrate.md
//! (#gitops-leave-spec-replicas-to-the-operator): without them the tool writes Git's `1` back
//! (thrash), with them the replica walk is exactly 1 -> 2 -> 4 and `llmscaler` alone owns
//! `spec.replicas`. The LLMScaler's health as Argo CD shows it comes from
//! docs/argocd/llmscaler/health.lua.
//!
//! Built only with the `gitops` feature and run by `e2e/gitops-test`, which builds Argo CD and Flux
//! and starts them (`e2e/gitops up`); the hold under load is `GITOPS_HOLD_SECONDS` (300).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, ensure};
use kube::api::{ApiResource, GroupVersionKind};
use llmscaler_e2e::fixture::{World, deployment_manifest, deployment_ref, queue_scaler_spec};
use llmscaler_e2e::operator::run_command;
use llmscaler_e2e::watch::{Recorder, Version};
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);
/// The queue the load holds: 20 per replica against a target of 0.5 asks for far more than 4.
const LOAD: f64 = 20.0;
/// The Lua health check Argo CD runs for LLMScalers.
const HEALTH_LUA: &str = include_str!("../../docs/argocd/llmscaler/health.lua");

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tool {
    ArgoCd,
    Flux,
}

/// What the tool is told about `spec.replicas` (docs/migrate.md#gitops-leave-spec-replicas-to-the-operator).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Setting {
    /// Nothing: Git's `replicas: 1` is applied like every other field.
    Plain,
    /// Argo CD's `ignoreDifferences` on `/spec/replicas` without `RespectIgnoreDifferences=true`.
    IgnoreOnly,
    /// The documented settings: Argo CD's `ignoreDifferences` with `RespectIgnoreDifferences=true`;
    /// Flux's Kustomization patch removing `/spec/replicas`.
    Documented,
}

/// What one run saw; printed as one `GITOPS-RESULT` line for docs/benchmarks/gitops.md.
#[derive(Debug)]
struct Outcome {
    walk: Vec<i32>,
    /// Writes of Git's value over the operator's: steps down in the walk while the load held.
    resets: usize,
    /// Those of them after the second commit (an annotation changed in Git, half-way through the
    /// hold), which makes each tool sync/apply again.
    resets_after_commit: usize,
    /// Argo CD: syncs run (argocd_app_sync_total); Flux: reconciles run.
    tool_runs: u64,
    /// Managers of `spec.replicas` (managedFields) at the end of the hold.
    owners: Vec<String>,
    /// Each change of those managers over the run, in order.
    owner_walk: Vec<Vec<String>>,
    /// Share of the hold (0..1) during which `spec.replicas` was 4.
    at_four: f64,
    /// Argo CD only: the LLMScaler's health in the Application, each change in order.
    health: Vec<String>,
    /// Argo CD only: the changes of that health from the start of the hold on.
    health_in_hold: Vec<String>,
}

fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} unset: run through e2e/gitops-test"))
}

fn hold() -> anyhow::Result<Duration> {
    let seconds = std::env::var("GITOPS_HOLD_SECONDS").unwrap_or_else(|_| "300".into());
    Ok(Duration::from_secs(seconds.parse().with_context(|| {
        format!("GITOPS_HOLD_SECONDS={seconds}: not whole seconds")
    })?))
}

fn git(dir: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let dir = dir.to_str().context("temp dir not UTF-8")?;
    let mut all = vec!["-C", dir];
    all.extend_from_slice(args);
    run_command("git", &all, None)
}

/// Pushes `files` (path, YAML) as one commit on `main` of `<repo>.git` on the loopback server,
/// replacing the branch (a force push).
fn push(repo: &str, files: &[(&str, &Value)]) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("app"))?;
    for (path, object) in files {
        std::fs::write(dir.path().join(path), serde_yaml::to_string(object)?)?;
    }
    git(dir.path(), &["init", "-q", "-b", "main"])?;
    git(dir.path(), &["add", "."])?;
    git(
        dir.path(),
        &[
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@llmscaler.invalid",
            "commit",
            "-q",
            "-m",
            "workload",
        ],
    )?;
    let url = format!("{}/{repo}.git", env("GITOPS_GIT_URL")?);
    git(dir.path(), &["push", "-q", "--force", &url, "main"])?;
    Ok(url)
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// `sum` of the samples of `metric` whose labels hold every `key="value"` of `labels`.
fn metric_sum(text: &str, metric: &str, labels: &[String]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want.as_str())))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

async fn tool_runs(tool: Tool, ns: &str) -> anyhow::Result<u64> {
    let (url, metric, labels) = match tool {
        Tool::ArgoCd => (
            env("ARGOCD_CONTROLLER_METRICS")?,
            "argocd_app_sync_total",
            vec![format!("name=\"{ns}\"")],
        ),
        Tool::Flux => (
            env("FLUX_KUSTOMIZE_METRICS")?,
            "gotk_reconcile_duration_seconds_count",
            vec![
                "kind=\"Kustomization\"".into(),
                format!("namespace=\"{ns}\""),
            ],
        ),
    };
    let text = reqwest::get(&url).await?.text().await?;
    Ok(metric_sum(&text, metric, &labels))
}

/// The share (0..1) of `[from, to)` during which `spec.replicas` was `replicas`, from the
/// recorded versions (each in force from its `seen_at` until the next one's).
fn share_at(versions: &[Version], replicas: i32, from: SystemTime, to: SystemTime) -> f64 {
    let total = to.duration_since(from).unwrap_or_default().as_secs_f64();
    if total <= 0.0 {
        return 0.0;
    }
    let mut at = 0.0;
    for (i, v) in versions.iter().enumerate() {
        if v.replicas() != Some(replicas) {
            continue;
        }
        let start = v.seen_at.max(from);
        let end = versions.get(i + 1).map_or(to, |n| n.seen_at).min(to);
        at += end.duration_since(start).unwrap_or_default().as_secs_f64();
    }
    at / total
}

/// The LLMScaler's health in each recorded version of the Application seen from `from` on, each
/// change once (the version in force at `from` included).
fn health_walk(versions: &[Version], from: SystemTime) -> Vec<String> {
    let first = versions
        .iter()
        .rposition(|v| v.seen_at <= from)
        .unwrap_or(0);
    let mut walk: Vec<String> = Vec::new();
    for version in versions.iter().skip(first) {
        let resources = version.get("/status/resources");
        let health = resources
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["kind"] == "LLMScaler")
            .map(|r| {
                let h = &r["health"];
                format!(
                    "{}({})",
                    h["status"].as_str().unwrap_or("none"),
                    h["message"].as_str().unwrap_or("")
                )
            });
        if let Some(health) = health
            && walk.last() != Some(&health)
        {
            walk.push(health);
        }
    }
    walk
}

/// Deploys the workload through `tool` with `setting`, drives the scaler to 4 and holds the load
/// for [`hold`], with a second commit in Git (an annotation on the Deployment) half-way through.
async fn run(tool: Tool, setting: Setting) -> anyhow::Result<Outcome> {
    let prefix = match (tool, setting) {
        (Tool::ArgoCd, Setting::Plain) => "argo-plain",
        (Tool::ArgoCd, Setting::IgnoreOnly) => "argo-ignore-only",
        (Tool::ArgoCd, Setting::Documented) => "argo-ignore-respect",
        (Tool::Flux, Setting::Plain) => "flux-plain",
        (Tool::Flux, Setting::IgnoreOnly) => anyhow::bail!("Flux has no ignoreDifferences"),
        (Tool::Flux, Setting::Documented) => "flux-patch",
    };
    let mut world = World::new(prefix).await?;
    let ns = world.namespace().to_string();
    let tag = prefix;
    world
        .exporter
        .set_gauge("llm_queue", &[(&format!("scaler=\"{tag}\""), LOAD)]);
    let mut deployment = deployment_manifest(&ns, "vllm", Some(1));
    let scaler = json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": queue_scaler_spec(&world.prometheus.url(), deployment_ref("vllm"), tag, (1, 4), json!({})),
    });
    let url = push(
        &ns,
        &[
            ("app/deployment.yaml", &deployment),
            ("app/llmscaler.yaml", &scaler),
        ],
    )?;
    // Every version of the Deployment from before the tool creates it: the walk is exact.
    let recorder = Recorder::deployment(&world.client, &ns, "vllm").await?;
    let argocd = env("ARGOCD_NAMESPACE")?;
    let application = resource("argoproj.io", "v1alpha1", "Application", "applications");
    let app_recorder = match tool {
        Tool::ArgoCd => {
            install_health_check(&argocd)?;
            let mut spec = json!({
                "project": "default",
                "source": {"repoURL": url, "targetRevision": "main", "path": "app"},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": ns},
                "syncPolicy": {"automated": {"selfHeal": true}},
            });
            if setting != Setting::Plain {
                spec["ignoreDifferences"] = json!([{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}]);
            }
            if setting == Setting::Documented {
                spec["syncPolicy"]["syncOptions"] = json!(["RespectIgnoreDifferences=true"]);
            }
            let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": ns, "namespace": argocd}, "spec": spec});
            let recorder = Recorder::start(&world.client, &argocd, &application, &ns).await?;
            kube::Api::<kube::api::DynamicObject>::namespaced_with(
                world.client.clone(),
                &argocd,
                &application,
            )
            .patch(
                &ns,
                &kube::api::PatchParams::apply("e2e-setup").force(),
                &kube::api::Patch::Apply(&app),
            )
            .await
            .with_context(|| format!("applying Application {argocd}/{ns}"))?;
            Some(recorder)
        }
        Tool::Flux => {
            let source = json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": "app", "namespace": ns},
                "spec": {"interval": "10s", "url": url, "ref": {"branch": "main"}}});
            let mut spec = json!({"interval": "10s", "path": "./app", "prune": true,
                "sourceRef": {"kind": "GitRepository", "name": "app"}});
            if setting == Setting::Documented {
                spec["patches"] = json!([{"target": {"kind": "Deployment", "name": "vllm"},
                    "patch": "- op: remove\n  path: /spec/replicas\n"}]);
            }
            let kustomization = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization", "metadata": {"name": "app", "namespace": ns}, "spec": spec});
            world.apply("e2e-setup", &source).await?;
            world.apply("e2e-setup", &kustomization).await?;
            None
        }
    };
    recorder
        .wait_until(
            "the tool created the Deployment",
            2 * MINUTE,
            Version::replicas,
        )
        .await?;
    let runs_before = tool_runs(tool, &ns).await?;
    world.start_operator(&format!("{prefix}-0"), &[]).await?;
    // Any version at 4 (the tool may already have written 1 back over it).
    recorder
        .wait_record("spec.replicas 4 once", 2 * MINUTE, |versions| {
            versions
                .iter()
                .any(|v| v.replicas() == Some(4))
                .then_some(())
        })
        .await?;
    // The hold under load is the experiment itself (what the tools do meanwhile), not a wait for
    // a condition.
    let started = Instant::now();
    let hold_from = SystemTime::now();
    let hold = hold()?;
    tokio::time::sleep(hold / 2).await;
    let versions_before_commit = recorder.versions().len();
    deployment["metadata"]["annotations"] = json!({"e2e.llmscaler.io/revision": "2"});
    push(
        &ns,
        &[
            ("app/deployment.yaml", &deployment),
            ("app/llmscaler.yaml", &scaler),
        ],
    )?;
    if tool == Tool::ArgoCd {
        // What a Git webhook does in production: without it Argo CD's repo server did not see
        // the new commit on the branch within 150 s (e2e/gitops runs it with a 10 s revision cache).
        run_command(
            &llmscaler_e2e::kubectl_path(),
            &[
                "-n",
                &argocd,
                "annotate",
                "--overwrite",
                "application",
                &ns,
                "argocd.argoproj.io/refresh=hard",
            ],
            None,
        )?;
    }
    tokio::time::sleep(hold - hold / 2).await;
    let hold_to = SystemTime::now();
    // The second commit reached the cluster (else the half after it proves nothing).
    ensure!(
        recorder.latest().is_some_and(|v| v
            .object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("e2e.llmscaler.io/revision"))
            .is_some_and(|r| r == "2")),
        "the second commit was not applied within the second half of the hold"
    );
    let runs = tool_runs(tool, &ns).await? - runs_before;
    let walk = recorder.replica_walk()?;
    let owners = recorder
        .latest()
        .map(|v| v.replicas_managers())
        .unwrap_or_default();
    let app_versions = app_recorder
        .as_ref()
        .map(Recorder::versions)
        .unwrap_or_default();
    let health = health_walk(&app_versions, SystemTime::UNIX_EPOCH);
    let health_in_hold = health_walk(&app_versions, hold_from);
    let resets = walk.windows(2).filter(|w| w[1] < w[0]).count();
    let versions = recorder.versions();
    let resets_after_commit = versions
        .iter()
        .skip(versions_before_commit.saturating_sub(1))
        .filter_map(Version::replicas)
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[1] < w[0])
        .count();
    let mut owner_walk: Vec<Vec<String>> = Vec::new();
    for v in &versions {
        let managers = v.replicas_managers();
        if owner_walk.last() != Some(&managers) {
            owner_walk.push(managers);
        }
    }
    let outcome = Outcome {
        walk,
        resets,
        resets_after_commit,
        tool_runs: runs,
        owners,
        owner_walk,
        at_four: share_at(&versions, 4, hold_from, hold_to),
        health,
        health_in_hold,
    };
    println!(
        "GITOPS-RESULT tool={tool:?} setting={setting:?} hold_s={} {outcome:?}",
        started.elapsed().as_secs()
    );
    if let Some(app) = &app_recorder {
        println!(
            "Application at the end: sync {} / health {}",
            app.latest()
                .map(|v| v.get("/status/sync/status").to_string())
                .unwrap_or_default(),
            app.latest()
                .map(|v| v.get("/status/health/status").to_string())
                .unwrap_or_default()
        );
    }
    // Nothing of the tool's may be left behind the namespace (Argo CD's Application lives in its own).
    if tool == Tool::ArgoCd {
        run_command(
            &llmscaler_e2e::kubectl_path(),
            &["-n", &argocd, "delete", "application", &ns, "--wait=false"],
            None,
        )?;
    }
    let logs = world.operator_logs();
    world.finish().await.map_err(|e| e.context(logs))?;
    Ok(outcome)
}

/// The LLMScaler health check in `argocd-cm` (docs/argocd/README.md#install-it).
fn install_health_check(argocd: &str) -> anyhow::Result<()> {
    let patch = json!({"data": {"resource.customizations.health.autoscaling.modelsphere.dev_LLMScaler": HEALTH_LUA}});
    run_command(
        &llmscaler_e2e::kubectl_path(),
        &[
            "-n",
            argocd,
            "patch",
            "configmap",
            "argocd-cm",
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    )
    .map(drop)
}

/// The field manager each tool writes with.
fn manager(tool: Tool) -> &'static str {
    match tool {
        Tool::ArgoCd => "argocd-controller",
        Tool::Flux => "kustomize-controller",
    }
}

fn without_settings_thrashes(tool: Tool, outcome: &Outcome) -> anyhow::Result<()> {
    ensure!(
        outcome.at_four < 1.0,
        "the fleet stayed at 4 all the hold: no thrash: {outcome:?}"
    );
    ensure!(
        outcome
            .owner_walk
            .iter()
            .skip(1)
            .any(|owners| owners.iter().any(|o| o == manager(tool))),
        "{} never took spec.replicas back after the operator: {outcome:?}",
        manager(tool)
    );
    ensure!(
        outcome.resets >= 1,
        "no write of Git's replicas back over the operator's: {outcome:?}"
    );
    ensure!(
        outcome.tool_runs >= 1,
        "the tool ran no sync/reconcile during the hold: {outcome:?}"
    );
    Ok(())
}

fn with_settings_holds(outcome: &Outcome) -> anyhow::Result<()> {
    ensure!(
        outcome.at_four > 0.99,
        "spec.replicas not 4 through the hold: {outcome:?}"
    );
    ensure!(
        outcome.walk == vec![1, 2, 4],
        "a flip under the tool (expected 1 -> 2 -> 4): {outcome:?}"
    );
    ensure!(
        outcome.owners == vec!["llmscaler".to_string()],
        "spec.replicas owned by {:?}, not llmscaler alone",
        outcome.owners
    );
    Ok(())
}

#[tokio::test]
async fn argocd_self_heal_with_replicas_in_git_thrashes_and_shows_degraded() -> anyhow::Result<()> {
    let outcome = run(Tool::ArgoCd, Setting::Plain).await?;
    without_settings_thrashes(Tool::ArgoCd, &outcome)?;
    ensure!(
        outcome
            .health_in_hold
            .iter()
            .any(|h| h.starts_with("Degraded") && h.contains("argocd-controller")),
        "the LLMScaler never showed Degraded naming argocd-controller (ReplicasContested) in Argo CD: {outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn argocd_ignore_differences_alone_writes_git_replicas_at_the_next_sync() -> anyhow::Result<()>
{
    let outcome = run(Tool::ArgoCd, Setting::IgnoreOnly).await?;
    // Self-heal sees no difference: nothing until a commit makes Argo CD sync, which then
    // applies Git's replicas (docs/migrate.md: "ignoreDifferences alone only hides the difference").
    ensure!(
        outcome.resets == outcome.resets_after_commit,
        "a reset before the second commit under ignoreDifferences: {outcome:?}"
    );
    ensure!(
        outcome.resets_after_commit >= 1,
        "the sync of the second commit kept the live replicas without RespectIgnoreDifferences: {outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn argocd_with_ignore_differences_and_respect_leaves_replicas_to_the_operator()
-> anyhow::Result<()> {
    let outcome = run(Tool::ArgoCd, Setting::Documented).await?;
    with_settings_holds(&outcome)?;
    ensure!(
        outcome.health.iter().any(|h| h.starts_with("Progressing")),
        "the Lua check's first-sync Progressing never showed: {outcome:?}"
    );
    ensure!(
        outcome
            .health_in_hold
            .iter()
            .all(|h| h.starts_with("Healthy")),
        "not Healthy throughout the hold under the settings: {outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn flux_with_replicas_in_git_takes_the_field_back_every_interval() -> anyhow::Result<()> {
    let outcome = run(Tool::Flux, Setting::Plain).await?;
    without_settings_thrashes(Tool::Flux, &outcome)
}

#[tokio::test]
async fn flux_with_a_patch_removing_replicas_leaves_them_to_the_operator() -> anyhow::Result<()> {
    let outcome = run(Tool::Flux, Setting::Documented).await?;
    with_settings_holds(&outcome)
}
