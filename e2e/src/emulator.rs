//! The vLLM load emulator: one process that serves `/metrics` for every Ready pod of a target
//! workload, driven by a request trace replayed through the shared load model
//! (`llmscaler_loadmodel`), so that the operator scaling the workload changes the metrics it
//! reads: the loop is closed through the API server.
//!
//! - Pods are listed from the API server (namespace + label selector) every
//!   [`POD_POLL_INTERVAL`]. Without `service`, every Ready pod (`Ready` condition `True`, not
//!   being deleted) takes requests; a pod that goes away drains for the model's `drain_s`.
//! - With `service`, requests are routed as a gateway does, over the Service's EndpointSlices
//!   (label `kubernetes.io/service-name`): only to endpoints that are ready and belong to a live
//!   pod. A pod dropped from the endpoints (e.g. taken out of rotation by a drain) keeps serving
//!   what it holds and is still scraped; a pod deleted (or terminating) while it holds requests
//!   loses them after the model's `drain_s` (the termination grace; 0 = at once), counted as
//!   dropped in `/report`.
//! - The trace is replayed `speed` times faster than real time (model time is trace time).
//! - `/metrics` has one series per Ready pod, labelled `pod`, `namespace` and `app` (the pod's
//!   `app` label), under vLLM's names; `/report` is the run report as JSON; `/healthz` is 200.
//!
//! Trace data: see [`llmscaler_loadmodel::ATTRIBUTION`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use llmscaler_loadmodel::exposition::{self, Labels};
use llmscaler_loadmodel::{Fleet, Params, Replay, Report, Request};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the Ready pods are listed (wall time).
pub(crate) const POD_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The `model_name` label of the emulated replicas' series (real vLLM labels every series with
/// its `--served-model-name`).
pub(crate) const MODEL_NAME: &str = "emulated-llm";
/// How often the model is stepped to the current trace time (wall time).
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// What to replay against which pods.
#[derive(Clone, Debug)]
pub struct Config {
    /// Requests, sorted by arrival (trace seconds).
    pub requests: Vec<Request>,
    /// Trace seconds per wall second (> 0).
    pub speed: f64,
    /// Namespace of the pods.
    pub namespace: String,
    /// Label selector of the pods, e.g. `app=vllm`.
    pub selector: String,
    /// Route over this Service's EndpointSlices (as a gateway does) instead of over every Ready
    /// pod.
    pub service: Option<String>,
    /// The model's parameters.
    pub params: Params,
    /// Address to serve `/metrics` on (port 0 picks one).
    pub listen: SocketAddr,
}

/// What the emulator shows of itself, e.g. for a live line.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// Trace time, seconds (0 until the replay begins).
    pub t_s: f64,
    /// Requests that have arrived so far.
    pub arrived: u64,
    /// Ready pods (replicas taking requests), sorted.
    pub ready: Vec<String>,
    /// Waiting requests over all replicas (and the gateway).
    pub queue: usize,
    /// Waiting requests per Ready replica (NaN without Ready replicas), like
    /// `avg(vllm:num_requests_waiting)`.
    pub queue_per_replica: f64,
    /// Running requests per Ready replica (NaN without Ready replicas), like
    /// `avg(vllm:num_requests_running)`.
    pub running_per_replica: f64,
    /// Whether every request has arrived.
    pub trace_done: bool,
    /// The run report so far.
    pub report: Report,
}

struct Inner {
    fleet: Fleet,
    replay: Replay,
    /// The pods as last listed and their `app` label.
    pods: Listed,
    /// The pods the fleet last saw: (routable, alive).
    applied: (BTreeSet<String>, BTreeSet<String>),
    /// Whether routing follows a Service's EndpointSlices (then pods out of rotation are
    /// scraped too).
    by_service: bool,
    /// Wall instant at which trace time 0 was, once the replay has begun.
    began: Option<Instant>,
    speed: f64,
    namespace: String,
    /// Last error listing pods (cleared on success).
    list_error: Option<String>,
}

type Shared = Arc<Mutex<Inner>>;

