//! The Helm chart (issue 7): the CRD it ships is the generated one, `helm lint` is clean, and
//! `helm template` in both modes matches the checked-in renders and has the properties the
//! operator relies on (no caBundle, hardened pods, out-of-cluster switch).

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
    for (file, args) in [
        ("default.yaml", &[][..]),
        ("out-of-cluster.yaml", &OUT_OF_CLUSTER[..]),
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
