//! Scale-down that drains first (`spec.scaleDown.drain`, docs/scale-down.md#drain): the pods a
//! scale-down will remove are first taken out of the Service's rotation (their
//! [`ROTATION_LABEL`] set to [`ROTATION_OUT`], so the EndpointSlices drop them), and
//! `spec.replicas` is lowered only once their in-flight requests (running + waiting, read from
//! Prometheus) reach 0 or `drainSeconds` has passed; then they are marked with
//! `pod-deletion-cost` so the ReplicaSet deletes exactly them. If load comes back meanwhile (the
//! engine no longer recommends fewer replicas), they go back into rotation instead of new pods
//! being started.
//!
//! The wait spans syncs: nothing here blocks the controller loop. The drain lives in
//! [`ScalerState::drain`]; a new process (restart, leader change) finds it again from the pods'
//! labels.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use llmscaler_api::names::{ROTATION_IN, ROTATION_LABEL, ROTATION_OUT, Reason};
use llmscaler_api::{DrainingStatus, LLMScaler, LLMScalerSpec, MetricProvider};

use super::Context;
use super::act;
use super::decide::{Acting, Plan, ReplicasWrite};
use super::observe::Observed;
use super::state::{DrainState, ScalerState};
use super::victims::{self, Candidate, VictimError};
use crate::engine::conditions::{EventSpec, WriteOutcome};
use crate::metrics::MetricSource;

/// How long after the pods leave rotation their in-flight reading is first trusted,
/// milliseconds: the EndpointSlice update, the gateway noticing it, and one Prometheus scrape
/// (docs/scale-down.md#drain).
pub const SETTLE_MS: i64 = 5_000;

/// What a drain does at a sync where one is in progress (pure, see [`next`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Keep waiting: some drained pod still has requests in flight (or was not read yet).
    Wait,
    /// Lower `spec.replicas`, removing `remove`, and put `back` into rotation (the scale-down
    /// now needs fewer pods than were drained).
    Finish {
        /// Drained pods to delete.
        remove: Vec<String>,
        /// Drained pods no longer to delete.
        back: Vec<String>,
    },
    /// Put every drained pod back into rotation: the engine no longer recommends fewer
    /// replicas, or drain was turned off.
    Cancel,
    /// Every drained pod is gone (deleted by something else): forget the drain.
    Vanished,
}

/// Decides a drain in progress (pure). `live` are the drained pods still running (not
/// terminating), `in_flight` the pods' readings (absent: not read), `remove_now` how many pods
/// the scale-down removes now (`spec.replicas - decision`; 0 or less cancels), `elapsed_ms` the
/// time since the pods left rotation and `drain_ms` the `drainSeconds` budget.
pub fn next(
    enabled: bool,
    live: &[String],
    in_flight: &BTreeMap<String, f64>,
    remove_now: i32,
    elapsed_ms: i64,
    drain_ms: i64,
) -> Next {
    if !enabled || remove_now <= 0 {
        return Next::Cancel;
    }
    if live.is_empty() {
        return Next::Vanished;
    }
    let idle = |pod: &String| in_flight.get(pod).is_some_and(|v| *v <= 0.0);
    let drained = elapsed_ms >= SETTLE_MS && live.iter().all(idle);
    if !drained && elapsed_ms < drain_ms {
        return Next::Wait;
    }
    let n = usize::try_from(remove_now).unwrap_or(0).min(live.len());
    // Keep the idlest pods as the ones to remove; the others go back.
    let mut ranked = live.to_vec();
    ranked.sort_by(|a, b| {
        let value = |p: &String| in_flight.get(p).copied().unwrap_or(f64::INFINITY);
        value(a).total_cmp(&value(b)).then(a.cmp(b))
    });
    let back = ranked.split_off(n);
    Next::Finish {
        remove: ranked,
        back,
    }
}

/// The default in-flight query for vLLM (docs/scale-down.md#drain): running + waiting requests
/// per pod of `pods` in `namespace`.
pub fn default_in_flight_query(namespace: &str, pods: &[String]) -> String {
    let names = pods
        .iter()
        .map(|p| p.replace('.', "\\\\."))
        .collect::<Vec<_>>()
        .join("|");
    let selector = format!("{{namespace=\"{namespace}\",pod=~\"{names}\"}}");
    format!(
        "sum by (pod) (vllm:num_requests_running{selector}) + sum by (pod) (vllm:num_requests_waiting{selector})"
    )
}

