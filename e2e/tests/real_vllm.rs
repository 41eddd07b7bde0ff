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
//! 3. a scale-down **with requests in flight on the pod removed**, with `scaleDown.drain` and
//!    `--shutdown-timeout 30`: [`CUT_CLIENTS`] (24) closed-loop clients (half streaming) keep
//!    every pod running and queueing long completions, then `maxReplicas` is cut to 1 (a
//!    lowered maximum is drained like any scale-down, docs/scale-down.md#drain). Asserted:
//!    every pod had requests running and waiting at the cut, the removed pods finished both
//!    streaming and non-streaming requests while they drained, and 0 requests failed or hung;
//! 4. the same cut without drain and with vLLM's default shutdown (`--shutdown-timeout 0`): the
//!    in-flight precondition is asserted (the removed pod had requests running when it was
//!    deleted); what is lost is counted per kind and printed (not asserted: it is the figure the
//!    page reports);
//! 5. the recommended objective file (`docs/examples/vllm-objective.yaml`, issue 23) on the one
//!    pod left, under saturating load: its `status.capacity` estimate, learned from the pod's
//!    own metrics, is within 15 % of the completions/s the clients measured on that pod; with
//!    room to grow, the objective raises the fleet.
//!
//! Which kind a pod served is read from its own `/metrics`: streaming requests ask for
//! [`STREAM_TOKENS`] and non-streaming ones for [`PLAIN_TOKENS`], which fall in different buckets
//! of `vllm:request_params_max_tokens` (recorded when a request finishes).
//!
//! Built only with `--features real-node`; run by `e2e/real-vllm-test`, which sets
//! `VLLM_PROMETHEUS_URL`. Every figure is printed as a `measured:` line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};
use llmscaler_api::names::{ROTATION_LABEL, ROTATION_OUT};
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
/// Time a pod may take to load (measured 2-4 min alone, over 10 min beside a saturated replica
/// on 2 busy cores; the start-up probe allows 20).
const LOAD_TIMEOUT: Duration = Duration::from_secs(1200);
/// Output tokens of a streaming request in the scale-down phases: in the bucket (20, 50] of
/// `vllm:request_params_max_tokens`. Short: on 2 busy cores a step took up to 0.2 s, and a
/// queue of 8 such requests must still answer within [`SILENCE`].
const STREAM_TOKENS: u32 = 48;
/// Output tokens of a non-streaming request in the scale-down phases: in the bucket (10, 20].
const PLAIN_TOKENS: u32 = 16;
/// The `le` bounds of the `vllm:request_params_max_tokens` buckets that hold each kind:
/// (below, at or above), indexed by [`Kind::index`].
const KIND_BUCKETS: [(&str, &str); 2] = [("20.0", "50.0"), ("10.0", "20.0")];
/// Closed-loop clients of the scale-down phases (half streaming): with `--max-num-seqs 2`, 2
/// pods run 2 requests each and queue about 10; the cut waits until every pod holds at least
/// [`CUT_IN_FLIGHT`], so the pod removed has both kinds in flight (a pod holding 6 requests
/// of one kind only: 2 x 2^-6, about 3 %).
const CUT_CLIENTS: usize = 24;
/// Requests every pod must hold (running + waiting) at the cut.
const CUT_IN_FLIGHT: f64 = 6.0;
/// How long a client waits for a byte before it counts the request as hung.
const SILENCE: Duration = Duration::from_secs(120);
/// Clients left sending after the cut (the others finish the request they have in flight), so
/// the one pod left is not swamped while the others are removed.
const AFTER_CUT_CLIENTS: usize = 4;

/// A request's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Streaming,
    Plain,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::Streaming, Kind::Plain];

    /// Worker `i` streams when `i` is even.
    fn of_worker(i: usize) -> Self {
        if i.is_multiple_of(2) {
            Kind::Streaming
        } else {
            Kind::Plain
        }
    }

    fn index(self) -> usize {
        match self {
            Kind::Streaming => 0,
            Kind::Plain => 1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Streaming => "streaming",
            Kind::Plain => "non-streaming",
        }
    }
}

/// Output tokens per request, by kind.
#[derive(Clone, Copy)]
struct Tokens {
    stream: u32,
    plain: u32,
}