fn lock(shared: &Shared) -> MutexGuard<'_, Inner> {
    // A panic while holding the lock leaves consistent-enough state for metrics.
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Inner {
    /// Steps the model to the current wall time: arrivals first, then the Ready set.
    fn tick(&mut self) {
        let t = self
            .began
            .map_or(0.0, |began| began.elapsed().as_secs_f64() * self.speed);
        if self.began.is_some() {
            self.replay.run_until(&mut self.fleet, t);
        }
        let seen = (
            self.pods.routable.clone(),
            self.pods.alive.keys().cloned().collect(),
        );
        if seen != self.applied {
            self.fleet
                .set_pods(t.max(self.fleet.now_s()), &seen.0, &seen.1);
            self.applied = seen;
        }
    }

    /// The replicas `/metrics` shows: with a Service, every live pod (in rotation or not), else
    /// the Ready ones.
    fn scraped(&self) -> Vec<llmscaler_loadmodel::ReplicaMetrics> {
        if self.by_service {
            self.fleet.metrics_alive()
        } else {
            self.fleet.metrics()
        }
    }

    fn status(&self) -> Status {
        let ready = self.fleet.ready_names();
        let metrics = self.scraped();
        let waiting: usize = metrics.iter().map(|m| m.waiting).sum();
        let running: usize = metrics.iter().map(|m| m.running).sum();
        let per_replica = |n: usize| {
            if ready.is_empty() {
                f64::NAN
            } else {
                n as f64 / ready.len() as f64
            }
        };
        Status {
            t_s: self.fleet.now_s(),
            arrived: self.fleet.report().arrived,
            queue_per_replica: per_replica(waiting),
            running_per_replica: per_replica(running),
            ready,
            queue: self.fleet.queue(),
            trace_done: self.replay.finished(),
            report: self.fleet.report(),
        }
    }

    fn metrics_text(&self) -> String {
        let series: Vec<(Labels, _)> = self
            .scraped()
            .into_iter()
            .map(|m| {
                let app = self.pods.alive.get(&m.name).cloned().unwrap_or_default();
                let labels = vec![
                    ("pod".to_string(), m.name.clone()),
                    ("namespace".to_string(), self.namespace.clone()),
                    ("app".to_string(), app),
                ];
                (labels, m)
            })
            .collect();
        let mut text = exposition::render(MODEL_NAME, &series);
        let report = self.fleet.report();
        text.push_str(&format!(
            "# HELP emulator_trace_seconds Trace time the emulator has replayed up to.\n\
             # TYPE emulator_trace_seconds gauge\nemulator_trace_seconds {}\n\
             # HELP emulator_requests_arrived_total Requests of the trace that have arrived.\n\
             # TYPE emulator_requests_arrived_total counter\nemulator_requests_arrived_total {}\n\
             # HELP emulator_requests_failed_total Requests killed by a scale-down (their pod deleted).\n\
             # TYPE emulator_requests_failed_total counter\nemulator_requests_failed_total {}\n\
             # HELP gateway_queue_size Requests the gateway holds for want of a Ready replica \
             (exists with zero pods: an activation signal).\n\
             # TYPE gateway_queue_size gauge\ngateway_queue_size{{namespace=\"{}\"}} {}\n",
            self.fleet.now_s(),
            report.arrived,
            report.failed,
            self.namespace,
            self.fleet.gateway_backlog()
        ));
        text
    }
}

