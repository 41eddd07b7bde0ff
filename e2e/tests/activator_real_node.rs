//! Scale from zero without losing a request on the **real node** (issue 25,
//! docs/scaling.md#holding-requests-while-waking-from-zero): the helm-installed operator and
//! activator as pods, the vLLM emulator chart as the workload behind a real Service, kube-proxy
//! routing its ClusterIP, and clients that only know the ClusterIP.
//!
//! Three bursts of streaming completions, each after an idle period that took the fleet to zero
//! (no pod left), each pod loading for 20 s before it listens (as vLLM loads a model): every
//! request is held through the load and answered to the end, `spec.replicas: 1` is written within 1 s
//! of the first request of each burst (the activator tells the operator; no scrape in the path),
//! the bound holds (the first burst sends more than `maxHeldRequests`: the excess gets `503` with
//! `Retry-After`, nothing else fails), the route (the activator's EndpointSlice of the Service) is
//! gone while a replica is Ready and back at zero.
//!
//! The real node has no cluster DNS, so the operator reaches the activator's control API by its
//! Service's ClusterIP (`activator.controlUrl`). Built only with `--features real-node`; run by
//! `e2e/in-cluster-test`. Figures are printed as `measured:` lines.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use llmscaler_e2e::exporter::Exporter;
use llmscaler_e2e::fixture::{deployment_ref, install_crd, queue_scaler_spec, scaler_resource};
use llmscaler_e2e::operator::chart_dir;
use llmscaler_e2e::prometheus::Prometheus;
use llmscaler_e2e::realnode::{
    NODE_VALUES, Release, bridge_address, helm, measured, ready_pods, wait_admission_working,
    wait_kube_proxy,
};
use llmscaler_e2e::stream::Outcome;
use llmscaler_e2e::watch::when_spec_replicas;
use llmscaler_e2e::{Check, TestNamespace, client, unique_name, wait_for};
use serde_json::json;
use tokio::sync::Mutex;

/// Requests held at most (the first burst sends 5 more).
const MAX_HELD: usize = 20;
/// Tokens per answer, streamed at [`TOKENS_PER_SECOND`]: 1 s of events per request.
const TOKENS: u64 = 20;
const TOKENS_PER_SECOND: u64 = 20;
/// Seconds a starting emulator pod loads before it listens (a model load, shortened): every
/// held request waits at least this long for its first token.
const LOAD_SECONDS: f64 = 20.0;
/// Port of the emulator's Service (the chart's `port`, named `http`).
const PORT: u16 = 8000;

/// One streaming completion to `url`, counted into `outcome`.
async fn one_request(http: &reqwest::Client, url: &str, outcome: &Mutex<Outcome>) {
    let sent = Instant::now();
    let response = http
        .post(url)
        .json(&json!({"max_tokens": TOKENS, "stream": true}))
        .send()
        .await;
    let mut one = Outcome::default();
    one.take(url, response, sent, TOKENS).await;
    outcome.lock().await.merge(one);
}

/// `n` concurrent streaming requests through the Service's ClusterIP (a new connection each,
/// as independent clients would open).
async fn burst(url: &str, n: usize) -> Outcome {
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (url, outcome) = (url.to_owned(), outcome.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .pool_max_idle_per_host(0)
                    .timeout(Duration::from_secs(180))
                    .build()
                    .unwrap();
                one_request(&http, &url, &outcome).await;
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    Arc::try_unwrap(outcome).unwrap().into_inner()
}
/// The `IP:port` endpoints of the activator's route slice of `service` (empty when absent).
async fn route_endpoints(
    slices: &Api<EndpointSlice>,
    service: &str,
) -> anyhow::Result<BTreeSet<String>> {
    let Some(slice) = slices
        .get_opt(&format!("{service}-llmscaler-activator"))
        .await?
    else {
        return Ok(BTreeSet::new());
    };
    let ports: Vec<i32> = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| p.port)
        .collect();
    Ok(slice
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter())
        .flat_map(|a| ports.iter().map(move |p| format!("{a}:{p}")))
        .collect())
}

/// Waits until the route of `service` is in kube-proxy's rules: a request to the ClusterIP
/// sent earlier would leave through the host's default route instead of reaching the
/// activator.
async fn wait_routed(
    slices: &Api<EndpointSlice>,
    namespace: &str,
    service: &str,
) -> anyhow::Result<()> {
    let route = route_endpoints(slices, service).await?;
    ensure!(!route.is_empty(), "no activator route for {service}");
    wait_kube_proxy(namespace, service, "http", &route).await
}

