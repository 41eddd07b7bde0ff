//! `llmscaler-peers`: llmscaler and KEDA side by side on the same trace (issue 14 item 2, run by
//! `bench/peers`, page docs/benchmarks/peers.md).
//!
//! - `run --autoscaler llmscaler|keda`: on the local cluster of `e2e/cluster up`, a fresh
//!   namespace, a Deployment of kwok pods (the model's start-up time as kwok's pod-ready delay),
//!   the vLLM emulator replaying the Azure conversation trace at `--speed`, a real Prometheus
//!   scraping it, and either the operator with the recommended LLMScaler
//!   (docs/examples/vllm.yaml) or a KEDA ScaledObject (Prometheus triggers on the metrics of
//!   docs/examples/vllm-metrics.yaml, HPA defaults; KEDA from `e2e/keda up`, the HPA from the
//!   cluster's kube-controller-manager). Every period, window and rate is time-compressed by
//!   the same speed factor ([`compress`]). The object is applied to the idle fleet; the replay
//!   begins once it acts ([`wait_active`]) and ends at the last arrival plus the tail. Writes
//!   `<out>/<autoscaler>.json`: the settings, the figures (replica-seconds, TTFT SLO
//!   attainment, dropped requests, scale events) and the timeline.
//! - `predict`: the offline replay (`llmscaler simulate --requests`) of the same trace window with
//!   the uncompressed settings in trace time: the `llmscaler` row on vllm.yaml, the `keda` and
//!   `hpa` rows on vllm-metrics.yaml. Writes `<out>/replay.json`.
//! - `plot`: both fleets over the load, one PNG, from the two run files.
//!
//! Trace: Microsoft Azure, "Azure LLM inference trace 2023" (CC BY 4.0); Patel et al.,
//! "Splitwise", ISCA 2024.

mod compress;
mod plot;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use llmscaler_e2e::emulator::{Emulator, ModelArgs, load_trace};
use llmscaler_e2e::fixture::{install_crd, scaler_resource};
use llmscaler_e2e::operator::{Operator, Rbac};
use llmscaler_e2e::prometheus::Prometheus;
use llmscaler_e2e::session::{self, Started};
use llmscaler_e2e::watch::{Recorder, Version};
use llmscaler_e2e::{Check, wait_for};
use llmscaler_loadmodel::{ATTRIBUTION, Request};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use compress::Compression;

/// llmscaler and KEDA side by side on the same trace.
#[derive(Parser, Debug)]
#[command(name = "llmscaler-peers", about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One autoscaler on the cluster: writes `<out>/<autoscaler>.json`.
    Run(RunArgs),
    /// The offline replay of the same settings: writes `<out>/replay.json`.
    Predict(Common),
    /// Both fleets over the load: reads `<out>/{llmscaler,keda}.json`, writes `<out>/fleets.png`.
    Plot {
        /// Directory of the run files.
        #[arg(long)]
        out: PathBuf,
    },
}

/// The autoscaler of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Autoscaler {
    /// The operator with the recommended LLMScaler.
    Llmscaler,
    /// A KEDA ScaledObject (Prometheus triggers) and the HPA it creates.
    Keda,
}

impl Autoscaler {
    fn as_str(self) -> &'static str {
        match self {
            Autoscaler::Llmscaler => "llmscaler",
            Autoscaler::Keda => "keda",
        }
    }
}

