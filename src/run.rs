//! `llmscaler run`: the operator process. The controller runs behind a Lease (only the leader
//! writes); the metrics and health endpoints serve on every replica. SIGTERM or Ctrl-C stops the
//! controller and releases the Lease.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use crate::controller::{self, Context, names};
use crate::metrics::MetricsClient;
use crate::telemetry::{self, Metrics};

/// Command-line arguments of `llmscaler run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The operator's own namespace (Lease, webhook Secret); default `$POD_NAMESPACE`, else
    /// `default`.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Run the controller only, without the admission webhook server.
    #[arg(long)]
    pub no_webhook: bool,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Turn leader election off (a single replica; every instance writes).
    #[arg(long)]
    pub no_leader_election: bool,
    /// Lease duration, seconds: a failed leader is replaced within this time.
    #[arg(long, default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Watch LLMScalers of this namespace only (default: every namespace).
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// Identity in the Lease and in Events; default `$POD_NAME`, else hostname-pid.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// The admission webhook and its certificates (ignored with `--no-webhook`).
    #[command(flatten)]
    pub webhook: llmscaler_webhooks::managed::ManagedArgs,
}

/// Why the operator stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No Kubernetes credentials (`KUBECONFIG` or in-cluster).
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// The metric HTTP client could not be built.
    #[error("cannot build the metrics HTTP client: {0}")]
    MetricsClient(#[source] crate::metrics::MetricError),
    /// The metrics address is taken.
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, #[source] std::io::Error),
    /// Leader election failed to start.
    #[error("leader election: {0}")]
    Lease(#[source] kube_lease_manager::LeaseManagerError),
    /// The admission webhook failed (certificates or serving).
    #[error("admission webhook: {0}")]
    Webhook(#[source] llmscaler_webhooks::Error),
}

/// Runs the operator until SIGTERM / Ctrl-C.
///
/// # Errors
/// [`RunError`] when the client, the listener or the Lease cannot be set up.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    let client = kube::Client::try_default()
        .await
        .map_err(RunError::Client)?;
    let metrics_client = MetricsClient::new().map_err(RunError::MetricsClient)?;
    let telemetry = Arc::new(Metrics::new());
    let identity = args.identity.clone().unwrap_or_else(default_identity);

    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|e| RunError::Listen(args.metrics_addr, e))?;
    tracing::info!(addr = %args.metrics_addr, "serving /metrics, /healthz, /readyz");
    let router = telemetry::router(telemetry.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut http_stop = stop_rx.clone();
    let http = tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = http_stop.wait_for(|stop| *stop).await;
            })
            .await;
        if let Err(err) = served {
            tracing::error!(error = %err, "metrics server failed");
        }
    });
    // The webhook serves on every replica, leader or not, until shutdown.
    let webhook = if args.no_webhook {
        telemetry.set_ready(true);
        None
    } else {
        let mut stop = stop_rx.clone();
        let (client, namespace, webhook_args) =
            (client.clone(), args.namespace.clone(), args.webhook.clone());
        let ready = telemetry.clone();
        let listen = args.webhook.webhook_listen;
        Some(tokio::spawn(async move {
            let serving =
                llmscaler_webhooks::managed::run(client, &namespace, &webhook_args, async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                });
            tokio::pin!(serving);
            // Ready once the webhook accepts connections (it first loads or creates its
            // certificate); not ready again if it stops.
            let result = tokio::select! {
                result = &mut serving => result,
                () = wait_listening(listen) => {
                    ready.set_ready(true);
                    serving.await
                }
            };
            ready.set_ready(false);
            if let Err(err) = &result {
                tracing::error!(error = %err, "the admission webhook stopped");
            }
            result
        }))
    };

    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics_client,
        telemetry,
        Some(identity.clone()),
    ));

    let signal = shutdown_signal();
    tokio::pin!(signal);
    if args.no_leader_election {
        let mut stop = stop_rx.clone();
        tokio::select! {
            () = controller::run(ctx, args.watch_namespace.clone(), async move { let _ = stop.wait_for(|s| *s).await; }) => {}
            () = &mut signal => {}
        }
    } else {
        let duration = args.lease_duration_seconds.max(3);
        let manager = LeaseManagerBuilder::new(client, names::LEASE_NAME)
            .with_namespace(&args.namespace)
            .with_identity(&identity)
            .with_duration(duration)
            .with_grace((duration / 3).max(1))
            .build()
            .await
            .map_err(RunError::Lease)?;
        let (mut leader, lease_task) = manager.watch().await;
        loop {
            // Follower: wait for the lock or the signal.
            tokio::select! {
                changed = leader.wait_for(|is_leader| *is_leader) => {
                    if changed.is_err() { break; }
                }
                () = &mut signal => break,
            }
            tracing::info!(identity = %identity, "acquired the lease: controller starts");
            let (lost_tx, lost_rx) = watch::channel(false);
            let mut lost = lost_rx.clone();
            let controller = tokio::spawn(controller::run(
                ctx.clone(),
                args.watch_namespace.clone(),
                async move {
                    let _ = lost.wait_for(|l| *l).await;
                },
            ));
            let stop = tokio::select! {
                changed = leader.wait_for(|is_leader| !*is_leader) => changed.is_err(),
                () = &mut signal => true,
            };
            let _ = lost_tx.send(true);
            // The controller stops taking work; give in-flight syncs a bounded time.
            let mut controller = controller;
            if tokio::time::timeout(Duration::from_secs(10), &mut controller)
                .await
                .is_err()
            {
                // A follower must not write: stop it for good.
                controller.abort();
                tracing::warn!("controller did not stop within 10 s");
            }
            if stop {
                break;
            }
            tracing::warn!(identity = %identity, "lost the lease: controller stopped");
        }
        // Dropping the receiver makes the lease task release the Lease and end.
        drop(leader);
        match tokio::time::timeout(Duration::from_secs(5), lease_task).await {
            Ok(Ok(Ok(_))) => tracing::info!("lease released"),
            Ok(Ok(Err(err))) => tracing::warn!(error = %err, "releasing the lease failed"),
            Ok(Err(err)) => tracing::warn!(error = %err, "lease task failed"),
            Err(_) => tracing::warn!("lease release timed out"),
        }
    }
    let _ = stop_tx.send(true);
    let _ = http.await;
    match webhook {
        Some(task) => match task.await {
            Ok(result) => result.map_err(RunError::Webhook),
            Err(err) => {
                tracing::warn!(error = %err, "webhook task failed");
                Ok(())
            }
        },
        None => Ok(()),
    }
}

/// Returns once a TCP connection to `addr` succeeds (an unspecified address is reached on
/// loopback), polling every 100 ms.
async fn wait_listening(addr: SocketAddr) {
    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    while tokio::net::TcpStream::connect(target).await.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "llmscaler".to_string());
    format!("{host}-{}", std::process::id())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutdown signal received");
}
