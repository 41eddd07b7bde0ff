//! Helpers of the programs that replay a trace against the local cluster (`llmscaler-demo`,
//! `llmscaler-peers`): what a run started and its cleanup, a fresh namespace, a server-side
//! apply with kubectl, and the wait for a workload's Ready pods.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use llmscaler_loadmodel::{Params, Request};
use serde_json::{Value, json};

use crate::emulator::{Config, Emulator};
use crate::fixture::deployment_manifest;
use crate::operator::{Operator, Rbac, run_command};
use crate::prometheus::Prometheus;
use crate::{Check, kubectl_path, wait_for};

/// What a run started, stopped in [`Started::cleanup`] whatever happened.
#[derive(Default)]
pub struct Started {
    /// The client the namespace is deleted with.
    pub client: Option<Client>,
    /// The run's namespace (deleted at the end).
    pub namespace: Option<String>,
    /// The chart's RBAC of the operator.
    pub rbac: Option<Rbac>,
    /// The vLLM emulator.
    pub emulator: Option<Emulator>,
    /// Prometheus.
    pub prometheus: Option<Prometheus>,
    /// The operator, out of cluster.
    pub operator: Option<Operator>,
}

impl Started {
    /// Stops the operator, the emulator and Prometheus, deletes the namespace and the RBAC;
    /// failures are printed with the prefix `who`, not returned (the run's own error matters
    /// more).
    pub async fn cleanup(&mut self, who: &str) {
        if let Some(mut operator) = self.operator.take() {
            operator.kill();
        }
        if let Some(emulator) = self.emulator.take() {
            emulator.stop().await;
        }
        drop(self.prometheus.take());
        if let (Some(client), Some(ns)) = (self.client.as_ref(), self.namespace.take()) {
            crate::drop_scaler_finalizers(client, &ns).await;
            let api: Api<Namespace> = Api::all(client.clone());
            if let Err(err) = api.delete(&ns, &DeleteParams::default()).await {
                eprintln!("{who}: deleting namespace {ns}: {err}");
            }
        }
        if let Some(rbac) = self.rbac.take()
            && let Err(err) = rbac.delete()
        {
            eprintln!("{who}: deleting the RBAC: {err:#}");
        }
    }
}

/// How long [`fresh_namespace`] waits for a namespace left by an earlier run to go away.
pub(crate) const NAMESPACE_GONE_DEADLINE: Duration = Duration::from_secs(120);
/// How long [`wait_ready`] waits for the Ready pods.
pub(crate) const READY_DEADLINE: Duration = Duration::from_secs(60);

/// Server-side applies `manifest` with kubectl under the field manager `manager` (forcing
/// conflicts).
///
/// # Errors
/// kubectl's failure, with its output.
pub fn apply_as(manager: &str, manifest: &Value) -> anyhow::Result<()> {
    run_command(
        &kubectl_path(),
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            manager,
            "-f",
            "-",
        ],
        Some(&manifest.to_string()),
    )
    .map(drop)
}

/// Deletes `ns` if a previous run left it (waiting up to [`NAMESPACE_GONE_DEADLINE`] until it
/// is gone), then creates it with the label `app.kubernetes.io/part-of: <part_of>`.
///
/// # Errors
/// API errors, or the old namespace still there at the deadline.
pub async fn fresh_namespace(client: &Client, ns: &str, part_of: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(ns).await?.is_some() {
        eprintln!("==> namespace {ns} exists from an earlier run; deleting it first");
        crate::drop_scaler_finalizers(client, ns).await;
        let _ = api.delete(ns, &DeleteParams::default()).await;
        wait_for(
            &format!("namespace {ns} gone"),
            NAMESPACE_GONE_DEADLINE,
            || async {
                Ok(match api.get_opt(ns).await? {
                    None => Check::Done(()),
                    Some(n) => Check::NotYet(format!("phase {:?}", n.status.and_then(|s| s.phase))),
                })
            },
        )
        .await?;
    }
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": part_of}}
    }))?;
    api.create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    Ok(())
}

/// Waits (up to [`READY_DEADLINE`]) until Deployment `ns/name` has at least `n` Ready replicas.
///
/// # Errors
/// API errors, or fewer Ready replicas at the deadline.
pub async fn wait_ready(client: &Client, ns: &str, name: &str, n: i32) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("{name} with {n} Ready pods"),
        READY_DEADLINE,
        || async {
            let d = api.get(name).await?;
            let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            Ok(if ready >= n {
                Check::Done(())
            } else {
                Check::NotYet(format!("{name} has {ready} Ready"))
            })
        },
    )
    .await
}

/// Pod annotation read by the delayed pod-ready stage of `e2e/kwok-stages.yaml` (a Go duration).
const KWOK_READY_DELAY: &str = "pod-ready.stage.kwok.x-k8s.io/delay";

/// The Deployment `name` (pods labelled `app=<name>`) of kwok pods with `replicas`, whose pods
/// become Ready `startup_trace_seconds / speed` wall seconds after creation when the cluster runs
/// the stage set of `e2e/kwok-stages.yaml` (kwok's default fast stages ignore it: Ready at once):
/// the model's start-up, compressed like the trace.
pub fn workload(
    ns: &str,
    name: &str,
    replicas: i32,
    startup_trace_seconds: f64,
    speed: f64,
) -> Value {
    let mut deployment = deployment_manifest(ns, name, Some(replicas));
    deployment["spec"]["template"]["metadata"]["annotations"] = json!({
        KWOK_READY_DELAY: format!("{}ms", (startup_trace_seconds / speed * 1000.0).round()),
    });
    deployment
}

/// The vLLM emulator replaying `requests` at `speed` (trace seconds per wall second) over the
/// Ready pods `app=<name>` in `ns`, with the load model `params`, on a free loopback port.
///
/// # Errors
/// When the emulator cannot list the pods or bind its port.
pub async fn start_emulator(
    client: &Client,
    ns: &str,
    name: &str,
    requests: Vec<Request>,
    speed: f64,
    params: Params,
) -> anyhow::Result<Emulator> {
    Emulator::start(
        client.clone(),
        Config {
            requests,
            speed,
            namespace: ns.to_string(),
            selector: format!("app={name}"),
            service: None,
            params,
            listen: "127.0.0.1:0".parse()?,
        },
    )
    .await
}
