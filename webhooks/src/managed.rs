//! The webhook as the operator runs it (`llmscaler run`): certificates from
//! `llmscaler-certs` (CA and serving certificate in a Secret, rotated, `caBundle` injected),
//! fed into the server's [`CertResolver`] as they change. One call: [`run`].

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use llmscaler_api::OperatorPolicy;
use llmscaler_certs::CertConfig;

use crate::Error;
use crate::server::{self, CertResolver};

/// Default name of the Secret holding the webhook's CA and serving certificate.
pub(crate) const DEFAULT_SECRET_NAME: &str = "llmscaler-webhook-certs";
/// Default name of the webhook Service (the serving certificate's DNS names derive from it).
pub(crate) const DEFAULT_SERVICE_NAME: &str = "llmscaler-webhook";

/// Command-line flags of the managed webhook, meant to be `#[command(flatten)]`ed into the
/// operator's `run` arguments: `--webhook-listen`, `--cert-secret`, `--webhook-service`,
/// `--webhook-extra-san` (repeatable), `--validating-webhook-configuration`,
/// `--mutating-webhook-configuration`, `--webhook-cert-check-seconds`,
/// `--webhook-drain-seconds` (the names the chart passes).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ManagedArgs {
    /// Address the admission webhook listens on (HTTPS).
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub webhook_listen: SocketAddr,
    /// Secret (in the operator's namespace) holding the webhook CA and serving certificate.
    #[arg(long = "cert-secret", default_value = DEFAULT_SECRET_NAME)]
    pub webhook_secret_name: String,
    /// Service in front of the webhook; the certificate is valid for its cluster DNS names.
    #[arg(long = "webhook-service", default_value = DEFAULT_SERVICE_NAME)]
    pub webhook_service_name: String,
    /// More names for the serving certificate (DNS name or IP, e.g. 127.0.0.1 when the API
    /// server calls the webhook by URL). Repeatable.
    #[arg(long = "webhook-extra-san")]
    pub webhook_extra_sans: Vec<String>,
    /// ValidatingWebhookConfiguration whose caBundle the operator maintains.
    #[arg(long)]
    pub validating_webhook_configuration: Option<String>,
    /// MutatingWebhookConfiguration whose caBundle the operator maintains.
    #[arg(long)]
    pub mutating_webhook_configuration: Option<String>,
    /// Seconds between two checks of the Secret and the caBundles.
    #[arg(long, default_value_t = 10)]
    pub webhook_cert_check_seconds: u64,
    /// After SIGTERM, how long the webhook's open connections may take to close, seconds
    /// (answers carry `Connection: close` meanwhile; it stops earlier once none is open). Keep
    /// the pod's `terminationGracePeriodSeconds` above the preStop delay plus this.
    #[arg(long, default_value_t = server::DEFAULT_DRAIN.as_secs())]
    pub webhook_drain_seconds: u64,
}

impl ManagedArgs {
    /// The certificate configuration for an operator running in `namespace`.
    pub fn cert_config(&self, namespace: &str) -> CertConfig {
        let mut cfg = CertConfig::new(
            namespace,
            &self.webhook_secret_name,
            &self.webhook_service_name,
        );
        cfg.extra_sans = self.webhook_extra_sans.clone();
        cfg.validating_webhook_configuration = self.validating_webhook_configuration.clone();
        cfg.mutating_webhook_configuration = self.mutating_webhook_configuration.clone();
        cfg.check_interval = Duration::from_secs(self.webhook_cert_check_seconds.max(1));
        cfg
    }
}

/// First delay between two attempts to start the webhook; doubled after each failure up to
/// [`START_BACKOFF_MAX`] (`docs/security.md#availability`).
pub(crate) const START_BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// Longest delay between two attempts to start the webhook.
pub(crate) const START_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Runs the admission webhook of an operator in `namespace`, checking specs against `policy`,
/// until `shutdown` completes:
/// brings the Secret up to date (creating the CA and serving certificate if absent), binds
/// [`ManagedArgs::webhook_listen`], serves with the Secret's certificate, and keeps running
/// `llmscaler_certs::maintain` beside the server, which rotates the certificates, re-injects
/// the `caBundle`, and swaps the served certificate without a restart.
///
/// Starting (the Secret, the bind) is retried with exponential backoff from
/// [`START_BACKOFF_FIRST`] to [`START_BACKOFF_MAX`] until it succeeds or `shutdown` completes,
/// each failure logged: an API server that is briefly unreachable, a Secret write that
/// conflicts with another replica, or a port still held by the previous process does not stop
/// the webhook for good. Meanwhile `/readyz` stays unready.
///
/// # Errors
/// [`Error::Serve`] when serving fails after the start, and the certificate errors of
/// [`CertResolver::set_pem`].
pub async fn run(
    client: kube::Client,
    namespace: &str,
    args: &ManagedArgs,
    policy: OperatorPolicy,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    run_observed(client, namespace, args, policy, shutdown, |_| {}).await
}

