//! `llmscaler-demo`: the first-run demo (run by `e2e/demo`, README command 1) on the local
//! cluster of `e2e/cluster up`.
//!
//! It installs the CRD and the chart's RBAC, starts the vLLM emulator (in this process), a real
//! Prometheus scraping it and the operator (`llmscaler run`, out of cluster, authenticated as
//! the chart's ServiceAccount), creates an inference Deployment of kwok pods and an LLMScaler on
//! `avg(vllm:num_requests_waiting{namespace="demo"})`, replays the Azure conversation trace
//! time-compressed, prints a live line per sync, and writes a PNG, a timeline CSV, the report
//! JSON and a summary to `--out`. Everything it created is removed at the end, also on Ctrl-C.
//!
//! Trace: Microsoft Azure, "Azure LLM inference trace 2023" (CC BY 4.0); Patel et al.,
//! "Splitwise", ISCA 2024.

mod plot;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, DynamicObject};
use llmscaler_e2e::emulator::{ModelArgs, load_trace};
use llmscaler_e2e::fixture::install_crd;
use llmscaler_e2e::operator::{Operator, Rbac};
use llmscaler_e2e::prometheus::Prometheus;
use llmscaler_e2e::session::{self, Started};
use llmscaler_loadmodel::ATTRIBUTION;
use plot::{Sample, Targets, draw_png};
use serde_json::{Value, json};

/// The LLM autoscaling demo on the local cluster.
#[derive(Parser, Debug)]
#[command(name = "llmscaler-demo", about)]
struct Args {
    /// Azure-format trace to replay.
    #[arg(long)]
    trace: PathBuf,
    /// Trace seconds per wall second (12: the 58-minute conversation trace in about 5 minutes).
    #[arg(long, default_value_t = 12.0)]
    speed: f64,
    /// Arrival-rate factor (3: about 2 to 25 requests/s, one to eight replicas).
    #[arg(long, default_value_t = 3.0)]
    scale: f64,
    /// Seed of `--scale`.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Namespace of the demo (deleted first if it exists, and at the end).
    #[arg(long, default_value = "demo")]
    namespace: String,
    /// Output directory.
    #[arg(long, default_value = "demo-out")]
    out: PathBuf,
    /// Scaler target: waiting requests per replica.
    #[arg(long, default_value = "3")]
    target: String,
    /// Second metric, a proportional guardrail: running requests per replica (`avg(
    /// vllm:num_requests_running)`). The waiting queue alone is 0 whenever the fleet keeps up,
    /// which would let every scale-down fall to minReplicas; the larger recommendation wins.
    /// Empty: queue only.
    #[arg(long, default_value = "12")]
    running_target: String,
    /// The scaler's syncPeriodSeconds (wall), also the period of the live line.
    #[arg(long, default_value_t = 5)]
    sync_seconds: u64,
    /// The scaler's scaleDown.stabilizationWindowSeconds (wall).
    #[arg(long, default_value_t = 30)]
    stabilization_window_seconds: u64,
    /// Replicas of the Deployment when it is created (before the scaler takes over).
    #[arg(long, default_value_t = 4)]
    initial_replicas: i32,
    /// Trace seconds replayed on the initial replicas before the LLMScaler is created (its first
    /// sync then sees load, not an idle fleet).
    #[arg(long, default_value_t = 60.0)]
    warmup_trace_seconds: f64,
    /// Model start-up time, trace seconds: the pod-ready delay asked of kwok (divided by
    /// `--speed`). Takes effect only on a cluster with the stages of `e2e/kwok-stages.yaml`.
    #[arg(long, default_value_t = 90.0)]
    startup_trace_seconds: f64,
    /// minReplicas.
    #[arg(long, default_value_t = 1)]
    min_replicas: i32,
    /// maxReplicas.
    #[arg(long, default_value_t = 16)]
    max_replicas: i32,
    /// Wall seconds to keep going after the last arrival (to show the scale-down).
    #[arg(long, default_value_t = 45)]
    tail_seconds: u64,
    /// Stop after this many trace seconds (default: the whole trace).
    #[arg(long)]
    trace_seconds: Option<f64>,
    #[command(flatten)]
    model: ModelArgs,
}