/// What both runs and the replay share.
#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Azure-format trace to replay.
    #[arg(long)]
    trace: PathBuf,
    /// Trace seconds per wall second; every period, window and rate of both autoscalers is
    /// divided by it (15: HPA sync 1 s, KEDA polling 2 s, windows of 300 s → 20 s).
    #[arg(long, default_value_t = 15.0)]
    speed: f64,
    /// Arrival-rate factor of the trace.
    #[arg(long, default_value_t = 3.0)]
    scale: f64,
    /// Seed of `--scale`.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replay the trace's first this many seconds (default: all of it).
    #[arg(long)]
    trace_seconds: Option<f64>,
    /// The LLMScaler of the llmscaler run (trace-time settings).
    #[arg(long, default_value = "docs/examples/vllm.yaml")]
    scaler_file: PathBuf,
    /// The LLMScaler whose metrics the KEDA ScaledObject (and the replay's `hpa` and `keda`
    /// rows) run on.
    #[arg(long, default_value = "docs/examples/vllm-metrics.yaml")]
    metrics_file: PathBuf,
    /// Replicas of the Deployment at the start (before the autoscaler takes over).
    #[arg(long, default_value_t = 4)]
    initial_replicas: i32,
    /// Model start-up time, trace seconds (kwok's pod-ready delay is this ÷ `--speed`).
    #[arg(long, default_value_t = 90.0)]
    startup_trace_seconds: f64,
    /// Prometheus scrape interval, wall milliseconds.
    #[arg(long, default_value_t = 500)]
    scrape_interval_ms: u64,
    /// Wall seconds to keep going after the last arrival.
    #[arg(long, default_value_t = 30)]
    tail_seconds: u64,
    /// Output directory.
    #[arg(long, default_value = "peers-out")]
    out: PathBuf,
    #[command(flatten)]
    model: ModelArgs,
}

impl Common {
    fn compression(&self) -> Compression {
        Compression { speed: self.speed }
    }

    /// The requests replayed: the trace after `--scale`, up to `--trace-seconds`.
    fn requests(&self) -> anyhow::Result<(Vec<Request>, f64)> {
        let requests = load_trace(&self.trace, self.scale, self.seed)?;
        let span = requests.last().map_or(0.0, |r| r.arrival_s);
        let end = self.trace_seconds.unwrap_or(span).min(span);
        let served: Vec<Request> = requests
            .into_iter()
            .filter(|r| r.arrival_s <= end)
            .collect();
        Ok((served, end))
    }

    fn settings(&self, end_trace_s: f64) -> Value {
        let c = self.compression();
        json!({
            "trace": self.trace.file_name().and_then(|n| n.to_str()).unwrap_or("trace"),
            "trace_seconds": end_trace_s,
            "speed": self.speed,
            "scale": self.scale,
            "seed": self.seed,
            "initial_replicas": self.initial_replicas,
            "startup_trace_seconds": self.startup_trace_seconds,
            "scrape_interval_wall_seconds": self.scrape_interval_ms as f64 / 1000.0,
            "scrape_interval_trace_seconds": self.scrape_interval_ms as f64 / 1000.0 * self.speed,
            "tail_wall_seconds": self.tail_seconds,
            "slo_ttft_seconds": self.model.slo_ttft_s,
            "termination_grace_trace_seconds": self.model.drain_s,
            "hpa_sync_wall_seconds": c.wall_seconds(15),
            "keda_polling_wall_seconds": c.wall_seconds(30),
        })
    }
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Which autoscaler.
    #[arg(long, value_enum)]
    autoscaler: Autoscaler,
    /// Namespace of the run (deleted first if it exists, and at the end).
    #[arg(long, default_value = "peers")]
    namespace: String,
    #[command(flatten)]
    common: Common,
}

/// Name of the inference Deployment (and its `app` label, which the queries select).
const WORKLOAD: &str = "vllm";
/// Helm release name of the operator's RBAC.
const RELEASE: &str = "llmscaler-peers";
/// Field manager of what this program applies.
const MANAGER: &str = "llmscaler-peers";

fn main() -> ExitCode {
    llmscaler::process::run(llmscaler::process::LogFormat::Text, |shutdown| async move {
        match Cli::parse().command {
            Command::Run(args) => run_main(args, shutdown).await,
            Command::Predict(common) => predict(&common),
            Command::Plot { out } => plot::draw(&out),
        }
    })
}

fn progress(message: &str) {
    eprintln!("==> {message}");
}

async fn run_main(args: RunArgs, shutdown: llmscaler::process::Shutdown) -> anyhow::Result<()> {
    let mut started = Started::default();
    let result = tokio::select! {
        r = run(&args, &mut started) => r,
        () = shutdown.requested() => Err(anyhow::anyhow!("interrupted by a signal")),
    };
    started.cleanup("llmscaler-peers").await;
    result
}