/// [`run`], calling `on_certificate` with the expiry (Unix seconds) of each serving certificate
/// it starts serving (the first, then every renewal), for the operator's
/// `llmscaler_webhook_certificate_expiry_timestamp_seconds`.
///
/// # Errors
/// As [`run`].
pub async fn run_observed(
    client: kube::Client,
    namespace: &str,
    args: &ManagedArgs,
    policy: OperatorPolicy,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_certificate: impl Fn(i64) + Send + Sync + 'static,
) -> Result<(), Error> {
    let on_certificate = std::sync::Arc::new(on_certificate);
    let report =
        move |pem: &str| match llmscaler_certs::pki::inspect(pem, "the serving certificate") {
            Ok(info) => on_certificate(info.not_after.unix_timestamp()),
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the serving certificate's expiry")
            }
        };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let cfg = args.cert_config(namespace);
    let mut delay = START_BACKOFF_FIRST;
    let (resolver, listener, serving_pem) = loop {
        match start(&client, &cfg, args).await {
            Ok(started) => break started,
            Err(err) => {
                tracing::warn!(error = %err, retry_in = ?delay, "cannot start the admission webhook; retrying");
                tokio::select! {
                    () = stopped(stop_rx.clone()) => {
                        watcher.abort();
                        return Ok(());
                    }
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(START_BACKOFF_MAX);
            }
        }
    };
    tracing::info!(addr = %args.webhook_listen, "serving the admission webhook");
    report(&serving_pem);
    let feed = resolver.clone();
    let access = crate::access::TargetAccess::new(client.clone());
    let certs = tokio::spawn(llmscaler_certs::maintain(
        client,
        cfg,
        move |pems| match feed.set_pem(pems.cert_chain_pem.as_bytes(), pems.key_pem.as_bytes()) {
            Ok(()) => report(&pems.cert_chain_pem),
            Err(err) => {
                tracing::warn!(error = %err, "new serving certificate not loaded; keeping the old one")
            }
        },
    ));
    let context = server::WebhookContext {
        policy,
        access: Some(access),
    };
    let drain = Duration::from_secs(args.webhook_drain_seconds);
    let result = server::serve(listener, resolver, stopped(stop_rx), context, drain).await;
    certs.abort();
    watcher.abort();
    result
}

/// One attempt to start: the Secret, the resolver, the bound listener.
async fn start(
    client: &kube::Client,
    cfg: &CertConfig,
    args: &ManagedArgs,
) -> Result<(std::sync::Arc<CertResolver>, std::net::TcpListener, String), Error> {
    let state = llmscaler_certs::sync_secret(client, cfg, time::OffsetDateTime::now_utc())
        .await
        .map_err(Error::Certs)?;
    let resolver = CertResolver::new();
    resolver.set_pem(state.tls_cert_pem.as_bytes(), state.tls_key_pem.as_bytes())?;
    let listener =
        std::net::TcpListener::bind(args.webhook_listen).map_err(|source| Error::Serve {
            addr: args.webhook_listen.to_string(),
            source,
        })?;
    Ok((resolver, listener, state.tls_cert_pem))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ManagedArgs,
    }

    #[test]
    fn flags_the_chart_passes_parse_into_a_cert_config() {
        let cli = Cli::try_parse_from([
            "llmscaler",
            "--webhook-listen=0.0.0.0:9443",
            "--webhook-service=llmscaler",
            "--cert-secret=llmscaler-webhook-tls",
            "--validating-webhook-configuration=llmscaler",
            "--mutating-webhook-configuration=llmscaler",
            "--webhook-extra-san=127.0.0.1",
            "--webhook-extra-san=localhost",
        ])
        .expect("parses");
        let cfg = cli.args.cert_config("ops");
        assert_eq!(cfg.namespace, "ops");
        assert_eq!(cfg.secret_name, "llmscaler-webhook-tls");
        assert_eq!(cfg.service_name, "llmscaler");
        assert_eq!(cfg.extra_sans, vec!["127.0.0.1", "localhost"]);
        assert_eq!(
            cfg.validating_webhook_configuration.as_deref(),
            Some("llmscaler")
        );
        assert_eq!(cfg.check_interval, Duration::from_secs(10));
        assert!(
            cfg.subject_alt_names()
                .contains(&"llmscaler.ops.svc".to_string())
        );
    }

    /// Issue 11, item 8: an unreachable API server at start is retried with backoff (the
    /// webhook does not give up), and shutdown still ends it at once.
    #[tokio::test]
    async fn start_is_retried_until_shutdown() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let unreachable = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", unreachable.local_addr().expect("addr"));
        drop(unreachable);
        let config = kube::Config::new(url.parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let cli = Cli::try_parse_from(["llmscaler", "--webhook-listen=127.0.0.1:0"]).expect("args");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            run(
                client,
                "ops",
                &cli.args,
                OperatorPolicy::default(),
                async move {
                    let _ = rx.await;
                },
            )
            .await
        });
        // Several attempts fit in 2 s (0.5 + 1 s of backoff); the task must still be running.
        let still_running = tokio::time::timeout(Duration::from_secs(2), async {
            while !task.is_finished() {
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_err();
        assert!(still_running, "the webhook gave up: {:?}", task.await);
        let _ = tx.send(());
        let result = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops at shutdown")
            .expect("task");
        assert!(result.is_ok(), "{result:?}");
    }

    #[test]
    fn defaults_need_no_flags() {
        let cli = Cli::try_parse_from(["llmscaler"]).expect("parses");
        assert_eq!(cli.args.webhook_secret_name, DEFAULT_SECRET_NAME);
        assert_eq!(cli.args.webhook_service_name, DEFAULT_SERVICE_NAME);
        assert_eq!(cli.args.validating_webhook_configuration, None);
    }
}