/// A running emulator; its tasks stop on [`Emulator::stop`] or drop.
pub struct Emulator {
    /// Where `/metrics` is served.
    pub addr: SocketAddr,
    shared: Shared,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Emulator {
    /// Binds the listener, lists the pods once, and starts serving and polling; the replay
    /// itself starts at [`Emulator::begin`] (until then trace time stays 0).
    ///
    /// # Errors
    /// When the address cannot be bound or the first pod list fails.
    pub async fn start(client: Client, config: Config) -> anyhow::Result<Self> {
        anyhow::ensure!(
            config.speed.is_finite() && config.speed > 0.0,
            "--speed must be > 0, got {}",
            config.speed
        );
        let source = PodSource {
            pods: Api::namespaced(client.clone(), &config.namespace),
            slices: Api::namespaced(client, &config.namespace),
            params: ListParams::default().labels(&config.selector),
            service: config.service.clone(),
        };
        let first = source
            .list()
            .await
            .with_context(|| format!("listing pods {} in {}", config.selector, config.namespace))?;
        let shared: Shared = Arc::new(Mutex::new(Inner {
            fleet: Fleet::new(config.params),
            replay: Replay::new(config.requests),
            pods: first,
            applied: (BTreeSet::new(), BTreeSet::new()),
            by_service: config.service.is_some(),
            began: None,
            speed: config.speed,
            namespace: config.namespace.clone(),
            list_error: None,
        }));
        lock(&shared).tick();
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let app = Router::new()
            .route("/metrics", get(metrics_handler))
            .route("/report", get(report_handler))
            .route("/healthz", get(|| async { "ok" }))
            .with_state(shared.clone());
        let mut server_stop = stop_rx.clone();
        let server = tokio::spawn(async move {
            let shutdown = async move {
                let _ = server_stop.wait_for(|s| *s).await;
            };
            if let Err(err) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                eprintln!("vllm-emulator: server error: {err}");
            }
        });
        let poll_shared = shared.clone();
        let mut poll_stop = stop_rx.clone();
        let poller = tokio::spawn(async move {
            let mut interval = tokio::time::interval(POD_POLL_INTERVAL);
            loop {
                tokio::select! {
                    _ = interval.tick() => {}
                    _ = poll_stop.wait_for(|s| *s) => return,
                }
                let listed = source.list().await;
                let mut inner = lock(&poll_shared);
                match listed {
                    Ok(pods) => {
                        inner.pods = pods;
                        inner.list_error = None;
                    }
                    Err(err) => {
                        let text = format!("{err:#}");
                        if inner.list_error.as_ref() != Some(&text) {
                            eprintln!(
                                "vllm-emulator: listing pods failed (keeping the last list): {text}"
                            );
                        }
                        inner.list_error = Some(text);
                    }
                }
            }
        });
        let tick_shared = shared.clone();
        let mut tick_stop = stop_rx;
        let ticker = tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK);
            loop {
                tokio::select! {
                    _ = interval.tick() => {}
                    _ = tick_stop.wait_for(|s| *s) => return,
                }
                lock(&tick_shared).tick();
            }
        });
        Ok(Self {
            addr,
            shared,
            stop,
            tasks: vec![server, poller, ticker],
        })
    }

    /// Starts the replay clock now (trace time 0 = now); later calls do nothing.
    pub fn begin(&self) {
        let mut inner = lock(&self.shared);
        if inner.began.is_none() {
            inner.began = Some(Instant::now());
        }
    }

    /// The emulator's state now.
    pub fn status(&self) -> Status {
        lock(&self.shared).status()
    }

    /// The Prometheus text `/metrics` serves now.
    pub fn metrics_text(&self) -> String {
        lock(&self.shared).metrics_text()
    }

    /// Stops serving and polling, and waits for the tasks.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn metrics_handler(State(shared): State<Shared>) -> impl IntoResponse {
    let text = lock(&shared).metrics_text();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

async fn report_handler(State(shared): State<Shared>) -> impl IntoResponse {
    let status = lock(&shared).status();
    axum::Json(json!({
        "t_s": status.t_s,
        "dropped": status.report.failed,
        "ready": status.ready,
        "queue": status.queue,
        "trace_done": status.trace_done,
        "report": status.report,
        "attribution": llmscaler_loadmodel::ATTRIBUTION,
    }))
}

/// The pods as listed: the live ones (not being deleted) with their `app` label, and the ones
/// requests may go to.
#[derive(Clone, Debug, Default, PartialEq)]
struct Listed {
    alive: BTreeMap<String, String>,
    routable: BTreeSet<String>,
}

/// Where the pods and their routing come from.
struct PodSource {
    pods: Api<Pod>,
    slices: Api<EndpointSlice>,
    params: ListParams,
    service: Option<String>,
}

