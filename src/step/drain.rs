//! The drain's transitions (`spec.scaleDown.drain`, docs/scale-down.md#drain), decided in the
//! step: the pods a scale-down will remove first leave the Service's rotation (their rotation
//! label set to `out`), and `spec.replicas` is lowered only once their in-flight requests reach
//! 0 or `drainSeconds` has passed; then exactly they are marked. If load comes back meanwhile,
//! or the scaler is paused, turned advisory or held for another autoscaler, they go back into
//! rotation. The wait spans syncs; a new process finds a drain again from the pods' labels.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use llmscaler_api::names::{ROTATION_IN, ROTATION_OUT, Reason};
use llmscaler_api::{DrainingStatus, LLMScalerSpec, LLMScalerStatus, MetricProvider};

use super::{Acting, Drain, Effect, Memory, Observation, Plan, Pod, Reads, ReplicasWrite, Target};
use crate::engine::conditions::{EventSpec, WriteOutcome};

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

/// What a sync must read for the drain and the marks (see [`Reads`]).
pub(super) fn reads(
    spec: &LLMScalerSpec,
    memory: &Memory,
    target: &Target,
    namespace: &str,
    now_ms: i64,
) -> Reads {
    // Under the Custom provider there is no Prometheus to read: the drain waits `drainSeconds`.
    let prometheus = match spec.effective_provider() {
        MetricProvider::Prometheus => true,
        MetricProvider::Custom => false,
    };
    let cache_aware =
        spec.effective_scale_down_behavior() == llmscaler_api::ScaleDownBehavior::CacheAware;
    let pods =
        target.is_deployment && (cache_aware || memory.drain.is_some() || !memory.drain_recovered);
    let in_flight = match (&memory.drain, spec.drain()) {
        (Some(drain), Some(config)) if prometheus && now_ms - drain.started_ms >= SETTLE_MS => {
            let query = config
                .in_flight_query
                .clone()
                .unwrap_or_else(|| default_in_flight_query(namespace, &drain.victims));
            Some((query, drain.victims.clone()))
        }
        _ => None,
    };
    let deletion_costs = spec
        .scale_down
        .as_ref()
        .and_then(|s| s.deletion_cost_query.clone())
        .filter(|_| {
            prometheus
                && cache_aware
                && target.is_deployment
                && memory.drain.is_none()
                && target.spec_replicas > 0
        });
    let activation = spec
        .activation
        .as_ref()
        .filter(|_| prometheus && target.spec_replicas == 0)
        .map(|a| a.query.clone());
    Reads {
        pods,
        in_flight,
        deletion_costs,
        activation,
    }
}

/// The status view of a drain in progress.
pub(super) fn status(drain: Option<&Drain>) -> Option<DrainingStatus> {
    drain.map(|d| DrainingStatus {
        pods: d.victims.clone(),
        since: Time(Timestamp::from_millisecond(d.started_ms).unwrap_or(Timestamp::UNIX_EPOCH)),
        in_flight: d.in_flight,
    })
}

/// The drain's part of a step: takes over a drain found from the pods' labels, then starts,
/// waits, finishes or cancels, rewriting the plan's write (docs/scale-down.md#drain).
pub(super) fn step<E: Clone + std::fmt::Display>(
    spec: &LLMScalerSpec,
    memory: &mut Memory,
    observed: &Observation<'_, E>,
    plan: &mut Plan<E>,
) {
    let target = &observed.target;
    if !target.is_deployment {
        return;
    }
    let acting = plan.acting == Acting::Active && plan.competitor.is_none();
    let enabled = spec.drain().is_some();
    let remove_now = target.spec_replicas - plan.decision.replicas;
    // Read the pods when a drain may start, is in progress, or may have been left behind.
    let look = !memory.drain_recovered
        || memory.drain.is_some()
        || (acting && enabled && target.ready_replicas <= target.spec_replicas);
    if !look {
        return;
    }
    let pods = match &observed.pods {
        Some(Ok(pods)) => pods.as_slice(),
        // Not acting, nothing is lowered either way: the next sync tries again.
        Some(Err(_)) | None if !acting => return,
        Some(Err(why)) => return failed(plan, why.clone()),
        None => return failed(plan, "the target's pods were not read".to_owned()),
    };
    if memory.drain.is_none() {
        recover(
            spec,
            memory,
            observed,
            pods,
            acting && enabled && remove_now > 0,
            plan,
        );
    }
    memory.drain_recovered = true;
    if !acting {
        return put_back(memory, pods, plan, passive_why(plan));
    }
    let Some(drain) = memory.drain.clone() else {
        if enabled && remove_now > 0 {
            start(spec, memory, observed, pods, plan);
        }
        return;
    };
    progress(spec, memory, observed, pods, drain, plan);
}