/// Name of the inference Deployment (and its `app` label).
const WORKLOAD: &str = "vllm";
/// Name of the LLMScaler.
const SCALER: &str = "vllm";
/// Helm release name of the RBAC (and the ServiceAccount's name).
const RELEASE: &str = "llmscaler-demo";
/// Field manager of what the demo applies.
const MANAGER: &str = "llmscaler-demo";

fn main() -> ExitCode {
    llmscaler::process::run(llmscaler::process::LogFormat::Text, |shutdown| {
        main_async(Args::parse(), shutdown)
    })
}

async fn main_async(args: Args, shutdown: llmscaler::process::Shutdown) -> anyhow::Result<()> {
    let mut started = Started::default();
    let result = tokio::select! {
        r = run(&args, &mut started) => r,
        () = shutdown.requested() => Err(anyhow::anyhow!("interrupted by a signal")),
    };
    started.cleanup("llmscaler-demo").await;
    progress("cleaned up: operator, emulator and Prometheus stopped; namespace and RBAC deleted");
    result
}

fn progress(message: &str) {
    eprintln!("==> {message}");
}

async fn run(args: &Args, started: &mut Started) -> anyhow::Result<()> {
    let requests = load_trace(&args.trace, args.scale, args.seed)?;
    let span = requests.last().map_or(0.0, |r| r.arrival_s);
    let end_trace_s = args.trace_seconds.unwrap_or(span).min(span);
    progress(&format!(
        "trace {}: {} requests over {:.1} min at scale {}; replay at speed {} takes {:.1} min",
        args.trace.display(),
        requests.len(),
        span / 60.0,
        args.scale,
        args.speed,
        end_trace_s / args.speed / 60.0
    ));
    let client = llmscaler_e2e::client().await?;
    started.client = Some(client.clone());
    let ns = args.namespace.as_str();

    install_crd()?;
    session::fresh_namespace(&client, ns, "llmscaler-demo").await?;
    started.namespace = Some(ns.to_string());
    progress(&format!(
        "namespace {ns} created; installing the chart (out of cluster: RBAC, webhook configurations)"
    ));

    // The chart, out of cluster: RBAC, ServiceAccount and webhook configurations that call the
    // operator below on loopback (it creates its CA and injects the caBundle).
    let webhook_port = llmscaler_e2e::free_port()?;
    let rbac = Rbac::helm_install(RELEASE, ns, webhook_port)?;
    let kubeconfig = rbac.kubeconfig.clone();
    started.rbac = Some(rbac);

    let initial = args.initial_replicas.max(1);
    let deployment = session::workload(
        ns,
        WORKLOAD,
        initial,
        args.startup_trace_seconds,
        args.speed,
    );
    apply(&deployment)?;
    session::wait_ready(&client, ns, WORKLOAD, initial).await?;

    let emulator = session::start_emulator(
        &client,
        ns,
        WORKLOAD,
        requests.clone(),
        args.speed,
        args.model.params(),
    )
    .await?;
    let emulator_addr = emulator.addr;
    started.emulator = Some(emulator);
    let prometheus = Prometheus::start(emulator_addr).await?;
    let prometheus_url = prometheus.url();
    started.prometheus = Some(prometheus);
    progress(&format!(
        "emulator http://{emulator_addr}/metrics, Prometheus {prometheus_url}"
    ));

    let fullname = Rbac::service_account(RELEASE);
    let operator = Operator::start(
        &kubeconfig,
        ns,
        "demo",
        &[
            &format!("--webhook-listen=127.0.0.1:{webhook_port}"),
            "--webhook-extra-san=127.0.0.1",
            &format!("--cert-secret={fullname}-webhook-tls"),
            &format!("--webhook-service={fullname}"),
            &format!("--validating-webhook-configuration={fullname}"),
            &format!("--mutating-webhook-configuration={fullname}"),
        ],
    )
    .await?;
    progress(&format!(
        "operator running (pid {}), metrics http://{}/metrics",
        operator.pid().unwrap_or(0),
        operator.metrics_addr
    ));
    started.operator = Some(operator);

    let query = format!("avg(vllm:num_requests_waiting{{namespace=\"{ns}\"}})");
    let mut metrics = vec![json!({"name": "queue", "query": query, "target": args.target})];
    if !args.running_target.is_empty() {
        metrics.push(json!({
            "name": "running",
            "query": format!("avg(vllm:num_requests_running{{namespace=\"{ns}\"}})"),
            "target": args.running_target,
        }));
    }
    let scaler = json!({
        "apiVersion": "autoscaling.modelsphere.dev/v1alpha1",
        "kind": "LLMScaler",
        "metadata": {"name": SCALER, "namespace": ns},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": WORKLOAD},
            "serverAddress": prometheus_url,
            "minReplicas": args.min_replicas,
            "maxReplicas": args.max_replicas,
            "syncPeriodSeconds": args.sync_seconds,
            "retryPeriodSeconds": 2,
            "metrics": metrics,
            "scaleDown": {"stabilizationWindowSeconds": args.stabilization_window_seconds},
        }
    });
    progress(&format!(
        "LLMScaler {SCALER} (created after {} trace seconds of warm-up): {query} target {} per replica (running target {:?}), replicas \
         {}..{}, sync {}s, scale-down window {}s",
        args.warmup_trace_seconds,
        args.target,
        args.running_target,
        args.min_replicas,
        args.max_replicas,
        args.sync_seconds,
        args.stabilization_window_seconds
    ));

    let samples = replay(args, started, &client, end_trace_s, &scaler).await?;
    let Some(emulator) = started.emulator.as_ref() else {
        anyhow::bail!("the emulator is gone");
    };
    let status = emulator.status();
    let offline = offline_replay(args, &requests, end_trace_s, &scaler)?;
    write_outputs(args, &samples, &status.report, &offline)
}

