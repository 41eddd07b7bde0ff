//! The controller: every `syncPeriodSeconds`, each LLMScaler is synced as
//! observe → step → act → report (`docs/scaling.md`):
//! - [`observe`]: re-check the spec, read the target, the metrics and what the step asks for
//!   (reads only; Secrets and the metric source once per sync, pods from the [`pod_cache`]);
//! - [`crate::step`]: the pure step, which decides everything and returns a plan of effects;
//! - [`act`]: carries the plan's effects out (rotation labels, victim marks, `spec.replicas`,
//!   Events), each write checked against the [`leadership`] handle right before it;
//! - [`report`]: the new status and the Events of condition flips, the operator's metrics;
//! - [`state`]: per-scaler memory, evicted with the scaler.
//!
//! Every LLMScaler carries the [`FINALIZER`]: on delete the operator hands its target back as
//! `llmscaler release` does (drained pods back in rotation, its pod marks cleared, its ownership
//! of `spec.replicas` dropped, the value kept; docs/uninstall.md#deleting-an-llmscaler).
//!
//! Pacing is a per-scaler requeue to the scaler's next due time ([`pacing`]: a stable phase in
//! its period, so scalers with the same period do not fire together), with at most
//! [`Context::max_concurrent_syncs`] syncs at once; the watch on LLMScalers is filtered by
//! `metadata.generation` so the operator's own status writes do not re-trigger a sync.

pub(crate) mod act;
pub mod activator;
pub mod by_target;
mod compact_store;
pub mod competitors;
mod events;
pub mod history;
pub mod leadership;
pub(crate) mod observe;
pub mod pacing;
pub mod pod_cache;
pub mod query_budget;
pub(crate) mod report;
pub(crate) mod state;
pub mod target;
pub mod target_cache;
pub mod victims;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use llmscaler_api::names::FIELD_MANAGER;
use llmscaler_api::{LLMScaler, apply_defaults};

use crate::engine::capacity::CapacityInput;
use crate::engine::clock::{Clock, SystemClock};
use crate::engine::conditions;
use crate::metrics::MetricError;
use crate::metrics::MetricsClient;
use crate::release::ReleaseError;
use crate::step;
use crate::step::Scaler;
use crate::telemetry::Metrics;
use leadership::{Leadership, NotLeader};
use llmscaler_api::LLMScalerSpec;
use observe::{Observation, Observed};
use report::StatusError;
use state::{ScalerKey, States};
use target::Resolver;

/// The finalizer the operator puts on every LLMScaler it syncs, so that a deleted scaler hands
/// its target back before it goes (also when it was deleted while the operator was down).
pub const FINALIZER: &str = "autoscaling.modelsphere.dev/cleanup";

/// What a reconcile can fail with (it then retries after `retryPeriodSeconds`).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Writing the LLMScaler status failed.
    #[error("writing status of {scaler}: {source}")]
    Status {
        /// `namespace/name`.
        scaler: String,
        /// Why.
        #[source]
        source: StatusError,
    },
    /// Handing the target back after a delete failed (retried).
    #[error("cleaning up after {scaler} was deleted: {source}")]
    Cleanup {
        /// `namespace/name`.
        scaler: String,
        /// Why.
        #[source]
        source: ReleaseError,
    },
    /// Adding or removing the finalizer failed.
    #[error("finalizer of {scaler}: {source}")]
    Finalizer {
        /// `namespace/name`.
        scaler: String,
        /// Why.
        #[source]
        source: Box<finalizer::Error<ControllerError>>,
    },
    /// This replica does not lead (any more).
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
}

impl ControllerError {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ControllerError::Status { .. } => "status_write",
            ControllerError::Cleanup { .. } => "cleanup",
            ControllerError::Finalizer { .. } => "finalizer",
            ControllerError::NotLeader(_) => "not_leader",
        }
    }
}

/// One sync of one scaler: what every stage takes instead of positional arguments.
pub(crate) struct SyncContext<'a> {
    /// The term's shared state.
    pub ctx: &'a Context,
    /// The scaler as the watch delivered it (spec not defaulted).
    pub scaler: &'a LLMScaler,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The time of the sync, Unix milliseconds (read once).
    pub now_ms: i64,
}

