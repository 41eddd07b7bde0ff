//! The controller: every `syncPeriodSeconds`, read each LLMScaler's target and metrics, decide
//! with the engine, and write (spec §2, §5–7).
//!
//! Pacing is a per-scaler requeue; the watch on LLMScalers is filtered by `metadata.generation`
//! so the operator's own status writes do not re-trigger a sync.

pub mod names;
pub mod status;
pub mod target;
pub mod victims;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use kube::{Resource, ResourceExt};
use llmscaler_api::{
    LLMScaler, LLMScalerSpec, LLMScalerStatus, MetricProvider, ScaleDownBehavior, apply_defaults,
    validate_spec,
};

use crate::engine::{self, Action as ScaleAction, Decision, Limit, Policy, Reason};
use crate::metrics::{MetricSource, MetricsClient, Readings};
use crate::telemetry::{ErrorLabels, MetricLabels, Metrics, ScalerLabels};
use names::{condition, reason};
use status::{
    ConditionSpec, history_from_status, history_to_persist, merge_conditions, refresh_interval_ms,
};
use target::{Resolver, TargetError, TargetState};

/// Source of the current time, injectable so windows are testable without sleeping.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// What a reconcile can fail with (it then retries after `retryPeriodSeconds`).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Writing the LLMScaler status failed.
    #[error("writing status of {0}: {1}")]
    Status(String, #[source] kube::Error),
}

impl ControllerError {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ControllerError::Status(..) => "status_write",
        }
    }
}

/// In-memory, per-scaler facts that need not survive a restart.
#[derive(Default, Debug)]
struct Memory {
    /// When `spec.replicas` was last re-asserted against another manager, ms.
    last_reassert_ms: Option<i64>,
    /// When the latest contest was seen, ms.
    last_contest_ms: Option<i64>,
    /// `deletionCostQuery` under Custom was logged once.
    warned_cost_query: bool,
    /// The stabilization history while this process leads (status holds a copy refreshed at
    /// least every [`refresh_interval_ms`]).
    history: Option<engine::History>,
}

/// Shared state of every reconcile.
pub struct Context {
    /// API client (the operator's ServiceAccount or kubeconfig).
    pub client: kube::Client,
    /// The one HTTP client of every metric source.
    pub metrics_client: MetricsClient,
    /// Discovery cache of target kinds.
    pub resolver: Resolver,
    /// Publishes Events on LLMScalers.
    pub recorder: Recorder,
    /// The operator's own metrics.
    pub telemetry: Arc<Metrics>,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// How long to wait for pod-deletion-cost marks to become visible before a scale-down.
    pub mark_deadline: Duration,
    memory: Mutex<HashMap<(String, String), Memory>>,
}

impl Context {
    /// A context on `client`, reporting Events as `llmscaler` / `instance`.
    pub fn new(
        client: kube::Client,
        metrics_client: MetricsClient,
        telemetry: Arc<Metrics>,
        instance: Option<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: names::FIELD_MANAGER.to_string(),
            instance,
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics_client,
            resolver: Resolver::default(),
            telemetry,
            clock: Arc::new(SystemClock),
            mark_deadline: Duration::from_secs(5),
            memory: Mutex::new(HashMap::new()),
        }
    }

    fn with_memory<T>(&self, key: &(String, String), f: impl FnOnce(&mut Memory) -> T) -> T {
        let mut map = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(map.entry(key.clone()).or_default())
    }
}

/// Runs the controller on every LLMScaler of `namespace` (all namespaces when `None`) until
/// `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // A new leadership term starts from what status says, not from an older term's memory.
    ctx.memory
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clear();
    let api: Api<LLMScaler> = match &namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    Controller::for_stream(stream, reader)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(error = %err, "reconcile failed");
            }
        })
        .await;
}

fn error_policy(scaler: Arc<LLMScaler>, err: &ControllerError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(scaler = %scaler.name_any(), error = %err, kind = err.metric_label(), "sync failed");
    Action::requeue(seconds(scaler.spec.effective_retry_period_seconds()))
}

fn seconds(s: i32) -> Duration {
    Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1))
}

