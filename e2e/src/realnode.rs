//! Helpers of the tests on the real node (`e2e/cluster up --real-node`): the node itself, Helm
//! releases removed on drop, Ready pods, the host process of a container, and the wait for a
//! freshly installed webhook. Used by `tests/in_cluster.rs` and `tests/real_vllm.rs` (both built
//! only with the `real-node` feature).

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::operator::run_command;
use crate::{Check, helm_path, kubectl_apply, wait_for};

/// The name of the real node started by `e2e/cluster up --real-node`.
pub const REAL_NODE: &str = "llmscaler-real-node";
/// The label (value `"true"`) and taint key of the real node.
pub const NODE_LABEL: &str = "llmscaler.dev/real-node";

/// Values placing pods on the real node (it is tainted so that nothing else lands there), for
/// the operator's chart and the emulator's; for the operator also the e2e harness's operator-wide
/// settings: scalers may sync every second and no namespace query budget applies (the
/// production defaults, 5 s and 20 queries/s, are tested in `tests/query_budget.rs`; the
/// emulator chart ignores both keys).
pub const NODE_VALUES: &str = "nodeSelector:\n  llmscaler.dev/real-node: \"true\"\n\
                           tolerations:\n  - key: llmscaler.dev/real-node\n    operator: Exists\n    effect: NoSchedule\n\
                           minSyncPeriodSeconds: 1\nnamespaceQueryBudget: 0\n";

/// Prints a `measured:` line (the figures the scripts copy into docs/benchmarks/).
pub fn measured(what: &str, value: impl std::fmt::Display) {
    eprintln!("measured: {what}: {value}");
}

/// Runs the pinned `helm` with `args`; its stdout, or an error with its stderr.
pub fn helm(args: &[&str]) -> anyhow::Result<String> {
    run_command(&helm_path(), args, None)
}

/// A Helm release uninstalled on drop (a failed test must not leave cluster-wide webhook
/// configurations calling a deleted namespace behind); [`Release::uninstall`] on success.
pub struct Release {
    name: String,
    namespace: String,
    done: bool,
}

impl Release {
    /// `helm install NAME CHART --namespace NAMESPACE EXTRA...`.
    pub fn install(
        name: &str,
        chart: &str,
        namespace: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut args = vec!["install", name, chart, "--namespace", namespace];
        args.extend_from_slice(extra);
        helm(&args)?;
        Ok(Self {
            name: name.to_string(),
            namespace: namespace.to_string(),
            done: false,
        })
    }

    /// `helm uninstall --wait` (up to 3 minutes).
    pub fn uninstall(mut self) -> anyhow::Result<()> {
        self.done = true;
        helm(&[
            "uninstall",
            &self.name,
            "--namespace",
            &self.namespace,
            "--wait",
            "--timeout",
            "3m",
        ])?;
        Ok(())
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if !self.done {
            let _ = helm(&[
                "uninstall",
                &self.name,
                "--namespace",
                &self.namespace,
                "--wait=false",
            ]);
        }
    }
}

/// The real node's address on its pod bridge (where pods reach the host).
pub async fn bridge_address(client: &Client) -> anyhow::Result<IpAddr> {
    let node = Api::<Node>::all(client.clone())
        .get(REAL_NODE)
        .await
        .context("the real node is missing: run e2e/cluster up --real-node")?;
    let labels = node.labels();
    ensure!(
        labels.get(NODE_LABEL).map(String::as_str) == Some("true"),
        "node {REAL_NODE} lacks {NODE_LABEL}=true"
    );
    let address = node
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .find(|a| a.type_ == "InternalIP")
        .context("the real node has no InternalIP")?;
    Ok(address.address.parse()?)
}

/// Whether a pod's `Ready` condition is `True`.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Running and Ready pods of a selector, not being deleted.
pub async fn ready_pods(pods: &Api<Pod>, selector: &str) -> anyhow::Result<Vec<Pod>> {
    Ok(pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
        .collect())
}

/// The host process of a container (`containerd://<id>`): the process whose cgroup names the id.
pub fn container_process(container_id: &str) -> anyhow::Result<u32> {
    let id = container_id.rsplit("://").next().unwrap_or(container_id);
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if cgroup.contains(id) && comm.trim() != "pause" {
            return Ok(pid);
        }
    }
    bail!("no process of container {id} on this machine")
}

/// An LLMScaler with a percent target (`"80%"` is refused by admission) on an absent Deployment.
pub fn percent_scaler(namespace: &str, name: &str, target: &str) -> Value {
    json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            // One target per scaler: admission refuses a second LLMScaler on a workload.
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": format!("absent-{name}")},
            "serverAddress": "http://prometheus.monitoring:9090",
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"query": "avg(vllm:num_requests_waiting)", "target": target}],
        }
    })
}

/// Waits until the webhook of a fresh install refuses target "80%" through its Service.
pub async fn wait_admission_working(namespace: &str) -> anyhow::Result<String> {
    let namespace = namespace.to_string();
    wait_for(
        "the webhook to refuse target \"80%\" through its Service",
        Duration::from_secs(180),
        || {
            let manifest = percent_scaler(&namespace, "percent", "80%");
            async move {
                Ok(match kubectl_apply(&manifest)? {
                    Ok(out) => bail!("target \"80%\" was accepted: {out}"),
                    Err(e) if e.contains("denied the request") => Check::Done(e),
                    Err(e) => Check::NotYet(e),
                })
            }
        },
    )
    .await
}

/// The DNAT destinations (`IP:port`) kube-proxy (iptables mode, on this host's network
/// namespace, where the real node runs) has programmed for the Service port
/// `namespace/service:port_name`: what a connection to its ClusterIP reaches now. Before
/// kube-proxy has programmed a new Service, its ClusterIP leaves through the default route.
///
/// # Errors
/// When `iptables-save` cannot run.
pub fn kube_proxy_destinations(
    namespace: &str,
    service: &str,
    port_name: &str,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let rules = run_command("iptables-save", &["-t", "nat"], None)?;
    let comment = format!("{namespace}/{service}:{port_name}");
    Ok(rules
        .lines()
        .filter(|l| l.starts_with("-A KUBE-SEP-") && l.contains(" -j DNAT "))
        .filter(|l| {
            l.contains(&format!("--comment \"{comment}\" "))
                || l.contains(&format!("--comment {comment} "))
        })
        .filter_map(|l| l.split("--to-destination ").nth(1))
        .filter_map(|d| d.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// Waits until kube-proxy sends `namespace/service:port_name` to exactly `want` (`IP:port`
/// each), e.g. a new route's endpoints before a request is sent through the ClusterIP.
///
/// # Errors
/// A timeout after 60 s naming what kube-proxy programmed, or `iptables-save` failing.
pub async fn wait_kube_proxy(
    namespace: &str,
    service: &str,
    port_name: &str,
    want: &std::collections::BTreeSet<String>,
) -> anyhow::Result<()> {
    wait_for(
        &format!("kube-proxy to send {namespace}/{service}:{port_name} to {want:?}"),
        Duration::from_secs(60),
        || async move {
            let now = kube_proxy_destinations(namespace, service, port_name)?;
            Ok(if &now == want {
                Check::Done(())
            } else {
                Check::NotYet(format!("{now:?}"))
            })
        },
    )
    .await
}
