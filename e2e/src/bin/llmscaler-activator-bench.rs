//! The driver of `bench/activator` (issue 25, `docs/benchmarks/activator.md`): the forwarding
//! overhead of `llmscaler activator` against direct calls, in the same run. A backend on this
//! machine's own address (a minimal HTTP server answering a small body; the API server refuses
//! loopback endpoints) is the replica; a Service without
//! selector gets an EndpointSlice pointing at it (Ready), and the activator (`$LLMSCALER_BIN`
//! or `--bin`), registered for that Service, forwards to it at once (nothing is held). Then:
//! - latency: `--requests` sequential requests, alternating direct and through the activator
//!   (same client, kept-alive connections), p50 and p99 of each and their difference;
//! - throughput: `--concurrency` closed-loop workers for `--seconds`, direct then through the
//!   activator then direct again, requests per second of each;
//! - the same throughput runs against a streaming replica: the vLLM emulator (`--emulator-port`,
//!   `--tokens-per-second` per request, 64 decoded at once) answering streamed completions of
//!   `--max-tokens` tokens, as a woken replica serves the held requests; completions per second.
//!
//! The minimal backend makes the proxy's own cost the whole story (its CPU comes out of the same
//! cores as the client's and the backend's); the streaming replica is what the activator forwards
//! to in use.
//!
//! Writes the Markdown page to `--out`. A benchmark, not a test: it fails only when the setup
//! does not come up.
//!
//! usage: llmscaler-activator-bench --out FILE [--requests 4000] [--concurrency 32]
//!        [--seconds 10] [--bin PATH] [--ports 35760-35769] [--backend-port 35770]
//!        [--control-port 35771] [--emulator-port 35772] [--tokens-per-second 100]
//!        [--max-tokens 16]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use llmscaler_e2e::{Check, client, unique_name, wait_for};
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// The Markdown page to write.
    #[arg(long)]
    out: std::path::PathBuf,
    /// Sequential requests per path for the latency.
    #[arg(long, default_value_t = 4000)]
    requests: usize,
    /// Closed-loop workers for the throughput.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seconds per throughput run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The llmscaler binary (default `$LLMSCALER_BIN`, else target/debug/llmscaler).
    #[arg(long)]
    bin: Option<std::path::PathBuf>,
    /// The activator's port range.
    #[arg(long, default_value = "35760-35769")]
    ports: String,
    /// The backend's port.
    #[arg(long, default_value_t = 35770)]
    backend_port: u16,
    /// The activator's control port.
    #[arg(long, default_value_t = 35771)]
    control_port: u16,
    /// The streaming replica's (vLLM emulator's) port.
    #[arg(long, default_value_t = 35772)]
    emulator_port: u16,
    /// Decode speed of one request on the streaming replica, tokens per second.
    #[arg(long, default_value_t = 100.0)]
    tokens_per_second: f64,
    /// Tokens per streamed completion.
    #[arg(long, default_value_t = 16)]
    max_tokens: u64,
    /// A sentence printed at the top of the page (e.g. the build profile).
    #[arg(long, default_value = "")]
    note: String,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

async fn get(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let response = http.get(url).send().await?;
    if !response.status().is_success() {
        bail!("{url}: HTTP {}", response.status());
    }
    response.bytes().await?;
    Ok(())
}

/// A Service `service` without selector in `namespace` whose one Ready endpoint is
/// `host:port` (the network's EndpointSlice, as the endpoint controller would write it).
async fn backend_service(
    client: &kube::Client,
    namespace: &str,
    service: &str,
    host: &str,
    port: u16,
) -> anyhow::Result<()> {
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), namespace);
    services
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": service},
                "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}))?,
        )
        .await?;
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), namespace);
    slices
        .patch(
            &format!("{service}-network"),
            &PatchParams::apply("bench").force(),
            &Patch::Apply(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{service}-network"), "labels": {"kubernetes.io/service-name": service}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [host], "conditions": {"ready": true}}],
                "ports": [{"name": "", "port": port, "protocol": "TCP"}]})),
        )
        .await?;
    Ok(())
}

/// Registers `namespace/service` with the activator's control API at `control` (retried until
/// it answers); the port the activator listens on for it.
async fn register(
    http: &reqwest::Client,
    control: &str,
    namespace: &str,
    service: &str,
) -> anyhow::Result<u16> {
    wait_for(
        &format!("the activator registers Service {service}"),
        Duration::from_secs(60),
        || async {
            let response = http
                .put(format!("{control}/v1/services/{namespace}/{service}"))
                .json(&json!({"port": "", "maxHeldRequests": 100, "holdTimeoutSeconds": 30}))
                .send()
                .await;
            Ok(match response {
                Ok(r) if r.status().is_success() => {
                    let v: serde_json::Value = r.json().await?;
                    Check::Done(u16::try_from(v["listenPort"].as_u64().unwrap_or(0))?)
                }
                other => Check::NotYet(format!("{other:?}")),
            })
        },
    )
    .await
}