/// Everything one sync found, for status, conditions and events.
struct Outcome {
    current_replicas: Option<i32>,
    desired_replicas: Option<i32>,
    wrote_replicas: Option<(i32, i32)>,
    conditions: Vec<ConditionSpec>,
    /// The stabilization history and its refresh interval (ms), when a window is set.
    history: Option<(engine::History, i64)>,
    requeue: Duration,
}

/// One sync of one LLMScaler.
async fn reconcile(scaler: Arc<LLMScaler>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let timer = std::time::Instant::now();
    let namespace = scaler.namespace().unwrap_or_default();
    let name = scaler.name_any();
    let mut spec = scaler.spec.clone();
    apply_defaults(&mut spec);

    let outcome = sync(&scaler, &spec, &namespace, &name, &ctx).await;

    let now = ctx.clock.now();
    let previous = scaler.status.clone().unwrap_or_default();
    let (conditions, flipped) = merge_conditions(
        previous.conditions.as_deref().unwrap_or_default(),
        &outcome.conditions,
        scaler.metadata.generation,
        now,
    );
    let status = LLMScalerStatus {
        current_replicas: outcome.current_replicas.or(previous.current_replicas),
        desired_replicas: outcome.desired_replicas.or(previous.desired_replicas),
        observed_generation: scaler.metadata.generation,
        last_scale_time: if outcome.wrote_replicas.is_some_and(|(from, to)| from != to) {
            Some(Time(now))
        } else {
            previous.last_scale_time.clone()
        },
        recommendations: match &outcome.history {
            Some((history, refresh_ms)) => {
                history_to_persist(previous.recommendations.as_ref(), history, *refresh_ms)
            }
            None => previous.recommendations.clone(),
        },
        conditions: Some(conditions),
    };
    let api: Api<LLMScaler> = Api::namespaced(ctx.client.clone(), &namespace);
    let wrote = status::apply_status(&api, &scaler, status)
        .await
        .map_err(|e| ControllerError::Status(format!("{namespace}/{name}"), e))?;
    if wrote {
        ctx.telemetry.count_write(&namespace, &name, "status");
    }

    let reference = scaler.object_ref(&());
    for flip in flipped {
        // A condition that appears True for the first time is not news; flips and failures are.
        let was_absent = previous
            .conditions
            .as_deref()
            .unwrap_or_default()
            .iter()
            .all(|c| c.type_ != flip.type_);
        let healthy = flip.status
            != (flip.type_ == condition::SCALING_LIMITED
                || flip.type_ == condition::REPLICAS_CONTESTED);
        if was_absent && healthy {
            continue;
        }
        let event = Event {
            type_: if healthy {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: flip.reason.to_string(),
            note: Some(format!(
                "{} is now {}: {}",
                flip.type_,
                if flip.status { "True" } else { "False" },
                flip.message
            )),
            action: "Sync".to_string(),
            secondary: None,
        };
        publish(&ctx, &event, &reference).await;
    }

    ctx.telemetry
        .reconcile_duration
        .observe(timer.elapsed().as_secs_f64());
    Ok(Action::requeue(outcome.requeue))
}

async fn publish(
    ctx: &Context,
    event: &Event,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
) {
    if let Err(err) = ctx.recorder.publish(event, reference).await {
        tracing::warn!(error = %err, reason = %event.reason, "cannot publish Event");
    }
}

fn failed(conditions: Vec<ConditionSpec>, retry: Duration) -> Outcome {
    Outcome {
        current_replicas: None,
        desired_replicas: None,
        wrote_replicas: None,
        conditions,
        history: None,
        requeue: retry,
    }
}

async fn sync(
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    namespace: &str,
    name: &str,
    ctx: &Context,
) -> Outcome {
    let retry = seconds(spec.effective_retry_period_seconds());
    let sync_period = seconds(spec.effective_sync_period_seconds());

    // The webhook may have been down or bypassed: refuse to act on an invalid spec (spec §8).
    let violations = validate_spec(spec);
    if !violations.is_empty() {
        let message = violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return failed(
            vec![
                ConditionSpec::new(
                    condition::READY,
                    false,
                    reason::INVALID_SPEC,
                    message.clone(),
                ),
                ConditionSpec::new(
                    condition::SCALING_ACTIVE,
                    false,
                    reason::INVALID_SPEC,
                    message.clone(),
                ),
                ConditionSpec::new(
                    condition::ABLE_TO_SCALE,
                    false,
                    reason::INVALID_SPEC,
                    message,
                ),
            ],
            retry,
        );
    }

    let target_ref = &spec.target_ref;
    let target_not_found = |err: &TargetError| {
        let why = if err.is_not_found() {
            reason::TARGET_NOT_FOUND
        } else {
            reason::TARGET_UNREADABLE
        };
        vec![
            ConditionSpec::new(condition::READY, false, why, err.to_string()),
            ConditionSpec::new(condition::ABLE_TO_SCALE, false, why, err.to_string()),
        ]
    };
    let resource = match ctx.resolver.resolve(&ctx.client, target_ref).await {
        Ok(resource) => resource,
        Err(err) => return failed(target_not_found(&err), retry),
    };
    let state = match target::read(&ctx.client, &resource, namespace, target_ref).await {
        Ok(state) => state,
        Err(err) => {
            if err.is_not_found() {
                ctx.resolver.forget(target_ref).await;
            }
            return failed(target_not_found(&err), retry);
        }
    };

    let readings = match MetricSource::from_spec(&ctx.metrics_client, spec) {
        Ok(source) => source.read(spec).await,
        Err(err) => {
            let message = err.to_string();
            return failed(
                vec![
                    ConditionSpec::new(
                        condition::READY,
                        false,
                        reason::METRICS_UNAVAILABLE,
                        message.clone(),
                    ),
                    ConditionSpec::new(
                        condition::SCALING_ACTIVE,
                        false,
                        reason::METRICS_UNAVAILABLE,
                        message,
                    ),
                ],
                retry,
            );
        }
    };
    record_readings(ctx, spec, namespace, name, &readings);

    let now_ms = ctx.clock.now().as_millisecond();
    let policy = Policy::from_spec(spec);
    let key = memory_key(scaler);
    let sync_ms = i64::try_from(sync_period.as_millis()).unwrap_or(i64::MAX);
    let refresh_ms = refresh_interval_ms(policy.window_ms, sync_ms);
    // While leading, the history lives in memory; after a restart or a leader change it comes
    // back from status, shifted later by the refresh interval (never an early scale-down).
    let mut history = ctx
        .with_memory(&key, |m| m.history.take())
        .unwrap_or_else(|| history_from_status(scaler.status.as_ref(), refresh_ms));
    let observed = state.observation();
    let decision = engine::decide(
        &policy,
        &observed,
        &readings.signal(spec),
        &mut history,
        now_ms,
    );
    record_decision(ctx, namespace, name, &state, &decision);
    if policy.window_ms > 0 {
        ctx.with_memory(&key, |m| m.history = Some(history.clone()));
    }

    // The field was ours before when the last status says so (survives restarts).
    let claimed_before = scaler
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == condition::REPLICAS_CONTESTED
                && (c.reason == reason::OWNED || c.reason == reason::OTHER_FIELD_MANAGER)
        });
    // Contested: another manager took spec.replicas from us (an Update or a forced apply of
    // another value removes our ownership; an apply of the same value only shares it).
    let contested_by = state
        .other_replicas_managers
        .first()
        .filter(|_| claimed_before && !state.owns_replicas)
        .cloned();
    if contested_by.is_some() {
        ctx.with_memory(&key, |m| m.last_contest_ms = Some(now_ms));
    }
    let changes = decision.replicas != state.spec_replicas;
    // Claim the field on first contact, and re-assert it after a contest, at most once per sync
    // period.
    // Holding (nothing measurable) asserts nothing.
    let reassert = !state.owns_replicas
        && decision.recommendation.is_some()
        && ctx.with_memory(&key, |m| {
            let period_ms = i64::try_from(sync_period.as_millis()).unwrap_or(i64::MAX);
            let due = m.last_reassert_ms.is_none_or(|t| now_ms - t >= period_ms);
            if due {
                m.last_reassert_ms = Some(now_ms);
            }
            due
        });

    let mut conditions = Vec::new();
    let mut able = match decision.reason {
        Reason::RolloutInProgress => ConditionSpec::new(
            condition::ABLE_TO_SCALE,
            false,
            reason::ROLLOUT_IN_PROGRESS,
            "a Deployment rollout is in progress; replica changes wait for it",
        ),
        Reason::ScaleDownNotSettled => ConditionSpec::new(
            condition::ABLE_TO_SCALE,
            false,
            reason::SCALE_DOWN_NOT_SETTLED,
            format!(
                "readyReplicas {} != spec.replicas {}; the next scale-down waits for it",
                state.ready_replicas, state.spec_replicas
            ),
        ),
        _ => ConditionSpec::new(
            condition::ABLE_TO_SCALE,
            true,
            reason::READY_FOR_NEW_SCALE,
            "the target can be scaled",
        ),
    };

    let mut wrote_replicas = None;
    if changes || reassert {
        let marked = if decision.replicas < state.spec_replicas {
            mark_victims(
                ctx,
                spec,
                (namespace, name, &key),
                &state,
                decision.replicas,
            )
            .await
        } else {
            Ok(())
        };
        match marked {
            Err(message) => {
                able = ConditionSpec::new(
                    condition::ABLE_TO_SCALE,
                    false,
                    reason::DELETION_COST_FAILED,
                    message,
                );
            }
            Ok(()) => match target::apply_replicas(
                &ctx.client,
                &resource,
                namespace,
                target_ref,
                decision.replicas,
            )
            .await
            {
                Ok(_) => {
                    ctx.telemetry.count_write(namespace, name, "replicas");
                    wrote_replicas = Some((state.spec_replicas, decision.replicas));
                    replicas_event(ctx, scaler, &state, &decision, contested_by.as_deref()).await;
                }
                Err(err) => {
                    able = ConditionSpec::new(
                        condition::ABLE_TO_SCALE,
                        false,
                        reason::WRITE_FAILED,
                        err.to_string(),
                    );
                }
            },
        }
    }

    let errors = readings.errors(spec);
    let active = if decision.recommendation.is_none() {
        ConditionSpec::new(
            condition::SCALING_ACTIVE,
            false,
            reason::METRICS_UNAVAILABLE,
            format!(
                "holding at {} replicas: {}",
                state.spec_replicas,
                error_list(&errors)
            ),
        )
    } else if !errors.is_empty() {
        ConditionSpec::new(
            condition::SCALING_ACTIVE,
            true,
            reason::SOME_METRICS_SKIPPED,
            format!("skipped: {}", error_list(&errors)),
        )
    } else {
        ConditionSpec::new(
            condition::SCALING_ACTIVE,
            true,
            reason::VALID_METRICS,
            "the recommendation was computed from every metric",
        )
    };
    let ready = if active.status && able.status {
        ConditionSpec::new(
            condition::READY,
            true,
            reason::AS_EXPECTED,
            "scaling normally",
        )
    } else if !active.status {
        ConditionSpec::new(
            condition::READY,
            false,
            active.reason,
            active.message.clone(),
        )
    } else {
        ConditionSpec::new(condition::READY, false, able.reason, able.message.clone())
    };
    let limited = match decision.limited {
        Some(Limit::Min) => ConditionSpec::new(
            condition::SCALING_LIMITED,
            true,
            reason::TOO_FEW_REPLICAS,
            format!("recommendation raised to minReplicas {}", spec.min_replicas),
        ),
        Some(Limit::Max) => ConditionSpec::new(
            condition::SCALING_LIMITED,
            true,
            reason::TOO_MANY_REPLICAS,
            format!(
                "recommendation lowered to maxReplicas {}",
                spec.max_replicas
            ),
        ),
        None => ConditionSpec::new(
            condition::SCALING_LIMITED,
            false,
            reason::DESIRED_WITHIN_RANGE,
            "the recommendation is within [minReplicas, maxReplicas]",
        ),
    };
    let contested = match &contested_by {
        Some(manager) => ConditionSpec::new(
            condition::REPLICAS_CONTESTED,
            true,
            reason::OTHER_FIELD_MANAGER,
            format!(
                "field manager {manager:?} wrote spec.replicas of {} {}; llmscaler re-asserts it at most once per sync period (leave replicas out of that manager's manifest)",
                target_ref.kind, target_ref.name
            ),
        ),
        None => recent_contest(scaler, now_ms, ctx.with_memory(&key, |m| m.last_contest_ms))
            .unwrap_or_else(|| {
                if state.owns_replicas || wrote_replicas.is_some() {
                    ConditionSpec::new(
                        condition::REPLICAS_CONTESTED,
                        false,
                        reason::OWNED,
                        "llmscaler owns spec.replicas",
                    )
                } else {
                    ConditionSpec::new(
                        condition::REPLICAS_CONTESTED,
                        false,
                        reason::NOT_CLAIMED,
                        "llmscaler has not written spec.replicas yet",
                    )
                }
            }),
    };
    conditions.extend([ready, active, able, limited, contested]);

    Outcome {
        current_replicas: Some(state.ready_replicas),
        desired_replicas: Some(decision.desired),
        wrote_replicas,
        conditions,
        // Without a window nothing is kept (an earlier window's records are dropped).
        history: Some((history, refresh_ms)),
        requeue: sync_period,
    }
}