/// The same trace, scaler and start-up time replayed offline (`llmscaler simulate --requests`,
/// issue 12 item 7), in trace time: sync period and window multiplied by `--speed`, Prometheus'
/// 1 s wall scrape interval likewise, the demo's initial replicas at the start. The offline run
/// starts the scaler at trace time 0, the demo after `--warmup-trace-seconds`.
fn offline_replay(
    args: &Args,
    requests: &[llmscaler_loadmodel::Request],
    end_trace_s: f64,
    scaler: &Value,
) -> anyhow::Result<llmscaler::simulate::compare::PolicyReport> {
    let mut scaler: llmscaler_api::LLMScaler =
        serde_json::from_value(scaler.clone()).context("the demo's LLMScaler")?;
    llmscaler_api::apply_defaults(&mut scaler.spec);
    let to_trace = |wall_s: u64| -> i32 {
        #[allow(clippy::cast_possible_truncation)]
        let s = (wall_s as f64 * args.speed).round() as i32;
        s.max(1)
    };
    scaler.spec.sync_period_seconds = Some(to_trace(args.sync_seconds));
    if let Some(sd) = scaler.spec.scale_down.as_mut() {
        sd.stabilization_window_seconds = Some(if args.stabilization_window_seconds == 0 {
            0
        } else {
            to_trace(args.stabilization_window_seconds)
        });
    }
    let served: Vec<_> = requests
        .iter()
        .copied()
        .filter(|r| r.arrival_s <= end_trace_s)
        .collect();
    let options = llmscaler::simulate::compare::Options {
        startup_seconds: args.startup_trace_seconds,
        slo_ttft_seconds: args.model.params().slo_ttft_s,
        scrape_interval_seconds: args.speed,
        initial_replicas: Some(args.initial_replicas.max(1)),
        compare: Vec::new(),
        tail_seconds: args.tail_seconds as f64 * args.speed,
        termination_grace_seconds: args.model.params().drain_s,
        comparators_scaler: None,
        model_name: None,
        // The live fleet's pod template states no `--max-num-seqs`; nor does the replay's.
        state_max_num_seqs: false,
    };
    let report =
        llmscaler::simulate::compare::run(&scaler, &served, &options, args.scale, args.seed)?;
    report
        .policies
        .get("llmscaler")
        .cloned()
        .context("the offline replay reported no llmscaler run")
}

/// One line of the live output, for the timeline.
struct Observed {
    sample: Sample,
    wall_s: f64,
}

