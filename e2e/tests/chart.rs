//! The Helm chart (issue 7): the CRD it ships is the generated one, `helm lint` is clean, and
//! `helm template` in both modes matches the checked-in renders and has the properties the
//! operator relies on (no caBundle, hardened pods, out-of-cluster switch).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::path::{Path, PathBuf};

use llmscaler_e2e::helm_path;
use llmscaler_e2e::operator::run_command;
use serde_yaml::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_chart_ships_the_generated_crd() {
    let generated =
        std::fs::read_to_string(repo().join("crds/llmscaler.yaml")).expect("crds/llmscaler.yaml");
    let shipped = std::fs::read_to_string(repo().join("charts/llmscaler/crds/llmscaler.yaml"))
        .expect("chart CRD");
    assert!(
        generated == shipped,
        "charts/llmscaler/crds/llmscaler.yaml differs from crds/llmscaler.yaml: cp crds/llmscaler.yaml charts/llmscaler/crds/"
    );
}

fn render(args: &[&str]) -> anyhow::Result<String> {
    let chart = repo().join("charts/llmscaler");
    let chart = chart.to_str().expect("utf-8 path").to_string();
    let mut all = vec![
        "template",
        "llmscaler",
        chart.as_str(),
        "--namespace",
        "llmscaler-system",
    ];
    all.extend_from_slice(args);
    run_command(&helm_path(), &all, None)
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|d| Value::deserialize(d).ok())
        .filter(|v| !v.is_null())
        .collect()
}

use serde::Deserialize;

fn kinds(docs: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = docs
        .iter()
        .filter_map(|d| d["kind"].as_str().map(String::from))
        .collect();
    kinds.sort();
    kinds
}

const OUT_OF_CLUSTER: [&str; 6] = [
    "--set",
    "outOfCluster.enabled=true",
    "--set",
    "outOfCluster.url=https://127.0.0.1:9443",
    "--set",
    "webhook.failurePolicy=Ignore",
];

