//! Helpers shared by the end-to-end tests that run against `e2e/cluster up`.
//!
//! The tests reach the cluster through the environment that `e2e/cluster env` prints:
//! `KUBECONFIG` for the API client, and `LLMSCALER_KUBECTL` / `LLMSCALER_HELM` for the pinned
//! command-line tools. Each test works in a namespace of its own ([`TestNamespace`]) and waits on
//! conditions with a deadline ([`wait_for`]), never on fixed sleeps.

pub mod emulator;
pub mod exporter;
pub mod faults;
pub mod fixture;
pub mod operator;
pub mod pod;
#[cfg(feature = "real-node")]
pub mod realnode;
pub mod session;
pub mod stream;
pub mod watch;

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

/// The shared test kit, re-exported so that the end-to-end tests and binaries keep one import
/// path: the one [`wait_for`] contract, the Prometheus launcher ([`prometheus`]) and free ports.
pub use llmscaler_testkit::{
    Check, POLL_INTERVAL, free_port, http_get, install_crypto_provider, prometheus,
    wait_child_ready, wait_for, wait_for_every,
};

/// Environment variable holding the path of the pinned `kubectl` (set by `e2e/cluster env`).
pub(crate) const KUBECTL_ENV: &str = "LLMSCALER_KUBECTL";
/// Environment variable holding the path of the pinned `helm` (set by `e2e/cluster env`).
pub(crate) const HELM_ENV: &str = "LLMSCALER_HELM";
/// Label that kwok puts on the fake nodes created by `kwokctl scale node`.
pub(crate) const KWOK_NODE_LABEL: &str = "type=kwok";

/// Builds a client for the cluster named by `KUBECONFIG` (as printed by `e2e/cluster env`).
pub async fn client() -> anyhow::Result<Client> {
    install_crypto_provider();
    let kubeconfig = std::env::var("KUBECONFIG").unwrap_or_default();
    Client::try_default().await.with_context(|| {
        format!(
            "building a client from KUBECONFIG={kubeconfig:?}; run `e2e/cluster up` and \
             `eval \"$(e2e/cluster env)\"` first"
        )
    })
}

/// Path of the pinned `kubectl`: `$LLMSCALER_KUBECTL`, else `kubectl` from `PATH`.
pub fn kubectl_path() -> String {
    std::env::var(KUBECTL_ENV).unwrap_or_else(|_| "kubectl".to_owned())
}

/// Path of the pinned `helm`: `$LLMSCALER_HELM`, else `helm` from `PATH`.
pub fn helm_path() -> String {
    std::env::var(HELM_ENV).unwrap_or_else(|_| "helm".to_owned())
}

/// A name that no earlier or concurrent test run has used: `prefix-<seconds>-<pid>-<nanos>`,
/// cut to the 63 characters a DNS label allows.
pub fn unique_name(prefix: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut name = format!(
        "{prefix}-{}-{}-{}",
        now.as_secs() % 1_000_000,
        std::process::id(),
        now.subsec_nanos() % 100_000
    );
    name.truncate(63);
    name.trim_end_matches('-').to_owned()
}

/// Names of the kwok fake nodes whose `Ready` condition is `True`, sorted.
pub async fn ready_kwok_nodes(client: &Client) -> anyhow::Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default().labels(KWOK_NODE_LABEL))
        .await
        .with_context(|| format!("listing nodes labelled {KWOK_NODE_LABEL}"))?;
    let mut ready: Vec<String> = list
        .items
        .iter()
        .filter(|node| {
            node.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|conds| {
                    conds
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
        })
        .map(|node| node.name_any())
        .collect();
    ready.sort();
    Ok(ready)
}

/// A namespace created for one test and deleted when the test ends.
///
/// Call [`TestNamespace::delete`] at the end of a test. If the test panics first, `Drop` still
/// asks `kubectl` to delete the namespace (without waiting), so failed runs leave nothing behind.
pub struct TestNamespace {
    name: String,
    client: Client,
    deleted: bool,
}

