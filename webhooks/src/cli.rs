//! `llmscaler webhook`: the admission webhook alone, with no cluster, serving a certificate and
//! key from files that are reloaded when they change.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::Error;
use crate::server::{self, CertResolver};

/// Arguments of `llmscaler webhook`.
#[derive(clap::Args, Debug, Clone)]
pub struct WebhookArgs {
    /// Address to listen on (`HOST:PORT`; port 0 picks a free one, printed on stdout as
    /// `listening on https://ADDR`).
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub listen: String,
    /// PEM certificate chain (leaf first), reloaded when it changes.
    #[arg(long)]
    pub tls_cert_file: PathBuf,
    /// PEM private key of the leaf certificate, reloaded when it changes.
    #[arg(long)]
    pub tls_key_file: PathBuf,
    /// How often the certificate and key files are checked for changes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub cert_reload_interval_ms: u64,
}

/// Runs `llmscaler webhook` until SIGINT or SIGTERM. Exit 0 after a clean shutdown, 1 when the
/// certificate cannot be loaded at start or the address cannot be bound. Expects the rustls
/// crypto provider to be installed already (first thing in `main`).
pub fn run(args: &WebhookArgs) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

async fn serve(args: &WebhookArgs) -> Result<(), Error> {
    let (cert, key) = server::read_pair(&args.tls_cert_file, &args.tls_key_file).await?;
    let resolver = CertResolver::new();
    resolver.set(std::sync::Arc::new(server::certified_key_from_pem(
        &cert,
        &key,
        &args.tls_cert_file.display().to_string(),
    )?));
    let listener = std::net::TcpListener::bind(&args.listen).map_err(|source| Error::Serve {
        addr: args.listen.clone(),
        source,
    })?;
    let local = listener.local_addr().map_err(|source| Error::Serve {
        addr: args.listen.clone(),
        source,
    })?;
    let shutdown = shutdown_signal();
    // The line tests and scripts wait for: the server accepts connections from here on (the
    // socket is bound; connections queue until the accept loop starts).
    println!("listening on https://{local}");
    let _ = std::io::stdout().flush();
    let watcher = tokio::spawn(server::watch_files(
        resolver.clone(),
        args.tls_cert_file.clone(),
        args.tls_key_file.clone(),
        Duration::from_millis(args.cert_reload_interval_ms.max(10)),
        Some((cert, key)),
    ));
    let result = server::serve(listener, resolver, shutdown).await;
    watcher.abort();
    result
}

/// A future that completes on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed by this
/// call, before the future is first polled, so a signal that arrives while the server is still
/// starting is not lost (nor kills the process). Call it inside a Tokio runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        async move {
            match (interrupt, terminate) {
                (Some(mut interrupt), Some(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
