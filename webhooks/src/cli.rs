//! `llmscaler webhook`: the admission webhook alone, with no cluster, serving a certificate and
//! key from files that are reloaded when they change.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::Error;
use crate::server::{self, CertResolver};

/// The operator-wide policy flags of `llmscaler run` and `llmscaler webhook`
/// (`docs/security.md`; Helm values `egress.allowedServerAddresses`,
/// `egress.allowTenantHeader`, `maxReplicasCap`, `minSyncPeriodSeconds`).
#[derive(clap::Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Where metric requests may go: comma-separated host patterns (`prometheus.monitoring.svc`,
    /// `*.monitoring.svc.cluster.local`, `*`) and networks (`10.0.0.0/8`, `fd00::/8`). Empty =
    /// any host, any address but cloud metadata and link-local ones.
    #[arg(
        long,
        env = "LLMSCALER_ALLOWED_SERVER_ADDRESSES",
        value_delimiter = ','
    )]
    pub allowed_server_addresses: Vec<String>,
    /// Allow tenancy headers (`X-Scope-OrgID`, `THANOS-TENANT`) in `serverHeaders`.
    #[arg(long)]
    pub allow_tenant_header: bool,
    /// Upper bound on any scaler's `spec.maxReplicas`, replicas (admission refuses more; a
    /// stored scaler above it is held and reported invalid). Default 128; 2147483647 = none.
    #[arg(
        long,
        env = "LLMSCALER_MAX_REPLICAS_CAP",
        default_value_t = llmscaler_api::policy::DEFAULT_MAX_REPLICAS_CAP
    )]
    pub max_replicas_cap: i32,
    /// Lower bound on any scaler's `spec.syncPeriodSeconds` and `spec.retryPeriodSeconds`,
    /// seconds (admission refuses less; a stored scaler below it is held and reported invalid).
    /// Default 5; 1 = the schema's minimum only (the e2e harness sets 1 through the environment).
    #[arg(
        long,
        env = "LLMSCALER_MIN_SYNC_PERIOD_SECONDS",
        default_value_t = llmscaler_api::policy::DEFAULT_MIN_SYNC_PERIOD_SECONDS
    )]
    pub min_sync_period_seconds: i32,
    /// Accept `serverHeadersFrom` (header values from Secrets) only for scalers in the
    /// operator's own namespace (KEDA's `--restrict-secret-access`).
    #[arg(long)]
    pub restrict_secret_access: bool,
}

impl PolicyArgs {
    /// The policy these flags describe, for an operator in `operator_namespace`.
    ///
    /// # Errors
    /// A message naming an allow-list entry that does not parse, or a negative cap.
    pub fn policy(
        &self,
        operator_namespace: Option<&str>,
    ) -> Result<llmscaler_api::OperatorPolicy, String> {
        if self.max_replicas_cap < 0 {
            return Err(format!(
                "--max-replicas-cap {} must be 0 or more",
                self.max_replicas_cap
            ));
        }
        if self.min_sync_period_seconds < 1 {
            return Err(format!(
                "--min-sync-period-seconds {} must be 1 or more",
                self.min_sync_period_seconds
            ));
        }
        Ok(llmscaler_api::OperatorPolicy {
            egress: llmscaler_api::policy::EgressPolicy::parse(&self.allowed_server_addresses)?,
            allow_tenant_header: self.allow_tenant_header,
            max_replicas_cap: (self.max_replicas_cap < i32::MAX).then_some(self.max_replicas_cap),
            min_sync_period_seconds: self.min_sync_period_seconds,
            restrict_secret_access: self.restrict_secret_access,
            operator_namespace: operator_namespace.map(str::to_owned),
        })
    }
}

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
    /// After SIGTERM, how long open connections may take to close, seconds: answers carry
    /// `Connection: close` meanwhile and new connections are still served; the server stops
    /// earlier once none is open (`docs/security.md#keep-alive-and-shutdown`).
    #[arg(long, default_value_t = server::DEFAULT_DRAIN.as_secs())]
    pub drain_seconds: u64,
    /// The operator-wide policy admission enforces.
    #[command(flatten)]
    pub policy: PolicyArgs,
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
    let policy = args.policy.policy(None).map_err(Error::Policy)?;
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
    let drain = Duration::from_secs(args.drain_seconds);
    let result = server::serve(
        listener,
        resolver,
        shutdown,
        server::WebhookContext::new(policy),
        drain,
    )
    .await;
    watcher.abort();
    result
}