/// The monitoring add-ons for prometheus-operator (kube-prometheus-stack) and Grafana.
const MONITORING: [&str; 6] = [
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "dashboard.enabled=true",
];

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn the_service_monitor_keeps_the_operators_namespace_label() -> anyhow::Result<()> {
    // Without honorLabels, prometheus-operator's own `namespace` target label (the operator's
    // namespace) wins and each series' `namespace` (the LLMScaler's) becomes
    // `exported_namespace`: every dashboard filter on `namespace` stops matching.
    let docs = documents(&render(&MONITORING)?);
    let monitor = docs
        .iter()
        .find(|d| d["kind"] == "ServiceMonitor")
        .ok_or_else(|| anyhow::anyhow!("no ServiceMonitor rendered"))?;
    let endpoints = monitor["spec"]["endpoints"]
        .as_sequence()
        .ok_or_else(|| anyhow::anyhow!("no endpoints"))?;
    assert!(!endpoints.is_empty());
    for endpoint in endpoints {
        assert_eq!(
            endpoint["honorLabels"],
            true,
            "{}",
            serde_yaml::to_string(endpoint)?
        );
    }
    // The PrometheusRule carries the tested rule file as it is (tests/alerts.rs).
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .ok_or_else(|| anyhow::anyhow!("no PrometheusRule rendered"))?;
    let file: Value = serde_yaml::from_str(&std::fs::read_to_string(
        repo().join("charts/llmscaler/alerts/llmscaler.rules.yaml"),
    )?)?;
    assert_eq!(rule["spec"], file);
    Ok(())
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn helm_lint_is_clean_in_both_modes() -> anyhow::Result<()> {
    let chart = repo().join("charts/llmscaler");
    let chart = chart.to_str().expect("utf-8 path");
    let out = run_command(&helm_path(), &["lint", "--strict", chart], None)?;
    println!("{out}");
    let mut args = vec!["lint", "--strict", chart];
    args.extend_from_slice(&OUT_OF_CLUSTER);
    run_command(&helm_path(), &args, None)?;
    // The schema refuses a bad failurePolicy.
    let err = run_command(
        &helm_path(),
        &["lint", chart, "--set", "webhook.failurePolicy=Maybe"],
        None,
    )
    .expect_err("schema must refuse failurePolicy=Maybe");
    assert!(err.to_string().contains("failurePolicy"), "{err}");
    Ok(())
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn helm_template_matches_the_checked_in_renders() -> anyhow::Result<()> {
    let production = repo().join("charts/llmscaler/values-production.yaml");
    let production = ["-f", production.to_str().expect("utf-8 path")];
    for (file, args) in [
        ("default.yaml", &[][..]),
        ("out-of-cluster.yaml", &OUT_OF_CLUSTER[..]),
        ("monitoring.yaml", &MONITORING[..]),
        ("activator.yaml", &["--set", "activator.enabled=true"][..]),
        ("production.yaml", &production[..]),
    ] {
        let rendered = render(args)?;
        let committed = std::fs::read_to_string(repo().join("charts/rendered").join(file))?;
        assert!(
            rendered == committed,
            "charts/rendered/{file} is out of date: run charts/render.sh"
        );
    }
    Ok(())
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn rendered_chart_has_what_the_operator_relies_on() -> anyhow::Result<()> {
    let docs = documents(&render(&[])?);
    assert_eq!(
        kinds(&docs),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Lease",
            "MutatingWebhookConfiguration",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Secret",
            "Service",
            "ServiceAccount",
            // pods, deployments, statefulsets, leaderworkersets (docs/security.md#rbac)
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        ]
    );
    for doc in &docs {
        let text = serde_yaml::to_string(doc)?;
        assert!(
            !text.contains("caBundle"),
            "caBundle rendered in {}",
            doc["kind"].as_str().unwrap_or("")
        );
    }
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["limits"]["memory"].is_string());
    let webhook = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .expect("validating webhook");
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["service"]["path"],
        "/validate"
    );
    assert_eq!(webhook["webhooks"][0]["failurePolicy"], "Fail");

    let docs = documents(&render(&OUT_OF_CLUSTER)?);
    assert_eq!(
        kinds(&docs),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Lease",
            "MutatingWebhookConfiguration",
            "Role",
            "RoleBinding",
            "Secret",
            "ServiceAccount",
            // pods, deployments, statefulsets, leaderworkersets (docs/security.md#rbac)
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        ]
    );
    let webhook = docs
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .expect("mutating webhook");
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["url"],
        "https://127.0.0.1:9443/mutate"
    );
    assert_eq!(webhook["webhooks"][0]["failurePolicy"], "Ignore");
    Ok(())
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn kubectl_explains_the_crd_and_prints_its_columns() -> anyhow::Result<()> {
    let kubectl = llmscaler_e2e::kubectl_path();
    llmscaler_e2e::fixture::install_crd()?;
    // The API server publishes a new CRD's OpenAPI a moment after it is Established.
    let explain = llmscaler_e2e::wait_for(
        "kubectl explain llmscaler.spec.scaleDown",
        std::time::Duration::from_secs(60),
        || async {
            Ok(
                match run_command(&kubectl, &["explain", "llmscaler.spec.scaleDown"], None) {
                    Ok(text) => llmscaler_e2e::Check::Done(text),
                    Err(err) => llmscaler_e2e::Check::NotYet(err.to_string()),
                },
            )
        },
    )
    .await?;
    println!("{explain}");
    for needle in [
        "stabilizationWindowSeconds",
        "maxStepReplicas",
        "deletionCostQuery",
        "Seconds of recommendations whose maximum is used when scaling down",
    ] {
        assert!(
            explain.contains(needle),
            "kubectl explain lacks {needle:?}:\n{explain}"
        );
    }
    let ns = llmscaler_e2e::unique_name("crd-columns");
    run_command(&kubectl, &["create", "namespace", &ns], None)?;
    let scaler = serde_json::json!({"apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                 "serverAddress": "http://127.0.0.1:9090", "minReplicas": 1, "maxReplicas": 4,
                 "metrics": [{"query": "avg(q)", "target": "1"}]}});
    let applied = run_command(&kubectl, &["apply", "-f", "-"], Some(&scaler.to_string()));
    let table = run_command(&kubectl, &["get", "llmscalers", "-n", &ns], None);
    run_command(
        &kubectl,
        &["delete", "namespace", &ns, "--wait=false"],
        None,
    )?;
    applied?;
    let table = table?;
    println!("{table}");
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "MINREPLICAS",
            "MAXREPLICAS",
            "CURRENTREPLICAS",
            "DESIREDREPLICAS",
            "READY",
            "AGE"
        ]
    );
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|row| row.starts_with("chat")
                && row.contains(" 1 ")
                && row.contains(" 4 ")),
        "{table}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn kubectl_explain_describes_every_enum_field() -> anyhow::Result<()> {
    let kubectl = llmscaler_e2e::kubectl_path();
    llmscaler_e2e::fixture::install_crd()?;
    // (field, words its description must hold): read back from the API server's OpenAPI.
    for (field, needle) in [
        (
            "llmscaler.spec.metricProvider",
            "Where metric values come from",
        ),
        (
            "llmscaler.spec.scaleDown.behavior",
            "How the pods removed by a scale-down are chosen",
        ),
        (
            "llmscaler.spec.mode",
            "Whether the operator acts on the target",
        ),
        (
            "llmscaler.spec.scaleUp.selectPolicy",
            "Which of several scale-up policies applies",
        ),
        (
            "llmscaler.spec.scaleUp.policies.type",
            "an absolute number of pods",
        ),
    ] {
        let explain = llmscaler_e2e::wait_for(
            &format!("kubectl explain {field}"),
            std::time::Duration::from_secs(60),
            || async {
                Ok(match run_command(&kubectl, &["explain", field], None) {
                    Ok(text) if text.contains(needle) => llmscaler_e2e::Check::Done(text),
                    Ok(text) => llmscaler_e2e::Check::NotYet(text),
                    Err(err) => llmscaler_e2e::Check::NotYet(err.to_string()),
                })
            },
        )
        .await?;
        assert!(
            explain.contains("ENUM"),
            "{field}: no enum values shown:\n{explain}"
        );
    }
    Ok(())
}