/// One streamed completion of `tokens` tokens, read to `[DONE]`.
async fn complete(http: &reqwest::Client, url: &str, tokens: u64) -> anyhow::Result<()> {
    let response = http
        .post(url)
        .json(&json!({"max_tokens": tokens, "stream": true}))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("{url}: HTTP {}", response.status());
    }
    let body = response.bytes().await?;
    if !body.ends_with(b"data: [DONE]\n\n") {
        bail!("{url}: the stream did not end with [DONE]");
    }
    Ok(())
}

/// What one throughput worker sends: a small GET, or a streamed completion of N tokens.
#[derive(Clone, Copy)]
enum Work {
    Get,
    Complete(u64),
}

async fn throughput(
    http: &reqwest::Client,
    url: &str,
    work: Work,
    workers: usize,
    seconds: u64,
) -> (f64, u64) {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (http, url, done, failed) =
                (http.clone(), url.to_owned(), done.clone(), failed.clone());
            tokio::spawn(async move {
                while Instant::now() < end {
                    let sent = match work {
                        Work::Get => get(&http, &url).await,
                        Work::Complete(tokens) => complete(&http, &url, tokens).await,
                    };
                    match sent {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    (
        done.load(Ordering::Relaxed) as f64 / elapsed,
        failed.load(Ordering::Relaxed),
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin = args
        .bin
        .clone()
        .or_else(|| std::env::var_os("LLMSCALER_BIN").map(Into::into))
        .unwrap_or_else(llmscaler_e2e::operator::binary);
    // The machine's own address (the API server refuses loopback endpoints).
    let probe = std::net::UdpSocket::bind("0.0.0.0:0")?;
    probe
        .connect("203.0.113.1:9")
        .context("no default route: the endpoints need a non-loopback address")?;
    let host = probe.local_addr()?.ip().to_string();
    // The replica: a minimal answer, so the measurement is the proxy's.
    let backend = tokio::net::TcpListener::bind((host.as_str(), args.backend_port))
        .await
        .with_context(|| format!("binding the backend on {}", args.backend_port))?;
    let body = "x".repeat(256);
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { body }
    });
    tokio::spawn(async move { axum::serve(backend, app).await });

    let client = client().await?;
    let name = unique_name("activator-bench");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}}))?,
        )
        .await?;
    backend_service(&client, &name, "bench", &host, args.backend_port).await?;

    let mut activator = tokio::process::Command::new(&bin)
        .args([
            "activator",
            "--control-addr",
            &format!("127.0.0.1:{}", args.control_port),
            "--listen-ip",
            &host,
            "--ports",
            &args.ports,
        ])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency * 2)
        .build()?;
    let control = format!("http://127.0.0.1:{}", args.control_port);
    let port = register(&http, &control, &name, "bench").await?;
    // The streaming replica, a second Service of the activator.
    let (_stop_emulator, emulator_shutdown) = llmscaler::process::Shutdown::manual();
    let serve = llmscaler_e2e::pod::ServeArgs {
        listen: format!("{host}:{}", args.emulator_port).parse()?,
        tokens_per_second: args.tokens_per_second,
        max_running: 64,
        shutdown_timeout_seconds: 1.0,
        model: "emulated".into(),
        load_seconds: 0.0,
    };
    tokio::spawn(llmscaler_e2e::pod::serve(serve, emulator_shutdown));
    backend_service(&client, &name, "bench-llm", &host, args.emulator_port).await?;
    let llm_port = register(&http, &control, &name, "bench-llm").await?;
    let llm_direct = format!("http://{host}:{}/v1/completions", args.emulator_port);
    let llm_proxied = format!("http://{host}:{llm_port}/v1/completions");
    complete(&http, &llm_proxied, 1).await?;

    let direct = format!("http://{host}:{}/v1/models", args.backend_port);
    let proxied = format!("http://{host}:{port}/v1/models");
    // Through the activator once it sees the Ready endpoint (a first request may be held).
    get(&http, &proxied).await?;
    for _ in 0..200 {
        get(&http, &direct).await?;
        get(&http, &proxied).await?;
    }

    let (mut lat_direct, mut lat_proxied) = (Vec::new(), Vec::new());
    for _ in 0..args.requests {
        let t = Instant::now();
        get(&http, &direct).await?;
        lat_direct.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        get(&http, &proxied).await?;
        lat_proxied.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat_direct.sort_by(f64::total_cmp);
    lat_proxied.sort_by(f64::total_cmp);
    let (d50, d99) = (percentile(&lat_direct, 0.5), percentile(&lat_direct, 0.99));
    let (p50, p99) = (
        percentile(&lat_proxied, 0.5),
        percentile(&lat_proxied, 0.99),
    );

    let (c, s) = (args.concurrency, args.seconds);
    let (t_direct1, f1) = throughput(&http, &direct, Work::Get, c, s).await;
    let (t_proxied, f2) = throughput(&http, &proxied, Work::Get, c, s).await;
    let (t_direct2, f3) = throughput(&http, &direct, Work::Get, c, s).await;
    let t_direct = (t_direct1 + t_direct2) / 2.0;
    let stream = Work::Complete(args.max_tokens);
    let (l_direct1, g1) = throughput(&http, &llm_direct, stream, c, s).await;
    let (l_proxied, g2) = throughput(&http, &llm_proxied, stream, c, s).await;
    let (l_direct2, g3) = throughput(&http, &llm_direct, stream, c, s).await;
    let llm_ratio = l_proxied / ((l_direct1 + l_direct2) / 2.0);
    activator.kill().await.ok();
    namespaces
        .delete(&name, &DeleteParams::default())
        .await
        .ok();

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let added50 = p50 - d50;
    let added99 = p99 - d99;
    let ratio = t_proxied / t_direct;
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let page = format!(
        "# Activator forwarding overhead\n\n\
         Generated by `bench/activator` (driver `e2e/src/bin/llmscaler-activator-bench.rs`) on the \
         local kwok cluster: a minimal HTTP backend on this machine's own address (256-byte \
         answers) as the Ready replica of a Service, and `llmscaler activator` registered for that Service forwarding \
         to it (nothing held: the overhead of the proxy path alone). One `reqwest` client with \
         kept-alive connections for both paths, in the same run.{note}\n\n\
         ## Latency ({n} sequential requests per path, alternating)\n\n\
         | path | p50 (ms) | p99 (ms) |\n|---|---|---|\n\
         | direct | {d50:.3} | {d99:.3} |\n\
         | through the activator | {p50:.3} | {p99:.3} |\n\
         | **added** | **{added50:.3}** | **{added99:.3}** |\n\n\
         Target: at most 1 ms added at p99: **{v1}**.\n\n\
         ## Throughput ({c} closed-loop workers, {s} s per run: direct, activator, direct)\n\n\
         | path | requests/s | failed |\n|---|---|---|\n\
         | direct (run 1) | {t_direct1:.0} | {f1} |\n\
         | through the activator | {t_proxied:.0} | {f2} |\n\
         | direct (run 2) | {t_direct2:.0} | {f3} |\n\n\
         Ratio activator / direct (mean of both direct runs): **{ratio:.2}**; target at least \
         0.8: **{v2}**. The machine's cores are shared by the client, the backend and the \
         activator, so the proxied path also pays for the activator's CPU out of the same \
         budget.\n\n\
         ## Throughput to a streaming replica ({c} workers, {s} s per run, streamed completions \
         of {tokens} tokens at {tps} tokens/s each, 64 decoded at once)\n\n\
         | path | completions/s | failed |\n|---|---|---|\n\
         | direct (run 1) | {l_direct1:.1} | {g1} |\n\
         | through the activator | {l_proxied:.1} | {g2} |\n\
         | direct (run 2) | {l_direct2:.1} | {g3} |\n\n\
         Ratio activator / direct: **{llm_ratio:.2}**; target at least 0.8: **{v3}**.\n\n\
         In steady state the activator is not in the path at all: the operator deletes its \
         EndpointSlice once a replica is Ready (`e2e/tests/activator.rs` checks the route is gone \
         after each wake-up).\n\n\
         Machine at the end of the run: {cores} cores, /proc/loadavg `{load}`.\n",
        load = load.trim(),
        note = if args.note.is_empty() {
            String::new()
        } else {
            format!(" {}", args.note)
        },
        n = args.requests,
        c = args.concurrency,
        s = args.seconds,
        v1 = verdict(added99 <= 1.0),
        v2 = verdict(ratio >= 0.8),
        v3 = verdict(llm_ratio >= 0.8),
        tokens = args.max_tokens,
        tps = args.tokens_per_second,
    );
    std::fs::write(&args.out, &page).with_context(|| format!("writing {}", args.out.display()))?;
    print!("{page}");
    Ok(())
}
