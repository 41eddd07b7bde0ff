//! llmscaler against a **real vLLM** (issue 22): the helm-installed operator image scales the
//! vLLM pods of `e2e/real-vllm up` (Deployment `vllm` in namespace `real-vllm` on the real node,
//! behind Service `vllm`, scraped per pod by a local Prometheus) on their own metrics, while a
//! load generator sends OpenAI completions (streaming and not) through the Service's ClusterIP.
//!
//! One story, in order (each pod takes minutes to load, so the phases share pods):
//! 1. saturating load scales 1 -> N on the `waiting` runtime signal; no scale-up compounds
//!    while replicas load (`startup.countStartingReplicas`), and `status.startupSeconds`
//!    reflects the real load time;
//! 2. one pod's vLLM process stopped (`SIGSTOP`): the fleet holds and `ScalingActive` names the
//!    pod;
//! 3. idle: a scale-down back to 1 under light streaming load with `scaleDown.drain`: 0 requests
//!    dropped or hung;
//! 4. the same without drain and with vLLM's default shutdown (`--shutdown-timeout 0`): what is
//!    lost is counted and printed (not asserted: it is the figure the page reports).
//!
//! Built only with `--features real-node`; run by `e2e/real-vllm-test`, which sets
//! `VLLM_PROMETHEUS_URL`. Every figure is printed as a `measured:` line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use llmscaler_e2e::fixture::{condition, install_crd, scaler_resource};
use llmscaler_e2e::operator::chart_dir;
use llmscaler_e2e::realnode::{
    NODE_VALUES, Release, container_process, measured, pod_ready, ready_pods,
    wait_admission_working,
};
use llmscaler_e2e::watch::{Recorder, timestamp};
use llmscaler_e2e::{Check, TestNamespace, client, wait_for};
use serde_json::{Value, json};

const NAMESPACE: &str = "real-vllm";
const NAME: &str = "vllm";
const SELECTOR: &str = "app=vllm";
const SERVED_MODEL: &str = "tiny-llama";
/// The most replicas the story asks for: 2 cores carry 3 tiny-model replicas (~3.2 GB each).
const MAX_REPLICAS: i32 = 3;
/// Time a pod may take to load (measured 2-4 min on 2 busy cores; the start-up probe allows 10).
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// What the load generator saw: successes, and failures by kind.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn fail(&self, kind: &str) {
        if let Ok(mut failed) = self.failed.lock() {
            *failed.entry(kind.to_string()).or_default() += 1;
        }
    }

    fn failed(&self) -> BTreeMap<String, u64> {
        self.failed.lock().map(|f| f.clone()).unwrap_or_default()
    }

    fn failed_total(&self) -> u64 {
        self.failed().values().sum()
    }
}