/// `helm template` of the test chart `charts/vllm-emulator` with extra `--set` arguments:
/// `Ok(rendered)` or `Err(helm's error)`.
fn render_emulator(sets: &[&str]) -> Result<String, String> {
    let chart = repo().join("charts/vllm-emulator");
    let mut args = vec![
        "template".to_string(),
        "vllm".to_string(),
        chart.display().to_string(),
    ];
    for set in sets {
        args.push("--set".into());
        args.push((*set).into());
    }
    let out = std::process::Command::new(helm_path())
        .args(&args)
        .output()
        .map_err(|e| format!("starting helm: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn vllm_emulator_chart_refuses_a_drain_budget_over_the_grace_period() -> anyhow::Result<()> {
    // Defaults: 5 + 30 + 20 = 55 <= 60, with the preStop drain.
    let docs = documents(&render_emulator(&[]).map_err(anyhow::Error::msg)?);
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 60);
    let container = &pod["containers"][0];
    let pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
        .as_sequence()
        .expect("preStop exec");
    let pre_stop: Vec<&str> = pre_stop.iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(
        pre_stop,
        [
            "/vllm-emulator",
            "drain",
            "--metrics-url=http://127.0.0.1:8000/metrics",
            "--endpoint-sync-seconds=5",
            "--drain-seconds=30"
        ]
    );
    assert!(
        container["args"]
            .as_sequence()
            .expect("args")
            .iter()
            .any(|a| a.as_str() == Some("--shutdown-timeout-seconds=20"))
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);

    // Exactly at the grace period renders; one second over is refused with the sum.
    render_emulator(&["terminationGracePeriodSeconds=55"]).map_err(anyhow::Error::msg)?;
    let refused = render_emulator(&["terminationGracePeriodSeconds=54"])
        .expect_err("a budget over the grace period must not render");
    assert!(
        refused.contains("= 55 exceeds terminationGracePeriodSeconds (54)"),
        "{refused}"
    );
    let refused =
        render_emulator(&["drain.drainSeconds=100"]).expect_err("a long drain must not render");
    assert!(
        refused.contains("(5) + drain.drainSeconds (100) + shutdownTimeoutSeconds (20) = 125"),
        "{refused}"
    );
    // Without the drain there is no preStop, and only the shutdown timeout counts.
    let docs = documents(
        &render_emulator(&["drain.enabled=false", "terminationGracePeriodSeconds=20"])
            .map_err(anyhow::Error::msg)?,
    );
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    assert!(deployment["spec"]["template"]["spec"]["containers"][0]["lifecycle"].is_null());
    assert!(render_emulator(&["drain.enabled=false", "terminationGracePeriodSeconds=19"]).is_err());
    Ok(())
}

/// Issue 29 (docs/security.md#keep-alive-and-shutdown): the operator pod's grace period covers
/// the shutdown delay and the webhook's drain, which the operator is told; a budget over the
/// grace period does not render.
#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn operator_chart_refuses_a_webhook_drain_over_the_grace_period() -> anyhow::Result<()> {
    let (_, deployment) = deployment_with("{}")?;
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 120);
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&"--webhook-drain-seconds=100"), "{args:?}");
    // Issue 26 item 2: the delay is the process's own (SIGTERM, and the Lease's release, come
    // at the delete), not a preStop sleep that would hold them.
    let container = &pod["containers"][0];
    assert!(
        container["lifecycle"]["preStop"].is_null(),
        "{:?}",
        container["lifecycle"]
    );
    let delay = container["env"]
        .as_sequence()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "LLMSCALER_SHUTDOWN_DELAY_SECONDS")
        .map(|e| e["value"].clone());
    assert_eq!(delay, Some(Value::from("5")));
    // Issue 26 item 1: glibc's allocator settings that hand large freed buffers back
    // (docs/benchmarks/scale.md: 165 -> 141 MiB at 10,000 scalers).
    let env = |name: &str| {
        container["env"]
            .as_sequence()
            .and_then(|env| env.iter().find(|e| e["name"] == name))
            .map(|e| e["value"].clone())
    };
    assert_eq!(env("MALLOC_ARENA_MAX"), Some(Value::from("2")));
    assert_eq!(env("MALLOC_MMAP_THRESHOLD_"), Some(Value::from("131072")));
    // 5 + 100 + 10 = 115 fits 115; 116 does not.
    deployment_with("terminationGracePeriodSeconds: 115")?;
    let refused = deployment_with("terminationGracePeriodSeconds: 114")
        .expect_err("a drain over the grace period must not render");
    assert!(
        format!("{refused:#}").contains(
            "shutdownDelaySeconds (5) + webhook.drainSeconds (100) + 10 = 115 exceeds terminationGracePeriodSeconds (114)"
        ),
        "{refused:#}"
    );
    Ok(())
}

