//! The vLLM emulator (`vllm-emulator` binary) against the local control plane: its `/metrics`
//! series follow the Ready pods of the target Deployment as it is scaled.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use llmscaler_e2e::emulator::pod_ready;
use llmscaler_e2e::fixture::deployment_manifest;
use llmscaler_e2e::{Check, TestNamespace, client, free_port, wait_child_ready, wait_for};

const DEADLINE: Duration = Duration::from_secs(60);

/// Kills the emulator when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `pod` label → (namespace, app) of every `vllm:num_requests_waiting` series.
fn waiting_series(text: &str) -> BTreeMap<String, (String, String)> {
    text.lines()
        .filter_map(|line| line.strip_prefix("vllm:num_requests_waiting{"))
        .filter_map(|rest| rest.split_once('}').map(|(labels, _)| labels))
        .map(|labels| {
            let map: BTreeMap<&str, &str> = labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k, v.trim_matches('"')))
                .collect();
            let get = |k: &str| map.get(k).copied().unwrap_or_default().to_string();
            (get("pod"), (get("namespace"), get("app")))
        })
        .collect()
}

/// Sum of one counter over all series.
fn counter_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

async fn ready_pod_names(pods: &Api<Pod>, app: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
        .map(ResourceExt::name_any)
        .collect())
}

/// Scales the Deployment, then waits until `/metrics` has exactly one series per Ready pod
/// (with the namespace and app labels) and as many Ready pods as `replicas`.
async fn scale_and_follow(
    deployments: &Api<Deployment>,
    pods: &Api<Pod>,
    ns: &str,
    app: &str,
    replicas: i32,
    url: &str,
) -> anyhow::Result<BTreeSet<String>> {
    let manifest = deployment_manifest(ns, app, Some(replicas));
    deployments
        .patch(
            app,
            &PatchParams::apply("e2e-emulator").force(),
            &Patch::Apply(&manifest),
        )
        .await?;
    wait_for(
        &format!("/metrics series = the {replicas} Ready pods of {app}"),
        DEADLINE,
        || async {
            let ready = ready_pod_names(pods, app).await?;
            let text = reqwest::get(url).await?.text().await?;
            let series = waiting_series(&text);
            let pods_in_series: BTreeSet<String> = series.keys().cloned().collect();
            let labels_ok = series.values().all(|(n, a)| n == ns && a == app);
            Ok(
                if ready.len() == replicas as usize && pods_in_series == ready && labels_ok {
                    Check::Done(ready)
                } else {
                    Check::NotYet(format!("ready {ready:?}, series {series:?}"))
                },
            )
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs e2e/cluster up"]
async fn metrics_series_follow_the_ready_pods() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "emulator").await?;
    let app = "vllm";
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());

    // A synthetic trace: 4 requests per trace second for 20 minutes (a steady load).
    let dir = tempfile::tempdir()?;
    let trace = dir.path().join("trace.csv");
    let mut file = std::fs::File::create(&trace)?;
    writeln!(file, "TIMESTAMP,ContextTokens,GeneratedTokens")?;
    for i in 0..4800u32 {
        let ms = i * 250;
        writeln!(
            file,
            "2023-11-16 18:{:02}:{:02}.{:03},800,120",
            ms / 60_000,
            (ms / 1000) % 60,
            ms % 1000
        )?;
    }
    drop(file);

    // The Deployment exists before the emulator starts, with 2 pods.
    let first = {
        let manifest = deployment_manifest(ns.name(), app, Some(2));
        deployments
            .patch(
                app,
                &PatchParams::apply("e2e-emulator").force(),
                &Patch::Apply(&manifest),
            )
            .await?;
        wait_for("2 Ready pods", DEADLINE, || async {
            let ready = ready_pod_names(&pods, app).await?;
            Ok(if ready.len() == 2 {
                Check::Done(ready)
            } else {
                Check::NotYet(format!("{ready:?}"))
            })
        })
        .await?
    };

    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_vllm-emulator"))
            .args(["--trace", trace.to_str().unwrap_or_default()])
            .args([
                "--speed",
                "10",
                "--namespace",
                ns.name(),
                "--selector",
                "app=vllm",
            ])
            .args(["--listen", &listen])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?,
    );
    wait_child_ready(&mut child.0, &format!("http://{listen}/healthz"), DEADLINE).await?;
    let url = format!("http://{listen}/metrics");

    let two = scale_and_follow(&deployments, &pods, ns.name(), app, 2, &url).await?;
    assert_eq!(two, first);
    let four = scale_and_follow(&deployments, &pods, ns.name(), app, 4, &url).await?;
    assert!(
        four.is_superset(&two),
        "scale-up keeps the first pods: {two:?} -> {four:?}"
    );

    // Load reaches the new pods too: every series has served requests.
    wait_for("every pod has served requests", DEADLINE, || async {
        let text = reqwest::get(&url).await?.text().await?;
        let per_pod: Vec<f64> = four
            .iter()
            .map(|pod| {
                text.lines()
                    .filter(|l| {
                        l.starts_with("vllm:request_success_total{")
                            && l.contains(&format!("pod=\"{pod}\""))
                    })
                    .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
                    .sum()
            })
            .collect();
        Ok(if per_pod.iter().all(|&n| n > 0.0) {
            Check::Done(())
        } else {
            Check::NotYet(format!("successes per pod {per_pod:?}"))
        })
    })
    .await?;

    let one = scale_and_follow(&deployments, &pods, ns.name(), app, 1, &url).await?;
    assert!(four.is_superset(&one));
    let text = reqwest::get(&url).await?.text().await?;
    assert!(counter_sum(&text, "vllm:request_success_total") > 0.0);
    assert!(counter_sum(&text, "vllm:time_to_first_token_seconds_count") > 0.0);

    // At zero pods no vLLM series exists, but the gateway's queue does, and it grows with the
    // arrivals: the activation signal of a fleet at zero.
    let zero = scale_and_follow(&deployments, &pods, ns.name(), app, 0, &url).await?;
    assert!(zero.is_empty());
    wait_for(
        "the gateway queue to hold arrivals at zero pods",
        DEADLINE,
        || async {
            let text = reqwest::get(&url).await?.text().await?;
            let queued = counter_sum(&text, "gateway_queue_size");
            let vllm = text.lines().filter(|l| l.starts_with("vllm:")).count();
            Ok(if queued > 0.0 && vllm == 0 {
                Check::Done(())
            } else {
                Check::NotYet(format!("gateway_queue_size {queued}, {vllm} vllm series"))
            })
        },
    )
    .await?;

    drop(child);
    ns.delete().await
}