/// How long `ReplicasContested` stays True after the operator re-asserted the field, so that a
/// contest is visible in `kubectl get`/`describe` and not only for one sync.
pub const CONTEST_MEMORY: Duration = Duration::from_secs(300);

/// The previous `ReplicasContested=True` condition, kept for [`CONTEST_MEMORY`] after the latest
/// contest this process saw (or after the condition's transition, after a restart).
fn recent_contest(
    scaler: &LLMScaler,
    now_ms: i64,
    last_contest_ms: Option<i64>,
) -> Option<ConditionSpec> {
    let previous = scaler
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == condition::REPLICAS_CONTESTED && c.status == "True")?;
    let since = previous
        .last_transition_time
        .0
        .as_millisecond()
        .max(last_contest_ms.unwrap_or(i64::MIN));
    let age_ms = now_ms - since;
    let memory_ms = i64::try_from(CONTEST_MEMORY.as_millis()).unwrap_or(i64::MAX);
    (age_ms < memory_ms).then(|| {
        ConditionSpec::new(
            condition::REPLICAS_CONTESTED,
            true,
            reason::OTHER_FIELD_MANAGER,
            previous.message.clone(),
        )
    })
}

/// The in-memory key of a scaler: namespace and uid (a re-created scaler starts afresh).
fn memory_key(scaler: &LLMScaler) -> (String, String) {
    (
        scaler.namespace().unwrap_or_default(),
        scaler
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| scaler.name_any()),
    )
}

