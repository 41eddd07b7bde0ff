//! The `llmscaler` binary: wires the command line to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use llmscaler::scaler_file::{ScalerFileError, load_scaler};
use llmscaler::{process, simulate};

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
    /// Replay a metric trace through the decision engine and print what the scaler would do.
    Simulate(SimulateArgs),
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
    /// Serve the admission webhook alone (no cluster) with a certificate and key from files,
    /// reloaded when they change.
    Webhook(llmscaler_webhooks::cli::WebhookArgs),
}

#[derive(clap::Args, Debug)]
struct SimulateArgs {
    /// LLMScaler manifest (defaulted and validated like an apply).
    #[arg(long)]
    scaler: PathBuf,
    /// CSV: `t` (seconds), one column per metric (or `decision`), optional `ready`, `rollout`.
    #[arg(long)]
    metrics: PathBuf,
    /// spec.replicas (all ready) at the start; default minReplicas.
    #[arg(long)]
    initial_replicas: Option<u32>,
    /// Seconds an added replica takes to become ready.
    #[arg(long, default_value_t = 0.0)]
    startup_seconds: f64,
    /// Draw replicas, desired and each metric against time (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Wall-clock time of `t = 0` (RFC 3339, e.g. `2026-03-28T22:00:00Z`), for
    /// `spec.schedules`.
    #[arg(long, default_value = "1970-01-01T00:00:00Z")]
    start_time: k8s_openapi::jiff::Timestamp,
}

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
        Command::Probe(args) => llmscaler::probe::run(&args),
        Command::Convert(args) => llmscaler::convert::run(&args),
        Command::Release(args) => llmscaler::release::run(&args),
        Command::Run(args) => process::run(cli.log_format, |shutdown| {
            llmscaler::run::run(*args, shutdown)
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
    if !(args.startup_seconds.is_finite() && args.startup_seconds >= 0.0) {
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
    let file = match std::fs::File::open(&args.metrics) {
        Ok(file) => file,
        Err(err) => return fail(1, &format!("cannot read {}: {err}", args.metrics.display())),
    };
    let custom = scaler.spec.effective_provider() == llmscaler_api::MetricProvider::Custom;
    let rows = match simulate::input::read_rows(file, &columns, custom) {
        Ok(rows) => rows,
        Err(err) => return fail(EXIT_INVALID, &format!("{}: {err}", args.metrics.display())),
    };
    let options = simulate::Options {
        initial_replicas,
        startup_seconds: args.startup_seconds,
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

use process::fail;
