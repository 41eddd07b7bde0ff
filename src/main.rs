//! The `llmscaler` binary: wires the command line to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use llmscaler::scaler_file::{ScalerFileError, load_scaler};
use llmscaler::{process, simulate};
use llmscaler_loadmodel::profile::{Profile, ProfileError};
use llmscaler_loadmodel::trace::FlashCrowd;

/// Autoscaler for LLM inference servers on Kubernetes.
#[derive(Parser, Debug)]
#[command(name = "llmscaler", version, about)]
struct Cli {
    /// Log lines as `text` or `json` (one object per line, on stderr).
    #[arg(
        long,
        global = true,
        env = "LLMSCALER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: process::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the LLMScaler CustomResourceDefinition as YAML.
    Crd,
    /// Replay a metric trace through the decision engine and print what the scaler would do
    /// (`--metrics`), or serve a request trace in a closed loop with the scaler and its
    /// comparators (`--requests`).
    Simulate(SimulateArgs),
    /// Replay a scaler, its comparators and the fleet as it ran on a workload's own
    /// Prometheus history, with GPU-hours, cost and a validation line (exit 2 for invalid
    /// arguments or a selector matching no or several workloads, 1 when Prometheus could not
    /// be read).
    Backtest(Box<llmscaler::backtest::BacktestArgs>),
    /// Evaluate a scaler's metrics once against its serverAddress and print what each
    /// recommends (exit 0; 4 when a metric was skipped but the others decided), or that the
    /// fleet would be held (exit 3); 2 for an invalid spec.
    Probe(llmscaler::probe::ProbeArgs),
    /// Print the LLMScaler equivalent of a KEDA ScaledObject or an autoscaling/v2 HPA manifest;
    /// exit 2 listing every field with no equivalent (or, with --lenient, leave them out).
    Convert(llmscaler::convert::ConvertArgs),
    /// Hand a workload's spec.replicas back (drop llmscaler's field ownership, keep the value)
    /// and clear llmscaler's pod-deletion-cost marks on its pods, so another tool can take over.
    Release(llmscaler::release::ReleaseArgs),
    /// Run the operator: the controller behind a Lease, and the metrics endpoints.
    Run(Box<llmscaler::run::RunArgs>),
    /// Hold the requests of Services whose fleet is at zero while the first replica loads, and
    /// forward them once it is Ready (the operator routes the Services here).
    Activator(llmscaler::activator::ActivatorArgs),
    /// Serve the admission webhook alone (no cluster) with a certificate and key from files,
    /// reloaded when they change.
    Webhook(llmscaler_webhooks::cli::WebhookArgs),
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["metrics", "requests"])))]
struct SimulateArgs {
    /// LLMScaler manifest (defaulted and validated like an apply).
    #[arg(long)]
    scaler: PathBuf,
    /// CSV: `t` (seconds), one column per metric (or `decision`), optional `ready`, `rollout`.
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// Azure-format request trace (`TIMESTAMP,ContextTokens,GeneratedTokens`, e.g.
    /// `traces/azure-llm-2023/conv.csv`): closed-loop replay through the load model.
    #[arg(long)]
    requests: Option<PathBuf>,
    /// spec.replicas (all ready) at the start; default minReplicas (`--metrics`) or what the
    /// `ideal` bound picks for the first interval (`--requests`).
    #[arg(long)]
    initial_replicas: Option<u32>,
    /// Seconds an added replica takes to become ready (default 0 with `--metrics`, 90 with
    /// `--requests`).
    #[arg(long)]
    startup_seconds: Option<f64>,
    /// Draw the run (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Wall-clock time of `t = 0` (RFC 3339, e.g. `2026-03-28T22:00:00Z`), for
    /// `spec.schedules`.
    #[arg(long, default_value = "1970-01-01T00:00:00Z")]
    start_time: k8s_openapi::jiff::Timestamp,
    /// `--requests`: arrival-rate factor (seeded duplicate/thin, as in the emulator).
    #[arg(long, default_value_t = 1.0, conflicts_with = "metrics")]
    scale: f64,
    /// `--requests`: seed of `--scale` and of `--flash-crowd`'s start.
    #[arg(long, default_value_t = 1, conflicts_with = "metrics")]
    seed: u64,
    /// `--requests`: add a flash crowd, arrivals ×3 for 300 s (after `--scale`), starting at a
    /// time drawn from `--seed` (or `--flash-crowd-start`).
    #[arg(long)]
    flash_crowd: bool,
    /// `--requests` with `--flash-crowd`: the crowd's start, trace seconds, instead of a seeded
    /// one.
    #[arg(long, requires = "flash_crowd")]
    flash_crowd_start: Option<f64>,
    /// `--requests`: the TTFT objective, seconds.
    #[arg(long, default_value_t = 2.0, conflicts_with = "metrics")]
    slo_ttft_seconds: f64,
    /// `--requests`: Prometheus scrape interval, seconds.
    #[arg(long, default_value_t = 15.0, conflicts_with = "metrics")]
    scrape_interval_seconds: f64,
    /// `--requests`: comparators run on the same load: any of hpa,keda,ideal,reactive,static.
    #[arg(long, default_value = "", conflicts_with = "metrics")]
    compare: String,
    /// `--requests`: `hpa` and `keda` run on this scaler's metrics instead of `--scaler`'s
    /// (e.g. a metric-only configuration tuned for the HPA, when `--scaler` relies on what the
    /// HPA has no equivalent of, such as `spec.capacity`).
    #[arg(long, conflicts_with = "metrics")]
    comparators_scaler: Option<PathBuf>,
    /// `--requests`: the `model_name` label of the replayed vLLM series (vLLM's
    /// `--served-model-name`); default: the one the scaler's queries name in a
    /// `model_name="…"` matcher, else `replayed-llm`.
    #[arg(long, conflicts_with = "metrics")]
    model_name: Option<String>,
    /// `--requests`: the load model's per-replica parameters, a profile file (YAML or JSON,
    /// camelCase keys, docs/load-model.md "Model profiles"); default: the 8B-on-one-H100
    /// defaults. Every policy (and `ideal`) replays the same profile.
    #[arg(long, conflicts_with = "metrics")]
    model: Option<PathBuf>,
    /// `--requests`: write the report JSON here.
    #[arg(long, conflicts_with = "metrics")]
    report: Option<PathBuf>,
    /// `--requests`: seconds the run goes on after the last arrival.
    #[arg(long, default_value_t = 120.0, conflicts_with = "metrics")]
    tail_seconds: f64,
    /// `--requests`: seconds a deleted pod keeps serving what it holds before the rest is
    /// dropped (0: killed at once, as vLLM's default `--shutdown-timeout=0` does on SIGTERM).
    #[arg(long, default_value_t = 0.0, conflicts_with = "metrics")]
    termination_grace_seconds: f64,
    /// `--requests`: the replayed Deployment's pod template does not state `--max-num-seqs`
    /// (by default it states the model's `maxNumSeqs`, which `spec.objective` takes for its
    /// batch limit); the objective then learns the limit from a queue.
    #[arg(long, conflicts_with = "metrics")]
    unstated_max_num_seqs: bool,
}