impl Tokens {
    fn same(n: u32) -> Self {
        Self {
            stream: n,
            plain: n,
        }
    }

    fn of(self, kind: Kind) -> u32 {
        match kind {
            Kind::Streaming => self.stream,
            Kind::Plain => self.plain,
        }
    }
}

/// What the load generator saw, by kind: successes, requests in flight, failures by reason.
#[derive(Default)]
struct Tally {
    ok: [AtomicU64; 2],
    in_flight: [AtomicI64; 2],
    failed: Mutex<BTreeMap<(Kind, String), u64>>,
}

/// One kind's outcome: requests ok, failed (non-200, error event, stream cut before
/// `[DONE]`, a cut body), hung ([`SILENCE`] without a byte), and the failures by reason.
struct Outcome {
    ok: u64,
    failed: u64,
    hung: u64,
    reasons: BTreeMap<String, u64>,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ok / {} failed / {} hung {:?}",
            self.ok, self.failed, self.hung, self.reasons
        )
    }
}

impl Tally {
    fn fail(&self, kind: Kind, reason: &str) {
        if let Ok(mut failed) = self.failed.lock() {
            *failed.entry((kind, reason.to_string())).or_default() += 1;
        }
    }

    fn failed(&self) -> BTreeMap<(Kind, String), u64> {
        self.failed.lock().map(|f| f.clone()).unwrap_or_default()
    }

    fn failed_total(&self) -> u64 {
        self.failed().values().sum()
    }

    fn ok_total(&self) -> u64 {
        self.ok.iter().map(|n| n.load(Ordering::SeqCst)).sum()
    }

    fn in_flight(&self, kind: Kind) -> i64 {
        self.in_flight[kind.index()].load(Ordering::SeqCst)
    }

    fn outcome(&self, kind: Kind) -> Outcome {
        let reasons: BTreeMap<String, u64> = self
            .failed()
            .into_iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, reason), n)| (reason, n))
            .collect();
        let hung = reasons
            .iter()
            .filter(|(reason, _)| is_hang(reason))
            .map(|(_, n)| n)
            .sum();
        let failed = reasons.values().sum::<u64>() - hung;
        Outcome {
            ok: self.ok[kind.index()].load(Ordering::SeqCst),
            failed,
            hung,
            reasons,
        }
    }
}

/// Whether a failure reason of [`one_request`] is a hang (silence until the client gave up).
fn is_hang(reason: &str) -> bool {
    reason.starts_with("hung") || reason.starts_with("no response")
}

