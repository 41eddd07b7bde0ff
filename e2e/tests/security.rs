//! Issue 11 against the real API server (`docs/security.md`):
//! - least-privilege RBAC: the chart's ServiceAccount cannot patch another webhook
//!   configuration, read another Secret of its namespace, change a pod's spec (the chart's
//!   ValidatingAdmissionPolicy; RBAC cannot limit a patch to one annotation), or change anything
//!   of a Deployment but `spec.replicas` (the target policies), while what the operator uses
//!   stays allowed;
//! - no confused deputy: a user who may create LLMScalers but not scale the target is denied
//!   at admission, naming the missing permission; granting it lets the same apply through;
//! - the CRD schema alone (no webhook in the namespace) refuses an out-of-range int32, user
//!   info in `serverAddress`, a routing header and more than 16 metrics.
//!
//! Run with `./e2e/test`, or: `e2e/cluster up && eval "$(e2e/cluster env)" &&
//! cargo test -p llmscaler-e2e --test security -- --ignored --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use llmscaler_e2e::fixture::install_crd;
use llmscaler_e2e::operator::Rbac;
use llmscaler_e2e::{Check, TestNamespace, client, unique_name, wait_for};
use llmscaler_webhooks::managed::{self, ManagedArgs};
use llmscaler_webhooks::server;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs kubectl with `args` (and `stdin`); `Ok(stdout)` on success, `Err(stderr + stdout)`.
fn kubectl(args: &[&str], stdin: Option<&str>) -> anyhow::Result<Result<String, String>> {
    let run = llmscaler_e2e::run_kubectl(args, stdin)?;
    Ok(if run.success {
        Ok(run.stdout)
    } else {
        Err(format!("{}{}", run.stderr, run.stdout))
    })
}