/// `--flash-crowd`: arrival-rate factor and length, seconds (issue 27: arrivals ×3 for 5 min).
const FLASH_CROWD_FACTOR: f64 = 3.0;
const FLASH_CROWD_SECONDS: f64 = 300.0;

/// Exit status for an invalid spec or malformed input.
const EXIT_INVALID: u8 = 2;

fn main() -> ExitCode {
    process::install_crypto_provider();
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match llmscaler_api::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(err) => fail(1, &format!("cannot render the CRD: {err}")),
        },
        Command::Simulate(args) => run_simulate(&args),
        Command::Backtest(args) => llmscaler::backtest::run(&args),
        Command::Probe(args) => llmscaler::probe::run(&args),
        Command::Convert(args) => llmscaler::convert::run(&args),
        Command::Release(args) => llmscaler::release::run(&args),
        Command::Run(args) => process::run(cli.log_format, |shutdown| {
            llmscaler::run::run(*args, shutdown)
        }),
        Command::Activator(args) => process::run(cli.log_format, |shutdown| {
            llmscaler::activator::run(args, shutdown)
        }),
        Command::Webhook(args) => process::run(cli.log_format, |shutdown| async move {
            llmscaler_webhooks::cli::serve(&args, shutdown.wait()).await
        }),
    }
}