impl TestNamespace {
    /// Creates a namespace named [`unique_name`]`(prefix)`.
    pub async fn create(client: &Client, prefix: &str) -> anyhow::Result<Self> {
        let name = unique_name(prefix);
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [(
                        "app.kubernetes.io/part-of".to_owned(),
                        "llmscaler-e2e".to_owned(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(Self {
            name,
            client: client.clone(),
            deleted: false,
        })
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the namespace (the namespace controller then removes what is in it).
    pub async fn delete(mut self) -> anyhow::Result<()> {
        self.deleted = true;
        drop_scaler_finalizers(&self.client, &self.name).await;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .delete(&self.name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting namespace {}", self.name))?;
        Ok(())
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        // Best effort on the failure path only: a panicking test must still not leak its namespace
        // (nor hold it in Terminating with the operator's finalizer on its LLMScalers).
        let scalers = std::process::Command::new(kubectl_path())
            .args(["get", "llmscalers", "-n", &self.name, "-o", "name"])
            .stderr(std::process::Stdio::null())
            .output();
        for scaler in scalers.iter().flat_map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        }) {
            let _ = std::process::Command::new(kubectl_path())
                .args([
                    "patch",
                    "-n",
                    &self.name,
                    &scaler,
                    "--type",
                    "merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = std::process::Command::new(kubectl_path())
            .args(["delete", "namespace", &self.name, "--wait=false"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Removes the operator's finalizer from every LLMScaler of `namespace`, for a test's teardown:
/// the operator may be stopped already, and a finalizer left would hold the namespace in
/// `Terminating`. Best effort (a missing CRD or scaler is nothing to do).
pub async fn drop_scaler_finalizers(client: &Client, namespace: &str) {
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &fixture::scaler_resource());
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    for scaler in list.items.iter().filter(|s| !s.finalizers().is_empty()) {
        let _ = api
            .patch(
                &scaler.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await;
    }
}

/// Deletes the LLMScaler `name` of `namespace` (if it exists) and waits, up to 60 s, until it is
/// gone: the operator's finalizer hands the target back first, so uninstall the operator only
/// after this returns.
///
/// # Errors
/// An API error, or the scaler still there after 60 s.
pub async fn delete_scaler_and_wait(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    let scalers: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &fixture::scaler_resource());
    if scalers.get_opt(name).await?.is_some() {
        scalers.delete(name, &DeleteParams::default()).await?;
    }
    wait_for(
        "the LLMScaler to be gone",
        std::time::Duration::from_secs(60),
        || {
            let scalers = scalers.clone();
            async move {
                Ok(match scalers.get_opt(name).await? {
                    None => Check::Done(()),
                    Some(_) => Check::NotYet("still there".to_owned()),
                })
            }
        },
    )
    .await
}

/// What one run of the pinned `kubectl` printed.
#[derive(Debug)]
pub struct KubectlRun {
    /// Whether kubectl exited 0.
    pub success: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error (warnings from admission arrive here too).
    pub stderr: String,
}

/// Runs the pinned `kubectl` with `args`, `stdin` piped in; kubectl's own failure is in the
/// result, not an error.
///
/// # Errors
/// When kubectl cannot be started or its input written.
pub fn run_kubectl(args: &[&str], stdin: Option<&str>) -> anyhow::Result<KubectlRun> {
    use std::io::Write;
    let mut child = std::process::Command::new(kubectl_path())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting kubectl")?;
    if let (Some(mut input), Some(text)) = (child.stdin.take(), stdin) {
        input.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    Ok(KubectlRun {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// `kubectl apply -f -` of `manifest`: `Ok(stdout)` or `Err(stderr)`.
///
/// # Errors
/// When kubectl cannot be started.
pub fn kubectl_apply(manifest: &serde_json::Value) -> anyhow::Result<Result<String, String>> {
    let run = run_kubectl(&["apply", "-f", "-"], Some(&manifest.to_string()))?;
    Ok(if run.success {
        Ok(run.stdout)
    } else {
        Err(run.stderr)
    })
}