/// A closed-loop load: `workers` clients, of which the first `active` send one completion after
/// another (even ones streaming), 64-token prompts of token ids, `max_tokens` output tokens
/// (`ignore_eos`, so every request generates exactly that many). A streaming reply counts as
/// failed when it is not HTTP 200, carries an error event, ends before `data: [DONE]`, or stays
/// silent for 60 s (a hung stream).
struct Load {
    active: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    workers: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Load {
    fn start(url: &str, workers: usize, active: usize, max_tokens: u32) -> Self {
        let active = Arc::new(AtomicUsize::new(active));
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let handles = (0..workers)
            .map(|i| {
                let (active, stop, tally, url) =
                    (active.clone(), stop.clone(), tally.clone(), url.to_string());
                tokio::spawn(async move {
                    let http = reqwest::Client::builder()
                        .pool_max_idle_per_host(0)
                        .connect_timeout(Duration::from_secs(5))
                        .build()?;
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        if i >= active.load(Ordering::SeqCst) {
                            // An idle worker: wake to see whether it is needed again.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        n += 1;
                        let stream = i % 2 == 0;
                        let prompt: Vec<u64> = (0..64).map(|t| 10 + (t * 7 + n) % 4000).collect();
                        let body = json!({"model": SERVED_MODEL, "prompt": prompt,
                                          "max_tokens": max_tokens, "ignore_eos": true,
                                          "stream": stream});
                        match one_request(&http, &url, &body, stream).await {
                            Ok(()) => {
                                tally.ok.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(kind) => tally.fail(&kind),
                        }
                    }
                    anyhow::Ok(())
                })
            })
            .collect();
        Self {
            active,
            stop,
            tally,
            workers: handles,
        }
    }

    fn set_active(&self, n: usize) {
        self.active.store(n, Ordering::SeqCst);
    }

    async fn finish(self) -> anyhow::Result<Arc<Tally>> {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.workers {
            w.await??;
        }
        Ok(self.tally)
    }
}

/// One completion; `Err(kind)` names how it failed.
async fn one_request(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    stream: bool,
) -> Result<(), String> {
    let silence = Duration::from_secs(60);
    let sent = tokio::time::timeout(silence, http.post(url).json(body).send()).await;
    let mut resp = match sent {
        Err(_) => return Err("no response in 60 s".into()),
        Ok(Err(e)) if e.is_connect() => return Err("connect".into()),
        Ok(Err(_)) => return Err("request cut".into()),
        Ok(Ok(resp)) => resp,
    };
    if !resp.status().is_success() {
        return Err(format!("HTTP {}", resp.status().as_u16()));
    }
    let mut text = Vec::new();
    loop {
        match tokio::time::timeout(silence, resp.chunk()).await {
            Err(_) => return Err("hung (60 s without a byte)".into()),
            Ok(Err(_)) => return Err("body cut".into()),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => {
                if text.len() < 1 << 20 {
                    text.extend_from_slice(&chunk);
                }
            }
        }
    }
    let text = String::from_utf8_lossy(&text);
    if stream {
        if text.contains("\"error\"") {
            return Err("error event in stream".into());
        }
        if !text.contains("data: [DONE]") {
            return Err("stream ended before [DONE]".into());
        }
    } else if !text.contains("\"choices\"") {
        return Err("no choices in body".into());
    }
    Ok(())
}

/// The ClusterIP URL of the Service's completions endpoint.
async fn completions_url(client: &Client) -> anyhow::Result<String> {
    let service = Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .get(NAME)
        .await
        .context("Service real-vllm/vllm: run e2e/real-vllm up first")?;
    let ip: IpAddr = service
        .spec
        .and_then(|s| s.cluster_ip)
        .context("no ClusterIP")?
        .parse()?;
    Ok(format!(
        "http://{}/v1/completions",
        SocketAddr::new(ip, 8000)
    ))
}

/// The scaler of the story: the `waiting` signal (1 per pod: `--max-num-seqs 2` makes a queue
/// form at small load), a TTFT-p90 guardrail, every Ready pod required to report (`coverage`
/// 1, so a stopped pod holds the fleet), start-up awareness and, when `drain`, drain-first.
fn scaler(prometheus: &str, drain: bool, min_replicas: i32) -> Value {
    let mut scale_down = json!({"stabilizationWindowSeconds": 60});
    if drain {
        scale_down["drain"] = json!({"drainSeconds": 90});
    }
    json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
            "serverAddress": prometheus,
            "minReplicas": min_replicas,
            "maxReplicas": MAX_REPLICAS,
            "syncPeriodSeconds": 5,
            "metrics": [
                {"name": "waiting", "runtime": "vllm", "signal": "waiting", "target": "1",
                 "scrapeIntervalSeconds": 2, "coverage": "1"},
                {"name": "ttft", "runtime": "vllm", "signal": "ttftP90", "role": "Guardrail",
                 "target": "10", "scrapeIntervalSeconds": 2},
            ],
            "scaleDown": scale_down,
            "startup": {"initialSeconds": 180, "countStartingReplicas": true},
        }
    })
}

async fn apply_scaler(client: &Client, scaler: &Value) -> anyhow::Result<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &scaler_resource());
    let object: DynamicObject = serde_json::from_value(scaler.clone())?;
    api.patch(
        NAME,
        &PatchParams::apply("real-vllm-test").force(),
        &Patch::Apply(&object),
    )
    .await?;
    Ok(())
}

/// Seconds from each pod's creation to its `Ready` transition, for the pods created after
/// `since` that are Ready now.
async fn load_times(client: &Client, since: SystemTime) -> anyhow::Result<Vec<f64>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut times = Vec::new();
    for pod in pods.list(&ListParams::default().labels(SELECTOR)).await? {
        let Some(created) = pod.metadata.creation_timestamp.as_ref() else {
            continue;
        };
        let created = timestamp(&serde_json::to_value(created)?)?;
        if created < since || !pod_ready(&pod) {
            continue;
        }
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time.as_ref())
            .context("a Ready pod without a transition time")?;
        let ready = timestamp(&serde_json::to_value(ready)?)?;
        times.push(ready.duration_since(created)?.as_secs_f64());
    }
    Ok(times)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs e2e/cluster up --real-node and e2e/real-vllm up: run e2e/real-vllm-test"]