/// Carries out the plan under `scaleDown.drain` (or cleans up a drain left behind), then the
/// plan's own write through [`act::carry_out`]. Returns what happened to `spec.replicas`.
#[allow(clippy::too_many_arguments)]
pub async fn carry_out<E>(
    ctx: &Context,
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    observed: &Observed,
    plan: &mut Plan<E>,
    state: &mut ScalerState,
    now_ms: i64,
) -> WriteOutcome {
    let target = &observed.target;
    let acting = plan.acting == Acting::Active && plan.competitor.is_none();
    if !target.is_deployment || !acting {
        // Paused, advisory or held: nothing is written, a drain in progress stays as it is.
        return act::carry_out(ctx, scaler, spec, observed, plan, state).await;
    }
    let enabled = spec.drain().is_some();
    let namespace = scaler.namespace().unwrap_or_default();
    let name = scaler.name_any();
    let deployment = format!("{namespace}/{}", spec.target_ref.name);
    let wanted = plan.decision.replicas;
    let remove_now = target.spec_replicas - wanted;
    // Read the pods when a drain may start, is in progress, or may have been left behind.
    let look = !state.drain_recovered
        || state.drain.is_some()
        || (enabled && target.ready_replicas <= target.spec_replicas);
    if !look {
        return act::carry_out(ctx, scaler, spec, observed, plan, state).await;
    }
    let listed = match list_pods(ctx, target, &namespace, &deployment).await {
        Ok(pods) => pods,
        Err(err) => return failed(&namespace, &name, &err),
    };
    if state.drain.is_none() {
        // Pods out of rotation with no drain in memory: left by another process (restart,
        // leader change) or by a finished drain whose pods the ReplicaSet kept.
        let out: Vec<String> = listed
            .iter()
            .filter(|c| c.rotation.as_deref() == Some(ROTATION_OUT))
            .map(|c| c.name.clone())
            .collect();
        if !out.is_empty() {
            let started_ms = resumed_since(scaler, &out, now_ms);
            tracing::info!(namespace, name, pods = ?out, started_ms, "found pods out of rotation");
            if enabled && remove_now > 0 {
                publish(
                    ctx,
                    scaler,
                    Reason::DrainResumed,
                    format!(
                        "pods {} found out of rotation (a drain left by an earlier leader or process), draining for {} s; lowering at the latest in {} s",
                        out.join(", "),
                        (now_ms - started_ms) / 1000,
                        seconds_left(budget_ms(spec), now_ms - started_ms)
                    ),
                )
                .await;
            }
            state.drain = Some(DrainState {
                victims: out,
                started_ms,
                in_flight: None,
            });
        }
    }
    state.drain_recovered = true;

    let Some(drain) = state.drain.clone() else {
        if !enabled || remove_now <= 0 {
            return act::carry_out(ctx, scaler, spec, observed, plan, state).await;
        }
        return start(ctx, scaler, spec, observed, plan, state, now_ms).await;
    };
    let live: Vec<String> = drain
        .victims
        .iter()
        .filter(|v| listed.iter().any(|c| &c.name == *v))
        .cloned()
        .collect();
    let mut drain = drain;
    if enabled && remove_now > 0 {
        // Someone put a drained pod back in rotation: take it out again, and wait afresh.
        let back_in: Vec<String> = listed
            .iter()
            .filter(|c| live.contains(&c.name) && c.rotation.as_deref() != Some(ROTATION_OUT))
            .map(|c| c.name.clone())
            .collect();
        if !back_in.is_empty() {
            if let Err(err) = set_rotation(
                ctx,
                (namespace.as_str(), name.as_str()),
                &back_in,
                ROTATION_OUT,
            )
            .await
            {
                return failed(&namespace, &name, &err);
            }
            drain.started_ms = now_ms;
            if let Some(d) = state.drain.as_mut() {
                d.started_ms = now_ms;
            }
        }
    }
    let elapsed_ms = now_ms - drain.started_ms;
    let in_flight = if enabled && remove_now > 0 && elapsed_ms >= SETTLE_MS && !live.is_empty() {
        read_in_flight(ctx, spec, &namespace, &live).await
    } else {
        Ok(BTreeMap::new())
    };
    let drain_ms = budget_ms(spec);
    let readings = in_flight.as_ref().cloned().unwrap_or_default();
    match next(enabled, &live, &readings, remove_now, elapsed_ms, drain_ms) {
        Next::Cancel => {
            if let Err(err) =
                set_rotation(ctx, (namespace.as_str(), name.as_str()), &live, ROTATION_IN).await
            {
                return failed(&namespace, &name, &err);
            }
            state.drain = None;
            let why = if enabled {
                format!("the recommendation is {wanted} again")
            } else {
                "scaleDown.drain is off".to_owned()
            };
            publish(
                ctx,
                scaler,
                Reason::DrainCancelled,
                format!("{why}: pods {} are back in rotation", live.join(", ")),
            )
            .await;
            act::carry_out(ctx, scaler, spec, observed, plan, state).await
        }
        Next::Vanished => {
            state.drain = None;
            start(ctx, scaler, spec, observed, plan, state, now_ms).await
        }
        Next::Wait => {
            let total = in_flight
                .as_ref()
                .ok()
                .filter(|m| !m.is_empty())
                .map(|m| m.values().sum::<f64>());
            #[allow(clippy::cast_possible_truncation)]
            let total_i = total.map(|t| t.round() as i64);
            if let Some(d) = state.drain.as_mut() {
                d.in_flight = total_i;
            }
            plan.write = None;
            let reading = match (&in_flight, total) {
                (Err(err), _) => format!("in-flight requests unknown ({err})"),
                (Ok(_), Some(t)) => format!("{t} requests in flight"),
                (Ok(_), None) if elapsed_ms < SETTLE_MS => {
                    "in-flight requests read once the EndpointSlices settle".to_owned()
                }
                (Ok(_), None) => "in-flight requests not read".to_owned(),
            };
            WriteOutcome::Draining(format!(
                "draining {} before scaling {} {} {} -> {}: {reading}; lowering at the latest in {} s",
                live.join(", "),
                spec.target_ref.kind,
                spec.target_ref.name,
                target.spec_replicas,
                wanted,
                seconds_left(drain_ms, elapsed_ms)
            ))
        }
        Next::Finish { remove, back } => {
            if let Err(err) =
                set_rotation(ctx, (namespace.as_str(), name.as_str()), &back, ROTATION_IN).await
            {
                return failed(&namespace, &name, &err);
            }
            let to = target.spec_replicas - i32::try_from(remove.len()).unwrap_or(0);
            tracing::info!(namespace, name, removed = ?remove, back = ?back, to, "drain finished");
            plan.write = Some(ReplicasWrite {
                from: target.spec_replicas,
                to,
                scale_down: true,
                drained: remove,
            });
            state.drain = None;
            let outcome = act::carry_out(ctx, scaler, spec, observed, plan, state).await;
            if outcome != WriteOutcome::Wrote {
                // Lowering failed: the pods stay out of rotation and the next sync tries again.
                state.drain = Some(DrainState {
                    victims: plan
                        .write
                        .as_ref()
                        .map_or(drain.victims, |w| w.drained.clone()),
                    ..drain
                });
            }
            outcome
        }
    }
}