/// The default of [`Context::max_concurrent_syncs`] (`--max-concurrent-syncs`).
pub const DEFAULT_MAX_CONCURRENT_SYNCS: u16 = 32;

/// Shared state of every reconcile of one leadership term.
pub struct Context {
    /// API client (the operator's ServiceAccount or kubeconfig).
    pub client: kube::Client,
    /// The one HTTP client of every metric source.
    pub metrics_client: MetricsClient,
    /// Discovery cache of target kinds.
    pub resolver: Resolver,
    /// Watch caches of the targets (no request per steady sync).
    pub targets: target_cache::TargetCache,
    /// Watch caches of the targets' pods, per namespace, started by the first per-pod metric
    /// (docs/signals.md#ready-pods).
    pub pods: pod_cache::PodCache,
    /// Publishes Events on LLMScalers.
    pub recorder: Recorder,
    /// The operator's own metrics.
    pub telemetry: Arc<Metrics>,
    /// The time source, read once per sync.
    pub clock: Arc<dyn Clock>,
    /// How far, milliseconds, [`Context::clock`] runs ahead of the clock of the process that led
    /// before this term (estimated from the Lease, [`crate::lease::clock_ahead_ms`]; 0 when
    /// unknown): times that process wrote in status are moved this much later when restored.
    pub previous_leader_behind_ms: i64,
    /// Whether this process may write; checked right before every write.
    pub leadership: Leadership,
    /// How long to wait for pod-deletion-cost marks to become visible before a scale-down.
    pub mark_deadline: Duration,
    /// The activator, when the operator runs with `--activator`
    /// (docs/scaling.md#holding-requests-while-waking-from-zero).
    pub activator: Option<Arc<activator::ActivatorLink>>,
    /// The operator policy (`docs/security.md`) specs are re-checked against every sync; the
    /// default (no allow-list, no cap) until the caller sets the flags' policy.
    pub policy: llmscaler_api::OperatorPolicy,
    /// At most this many syncs run at once (0: no bound); the rest wait, and their wait shows
    /// as evaluation lag.
    pub max_concurrent_syncs: u16,
    /// The per-namespace query budget (`--namespace-query-budget`); `None`: no budget.
    pub query_budget: Option<Arc<query_budget::QueryBudget>>,
    /// Per-scaler memory.
    pub(crate) states: States,
    /// The LLMScalers the controller watches (another scaler on the same target competes).
    pub scalers: Store<LLMScaler>,
    /// [`Context::scalers`] by target, for the competitor check.
    pub scalers_by_target: by_target::ByTarget<LLMScaler>,
    /// Feeds [`Context::scalers`]; taken by [`run`].
    scaler_writer: std::sync::Mutex<Option<reflector::store::Writer<LLMScaler>>>,
    /// HorizontalPodAutoscalers, cached by one watch (competing autoscalers).
    pub hpas: Store<HorizontalPodAutoscaler>,
    /// [`Context::hpas`] by target, for the competitor check.
    pub hpas_by_target: Arc<by_target::ByTarget<HorizontalPodAutoscaler>>,
    /// Feeds [`Context::hpas`]; taken by [`run`].
    hpa_writer: std::sync::Mutex<Option<reflector::store::Writer<HorizontalPodAutoscaler>>>,
}