/// Waits until the activator's route slice of `service` exists (`want`) or not, and when it
/// exists, until it lists an address (the activator pod's).
async fn wait_route(slices: &Api<EndpointSlice>, service: &str, want: bool) -> anyhow::Result<()> {
    let name = format!("{service}-llmscaler-activator");
    wait_for(
        &format!("the activator route of {service} present = {want}"),
        Duration::from_secs(120),
        || {
            let (slices, name) = (slices.clone(), name.clone());
            async move {
                let present = slices
                    .get_opt(&name)
                    .await?
                    .is_some_and(|s| !s.endpoints.is_empty());
                Ok(if present == want {
                    Check::Done(())
                } else {
                    Check::NotYet(format!("present = {present}"))
                })
            }
        },
    )
    .await
}

/// Waits until no pod of the workload is left (not even terminating).
async fn wait_no_pod(pods: &Api<Pod>, selector: &str) -> anyhow::Result<()> {
    wait_for("no workload pod left", Duration::from_secs(180), || {
        let (pods, selector) = (pods.clone(), selector.to_owned());
        async move {
            let n = pods
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
                .len();
            Ok(if n == 0 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{n} pods"))
            })
        }
    })
    .await
}

async fn cluster_ip(client: &Client, namespace: &str, service: &str) -> anyhow::Result<IpAddr> {
    Api::<Service>::namespaced(client.clone(), namespace)
        .get(service)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .with_context(|| format!("Service {service} has no ClusterIP"))?
        .parse()
        .context("ClusterIP")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs e2e/cluster up --real-node"]
async fn three_bursts_from_zero_through_a_real_service_lose_no_request() -> anyhow::Result<()> {
    let client = client().await?;
    let gateway = bridge_address(&client).await?;
    install_crd()?;
    let ns = TestNamespace::create(&client, "activator").await?;
    let namespace = ns.name().to_string();
    let release = unique_name("act");
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("node.yaml");
    std::fs::write(&values, NODE_VALUES)?;
    let values = values.to_string_lossy().into_owned();
    let chart = chart_dir().to_string_lossy().into_owned();

    // The load the scaler reads between bursts (the queue metric, scraped by a Prometheus the
    // operator pod reaches on the node's bridge): 0 at rest, so only held requests wake it.
    let tag = "activator-real-node";
    let exporter = Exporter::start().await?;
    let prometheus = Prometheus::start_on(gateway, exporter.addr).await?;
    let idle = || exporter.set_gauge("llm_queue", &[(&format!("scaler=\"{tag}\""), 0.0)]);
    let busy = || exporter.set_gauge("llm_queue", &[(&format!("scaler=\"{tag}\""), 0.5)]);
    idle();

    // 1. The operator and the activator, helm-installed; then the control URL by ClusterIP.
    let installed = Release::install(
        &release,
        &chart,
        &namespace,
        &["-f", &values, "--set", "activator.enabled=true"],
    )?;
    wait_admission_working(&namespace).await?;
    let activator_service = format!("{release}-llmscaler-activator");
    let control_ip = cluster_ip(&client, &namespace, &activator_service).await?;
    helm(&[
        "upgrade",
        &release,
        &chart,
        "--namespace",
        &namespace,
        "--reuse-values",
        "--set",
        &format!(
            "activator.controlUrl=http://{}/",
            SocketAddr::new(control_ip, 9090)
        ),
        "--wait",
        "--timeout",
        "5m",
    ])?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let activator_selector =
        format!("app.kubernetes.io/name=llmscaler-activator,app.kubernetes.io/instance={release}");
    wait_for("the activator pod Ready", Duration::from_secs(120), || {
        let (pods, selector) = (pods.clone(), activator_selector.clone());
        async move {
            let n = ready_pods(&pods, &selector).await?.len();
            Ok(if n == 1 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{n} Ready"))
            })
        }
    })
    .await?;

    // 2. The workload at zero: the emulator chart, its Service `vllm` (port `http` 8000).
    let workload = "vllm";
    let emulator_chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/vllm-emulator")
        .to_string_lossy()
        .into_owned();
    let emulator = Release::install(
        workload,
        &emulator_chart,
        &namespace,
        &[
            "-f",
            &values,
            "--set",
            "replicaCount=0",
            "--set",
            &format!("tokensPerSecond={TOKENS_PER_SECOND}"),
            "--set",
            &format!("loadSeconds={LOAD_SECONDS}"),
        ],
    )?;
    let workload_selector = format!("app.kubernetes.io/instance={workload}");
    let url = format!(
        "http://{}/v1/completions",
        SocketAddr::new(cluster_ip(&client, &namespace, workload).await?, PORT)
    );

    // 3. The scaler: queue metric, scale to zero with held requests.
    let spec = queue_scaler_spec(
        &prometheus.url(),
        deployment_ref(workload),
        tag,
        (0, 2),
        json!({
            "scaleToZero": {"holdRequests": true, "service": workload, "port": "http",
                            "maxHeldRequests": MAX_HELD, "holdTimeoutSeconds": 120},
            "scaleDown": {"stabilizationWindowSeconds": 3},
        }),
    );
    let scalers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &scaler_resource());
    scalers
        .patch(
            workload,
            &PatchParams::apply("e2e-activator").force(),
            &Patch::Apply(json!({
                "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
                "metadata": {"name": workload, "namespace": namespace}, "spec": spec,
            })),
        )
        .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &namespace);
    wait_route(&slices, workload, true).await?;

    let mut wakes = Vec::new();
    for (round, n) in [(1, MAX_HELD + 5), (2, MAX_HELD), (3, MAX_HELD)] {
        wait_no_pod(&pods, &workload_selector).await?;
        wait_routed(&slices, &namespace, workload).await?;
        let woken = when_spec_replicas(&client, &namespace, workload, 1);
        let sent = Instant::now();
        let outcome = burst(&url, n);
        tokio::pin!(outcome);
        let wake = tokio::select! {
            at = woken => (at?? - sent).as_secs_f64(),
            done = &mut outcome => anyhow::bail!("burst {round} ended before the wake-up: {done:?}"),
        };
        wakes.push(wake);
        // The load that keeps one replica while the burst is served.
        busy();
        let outcome = outcome.await;
        let held = n.min(MAX_HELD);
        let (ttft_min, ttft_max) = (
            outcome.ttft.iter().copied().fold(f64::INFINITY, f64::min),
            outcome.ttft.iter().copied().fold(0.0, f64::max),
        );
        measured(
            &format!(
                "activator on the real node, burst {round}: first request -> spec.replicas: 1 (s)"
            ),
            format!("{wake:.3}"),
        );
        measured(
            &format!("activator on the real node, burst {round}: sent / answered / 503 / failed"),
            format!(
                "{n} / {} / {} / {}",
                outcome.answered,
                outcome.refused,
                outcome.failed.len()
            ),
        );
        measured(
            &format!("activator on the real node, burst {round}: TTFT min..max (s)"),
            format!("{ttft_min:.2}..{ttft_max:.2}"),
        );
        ensure!(
            outcome.failed.is_empty(),
            "burst {round}: {:?}",
            outcome.failed
        );
        ensure!(
            outcome.answered == held,
            "burst {round}: {} of {held} held requests answered",
            outcome.answered
        );
        ensure!(
            outcome.refused == n - held,
            "burst {round}: {} refused, want {}",
            outcome.refused,
            n - held
        );
        // Held through the load: the first token comes after the start-up, not before.
        ensure!(
            ttft_min >= LOAD_SECONDS,
            "burst {round}: a first token after {ttft_min:.2} s, before the {LOAD_SECONDS} s load"
        );
        ensure!(
            wake <= 1.0,
            "burst {round}: woken {wake:.3} s after the first request"
        );
        // Streamed, not buffered: the events spread over the decode time.
        let decode = TOKENS as f64 / TOKENS_PER_SECOND as f64;
        ensure!(
            outcome.spread.iter().all(|s| *s >= decode * 0.5),
            "burst {round}: answers were buffered: {:?}",
            outcome.spread
        );
        // A replica is Ready: the activator is out of the path.
        wait_route(&slices, workload, false).await?;
        // Idle: back to zero, the route in place before the last pod left.
        idle();
        wait_route(&slices, workload, true).await?;
        wait_no_pod(&pods, &workload_selector).await?;
    }
    wakes.sort_by(f64::total_cmp);
    measured(
        "activator on the real node: wake-ups, sorted (s)",
        format!("{wakes:?}"),
    );

    scalers.delete(workload, &DeleteParams::default()).await?;
    wait_for("the LLMScaler to be gone", Duration::from_secs(60), || {
        let scalers = scalers.clone();
        async move {
            Ok(match scalers.get_opt(workload).await? {
                None => Check::Done(()),
                Some(s) => Check::NotYet(format!("{} still there", s.name_any())),
            })
        }
    })
    .await?;
    emulator.uninstall()?;
    installed.uninstall()?;
    drop(prometheus);
    ns.delete().await
}