impl PodSource {
    /// Lists the pods and, with a Service, its EndpointSlices. Without a Service the routable
    /// pods are the Ready live ones, and only those count as alive (the model of old: a pod
    /// that stops being Ready drains for `drain_s`).
    async fn list(&self) -> anyhow::Result<Listed> {
        let list = self.pods.list(&self.params).await?;
        let live = list
            .items
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none());
        let Some(service) = &self.service else {
            let alive: BTreeMap<String, String> = live
                .filter(|pod| pod_ready(pod))
                .map(|pod| (pod.name_any(), app_of(pod)))
                .collect();
            let routable = alive.keys().cloned().collect();
            return Ok(Listed { alive, routable });
        };
        let alive: BTreeMap<String, String> =
            live.map(|pod| (pod.name_any(), app_of(pod))).collect();
        let slices = self
            .slices
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
            .await?;
        let routable = slices
            .items
            .iter()
            .flat_map(|slice| slice.endpoints.iter())
            .filter(|e| {
                // `ready` unset means ready (discovery.k8s.io/v1).
                e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)
            })
            .filter_map(|e| e.target_ref.as_ref())
            .filter(|r| r.kind.as_deref() == Some("Pod"))
            .filter_map(|r| r.name.clone())
            .filter(|name| alive.contains_key(name))
            .collect();
        Ok(Listed { alive, routable })
    }
}

fn app_of(pod: &Pod) -> String {
    pod.labels().get("app").cloned().unwrap_or_default()
}

/// Whether the pod's `Ready` condition is `True`.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conds| {
            conds
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Reads an Azure-format trace file and applies `--scale` with `seed`.
///
/// # Errors
/// When the file cannot be opened or parsed.
pub fn load_trace(path: &std::path::Path, scale: f64, seed: u64) -> anyhow::Result<Vec<Request>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("opening the trace {}", path.display()))?;
    let requests = llmscaler_loadmodel::trace::read_azure(std::io::BufReader::new(file))
        .with_context(|| format!("reading the trace {}", path.display()))?;
    Ok(llmscaler_loadmodel::trace::scale(&requests, scale, seed))
}

/// The load model's parameters as command-line flags (defaults of docs/load-model.md).
#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// Most sequences running at once per replica.
    #[arg(long, default_value_t = 64)]
    pub max_num_seqs: usize,
    /// KV-cache size per replica, tokens.
    #[arg(long, default_value_t = 250_000)]
    pub kv_capacity_tokens: u64,
    /// Prompt processing rate, tokens per second.
    #[arg(long, default_value_t = 12_000.0)]
    pub prefill_tokens_per_s: f64,
    /// Prompt tokens processed per step at most.
    #[arg(long, default_value_t = 2048)]
    pub prefill_chunk_tokens: u32,
    /// Fixed part of a step, seconds.
    #[arg(long, default_value_t = 0.012)]
    pub step_base_s: f64,
    /// Step time per running sequence, seconds.
    #[arg(long, default_value_t = 0.000_35)]
    pub step_per_seq_s: f64,
    /// Termination grace: how long a replica whose pod was deleted (or, without `--service`,
    /// stopped being Ready) keeps serving what it holds before dropping it, trace seconds.
    #[arg(long, default_value_t = 60.0)]
    pub drain_s: f64,
    /// TTFT objective of the report, seconds.
    #[arg(long, default_value_t = 2.0)]
    pub slo_ttft_s: f64,
}

impl ModelArgs {
    /// The model parameters.
    pub fn params(&self) -> Params {
        Params {
            max_num_seqs: self.max_num_seqs,
            kv_capacity_tokens: self.kv_capacity_tokens,
            prefill_tokens_per_s: self.prefill_tokens_per_s,
            prefill_chunk_tokens: self.prefill_chunk_tokens,
            step_base_s: self.step_base_s,
            step_per_seq_s: self.step_per_seq_s,
            // No per-request step cost: the emulator keeps the default profile.
            step_per_new_seq_s: Params::default().step_per_new_seq_s,
            drain_s: self.drain_s,
            slo_ttft_s: self.slo_ttft_s,
        }
    }
}