/// Whether a rendered object is one of the activator's (`<fullname>-activator`).
fn is_activator(object: &Value) -> bool {
    object["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n.ends_with("-activator"))
}

/// The operator Deployment (not the activator's) of a render with `values` (a YAML values file).
fn deployment_with(values: &str) -> anyhow::Result<(Vec<Value>, Value)> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values)?;
    let docs = documents(&render(&["-f", file.to_str().expect("utf-8 path")])?);
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && !is_activator(d))
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no Deployment"))?;
    Ok((docs, deployment))
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn every_platform_value_reaches_the_operator_pod() -> anyhow::Result<()> {
    let (docs, deployment) = deployment_with(
        "imagePullSecrets: [{name: my-registry}]
priorityClassName: system-cluster-critical
nodeSelector: {pool: system}
tolerations: [{key: dedicated, operator: Equal, value: system, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]}}}
topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app.kubernetes.io/name: llmscaler}}}]
podAnnotations: {prometheus.io/scrape: \"true\"}
podLabels: {team: platform}
extraEnv: [{name: HTTPS_PROXY, value: \"http://proxy:3128\"}]
extraVolumes: [{name: prom-ca, configMap: {name: prometheus-ca}}]
extraVolumeMounts: [{name: prom-ca, mountPath: /etc/prom-ca, readOnly: true}]
leaseName: custom-lease
logFormat: json
activator: {enabled: true}
",
    )?;
    let pod = &deployment["spec"]["template"];
    let spec = &pod["spec"];
    let container = &spec["containers"][0];
    assert_eq!(spec["imagePullSecrets"][0]["name"], "my-registry");
    assert_placed(spec)?;
    assert!(
        spec["affinity"]["podAntiAffinity"].is_null(),
        "a given affinity replaces the default"
    );
    assert_eq!(spec["topologySpreadConstraints"][0]["maxSkew"], 1);
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    assert!(
        container["env"]
            .as_sequence()
            .is_some_and(|env| env.iter().any(|e| e["name"] == "HTTPS_PROXY")),
        "{}",
        serde_yaml::to_string(&container["env"])?
    );
    assert_eq!(spec["volumes"][0]["configMap"]["name"], "prometheus-ca");
    assert_eq!(container["volumeMounts"][0]["mountPath"], "/etc/prom-ca");
    let args = serde_yaml::to_string(&container["args"])?;
    assert!(args.contains("--lease-name=custom-lease"), "{args}");
    assert!(args.contains("--log-format=json"), "{args}");
    let lease = docs
        .iter()
        .find(|d| d["kind"] == "Lease")
        .expect("the chart creates the Lease");
    assert_eq!(lease["metadata"]["name"], "custom-lease");
    // The placement values place the activator's pod too (on the real node it ran on a node the
    // values excluded, and no request reached it).
    let activator = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && is_activator(d))
        .expect("the activator's Deployment");
    assert_placed(&activator["spec"]["template"]["spec"])?;
    Ok(())
}