fn run_simulate(args: &SimulateArgs) -> ExitCode {
    let scaler = match load_scaler(&args.scaler) {
        Ok(scaler) => scaler,
        Err(err @ ScalerFileError::Invalid { .. }) => return fail(EXIT_INVALID, &err.to_string()),
        Err(err) => return fail(1, &err.to_string()),
    };
    if let Some(requests) = &args.requests {
        return run_requests(args, &scaler, requests);
    }
    let Some(metrics) = &args.metrics else {
        return fail(EXIT_INVALID, "one of --metrics or --requests is required");
    };
    if args.flash_crowd {
        return fail(
            EXIT_INVALID,
            "--flash-crowd adds arrivals to a request trace: it needs --requests",
        );
    }
    if let Err(refused) = simulate::refused_by_metrics(&scaler.spec) {
        return fail(EXIT_INVALID, &refused);
    }
    let startup_seconds = args.startup_seconds.unwrap_or(0.0);
    if !(startup_seconds.is_finite() && startup_seconds >= 0.0) {
        return fail(
            EXIT_INVALID,
            "--startup-seconds must be a number of seconds, 0 or more",
        );
    }
    let initial_replicas = match args.initial_replicas.map(i32::try_from).transpose() {
        Ok(n) => n,
        Err(_) => return fail(EXIT_INVALID, "--initial-replicas is larger than an int32"),
    };
    if let Some(plot) = &args.plot
        && let Err(err) = simulate::plot::check_target(plot)
    {
        return fail(1, &err.to_string());
    }
    let columns = simulate::columns_for(&scaler.spec);
    let file = match std::fs::File::open(metrics) {
        Ok(file) => file,
        Err(err) => return fail(1, &format!("cannot read {}: {err}", metrics.display())),
    };
    let custom = match scaler.spec.effective_provider() {
        llmscaler_api::MetricProvider::Prometheus => false,
        llmscaler_api::MetricProvider::Custom => true,
    };
    let rows = match simulate::input::read_rows(file, &columns, custom) {
        Ok(rows) => rows,
        Err(err) => return fail(EXIT_INVALID, &format!("{}: {err}", metrics.display())),
    };
    let options = simulate::Options {
        initial_replicas,
        startup_seconds,
        start: args.start_time,
    };
    let steps = simulate::replay(&scaler.spec, &rows, options);
    if let Err(err) = simulate::write_csv(std::io::stdout().lock(), &columns, &steps) {
        return fail(1, &format!("writing the output: {err}"));
    }
    if let Some(plot) = &args.plot
        && let Err(err) = simulate::plot::draw(plot, &steps, &columns.values)
    {
        return fail(1, &err.to_string());
    }
    ExitCode::SUCCESS
}

