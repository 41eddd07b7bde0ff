//! One controller test's world: a namespace, the chart's RBAC, a settable exporter, a real
//! Prometheus scraping it, and the `llmscaler run` binary authenticated as the chart's
//! ServiceAccount.

use std::time::Duration;

use anyhow::Context;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::exporter::Exporter;
use crate::operator::{Operator, Rbac, run_command};
use crate::prometheus::Prometheus;
use crate::watch::{Recorder, Version};
use crate::{Check, TestNamespace, client, kubectl_path, wait_for};

/// Field manager the tests use to create workloads, as a GitOps tool or a user would.
pub const SETUP_MANAGER: &str = "e2e-setup";

/// Applies `crds/llmscaler.yaml` (server-side, idempotent) and waits until it is Established.
///
/// # Errors
/// When kubectl fails.
pub fn install_crd() -> anyhow::Result<()> {
    let crd = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds/llmscaler.yaml"),
    )
    .context("reading crds/llmscaler.yaml")?;
    apply_crd(&crd, "llmscalers.autoscaling.modelsphere.dev")
}

/// Server-side applies a CustomResourceDefinition manifest (YAML or JSON, forcing conflicts,
/// field manager `e2e-crd`) and waits until the CRD `name` is Established (60 s at most).
///
/// # Errors
/// When kubectl fails or times out.
pub fn apply_crd(manifest: &str, name: &str) -> anyhow::Result<()> {
    run_command(
        &kubectl_path(),
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "e2e-crd",
            "-f",
            "-",
        ],
        Some(manifest),
    )?;
    run_command(
        &kubectl_path(),
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{name}"),
        ],
        None,
    )
    .map(drop)
}

/// Everything one controller test needs. Call [`World::finish`] at the end.
pub struct World {
    /// Admin client.
    pub client: Client,
    /// The test's namespace.
    pub ns: TestNamespace,
    /// RBAC and the ServiceAccount kubeconfig.
    pub rbac: Rbac,
    /// The metrics Prometheus scrapes.
    pub exporter: Exporter,
    /// The real Prometheus.
    pub prometheus: Prometheus,
    /// The operator (started by [`World::start_operator`]).
    pub operators: Vec<Operator>,
}

impl World {
    /// Namespace, RBAC, exporter and Prometheus; no operator yet.
    ///
    /// # Errors
    /// When any part fails to start.
    pub async fn new(prefix: &str) -> anyhow::Result<Self> {
        Self::with_values(prefix, &[]).await
    }

    /// [`World::new`] with the chart's RBAC rendered with `values` (`--set` items, e.g.
    /// `activator.enabled=true`).
    ///
    /// # Errors
    /// When any part fails to start.
    pub async fn with_values(prefix: &str, values: &[&str]) -> anyhow::Result<Self> {
        install_crd()?;
        let client = client().await?;
        let ns = TestNamespace::create(&client, prefix).await?;
        // The release is named after the namespace, so the chart's names (ServiceAccount,
        // webhook configurations, certificate Secret, all `<namespace>-llmscaler...`) are the
        // ones its `resourceNames` RBAC allows (docs/security.md#rbac).
        let rbac = Rbac::install(ns.name(), ns.name(), values)?;
        let exporter = Exporter::start().await?;
        let prometheus = Prometheus::start(exporter.addr).await?;
        Ok(Self {
            client,
            ns,
            rbac,
            exporter,
            prometheus,
            operators: Vec::new(),
        })
    }

    /// Starts one more operator (`identity` names it in the Lease).
    ///
    /// # Errors
    /// When it does not become ready.
    pub async fn start_operator(&mut self, identity: &str, extra: &[&str]) -> anyhow::Result<()> {
        let operator =
            Operator::start(&self.rbac.kubeconfig, self.ns.name(), identity, extra).await?;
        self.operators.push(operator);
        Ok(())
    }

    /// The namespace name.
    pub fn namespace(&self) -> &str {
        self.ns.name()
    }