async fn replay(
    args: &Args,
    started: &Started,
    client: &Client,
    end_trace_s: f64,
    scaler: &Value,
) -> anyhow::Result<Vec<Observed>> {
    let Some(emulator) = started.emulator.as_ref() else {
        anyhow::bail!("the emulator is not running");
    };
    let ns = args.namespace.as_str();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let scalers: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                "autoscaling.modelsphere.dev",
                "v1alpha1",
                "LLMScaler",
            ),
            "llmscalers",
        ),
    );
    emulator.begin();
    let wall_start = Instant::now();
    progress("replay started; one line per sync period");
    println!(
        "{:>6}  {:>9}  {:>7}  {:>7}  {:>7}  {:>5}  {:>7}  {:>8}",
        "wall", "trace", "req/s", "queue", "running", "ready", "desired", "replicas"
    );
    let mut samples: Vec<Observed> = Vec::new();
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    let mut last = (0.0f64, 0u64);
    let mut last_print: Option<Instant> = None;
    let mut done_at: Option<Instant> = None;
    let mut scaler_created = false;
    loop {
        interval.tick().await;
        let status = emulator.status();
        if !scaler_created && status.t_s >= args.warmup_trace_seconds {
            apply(scaler)?;
            scaler_created = true;
            println!(
                "-- LLMScaler {SCALER} created at trace {:.1} min",
                status.t_s / 60.0
            );
        }
        let (replicas, ready) = match deployments.get(WORKLOAD).await {
            Ok(d) => (
                d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
                d.status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0),
            ),
            Err(err) => {
                eprintln!("llmscaler-demo: reading the Deployment: {err}");
                continue;
            }
        };
        // Before the scaler exists (or has synced once), the Deployment's own value.
        let desired = match scalers.get_opt(SCALER).await {
            Ok(Some(s)) => s.data["status"]["desiredReplicas"]
                .as_i64()
                .and_then(|d| i32::try_from(d).ok())
                .unwrap_or(replicas),
            Ok(None) | Err(_) => replicas,
        };
        let dt = status.t_s - last.0;
        let rate = if dt > 0.0 {
            (status.arrived - last.1) as f64 / dt
        } else {
            0.0
        };
        last = (status.t_s, status.arrived);
        let wall_s = wall_start.elapsed().as_secs_f64();
        let sample = Sample {
            t_s: status.t_s,
            requests_per_s: rate,
            queue: status.queue_per_replica,
            running: status.running_per_replica,
            ready,
            desired,
            replicas,
        };
        samples.push(Observed { sample, wall_s });
        let due = last_print.is_none_or(|p| p.elapsed() >= Duration::from_secs(args.sync_seconds));
        if due {
            last_print = Some(Instant::now());
            let rate_window = samples
                .iter()
                .rev()
                .take(args.sync_seconds as usize)
                .map(|o| o.sample.requests_per_s)
                .sum::<f64>()
                / args.sync_seconds.max(1).min(samples.len() as u64) as f64;
            println!(
                "{:>5.0}s  {:>6.1}min  {:>7.1}  {:>7.2}  {:>7.1}  {:>5}  {:>7}  {:>8}",
                wall_s,
                status.t_s / 60.0,
                rate_window,
                status.queue_per_replica,
                status.running_per_replica,
                ready,
                desired,
                replicas
            );
        }
        if status.trace_done || status.t_s >= end_trace_s {
            let since = *done_at.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(args.tail_seconds) {
                break;
            }
        }
    }
    Ok(samples)
}