/// Starts a drain: chooses the victims as a scale-down would, takes them out of rotation, and
/// defers the write.
async fn start<E>(
    ctx: &Context,
    scaler: &LLMScaler,
    spec: &LLMScalerSpec,
    observed: &Observed,
    plan: &mut Plan<E>,
    state: &mut ScalerState,
    now_ms: i64,
) -> WriteOutcome {
    let target = &observed.target;
    let namespace = scaler.namespace().unwrap_or_default();
    let name = scaler.name_any();
    let wanted = plan.decision.replicas;
    let remove = usize::try_from(target.spec_replicas - wanted).unwrap_or(0);
    if remove == 0 || spec.drain().is_none() {
        return act::carry_out(ctx, scaler, spec, observed, plan, state).await;
    }
    let choice = match act::choose_victims(
        ctx,
        spec,
        (namespace.as_str(), name.as_str()),
        target,
        remove,
        state,
    )
    .await
    {
        Ok(choice) => choice,
        Err(err) => return failed(&namespace, &name, &err),
    };
    let victims = choice.plan.victims;
    if let Err(err) = set_rotation(
        ctx,
        (namespace.as_str(), name.as_str()),
        &victims,
        ROTATION_OUT,
    )
    .await
    {
        return failed(&namespace, &name, &err);
    }
    let seconds = spec.drain().map_or(0, |d| d.effective_drain_seconds());
    publish(
        ctx,
        scaler,
        Reason::DrainStarted,
        format!(
            "pods {} out of rotation before scaling {} {} {} -> {}; lowering when their requests finish, within {seconds} s",
            victims.join(", "),
            spec.target_ref.kind,
            spec.target_ref.name,
            target.spec_replicas,
            wanted
        ),
    )
    .await;
    let message = format!(
        "draining {} before scaling {} {} {} -> {}: in-flight requests read once the EndpointSlices settle; lowering at the latest in {seconds} s",
        victims.join(", "),
        spec.target_ref.kind,
        spec.target_ref.name,
        target.spec_replicas,
        wanted
    );
    state.drain = Some(DrainState {
        victims,
        started_ms: now_ms,
        in_flight: None,
    });
    plan.write = None;
    WriteOutcome::Draining(message)
}