/// Reads an LLMScaler manifest (YAML) as JSON.
fn read_manifest(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

async fn run(args: &RunArgs, started: &mut Started) -> anyhow::Result<()> {
    let common = &args.common;
    let c = common.compression();
    let (requests, end_trace_s) = common.requests()?;
    progress(&format!(
        "{}: trace {} ({} requests, {:.1} trace min at scale {}), speed {} ({:.1} wall min)",
        args.autoscaler.as_str(),
        common.trace.display(),
        requests.len(),
        end_trace_s / 60.0,
        common.scale,
        common.speed,
        end_trace_s / common.speed / 60.0
    ));
    let client = llmscaler_e2e::client().await?;
    started.client = Some(client.clone());
    let ns = args.namespace.as_str();
    if args.autoscaler == Autoscaler::Llmscaler {
        install_crd()?;
    }
    session::fresh_namespace(&client, ns, MANAGER).await?;
    started.namespace = Some(ns.to_string());

    let initial = common.initial_replicas.max(1);
    let deployment = session::workload(
        ns,
        WORKLOAD,
        initial,
        common.startup_trace_seconds,
        common.speed,
    );
    session::apply_as(MANAGER, &deployment)?;
    session::wait_ready(&client, ns, WORKLOAD, initial).await?;

    let emulator = session::start_emulator(
        &client,
        ns,
        WORKLOAD,
        requests.clone(),
        common.speed,
        common.model.params(),
    )
    .await?;
    let emulator_addr = emulator.addr;
    started.emulator = Some(emulator);
    let prometheus = Prometheus::start_every(
        emulator_addr,
        Duration::from_millis(common.scrape_interval_ms),
    )
    .await?;
    let prometheus_url = prometheus.url();
    started.prometheus = Some(prometheus);

    let object = match args.autoscaler {
        Autoscaler::Llmscaler => {
            let rbac_port = llmscaler_e2e::free_port()?;
            let rbac = Rbac::helm_install(RELEASE, ns, rbac_port)?;
            let kubeconfig = rbac.kubeconfig.clone();
            started.rbac = Some(rbac);
            let fullname = Rbac::service_account(RELEASE);
            let operator = Operator::start(
                &kubeconfig,
                ns,
                "peers",
                &[
                    &format!("--webhook-listen=127.0.0.1:{rbac_port}"),
                    "--webhook-extra-san=127.0.0.1",
                    &format!("--cert-secret={fullname}-webhook-tls"),
                    &format!("--webhook-service={fullname}"),
                    &format!("--validating-webhook-configuration={fullname}"),
                    &format!("--mutating-webhook-configuration={fullname}"),
                ],
            )
            .await?;
            started.operator = Some(operator);
            c.llmscaler(&read_manifest(&common.scaler_file)?, ns, &prometheus_url)?
        }
        Autoscaler::Keda => c.scaled_object(
            &read_manifest(&common.metrics_file)?,
            ns,
            WORKLOAD,
            &prometheus_url,
        )?,
    };
    progress(&format!(
        "{} to apply:\n{}",
        object["kind"].as_str().unwrap_or("object"),
        serde_yaml::to_string(&object).unwrap_or_default()
    ));

    let recorder = Recorder::deployment(&client, ns, WORKLOAD).await?;
    let Some(emulator) = started.emulator.as_ref() else {
        anyhow::bail!("the emulator is not running");
    };
    // The run ends where the offline replay ends: the last arrival plus the tail.
    let horizon_s =
        requests.last().map_or(0.0, |r| r.arrival_s) + common.tail_seconds as f64 * common.speed;
    let (timeline, began, wall_s) = replay(emulator, &client, ns, horizon_s, &object).await?;
    let status = emulator.status();
    let report = status.report;
    let measured = measure(
        &recorder.versions(),
        began,
        common.speed,
        horizon_s,
        &report,
        status.ready.len(),
    );
    let out = json!({
        "autoscaler": args.autoscaler,
        "attribution": ATTRIBUTION,
        "settings": common.settings(end_trace_s),
        "object": object,
        "wall_seconds": wall_s,
        "measured": measured,
        "emulator_report": report,
        "timeline": timeline,
    });
    std::fs::create_dir_all(&common.out)?;
    let path = common
        .out
        .join(format!("{}.json", args.autoscaler.as_str()));
    std::fs::write(&path, serde_json::to_string_pretty(&out)?)?;
    progress(&format!(
        "{}: {}; wrote {}",
        args.autoscaler.as_str(),
        serde_json::to_string(&measured)?,
        path.display()
    ));
    Ok(())
}

/// One observation of the run (every wall second).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Sample {
    /// Trace time, seconds.
    t_s: f64,
    /// Arrivals per trace second since the previous sample.
    requests_per_s: f64,
    /// `spec.replicas`.
    replicas: i32,
    /// `status.readyReplicas`.
    ready: i32,
    /// Waiting requests per Ready replica.
    queue: f64,
    /// Running requests per Ready replica.
    running: f64,
}

