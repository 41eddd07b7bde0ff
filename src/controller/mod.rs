//! The controller: every `syncPeriodSeconds`, each LLMScaler is synced as
//! observe → decide → act → report (`docs/scaling.md`):
//! - [`observe`]: re-check the spec, read the target and the metrics (reads only);
//! - [`decide`]: the engine's decision, the write to make, contest detection (pure);
//! - [`drain`]: the opt-in drain before a scale-down, across syncs;
//! - [`act`]: victim marks, `spec.replicas`, status and Events, each write checked against the
//!   [`leadership`] handle right before it;
//! - [`report`]: the new status, the Events of condition flips, the operator's metrics;
//! - [`state`]: per-scaler memory, evicted with the scaler.
//!
//! Pacing is a per-scaler requeue to the scaler's next due time ([`pacing`]: a stable phase in
//! its period, so scalers with the same period do not fire together), with at most
//! [`Context::max_concurrent_syncs`] syncs at once; the watch on LLMScalers is filtered by
//! `metadata.generation` so the operator's own status writes do not re-trigger a sync.

pub mod act;
pub mod competitors;
pub mod decide;
pub mod drain;
pub mod history;
pub mod leadership;
pub mod observe;
pub mod pacing;
pub mod pod_cache;
pub mod report;
pub mod state;
pub mod target;
pub mod target_cache;
pub mod victims;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use llmscaler_api::names::FIELD_MANAGER;
use llmscaler_api::{LLMScaler, LLMScalerSpec, apply_defaults};

use crate::engine::clock::{Clock, SystemClock};
use crate::engine::conditions::{self, WriteOutcome};
use crate::engine::startup::StartupTracker;
use crate::metrics::MetricsClient;
use crate::telemetry::Metrics;
use act::StatusError;
use decide::Acting;
use leadership::Leadership;
use observe::{CapacityReadings, Observation, Observed};
use report::Outcome;
use state::{ScalerKey, ScalerState, States};
use target::Resolver;

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
}

