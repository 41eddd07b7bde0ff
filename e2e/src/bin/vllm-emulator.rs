//! `vllm-emulator`: serves vLLM-like `/metrics` for every Ready pod of a workload while
//! replaying a request trace over them (see `llmscaler_e2e::emulator`).
//!
//! ```text
//! vllm-emulator --trace traces/azure-llm-2023/conv.csv --speed 12 --scale 3 \
//!     --namespace demo --selector app=vllm --listen 127.0.0.1:9400
//! ```
//!
//! Runs until the trace has been replayed plus `--tail-seconds`, or until SIGINT/SIGTERM; then
//! prints the run report as JSON on stdout.
//!
//! In a pod (the test chart `charts/vllm-emulator`), one emulated server per pod and its
//! graceful-drain preStop (`llmscaler_e2e::pod`):
//!
//! ```text
//! vllm-emulator serve --listen 0.0.0.0:8000 --shutdown-timeout-seconds 20
//! vllm-emulator drain --endpoint-sync-seconds 5 --drain-seconds 30
//! ``` Trace attribution: Microsoft Azure, "Azure LLM
//! inference trace 2023" (CC BY 4.0).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use llmscaler_e2e::emulator::{Config, Emulator, ModelArgs, load_trace};

/// vLLM load emulator for the local cluster.
#[derive(Parser, Debug)]
#[command(name = "vllm-emulator", about)]
struct Args {
    /// Trace in the Azure LLM inference format (TIMESTAMP, ContextTokens, GeneratedTokens).
    #[arg(long)]
    trace: PathBuf,
    /// Trace seconds per wall second.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Arrival-rate factor (duplicates or thins requests, seeded).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Seed of `--scale`.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Namespace of the pods.
    #[arg(long)]
    namespace: String,
    /// Label selector of the pods.
    #[arg(long)]
    selector: String,
    /// Route over this Service's EndpointSlices (as a gateway does) instead of over every Ready
    /// pod.
    #[arg(long)]
    service: Option<String>,
    /// Address of `/metrics`.
    #[arg(long, default_value = "127.0.0.1:9400")]
    listen: SocketAddr,
    /// Wall seconds to keep serving after the last arrival (negative: until a signal).
    #[arg(long, default_value_t = -1.0)]
    tail_seconds: f64,
    #[command(flatten)]
    model: ModelArgs,
}

/// `vllm-emulator serve`: one emulated vLLM server (a pod of the test chart).
#[derive(Parser, Debug)]
#[command(name = "vllm-emulator serve")]
struct ServeCli {
    #[command(flatten)]
    args: llmscaler_e2e::pod::ServeArgs,
}

/// `vllm-emulator drain`: the test chart's preStop hook.
#[derive(Parser, Debug)]
#[command(name = "vllm-emulator drain")]
struct DrainCli {
    #[command(flatten)]
    args: llmscaler_e2e::pod::DrainArgs,
}

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("serve") => {
            let cli = ServeCli::parse_from(std::env::args_os().skip(1));
            llmscaler::process::run(llmscaler::process::LogFormat::Text, |shutdown| {
                llmscaler_e2e::pod::serve(cli.args, shutdown)
            })
        }
        Some("drain") => {
            let cli = DrainCli::parse_from(std::env::args_os().skip(1));
            llmscaler::process::run(
                llmscaler::process::LogFormat::Text,
                |_shutdown| async move {
                    llmscaler_e2e::pod::drain(cli.args).await;
                    Ok::<(), anyhow::Error>(())
                },
            )
        }
        _ => llmscaler::process::run(llmscaler::process::LogFormat::Text, |shutdown| {
            run(Args::parse(), shutdown)
        }),
    }
}

async fn run(args: Args, shutdown: llmscaler::process::Shutdown) -> anyhow::Result<()> {
    let requests = load_trace(&args.trace, args.scale, args.seed)?;
    let client = llmscaler_e2e::client().await?;
    let emulator = Emulator::start(
        client,
        Config {
            requests,
            speed: args.speed,
            namespace: args.namespace.clone(),
            selector: args.selector.clone(),
            service: args.service.clone(),
            params: args.model.params(),
            listen: args.listen,
        },
    )
    .await?;
    emulator.begin();
    eprintln!(
        "vllm-emulator: serving http://{}/metrics for Ready pods {} in {} at speed {}",
        emulator.addr, args.selector, args.namespace, args.speed
    );
    let mut finished_at: Option<tokio::time::Instant> = None;
    let mut interval = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            () = shutdown.requested() => break,
            _ = interval.tick() => {}
        }
        if args.tail_seconds >= 0.0 && emulator.status().trace_done {
            let since = *finished_at.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed().as_secs_f64() >= args.tail_seconds {
                break;
            }
        }
    }
    let report = emulator.status().report;
    emulator.stop().await;
    println!(
        "{}",
        serde_json::json!({
            "report": report,
            "attribution": llmscaler_loadmodel::ATTRIBUTION,
        })
    );
    Ok(())
}