/// `scaleDown.drain.drainSeconds` in milliseconds (0 without drain).
fn budget_ms(spec: &LLMScalerSpec) -> i64 {
    i64::from(spec.drain().map_or(0, |d| d.effective_drain_seconds())) * 1000
}

/// Whole seconds, rounded up, until a drain of `drain_ms` that has run `elapsed_ms` lowers
/// `spec.replicas` whatever is in flight (0 once the budget is spent).
fn seconds_left(drain_ms: i64, elapsed_ms: i64) -> i64 {
    ((drain_ms - elapsed_ms).max(0) + 999) / 1000
}

/// When a drain found from pod labels began, in Unix milliseconds: `status.draining.since`
/// when the status lists at least one of the pods `out` (the drain a previous leader or process
/// wrote; its clock continues, so `drainSeconds` bounds the drain across restarts), else
/// `now_ms`. A `since` in the future (clock skew between leaders) counts as `now_ms`.
fn resumed_since(scaler: &LLMScaler, out: &[String], now_ms: i64) -> i64 {
    scaler
        .status
        .as_ref()
        .and_then(|s| s.draining.as_ref())
        .filter(|d| d.pods.iter().any(|p| out.contains(p)))
        .map(|d| d.since.0.as_millisecond())
        .filter(|&ms| ms > 0 && ms <= now_ms)
        .unwrap_or(now_ms)
}

/// The status view of a drain in progress.
pub fn status(state: &ScalerState) -> Option<DrainingStatus> {
    state.drain.as_ref().map(|d| DrainingStatus {
        pods: d.victims.clone(),
        since: Time(Timestamp::from_millisecond(d.started_ms).unwrap_or(Timestamp::UNIX_EPOCH)),
        in_flight: d.in_flight,
    })
}

/// The Deployment's live pods (the one pod read of a drain; swap in a watch cache here).
async fn list_pods(
    ctx: &Context,
    target: &super::target::TargetState,
    namespace: &str,
    deployment: &str,
) -> Result<Vec<Candidate>, VictimError> {
    let selector = victims::selector_string(&target.object.data)
        .ok_or_else(|| VictimError::NoSelector(deployment.to_owned()))?;
    let pods = kube::Api::namespaced(ctx.client.clone(), namespace);
    victims::candidates(&pods, &selector, deployment).await
}

/// Reads the in-flight requests of `pods`: `inFlightQuery`, or the vLLM default. Under the
/// Custom provider nothing is read (the drain waits `drainSeconds`).
async fn read_in_flight(
    ctx: &Context,
    spec: &LLMScalerSpec,
    namespace: &str,
    pods: &[String],
) -> Result<BTreeMap<String, f64>, crate::metrics::MetricError> {
    if spec.effective_provider() != MetricProvider::Prometheus {
        return Ok(BTreeMap::new());
    }
    let query = spec
        .drain()
        .and_then(|d| d.in_flight_query.clone())
        .unwrap_or_else(|| default_in_flight_query(namespace, pods));
    let headers = crate::metrics::secret_headers(&ctx.client, namespace, spec).await?;
    match MetricSource::with_headers(&ctx.metrics_client, spec, &headers)? {
        MetricSource::Prometheus(prometheus) => {
            let mut values = prometheus.query_per_pod(&query).await?;
            values.retain(|pod, _| pods.contains(pod));
            Ok(values)
        }
        MetricSource::Decision(_) => Ok(BTreeMap::new()),
    }
}

async fn set_rotation(
    ctx: &Context,
    (namespace, name): (&str, &str),
    pods: &[String],
    value: &str,
) -> Result<(), VictimError> {
    if pods.is_empty() {
        return Ok(());
    }
    let api = kube::Api::namespaced(ctx.client.clone(), namespace);
    let patched = victims::set_rotation(
        &api,
        pods,
        value,
        &format!("{namespace}/{name}"),
        &ctx.leadership,
    )
    .await?;
    for _ in 0..patched {
        ctx.telemetry.count_write(namespace, name, "rotation");
    }
    tracing::info!(namespace, name, pods = ?pods, rotation = value, "set {ROTATION_LABEL}");
    Ok(())
}

fn failed(namespace: &str, name: &str, err: &VictimError) -> WriteOutcome {
    tracing::warn!(namespace, name, error = %err, "drain failed; the scale-down waits");
    WriteOutcome::DrainFailed(err.to_string())
}

