//! `llmscaler run`: the operator process. The controller runs behind a Lease (only the leader
//! writes); the metrics and health endpoints serve on every replica. SIGTERM or Ctrl-C stops the
//! controller and releases the Lease. Every write checks the Lease right before it; a dead
//! controller task or lease task ends the process (exit 1) after failing `/healthz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use llmscaler_api::names::LEASE_NAME;

use crate::controller::leadership::Leadership;
use crate::controller::{self, Context};
use crate::engine::clock::{Clock, OffsetClock};
use crate::lease::Election;
use crate::metrics::MetricsClient;
use crate::process::Shutdown;
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
    /// Name of the leader-election Lease in `--namespace` (the chart derives it from the release,
    /// so two installs never share one).
    #[arg(long, default_value = LEASE_NAME)]
    pub lease_name: String,
    /// Watch LLMScalers (and their targets) of these namespaces only, comma-separated or
    /// repeated (default: every namespace). One controller runs per namespace, so namespaced
    /// RBAC in each is enough (the chart's `watchNamespaces`).
    #[arg(long, value_delimiter = ',')]
    pub watch_namespace: Vec<String>,
    /// At most this many LLMScaler syncs run at once per watched namespace (0: no bound); the
    /// others wait their turn, which shows in `llmscaler_evaluation_lag_seconds`
    /// (`docs/scaling.md#pacing`).
    #[arg(long, default_value_t = controller::DEFAULT_MAX_CONCURRENT_SYNCS)]
    pub max_concurrent_syncs: u16,
    /// Queries per second each namespace's scalers may send on average (a bucket of 5 s of
    /// budget); a sync that would overspend waits, keeping its replicas, and says so in
    /// `ScalingActive` (`QueryBudgetExceeded`). 0: no budget (docs/security.md#query-budget).
    #[arg(
        long,
        env = "LLMSCALER_NAMESPACE_QUERY_BUDGET",
        default_value_t = controller::query_budget::DEFAULT_QUERIES_PER_SECOND
    )]
    pub namespace_query_budget: f64,
    /// Seconds the admission webhook keeps accepting new connections after SIGTERM, with
    /// `/readyz` already unready, before it drains: the time the pod's removal from the
    /// Service's EndpointSlices takes to reach every kube-proxy. The Lease is released at the
    /// signal, before this delay, so a follower leads at once
    /// (`docs/writing-replicas.md#leader-election`). The chart sets it from
    /// `shutdownDelaySeconds` instead of a preStop sleep, which would hold SIGTERM, and with it
    /// the Lease, for the whole delay. 0: drain at once.
    #[arg(long, env = "LLMSCALER_SHUTDOWN_DELAY_SECONDS", default_value_t = 0)]
    pub shutdown_delay_seconds: u64,
    /// Identity in the Lease and in Events; default `$POD_NAME`, else hostname-pid.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Test only: this process's clock runs this many seconds ahead of the wall clock (negative:
    /// behind), for the Lease's times and every sync, as on a node with a drifting clock
    /// (`e2e/tests/faults.rs`). Hidden from `--help`.
    #[arg(long, default_value_t = 0, hide = true, allow_hyphen_values = true)]
    pub test_clock_offset_seconds: i64,
    /// The activator's Service, `NAMESPACE/NAME`: scalers with `spec.scaleToZero.holdRequests`
    /// route their Service to its Ready pods while at zero
    /// (docs/scaling.md#holding-requests-while-waking-from-zero). Needs
    /// `--activator-control-url`.
    #[arg(long, requires = "activator_control_url", value_parser = parse_service)]
    pub activator: Option<(String, String)>,
    /// The activator's control API, e.g. `http://llmscaler-activator.llmscaler-system:9090/`.
    #[arg(long, requires = "activator")]
    pub activator_control_url: Option<url::Url>,
    /// The operator-wide policy (`docs/security.md`), enforced by admission and the controller.
    #[command(flatten)]
    pub policy: llmscaler_webhooks::cli::PolicyArgs,
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
    /// The election task ended while the process still ran: nobody renews the Lease.
    #[error("leader election stopped unexpectedly; exiting so the pod is restarted")]
    LeaseTaskEnded,
    /// The controller task ended or panicked while the process still ran: scaling would stop
    /// silently, so the process exits (and `/healthz` fails meanwhile).
    #[error("the controller stopped unexpectedly ({0}); exiting so the pod is restarted")]
    ControllerDied(String),
    /// The admission webhook failed (certificates or serving).
    #[error("admission webhook: {0}")]
    Webhook(#[source] llmscaler_webhooks::Error),
    /// The activator's HTTP client could not be built.
    #[error("cannot build the activator's HTTP client: {0}")]
    ActivatorClient(#[source] reqwest::Error),
    /// The operator policy flags do not parse.
    #[error("operator policy: {0}")]
    Policy(String),
}

/// Runs the operator until `shutdown` (SIGTERM / Ctrl-C).
///
/// # Errors
/// [`RunError`] when the client, the listener or the Lease cannot be set up, or when the
/// controller or leader election dies.
pub async fn run(args: RunArgs, shutdown: Shutdown) -> Result<(), RunError> {
    let policy = args
        .policy
        .policy(Some(&args.namespace))
        .map_err(RunError::Policy)?;
    if !(args.namespace_query_budget.is_finite() && args.namespace_query_budget >= 0.0) {
        return Err(RunError::Policy(format!(
            "--namespace-query-budget {} must be a number of queries per second, 0 (no budget) \
             or more",
            args.namespace_query_budget
        )));
    }
    let client = kube::Client::try_default()
        .await
        .map_err(RunError::Client)?;
    let metrics_client =
        MetricsClient::with_policy(policy.clone()).map_err(RunError::MetricsClient)?;
    let telemetry = Arc::new(Metrics::new());
    let identity = args.identity.clone().unwrap_or_else(default_identity);

    let listener = std::net::TcpListener::bind(args.metrics_addr)
        .map_err(|e| RunError::Listen(args.metrics_addr, e))?;
    tracing::info!(addr = %args.metrics_addr, "serving /metrics, /healthz, /readyz");
    let router = telemetry::router(telemetry.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut http_stop = stop_rx.clone();
    let http = tokio::spawn(async move {
        // Hardened like the webhook listener (`docs/security.md#listeners`).
        let served = llmscaler_webhooks::listener::serve_plain(
            listener,
            router,
            llmscaler_webhooks::listener::METRICS_LIMITS,
            async move {
                let _ = http_stop.wait_for(|stop| *stop).await;
            },
            Duration::from_secs(5),
        )
        .await;
        if let Err(err) = served {
            tracing::error!(error = %err, "metrics server failed");
        }
    });
    // The webhook drains from the shutdown request on, beside the controller's stop
    // (`docs/security.md#keep-alive-and-shutdown`); `webhook_stop` ends it when the controller
    // side ends for another reason.
    let (webhook_stop_tx, webhook_stop_rx) = watch::channel(false);
    let webhook = (!args.no_webhook).then(|| {
        spawn_webhook(
            client.clone(),
            &args,
            policy.clone(),
            telemetry.clone(),
            webhook_stop_rx,
            shutdown.clone(),
        )
    });
    if webhook.is_none() {
        telemetry.set_ready(true);
    }

    let activator = match (&args.activator, &args.activator_control_url) {
        (Some(service), Some(url)) => Some(Arc::new(
            controller::activator::ActivatorLink::new(service.clone(), url.clone())
                .map_err(RunError::ActivatorClient)?,
        )),
        _ => None,
    };
    let poll = activator.clone().map(|link| {
        tracing::info!(service = ?link.service, "requests are held by the activator while fleets wake from zero");
        tokio::spawn(async move { link.poll().await })
    });
    let operator = Operator {
        activator,
        client,
        metrics_client,
        policy,
        telemetry,
        identity,
        clock: Arc::new(OffsetClock {
            offset_ms: args.test_clock_offset_seconds.saturating_mul(1000),
        }),
        watch_namespaces: args.watch_namespace.clone(),
        max_concurrent_syncs: args.max_concurrent_syncs,
        query_budget: controller::query_budget::QueryBudget::new(args.namespace_query_budget)
            .map(Arc::new),
    };
    let result = if args.no_leader_election {
        operator.run_single(&shutdown).await
    } else {
        operator.run_elected(&args, &shutdown).await
    };
    if let Some(poll) = poll {
        poll.abort();
    }
    // On SIGTERM the webhook ends by itself, after `--shutdown-delay-seconds` and its drain;
    // otherwise (the controller side failed) it stops now. The sender lives to the end of the
    // function: dropping it would read as a stop.
    if !shutdown.is_requested() {
        let _ = webhook_stop_tx.send(true);
    }
    let webhook_result = match webhook {
        Some(task) => match task.await {
            Ok(result) => result.map_err(RunError::Webhook),
            Err(err) => {
                tracing::warn!(error = %err, "webhook task failed");
                Ok(())
            }
        },
        None => Ok(()),
    };
    // `/metrics` and the probes answer until the webhook has drained.
    let _ = stop_tx.send(true);
    let _ = http.await;
    result.and(webhook_result)
}

/// Serves the admission webhook on every replica, leader or not, until shutdown is requested
/// or `stop`, then drains it (`docs/security.md#keep-alive-and-shutdown`). `/readyz` turns ready
/// once it accepts connections and unready at the shutdown request; if it stops before
/// shutdown, the process is marked unhealthy (`/healthz` fails) so the pod is restarted.
fn spawn_webhook(
    client: kube::Client,
    args: &RunArgs,
    policy: llmscaler_api::OperatorPolicy,
    telemetry: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
    shutdown: Shutdown,
) -> tokio::task::JoinHandle<Result<(), llmscaler_webhooks::Error>> {
    let (namespace, webhook_args) = (args.namespace.clone(), args.webhook.clone());
    let listen = args.webhook.webhook_listen;
    let requested = shutdown.clone();
    let delay = Duration::from_secs(args.shutdown_delay_seconds);
    tokio::spawn(async move {
        let expiry = telemetry.clone();
        let serving = llmscaler_webhooks::managed::run_observed(
            client,
            &namespace,
            &webhook_args,
            policy,
            async move {
                tokio::select! {
                    () = requested.wait() => {}
                    _ = stop.wait_for(|stop| *stop) => return,
                }
                // Unready already; new connections still arrive until every kube-proxy has
                // dropped this pod, and are served.
                if !delay.is_zero() {
                    tracing::info!(
                        seconds = delay.as_secs(),
                        "shutdown: the webhook serves on while the pod leaves the Service's endpoints"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = stop.wait_for(|stop| *stop) => {}
                    }
                }
            },
            move |unix_seconds| expiry.set_webhook_certificate_expiry(unix_seconds),
        );
        tokio::pin!(serving);
        let result = tokio::select! {
            result = &mut serving => result,
            () = wait_listening(listen) => {
                telemetry.set_ready(true);
                tokio::select! {
                    result = &mut serving => result,
                    () = shutdown.requested() => {
                        telemetry.set_ready(false);
                        serving.await
                    }
                }
            }
        };
        telemetry.set_ready(false);
        if !shutdown.is_requested() {
            telemetry.set_unhealthy();
            match &result {
                Err(err) => tracing::error!(error = %err, "the admission webhook stopped"),
                Ok(()) => tracing::error!("the admission webhook stopped"),
            }
        }
        result
    })
}

/// The controller side of the process.
struct Operator {
    /// The activator link (`--activator`), shared by every controller.
    activator: Option<Arc<controller::activator::ActivatorLink>>,
    client: kube::Client,
    metrics_client: MetricsClient,
    /// The operator policy of the flags, for every controller's context.
    policy: llmscaler_api::OperatorPolicy,
    telemetry: Arc<Metrics>,
    identity: String,
    /// This process's clock (the wall clock unless `--test-clock-offset-seconds`).
    clock: Arc<dyn Clock>,
    /// Empty: every namespace.
    watch_namespaces: Vec<String>,
    /// Bound of concurrent syncs per controller.
    max_concurrent_syncs: u16,
    /// The per-namespace query budget, shared by every controller.
    query_budget: Option<Arc<controller::query_budget::QueryBudget>>,
}

/// Why a leadership term ended.
enum TermEnd {
    Shutdown,
    LostLease,
    LeaseTaskEnded,
    ControllerDied(String),
}

impl Operator {
    /// One controller per watched namespace (one for every namespace when none is given), each
    /// with its own context and caches, all sharing `leadership`. The task ends when any of
    /// them ends (a dead controller ends the term).
    fn spawn_controller(
        &self,
        leadership: Leadership,
        previous_leader_behind_ms: i64,
    ) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let scopes: Vec<Option<String>> = if self.watch_namespaces.is_empty() {
            vec![None]
        } else {
            self.watch_namespaces.iter().cloned().map(Some).collect()
        };
        let controllers = scopes.into_iter().map(|scope| {
            let mut ctx = Context::new(
                self.client.clone(),
                self.metrics_client.clone(),
                self.telemetry.clone(),
                (Some(self.identity.clone()), scope.clone()),
                leadership.clone(),
            );
            ctx.max_concurrent_syncs = self.max_concurrent_syncs;
            ctx.clock = self.clock.clone();
            ctx.previous_leader_behind_ms = previous_leader_behind_ms;
            ctx.policy = self.policy.clone();
            ctx.query_budget = self.query_budget.clone();
            ctx.activator = self.activator.clone();
            let ctx = Arc::new(ctx);
            let mut stop = stop_rx.clone();
            Box::pin(controller::run(ctx, scope, async move {
                let _ = stop.wait_for(|s| *s).await;
            }))
        });
        let controllers: Vec<_> = controllers.collect();
        let task = tokio::spawn(async move {
            futures::future::select_all(controllers).await;
        });
        (stop_tx, task)
    }

    /// Without leader election: one controller until shutdown.
    async fn run_single(&self, shutdown: &Shutdown) -> Result<(), RunError> {
        self.telemetry.set_leader(true);
        let (stop, mut task) = self.spawn_controller(Leadership::always(), 0);
        let end = tokio::select! {
            () = shutdown.requested() => TermEnd::Shutdown,
            joined = &mut task => TermEnd::ControllerDied(died(joined)),
        };
        let _ = stop.send(true);
        self.finish_term(end, task).await
    }

    /// With leader election: a controller per leadership term. On shutdown the Lease is
    /// released as soon as the term's writes are refused, before in-flight syncs finish, so a
    /// follower leads within about a second ([`crate::lease`]).
    async fn run_elected(&self, args: &RunArgs, shutdown: &Shutdown) -> Result<(), RunError> {
        let duration = Duration::from_secs(args.lease_duration_seconds.max(3));
        let election = Election::start(
            self.client.clone(),
            (&args.namespace, &args.lease_name),
            &self.identity,
            duration,
            self.clock.clone(),
        );
        let mut leader = election.leading.clone();
        let clock_ahead = election.clock_ahead_ms.clone();
        let mut release = Some(election);
        let result = loop {
            // Follower: wait for the lock or the signal.
            tokio::select! {
                changed = leader.wait_for(|is_leader| *is_leader) => {
                    if changed.is_err() { break Err(RunError::LeaseTaskEnded); }
                }
                () = shutdown.requested() => break Ok(()),
            }
            tracing::info!(identity = %self.identity, "acquired the lease: controller starts");
            let leadership = Leadership::term(leader.clone());
            self.telemetry.set_leader(true);
            let behind_ms = clock_ahead.load(std::sync::atomic::Ordering::Relaxed);
            if behind_ms > 1_000 {
                tracing::warn!(
                    behind_ms,
                    "the previous leader's clock ran behind this one (from the Lease): times it wrote in status are moved later"
                );
            }
            let (stop, mut task) = self.spawn_controller(leadership.clone(), behind_ms);
            let end = tokio::select! {
                changed = leader.wait_for(|is_leader| !*is_leader) => {
                    if changed.is_err() { TermEnd::LeaseTaskEnded } else { TermEnd::LostLease }
                }
                () = shutdown.requested() => TermEnd::Shutdown,
                joined = &mut task => TermEnd::ControllerDied(died(joined)),
            };
            // Writes stop now, before in-flight syncs end.
            leadership.end();
            let _ = stop.send(true);
            if matches!(end, TermEnd::Shutdown)
                && let Some(election) = release.take()
            {
                // Nothing of this process writes any more: hand the Lease over at once.
                election.release(Duration::from_secs(5)).await;
            }
            if matches!(end, TermEnd::LostLease) {
                tracing::warn!(identity = %self.identity, "lost the lease: controller stopped");
            }
            let finished = self.finish_term(end, task).await;
            // The next leader exports the scalers' series; stale ones from here would double
            // them in sums and keep alerts firing on values nobody updates.
            self.telemetry.set_leader(false);
            let removed = self.telemetry.forget_all();
            tracing::debug!(removed, "per-scaler series cleared at the end of the term");
            match finished {
                Ok(()) if !shutdown.is_requested() => {}
                other => break other,
            }
        };
        if let Some(election) = release.take() {
            election.release(Duration::from_secs(5)).await;
        }
        result
    }

    /// Ends a term: waits a bounded time for in-flight syncs (their writes are already refused),
    /// then says whether the process goes on.
    async fn finish_term(
        &self,
        end: TermEnd,
        mut task: tokio::task::JoinHandle<()>,
    ) -> Result<(), RunError> {
        if !matches!(end, TermEnd::ControllerDied(_))
            && tokio::time::timeout(Duration::from_secs(10), &mut task)
                .await
                .is_err()
        {
            task.abort();
            let _ = task.await;
            tracing::warn!("controller did not stop within 10 s; aborted");
        }
        match end {
            TermEnd::Shutdown | TermEnd::LostLease => Ok(()),
            TermEnd::LeaseTaskEnded => {
                self.telemetry.set_unhealthy();
                Err(RunError::LeaseTaskEnded)
            }
            TermEnd::ControllerDied(why) => {
                self.telemetry.set_unhealthy();
                tracing::error!(why = %why, "the controller stopped unexpectedly");
                Err(RunError::ControllerDied(why))
            }
        }
    }
}

/// Why a controller task ended on its own.
fn died(joined: Result<(), tokio::task::JoinError>) -> String {
    match joined {
        Ok(()) => "its watch ended".to_owned(),
        Err(err) if err.is_panic() => "it panicked".to_owned(),
        Err(err) => err.to_string(),
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

/// Parses `NAMESPACE/NAME`.
fn parse_service(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!(
            "{raw:?}: expected NAMESPACE/NAME of the activator's Service"
        )),
    }
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "llmscaler".to_string());
    format!("{host}-{}", std::process::id())
}