impl ControllerError {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ControllerError::Status { .. } => "status_write",
        }
    }
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
    /// Whether this process may write; checked right before every write.
    pub leadership: Leadership,
    /// How long to wait for pod-deletion-cost marks to become visible before a scale-down.
    pub mark_deadline: Duration,
    /// The operator policy (`docs/security.md`) specs are re-checked against every sync; the
    /// default (no allow-list, no cap) until the caller sets the flags' policy.
    pub policy: llmscaler_api::OperatorPolicy,
    /// At most this many syncs run at once (0: no bound); the rest wait, and their wait shows
    /// as evaluation lag.
    pub max_concurrent_syncs: u16,
    /// Per-scaler memory.
    pub states: States,
    /// The LLMScalers the controller watches (another scaler on the same target competes).
    pub scalers: Store<LLMScaler>,
    /// Feeds [`Context::scalers`]; taken by [`run`].
    scaler_writer: std::sync::Mutex<Option<reflector::store::Writer<LLMScaler>>>,
    /// HorizontalPodAutoscalers, cached by one watch (competing autoscalers).
    pub hpas: Store<HorizontalPodAutoscaler>,
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
            hpas,
            hpa_writer: std::sync::Mutex::new(Some(hpa_writer)),
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics_client,
            resolver: Resolver::default(),
            targets: target_cache::TargetCache::new(targets_client.clone(), watch_namespace),
            pods: pod_cache::PodCache::new(targets_client),
            telemetry,
            clock: Arc::new(SystemClock),
            leadership,
            mark_deadline: Duration::from_secs(5),
            policy: llmscaler_api::OperatorPolicy::default(),
            max_concurrent_syncs: DEFAULT_MAX_CONCURRENT_SYNCS,
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
        .inspect(move |event| evict_deleted(&evictions, &store, event))
        .applied_objects()
        .predicate_filter(spec_or_pause, Default::default());
    let config = kube::runtime::controller::Config::default().concurrency(ctx.max_concurrent_syncs);
    Controller::for_stream(stream, reader)
        .with_config(config)
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
    Some(tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Err(err) = event {
                tracing::warn!(error = %err, "watching HorizontalPodAutoscalers failed; competing autoscalers go unseen until it recovers");
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

/// What re-triggers a sync besides the requeue: a new `metadata.generation` (a spec change) or a
/// change of the pause annotation; the operator's own status writes do not.
fn spec_or_pause(scaler: &LLMScaler) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    predicates::generation(scaler).hash(&mut hasher);
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

/// One sync of one LLMScaler: observe → decide → act → report.
async fn reconcile(scaler: Arc<LLMScaler>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let timer = std::time::Instant::now();
    let now = ctx.clock.now();
    let key = (scaler.namespace().unwrap_or_default(), scaler.name_any());
    let mut spec = scaler.spec.clone();
    apply_defaults(&mut spec);

    let mut state = ctx.states.take(&key, scaler.metadata.uid.as_deref());
    if let Some(lag) = state
        .due_ms
        .and_then(|due| pacing::lag_seconds(due, now.as_millisecond()))
    {
        ctx.telemetry.evaluation_lag.observe(lag);
    }
    let (outcome, due_ms) = sync(&ctx, &scaler, &spec, &mut state, now).await;
    state.due_ms = Some(due_ms);
    ctx.states.put(key.clone(), state);

    let (status, events) = report::status(&scaler, &outcome, now);
    ctx.telemetry.set_conditions(
        &key.0,
        &key.1,
        status
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str())),
    );
    if let Err(source) = act::write_status(&ctx, &scaler, status).await {
        if matches!(&source, StatusError::Api(kube::Error::Api(s)) if s.code == 404) {
            // Deleted while syncing: nothing to report to.
            ctx.forget(&key);
            return Ok(Action::await_change());
        }
        return Err(ControllerError::Status {
            scaler: format!("{}/{}", key.0, key.1),
            source,
        });
    }
    act::publish(&ctx, &scaler, &events).await;
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

/// Observes, then decides and acts when everything needed was read. Returns what to report and
/// when to sync again (milliseconds since the epoch): after `retryPeriodSeconds` when the sync
/// failed, else at the scaler's next due time ([`pacing::next_due_ms`]).
async fn sync(
    ctx: &Context,
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    state: &mut ScalerState,
    now: Timestamp,
) -> (Outcome, i64) {
    let now_ms = now.as_millisecond();
    let retry = now_ms.saturating_add(period_ms(spec.effective_retry_period_seconds()));
    let namespace = scaler.namespace().unwrap_or_default();
    let failed = |conditions| {
        (
            Outcome {
                conditions,
                ..Outcome::default()
            },
            retry,
        )
    };
    match observe::observe(ctx, scaler, spec, &namespace).await {
        Observation::Invalid(violations) => {
            let message = violations
                .0
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            failed(conditions::invalid_spec(&message))
        }
        Observation::TargetFailed(err) => failed(conditions::target_failed(
            err.is_not_found(),
            &err.to_string(),
        )),
        Observation::SourceFailed(err) => failed(conditions::source_failed(&err.to_string())),
        Observation::Observed(observed) => {
            let period = period_ms(spec.effective_sync_period_seconds());
            let phase = pacing::phase_ms(&namespace, &scaler.name_any(), period);
            (
                decide_and_act(ctx, scaler, spec, &observed, state, now).await,
                pacing::next_due_ms(now_ms, period, phase),
            )
        }
    }
}

/// Decides on what was observed, writes `spec.replicas` when the plan says so, and derives the
/// five conditions.
async fn decide_and_act(
    ctx: &Context,
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    observed: &Observed,
    state: &mut ScalerState,
    now: Timestamp,
) -> Outcome {
    let Observed {
        target, readings, ..
    } = observed;
    let namespace = scaler.namespace().unwrap_or_default();
    let name = scaler.name_any();
    let scaler_key = (namespace.as_str(), name.as_str());
    let now_ms = now.as_millisecond();
    let sync_period_ms = i64::from(spec.effective_sync_period_seconds().max(1)) * 1000;

    report::record_readings(&ctx.telemetry, spec, scaler_key, readings);
    if let Some(activation) = &observed.activation {
        report::record_activation(&ctx.telemetry, scaler_key, activation);
    }
    let mut plan = decide::decide_with_capacity(
        scaler,
        spec,
        target,
        &readings.signal(spec),
        observed.capacity.as_ref().map(CapacityReadings::input),
        decide::wakes(spec, observed.activation.as_ref()),
        state,
        now_ms,
        sync_period_ms,
    );
    if let Some(competitor) = &observed.competitor {
        plan.hold_for(competitor.clone());
    }
    let decision = &plan.decision;
    report::record_decision(
        &ctx.telemetry,
        scaler_key,
        (target.spec_replicas, target.ready_replicas),
        decision,
    );

    let write = drain::carry_out(ctx, scaler, spec, observed, &mut plan, state, now_ms).await;
    if let Some(event) = report::advice_event(spec, target, &plan, state) {
        act::publish(ctx, scaler, &[event]).await;
    }
    let ownership = decide::ownership(&plan, scaler, target, state, &write, now_ms);
    let conditions = report::conditions(
        spec,
        (target, observed.activation.as_ref()),
        &plan,
        &write,
        &ownership,
    );
    Outcome {
        current_replicas: Some(target.ready_replicas),
        desired_replicas: Some(plan.decision.desired),
        wrote_replicas: plan
            .write
            .as_ref()
            .filter(|_| write == WriteOutcome::Wrote)
            .map(|w| (w.from, w.to)),
        conditions,
        passive_by: Some(match &plan.acting {
            Acting::Active => None,
            Acting::Passive { by, .. } => Some(by.clone()),
        }),
        active_schedules: Some(plan.active_schedules),
        history: Some(plan.history),
        draining: Some(drain::status(state)),
        startup_seconds: spec
            .startup
            .as_ref()
            .and(state.startup.as_ref())
            .and_then(StartupTracker::seconds)
            .map(|s| {
                // Seconds up to 20 × 3600 in practice; saturating either way.
                #[allow(clippy::cast_possible_truncation)]
                let whole = s.round().clamp(0.0, f64::from(i32::MAX)) as i32;
                whole
            }),
    }
}