async fn publish(ctx: &Context, scaler: &LLMScaler, reason: Reason, note: String) {
    let event = EventSpec {
        warning: false,
        reason,
        note,
        action: "Drain",
    };
    act::publish(ctx, scaler, &[event]).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn readings(list: &[(&str, f64)]) -> BTreeMap<String, f64> {
        list.iter().map(|(p, v)| ((*p).to_owned(), *v)).collect()
    }

    fn draining_since(pods: &[&str], since: &str) -> LLMScaler {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
            "metadata": {"name": "chat", "namespace": "ns"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                     "serverAddress": "http://p:9090", "minReplicas": 1, "maxReplicas": 5},
            "status": {"draining": {"pods": pods, "since": since}}
        }))
        .expect("scaler")
    }

    #[test]
    fn a_resumed_drain_keeps_the_clock_of_the_status_that_lists_its_pods() {
        // 2026-12-01T20:00:00Z
        let since_ms = 1_796_155_200_000;
        let now_ms = since_ms + 42_000;
        let scaler = draining_since(&["a", "b"], "2026-12-01T20:00:00Z");
        assert_eq!(resumed_since(&scaler, &names(&["b"]), now_ms), since_ms);
        // A status about other pods is another drain: the clock starts now.
        assert_eq!(resumed_since(&scaler, &names(&["c"]), now_ms), now_ms);
        // The Event's "lowering at the latest in" rounds up and stops at 0.
        assert_eq!(seconds_left(120_000, 42_000), 78);
        assert_eq!(seconds_left(120_000, 42_500), 78);
        assert_eq!(seconds_left(120_000, 130_000), 0);
        // A since in the future (a skewed clock) is not trusted.
        assert_eq!(
            resumed_since(&scaler, &names(&["a"]), since_ms - 1),
            since_ms - 1
        );
    }

    #[test]
    fn waits_until_every_drained_pod_is_idle_or_the_budget_runs_out() {
        let live = names(&["a", "b"]);
        let busy = readings(&[("a", 0.0), ("b", 3.0)]);
        assert_eq!(next(true, &live, &busy, 2, 10_000, 120_000), Next::Wait);
        // Not read (b has no series): still waiting.
        let partial = readings(&[("a", 0.0)]);
        assert_eq!(next(true, &live, &partial, 2, 10_000, 120_000), Next::Wait);
        let idle = readings(&[("a", 0.0), ("b", 0.0)]);
        assert_eq!(
            next(true, &live, &idle, 2, 10_000, 120_000),
            Next::Finish {
                remove: names(&["a", "b"]),
                back: vec![]
            }
        );
        // A zero read before the EndpointSlices settle is not trusted.
        assert_eq!(
            next(true, &live, &idle, 2, SETTLE_MS - 1, 120_000),
            Next::Wait
        );
        // The budget ends the wait whatever is in flight.
        assert_eq!(
            next(true, &live, &busy, 2, 120_000, 120_000),
            Next::Finish {
                remove: names(&["a", "b"]),
                back: vec![]
            }
        );
    }

    #[test]
    fn load_coming_back_cancels_or_returns_the_surplus() {
        let live = names(&["a", "b", "c"]);
        let idle = readings(&[("a", 0.0), ("b", 0.0), ("c", 0.0)]);
        assert_eq!(next(true, &live, &idle, 0, 60_000, 120_000), Next::Cancel);
        assert_eq!(next(true, &live, &idle, -2, 60_000, 120_000), Next::Cancel);
        assert_eq!(next(false, &live, &idle, 3, 60_000, 120_000), Next::Cancel);
        // Only one pod to remove now: the idlest goes, the others come back.
        let mixed = readings(&[("a", 2.0), ("b", 0.0), ("c", 1.0)]);
        assert_eq!(
            next(true, &live, &mixed, 1, 120_000, 120_000),
            Next::Finish {
                remove: names(&["b"]),
                back: names(&["c", "a"])
            }
        );
        assert_eq!(next(true, &[], &idle, 2, 60_000, 120_000), Next::Vanished);
    }

    #[test]
    fn the_default_query_reads_running_plus_waiting_of_the_drained_pods() {
        assert_eq!(
            default_in_flight_query("ns", &names(&["vllm-1", "vllm-2"])),
            "sum by (pod) (vllm:num_requests_running{namespace=\"ns\",pod=~\"vllm-1|vllm-2\"}) + \
             sum by (pod) (vllm:num_requests_waiting{namespace=\"ns\",pod=~\"vllm-1|vllm-2\"})"
        );
    }
}