/// `simulate --requests`: the closed-loop replay with comparators.
fn run_requests(
    args: &SimulateArgs,
    scaler: &llmscaler_api::LLMScaler,
    path: &std::path::Path,
) -> ExitCode {
    let startup_seconds = args.startup_seconds.unwrap_or(90.0);
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !(startup_seconds.is_finite() && startup_seconds >= 0.0) {
        return fail(EXIT_INVALID, "--startup-seconds must be 0 or more");
    }
    if !(args.scale.is_finite() && args.scale >= 0.0) {
        return fail(EXIT_INVALID, "--scale must be 0 or more");
    }
    if !positive(args.slo_ttft_seconds) || !positive(args.scrape_interval_seconds) {
        return fail(
            EXIT_INVALID,
            "--slo-ttft-seconds and --scrape-interval-seconds must be positive",
        );
    }
    if !(args.tail_seconds.is_finite() && args.tail_seconds >= 0.0) {
        return fail(EXIT_INVALID, "--tail-seconds must be 0 or more");
    }
    if !(args.termination_grace_seconds.is_finite() && args.termination_grace_seconds >= 0.0) {
        return fail(
            EXIT_INVALID,
            "--termination-grace-seconds must be 0 or more",
        );
    }
    let compare = match simulate::compare::Comparator::parse_list(&args.compare) {
        Ok(c) => c,
        Err(err) => return fail(EXIT_INVALID, &err),
    };
    let initial_replicas = match args.initial_replicas.map(i32::try_from).transpose() {
        Ok(n) => n,
        Err(_) => return fail(EXIT_INVALID, "--initial-replicas is larger than an int32"),
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) => return fail(1, &format!("cannot read {}: {err}", path.display())),
    };
    let base = match llmscaler_loadmodel::trace::read_azure(file) {
        Ok(r) => r,
        Err(err) => return fail(EXIT_INVALID, &format!("{}: {err}", path.display())),
    };
    let scaled = llmscaler_loadmodel::trace::scale(&base, args.scale, args.seed);
    let crowd = args.flash_crowd.then(|| {
        let mut crowd =
            FlashCrowd::seeded(&scaled, FLASH_CROWD_FACTOR, FLASH_CROWD_SECONDS, args.seed);
        if let Some(start) = args.flash_crowd_start {
            crowd.start_s = start;
        }
        crowd
    });
    if args
        .flash_crowd_start
        .is_some_and(|s| !(s.is_finite() && s >= 0.0))
    {
        return fail(EXIT_INVALID, "--flash-crowd-start must be 0 or more");
    }
    let requests = match &crowd {
        Some(crowd) => crowd.apply(&scaled, args.seed),
        None => scaled,
    };
    let comparators_scaler = match args
        .comparators_scaler
        .as_deref()
        .map(load_scaler)
        .transpose()
    {
        Ok(s) => s,
        Err(err @ ScalerFileError::Invalid { .. }) => return fail(EXIT_INVALID, &err.to_string()),
        Err(err) => return fail(1, &err.to_string()),
    };
    let options = simulate::compare::Options {
        comparators_scaler,
        model_name: args.model_name.clone(),
        startup_seconds,
        slo_ttft_seconds: args.slo_ttft_seconds,
        scrape_interval_seconds: args.scrape_interval_seconds,
        initial_replicas,
        compare,
        tail_seconds: args.tail_seconds,
        termination_grace_seconds: args.termination_grace_seconds,
        state_max_num_seqs: !args.unstated_max_num_seqs,
    };
    let profile = match args.model.as_deref().map(Profile::from_file).transpose() {
        Ok(p) => p,
        Err(err @ ProfileError::Read { .. }) => return fail(1, &err.to_string()),
        Err(err) => return fail(EXIT_INVALID, &err.to_string()),
    };
    let extras = simulate::compare::Extras {
        profile,
        ..simulate::compare::Extras::default()
    };
    let mut report = match simulate::compare::run_with(
        scaler, &requests, &options, args.scale, args.seed, &extras,
    ) {
        Ok(r) => r,
        Err(err) => return fail(EXIT_INVALID, &err.to_string()),
    };
    report.flash_crowd = crowd.map(|c| simulate::compare::FlashCrowdReport {
        start_seconds: c.start_s,
        duration_seconds: c.duration_s,
        factor: c.factor,
    });
    if let Some(c) = &report.flash_crowd {
        println!(
            "flash crowd: arrivals x{} for {} s from t = {} s",
            c.factor, c.duration_seconds, c.start_seconds
        );
    }
    print!("{}", simulate::compare::summary(&report));
    for unmatched in &report.unmatched_queries {
        eprintln!("{}", unmatched.warning(&report.model_name));
    }
    if let Some(out) = &args.report {
        let json = match serde_json::to_string_pretty(&report) {
            Ok(j) => j,
            Err(err) => return fail(1, &format!("encoding the report: {err}")),
        };
        if let Err(err) = std::fs::write(out, json + "\n") {
            return fail(1, &format!("cannot write {}: {err}", out.display()));
        }
    }
    if let Some(plot) = &args.plot {
        let title = format!(
            "{} at scale {} (start-up {startup_seconds} s, TTFT SLO {} s)",
            path.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            args.scale,
            args.slo_ttft_seconds
        );
        if let Err(err) = simulate::compare_plot::draw(plot, &report, &requests, &title) {
            return fail(1, &err.to_string());
        }
    }
    ExitCode::SUCCESS
}

use process::fail;