/// Replays the trace: applies `object` when the replay begins, samples every wall second, stops
/// at the first sample at or after trace second `horizon_s`. Returns the samples, the wall time
/// the replay began and the wall seconds it took.
async fn replay(
    emulator: &Emulator,
    client: &Client,
    ns: &str,
    horizon_s: f64,
    object: &Value,
) -> anyhow::Result<(Vec<Sample>, SystemTime, f64)> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    session::apply_as(MANAGER, object)?;
    let waited = Instant::now();
    wait_active(client, ns, object).await?;
    progress(&format!(
        "{} active after {:.1} s (idle load); the replay begins",
        object["kind"].as_str().unwrap_or("object"),
        waited.elapsed().as_secs_f64()
    ));
    emulator.begin();
    let began = SystemTime::now();
    let wall_start = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    let mut last = (0.0f64, 0u64);
    loop {
        interval.tick().await;
        let status = emulator.status();
        let (replicas, ready) = match deployments.get(WORKLOAD).await {
            Ok(d) => (
                d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
                d.status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0),
            ),
            Err(err) => {
                eprintln!("llmscaler-peers: reading the Deployment: {err}");
                continue;
            }
        };
        let dt = status.t_s - last.0;
        let rate = if dt > 0.0 {
            (status.arrived - last.1) as f64 / dt
        } else {
            0.0
        };
        last = (status.t_s, status.arrived);
        samples.push(Sample {
            t_s: status.t_s,
            requests_per_s: rate,
            replicas,
            ready,
            queue: status.queue_per_replica,
            running: status.running_per_replica,
        });
        if samples.len() % 10 == 1 {
            println!(
                "{:>5.0}s wall  {:>6.1} trace min  {:>6.1} req/s  queue {:>6.2}  running {:>5.1}  ready {:>3}  replicas {:>3}",
                wall_start.elapsed().as_secs_f64(),
                status.t_s / 60.0,
                rate,
                status.queue_per_replica,
                status.running_per_replica,
                ready,
                replicas
            );
        }
        if status.t_s >= horizon_s {
            break;
        }
    }
    Ok((samples, began, wall_start.elapsed().as_secs_f64()))
}

/// How long [`wait_active`] waits.
const ACTIVE_DEADLINE: Duration = Duration::from_secs(90);

/// Waits until the autoscaler acts on the workload, so that neither run pays its start-up in
/// trace time: the LLMScaler has a `status.desiredReplicas` (one sync done); KEDA's HPA
/// (`keda-hpa-<name>`) reports `ScalingActive` True (its metrics were read once). Both see the
/// idle fleet meanwhile; their scale-down windows (20 s wall) start with the current replicas,
/// so neither scales down before the load arrives.
async fn wait_active(client: &Client, ns: &str, object: &Value) -> anyhow::Result<()> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let (resource, name, ready): (ApiResource, String, fn(&DynamicObject) -> bool) =
        if object["kind"] == "LLMScaler" {
            (scaler_resource(), name.to_string(), |o| {
                o.data["status"]["desiredReplicas"].is_i64()
            })
        } else {
            (
                ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"),
                    "horizontalpodautoscalers",
                ),
                format!("keda-hpa-{name}"),
                |o| {
                    o.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "ScalingActive" && c["status"] == "True")
                },
            )
        };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    wait_for(
        &format!("{} {name} active", resource.kind),
        ACTIVE_DEADLINE,
        || async {
            Ok(match api.get_opt(&name).await? {
                Some(o) if ready(&o) => Check::Done(()),
                Some(o) => Check::NotYet(format!("status {}", o.data["status"])),
                None => Check::NotYet("not created yet".to_string()),
            })
        },
    )
    .await
}