impl Context {
    /// A context on `client` for one leadership term, reporting Events as `llmscaler` /
    /// `instance`, on the wall clock, caching targets of `watch_namespace` (every namespace when
    /// `None`).
    pub fn new(
        client: kube::Client,
        metrics_client: MetricsClient,
        telemetry: Arc<Metrics>,
        (instance, watch_namespace): (Option<String>, Option<String>),
        leadership: Leadership,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance,
        };
        let targets_client = client.clone();
        let (hpas, hpa_writer) = reflector::store();
        let (scalers, scaler_writer) = reflector::store();
        Self {
            scalers,
            scaler_writer: std::sync::Mutex::new(Some(scaler_writer)),
            scalers_by_target: by_target::ByTarget::default(),
            hpas,
            hpas_by_target: Arc::default(),
            hpa_writer: std::sync::Mutex::new(Some(hpa_writer)),
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics_client,
            resolver: Resolver::default(),
            targets: target_cache::TargetCache::new(targets_client.clone(), watch_namespace),
            pods: pod_cache::PodCache::new(targets_client),
            telemetry,
            clock: Arc::new(SystemClock),
            previous_leader_behind_ms: 0,
            leadership,
            mark_deadline: Duration::from_secs(5),
            activator: None,
            policy: llmscaler_api::OperatorPolicy::default(),
            max_concurrent_syncs: DEFAULT_MAX_CONCURRENT_SYNCS,
            query_budget: None,
            states: States::default(),
        }
    }

    /// Forgets a deleted scaler: its memory and its metric series.
    fn forget(&self, key: &ScalerKey) {
        self.states.evict(key);
        let removed = self.telemetry.forget(&key.0, &key.1);
        tracing::debug!(namespace = %key.0, name = %key.1, series = removed, "scaler deleted: state evicted");
    }
}

/// Runs the controller on every LLMScaler of `namespace` (all namespaces when `None`) until
/// `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<LLMScaler> = match &namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let hpa_cache = watch_hpas(&ctx, namespace.as_deref());
    let Some(writer) = ctx
        .scaler_writer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    else {
        tracing::error!("a controller context runs once");
        return;
    };
    let reader = ctx.scalers.clone();
    let evictions = ctx.clone();
    let store = reader.clone();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(without_managed_fields)
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                evictions.scalers_by_target.observe(&store, event);
            }
            evict_deleted(&evictions, &store, event);
        })
        .applied_objects()
        .predicate_filter(spec_or_pause, Default::default());
    let config = kube::runtime::controller::Config::default().concurrency(ctx.max_concurrent_syncs);
    let woken = woken_scalers(&ctx, ctx.scalers.clone());
    Controller::for_stream(stream, reader)
        .with_config(config)
        .reconcile_on(woken)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "reconcile failed");
            }
        })
        .await;
    if let Some(task) = hpa_cache {
        task.abort();
    }
}

/// The scalers to sync at once because the activator holds a request for their Service
/// (docs/scaling.md#holding-requests-while-waking-from-zero); an empty stream without an
/// activator.
fn woken_scalers(
    ctx: &Context,
    store: Store<LLMScaler>,
) -> futures::stream::BoxStream<'static, ObjectRef<LLMScaler>> {
    let Some(link) = ctx.activator.clone() else {
        return futures::stream::empty().boxed();
    };
    let rx = link.subscribe();
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(key) => return Some((key, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .flat_map(move |(namespace, service)| {
        let refs: Vec<ObjectRef<LLMScaler>> = store
            .state()
            .iter()
            .filter(|s| {
                s.namespace().as_deref() == Some(namespace.as_str())
                    && s.spec
                        .scale_to_zero
                        .as_ref()
                        .is_some_and(|z| z.holds() && z.service.as_deref() == Some(&service))
            })
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
    .boxed()
}

/// Starts the one watch that fills [`Context::hpas`] (every namespace, or `namespace`). A watch
/// the operator may not run (no RBAC) only logs: competing autoscalers then go unseen.
fn watch_hpas(ctx: &Context, namespace: Option<&str>) -> Option<tokio::task::JoinHandle<()>> {
    let writer = ctx
        .hpa_writer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()?;
    let api: Api<HorizontalPodAutoscaler> = match namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(cached_hpa)
        .reflect(writer);
    let (index, store) = (ctx.hpas_by_target.clone(), ctx.hpas.clone());
    Some(tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => index.observe(&store, &event),
                Err(err) => {
                    tracing::warn!(error = %err, "watching HorizontalPodAutoscalers failed; competing autoscalers go unseen until it recovers");
                }
            }
        }
    }))
}