async fn real_vllm_scales_holds_and_drains() -> anyhow::Result<()> {
    let prometheus = std::env::var("VLLM_PROMETHEUS_URL")
        .context("VLLM_PROMETHEUS_URL is not set: run e2e/real-vllm-test")?;
    let client = client().await?;
    install_crd()?;
    let ops = TestNamespace::create(&client, "rvop").await?;
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("node.yaml");
    std::fs::write(&values, NODE_VALUES)?;
    let values = values.to_string_lossy().into_owned();
    let chart = chart_dir().to_string_lossy().into_owned();
    let installed = Release::install("rv", &chart, ops.name(), &["-f", &values])?;
    wait_admission_working(ops.name()).await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    ensure!(
        ready_pods(&pods, SELECTOR).await?.len() == 1,
        "the story starts from 1 Ready vLLM pod (e2e/real-vllm up 1)"
    );
    let url = completions_url(&client).await?;
    let probe = Load::start(&url, 1, 1, 4);
    wait_for("one completion through the Service", LOAD_TIMEOUT, || {
        let tally = probe.tally.clone();
        async move {
            Ok(if tally.ok.load(Ordering::SeqCst) > 0 {
                Check::Done(())
            } else {
                Check::NotYet(format!("failures {:?}", tally.failed()))
            })
        }
    })
    .await?;
    probe.finish().await?;

    // 1. Saturating load: 8 clients on one replica of 2 sequences -> a queue of ~6.
    let walk = Recorder::deployment(&client, NAMESPACE, NAME).await?;
    let status = Recorder::start(&client, NAMESPACE, &scaler_resource(), NAME).await?;
    let load = Load::start(&url, 8, 8, 64);
    apply_scaler(&client, &scaler(&prometheus, true, 1)).await?;
    let scale_start = SystemTime::now();
    let first_up = walk
        .wait_until("a scale-up above 1", Duration::from_secs(120), |v| {
            (v.replicas() > Some(1)).then(|| v.clone())
        })
        .await?;
    measured(
        "load -> first scale-up written (s)",
        format!(
            "{:.1}",
            first_up.seen_at.duration_since(scale_start)?.as_secs_f64()
        ),
    );
    let up_to = first_up.replicas().unwrap_or(1);
    // Until the replicas it asked for are Ready, the operator counts them as coming capacity:
    // spec.replicas must not climb again while they load.
    let ready = walk
        .wait_until("the new replicas Ready", LOAD_TIMEOUT, |v| {
            (v.ready_replicas() >= up_to).then(|| v.clone())
        })
        .await?;
    let loading: Vec<i32> = walk
        .versions()
        .iter()
        .filter(|v| v.seen_at >= first_up.seen_at && v.seen_at < ready.seen_at)
        .filter_map(|v| v.replicas())
        .collect();
    ensure!(
        loading.iter().all(|r| *r <= up_to),
        "spec.replicas climbed while the replicas it asked for loaded: {loading:?}"
    );
    let loaded = load_times(&client, scale_start).await?;
    measured("pods' creation -> Ready (s)", format!("{loaded:.0?}"));
    let startup = status
        .wait_until("status.startupSeconds", Duration::from_secs(60), |v| {
            v.get("/status/startupSeconds").as_i64()
        })
        .await?;
    measured("status.startupSeconds", startup);
    let slowest = loaded.iter().copied().fold(0.0, f64::max);
    ensure!(
        (startup as f64 - slowest).abs() <= (0.25 * slowest).max(20.0),
        "status.startupSeconds {startup} does not reflect the measured load time {slowest:.0} s"
    );
    // With the new replicas serving, a second step may follow (up to the maximum).
    let top = walk
        .wait_until("the fleet to settle under load", LOAD_TIMEOUT, |v| {
            let r = v.replicas()?;
            (v.ready_replicas() == r).then_some(r)
        })
        .await?;
    measured(
        "replica walk under saturating load",
        format!("{:?}", walk.replica_walk()?),
    );
    ensure!(top >= 2, "saturating load did not scale the fleet up");

    // 2. Coverage: one pod's vLLM stopped while the load stops: the fleet holds, the condition
    // names the pod (its series go stale at the next failed scrape; readiness notices later).
    load.set_active(0);
    let victim = ready_pods(&pods, SELECTOR)
        .await?
        .into_iter()
        .next()
        .context("no Ready pod")?;
    let container = victim
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.clone())
        .context("no container id")?;
    let pid = container_process(&container)?;
    let held_at = walk.latest().and_then(|v| v.replicas()).unwrap_or(top);
    let seen_before = walk.versions().len();
    let stopped = Instant::now();
    nix_signal(pid, "STOP")?;
    let named = status
        .wait_until(
            "ScalingActive to name the stopped pod",
            Duration::from_secs(60),
            |v| {
                let c = condition(v, "ScalingActive")?;
                let message = c.get("message")?.as_str()?.to_string();
                message.contains(&victim.name_any()).then_some(message)
            },
        )
        .await;
    let elapsed = stopped.elapsed().as_secs_f64();
    nix_signal(pid, "CONT")?;
    let named = named?;
    measured(
        "process stopped -> condition names the pod (s)",
        format!("{elapsed:.1}"),
    );
    eprintln!("ScalingActive: {named}");
    let lowest = walk.versions()[seen_before..]
        .iter()
        .filter_map(|v| v.replicas())
        .min()
        .unwrap_or(held_at);
    ensure!(
        lowest >= held_at,
        "the fleet went below {held_at} while a pod did not report"
    );

    // 3. Idle with one slow streaming client: back to 1 after the window, drained first.
    let drained = load.finish().await?;
    eprintln!(
        "saturating phase: {} ok, failed {:?}",
        drained.ok.load(Ordering::SeqCst),
        drained.failed()
    );
    wait_for("every pod Ready again", LOAD_TIMEOUT, || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get(NAME).await?;
            let want = d.spec.and_then(|s| s.replicas).unwrap_or(0);
            let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            Ok(if ready == want {
                Check::Done(())
            } else {
                Check::NotYet(format!("{ready} of {want} Ready"))
            })
        }
    })
    .await?;
    let light = Load::start(&url, 2, 2, 256);
    let down_start = Instant::now();
    walk.wait_until("the fleet back at 1", Duration::from_secs(600), |v| {
        (v.replicas() == Some(1)).then_some(())
    })
    .await?;
    wait_pod_count(&pods, 1, "the drained pods gone", Duration::from_secs(180)).await?;
    measured(
        "idle -> 1 pod left, with drain (s)",
        format!("{:.0}", down_start.elapsed().as_secs_f64()),
    );
    let with_drain = light.finish().await?;
    measured(
        "scale-down with drain: requests ok / failed",
        format!(
            "{} / {} {:?}",
            with_drain.ok.load(Ordering::SeqCst),
            with_drain.failed_total(),
            with_drain.failed()
        ),
    );
    ensure!(
        with_drain.failed_total() == 0,
        "the drained scale-down lost requests: {:?}",
        with_drain.failed()
    );

    // 4. Without drain, vLLM's default shutdown: pods on a template with --shutdown-timeout 0,
    // raised by minReplicas, then lowered under the same light load; what is lost is counted.
    let deployment = deployments.get(NAME).await?;
    let mut command = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.command.clone())
        .context("no command")?;
    let at = command
        .iter()
        .position(|a| a == "--shutdown-timeout")
        .context("no --shutdown-timeout")?;
    command[at + 1] = "0".into();
    deployments
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/template/spec/containers/0/command", "value": command}
            ]))?),
        )
        .await?;
    apply_scaler(&client, &scaler(&prometheus, false, 2)).await?;
    walk.wait_ready_replicas(2, LOAD_TIMEOUT).await?;
    wait_pod_count(&pods, 2, "the old-template pods gone", LOAD_TIMEOUT).await?;
    let light = Load::start(&url, 2, 2, 256);
    wait_for(
        "requests served on the new pods",
        Duration::from_secs(60),
        || {
            let tally = light.tally.clone();
            async move {
                Ok(if tally.ok.load(Ordering::SeqCst) >= 4 {
                    Check::Done(())
                } else {
                    Check::NotYet("warming".into())
                })
            }
        },
    )
    .await?;
    apply_scaler(&client, &scaler(&prometheus, false, 1)).await?;
    walk.wait_spec_replicas(1, Duration::from_secs(300)).await?;
    wait_pod_count(&pods, 1, "the removed pod gone", Duration::from_secs(120)).await?;
    // `finish` waits for every request in flight: one cut by the shutdown ends as a failure
    // (HTTP 500, a cut body or a stream silent for 60 s) before it returns.
    let without = light.finish().await?;
    measured(
        "scale-down without drain, --shutdown-timeout 0: requests ok / failed",
        format!(
            "{} / {} {:?}",
            without.ok.load(Ordering::SeqCst),
            without.failed_total(),
            without.failed()
        ),
    );

    let scalers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &scaler_resource());
    scalers.delete(NAME, &DeleteParams::default()).await?;
    wait_for("the LLMScaler to be gone", Duration::from_secs(60), || {
        let scalers = scalers.clone();
        async move {
            Ok(match scalers.get_opt(NAME).await? {
                None => Check::Done(()),
                Some(_) => Check::NotYet("still there".to_owned()),
            })
        }
    })
    .await?;
    installed.uninstall()?;
    ops.delete().await?;
    Ok(())
}

/// Waits until the workload has exactly `n` pods (Ready or not, terminating ones included).
async fn wait_pod_count(
    pods: &Api<Pod>,
    n: usize,
    what: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_for(what, timeout, || {
        let pods = pods.clone();
        async move {
            let found = pods
                .list(&ListParams::default().labels(SELECTOR))
                .await?
                .items
                .len();
            Ok(if found == n {
                Check::Done(())
            } else {
                Check::NotYet(format!("{found} pods"))
            })
        }
    })
    .await
}

/// Sends `SIG<signal>` to a host process with `kill` (the test runs as root beside the node).
fn nix_signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}