/// The figures of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Measured {
    /// `spec.replicas` integrated from the start of the replay to the horizon (every version the
    /// watch saw), trace seconds: pods paid for, starting or Ready.
    replica_seconds: f64,
    /// Ready replicas integrated up to the horizon (the emulator's count; its overshoot past the
    /// horizon, at most one sample, taken off at the Ready count of the end), trace seconds.
    ready_replica_seconds: f64,
    /// Share (0..1) of arrived requests with a TTFT within the objective (dropped and
    /// never-served requests are misses), as the offline replay counts it.
    slo_attainment: f64,
    /// TTFT objective, seconds.
    slo_ttft_seconds: f64,
    /// TTFT p50 / p95 / p99 of served requests, seconds.
    ttft_p50_seconds: f64,
    ttft_p95_seconds: f64,
    ttft_p99_seconds: f64,
    /// Requests arrived.
    requests_arrived: u64,
    /// Requests lost to a scale-down (in flight on a removed pod at the end of its grace).
    requests_dropped: u64,
    /// Requests not served by the end of the run.
    requests_unserved: u64,
    /// Writes of `spec.replicas` that raised it.
    scale_ups: u64,
    /// Writes of `spec.replicas` that lowered it.
    scale_downs: u64,
    /// Largest `spec.replicas`.
    peak_replicas: i32,
    /// Trace seconds the run covered (replay start to the horizon: last arrival + tail).
    trace_seconds_run: f64,
}

fn measure(
    versions: &[Version],
    began: SystemTime,
    speed: f64,
    end_s: f64,
    report: &llmscaler_loadmodel::Report,
    ready_at_end: usize,
) -> Measured {
    let to_trace = |at: SystemTime| {
        at.duration_since(began)
            .map_or(0.0, |d| d.as_secs_f64() * speed)
    };
    // (trace second, spec.replicas) of each version that changed it.
    let mut steps: Vec<(f64, i32)> = Vec::new();
    for v in versions {
        let Some(r) = v.replicas() else { continue };
        let t = to_trace(v.seen_at);
        if t > end_s {
            break;
        }
        if steps.last().is_none_or(|&(_, prev)| prev != r) {
            steps.push((t, r));
        }
    }
    let (mut ups, mut downs) = (0, 0);
    for w in steps.windows(2) {
        if w[1].1 > w[0].1 {
            ups += 1;
        } else {
            downs += 1;
        }
    }
    let mut replica_seconds = 0.0;
    for (i, &(t, r)) in steps.iter().enumerate() {
        let until = steps.get(i + 1).map_or(end_s, |n| n.0);
        replica_seconds += (until - t).max(0.0) * f64::from(r);
    }
    let served_share = report.served as f64 / report.arrived.max(1) as f64;
    // The emulator integrates up to its last step, at most one sample past the horizon.
    let overshoot = (report.trace_seconds - end_s).max(0.0) * ready_at_end as f64;
    Measured {
        replica_seconds,
        ready_replica_seconds: report.replica_seconds - overshoot,
        slo_attainment: if report.arrived == 0 {
            1.0
        } else {
            report.ttft_slo_share * served_share
        },
        slo_ttft_seconds: report.slo_ttft_s,
        ttft_p50_seconds: report.ttft_p50_s,
        ttft_p95_seconds: report.ttft_p95_s,
        ttft_p99_seconds: report.ttft_p99_s,
        requests_arrived: report.arrived,
        requests_dropped: report.failed,
        requests_unserved: report.arrived.saturating_sub(report.served),
        scale_ups: ups,
        scale_downs: downs,
        peak_replicas: steps.iter().map(|s| s.1).max().unwrap_or(0),
        trace_seconds_run: end_s,
    }
}