    /// Server-side applies `object` under `manager` (force).
    ///
    /// # Errors
    /// API errors.
    pub async fn apply(&self, manager: &str, object: &Value) -> anyhow::Result<DynamicObject> {
        let object: DynamicObject = serde_json::from_value(object.clone())?;
        let gvk = object
            .types
            .as_ref()
            .context("object without apiVersion/kind")?;
        let (group, version) = gvk
            .api_version
            .split_once('/')
            .unwrap_or(("", &gvk.api_version));
        let (resource, _) = kube::discovery::pinned_kind(
            &self.client,
            &kube::api::GroupVersionKind::gvk(group, version, &gvk.kind),
        )
        .await?;
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), self.namespace(), &resource);
        api.patch(
            &object.name_any(),
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("applying {} {}", gvk.kind, object.name_any()))
    }

    /// A Deployment of fake inference pods (kwok marks them Ready), applied by
    /// [`SETUP_MANAGER`] with `replicas`.
    ///
    /// # Errors
    /// API errors.
    pub async fn create_deployment(&self, name: &str, replicas: i32) -> anyhow::Result<()> {
        self.apply(
            SETUP_MANAGER,
            &deployment_manifest(self.namespace(), name, Some(replicas)),
        )
        .await
        .map(drop)
    }

    /// Creates an LLMScaler named `name` from `spec`.
    ///
    /// # Errors
    /// API errors.
    pub async fn create_scaler(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        self.apply(
            "e2e-user",
            &json!({
                "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
                "kind": "LLMScaler",
                "metadata": {"name": name, "namespace": self.namespace()},
                "spec": spec,
            }),
        )
        .await
        .map(drop)
    }

    /// Waits until the Deployment has `replicas` in spec and as many Ready (watching it).
    ///
    /// # Errors
    /// On timeout, with what was seen.
    pub async fn wait_replicas(
        &self,
        name: &str,
        replicas: i32,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        self.record(name)
            .await?
            .wait_ready_replicas(replicas, timeout)
            .await
            .map(drop)
    }

    /// Starts recording every version of Deployment `name` (see [`Recorder`]); changes made after
    /// this returns are all in the record.
    ///
    /// # Errors
    /// When the watch does not start.
    pub async fn record(&self, name: &str) -> anyhow::Result<Recorder> {
        Recorder::deployment(&self.client, self.namespace(), name).await
    }

    /// Starts recording every version of the LLMScaler `name` (see [`Recorder`]).
    ///
    /// # Errors
    /// When the watch does not start.
    pub async fn record_scaler(&self, name: &str) -> anyhow::Result<Recorder> {
        Recorder::start(&self.client, self.namespace(), &scaler_resource(), name).await
    }

    /// The LLMScaler as JSON.
    ///
    /// # Errors
    /// API errors.
    pub async fn scaler(&self, name: &str) -> anyhow::Result<Value> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), self.namespace(), &scaler_resource());
        Ok(serde_json::to_value(api.get(name).await?)?)
    }

    /// Waits until the scaler's condition `type_` has `status` and a message containing
    /// `message_part` (watching the scaler); returns the condition.
    ///
    /// # Errors
    /// On timeout, with the scaler's latest status.
    pub async fn wait_condition(
        &self,
        scaler: &str,
        type_: &str,
        status: &str,
        message_part: &str,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        self.record_scaler(scaler)
            .await?
            .wait_until(
                &format!("condition {type_}={status} ~ {message_part:?}"),
                timeout,
                |version| {
                    condition(version, type_).filter(|c| {
                        c["status"] == status
                            && c["message"].as_str().unwrap_or("").contains(message_part)
                    })
                },
            )
            .await
    }

    /// The usual setup of a controller test: Deployment `vllm` at `replicas` (all Ready),
    /// `llm_queue{scaler="<tag>"}` at `value`, and LLMScaler `chat` on it (see
    /// [`queue_scaler_spec`]) with `bounds` and `extra` spec fields. No operator yet.
    ///
    /// # Errors
    /// API errors or timeouts.
    pub async fn queue_scaled_deployment(
        &self,
        replicas: i32,
        tag: &str,
        value: f64,
        bounds: (i32, i32),
        extra: Value,
    ) -> anyhow::Result<()> {
        self.create_deployment("vllm", replicas).await?;
        self.wait_replicas("vllm", replicas, Duration::from_secs(60))
            .await?;
        self.queue_scaler(tag, value, bounds, extra).await
    }

    /// `llm_queue{scaler="<tag>"}` at `value`, and LLMScaler `chat` on Deployment `vllm` (see
    /// [`queue_scaler_spec`]) with `bounds` and `extra` spec fields.
    ///
    /// # Errors
    /// API errors.
    pub async fn queue_scaler(
        &self,
        tag: &str,
        value: f64,
        bounds: (i32, i32),
        extra: Value,
    ) -> anyhow::Result<()> {
        self.exporter
            .set_gauge("llm_queue", &[(&format!("scaler=\"{tag}\""), value)]);
        self.create_scaler(
            "chat",
            queue_scaler_spec(
                &self.prometheus.url(),
                deployment_ref("vllm"),
                tag,
                bounds,
                extra,
            ),
        )
        .await
    }

    /// Waits until operator `index` has run `n` more reconciles than when called.
    ///
    /// # Errors
    /// On timeout.
    pub async fn wait_syncs(&self, index: usize, n: u64) -> anyhow::Result<()> {
        let before = reconcile_count(&self.operators[index].metrics().await?);
        wait_for(
            &format!("{n} more syncs"),
            Duration::from_secs(60),
            || async {
                let now = reconcile_count(&self.operators[index].metrics().await?);
                Ok(if now >= before + n {
                    Check::Done(())
                } else {
                    Check::NotYet(format!("{now} syncs"))
                })
            },
        )
        .await
    }

    /// Waits until operator `index` reports the metric `queue` at `value` (as printed in its
    /// `/metrics`, e.g. `0.5`).
    ///
    /// # Errors
    /// On timeout.
    pub async fn metric_seen(&self, index: usize, value: &str) -> anyhow::Result<()> {
        wait_for(
            &format!("operator {index} to read queue = {value}"),
            Duration::from_secs(60),
            || async {
                let metrics = self.operators[index].metrics().await?;
                let line = metrics
                    .lines()
                    .find(|l| {
                        l.starts_with("llmscaler_metric_value{") && l.contains("metric=\"queue\"")
                    })
                    .map(str::to_string);
                Ok(match line {
                    Some(l) if l.ends_with(&format!(" {value}")) => Check::Done(()),
                    other => Check::NotYet(format!("{other:?}")),
                })
            },
        )
        .await
    }

    /// Stops every operator, deletes RBAC and the namespace.
    ///
    /// # Errors
    /// When cleanup fails.
    pub async fn finish(mut self) -> anyhow::Result<()> {
        for mut operator in self.operators.drain(..) {
            operator.kill();
        }
        self.rbac.delete()?;
        self.ns.delete().await
    }

    /// The log of every operator, for failure messages.
    pub fn operator_logs(&self) -> String {
        self.operators
            .iter()
            .enumerate()
            .map(|(i, o)| format!("--- operator {i} ---\n{}", o.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A Deployment manifest of fake inference pods (label `app=<name>`, kwok toleration); without
/// `replicas` when `None` (the GitOps way).
pub fn deployment_manifest(namespace: &str, name: &str, replicas: Option<i32>) -> Value {
    let mut manifest = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "vllm", "image": "registry.invalid/vllm:fake"}],
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
                }
            }
        }
    });
    if let Some(replicas) = replicas {
        manifest["spec"]["replicas"] = json!(replicas);
    }
    manifest
}