/// Pods out of rotation with no drain in memory: left by another process (restart, leader
/// change) or by a finished drain whose pods the ReplicaSet kept. Taken as the drain in
/// progress (`announce`: with a `DrainResumed` Event).
fn recover<E>(
    spec: &LLMScalerSpec,
    memory: &mut Memory,
    observed: &Observation<'_, E>,
    pods: &[Pod],
    announce: bool,
    plan: &mut Plan<E>,
) {
    let out: Vec<String> = pods
        .iter()
        .filter(|p| p.rotation.as_deref() == Some(ROTATION_OUT))
        .map(|p| p.name.clone())
        .collect();
    if out.is_empty() {
        return;
    }
    let now_ms = observed.now_ms;
    let started_ms = resumed_since(observed.status, &out, now_ms, memory.status_shift_ms);
    if announce {
        plan.effects.push(event(
            Reason::DrainResumed,
            format!(
                "pods {} found out of rotation (a drain left by an earlier leader or process), draining for {} s; lowering at the latest in {} s",
                out.join(", "),
                (now_ms - started_ms) / 1000,
                seconds_left(budget_ms(spec), now_ms - started_ms)
            ),
        ));
    }
    memory.drain = Some(Drain {
        victims: out,
        started_ms,
        in_flight: None,
    });
}

/// Why drained pods go back while the scaler does not act.
fn passive_why<E>(plan: &Plan<E>) -> String {
    match (&plan.acting, &plan.competitor) {
        (Acting::Passive { by, .. }, _) => format!("{by}: nothing is drained"),
        (Acting::Active, Some(competitor)) => {
            format!("holding for {competitor}: nothing is drained")
        }
        (Acting::Active, None) => "the drain ended".to_owned(),
    }
}

/// Puts every drained pod still running back into rotation and forgets the drain (an Event
/// `DrainCancelled` says `why`).
fn put_back<E>(memory: &mut Memory, pods: &[Pod], plan: &mut Plan<E>, why: String) {
    let Some(drain) = memory.drain.take() else {
        return;
    };
    let live = live(&drain, pods);
    if live.is_empty() {
        return;
    }
    plan.effects.push(Effect::Rotation {
        pods: live.clone(),
        value: ROTATION_IN,
    });
    plan.effects.push(event(
        Reason::DrainCancelled,
        format!("{why}: pods {} are back in rotation", live.join(", ")),
    ));
}

/// The drained pods still running.
fn live(drain: &Drain, pods: &[Pod]) -> Vec<String> {
    drain
        .victims
        .iter()
        .filter(|v| pods.iter().any(|p| &p.name == *v))
        .cloned()
        .collect()
}

