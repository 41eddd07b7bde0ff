//! The admission webhook against the real API server (issue 5), run the way `llmscaler run`
//! runs it (`llmscaler_webhooks::managed::run`): webhook configurations reach the webhook on
//! loopback through `clientConfig.url`, the certificates come from `llmscaler_certs` (CA and
//! serving certificate in a Secret, `caBundle` injected by server-side apply), and
//! `kubectl apply` shows what a user sees.
//!
//! Run with `./e2e/test`, or: `e2e/cluster up && eval "$(e2e/cluster env)" &&
//! cargo test -p llmscaler-e2e --test webhook -- --ignored --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::ApiResource;
use llmscaler_certs::CertConfig;
use llmscaler_e2e::fixture::install_crd;
use llmscaler_e2e::{
    Check, TestNamespace, client, kubectl_apply, kubectl_path, unique_name, wait_for,
};
use llmscaler_webhooks::managed::{self, ManagedArgs};
use llmscaler_webhooks::server;
use serde_json::{Value, json};

const SECRET: &str = "llmscaler-webhook-certs";
const SERVICE: &str = "llmscaler-webhook";
const TIMEOUT: Duration = Duration::from_secs(60);
/// The bound on recovery after the Secret is deleted.
const RECOVERY: Duration = Duration::from_secs(30);

/// Cluster-scoped webhook configurations, deleted on drop (also when the test fails).
struct Configurations {
    validating: String,
    mutating: String,
}

impl Drop for Configurations {
    fn drop(&mut self) {
        for (kind, name) in [
            ("validatingwebhookconfiguration", &self.validating),
            ("mutatingwebhookconfiguration", &self.mutating),
        ] {
            let _ = std::process::Command::new(kubectl_path())
                .args(["delete", kind, name, "--ignore-not-found", "--wait=false"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// A webhook configuration as the chart renders it: no `caBundle`, limited to one namespace.
fn configuration(kind: &str, name: &str, path: &str, port: u16, namespace: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [{
            "name": format!("{}.llmscaler.modelsphere.dev", path.trim_start_matches('/')),
            "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}")},
            "rules": [{
                "apiGroups": ["autoscaling.modelsphere.dev"],
                "apiVersions": ["v1alpha1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["llmscalers"],
            }],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    })
}

fn scaler(namespace: &str, name: &str, target: &str) -> Value {
    json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            // One target per scaler: admission refuses a second LLMScaler on a workload.
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": format!("vllm-{name}")},
            "serverAddress": "http://prometheus.monitoring:9090",
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"query": "avg(vllm:num_requests_waiting)", "target": target}],
        }
    })
}