/// Drops from a cached object what no sync reads from a scaler or an HPA (memory per scaler,
/// issue 14): `metadata.managedFields` (often the larger part of a small object) and the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation (a copy of the whole manifest
/// after a client-side `kubectl apply`). Other annotations stay (the pause annotation is read).
fn without_managed_fields<K: kube::Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// The `kubectl apply` annotation holding the last applied manifest.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// [`without_managed_fields`], and for an HPA also everything but its `scaleTargetRef`: the
/// competitor check ([`competitors`]) reads only that, the name, namespace and owner
/// references; `status` (current metrics, conditions with messages) and `spec.metrics` go.
fn cached_hpa(hpa: &mut HorizontalPodAutoscaler) {
    without_managed_fields(hpa);
    hpa.status = None;
    hpa.metadata.labels = None;
    hpa.metadata.annotations = None;
    if let Some(spec) = hpa.spec.as_mut() {
        spec.metrics = None;
        spec.behavior = None;
    }
}

/// What re-triggers a sync besides the requeue: a new `metadata.generation` (a spec change), a
/// change of the pause annotation, of the finalizers or a delete; the operator's own status
/// writes do not.
fn spec_or_pause(scaler: &LLMScaler) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    predicates::generation(scaler).hash(&mut hasher);
    scaler.finalizers().hash(&mut hasher);
    scaler
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    scaler
        .annotations()
        .get(llmscaler_api::names::PAUSED_ANNOTATION)
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// Evicts the state of a deleted scaler, and after a re-list of every scaler no longer listed.
fn evict_deleted(
    ctx: &Context,
    store: &Store<LLMScaler>,
    event: &Result<watcher::Event<LLMScaler>, watcher::Error>,
) {
    match event {
        Ok(watcher::Event::Delete(scaler)) => {
            ctx.forget(&(scaler.namespace().unwrap_or_default(), scaler.name_any()));
        }
        Ok(watcher::Event::InitDone) => {
            let gone = ctx
                .states
                .retain(|(ns, name)| store.get(&ObjectRef::new(name).within(ns)).is_some());
            for key in gone {
                ctx.forget(&key);
            }
        }
        _ => {}
    }
}

fn error_policy(scaler: Arc<LLMScaler>, err: &ControllerError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(namespace = %scaler.namespace().unwrap_or_default(), name = %scaler.name_any(), error = %err, kind = err.metric_label(), "sync failed");
    Action::requeue(seconds(scaler.spec.effective_retry_period_seconds()))
}

/// A period in seconds (at least 1) as milliseconds.
fn period_ms(s: i32) -> i64 {
    i64::from(s.max(1)) * 1000
}

fn seconds(s: i32) -> Duration {
    Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1))
}

/// One reconcile of one LLMScaler: under the [`FINALIZER`], a sync, or the clean-up of a
/// deleted scaler.
async fn reconcile(scaler: Arc<LLMScaler>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let namespace = scaler.namespace().unwrap_or_default();
    let who = format!("{namespace}/{}", scaler.name_any());
    let api: Api<LLMScaler> = Api::namespaced(ctx.client.clone(), &namespace);
    // The finalizer helper patches the scaler: a write like any other.
    ctx.leadership.check()?;
    finalizer(&api, FINALIZER, scaler, |event| async {
        match event {
            finalizer::Event::Apply(scaler) => sync(scaler, ctx.clone()).await,
            finalizer::Event::Cleanup(scaler) => cleanup(scaler, ctx.clone()).await,
        }
    })
    .await
    .map_err(|source| ControllerError::Finalizer {
        scaler: who,
        source: Box::new(source),
    })
}