/// The offline replay of the same trace window and settings, in trace time (uncompressed:
/// sync 15 s, windows as in the manifests, the scrape interval × `--speed`), starting from
/// `--initial-replicas`, with the run's tail × `--speed`.
fn predict(common: &Common) -> anyhow::Result<()> {
    use llmscaler::simulate::compare::{Comparator, Options, run};
    let (requests, end_trace_s) = common.requests()?;
    let load = |path: &Path| -> anyhow::Result<llmscaler_api::LLMScaler> {
        let mut manifest = read_manifest(path)?;
        manifest["metadata"]["namespace"] = json!("peers");
        let mut scaler: llmscaler_api::LLMScaler = serde_json::from_value(manifest)
            .with_context(|| format!("{} is not an LLMScaler", path.display()))?;
        llmscaler_api::apply_defaults(&mut scaler.spec);
        Ok(scaler)
    };
    let scaler = load(&common.scaler_file)?;
    let comparators = load(&common.metrics_file)?;
    let options = Options {
        startup_seconds: common.startup_trace_seconds,
        slo_ttft_seconds: common.model.slo_ttft_s,
        scrape_interval_seconds: common.scrape_interval_ms as f64 / 1000.0 * common.speed,
        initial_replicas: Some(common.initial_replicas.max(1)),
        compare: vec![Comparator::Hpa, Comparator::Keda],
        tail_seconds: common.tail_seconds as f64 * common.speed,
        termination_grace_seconds: common.model.drain_s,
        comparators_scaler: Some(comparators),
        model_name: None,
        // The live fleet's pod template states no `--max-num-seqs`; nor does the replay's.
        state_max_num_seqs: false,
    };
    let started = Instant::now();
    let report = run(&scaler, &requests, &options, common.scale, common.seed)?;
    progress(&format!(
        "offline replay of {:.1} trace min in {:.1} s",
        end_trace_s / 60.0,
        started.elapsed().as_secs_f64()
    ));
    std::fs::create_dir_all(&common.out)?;
    let path = common.out.join("replay.json");
    let timelines: serde_json::Map<String, Value> = report
        .timelines
        .iter()
        .map(|(name, points)| {
            let points: Vec<Value> = points
                .iter()
                .map(|p| json!({"t_s": p.t_s, "replicas": p.replicas, "ready": p.ready}))
                .collect();
            (name.clone(), Value::Array(points))
        })
        .collect();
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({
            "settings": common.settings(end_trace_s),
            "report": report,
            "timelines": timelines,
        }))?,
    )?;
    progress(&format!("wrote {}", path.display()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(at: SystemTime, replicas: i32, rv: u32) -> Version {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "vllm", "resourceVersion": rv.to_string()},
            "spec": {"replicas": replicas},
        }))
        .expect("object");
        Version {
            object,
            seen_at: at,
        }
    }

    fn report(
        arrived: u64,
        served: u64,
        share: f64,
        trace_s: f64,
        ready_s: f64,
    ) -> llmscaler_loadmodel::Report {
        llmscaler_loadmodel::Report {
            trace_seconds: trace_s,
            replica_seconds: ready_s,
            arrived,
            served,
            failed: 1,
            in_flight: 0,
            ttft_p50_s: 0.1,
            ttft_p95_s: 0.2,
            ttft_p99_s: 0.3,
            slo_ttft_s: 2.0,
            ttft_slo_share: share,
            peak_queue: 0,
            scale_events: 0,
            peak_ready: 4,
        }
    }

    #[test]
    fn measure_counts_writes_and_integrates_to_the_horizon() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let wall = |s: f64| t0 + Duration::from_secs_f64(s);
        // Speed 10: wall seconds 0, 2, 3, 5 are trace seconds 0, 20, 30, 50; a status-only
        // version (same replicas) and one past the horizon (trace 120 > 100) do not count.
        let versions = [
            version(wall(0.0), 4, 1),
            version(wall(1.0), 4, 2),
            version(wall(2.0), 6, 3),
            version(wall(3.0), 5, 4),
            version(wall(5.0), 2, 5),
            version(wall(12.0), 9, 6),
        ];
        let m = measure(
            &versions,
            t0,
            10.0,
            100.0,
            &report(100, 90, 0.5, 110.0, 400.0),
            3,
        );
        // 4 × 20 + 6 × 10 + 5 × 20 + 2 × 50.
        assert!((m.replica_seconds - 340.0).abs() < 1e-6, "{m:?}");
        assert_eq!((m.scale_ups, m.scale_downs, m.peak_replicas), (1, 2, 6));
        // The emulator's 10 s past the horizon at 3 Ready taken off.
        assert!((m.ready_replica_seconds - 370.0).abs() < 1e-6, "{m:?}");
        // Half of the 90 served of 100 arrived.
        assert!((m.slo_attainment - 0.45).abs() < 1e-9, "{m:?}");
        assert_eq!((m.requests_dropped, m.requests_unserved), (1, 10));
    }
}