fn error_list(errors: &[(String, &crate::metrics::MetricError)]) -> String {
    errors
        .iter()
        .map(|(metric, err)| format!("{metric}: {err}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn record_readings(
    ctx: &Context,
    spec: &LLMScalerSpec,
    namespace: &str,
    name: &str,
    readings: &Readings,
) {
    let labels = |metric: String| MetricLabels {
        namespace: namespace.to_string(),
        name: name.to_string(),
        metric,
    };
    match readings {
        Readings::Metrics(values) => {
            for (i, value) in values.iter().enumerate() {
                if let Ok(v) = value {
                    let metric = spec
                        .metrics()
                        .get(i)
                        .map_or_else(|| format!("metric{i}"), |m| m.display_name(i));
                    ctx.telemetry
                        .metric_value
                        .get_or_create(&labels(metric))
                        .set(*v);
                }
            }
        }
        Readings::Decision(Ok(n)) => {
            ctx.telemetry
                .metric_value
                .get_or_create(&labels("decision".to_string()))
                .set(f64::from(*n));
        }
        Readings::Decision(Err(_)) => {}
    }
    for (metric, err) in readings.errors(spec) {
        ctx.telemetry
            .metric_errors
            .get_or_create(&ErrorLabels {
                namespace: namespace.to_string(),
                name: name.to_string(),
                metric,
                kind: err.kind().to_string(),
            })
            .inc();
    }
}

fn record_decision(
    ctx: &Context,
    namespace: &str,
    name: &str,
    state: &TargetState,
    decision: &Decision,
) {
    let labels = ScalerLabels {
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    ctx.telemetry
        .current_replicas
        .get_or_create(&labels)
        .set(i64::from(state.ready_replicas));
    ctx.telemetry
        .desired_replicas
        .get_or_create(&labels)
        .set(i64::from(decision.desired));
    if let Some(r) = decision.recommendation {
        ctx.telemetry
            .recommended_replicas
            .get_or_create(&labels)
            .set(i64::from(r));
    }
    tracing::info!(
        scaler = %format!("{namespace}/{name}"),
        ready = state.ready_replicas,
        spec = state.spec_replicas,
        desired = decision.desired,
        replicas = decision.replicas,
        action = decision.action.as_str(),
        reason = decision.reason.as_str(),
        "sync"
    );
}

/// Marks the pods a Deployment scale-down will remove (spec §5). `Err` carries the condition
/// message; the scale-down then waits for the next sync.
async fn mark_victims(
    ctx: &Context,
    spec: &LLMScalerSpec,
    (namespace, name, key): (&str, &str, &(String, String)),
    state: &TargetState,
    new_replicas: i32,
) -> Result<(), String> {
    if !state.is_deployment || spec.effective_scale_down_behavior() != ScaleDownBehavior::CacheAware
    {
        return Ok(());
    }
    let deployment = format!("{namespace}/{}", spec.target_ref.name);
    let selector = victims::selector_string(&state.object.data)
        .ok_or_else(|| victims::VictimError::NoSelector(deployment.clone()).to_string())?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let candidates = victims::candidates(&pods, &selector, &deployment)
        .await
        .map_err(|e| e.to_string())?;
    let query = spec
        .scale_down
        .as_ref()
        .and_then(|s| s.deletion_cost_query.as_deref());
    let costs = match (query, spec.effective_provider()) {
        (Some(query), MetricProvider::Prometheus) => {
            let source =
                MetricSource::from_spec(&ctx.metrics_client, spec).map_err(|e| e.to_string())?;
            match source {
                MetricSource::Prometheus(prometheus) => Some(
                    prometheus
                        .query_per_pod(query)
                        .await
                        .map_err(|e| format!("deletionCostQuery: {e}"))?,
                ),
                MetricSource::Decision(_) => None,
            }
        }
        (Some(_), MetricProvider::Custom) => {
            if ctx.with_memory(key, |m| !std::mem::replace(&mut m.warned_cost_query, true)) {
                tracing::info!(scaler = %format!("{namespace}/{name}"), "deletionCostQuery is ignored under the Custom provider; newest pods go first");
            }
            None
        }
        (None, _) => None,
    };
    let remove =
        usize::try_from(state.spec_replicas.saturating_sub(new_replicas).max(0)).unwrap_or(0);
    let plan = victims::plan(&candidates, remove, costs.as_ref());
    let patched = victims::apply_plan(&pods, &plan, &deployment, ctx.mark_deadline)
        .await
        .map_err(|e| e.to_string())?;
    for _ in 0..patched {
        ctx.telemetry.count_write(namespace, name, "deletion_cost");
    }
    tracing::info!(deployment = %deployment, victims = ?plan.victims, "marked pods for scale-down");
    Ok(())
}

async fn replicas_event(
    ctx: &Context,
    scaler: &LLMScaler,
    state: &TargetState,
    decision: &Decision,
    contested_by: Option<&str>,
) {
    let target = &scaler.spec.target_ref;
    let change = format!(
        "{} {}: {} -> {} replicas ({})",
        target.kind,
        target.name,
        state.spec_replicas,
        decision.replicas,
        decision.reason.as_str()
    );
    let (reason_text, note) = match (decision.action, contested_by) {
        (_, Some(manager)) => (
            reason::REASSERTED,
            format!(
                "{} {}: spec.replicas {} written by {manager:?} re-asserted to {}",
                target.kind, target.name, state.spec_replicas, decision.replicas
            ),
        ),
        (ScaleAction::ScaleUp, None) => (reason::SCALED_UP, change),
        (ScaleAction::ScaleDown, None) => (reason::SCALED_DOWN, change),
        // First claim of an unchanged value: no news.
        _ => return,
    };
    let event = Event {
        type_: if contested_by.is_some() {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason_text.to_string(),
        note: Some(note),
        action: "Scale".to_string(),
        secondary: None,
    };
    publish(ctx, &event, &scaler.object_ref(&())).await;
}