/// A deleted scaler hands its target back as `llmscaler release` does: drained pods back in
/// rotation, the operator's pod marks cleared, its ownership of `spec.replicas` dropped (the
/// value stays). A target already gone has nothing to hand back.
async fn cleanup(scaler: Arc<LLMScaler>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let key = (scaler.namespace().unwrap_or_default(), scaler.name_any());
    ctx.leadership.check()?;
    match crate::release::release(&ctx.client, &scaler.spec.target_ref, &key.0, true).await {
        Ok(released) => {
            tracing::info!(namespace = %key.0, name = %key.1, returned = ?released.pods_returned, cleared = ?released.pods_cleared, dropped_replicas = released.dropped_replicas, "scaler deleted: target handed back");
        }
        Err(ReleaseError::Resolve(err)) if err.is_not_found() => {}
        Err(ReleaseError::Api {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 404 => {}
        Err(source) => {
            return Err(ControllerError::Cleanup {
                scaler: format!("{}/{}", key.0, key.1),
                source,
            });
        }
    }
    ctx.forget(&key);
    Ok(Action::await_change())
}

/// One sync of one LLMScaler: observe → step → act → report.
async fn sync(scaler: Arc<LLMScaler>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let timer = std::time::Instant::now();
    let now_ms = ctx.clock.now().as_millisecond();
    let (namespace, name) = (scaler.namespace().unwrap_or_default(), scaler.name_any());
    let key = (namespace.clone(), name.clone());
    let sync = SyncContext {
        ctx: &ctx,
        scaler: &scaler,
        namespace: &namespace,
        name: &name,
        now_ms,
    };
    let mut spec = scaler.spec.clone();
    apply_defaults(&mut spec);
    let mut state = ctx.states.take(&key, scaler.metadata.uid.as_deref());
    if let Some(lag) = state
        .due_ms
        .and_then(|due| pacing::lag_seconds(due, now_ms))
    {
        ctx.telemetry.evaluation_lag.observe(lag);
    }
    let step = state.scaler.get_or_insert_with(|| {
        Scaler::new(&spec, scaler.status.as_ref())
            .status_written_behind_by(ctx.previous_leader_behind_ms)
    });
    step.respec(&spec);
    let custom = match spec.effective_provider() {
        llmscaler_api::MetricProvider::Custom => true,
        llmscaler_api::MetricProvider::Prometheus => false,
    };
    if custom
        && spec
            .scale_down
            .as_ref()
            .is_some_and(|s| s.deletion_cost_query.is_some())
        && !std::mem::replace(&mut state.warned_cost_query, true)
    {
        tracing::info!(
            namespace,
            name,
            "deletionCostQuery is ignored under the Custom provider; newest pods go first"
        );
    }
    let Some(step) = state.scaler.as_mut() else {
        return Ok(Action::await_change());
    };
    let (reported, due_ms) = sync_once(&sync, step).await;
    state.due_ms = Some(due_ms);
    ctx.states.put(key.clone(), state);
    if let Err(source) = reported {
        if matches!(&source, StatusError::Api(kube::Error::Api(s)) if s.code == 404) {
            // Deleted while syncing: nothing to report to.
            ctx.forget(&key);
            return Ok(Action::await_change());
        }
        return Err(ControllerError::Status {
            scaler: format!("{namespace}/{name}"),
            source,
        });
    }
    ctx.telemetry
        .reconcile_duration
        .observe(timer.elapsed().as_secs_f64());
    let wait_ms = due_ms
        .saturating_sub(ctx.clock.now().as_millisecond())
        .max(0);
    Ok(Action::requeue(Duration::from_millis(
        u64::try_from(wait_ms).unwrap_or(0),
    )))
}

/// Observes, steps, acts and reports once each. Returns whether the status was written and
/// when to sync again (milliseconds since the epoch): after `retryPeriodSeconds` when the sync
/// failed, else at the scaler's next due time ([`pacing::next_due_ms`]).
async fn sync_once(sync: &SyncContext<'_>, step: &mut Scaler) -> (Result<(), StatusError>, i64) {
    let spec = step.spec().clone();
    let retry = sync
        .now_ms
        .saturating_add(period_ms(spec.effective_retry_period_seconds()));
    if let Some(wait_ms) = query_budget::delay(sync, &spec) {
        let message = query_budget::delayed_message(
            sync.namespace,
            sync.ctx
                .query_budget
                .as_ref()
                .map_or(0.0, |b| b.per_second()),
            query_budget::queries_per_sync(&spec),
        );
        let conditions = conditions::query_budget_exceeded(&message);
        return (
            report::failed(sync, conditions).await,
            sync.now_ms.saturating_add(wait_ms),
        );
    }
    let failed = match observe::observe(sync, step).await {
        Observation::Invalid(violations) => {
            let message = violations
                .0
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            conditions::invalid_spec(&message)
        }
        Observation::TargetFailed(err) => {
            conditions::target_failed(err.is_not_found(), &err.to_string())
        }
        Observation::SourceFailed(err) => conditions::source_failed(&err.to_string()),
        Observation::Observed(observed) => {
            let mut input = step_input(&observed, sync, &spec);
            input.activator = observe_activator(sync, &spec).await;
            let plan = step.step(&input);
            let write = act::carry_out(sync, &spec, &observed.resource, &plan).await;
            let reported = report::report(sync, &spec, &observed, &plan, write).await;
            let period = period_ms(spec.effective_sync_period_seconds());
            let phase = pacing::phase_ms(sync.namespace, sync.name, period);
            return (reported, pacing::next_due_ms(sync.now_ms, period, phase));
        }
    };
    (report::failed(sync, failed).await, retry)
}

/// The activator's view for the step, when the operator has an activator and the scaler holds
/// requests; a failure is logged and leaves the route as it is (`None`).
async fn observe_activator(
    sync: &SyncContext<'_>,
    spec: &LLMScalerSpec,
) -> Option<step::ActivatorView> {
    let link = sync.ctx.activator.as_ref()?;
    match link.observe(&sync.ctx.client, sync.namespace, spec).await {
        Ok(view) => view,
        Err(err) => {
            tracing::warn!(namespace = sync.namespace, name = sync.name, error = %err, "cannot read the activator; the route stays as it is");
            None
        }
    }
}

/// The step's input from what `observe` read, borrowing the typed errors.
fn step_input<'a>(
    observed: &'a Observed,
    sync: &SyncContext<'a>,
    spec: &LLMScalerSpec,
) -> step::Observation<'a, &'a MetricError> {
    step::Observation {
        now_ms: sync.now_ms,
        target: target_view(&observed.target),
        signal: observed.readings.signal(spec),
        capacity: observed
            .capacity
            .as_ref()
            .map(|(arrival, backlog)| CapacityInput {
                arrival: arrival.as_ref().copied(),
                backlog: backlog.as_ref().map(|b| b.as_ref().copied()),
            }),
        objective: observed
            .objective
            .as_ref()
            .map(|values| values.iter().map(|v| v.as_ref().copied()).collect()),
        activation: observed.activation.as_ref().map(|a| a.as_ref().copied()),
        pods: observed.pods.clone(),
        in_flight: observed
            .in_flight
            .as_ref()
            .map(Result::as_ref)
            .map(|r| r.cloned()),
        deletion_costs: observed
            .deletion_costs
            .as_ref()
            .map(Result::as_ref)
            .map(|r| r.cloned()),
        acting: step::Acting::of(sync.scaler, spec),
        competitor: observed.competitor.clone(),
        status: sync.scaler.status.as_ref(),
        activator: None,
    }
}

/// The step's view of the target.
pub(crate) fn target_view(target: &target::TargetState) -> step::Target {
    let spec = target.object.data.get("spec");
    // The pod template's hash and `--max-num-seqs`: a cached target keeps only these
    // (target_cache::prune), an object read whole has the template itself.
    let (template, max_num_seqs) = match spec.and_then(|s| s.get("template")) {
        Some(serde_json::Value::String(hash)) => (
            Some(hash.clone()),
            spec.and_then(|s| s.get(target_cache::PRUNED_MAX_NUM_SEQS))
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        ),
        Some(t) => (
            Some(step::objective::template_hash(t)),
            step::engine_args::max_num_seqs(t),
        ),
        None => (None, None),
    };
    step::Target {
        spec_replicas: target.spec_replicas,
        ready_replicas: target.ready_replicas,
        rollout_in_progress: target.rollout_in_progress,
        is_deployment: target.is_deployment,
        owns_replicas: target.owns_replicas,
        other_replicas_managers: target.other_replicas_managers.clone(),
        template,
        max_num_seqs,
    }
}