/// A Prometheus-provider scaler spec on `avg(llm_queue{scaler="<tag>"})` with `target`, sync
/// every second, plus the `extra` fields merged in.
/// `target` is the `targetRef` object.
pub fn queue_scaler_spec(
    prometheus_url: &str,
    target: Value,
    tag: &str,
    (min, max): (i32, i32),
    extra: Value,
) -> Value {
    let mut spec = json!({
        "targetRef": target,
        "serverAddress": prometheus_url,
        "minReplicas": min,
        "maxReplicas": max,
        "syncPeriodSeconds": 1,
        "retryPeriodSeconds": 1,
        "metrics": [{"name": "queue", "query": format!("avg(llm_queue{{scaler=\"{tag}\"}})"), "target": "0.5"}],
    });
    if let (Some(base), Some(more)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            base.insert(k.clone(), v.clone());
        }
    }
    spec
}

/// The `ApiResource` of `LLMScaler` (`autoscaling.modelsphere.dev/v1alpha1`, `llmscalers`).
pub fn scaler_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling.modelsphere.dev", "v1alpha1", "LLMScaler"),
        "llmscalers",
    )
}

/// The status condition `type_` of a recorded LLMScaler version, as JSON.
pub fn condition(version: &Version, type_: &str) -> Option<Value> {
    version
        .get("/status/conditions")
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// `targetRef` of a Deployment.
pub fn deployment_ref(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name})
}

/// Sum of `llmscaler_writes_total{kind="<kind>"}` over every scaler in an operator's `/metrics`.
pub fn writes_of(metrics: &str, kind: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("llmscaler_writes_total{") && l.contains(&format!("kind=\"{kind}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The number of reconciles an operator has run (its reconcile histogram's count).
pub fn reconcile_count(metrics: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with("llmscaler_reconcile_duration_seconds_count"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// A Helm chart of one Deployment `vllm` (kwok pods) rendering `replicas` and an annotation
/// `revision` from its values, as an app team's chart would: the GitOps and `release` tests
/// install and upgrade it next to the operator.
const WORKLOAD_CHART: &str = "apiVersion: v2\nname: inference\nversion: 0.1.0\n";

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

/// Writes the app team's workload chart (a Deployment `vllm` whose `replicas` comes from the
/// values) into a new temporary directory, returned with the chart's path.
///
/// # Errors
/// File-system errors.
pub fn workload_chart() -> anyhow::Result<(tempfile::TempDir, String)> {
    let chart = tempfile::tempdir()?;
    std::fs::create_dir_all(chart.path().join("templates"))?;
    std::fs::write(chart.path().join("Chart.yaml"), WORKLOAD_CHART)?;
    std::fs::write(
        chart.path().join("templates/deployment.yaml"),
        WORKLOAD_TEMPLATE,
    )?;
    let path = chart
        .path()
        .to_str()
        .context("temporary directory path is not UTF-8")?
        .to_owned();
    Ok((chart, path))
}