/// The platform values of `every_platform_value_reaches_the_operator_pod` in a pod spec.
fn assert_placed(spec: &Value) -> anyhow::Result<()> {
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert_eq!(spec["nodeSelector"]["pool"], "system");
    assert_eq!(spec["tolerations"][0]["key"], "dedicated");
    assert!(
        spec["affinity"]["nodeAffinity"].is_mapping(),
        "{}",
        serde_yaml::to_string(spec)?
    );
    Ok(())
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn defaults_spread_the_replicas_and_the_budget_follows_the_replica_count() -> anyhow::Result<()> {
    let (docs, deployment) = deployment_with("{}")?;
    let spec = &deployment["spec"]["template"]["spec"];
    let anti =
        &spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        anti["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    let pdb = docs
        .iter()
        .find(|d| d["kind"] == "PodDisruptionBudget")
        .expect("a PDB at 2 replicas");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let lease = docs.iter().find(|d| d["kind"] == "Lease").expect("Lease");
    assert_eq!(
        lease["metadata"]["name"], "llmscaler-leader",
        "release llmscaler: <fullname>-leader"
    );
    // One replica: no budget that would block every node drain.
    let (docs, _) = deployment_with("replicaCount: 1")?;
    assert!(docs.iter().all(|d| d["kind"] != "PodDisruptionBudget"));
    // A second release gets its own Lease.
    let chart = repo().join("charts/llmscaler");
    let other = run_command(
        &helm_path(),
        &[
            "template",
            "team-b",
            chart.to_str().expect("utf-8"),
            "--namespace",
            "team-b",
        ],
        None,
    )?;
    assert!(other.contains("name: team-b-llmscaler-leader"), "{other}");
    Ok(())
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn the_schema_still_refuses_typos() -> anyhow::Result<()> {
    for typo in [
        "imagePullSecret: []",
        "priorityClass: x",
        "extraEnvs: []",
        "podDisruptionBudget: {minAvailabe: 1}",
        "webhook: {failurPolicy: Ignore}",
    ] {
        let err = deployment_with(typo).expect_err(typo);
        assert!(
            err.to_string().contains("additional properties")
                || err.to_string().contains("not allowed"),
            "{typo}: {err}"
        );
    }
    Ok(())
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn watch_namespaces_give_namespaced_rbac_and_scope_the_webhooks() -> anyhow::Result<()> {
    let (docs, deployment) = deployment_with("watchNamespaces: [team-a, team-b]")?;
    let args =
        serde_yaml::to_string(&deployment["spec"]["template"]["spec"]["containers"][0]["args"])?;
    assert!(args.contains("--watch-namespace=team-a,team-b"), "{args}");
    let cluster_role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("ClusterRole");
    let cluster_rules = serde_yaml::to_string(&cluster_role["rules"])?;
    for namespaced in [
        "llmscalers",
        "deployments",
        "pods",
        "horizontalpodautoscalers",
        "events",
    ] {
        assert!(
            !cluster_rules.contains(namespaced),
            "the ClusterRole still grants {namespaced}:\n{cluster_rules}"
        );
    }
    for namespace in ["team-a", "team-b"] {
        let role = docs
            .iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == namespace)
            .unwrap_or_else(|| panic!("no Role in {namespace}"));
        let rules = serde_yaml::to_string(&role["rules"])?;
        assert!(
            rules.contains("llmscalers") && rules.contains("pods"),
            "{rules}"
        );
        assert!(
            docs.iter()
                .any(|d| d["kind"] == "RoleBinding" && d["metadata"]["namespace"] == namespace),
            "no RoleBinding in {namespace}"
        );
    }
    for webhook in docs.iter().filter(|d| {
        d["kind"] == "ValidatingWebhookConfiguration" || d["kind"] == "MutatingWebhookConfiguration"
    }) {
        let selector = serde_yaml::to_string(&webhook["webhooks"][0]["namespaceSelector"])?;
        assert!(
            selector.contains("team-a") && selector.contains("team-b"),
            "{selector}"
        );
    }
    // Without it: one ClusterRole over every namespace, no per-namespace Role.
    let (docs, _) = deployment_with("{}")?;
    assert!(
        docs.iter()
            .all(|d| d["metadata"]["name"] != "llmscaler-watch")
    );
    Ok(())
}

#[test]
#[ignore = "needs helm from e2e/install-deps"]
fn the_activator_reads_endpoint_slices_only_and_has_pods_of_its_own() -> anyhow::Result<()> {
    let docs: Vec<serde_json::Value> = documents(&render(&["--set", "activator.enabled=true"])?)
        .into_iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect();
    let named = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    // Its only API right: reading EndpointSlices (docs/security.md#activator).
    let role = named("ClusterRole", "llmscaler-activator");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                            "verbs": ["get", "list", "watch"]}])
    );
    // Neither the operator's Deployment nor its Service selects the activator's pods.
    let activator = named("Deployment", "llmscaler-activator");
    let operator = named("Deployment", "llmscaler");
    let pod_labels = &activator["spec"]["template"]["metadata"]["labels"];
    for selector in [
        &operator["spec"]["selector"]["matchLabels"],
        &named("Service", "llmscaler")["spec"]["selector"],
    ] {
        let selects = selector
            .as_object()
            .unwrap()
            .iter()
            .all(|(k, v)| &pod_labels[k] == v);
        assert!(
            !selects,
            "{selector} selects the activator's pods {pod_labels}"
        );
    }
    // The operator is told where it is, and may write the route's EndpointSlices.
    let args = operator["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--activator=llmscaler-system/llmscaler-activator"),
        "{args}"
    );
    assert!(
        args.contains(
            "--activator-control-url=http://llmscaler-activator.llmscaler-system.svc:9090/"
        ),
        "{args}"
    );
    let operator_role = named("ClusterRole", "llmscaler");
    assert!(
        operator_role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"][0] == "endpointslices"
                && r["verbs"].as_array().unwrap().iter().any(|v| v == "delete")),
        "{operator_role}"
    );
    // Off by default.
    let default = documents(&render(&[])?);
    assert!(
        !default
            .iter()
            .any(|d| d["metadata"]["name"] == "llmscaler-activator")
    );
    Ok(())
}