/// A drain in progress at an active sync: relabels pods put back by someone else, then waits,
/// finishes, cancels, or (every pod gone) starts afresh.
fn progress<E: Clone + std::fmt::Display>(
    spec: &LLMScalerSpec,
    memory: &mut Memory,
    observed: &Observation<'_, E>,
    pods: &[Pod],
    mut drain: Drain,
    plan: &mut Plan<E>,
) {
    let target = &observed.target;
    let now_ms = observed.now_ms;
    let enabled = spec.drain().is_some();
    let wanted = plan.decision.replicas;
    let remove_now = target.spec_replicas - wanted;
    let live = live(&drain, pods);
    if enabled && remove_now > 0 {
        // Someone put a drained pod back in rotation: take it out again, and wait afresh.
        let back_in: Vec<String> = pods
            .iter()
            .filter(|p| live.contains(&p.name) && p.rotation.as_deref() != Some(ROTATION_OUT))
            .map(|p| p.name.clone())
            .collect();
        if !back_in.is_empty() {
            plan.effects.push(Effect::Rotation {
                pods: back_in,
                value: ROTATION_OUT,
            });
            drain.started_ms = now_ms;
        }
    }
    let elapsed_ms = now_ms - drain.started_ms;
    let in_flight = in_flight_of(observed, &live, elapsed_ms, enabled && remove_now > 0);
    let readings = in_flight.clone().unwrap_or_default();
    let drain_ms = budget_ms(spec);
    memory.drain = Some(drain);
    match next(enabled, &live, &readings, remove_now, elapsed_ms, drain_ms) {
        Next::Cancel => {
            let why = if enabled {
                format!("the recommendation is {wanted} again")
            } else {
                "scaleDown.drain is off".to_owned()
            };
            put_back(memory, pods, plan, why);
        }
        Next::Vanished => {
            memory.drain = None;
            start(spec, memory, observed, pods, plan);
        }
        Next::Wait => {
            let reading = wait_reading(memory, &in_flight, elapsed_ms);
            let left = seconds_left(drain_ms, elapsed_ms);
            waiting(
                spec,
                target,
                &live,
                wanted,
                plan,
                format!("{reading}; lowering at the latest in {left} s"),
            );
        }
        Next::Finish { remove, back } => {
            if !back.is_empty() {
                plan.effects.push(Effect::Rotation {
                    pods: back,
                    value: ROTATION_IN,
                });
            }
            let to = target.spec_replicas - i32::try_from(remove.len()).unwrap_or(0);
            plan.write = Some(ReplicasWrite {
                from: target.spec_replicas,
                to,
                drained: remove,
            });
            memory.drain = None;
        }
    }
}

/// The in-flight readings of the `live` drained pods this sync, when they count (`wanted`: the
/// drain still waits for them) and the EndpointSlices have settled; empty when not read.
fn in_flight_of<E: std::fmt::Display>(
    observed: &Observation<'_, E>,
    live: &[String],
    elapsed_ms: i64,
    wanted: bool,
) -> Result<BTreeMap<String, f64>, String> {
    if !wanted || elapsed_ms < SETTLE_MS || live.is_empty() {
        return Ok(BTreeMap::new());
    }
    match &observed.in_flight {
        Some(Ok(values)) => Ok(values
            .iter()
            .filter(|(pod, _)| live.contains(pod))
            .map(|(pod, v)| (pod.clone(), *v))
            .collect()),
        Some(Err(err)) => Err(err.to_string()),
        None => Ok(BTreeMap::new()),
    }
}

/// What the waiting message says of the in-flight requests; their sum goes to status.
fn wait_reading(
    memory: &mut Memory,
    in_flight: &Result<BTreeMap<String, f64>, String>,
    elapsed_ms: i64,
) -> String {
    let total = in_flight
        .as_ref()
        .ok()
        .filter(|m| !m.is_empty())
        .map(|m| m.values().sum::<f64>());
    #[allow(clippy::cast_possible_truncation)]
    let total_i = total.map(|t| t.round() as i64);
    if let Some(d) = memory.drain.as_mut() {
        d.in_flight = total_i;
    }
    match (in_flight, total) {
        (Err(err), _) => format!("in-flight requests unknown ({err})"),
        (Ok(_), Some(t)) => format!("{t} requests in flight"),
        (Ok(_), None) if elapsed_ms < SETTLE_MS => {
            "in-flight requests read once the EndpointSlices settle".to_owned()
        }
        (Ok(_), None) => "in-flight requests not read".to_owned(),
    }
}