async fn ca_bundles(client: &kube::Client, cfg: &CertConfig) -> anyhow::Result<Vec<String>> {
    let mut bundles = Vec::new();
    let targets = [
        (
            cfg.validating_webhook_configuration.clone(),
            ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        ),
        (
            cfg.mutating_webhook_configuration.clone(),
            ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        ),
    ];
    for (name, resource) in targets {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let object = api.get(&name.context("configuration name")?).await?;
        for webhook in object.data["webhooks"].as_array().into_iter().flatten() {
            bundles.push(
                webhook
                    .pointer("/clientConfig/caBundle")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    Ok(bundles)
}

fn secret_text(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

fn base64_of(text: &str) -> anyhow::Result<String> {
    let value = serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec()))?;
    value
        .as_str()
        .map(str::to_string)
        .context("ByteString serializes to a string")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs e2e/cluster up"]
async fn webhook_validates_defaults_and_recovers_its_certificates() -> anyhow::Result<()> {
    let client = client().await?;
    install_crd()?;
    let ns = TestNamespace::create(&client, "webhook").await?;
    let namespace = ns.name().to_string();

    let port = llmscaler_e2e::free_port()?;
    let configurations = Configurations {
        validating: unique_name("llmscaler-validate"),
        mutating: unique_name("llmscaler-mutate"),
    };
    for (kind, name, path) in [
        (
            "ValidatingWebhookConfiguration",
            &configurations.validating,
            server::VALIDATE_PATH,
        ),
        (
            "MutatingWebhookConfiguration",
            &configurations.mutating,
            server::MUTATE_PATH,
        ),
    ] {
        kubectl_apply(&configuration(kind, name, path, port, &namespace))?
            .map_err(|stderr| anyhow::anyhow!("creating {kind}: {stderr}"))?;
    }

    // The operator's flags, as the chart would set them for a webhook reached by URL.
    let args = ManagedArgs {
        webhook_listen: format!("127.0.0.1:{port}").parse()?,
        webhook_secret_name: SECRET.to_string(),
        webhook_service_name: SERVICE.to_string(),
        webhook_extra_sans: vec!["127.0.0.1".to_string()],
        validating_webhook_configuration: Some(configurations.validating.clone()),
        mutating_webhook_configuration: Some(configurations.mutating.clone()),
        webhook_cert_check_seconds: 2,
        // The test stops the server when done; its drain is not under test here.
        webhook_drain_seconds: 2,
    };
    let cfg = args.cert_config(&namespace);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn({
        let (client, namespace, args) = (client.clone(), namespace.clone(), args.clone());
        async move {
            managed::run(
                client,
                &namespace,
                &args,
                llmscaler_api::OperatorPolicy::default(),
                async {
                    let _ = stopped.await;
                },
            )
            .await
        }
    });

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let first_ca = wait_for("the Secret and an injected caBundle", TIMEOUT, || {
        let (client, cfg, secrets) = (client.clone(), cfg.clone(), secrets.clone());
        async move {
            let Some(secret) = secrets.get_opt(SECRET).await? else {
                return Ok(Check::NotYet("no Secret".into()));
            };
            let bundle = base64_of(&secret_text(&secret, llmscaler_certs::CA_BUNDLE))?;
            let bundles = ca_bundles(&client, &cfg).await?;
            Ok(
                if bundles.len() == 2 && bundles.iter().all(|b| *b == bundle) {
                    Check::Done(secret_text(&secret, llmscaler_certs::CA_CERT))
                } else {
                    Check::NotYet(format!(
                        "{} caBundles, {} match",
                        bundles.len(),
                        bundles.iter().filter(|b| **b == bundle).count()
                    ))
                },
            )
        }
    })
    .await?;

    // A percent target is refused at apply time, naming the field.
    let refused = kubectl_apply(&scaler(&namespace, "percent", "80%"))?;
    let Err(stderr) = refused else {
        bail!("kubectl apply of target \"80%\" succeeded");
    };
    eprintln!("kubectl apply of target \"80%\" printed:\n{stderr}");
    ensure!(
        stderr.contains("spec.metrics[0].target: \"80%\" is not a number"),
        "kubectl did not print the field path: {stderr}"
    );
    ensure!(stderr.contains("denied the request"), "{stderr}");

    // A minimal valid spec is stored with every default.
    kubectl_apply(&scaler(&namespace, "minimal", "2"))?
        .map_err(|stderr| anyhow::anyhow!("minimal spec refused: {stderr}"))?;
    let resource = ApiResource {
        group: "autoscaling.modelsphere.dev".into(),
        version: "v1alpha1".into(),
        api_version: "autoscaling.modelsphere.dev/v1alpha1".into(),
        kind: "LLMScaler".into(),
        plural: "llmscalers".into(),
    };
    let scalers: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
    let stored = scalers.get("minimal").await?;
    let spec = &stored.data["spec"];
    ensure!(spec["metricProvider"] == "Prometheus", "{spec}");
    ensure!(spec["syncPeriodSeconds"] == 15, "{spec}");
    ensure!(spec["retryPeriodSeconds"] == 10, "{spec}");
    ensure!(
        spec["scaleDown"]
            == json!({"stabilizationWindowSeconds": 0, "maxStepReplicas": 0, "behavior": "CacheAware"}),
        "{spec}"
    );
    ensure!(spec["metrics"][0]["target"] == "2", "{spec}");

    // Deleting the Secret: it is written again from the CA the webhook holds in memory (the
    // same CA, the same caBundle), and no admission fails meanwhile (docs/security.md#availability).
    let bundles_before = ca_bundles(&client, &cfg).await?;
    secrets.delete(SECRET, &DeleteParams::default()).await?;
    let deleted_at = Instant::now();
    let mut attempt = 0;
    let mut failures = Vec::new();
    let refilled = loop {
        attempt += 1;
        if let Err(stderr) = kubectl_apply(&scaler(&namespace, &format!("after-{attempt}"), "3"))? {
            failures.push(stderr);
        }
        if let Some(secret) = secrets.get_opt(SECRET).await? {
            break secret_text(&secret, llmscaler_certs::CA_CERT);
        }
        ensure!(
            deleted_at.elapsed() < RECOVERY,
            "the Secret was not written again within {RECOVERY:?}"
        );
    };
    eprintln!(
        "measured: Secret written again {:?} after it was deleted; {attempt} applies meanwhile, {} failed",
        deleted_at.elapsed(),
        failures.len()
    );
    ensure!(
        refilled == first_ca,
        "the Secret came back with another CA (the caBundle would change under the replicas)"
    );
    ensure!(failures.is_empty(), "admission failed: {failures:?}");
    ensure!(
        ca_bundles(&client, &cfg).await? == bundles_before,
        "the caBundle changed"
    );
    ensure!(
        matches!(kubectl_apply(&scaler(&namespace, "percent-again", "80%"))?, Err(e) if e.contains("spec.metrics[0].target")),
        "the webhook still refuses a percent target after the Secret came back"
    );

    // Replicas starting together end up with one CA: two writers racing on an absent Secret
    // (a third, the maintain loop, may join) agree on the winner's.
    secrets.delete(SECRET, &DeleteParams::default()).await?;
    let now = time::OffsetDateTime::now_utc();
    let (a, b) = tokio::join!(
        llmscaler_certs::sync_secret(&client, &cfg, now),
        llmscaler_certs::sync_secret(&client, &cfg, now)
    );
    let (a, b) = (a?, b?);
    ensure!(
        a.ca_cert_pem == b.ca_cert_pem,
        "two racing replicas made two CAs"
    );
    let stored = secrets.get(SECRET).await?;
    ensure!(secret_text(&stored, llmscaler_certs::CA_CERT) == a.ca_cert_pem);

    // A CA with less than a third of its life left: the next CA is published beside it (in the
    // Secret and in every caBundle) while the old one still signs, racing writers agree through
    // the resourceVersion check, and admission keeps working throughout.
    let aging = llmscaler_certs::pki::new_state(&cfg, now - time::Duration::days(300))?;
    let mut current = secrets.get(SECRET).await?;
    current.data = Some(aging.to_secret_data());
    secrets
        .replace(SECRET, &PostParams::default(), &current)
        .await?;
    let (a, b) = tokio::join!(
        llmscaler_certs::sync_secret(&client, &cfg, now),
        llmscaler_certs::sync_secret(&client, &cfg, now)
    );
    let (a, b) = (a?, b?);
    ensure!(a == b, "racing writers disagree on the rotated state");
    ensure!(a.ca_cert_pem == aging.ca_cert_pem, "the old CA still signs");
    ensure!(a.next_ca_cert_pem.is_some(), "no next CA published");
    ensure!(a.ca_bundle_pem().matches("BEGIN CERTIFICATE").count() == 2);
    let overlap_bundle = base64_of(&a.ca_bundle_pem())?;
    wait_for("both CAs in every caBundle", TIMEOUT, || {
        let (client, cfg, overlap_bundle) = (client.clone(), cfg.clone(), overlap_bundle.clone());
        async move {
            let bundles = ca_bundles(&client, &cfg).await?;
            Ok(if bundles.iter().all(|b| *b == overlap_bundle) {
                Check::Done(())
            } else {
                Check::NotYet("caBundle without the next CA".into())
            })
        }
    })
    .await?;
    wait_for("admission during the CA overlap", TIMEOUT, || {
        let namespace = namespace.clone();
        async move {
            Ok(
                match kubectl_apply(&scaler(&namespace, "during-overlap", "5"))? {
                    Ok(_) => Check::Done(()),
                    Err(stderr) => Check::NotYet(stderr),
                },
            )
        }
    })
    .await?;

    let _ = stop.send(());
    serving.await??;
    drop(configurations);
    ns.delete().await
}
