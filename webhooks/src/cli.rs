//! `llmscaler webhook`: the admission webhook alone, with no cluster, serving a certificate and
//! key from files that are reloaded when they change.

use std::io::Write;
use std::path::PathBuf;
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

/// Serves `llmscaler webhook` until `shutdown` resolves. The caller installs the rustls crypto
/// provider, tracing and the signal handlers first (`llmscaler::process`), so a signal that
/// arrives before `listening on ...` is printed is not lost.
///
/// # Errors
/// [`Error`] when the certificate cannot be loaded at start or the address cannot be bound.
pub async fn serve(
    args: &WebhookArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
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