/// A closed-loop load: `workers` clients, of which the first `active` send one completion after
/// another (even ones streaming), 64-token prompts of token ids, `tokens` output tokens
/// (`ignore_eos`, so every request generates exactly that many). A reply counts as failed when
/// it is not HTTP 200, carries an error event, ends before `data: [DONE]` (streaming), or stays
/// silent for [`SILENCE`] (a hang).
struct Load {
    active: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    workers: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Load {
    fn start(url: &str, workers: usize, active: usize, tokens: Tokens) -> Self {
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
                    let kind = Kind::of_worker(i);
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        if i >= active.load(Ordering::SeqCst) {
                            // An idle worker: wake to see whether it is needed again.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        n += 1;
                        let stream = kind == Kind::Streaming;
                        let prompt: Vec<u64> = (0..64).map(|t| 10 + (t * 7 + n) % 4000).collect();
                        let body = json!({"model": SERVED_MODEL, "prompt": prompt,
                                          "max_tokens": tokens.of(kind), "ignore_eos": true,
                                          "stream": stream});
                        tally.in_flight[kind.index()].fetch_add(1, Ordering::SeqCst);
                        let result = one_request(&http, &url, &body, stream).await;
                        tally.in_flight[kind.index()].fetch_sub(1, Ordering::SeqCst);
                        match result {
                            Ok(()) => {
                                tally.ok[kind.index()].fetch_add(1, Ordering::SeqCst);
                            }
                            Err(reason) => tally.fail(kind, &reason),
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

    /// Stops sending and waits for every request in flight to end (in success or failure).
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
    let silence = SILENCE;
    let sent = tokio::time::timeout(silence, http.post(url).json(body).send()).await;
    let mut resp = match sent {
        Err(_) => return Err("no response in 120 s".into()),
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
            Err(_) => return Err("hung (120 s without a byte)".into()),
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
/// 1, so a stopped pod holds the fleet), start-up awareness, `min_replicas..=max_replicas`
/// replicas and, when `drain`, drain-first.
fn scaler(prometheus: &str, drain: bool, min_replicas: i32, max_replicas: i32) -> Value {
    let mut scale_down = json!({"stabilizationWindowSeconds": 60});
    if drain {
        scale_down["drain"] = json!({"drainSeconds": 120});
    }
    json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
            "serverAddress": prometheus,
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
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

/// What one pod's `/metrics` said: requests running and waiting, and requests finished so far
/// by kind (from the `vllm:request_params_max_tokens` buckets of [`KIND_BUCKETS`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Reading {
    running: f64,
    waiting: f64,
    finished: [f64; 2],
}

impl Reading {
    fn in_flight(&self) -> f64 {
        self.running + self.waiting
    }
}

/// Parses a vLLM exposition into a [`Reading`]; `None` when a family it needs is missing.
fn parse_reading(text: &str) -> Option<Reading> {
    let mut running = None;
    let mut waiting = None;
    let mut buckets: BTreeMap<&str, f64> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        match name {
            "vllm:num_requests_running" => running = Some(value),
            "vllm:num_requests_waiting" => waiting = Some(value),
            "vllm:request_params_max_tokens_bucket" => {
                if let Some(le) = series
                    .split("le=\"")
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                {
                    buckets.insert(le, value);
                }
            }
            _ => {}
        }
    }
    let mut finished = [0.0; 2];
    for kind in Kind::ALL {
        let (below, upto) = KIND_BUCKETS[kind.index()];
        finished[kind.index()] = buckets.get(upto)? - buckets.get(below)?;
    }
    Some(Reading {
        running: running?,
        waiting: waiting?,
        finished,
    })
}

/// One pod seen at one tick of the [`Sampler`].
#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    pod: String,
    /// Labelled out of the Service's rotation (a drain).
    out: bool,
    /// Has a deletion timestamp (the ReplicaSet removes it).
    deleting: bool,
    /// Its `/metrics`, read directly from the pod's address (`None`: no answer).
    reading: Option<Reading>,
}

/// Lists the workload's pods and reads each one's `/metrics` every 500 ms, from its own
/// address (not through Prometheus, whose 2 s scrapes are too coarse to see what a pod held at
/// the moment it left), until stopped.
struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Sampler {
    fn start(pods: &Api<Pod>) -> anyhow::Result<Self> {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let (pods, samples_w, stop_r) = (pods.clone(), samples.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !stop_r.load(Ordering::SeqCst) {
                // A failed list (the API server busy) loses one tick, not the measurement.
                let listed = match pods.list(&ListParams::default().labels(SELECTOR)).await {
                    Ok(listed) => listed.items,
                    Err(_) => Vec::new(),
                };
                let reads = listed.iter().map(|pod| {
                    let http = http.clone();
                    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
                    async move {
                        let ip = ip?;
                        let text = http
                            .get(format!("http://{ip}:8000/metrics"))
                            .send()
                            .await
                            .ok()?
                            .text()
                            .await
                            .ok()?;
                        parse_reading(&text)
                    }
                });
                let readings = futures::future::join_all(reads).await;
                let at = Instant::now();
                let tick: Vec<Sample> = listed
                    .iter()
                    .zip(readings)
                    .map(|(pod, reading)| Sample {
                        at,
                        pod: pod.name_any(),
                        out: pod.labels().get(ROTATION_LABEL).map(String::as_str)
                            == Some(ROTATION_OUT),
                        deleting: pod.metadata.deletion_timestamp.is_some(),
                        reading,
                    })
                    .collect();
                if let Ok(mut samples) = samples_w.lock() {
                    samples.extend(tick);
                }
                // The sampling interval (a measurement's resolution, not a wait for a condition).
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            anyhow::Ok(())
        });
        Ok(Self {
            samples,
            stop,
            task,
        })
    }

    fn samples(&self) -> Vec<Sample> {
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits until, at one tick, every pod in rotation and not being deleted reads at least
    /// `running` requests running and `waiting` waiting; returns that tick's readings.
    async fn wait_every_pod_busy(
        &self,
        pods: usize,
        running: f64,
        waiting: f64,
    ) -> anyhow::Result<BTreeMap<String, Reading>> {
        wait_for(
            &format!("every pod with >= {running} running and >= {waiting} waiting"),
            Duration::from_secs(180),
            || {
                let samples = self.samples();
                async move {
                    let Some(last) = samples.last().map(|s| s.at) else {
                        return Ok(Check::NotYet("no sample yet".into()));
                    };
                    let tick: BTreeMap<String, Option<Reading>> = samples
                        .iter()
                        .filter(|s| s.at == last && !s.out && !s.deleting)
                        .map(|s| (s.pod.clone(), s.reading))
                        .collect();
                    let busy: BTreeMap<String, Reading> = tick
                        .iter()
                        .filter_map(|(p, r)| {
                            r.filter(|r| r.running >= running && r.waiting >= waiting)
                                .map(|r| (p.clone(), r))
                        })
                        .collect();
                    Ok(if tick.len() == pods && busy.len() == pods {
                        Check::Done(busy)
                    } else {
                        Check::NotYet(format!("{tick:?}"))
                    })
                }
            },
        )
        .await
    }

    async fn finish(self) -> anyhow::Result<Vec<Sample>> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await??;
        Ok(self.samples.lock().map(|s| s.clone()).unwrap_or_default())
    }
}

/// What a removed pod held and did: its reading at the cut (the last tick before it left the
/// rotation or got its deletion timestamp) and its last reading of all.
#[derive(Debug)]
struct Removed {
    pod: String,
    at_cut: Reading,
    last: Reading,
}

impl Removed {
    /// Requests of `kind` the pod finished after the cut.
    fn finished_after(&self, kind: Kind) -> f64 {
        self.last.finished[kind.index()] - self.at_cut.finished[kind.index()]
    }
}

/// The pods removed after `cut` (out of rotation or deleted at a later tick), from `samples`.
fn removed_pods(samples: &[Sample], cut: Instant) -> anyhow::Result<Vec<Removed>> {
    let mut by_pod: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_pod.entry(&s.pod).or_default().push(s);
    }
    let mut removed = Vec::new();
    for (pod, seen) in by_pod {
        let Some(leaving) = seen
            .iter()
            .position(|s| s.at >= cut && (s.out || s.deleting))
        else {
            continue;
        };
        let at_cut = seen[..leaving]
            .iter()
            .rev()
            .find_map(|s| s.reading)
            .with_context(|| format!("pod {pod}: no reading before it left"))?;
        let last = seen.iter().rev().find_map(|s| s.reading).unwrap_or(at_cut);
        removed.push(Removed {
            pod: pod.to_string(),
            at_cut,
            last,
        });
    }
    Ok(removed)
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

/// The chart's operator, helm-installed on the real node in a namespace of its own.
struct Operator {
    ops: TestNamespace,
    installed: Release,
    _values: tempfile::TempDir,
}

impl Operator {
    async fn install(client: &Client) -> anyhow::Result<Self> {
        install_crd()?;
        let ops = TestNamespace::create(client, "rvop").await?;
        let dir = tempfile::tempdir()?;
        let values = dir.path().join("node.yaml");
        std::fs::write(&values, NODE_VALUES)?;
        let values = values.to_string_lossy().into_owned();
        let chart = chart_dir().to_string_lossy().into_owned();
        let installed = Release::install("rv", &chart, ops.name(), &["-f", &values])?;
        wait_admission_working(ops.name()).await?;
        Ok(Self {
            ops,
            installed,
            _values: dir,
        })
    }

    /// Deletes the LLMScaler (its finalizer puts drained pods back), then the release.
    async fn remove(self, client: &Client) -> anyhow::Result<()> {
        llmscaler_e2e::delete_scaler_and_wait(client, NAMESPACE, NAME).await?;
        self.installed.uninstall()?;
        self.ops.delete().await?;
        Ok(())
    }
}

/// Phases 1-2 (the module's doc). Runs first (`--test-threads 1`, name order) and leaves the
/// fleet it scaled up for [`real_vllm_2_drains_in_flight`].
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs e2e/cluster up --real-node and e2e/real-vllm up: run e2e/real-vllm-test"]
async fn real_vllm_1_scales_and_holds() -> anyhow::Result<()> {
    let prometheus = std::env::var("VLLM_PROMETHEUS_URL")
        .context("VLLM_PROMETHEUS_URL is not set: run e2e/real-vllm-test")?;
    let client = client().await?;
    let operator = Operator::install(&client).await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    ensure!(
        ready_pods(&pods, SELECTOR).await?.len() == 1,
        "the story starts from 1 Ready vLLM pod (e2e/real-vllm up 1)"
    );
    let url = completions_url(&client).await?;
    let probe = Load::start(&url, 1, 1, Tokens::same(4));
    wait_for("one completion through the Service", LOAD_TIMEOUT, || {
        let tally = probe.tally.clone();
        async move {
            Ok(if tally.ok_total() > 0 {
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
    let load = Load::start(&url, 8, 8, Tokens::same(64));
    apply_scaler(&client, &scaler(&prometheus, true, 1, MAX_REPLICAS)).await?;
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

    let saturating = load.finish().await?;
    eprintln!(
        "saturating phase: {} ok, failed {:?}",
        saturating.ok_total(),
        saturating.failed()
    );
    ensure!(
        saturating.failed_total() == 0,
        "the saturating phase lost requests: {:?}",
        saturating.failed()
    );
    operator.remove(&client).await
}

/// Phases 3-4 (the module's doc): scale-downs with requests in flight on the pods removed, with
/// and without drain. Starts from the fleet [`real_vllm_1_scales_and_holds`] left (at least 2
/// pods of the `e2e/real-vllm up` template, `--shutdown-timeout 30`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs e2e/cluster up --real-node and e2e/real-vllm up: run e2e/real-vllm-test"]
async fn real_vllm_2_drains_in_flight() -> anyhow::Result<()> {
    let prometheus = std::env::var("VLLM_PROMETHEUS_URL")
        .context("VLLM_PROMETHEUS_URL is not set: run e2e/real-vllm-test")?;
    // 3. A scale-down with requests in flight on the pods removed, drained: the fleet is held
    // where it is (no idle scale-down, no scale-up) while 16 clients fill every pod, then
    // maxReplicas is cut to 1.
    let client = client().await?;
    let operator = Operator::install(&client).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let url = completions_url(&client).await?;
    let walk = Recorder::deployment(&client, NAMESPACE, NAME).await?;
    // The fleet test 1 left (2 or 3), or 2 when run alone from 1 pod.
    let fleet = deployments
        .get(NAME)
        .await?
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(2);
    apply_scaler(&client, &scaler(&prometheus, true, fleet, fleet)).await?;
    wait_fleet(&pods, fleet, "30", 2 * LOAD_TIMEOUT).await?;
    let drained = cut_under_load(&client, &pods, &walk, &url, &prometheus, fleet, true).await?;
    drained.report("drain, --shutdown-timeout 30");
    ensure!(
        drained.removed.len() == usize::try_from(fleet - 1)?,
        "expected {} pods removed, saw {:?}",
        fleet - 1,
        drained.removed
    );
    for removed in &drained.removed {
        ensure!(
            removed.at_cut.running >= 1.0 && removed.at_cut.in_flight() >= 2.0,
            "pod {} had no requests in flight when it left the rotation: {:?}",
            removed.pod,
            removed.at_cut
        );
        ensure!(
            removed.last.in_flight() == 0.0,
            "pod {} still had requests in flight at its last reading: {:?}",
            removed.pod,
            removed.last
        );
    }
    for kind in Kind::ALL {
        let finished: f64 = drained.removed.iter().map(|r| r.finished_after(kind)).sum();
        ensure!(
            finished >= 1.0,
            "the removed pods finished no {} request while they drained: {:?}",
            kind.name(),
            drained.removed
        );
    }
    ensure!(
        drained.tally.failed_total() == 0,
        "the drained scale-down lost requests: {:?}",
        drained.tally.failed()
    );

    // 4. The same cut without drain and with vLLM's default shutdown: the pods are replaced by
    // ones started with --shutdown-timeout 0 (raised to 2 by minReplicas), filled, then cut.
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
    apply_scaler(&client, &scaler(&prometheus, false, 2, 2)).await?;
    let rollout = Instant::now();
    wait_fleet(&pods, 2, "0", Duration::from_secs(900)).await?;
    measured(
        "template change -> 2 pods with --shutdown-timeout 0 Ready (s)",
        format!("{:.0}", rollout.elapsed().as_secs_f64()),
    );
    let without = cut_under_load(&client, &pods, &walk, &url, &prometheus, 2, false).await?;
    without.report("no drain, --shutdown-timeout 0");
    ensure!(
        without.removed.len() == 1,
        "expected 1 pod removed, saw {:?}",
        without.removed
    );
    for removed in &without.removed {
        ensure!(
            removed.at_cut.running >= 1.0 && removed.at_cut.in_flight() >= 2.0,
            "pod {} had no requests in flight when it was deleted: {:?}",
            removed.pod,
            removed.at_cut
        );
    }

    operator.remove(&client).await
}

/// The recommended objective file, as a user applies it, with the story's names, Prometheus
/// and series, and `max_replicas`.
fn objective_scaler(prometheus: &str, max_replicas: i32) -> anyhow::Result<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/vllm-objective.yaml"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let mut scaler: Value = serde_yaml::from_str(&text)?;
    scaler["metadata"] = json!({"name": NAME, "namespace": NAMESPACE});
    scaler["spec"]["serverAddress"] = json!(prometheus);
    scaler["spec"]["maxReplicas"] = json!(max_replicas);
    scaler["spec"]["objective"]["seriesSelector"] =
        json!(format!("namespace=\"{NAMESPACE}\",app=\"{NAME}\""));
    Ok(scaler)
}

/// Phase 5 (the module's doc): the objective calibrates on a real vLLM pod. Starts from the one
/// pod [`real_vllm_2_drains_in_flight`] left (or `e2e/real-vllm up 1`). While `maxReplicas` is
/// 1 the pod stays saturated (8 closed-loop clients, `--max-num-seqs 2`: a queue of about 6) and
/// the operator learns its throughput; the clients count the same pod's completions. The
/// estimate is read once the load has run 4 minutes (a pod reading needs 2 minutes of queue and
/// 2 minutes of calibration, docs/objective.md#calibration) and its basis is `saturated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs e2e/cluster up --real-node and e2e/real-vllm up: run e2e/real-vllm-test"]
async fn real_vllm_3_objective_calibrates() -> anyhow::Result<()> {
    let prometheus = std::env::var("VLLM_PROMETHEUS_URL")
        .context("VLLM_PROMETHEUS_URL is not set: run e2e/real-vllm-test")?;
    let client = client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    wait_pod_count(&pods, 1, "1 vLLM pod", 2 * LOAD_TIMEOUT).await?;
    wait_for("the vLLM pod Ready", LOAD_TIMEOUT, || {
        let pods = pods.clone();
        async move {
            let ready = ready_pods(&pods, SELECTOR).await?.len();
            Ok(if ready == 1 {
                Check::Done(())
            } else {
                Check::NotYet(format!("{ready} Ready"))
            })
        }
    })
    .await?;
    let operator = Operator::install(&client).await?;
    let url = completions_url(&client).await?;
    let scalers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &scaler_resource());

    let load = Load::start(&url, 8, 8, Tokens::same(64));
    apply_scaler(&client, &objective_scaler(&prometheus, 1)?).await?;
    let started = Instant::now();
    // The clients' count from the first minute on (the queue formed, the batch full).
    let window = wait_for(
        "a minute of saturating load",
        Duration::from_secs(120),
        || {
            let tally = load.tally.clone();
            async move {
                Ok(if started.elapsed() >= Duration::from_secs(60) {
                    Check::Done((Instant::now(), tally.ok_total()))
                } else {
                    Check::NotYet(format!("{} ok so far", tally.ok_total()))
                })
            }
        },
    )
    .await?;
    let capacity = wait_for(
        "status.capacity saturated after 4 min of load",
        Duration::from_secs(600),
        || {
            let scalers = scalers.clone();
            async move {
                let status = scalers.get(NAME).await?.data["status"].clone();
                let capacity = status["capacity"].clone();
                Ok(
                    if started.elapsed() >= Duration::from_secs(240)
                        && capacity["basis"] == "saturated"
                    {
                        Check::Done(capacity)
                    } else {
                        Check::NotYet(capacity.to_string())
                    },
                )
            }
        },
    )
    .await?;
    let (from, ok_from) = window;
    #[allow(clippy::cast_precision_loss)]
    let measured_rps = (load.tally.ok_total() - ok_from) as f64 / from.elapsed().as_secs_f64();
    let estimate: f64 = capacity["requestsPerSecond"]
        .as_str()
        .context("no requestsPerSecond")?
        .parse()?;
    measured("status.capacity", &capacity);
    measured(
        "one real pod: clients' completions/s vs the estimate",
        format!(
            "{measured_rps:.3} vs {estimate:.3} ({:+.0} %)",
            100.0 * (estimate / measured_rps - 1.0)
        ),
    );
    ensure!(
        (estimate / measured_rps - 1.0).abs() <= 0.15,
        "the estimate {estimate:.3} requests/s is not within 15 % of the {measured_rps:.3} the \
         clients completed on the pod"
    );

    // Room to grow: the objective (and its TTFT guardrail) raise the saturated fleet.
    let walk = Recorder::deployment(&client, NAMESPACE, NAME).await?;
    apply_scaler(&client, &objective_scaler(&prometheus, MAX_REPLICAS)?).await?;
    let raised = walk
        .wait_until("a scale-up above 1", Duration::from_secs(120), |v| {
            (v.replicas() > Some(1)).then(|| v.clone())
        })
        .await?;
    measured(
        "objective: spec.replicas raised to",
        raised.replicas().unwrap_or(0),
    );
    let tally = load.finish().await?;
    ensure!(
        tally.failed_total() == 0,
        "the objective phase lost requests: {:?}",
        tally.failed()
    );
    operator.remove(&client).await
}

/// A scale-down measured under load (phases 3 and 4).
struct Cut {
    tally: Arc<Tally>,
    removed: Vec<Removed>,
    /// Every pod's reading at the tick that showed them all busy, just before the cut.
    busy: BTreeMap<String, Reading>,
    /// Requests the clients had in flight at the cut, by kind.
    client_in_flight: [i64; 2],
    /// From the cut to the removed pods gone.
    seconds: f64,
}

impl Cut {
    fn report(&self, case: &str) {
        let busy: Vec<String> = self
            .busy
            .iter()
            .map(|(p, r)| format!("{p} {}+{}", r.running, r.waiting))
            .collect();
        measured(
            &format!("{case}: every pod running+waiting before the cut"),
            busy.join(", "),
        );
        measured(
            &format!("{case}: client requests in flight at the cut"),
            format!(
                "{} streaming, {} non-streaming",
                self.client_in_flight[0], self.client_in_flight[1]
            ),
        );
        for removed in &self.removed {
            measured(
                &format!("{case}: removed pod {} at the cut", removed.pod),
                format!(
                    "{} running, {} waiting; finished after: {} streaming, {} non-streaming",
                    removed.at_cut.running,
                    removed.at_cut.waiting,
                    removed.finished_after(Kind::Streaming),
                    removed.finished_after(Kind::Plain)
                ),
            );
        }
        measured(
            &format!("{case}: cut -> removed pods gone (s)"),
            format!("{:.0}", self.seconds),
        );
        for kind in Kind::ALL {
            measured(
                &format!("{case}: {} requests", kind.name()),
                self.tally.outcome(kind),
            );
        }
    }
}

/// Fills every one of the `fleet` pods with [`CUT_CLIENTS`] closed-loop clients (half
/// streaming, [`STREAM_TOKENS`] / [`PLAIN_TOKENS`] output tokens), waits until each pod reads
/// requests running and waiting, cuts `maxReplicas` (and `minReplicas`) to 1, keeps
/// [`AFTER_CUT_CLIENTS`] sending until the removed pods are gone, and returns what the clients
/// and the pods saw.
async fn cut_under_load(
    client: &Client,
    pods: &Api<Pod>,
    walk: &Recorder,
    url: &str,
    prometheus: &str,
    fleet: i32,
    drain: bool,
) -> anyhow::Result<Cut> {
    let sampler = Sampler::start(pods)?;
    let load = Load::start(
        url,
        CUT_CLIENTS,
        CUT_CLIENTS,
        Tokens {
            stream: STREAM_TOKENS,
            plain: PLAIN_TOKENS,
        },
    );
    let busy = sampler
        .wait_every_pod_busy(usize::try_from(fleet)?, 1.0, CUT_IN_FLIGHT - 2.0)
        .await?;
    let client_in_flight = Kind::ALL.map(|k| load.tally.in_flight(k));
    let cut = Instant::now();
    apply_scaler(client, &scaler(prometheus, drain, 1, 1)).await?;
    load.set_active(AFTER_CUT_CLIENTS);
    walk.wait_spec_replicas(1, Duration::from_secs(300)).await?;
    wait_pod_count(pods, 1, "the removed pods gone", Duration::from_secs(180)).await?;
    let seconds = cut.elapsed().as_secs_f64();
    let samples = sampler.finish().await?;
    // `finish` waits for every request in flight: one cut by the shutdown ends as a failure
    // (HTTP 500, a cut body, or a stream silent for [`SILENCE`]) before it returns.
    let tally = load.finish().await?;
    let removed = removed_pods(&samples, cut)?;
    Ok(Cut {
        tally,
        removed,
        busy,
        client_in_flight,
        seconds,
    })
}

/// Waits until the workload has exactly `n` pods, every one Ready, in the Service's rotation,
/// not being deleted, and started with `--shutdown-timeout shutdown`.
async fn wait_fleet(
    pods: &Api<Pod>,
    n: i32,
    shutdown: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let what = format!("{n} Ready pods in rotation with --shutdown-timeout {shutdown}");
    wait_for(&what, timeout, || {
        let pods = pods.clone();
        async move {
            let listed = pods.list(&ListParams::default().labels(SELECTOR)).await?;
            let fit = |pod: &Pod| {
                let command = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.command.clone())
                    .unwrap_or_default();
                let flag = command
                    .iter()
                    .position(|a| a == "--shutdown-timeout")
                    .and_then(|i| command.get(i + 1));
                pod_ready(pod)
                    && pod.metadata.deletion_timestamp.is_none()
                    && pod.labels().get(ROTATION_LABEL).map(String::as_str) != Some(ROTATION_OUT)
                    && flag.map(String::as_str) == Some(shutdown)
            };
            let fitting = listed.items.iter().filter(|p| fit(p)).count();
            Ok(
                if listed.items.len() == usize::try_from(n)? && fitting == listed.items.len() {
                    Check::Done(())
                } else {
                    Check::NotYet(format!("{} pods, {fitting} fit", listed.items.len()))
                },
            )
        }
    })
    .await
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

/// [`parse_reading`] on a real exposition (the committed vLLM 0.32 fixture) and on buckets that
/// hold requests of both kinds.
#[test]
fn readings_of_real_vllm_metrics() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/vllm-0.32/saturated.txt");
    let text = std::fs::read_to_string(&fixture).unwrap();
    let reading = parse_reading(&text).unwrap();
    assert_eq!(reading.running, 2.0);
    assert_eq!(reading.waiting, 14.0);
    // Its one finished request asked for 8 tokens: neither kind.
    assert_eq!(reading.finished, [0.0, 0.0]);

    let mut lines = vec![
        "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0".to_string(),
        "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3.0".to_string(),
    ];
    for (le, n) in [("10.0", 4.0), ("20.0", 9.0), ("50.0", 16.0), ("+Inf", 16.0)] {
        lines.push(format!(
            "vllm:request_params_max_tokens_bucket{{engine=\"0\",le=\"{le}\",model_name=\"m\"}} {n}"
        ));
    }
    let reading = parse_reading(&lines.join("\n")).unwrap();
    assert_eq!(reading.in_flight(), 4.0);
    // 7 in (20, 50] (streaming, 48 tokens), 5 in (10, 20] (non-streaming, 16 tokens).
    assert_eq!(reading.finished, [7.0, 5.0]);
    assert!(Tokens::same(1).of(Kind::Streaming) == 1);
    assert!((21..=50).contains(&STREAM_TOKENS) && (11..=20).contains(&PLAIN_TOKENS));
    // A family missing: no reading.
    assert_eq!(parse_reading(&lines[1..].join("\n")), None);
}