fn write_outputs(
    args: &Args,
    samples: &[Observed],
    report: &llmscaler_loadmodel::Report,
    offline: &llmscaler::simulate::compare::PolicyReport,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let target: f64 = args.target.parse().unwrap_or(f64::NAN);
    let (mut ups, mut downs) = (0, 0);
    for w in samples.windows(2) {
        match w[1].sample.replicas.cmp(&w[0].sample.replicas) {
            std::cmp::Ordering::Greater => ups += 1,
            std::cmp::Ordering::Less => downs += 1,
            std::cmp::Ordering::Equal => {}
        }
    }
    let peak_replicas = samples.iter().map(|o| o.sample.replicas).max().unwrap_or(0);
    let peak_avg_queue = samples
        .iter()
        .map(|o| o.sample.queue)
        .filter(|q| q.is_finite())
        .fold(0.0, f64::max);
    let with_queue: Vec<f64> = samples
        .iter()
        .map(|o| o.sample.queue)
        .filter(|q| q.is_finite())
        .collect();
    let within_target =
        with_queue.iter().filter(|&&q| q <= target).count() as f64 / with_queue.len().max(1) as f64;
    let wall_s = samples.last().map_or(0.0, |o| o.wall_s);
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "llmscaler demo: {} at scale {} and speed {} ({:.1} trace min in {:.1} wall min), \
         target avg(vllm:num_requests_waiting) = {} per replica, avg(vllm:num_requests_running) = {}",
        args.trace
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("trace"),
        args.scale,
        args.speed,
        report.trace_seconds / 60.0,
        wall_s / 60.0,
        args.target,
        if args.running_target.is_empty() {
            "off"
        } else {
            args.running_target.as_str()
        }
    );
    let _ = writeln!(
        summary,
        "replica-minutes (trace time): {:.1}; peak replicas {}; scale events {} ({} up, {} down)",
        report.replica_minutes(),
        peak_replicas,
        ups + downs,
        ups,
        downs
    );
    let _ = writeln!(
        summary,
        "peak queue: {} waiting in the fleet, {:.1} per replica; syncs at or under target: {:.0}%",
        report.peak_queue,
        peak_avg_queue,
        within_target * 100.0
    );
    let _ = writeln!(
        summary,
        "requests: {} arrived, {} served, {} failed (drained out), {} in flight at the end",
        report.arrived, report.served, report.failed, report.in_flight
    );
    let _ = writeln!(
        summary,
        "TTFT p50 {:.2}s, p95 {:.2}s, p99 {:.2}s; {:.1}% within the {}s SLO",
        report.ttft_p50_s,
        report.ttft_p95_s,
        report.ttft_p99_s,
        report.ttft_slo_share * 100.0,
        report.slo_ttft_s
    );
    // Attainment over arrived requests, as the offline report counts it.
    let demo_attainment =
        report.ttft_slo_share * report.served as f64 / report.arrived.max(1) as f64;
    let relative = |a: f64, b: f64| (a - b).abs() / b.abs().max(1e-9) * 100.0;
    let _ = writeln!(
        summary,
        "offline replay of the same settings (llmscaler simulate --requests): Ready replica-minutes \
         {:.1} (cluster {:.1}, {:.1}% apart); SLO attainment {:.2}% (cluster {:.2}%, {:.1}% apart)",
        offline.ready_replica_seconds / 60.0,
        report.replica_minutes(),
        relative(report.replica_seconds, offline.ready_replica_seconds),
        offline.slo_attainment * 100.0,
        demo_attainment * 100.0,
        relative(demo_attainment, offline.slo_attainment),
    );
    let _ = writeln!(summary, "{ATTRIBUTION}");
    let summary_path = args.out.join("summary.txt");
    std::fs::write(&summary_path, &summary)?;

    let mut csv = format!(
        "# {ATTRIBUTION}\nwall_s,trace_s,requests_per_s,queue,running,ready,desired,replicas\n"
    );
    for o in samples {
        let s = o.sample;
        let _ = writeln!(
            csv,
            "{:.1},{:.1},{:.3},{:.3},{:.3},{},{},{}",
            o.wall_s, s.t_s, s.requests_per_s, s.queue, s.running, s.ready, s.desired, s.replicas
        );
    }
    std::fs::write(args.out.join("timeline.csv"), csv)?;
    std::fs::write(
        args.out.join("report.json"),
        serde_json::to_string_pretty(&json!({
            "report": report,
            "scale_events": {"up": ups, "down": downs},
            "attribution": ATTRIBUTION,
        }))?,
    )?;
    let png = args.out.join("demo.png");
    let footer: Vec<String> = summary.lines().skip(1).map(str::to_string).collect();
    let plotted: Vec<Sample> = samples.iter().map(|o| o.sample).collect();
    draw_png(
        &png,
        &plotted,
        Targets {
            queue: target.is_finite().then_some(target),
            running: args.running_target.parse().ok(),
        },
        &format!(
            "llmscaler on the Azure conversation trace (scale {}, {}x speed)",
            args.scale, args.speed
        ),
        &footer,
    )?;
    println!();
    print!("{summary}");
    println!(
        "wrote {}, {}, timeline.csv, report.json",
        png.display(),
        summary_path.display()
    );
    Ok(())
}

/// Server-side applies a manifest with kubectl under [`MANAGER`].
fn apply(manifest: &Value) -> anyhow::Result<()> {
    session::apply_as(MANAGER, manifest)
}