/// `kubectl auth can-i` as the ServiceAccount of `rbac`: true for "yes".
fn can_i(rbac: &Rbac, args: &[&str]) -> anyhow::Result<bool> {
    let kubeconfig = rbac.kubeconfig.to_str().context("kubeconfig path")?;
    let mut all = vec!["--kubeconfig", kubeconfig, "auth", "can-i"];
    all.extend_from_slice(args);
    let answer = match kubectl(&all, None)? {
        Ok(out) | Err(out) => out,
    };
    // kubectl prints warnings (e.g. a cluster-scoped resource) before the answer.
    match answer
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("")
    {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => bail!("kubectl auth can-i {args:?}: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs e2e/cluster up"]
async fn the_chart_service_account_holds_only_what_the_operator_uses() -> anyhow::Result<()> {
    let client = client().await?;
    install_crd()?;
    let ns = TestNamespace::create(&client, "rbac").await?;
    let namespace = ns.name().to_string();
    let rbac = Rbac::install(&namespace, &namespace, &[])?;
    let own = Rbac::service_account(&namespace);
    let own_secret = format!("secrets/{own}-webhook-tls");

    let allowed: [&[&str]; 7] = [
        &["patch", &format!("validatingwebhookconfigurations/{own}")],
        &["patch", &format!("mutatingwebhookconfigurations/{own}")],
        &["get", &own_secret, "-n", &namespace],
        &["update", &own_secret, "-n", &namespace],
        &["update", "leases/llmscaler-leader", "-n", &namespace],
        &["watch", "leases/llmscaler-leader", "-n", &namespace],
        &["create", "subjectaccessreviews.authorization.k8s.io"],
    ];
    for args in allowed {
        ensure!(can_i(&rbac, args)?, "the operator needs: can-i {args:?}");
    }
    let refused: [&[&str]; 9] = [
        &["patch", "validatingwebhookconfigurations/someone-elses"],
        &["patch", "mutatingwebhookconfigurations/someone-elses"],
        &["list", "validatingwebhookconfigurations"],
        &["get", "secrets/another-secret", "-n", &namespace],
        &["list", "secrets", "-n", &namespace],
        &["get", "secrets", "-n", "kube-system"],
        &["update", "leases/another-lease", "-n", &namespace],
        &["delete", "leases/llmscaler-leader", "-n", &namespace],
        &["update", "pods", "-n", &namespace],
    ];
    for args in refused {
        ensure!(!can_i(&rbac, args)?, "can-i {args:?} must be no");
        println!("can-i {args:?}: no");
    }

    // A pod: the operator may set its deletion cost and its rotation label (to in or out), but
    // not touch its spec or other labels.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vllm-0", "namespace": namespace, "labels": {"app": "vllm"}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm:latest"}]}});
    kubectl(&["apply", "-f", "-"], Some(&pod.to_string()))?
        .map_err(|e| anyhow::anyhow!("creating the pod: {e}"))?;
    let kubeconfig = rbac
        .kubeconfig
        .to_str()
        .context("kubeconfig path")?
        .to_string();
    let patch_as_operator = |patch: &str| {
        kubectl(
            &[
                "--kubeconfig",
                &kubeconfig,
                "patch",
                "pod",
                "vllm-0",
                "-n",
                &namespace,
                "--type",
                "merge",
                "--dry-run=server",
                "-p",
                patch,
            ],
            None,
        )
    };
    // The policy takes effect within seconds of its creation: wait until the spec change is
    // refused (server-side dry runs: nothing is changed while waiting).
    let spec_patch = r#"{"spec":{"activeDeadlineSeconds":30}}"#;
    let refusal = wait_for("the pod policy refuses a spec change", TIMEOUT, || async {
        Ok(match patch_as_operator(spec_patch)? {
            Err(message) => Check::Done(message),
            Ok(out) => Check::NotYet(format!("still allowed: {out}")),
        })
    })
    .await?;
    println!("spec patch as the operator: {refusal}");
    ensure!(refusal.contains("not its spec"), "{refusal}");
    let labels = patch_as_operator(r#"{"metadata":{"labels":{"app":"stolen"}}}"#)?;
    ensure!(
        matches!(&labels, Err(e) if e.contains("not its labels")),
        "label patch: {labels:?}"
    );
    let removed = patch_as_operator(r#"{"metadata":{"labels":{"app":null}}}"#)?;
    ensure!(
        matches!(&removed, Err(e) if e.contains("not its labels")),
        "label removal: {removed:?}"
    );
    let rotation = patch_as_operator(
        r#"{"metadata":{"labels":{"autoscaling.modelsphere.dev/rotation":"out"}}}"#,
    )?;
    ensure!(
        rotation.is_ok(),
        "the drain's rotation label must be allowed: {rotation:?}"
    );
    let bad_rotation = patch_as_operator(
        r#"{"metadata":{"labels":{"autoscaling.modelsphere.dev/rotation":"maybe"}}}"#,
    )?;
    ensure!(
        matches!(&bad_rotation, Err(e) if e.contains("rotation label")),
        "rotation label value: {bad_rotation:?}"
    );
    let other_annotation = patch_as_operator(r#"{"metadata":{"annotations":{"x":"y"}}}"#)?;
    ensure!(
        other_annotation.is_err(),
        "annotation patch: {other_annotation:?}"
    );
    let cost = patch_as_operator(
        r#"{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-5"}}}"#,
    )?;
    ensure!(
        cost.is_ok(),
        "the deletion-cost patch must stay allowed: {cost:?}"
    );

    targets_take_only_replicas(&rbac, &namespace).await?;
    rbac.delete()?;
    ns.delete().await?;
    Ok(())
}

/// RBAC lets the operator patch whole Deployments and StatefulSets (`kubectl auth can-i` says
/// yes); the chart's target policies (issue 28) let it change `spec.replicas` only: its apply of
/// `spec.replicas` goes through, a pod-template, selector-free spec or label patch is denied.
async fn targets_take_only_replicas(rbac: &Rbac, namespace: &str) -> anyhow::Result<()> {
    // (LeaderWorkerSets: the same rule and policy; the test cluster does not serve the kind.)
    for kind in ["deployments", "statefulsets"] {
        ensure!(
            can_i(rbac, &["patch", kind, "-n", namespace])?,
            "the operator applies spec.replicas of {kind}"
        );
        println!("can-i patch {kind}: yes (the policy narrows it to spec.replicas)");
    }
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": namespace, "labels": {"app": "vllm"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "vllm"}},
                 "template": {"metadata": {"labels": {"app": "vllm"}},
                              "spec": {"containers": [{"name": "vllm", "image": "vllm:latest"}]}}}});
    kubectl(&["apply", "-f", "-"], Some(&deployment.to_string()))?
        .map_err(|e| anyhow::anyhow!("creating the Deployment: {e}"))?;
    let kubeconfig = rbac
        .kubeconfig
        .to_str()
        .context("kubeconfig path")?
        .to_string();
    let as_operator = |args: &[&str], stdin: Option<&str>| {
        let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
        all.extend_from_slice(args);
        kubectl(&all, stdin)
    };
    let template_patch = r#"{"spec":{"template":{"spec":{"containers":[{"name":"vllm","image":"attacker/miner:latest"}]}}}}"#;
    let refusal = wait_for(
        "the target policy refuses a template patch",
        TIMEOUT,
        || async {
            Ok(
                match as_operator(
                    &[
                        "patch",
                        "deployment",
                        "vllm",
                        "-n",
                        namespace,
                        "--type",
                        "merge",
                        "--dry-run=server",
                        "-p",
                        template_patch,
                    ],
                    None,
                )? {
                    Err(message) => Check::Done(message),
                    Ok(out) => Check::NotYet(format!("still allowed: {out}")),
                },
            )
        },
    )
    .await?;
    println!("template patch as the operator: {refusal}");
    ensure!(
        refusal.contains("may change only spec.replicas"),
        "{refusal}"
    );
    for (what, patch) in [
        ("minReadySeconds", r#"{"spec":{"minReadySeconds":30}}"#),
        ("labels", r#"{"metadata":{"labels":{"app":"stolen"}}}"#),
        ("annotations", r#"{"metadata":{"annotations":{"x":"y"}}}"#),
    ] {
        let out = as_operator(
            &[
                "patch",
                "deployment",
                "vllm",
                "-n",
                namespace,
                "--type",
                "merge",
                "--dry-run=server",
                "-p",
                patch,
            ],
            None,
        )?;
        ensure!(
            matches!(&out, Err(e) if e.contains("may change only spec.replicas")),
            "{what} patch as the operator: {out:?}"
        );
    }
    // What the operator does: a server-side apply of spec.replicas alone, field manager
    // llmscaler (docs/writing-replicas.md).
    let apply = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": namespace}, "spec": {"replicas": 3}});
    let applied = as_operator(
        &[
            "apply",
            "--server-side",
            "--field-manager=llmscaler",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&apply.to_string()),
    )?;
    ensure!(
        applied.is_ok(),
        "the operator's replicas apply: {applied:?}"
    );
    let replicas = kubectl(
        &[
            "get",
            "deployment",
            "vllm",
            "-n",
            namespace,
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        None,
    )?
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    ensure!(replicas == "3", "replicas {replicas}");
    Ok(())
}

fn scaler(namespace: &str, target: &str) -> Value {
    json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {"name": "chat", "namespace": namespace},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "serverAddress": "http://prometheus.monitoring:9090",
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"query": "avg(vllm:num_requests_waiting)", "target": "0.5"}],
        }
    })
}

/// Cluster-scoped webhook configuration, deleted on drop.
struct Configuration(String);

impl Drop for Configuration {
    fn drop(&mut self) {
        let _ = kubectl(
            &[
                "delete",
                "validatingwebhookconfiguration",
                &self.0,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs e2e/cluster up"]
async fn a_user_who_may_not_scale_the_target_cannot_point_a_scaler_at_it() -> anyhow::Result<()> {
    let client = client().await?;
    install_crd()?;
    let ns = TestNamespace::create(&client, "deputy").await?;
    let namespace = ns.name().to_string();
    let port = llmscaler_e2e::free_port()?;
    let configuration = Configuration(unique_name("llmscaler-deputy"));
    let webhook = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": configuration.0},
        "webhooks": [{
            "name": "validate.llmscaler.modelsphere.dev",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}{}", server::VALIDATE_PATH)},
            "rules": [{"apiGroups": ["autoscaling.modelsphere.dev"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["llmscalers"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    });
    kubectl(&["apply", "-f", "-"], Some(&webhook.to_string()))?
        .map_err(|e| anyhow::anyhow!("webhook configuration: {e}"))?;
    let args = ManagedArgs {
        webhook_listen: format!("127.0.0.1:{port}").parse()?,
        webhook_secret_name: "llmscaler-webhook-certs".to_string(),
        webhook_service_name: "llmscaler-webhook".to_string(),
        webhook_extra_sans: vec!["127.0.0.1".to_string()],
        validating_webhook_configuration: Some(configuration.0.clone()),
        mutating_webhook_configuration: None,
        webhook_cert_check_seconds: 2,
        // The test stops the server when done; its drain is not under test here.
        webhook_drain_seconds: 2,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn({
        let (client, namespace) = (client.clone(), namespace.clone());
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

    // The tenant may manage LLMScalers in the namespace, and nothing else.
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "scaler-author", "namespace": namespace},
        "rules": [{"apiGroups": ["autoscaling.modelsphere.dev"], "resources": ["llmscalers"],
                   "verbs": ["get", "list", "create", "update", "patch"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "scaler-author", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "scaler-author"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant"}]});
    for object in [&role, &binding] {
        kubectl(&["apply", "-f", "-"], Some(&object.to_string()))?
            .map_err(|e| anyhow::anyhow!("rbac: {e}"))?;
    }
    let manifest = scaler(&namespace, "vllm").to_string();
    let denial = wait_for(
        "the tenant's scaler is denied by the webhook",
        TIMEOUT,
        || {
            let manifest = manifest.clone();
            async move {
                Ok(
                    match kubectl(&["--as=tenant", "apply", "-f", "-"], Some(&manifest))? {
                        Err(e) if e.contains("may not update") => Check::Done(e),
                        Err(e) => Check::NotYet(format!("not the webhook yet: {e}")),
                        Ok(out) => Check::NotYet(format!("allowed: {out}")),
                    },
                )
            }
        },
    )
    .await?;
    println!("tenant without scale rights: {denial}");
    ensure!(denial.contains("user \"tenant\""), "{denial}");
    ensure!(
        denial.contains("deployments.apps/scale \"vllm\""),
        "{denial}"
    );

    // An admin (who may scale anything) is allowed; so is the tenant once granted the right on
    // exactly that Deployment, and a targetRef change to another Deployment is denied again.
    let grant = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "scaler-author", "namespace": namespace},
        "rules": [{"apiGroups": ["autoscaling.modelsphere.dev"], "resources": ["llmscalers"],
                   "verbs": ["get", "list", "create", "update", "patch"]},
                  {"apiGroups": ["apps"], "resources": ["deployments/scale"],
                   "resourceNames": ["vllm"], "verbs": ["update"]}]});
    kubectl(&["apply", "-f", "-"], Some(&grant.to_string()))?
        .map_err(|e| anyhow::anyhow!("grant: {e}"))?;
    wait_for("the granted tenant's scaler is admitted", TIMEOUT, || {
        let manifest = manifest.clone();
        async move {
            Ok(
                match kubectl(&["--as=tenant", "apply", "-f", "-"], Some(&manifest))? {
                    Ok(out) => Check::Done(out),
                    Err(e) => Check::NotYet(e),
                },
            )
        }
    })
    .await?;
    let moved = scaler(&namespace, "someone-elses").to_string();
    let moved = kubectl(&["--as=tenant", "apply", "-f", "-"], Some(&moved))?;
    ensure!(
        matches!(&moved, Err(e) if e.contains("deployments.apps/scale \"someone-elses\"")),
        "targetRef change: {moved:?}"
    );

    // One autoscaler per workload: a second LLMScaler on the same target is refused naming the
    // first; an HPA on a target makes a new scaler admitted with a warning.
    let mut second = scaler(&namespace, "someone-elses");
    second["metadata"]["name"] = json!("second");
    second["spec"]["targetRef"]["name"] = json!("vllm");
    let refused = kubectl(&["apply", "-f", "-"], Some(&second.to_string()))?;
    ensure!(
        matches!(&refused, Err(e) if e.contains("already scaled by LLMScaler \"chat\"")),
        "second scaler on vllm: {refused:?}"
    );
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "legacy", "namespace": namespace},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
                 "minReplicas": 1, "maxReplicas": 3}});
    kubectl(&["apply", "-f", "-"], Some(&hpa.to_string()))?
        .map_err(|e| anyhow::anyhow!("hpa: {e}"))?;
    let mut third = scaler(&namespace, "other");
    third["metadata"]["name"] = json!("third");
    let created = llmscaler_e2e::run_kubectl(&["create", "-f", "-"], Some(&third.to_string()))?;
    let stderr = created.stderr;
    ensure!(created.success, "third scaler: {stderr}");
    ensure!(
        stderr.contains("Warning:") && stderr.contains("HorizontalPodAutoscaler \"legacy\""),
        "no warning about the HPA: {stderr}"
    );

    let _ = stop.send(());
    serving.await??;
    drop(configuration);
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn the_crd_schema_refuses_what_it_can_without_the_webhook() -> anyhow::Result<()> {
    let client = client().await?;
    install_crd()?;
    let ns = TestNamespace::create(&client, "schema").await?;
    let namespace = ns.name().to_string();
    let base = scaler(&namespace, "vllm");
    let cases: [(&str, Value, &str); 4] = [
        (
            "maxReplicas over int32",
            json!({"maxReplicas": 3_000_000_000_i64}),
            "spec.maxReplicas",
        ),
        (
            "user info",
            json!({"serverAddress": "http://admin:pw@prometheus:9090"}),
            "without user info",
        ),
        (
            "routing header",
            json!({"serverHeaders": {"Range": "bytes=0-100"}}),
            "hop-by-hop",
        ),
        (
            "17 metrics",
            json!({"metrics": (0..17).map(|i| json!({"name": format!("m{i}"), "query": "avg(x)", "target": "1"})).collect::<Vec<_>>()}),
            "spec.metrics",
        ),
    ];
    for (what, change, expect) in cases {
        let mut object = base.clone();
        for (key, value) in change.as_object().context("change")? {
            object["spec"][key] = value.clone();
        }
        let result = kubectl(&["apply", "-f", "-"], Some(&object.to_string()))?;
        println!("{what}: {result:?}");
        ensure!(
            matches!(&result, Err(e) if e.contains(expect)),
            "{what}: {result:?}"
        );
    }
    ensure!(
        kubectl(&["apply", "-f", "-"], Some(&base.to_string()))?.is_ok(),
        "the valid scaler"
    );
    ns.delete().await?;
    Ok(())
}

/// A decision server that answers `active` only to `Authorization: Bearer <token>` (401
/// otherwise), with the token changeable during the test.
async fn guarded_decision_server(
    namespace: String,
    token: std::sync::Arc<std::sync::Mutex<String>>,
    active: i32,
) -> anyhow::Result<String> {
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    let router = axum::Router::new().route(
        "/decisions",
        axum::routing::get(move |headers: HeaderMap| {
            let (token, namespace) = (token.clone(), namespace.clone());
            async move {
                let want = format!(
                    "Bearer {}",
                    token.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
                );
                let got = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                if got != want {
                    return (StatusCode::UNAUTHORIZED, "unauthorized").into_response();
                }
                axum::Json(json!({
                    "apiVersion": "llmscaling.inference.x-k8s.io/v1alpha1",
                    "decisions": [{"namespace": namespace, "serviceId": "llama", "replicas": {"active": active}}]
                }))
                .into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{addr}"))
}

/// `llmscaler probe --name chat -n NAMESPACE` as the test's (admin) user: exit code and output.
/// Async: the decision server runs on this test's runtime.
async fn probe_name(namespace: &str) -> anyhow::Result<(i32, String)> {
    let output = tokio::process::Command::new(llmscaler_e2e::operator::binary())
        .args(["probe", "--name", "chat", "-n", namespace])
        .output()
        .await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("--- probe --name chat\n{text}");
    Ok((output.status.code().unwrap_or(-1), text))
}

fn secret(namespace: &str, token: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "decision-token", "namespace": namespace},
        "stringData": {"token": token}})
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn header_values_come_from_a_secret_and_follow_its_rotation() -> anyhow::Result<()> {
    use llmscaler_e2e::fixture::{World, deployment_ref};
    let minute = Duration::from_secs(60);
    let mut world = World::new("secret-header").await?;
    let namespace = world.namespace().to_string();
    world.create_deployment("vllm", 1).await?;
    let token = std::sync::Arc::new(std::sync::Mutex::new("first-t0ken".to_string()));
    let url = guarded_decision_server(namespace.clone(), token.clone(), 3).await?;
    kubectl(
        &["apply", "-f", "-"],
        Some(&secret(&namespace, "Bearer first-t0ken").to_string()),
    )?
    .map_err(|e| anyhow::anyhow!("secret: {e}"))?;
    // The namespace owner lets the operator read exactly this Secret (docs/security.md).
    let service_account = Rbac::service_account(&namespace);
    let grant = json!([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "llmscaler-reads-decision-token", "namespace": namespace},
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["decision-token"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "llmscaler-reads-decision-token", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "llmscaler-reads-decision-token"},
         "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]}
    ]);
    for object in grant.as_array().context("grant")? {
        kubectl(&["apply", "-f", "-"], Some(&object.to_string()))?
            .map_err(|e| anyhow::anyhow!("grant: {e}"))?;
    }
    world
        .create_scaler(
            "chat",
            json!({
                "targetRef": deployment_ref("vllm"),
                "metricProvider": "Custom",
                "customProvider": {"serviceId": "llama"},
                "serverAddress": url,
                "serverHeadersFrom": [{"name": "Authorization", "secretKeyRef": {"name": "decision-token", "key": "token"}}],
                "minReplicas": 1,
                "maxReplicas": 5,
                "syncPeriodSeconds": 1,
            }),
        )
        .await?;
    world.start_operator("secret-0", &[]).await?;
    world.wait_replicas("vllm", 3, minute).await?;

    // Rotation: the server now accepts only the new token; the Secret is updated; no restart.
    *token
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = "second-t0ken".to_string();
    let held = world
        .wait_condition("chat", "ScalingActive", "False", "HTTP 401", minute)
        .await?;
    println!("old token refused: {held}");
    kubectl(
        &["apply", "-f", "-"],
        Some(&secret(&namespace, "Bearer second-t0ken").to_string()),
    )?
    .map_err(|e| anyhow::anyhow!("rotate: {e}"))?;
    let active = world
        .wait_condition("chat", "ScalingActive", "True", "", minute)
        .await?;
    println!("after rotation: {active}");
    // `probe --name` sends the headers the operator sends: the value from the Secret (issue 28;
    // before, it sent none and the server's 401 made it report a hold while the operator
    // scaled).
    let probe = probe_name(&namespace).await?;
    ensure!(probe.0 == 0, "probe --name: exit {}: {}", probe.0, probe.1);
    ensure!(!probe.1.contains("401"), "{}", probe.1);

    // A Secret holding the bare token, as a KEDA TriggerAuthentication's does, with
    // `valuePrefix: "Bearer "` (what `llmscaler convert` writes for authModes bearer).
    *token
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = "third-t0ken".to_string();
    world
        .wait_condition("chat", "ScalingActive", "False", "HTTP 401", minute)
        .await?;
    kubectl(
        &["apply", "-f", "-"],
        Some(&secret(&namespace, "third-t0ken").to_string()),
    )?
    .map_err(|e| anyhow::anyhow!("bare token: {e}"))?;
    kubectl(
        &[
            "patch",
            "llmscaler",
            "chat",
            "-n",
            &namespace,
            "--type=json",
            "-p",
            r#"[{"op": "add", "path": "/spec/serverHeadersFrom/0/valuePrefix", "value": "Bearer "}]"#,
        ],
        None,
    )?
    .map_err(|e| anyhow::anyhow!("valuePrefix: {e}"))?;
    let prefixed = world
        .wait_condition("chat", "ScalingActive", "True", "", minute)
        .await?;
    println!("bare token with valuePrefix: {prefixed}");
    let probe = probe_name(&namespace).await?;
    ensure!(
        probe.0 == 0,
        "probe --name with valuePrefix: exit {}: {}",
        probe.0,
        probe.1
    );
    // The token never shows in the scaler, its Events or the operator's log.
    let scaler = world.scaler("chat").await?.to_string();
    let events = kubectl(
        &[
            "get",
            "events.events.k8s.io",
            "-n",
            &namespace,
            "-o",
            "json",
        ],
        None,
    )?
    .unwrap_or_default();
    let logs = world.operator_logs();
    for (what, text) in [("status", &scaler), ("events", &events), ("log", &logs)] {
        ensure!(
            !text.contains("t0ken"),
            "a token value appears in the {what}"
        );
    }
    world.finish().await
}