/// Starts a drain: chooses the victims as a scale-down would, takes them out of rotation, and
/// defers the write.
fn start<E: std::fmt::Display>(
    spec: &LLMScalerSpec,
    memory: &mut Memory,
    observed: &Observation<'_, E>,
    pods: &[Pod],
    plan: &mut Plan<E>,
) {
    let target = &observed.target;
    let wanted = plan.decision.replicas;
    let remove = usize::try_from(target.spec_replicas - wanted).unwrap_or(0);
    if remove == 0 || spec.drain().is_none() {
        return;
    }
    let costs = match &observed.deletion_costs {
        Some(Ok(costs)) => Some(costs),
        Some(Err(err)) => return failed(plan, format!("deletionCostQuery: {err}")),
        None => None,
    };
    let victims = super::victims::plan(pods, remove, costs).victims;
    let seconds = spec.drain().map_or(0, |d| d.effective_drain_seconds());
    plan.effects.push(Effect::Rotation {
        pods: victims.clone(),
        value: ROTATION_OUT,
    });
    plan.effects.push(event(
        Reason::DrainStarted,
        format!(
            "pods {} out of rotation before scaling {} {} {} -> {}; lowering when their requests finish, within {seconds} s",
            victims.join(", "),
            spec.target_ref.kind,
            spec.target_ref.name,
            target.spec_replicas,
            wanted
        ),
    ));
    waiting(
        spec,
        target,
        &victims,
        wanted,
        plan,
        format!(
            "in-flight requests read once the EndpointSlices settle; lowering at the latest in {seconds} s"
        ),
    );
    memory.drain = Some(Drain {
        victims,
        started_ms: observed.now_ms,
        in_flight: None,
    });
}

/// The scale-down waits for the drained `pods`: no write; `AbleToScale` says why.
fn waiting<E>(
    spec: &LLMScalerSpec,
    target: &Target,
    pods: &[String],
    wanted: i32,
    plan: &mut Plan<E>,
    reading: String,
) {
    plan.write = None;
    plan.outcome = WriteOutcome::Draining(format!(
        "draining {} before scaling {} {} {} -> {}: {reading}",
        pods.join(", "),
        spec.target_ref.kind,
        spec.target_ref.name,
        target.spec_replicas,
        wanted,
    ));
}

/// The drain could not proceed: nothing is written this sync.
fn failed<E>(plan: &mut Plan<E>, why: String) {
    plan.write = None;
    plan.outcome = WriteOutcome::DrainFailed(why);
}

fn event(reason: Reason, note: String) -> Effect {
    Effect::Event(EventSpec {
        warning: false,
        reason,
        note,
        action: "Drain",
    })
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
/// `now_ms`. The status' time is moved `shift_ms` later first (its writer's clock ran that far
/// behind, [`super::Scaler::status_written_behind_by`]); a `since` still in the future (clock
/// skew between leaders) counts as `now_ms`.
fn resumed_since(
    status: Option<&LLMScalerStatus>,
    out: &[String],
    now_ms: i64,
    shift_ms: i64,
) -> i64 {
    status
        .and_then(|s| s.draining.as_ref())
        .filter(|d| d.pods.iter().any(|p| out.contains(p)))
        .map(|d| d.since.0.as_millisecond())
        .filter(|&ms| ms > 0)
        .map(|ms| ms.saturating_add(shift_ms).min(now_ms))
        .unwrap_or(now_ms)
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

    fn draining_since(pods: &[&str], since: &str) -> LLMScalerStatus {
        serde_json::from_value(serde_json::json!({"draining": {"pods": pods, "since": since}}))
            .expect("status")
    }

    #[test]
    fn a_resumed_drain_keeps_the_clock_of_the_status_that_lists_its_pods() {
        // 2026-12-01T20:00:00Z
        let since_ms = 1_796_155_200_000;
        let now_ms = since_ms + 42_000;
        let status = draining_since(&["a", "b"], "2026-12-01T20:00:00Z");
        assert_eq!(
            resumed_since(Some(&status), &names(&["b"]), now_ms, 0),
            since_ms
        );
        // Written by a leader whose clock ran 30 s behind this one: 30 s later here.
        assert_eq!(
            resumed_since(Some(&status), &names(&["b"]), now_ms, 30_000),
            since_ms + 30_000
        );
        // ... and never later than now.
        assert_eq!(
            resumed_since(Some(&status), &names(&["b"]), now_ms, 60_000),
            now_ms
        );
        // A status about other pods is another drain: the clock starts now.
        assert_eq!(
            resumed_since(Some(&status), &names(&["c"]), now_ms, 0),
            now_ms
        );
        // The Event's "lowering at the latest in" rounds up and stops at 0.
        assert_eq!(seconds_left(120_000, 42_000), 78);
        assert_eq!(seconds_left(120_000, 42_500), 78);
        assert_eq!(seconds_left(120_000, 130_000), 0);
        // A since in the future (a skewed clock) is not trusted.
        assert_eq!(
            resumed_since(Some(&status), &names(&["a"]), since_ms - 1, 0),
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
